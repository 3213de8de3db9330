"""What lake operations report: a mirror operation's counts and resulting position, a table's Delta state."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..window import split_key

if TYPE_CHECKING:  # pragma: no cover
    pass


@dataclass(slots=True)
class MirrorResult:
    """What one mirror operation did, as a Dagster materialization reports it.

    ``position``: the mirror's txn version afterwards (the order key up to which every change is applied; None
    while the mirror has none); ``version``: the Delta table version afterwards (-1: no table)."""

    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    skipped_parts: int = 0
    version: int = -1
    position: int | None = None
    applied_parts: int = 0
    reason: str = ""
    replans: int = 0   # re-merges planned again because another writer committed meanwhile (pipelines.engine.remerge)

    def add(self, other: MirrorResult) -> None:
        self.inserted += other.inserted
        self.updated += other.updated
        self.deleted += other.deleted
        self.skipped_parts += other.skipped_parts
        self.applied_parts += other.applied_parts
        self.replans += other.replans
        self.version, self.position = other.version, other.position
        self.reason = self.reason or other.reason

    def summary(self) -> str:
        """One line for run logs: '3 inserted, 1 updated, 0 deleted, Delta version 7' (+ skipped parts, replans)."""
        text = f"{self.inserted} inserted, {self.updated} updated, {self.deleted} deleted"
        text += f", Delta version {self.version}" if self.version >= 0 else ", no table"
        if self.skipped_parts:
            text += f", {self.skipped_parts} part(s) already applied"
        if self.replans:
            text += f", planned again {self.replans} time(s)"
        return text + (f" ({self.reason})" if self.reason else "")

    def to_metadata(self) -> dict[str, Any]:
        d = asdict(self)
        d["position"] = -1 if self.position is None else self.position
        if self.position is not None:
            d["binlog_file_seq"], d["binlog_offset"] = split_key(self.position)
        return d


@dataclass(frozen=True, slots=True)
class TableState:
    exists: bool
    version: int               # Delta table version, -1 when there is no table
    position: int | None       # the txn version of the asked appId
    properties: dict[str, str]
