"""Is the server at a stored position's address the server the position was recorded on?

A stored position holds an address, a binlog file:offset, the time of the event it was recorded from (header
seconds x 1000), a server id and the executed GTIDs; Canal's JSON has room for nothing more. Servers built
alike (every private MariaDB of a CI machine has server_id 1 and binlogs mysql-bin.000001, ...) give that
file:offset a meaning on each of them, so before the locator dumps from a stored position of the same address
and server id, it reads what this server's binlog holds there (``SourceCheck``):

1. The parser reconnecting in the same process knows the event it recorded the position from
   (``Provenance``: its offsets, time and origin server id, and the server's @@server_uuid on MySQL; MariaDB
   has no uuid). That event must be there, the same in every field, and the uuid the same.
2. Otherwise the event starting at the offset: Canal's cursors (a transaction's XID/COMMIT or a DDL) record
   an event's start, so that event carries the stored time.
3. Otherwise the file is read from its start up to the offset: the parser's own positions record an event's
   end, and a position may fall inside a transaction; the event ending at the offset, the event containing
   it, or the event that began the transaction open there must carry the stored time.
4. At the file's start (offset 4) no event was recorded: the file must have been created (the time of its
   FORMAT_DESCRIPTION event) no later than the stored time.

Anything else is a ``SourceMismatchError`` naming the server, the position, what was expected and what was
found. A stored position without a time cannot be checked and is used as before (with a warning).

The existing rules run first and are unchanged: another address (standby switch) and another server id at
the same address (VIP failover to a replica) both search by time, on a server whose offsets are its own.
This check covers what those rules cannot see: the same address and server id, but other events.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from ..binlog.constants import EVENT_NAMES
from ..protocol.position import EntryPosition, LogPosition
from .start_errors import StartPositionError, format_ms

log = logging.getLogger(__name__)


class SourceMismatchError(StartPositionError):
    """The server at the stored position's address is not the server the position was recorded on.

    ``server`` is the address, ``file``/``position`` the stored position, ``expected``/``found`` what the
    position promised and what the server holds (server id, uuid where there is one, the binlog evidence).
    """

    def __init__(self, server: str, file: str, position: int, expected: str, found: str) -> None:
        self.server = server
        self.file = file
        self.position = position
        self.expected = expected
        self.found = found
        super().__init__(
            f"{server} is not the server the stored position {file}:{position} was recorded on: expected "
            f"{expected}; found {found}. No change was taken from it. If the source moved, point "
            f"canal.instance.master.address (standby.address for the standby) at its new address. If it was "
            f"replaced for good: stop the destination, remove its stored position (the client cursors in "
            f"{{canal.file.data.dir}}/<destination>/meta.dat, or <clientId>/cursor under "
            f"/otter/canal/destinations/<destination> in ZooKeeper), set "
            f"canal.instance.master.journal.name + position (or .timestamp) for the new server, rebuild the "
            f"schema history at that position (python -m canal_core.parse.history_cli rebuild) and re-sync the "
            f"tables the destination feeds (docs/parser.md, \"Source identity\")")


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """The binlog event a position was recorded from, as the parser read it."""

    file: str
    start: int
    end: int
    timestamp: int  # header seconds
    server_id: int  # header server id: the event's origin
    type_code: int


@dataclass(frozen=True, slots=True)
class Provenance:
    """What the parser knows, in memory, of the position it recorded last (Canal's JSON cannot hold it)."""

    position: LogPosition
    event: RecordedEvent
    server_uuid: str | None = None  # @@server_uuid of the server it streamed from (MySQL; None on MariaDB)


class SeenEvent(Protocol):
    """An event as the locator read it from the server (its header and where it lies)."""

    start: int | None
    end: int
    timestamp: int
    server_id: int
    type_code: int


def _event_name(type_code: int) -> str:
    return EVENT_NAMES.get(type_code, f"type-{type_code}")


def _describe(file: str, ev: SeenEvent | RecordedEvent) -> str:
    return (f"a {_event_name(ev.type_code)} event at {file}:{ev.start}..{ev.end} written "
            f"{format_ms(ev.timestamp * 1000)} by server {ev.server_id}")


class SourceCheck:
    """The judgement of one stored position against what the server answering for it holds.

    Pure: the locator reads the events and hands them in; each ``judge_*`` returns normally when the evidence
    fits and raises ``SourceMismatchError`` when it does not.
    """

    def __init__(self, server: str, stored: EntryPosition, *, server_id: int, server_uuid: str | None,
                 provenance: Provenance | None = None) -> None:
        self.server = server
        self.stored = stored
        self.server_id = server_id
        self.server_uuid = server_uuid
        self.provenance = provenance

    @property
    def possible(self) -> bool:
        """False when the position carries nothing to compare (no time, no provenance)."""
        return bool(self.stored.timestamp) or self.provenance is not None

    def _fail(self, expected: str, found: str) -> SourceMismatchError:
        ident = f"server id {self.server_id}"
        if self.server_uuid:
            ident += f" (@@server_uuid {self.server_uuid})"
        return SourceMismatchError(self.server, self.stored.journal_name, self.stored.position, expected,
                                   f"{ident}, {found}")

    def _expected_time(self) -> str:
        sid = f"server {self.stored.server_id}" if self.stored.server_id is not None else "its server"
        return f"an event written {format_ms(self.stored.timestamp or 0)} by {sid} there"

    def judge_uuid(self) -> None:
        """MySQL: the server's @@server_uuid is the one the parser streamed the position from."""
        want = self.provenance.server_uuid if self.provenance is not None else None
        if want and self.server_uuid and want != self.server_uuid:
            raise self._fail(f"@@server_uuid {want}", "another uuid")

    def judge_recorded(self, seen: SeenEvent | None) -> None:
        """Rule 1: ``seen`` is what starts at the recorded event's offset (None: no event starts there)."""
        assert self.provenance is not None
        rec = self.provenance.event
        expected = f"the event it was recorded from, {_describe(rec.file, rec)}"
        if seen is None:
            raise self._fail(expected, f"no event starting at {rec.file}:{rec.start}")
        if (seen.start, seen.end, seen.timestamp, seen.server_id, seen.type_code) != (
                rec.start, rec.end, rec.timestamp, rec.server_id, rec.type_code):
            raise self._fail(expected, _describe(rec.file, seen))

    def carries_time(self, ev: SeenEvent | None) -> bool:
        return ev is not None and ev.timestamp * 1000 == self.stored.timestamp

    def judge_around(self, at: SeenEvent | None, ending: SeenEvent | None, containing: SeenEvent | None,
                     began: SeenEvent | None) -> None:
        """Rules 2 and 3: the event starting at the offset (``at``), the one ending there, the one containing
        it, and the event that began the transaction open there; one of them must carry the stored time."""
        if any(self.carries_time(ev) for ev in (at, ending, containing, began)):
            return
        file = self.stored.journal_name
        seen = [f"{what} {_describe(file, ev)}" for what, ev in (("starting there", at), ("ending there", ending),
                                                                   ("around it", containing),
                                                                   ("opening its transaction", began))
                if ev is not None]
        raise self._fail(self._expected_time(), "; ".join(seen) if seen else "no event starts or ends there")

    def judge_file_start(self, created: int) -> None:
        """Rule 4: a position at the file's start; ``created`` is the file's FORMAT_DESCRIPTION time (s)."""
        if created * 1000 > (self.stored.timestamp or 0):
            raise self._fail(f"{self.stored.journal_name} created by {format_ms(self.stored.timestamp or 0)}",
                             f"{self.stored.journal_name} created {format_ms(created * 1000)}, later than the "
                             f"position's time")
