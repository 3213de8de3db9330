"""Where a destination's parser starts dumping: Canal's start-position rules.

``StartPositionLocator.locate(stored)`` applies, in Canal's order:

1. GTID mode (``canal.instance.gtidon``): the stored position's gtid, else ``canal.instance.master.gtid``.
   A stored gtid recorded at this address by this server id is first checked like 2.
2. A stored position from the same source address: used as is, moved back to its transaction's start
   when it points inside one. When the server id at that address changed (VIP failover), or the stored
   position has only a timestamp: a timestamp search at (stored timestamp - fallbackIntervalInSeconds).
   With the same server id, the server's binlog must hold the event the position was recorded from
   (``identity.SourceCheck``), else ``SourceMismatchError``: another server built alike answers here.
3. A stored position from another source (standby switch): the same timestamp search.
4. Configured journal + position (realigned like 2).
5. Configured journal + timestamp: the first transaction at or after the time, searching from that file.
6. Configured timestamp only: the same over all binlogs (binary search on each file's first event time).
7. Nothing: the binlog's current end (SHOW MASTER STATUS / SHOW BINARY LOG STATUS).

A transaction starts at its GTID event (MariaDB GTID, MySQL GTID / anonymous GTID), else at its BEGIN
query; a DDL without a GTID is a transaction of its own. Times are Canal's: event header seconds x 1000,
compared with the requested time in ms. Every failure is a ``StartPositionError`` that says what exists
and what to do.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import struct
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache

from ..binlog import BinlogDecoder
from ..binlog import events as E
from ..binlog.constants import LOG_EVENT_ARTIFICIAL_F, EventType
from ..binlog.gtid import GtidError, MariaGtidPosition, MySQLGtidSet
from ..mysql import BinlogPositionError, ReplicationConnection
from ..protocol.position import EntryPosition, LogIdentity, LogPosition
from .identity import Provenance, SourceCheck, SourceMismatchError
from .start_errors import (
    BinlogFileNotFoundError,
    FallbackImpossibleError,
    GtidNotAvailableError,
    InvalidStartConfigError,
    PositionBeyondEndError,
    StartPositionError,
    TimestampTooOldError,
    format_ms,
)

__all__ = [
    "BinlogFileNotFoundError",
    "FallbackImpossibleError",
    "GtidNotAvailableError",
    "InvalidStartConfigError",
    "PositionBeyondEndError",
    "SourceMismatchError",
    "StartConfig",
    "StartPosition",
    "StartPositionError",
    "StartPositionLocator",
    "TimestampTooOldError",
    "format_ms",
    "same_source",
]

log = logging.getLogger(__name__)

BINLOG_START = 4
_HEADER = struct.Struct("<IBIIIH")  # timestamp, type, server id, length, log_pos (end), flags

# --- configuration and result --------------------------------------------------------------------------


def _as_bool(v: str | None) -> bool:
    return (v or "").strip().lower() in ("true", "1", "yes", "on")


def _as_int(v: str | None) -> int | None:
    v = (v or "").strip()
    return int(v) if v else None


@dataclass(frozen=True, slots=True)
class StartConfig:
    """The configured start of one source (canal.instance.master.* or canal.instance.standby.*)."""

    gtid_on: bool = False  # canal.instance.gtidon
    journal_name: str = ""  # .journal.name
    position: int | None = None  # .position
    timestamp: int | None = None  # .timestamp, ms since the epoch
    gtid: str = ""  # .gtid
    fallback_interval: int = 60  # canal.instance.fallbackIntervalInSeconds

    @classmethod
    def from_properties(cls, props: Mapping[str, str], role: str = "master") -> StartConfig:
        p = f"canal.instance.{role}."
        fb = _as_int(props.get("canal.instance.fallbackIntervalInSeconds"))
        return cls(gtid_on=_as_bool(props.get("canal.instance.gtidon")),
                   journal_name=(props.get(p + "journal.name") or "").strip(),
                   position=_as_int(props.get(p + "position")),
                   timestamp=_as_int(props.get(p + "timestamp")),
                   gtid=(props.get(p + "gtid") or "").strip(),
                   fallback_interval=60 if fb is None else fb)


@dataclass(frozen=True, slots=True)
class StartPosition:
    """Where to dump from. Unpacks as ``(position, gtid_mode)``.

    gtid_mode: dump by ``position.gtid`` (COM_BINLOG_DUMP_GTID / MariaDB slave_connect_state), else by
    journal name + position. rule: which rule chose it. realigned_from: the requested position when it
    pointed inside a transaction and was moved back to the transaction's start.
    """

    position: EntryPosition
    gtid_mode: bool
    rule: str
    realigned_from: EntryPosition | None = None

    def __iter__(self) -> Iterator[object]:
        return iter((self.position, self.gtid_mode))

    @property
    def dump_gtid(self) -> str | None:
        return self.position.gtid if self.gtid_mode else None


# --- event stream used for searching -----------------------------------------------------------------------

# what an event means for transaction boundaries
_FILE, _BODY, _START, _BEGIN, _END, _STMT = range(6)
_T = EventType
_GTID_TYPES = frozenset({_T.GTID, _T.ANONYMOUS_GTID, _T.GTID_TAGGED, _T.MARIA_GTID})
_END_TYPES = frozenset({_T.XID, _T.XA_PREPARE, _T.TRANSACTION_PAYLOAD})
_QUERY_TYPES = frozenset({_T.QUERY, _T.QUERY_COMPRESSED})
_FILE_TYPES = frozenset({_T.START_V3, _T.FORMAT_DESCRIPTION, _T.ROTATE, _T.STOP, _T.PREVIOUS_GTIDS,
                         _T.GTID_LIST, _T.BINLOG_CHECKPOINT, _T.START_ENCRYPTION, _T.HEARTBEAT,
                         _T.HEARTBEAT_V2, _T.INCIDENT})
_HEARTBEATS = frozenset({_T.HEARTBEAT, _T.HEARTBEAT_V2})
_DECODED = _GTID_TYPES | _QUERY_TYPES | {_T.FORMAT_DESCRIPTION, _T.ROTATE, _T.PREVIOUS_GTIDS, _T.GTID_LIST}
_BEGIN_RE = re.compile(r"\s*(BEGIN|START\s+TRANSACTION|XA\s+(START|BEGIN))\b", re.I)
_END_RE = re.compile(r"\s*(COMMIT|ROLLBACK)(\s+WORK)?\s*;?\s*", re.I)


def _query_kind(query: str) -> int:
    if _BEGIN_RE.match(query):
        return _BEGIN
    if _END_RE.fullmatch(query):
        return _END
    return _STMT


class _Ev:
    """One binlog event as the search sees it."""

    __slots__ = ("began", "end", "event", "file", "kind", "server_id", "start", "timestamp", "type_code")

    def __init__(self, file: str, start: int | None, end: int, type_code: int, timestamp: int, server_id: int,
                 kind: int, began: bool = False, event: E.Event | None = None) -> None:
        self.file = file
        self.start = start  # offset in file; None for artificial events
        self.end = end
        self.type_code = type_code
        self.timestamp = timestamp  # seconds
        self.server_id = server_id
        self.kind = kind
        self.began = began  # a GTID event that implies BEGIN (MariaDB, not standalone)
        self.event = event  # decoded, for GTID-bearing events

    @property
    def boundary(self) -> bool:
        """Starting here splits no transaction (Canal accepts a start at a transaction's end event)."""
        if self.kind == _END:
            return self.type_code != _T.TRANSACTION_PAYLOAD  # a payload holds the body: its GTID is the start
        return self.kind in (_FILE, _START)


class _Groups:
    """Transaction (event group) tracking over a stream that starts at a file's beginning."""

    __slots__ = ("began", "open")

    def __init__(self) -> None:
        self.open: _Ev | None = None  # the event that started the open group
        self.began = False

    def step(self, ev: _Ev) -> tuple[bool, bool]:
        """(starts a group, ends the open group once this event is complete)."""
        k = ev.kind
        if k == _START:
            return True, False
        if k == _BEGIN:
            return self.open is None, False
        if k == _END:
            return False, self.open is not None
        if k == _STMT:
            if self.open is None:
                return True, True  # a DDL / statement of its own
            return False, not self.began  # the one statement of a standalone GTID group
        return False, False

    def apply(self, ev: _Ev, starts: bool, ends: bool) -> None:
        if starts:
            self.open = ev
            self.began = ev.began or ev.kind == _BEGIN
        elif ev.kind == _BEGIN:
            self.began = True
        if ends:
            self.open = None
            self.began = False


class _GtidState:
    """Executed GTIDs up to the current event, from the file's GTID_LIST / PREVIOUS_GTIDS onwards."""

    def __init__(self) -> None:
        self.maria: MariaGtidPosition | None = None
        self.mysql: MySQLGtidSet | None = None

    def text(self) -> str:
        if self.maria is not None:
            return str(self.maria)
        if self.mysql is not None:
            return str(self.mysql)
        return ""

    def after(self, ev: _Ev) -> None:
        e = ev.event
        if e is None:
            return
        if isinstance(e, E.GtidListEvent):
            self.maria = MariaGtidPosition(e.gtid_position)
        elif isinstance(e, E.MariaGtidEvent):
            if self.maria is None:
                self.maria = MariaGtidPosition()
            self.maria.update(e.domain_id, e.server_id, e.seq_no)
        elif isinstance(e, E.PreviousGtidsEvent):
            self.mysql = MySQLGtidSet(e.gtid_set)
        elif isinstance(e, E.GtidEvent) and not e.anonymous:
            if self.mysql is None:
                self.mysql = MySQLGtidSet()
            self.mysql.add(e.sid, e.gno, e.tag or "")


@lru_cache(maxsize=256)
def _addresses(host: str) -> frozenset[str]:
    names = {host.lower()}
    try:
        for info in socket.getaddrinfo(host, None):
            names.add(str(info[4][0]))
    except (OSError, UnicodeError):
        pass
    if names & {"localhost", "127.0.0.1", "::1"}:
        names |= {"localhost", "127.0.0.1", "::1"}
    return frozenset(names)


def same_source(a: LogIdentity, b: LogIdentity) -> bool:
    """Canal's sourceAddress comparison: same port and the same host (by name or resolved address)."""
    if a.port != b.port:
        return False
    if a.address.lower() == b.address.lower():
        return True
    return bool(_addresses(a.address) & _addresses(b.address))


def _seq(name: str) -> tuple[str, int] | None:
    base, _, num = name.rpartition(".")
    return (base, int(num)) if base and num.isdigit() else None


# --- the locator --------------------------------------------------------------------------------------


class StartPositionLocator:
    """Finds the start position of one source.

    connect: returns a new ``ReplicationConnection`` to the source (connected or not); the locator opens
        one for queries and one per search dump, and closes them all before ``locate`` returns.
    source: the identity positions are recorded under (compared with the stored position's identity).
    config: the configured start for this source.
    clock: seconds since the epoch (the end position's timestamp).
    """

    def __init__(self, connect: Callable[[], ReplicationConnection], source: LogIdentity,
                 config: StartConfig | None = None, *, clock: Callable[[], float] = time.time) -> None:
        self._factory = connect
        self.source = source
        self.config = config or StartConfig()
        self._clock = clock
        self._meta: ReplicationConnection | None = None
        self._first_times: dict[str, int] = {}
        self.server = f"{source.address}:{source.port}"

    # ---- connections ----------------------------------------------------------------------------------
    def _open(self) -> ReplicationConnection:
        conn = self._factory()
        if conn.thread_id is None:
            conn.connect()
        return conn

    @property
    def meta(self) -> ReplicationConnection:
        if self._meta is None or self._meta.thread_id is None:
            self._meta = self._open()
            self.server = self._meta.server_address
        return self._meta

    def close(self) -> None:
        meta, self._meta = self._meta, None
        if meta is not None:
            meta.close()
        self._first_times.clear()

    def __enter__(self) -> StartPositionLocator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the rules -----------------------------------------------------------------------------------
    def locate(self, stored: LogPosition | None, *, provenance: Provenance | None = None) -> StartPosition:
        """``provenance``: what the parser saw when it recorded ``stored`` (used only when it belongs to it)."""
        if provenance is not None and provenance.position != stored:
            provenance = None
        try:
            start = self._locate(stored, provenance)
        finally:
            self.close()
        log.info("start position (%s): %s:%s%s%s", start.rule, start.position.journal_name,
                 start.position.position, f" gtid {start.position.gtid}" if start.gtid_mode else "",
                 f", realigned from {start.realigned_from.position}" if start.realigned_from else "")
        return start

    def _locate(self, stored: LogPosition | None, provenance: Provenance | None) -> StartPosition:
        cfg = self.config
        if cfg.gtid_on:
            if stored is not None and stored.position.gtid:
                self._check_gtid_origin(stored, provenance)
                return self._gtid_start(stored.position, "gtid-stored")
            if stored is None and cfg.gtid:
                return self._gtid_start(EntryPosition(journal_name=cfg.journal_name, position=cfg.position or 0,
                                                      timestamp=cfg.timestamp, gtid=cfg.gtid), "gtid-configured")
        if stored is not None:
            return self._from_stored(stored, provenance)
        if cfg.journal_name:
            if cfg.position is not None and cfg.position > 0:
                return self._align(EntryPosition(journal_name=cfg.journal_name, position=cfg.position,
                                                 timestamp=cfg.timestamp or None), "journal-position")
            if cfg.timestamp is not None and cfg.timestamp > 0:
                pos = self.find_by_timestamp(cfg.timestamp, from_file=cfg.journal_name)
                return StartPosition(pos, False, "journal-timestamp")
            return self._align(EntryPosition(journal_name=cfg.journal_name, position=BINLOG_START), "journal")
        if cfg.timestamp is not None and cfg.timestamp > 0:
            return StartPosition(self.find_by_timestamp(cfg.timestamp), False, "timestamp")
        end = self.end_position()
        return StartPosition(end, cfg.gtid_on and bool(end.gtid), "master-status")

    def _from_stored(self, stored: LogPosition, provenance: Provenance | None) -> StartPosition:
        sp = stored.position
        if not same_source(stored.identity, self.source):
            where = f"{stored.identity.address}:{stored.identity.port}"
            return self._fallback(sp, "source-switch", f"the stored position is from {where}, not {self.server}")
        if not sp.journal_name:
            return self._fallback(sp, "stored-timestamp", "the stored position has no journal name")
        info = self.meta.server_info()
        server_id = info.server_id
        # the parser stores the source's own @@server_id: a different one at the same address is another
        # server behind it (VIP failover), whose offsets mean nothing even where they happen to fit
        if sp.server_id is not None and sp.server_id != server_id:
            return self._fallback(sp, "server-id-changed",
                                  f"the server id at {self.server} is now {server_id}, the stored position's is "
                                  f"{sp.server_id}: another server answers at this address")
        # the same address and server id may still be another server: its binlog must hold the position's event
        check = SourceCheck(self.server, sp, server_id=server_id, server_uuid=info.server_uuid,
                            provenance=provenance)
        return self._align(sp, "stored", check)

    def _check_gtid_origin(self, stored: LogPosition, provenance: Provenance | None) -> None:
        """A stored GTID from this address and server id: its journal position must hold its event too (a
        server built alike has the same domain-server-sequence GTIDs for other transactions)."""
        sp = stored.position
        if not same_source(stored.identity, self.source) or not sp.journal_name:
            return
        info = self.meta.server_info()
        if sp.server_id is not None and sp.server_id != info.server_id:
            return  # another server took the address over: GTIDs are global, its offsets its own
        size = dict(self.binary_logs()).get(sp.journal_name)
        if size is None or sp.position > size:
            log.warning("cannot check the stored position %s:%d against %s (it has no such binlog offset); "
                        "starting from GTID %s", sp.journal_name, sp.position, self.server, sp.gtid)
            return
        check = SourceCheck(self.server, sp, server_id=info.server_id, server_uuid=info.server_uuid,
                            provenance=provenance)
        at = self._event_at(sp.journal_name, sp.position) if BINLOG_START < sp.position < size else None
        self._verify(check, sp.journal_name, max(sp.position, BINLOG_START), at)

    def _fallback(self, sp: EntryPosition, rule: str, why: str) -> StartPosition:
        if not sp.timestamp or sp.timestamp <= 0:
            raise FallbackImpossibleError(
                f"{why}, so the start must be found by time, but the stored position "
                f"{sp.journal_name or '-'}:{sp.position} carries no timestamp: configure "
                f"canal.instance.master.timestamp (or journal.name + position) and remove the stored position")
        t = sp.timestamp - self.config.fallback_interval * 1000
        log.warning("%s: searching by time from %s (stored %s - %d s)", why, format_ms(t), format_ms(sp.timestamp),
                    self.config.fallback_interval)
        return StartPosition(self.find_by_timestamp(t), False, rule)

    def _gtid_start(self, pos: EntryPosition, rule: str) -> StartPosition:
        info = self.meta.server_info()
        try:
            gtid = str(MariaGtidPosition(pos.gtid)) if info.is_mariadb else str(MySQLGtidSet(pos.gtid))
        except GtidError as e:
            flavor = "MariaDB domain-server-sequence" if info.is_mariadb else "MySQL uuid:interval set"
            raise InvalidStartConfigError(
                f"GTID {pos.gtid!r} ({rule}) is not a {flavor} position for {self.server}: {e}; fix "
                f"canal.instance.master.gtid or the stored position") from e
        if info.is_mariadb:
            have = {d for d, _, _ in MariaGtidPosition(self.meta.master_status()[2]).gtids()}
            missing = have - {d for d, _, _ in MariaGtidPosition(gtid).gtids()}
            if missing:
                log.warning("GTID %s names no position for domain(s) %s of %s: the server streams those domains "
                            "from its oldest binlog", gtid, ",".join(map(str, sorted(missing))), self.server)
        conn = self._open()
        stream = conn.dump("", BINLOG_START, gtid=gtid, non_blocking=True)
        try:
            for n, raw in enumerate(stream):  # errors (1236) come with the first packets
                if n >= 3 or raw[4] not in (_T.ROTATE, _T.FORMAT_DESCRIPTION, _T.GTID_LIST, _T.PREVIOUS_GTIDS):
                    break
        except BinlogPositionError as e:
            executed = self.meta.master_status()[2]
            raise GtidNotAvailableError(gtid, self.server, e.server_message, executed, e.oldest_file) from e
        finally:
            stream.close()
            conn.close()
        return StartPosition(replace(pos, gtid=gtid), True, rule)

    # ---- positions -------------------------------------------------------------------------------------
    def end_position(self) -> EntryPosition:
        """The binlog's current end (SHOW MASTER STATUS; SHOW BINARY LOG STATUS on MySQL 8.4+)."""
        file, pos, gtid = self.meta.master_status()
        return EntryPosition(journal_name=file, position=pos, server_id=self.meta.server_info().server_id,
                             timestamp=int(self._clock() * 1000), gtid=gtid)

    def binary_logs(self) -> list[tuple[str, int]]:
        return self.meta.binary_logs()

    def _size_of(self, file: str, position: int) -> int:
        logs = self.binary_logs()
        for name, size in logs:
            if name == file:
                return size
        names = [n for n, _ in logs]
        purged = False
        s, first = _seq(file), _seq(names[0]) if names else None
        if s is not None and first is not None and s[0] == first[0] and s[1] < first[1]:
            purged = True
        raise BinlogFileNotFoundError(file, position, self.server, names, purged=purged)

    def _align(self, pos: EntryPosition, rule: str, check: SourceCheck | None = None) -> StartPosition:
        """``pos`` itself when it is a transaction boundary, else the start of the transaction it is in;
        ``check``: first verify that this server holds the event ``pos`` was recorded from."""
        file, p = pos.journal_name, max(pos.position, BINLOG_START)
        size = self._size_of(file, p)
        if p > size:
            f, e, _ = self.meta.master_status()
            raise PositionBeyondEndError(file, p, size, self.server, (f, e))
        pos = replace(pos, position=p)
        ev = self._event_at(file, p) if BINLOG_START < p < size else None
        if check is not None:
            self._verify(check, file, p, ev)
        if p in (BINLOG_START, size):
            return StartPosition(pos, False, rule)
        if ev is not None and ev.boundary:
            return StartPosition(self._fill(pos, ev), False, rule)
        start_ev, gtid = self._transaction_start(file, p)
        if start_ev is None:  # a boundary after all (e.g. a BEGIN without GTID, a statement of its own)
            return StartPosition(self._fill(pos, ev) if ev is not None else pos, False, rule)
        assert start_ev.start is not None
        new = EntryPosition(journal_name=file, position=start_ev.start, server_id=start_ev.server_id,
                            timestamp=start_ev.timestamp * 1000, gtid=gtid, included=False)
        log.warning("%s:%d is not a transaction boundary; starting at %s:%d, the start of the %s it is in", file,
                    p, file, new.position, "transaction" if start_ev.kind != _FILE else "event")
        return StartPosition(new, False, rule, realigned_from=pos)

    def _verify(self, check: SourceCheck, file: str, p: int, at: _Ev | None) -> None:
        """Raise SourceMismatchError unless this server's binlog holds the event ``check``'s position came from
        (``at``: the event starting at ``p``, when one does; identity.py gives the rules)."""
        check.judge_uuid()
        if check.provenance is not None:
            rec = check.provenance.event
            check.judge_recorded(self._event_at(rec.file, rec.start))
        elif not check.possible:
            log.warning("the stored position %s:%d carries no time: cannot check that %s is the server it was "
                        "recorded on", file, p, self.server)
        elif p == BINLOG_START:
            check.judge_file_start(self._first_time(file))
        elif not check.carries_time(at):
            check.judge_around(at, *self._around(file, p))

    def _around(self, file: str, position: int) -> tuple[_Ev | None, _Ev | None, _Ev | None]:
        """Scan ``file`` from its start: the event ending at ``position``, the event containing it, and the
        event that began the transaction open there (each None when there is none)."""
        groups = _Groups()
        ending = containing = None
        with contextlib.closing(self._events_before(file, position)) as events:
            for ev in events:
                starts, ends = groups.step(ev)
                groups.apply(ev, starts, ends and ev.end <= position)
                if ev.end == position:
                    ending = ev
                elif ev.end > position:
                    containing = ev
                    break
        return ending, containing, groups.open

    @staticmethod
    def _fill(pos: EntryPosition, ev: _Ev) -> EntryPosition:
        return replace(pos, server_id=pos.server_id if pos.server_id is not None else ev.server_id,
                       timestamp=pos.timestamp if pos.timestamp else ev.timestamp * 1000)

    def find_by_timestamp(self, t_ms: int, *, from_file: str | None = None) -> EntryPosition:
        """The start of the first transaction whose start event time (s x 1000) is >= ``t_ms``, searching
        from ``from_file`` (else from the file a binary search on first-event times picks); the current
        end when there is none."""
        end = self.end_position()
        names = [n for n, _ in self.binary_logs()]
        if from_file is not None:
            if from_file not in names:
                self._size_of(from_file, BINLOG_START)  # raises the typed error
            first = from_file
        else:
            oldest = self._first_time(names[0])
            if t_ms < oldest * 1000:
                raise TimestampTooOldError(t_ms, names[0], oldest * 1000, self.server)
            # the last file whose first event is before T: no earlier file holds an event at or after T
            lo, hi = 0, len(names) - 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self._first_time(names[mid]) * 1000 < t_ms:
                    lo = mid
                else:
                    hi = mid - 1
            first = names[lo]
        found = self._scan_for_time(first, t_ms, end, names)
        if found is None:
            log.info("no transaction at or after %s before the end %s:%d", format_ms(t_ms), end.journal_name,
                     end.position)
            return end
        return found

    def _first_time(self, file: str) -> int:
        """Seconds of the first event of ``file`` (its FORMAT_DESCRIPTION event, written at creation)."""
        cached = self._first_times.get(file)
        if cached is not None:
            return cached
        ts = None
        with contextlib.closing(self._events(file, BINLOG_START)) as events:
            for ev in events:
                if ev.start is not None and ev.timestamp:
                    ts = ev.timestamp
                    break
        if ts is None:
            raise StartPositionError(f"binlog {file} on {self.server} has no timestamped event; check SHOW "
                                     f"BINLOG EVENTS IN '{file}'")
        self._first_times[file] = ts
        return ts

    def _scan_for_time(self, file: str, t_ms: int, end: EntryPosition, names: list[str]) -> EntryPosition | None:
        order = {n: i for i, n in enumerate(names)}
        end_key = (order.get(end.journal_name, len(names)), end.position)
        groups = _Groups()
        gtids = _GtidState()
        with contextlib.closing(self._events(file, BINLOG_START)) as events:
            for ev in events:
                if ev.start is None:
                    continue
                if (order.get(ev.file, len(names) + 1), ev.start) >= end_key:
                    return None
                starts, ends = groups.step(ev)
                if starts and ev.timestamp * 1000 >= t_ms:
                    return EntryPosition(journal_name=ev.file, position=ev.start, server_id=ev.server_id,
                                         timestamp=ev.timestamp * 1000, gtid=gtids.text())
                groups.apply(ev, starts, ends)
                gtids.after(ev)
        return None

    # ---- realignment ------------------------------------------------------------------------------------
    def _event_at(self, file: str, position: int) -> _Ev | None:
        """The event starting exactly at file:position, or None (not an event start, or the file's end)."""
        try:
            with contextlib.closing(self._events(file, position)) as events:
                for ev in events:
                    if ev.start is None:
                        continue
                    return ev if ev.file == file and ev.start == position else None
        except BinlogPositionError as e:
            log.debug("no event starts at %s:%d (%s)", file, position, e.server_message)
        return None

    def _transaction_start(self, file: str, position: int) -> tuple[_Ev | None, str]:
        """Scan ``file`` from its start: the event that started the transaction open at ``position`` (or
        the event ``position`` falls inside, when that is not part of a transaction) and the executed GTIDs
        before it; (None, "") when ``position`` is a boundary."""
        groups = _Groups()
        gtids = _GtidState()
        open_gtid = ""
        with contextlib.closing(self._events_before(file, position)) as events:
            for ev in events:
                starts, ends = groups.step(ev)
                if starts:
                    gtid_before = gtids.text()
                    groups.apply(ev, True, ends and ev.end <= position)
                    open_gtid = gtid_before
                elif ends and ev.end <= position:
                    groups.apply(ev, False, True)
                else:
                    groups.apply(ev, False, False)
                gtids.after(ev)
                if ev.end > position:  # position falls inside this event
                    if groups.open is not None:
                        return groups.open, open_gtid
                    return ev, gtids.text()
        if groups.open is not None:
            return groups.open, open_gtid
        return None, ""

    # ---- the event stream -------------------------------------------------------------------------------
    def _events_before(self, file: str, position: int) -> Generator[_Ev, None, None]:
        """The events of ``file`` from its start that begin before ``position`` (the scan that places a position
        among the transactions around it)."""
        with contextlib.closing(self._events(file, BINLOG_START)) as events:
            for ev in events:
                if ev.start is None:
                    continue
                if ev.file != file or ev.start >= position:
                    return
                yield ev

    def _events(self, file: str, position: int) -> Generator[_Ev, None, None]:
        """A non-blocking dump from file:position, as ``_Ev``s, until the binlog's end or ``close()``."""
        conn = self._open()
        stream = conn.dump(file, position, non_blocking=True)
        dec = BinlogDecoder(file=file, checksum=conn.checksum_len > 0, decode_rows=False,
                            max_event_size=conn.max_event_size)
        unpack = _HEADER.unpack_from
        cur = file
        try:
            for raw in stream:
                ts, tc, sid, length, log_pos, flags = unpack(raw, 0)
                if flags & LOG_EVENT_ARTIFICIAL_F or log_pos < length or tc in _HEARTBEATS:
                    start = None  # not an event of the file (fake ROTATE, resent FDE, heartbeat)
                else:
                    start = log_pos - length
                began = False
                event = None
                if tc in _DECODED:
                    event = dec.decode(raw, start)
                if tc in _GTID_TYPES:
                    kind = _START
                    began = isinstance(event, E.MariaGtidEvent) and not event.standalone
                elif tc in _QUERY_TYPES:
                    kind = _query_kind(event.query)  # type: ignore[union-attr]
                    event = None
                elif tc in _END_TYPES:
                    kind = _END
                elif tc in _FILE_TYPES:
                    kind = _FILE
                else:
                    kind = _BODY
                if tc == _T.ROTATE:
                    yield _Ev(cur, start, log_pos, tc, ts, sid, kind)
                    cur = event.next_file  # type: ignore[union-attr]
                    dec.file = cur
                    continue
                yield _Ev(cur, start, log_pos, tc, ts, sid, kind, began, event)
        finally:
            stream.close()
            conn.close()
