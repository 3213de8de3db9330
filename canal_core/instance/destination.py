"""What the embedded server serves: one destination's store, meta and batch ledger, and the parsers that
feed it (Canal's CanalInstance as CanalServerWithEmbedded sees it)."""

from __future__ import annotations

import threading
from typing import Any

from ..meta import BatchLedger, MetaManager
from ..parse.parser import EventParser
from ..protocol.identity import ClientIdentity
from ..protocol.position import LogIdentity
from ..store.ring import MemoryEventStore, StoredEvent


class Destination:
    """What the embedded server needs of one destination: its store, its meta and the source identity
    positions are labelled with. CanalInstance provides these with one parser, GroupCanalInstance with one
    parser per source; a bare Destination (a store fed by its owner) has none."""

    parser: EventParser | None = None  # the parser of a one-source instance
    parsers: list[EventParser]  # the parsers of a group instance, one per source (labels "1".."n")

    def __init__(self, name: str, store: MemoryEventStore, meta: MetaManager,
                 identity: LogIdentity | None = None) -> None:
        self.name = name
        self.store = store
        self.meta = meta
        self.ledger = BatchLedger(meta)
        self.identity = identity or LogIdentity()
        self.lock = threading.RLock()
        self.filter_listeners: list[Any] = []
        self.parsers = []

    def all_parsers(self) -> list[EventParser]:
        """Every parser feeding this destination (none, its one parser, or a group's)."""
        return self.parsers or ([self.parser] if self.parser is not None else [])

    def start(self) -> None:
        self.meta.start()

    def stop(self) -> None:
        self.meta.stop()
        self.store.close()

    # hooks for destinations that track more than the meta does (a group's per-source positions)
    def on_batch(self, client: ClientIdentity, batch_id: int, events: list[StoredEvent]) -> None:
        pass

    def on_ack(self, client: ClientIdentity, batch_id: int) -> None:
        pass

    def on_rollback(self, client: ClientIdentity) -> None:
        pass
