"""Canal's Message: what a get returns, to an embedded caller and to a TCP client alike."""

from __future__ import annotations

from typing import Any

from .proto import EntryProtocol_pb2 as ep


class Message:
    """A batch: ``batch_id`` (-1 when empty), ``raw_entries`` (serialized Entry bytes) and ``entries`` (the
    same parsed into EntryProtocol_pb2.Entry, on first access). The embedded server also hands over
    ``events``: the store's events of the batch, which carry typed rows (nothing over TCP)."""

    __slots__ = ("_entries", "batch_id", "events", "raw_entries")

    def __init__(self, batch_id: int, raw_entries: list[bytes] | None = None,
                 events: list[Any] | None = None) -> None:
        self.batch_id = batch_id
        self.raw_entries = raw_entries if raw_entries is not None else []
        self.events = events if events is not None else []
        self._entries: list[ep.Entry] | None = None

    @property
    def id(self) -> int:
        """Java's Message.getId()."""
        return self.batch_id

    @property
    def empty(self) -> bool:
        return self.batch_id == -1

    @property
    def entries(self) -> list[ep.Entry]:
        if self._entries is None:
            self._entries = [ep.Entry.FromString(raw) for raw in self.raw_entries]
        return self._entries

    def __repr__(self) -> str:
        return f"Message(batch_id={self.batch_id}, entries={len(self.raw_entries)})"
