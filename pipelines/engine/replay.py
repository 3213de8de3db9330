"""Bounded replay of a binlog range through a separate client, for backfills, snapshot catch-up and
reconciliation.

The live destination is never touched: the replay is its own replica connection (its own server id),
its own copy of the schema history (restored as of the range's start, so old rows decode with the
schema they were written with) and an in-memory position; nothing is acked anywhere. Row changes come
out as Canal Entry bytes, exactly what the live path stages, and are staged in windows of at most
``max_rows`` rows with ``pipelines.engine.staging.stage_window``.

The range: from ``start`` (a binlog Position, or an EventTime: the locator finds the first transaction
at or after it, as Canal's timestamp start does) to ``end`` (a Position: changes at or before it, or an
EventTime: changes executed at or before it), never past the binlog end seen when the replay began.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from canal_core.entry.convert import EntryConverter
from canal_core.entry.model import ENTRY_HEARTBEAT, ENTRY_ROWDATA, CanalEntry
from canal_core.parse.filter import TableFilter
from canal_core.parse.health import ErrorKind
from canal_core.parse.history import SchemaHistory
from canal_core.parse.locator import StartConfig
from canal_core.parse.parser import EventParser, ParserConfig
from canal_core.parse.position import PositionManager
from canal_core.protocol.position import LogPosition

from .window import EventTime, Position, WindowManifest, format_position, order_key

log = logging.getLogger(__name__)


# errors a replay does not wait out: the account refused, another server at the address, a broken history
_FATAL_KINDS = frozenset({ErrorKind.ACCESS, ErrorKind.SOURCE_MISMATCH, ErrorKind.NEEDS_PERSON})


class ReplayError(RuntimeError):
    """The range could not be replayed (bad range, the parser stopped on an error)."""


@dataclasses.dataclass
class ReplaySource:
    """What a replay needs of the destination: its parser config (source address, credentials, filter),
    the directory of its live schema history (copied, never written) and the entries' timezone."""

    parser_config: ParserConfig
    event_filter: Any
    history_dir: Path | None = None
    timezone: str = "UTC"

    @classmethod
    def from_instance(cls, instance: Any, timezone: str = "UTC") -> ReplaySource:
        """From a canal_core.instance.config.InstanceConfig."""
        return cls(instance.parser_config(), instance.event_filter(), Path(instance.data_dir) / "history", timezone)

    def conn_kwargs(self) -> dict[str, Any]:
        m = self.parser_config.master
        return {"host": m.host, "port": m.port, "user": m.user, "password": m.password, "ssl": m.ssl}


def binlog_head(conn_kwargs: dict[str, Any]) -> Position:
    """The source's current binlog end, as the replica side reads it (SHOW BINARY LOG STATUS on MySQL 8.4+,
    SHOW MASTER STATUS before; a typed error when the binlog is off)."""
    from canal_core.mysql import ReplicationConnection, ReplicationError

    kw = {k: v for k, v in conn_kwargs.items() if k in ("host", "port", "user", "password", "ssl")}
    conn = ReplicationConnection(**kw)
    try:
        conn.connect()
        file, pos, _ = conn.master_status()
    except ReplicationError as e:
        raise ReplayError(f"cannot read the binlog end of {kw.get('host')}:{kw.get('port')}: {e}") from e
    finally:
        conn.close()
    return Position(file, pos)


def _tables_regex(tables: list[str]) -> str:
    def esc(name: str) -> str:
        # ASCII punctuation escaped; other characters are literals to RE2, which refuses an escaped one
        return "".join("\\" + ch if ch.isascii() and not (ch.isalnum() or ch == "_") else ch for ch in name)

    out = []
    for t in tables:
        schema, _, table = t.partition(".")
        if not table:
            raise ReplayError(f"table {t!r}: expected schema.table")
        out.append(f"{esc(schema)}\\.{esc(table)}")
    return ",".join(out)


class _Collector(PositionManager):
    """The replay's sink and position manager: keeps the entries inside the range, signals the end."""

    def __init__(self, end_key: int | None, end_ms: int | None, head_key: int) -> None:
        self.end_key = end_key
        self.end_ms = end_ms
        self.head_key = head_key
        self.entries: list[bytes] = []
        self.rows = 0
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.last: LogPosition | None = None

    def _past(self, key: int, ts_ms: int | None) -> bool:
        if self.end_key is not None and key > self.end_key:
            return True
        return self.end_ms is not None and ts_ms is not None and ts_ms > self.end_ms

    def __call__(self, entries: Sequence[CanalEntry]) -> None:
        for e in entries:
            p = e.position
            if e.entry_type == ENTRY_HEARTBEAT:
                # the source is idle at this position: nothing more below the head will come
                if p.journal_name and order_key(p.journal_name, p.position or 0) >= self.head_key:
                    self.done.set()
                continue
            if not p.journal_name:
                continue
            if self._past(order_key(p.journal_name, p.position or 0), p.timestamp):
                self.done.set()
                continue
            with self.lock:
                self.entries.append(e.data)
                if e.entry_type == ENTRY_ROWDATA and e.rows is not None:
                    self.rows += len(e.rows)

    # PositionManager: the parser persists every transaction boundary (of any table): progress
    def get_latest(self, destination: str) -> LogPosition | None:
        return None

    def persist(self, destination: str, position: LogPosition) -> None:
        self.last = position
        p = position.position
        key = order_key(p.journal_name, p.position or 0)
        if key >= self.head_key or self._past(key, p.timestamp):
            self.done.set()

    def take(self) -> tuple[list[bytes], int]:
        with self.lock:
            out, rows = self.entries, self.rows
            self.entries, self.rows = [], 0
        return out, rows


def replay_entries(source: ReplaySource, *, start: Position | EventTime, end: Position | EventTime | None = None,
                   tables: list[str] | None = None, chunk_rows: int = 200_000, timeout: float = 600.0,
                   from_history_start: bool = False) -> Iterator[list[bytes]]:
    """Entry bytes of the range, in binlog order, in chunks of about ``chunk_rows`` row changes (a chunk
    ends at an entry boundary). ``tables``: schema.table names (default: the destination's filter).

    ``from_history_start``: a start before the schema history begins (its oldest snapshot) is moved up to
    where it begins, for callers whose start is only a safe lower bound (a reconcile's margin before the
    mirror's last change, which the live stream, and so the history, already covered). Without it such a
    start is an error naming the rebuild command, as a backfill of a period the history cannot decode must be."""
    for name, bound in (("start", start), ("end", end)):
        if not isinstance(bound, Position | EventTime) and not (name == "end" and bound is None):
            # a bare number could be an offset or a time: the caller says which
            raise TypeError(f"replay {name} {bound!r}: expected a Position or an EventTime")
    head = binlog_head(source.conn_kwargs())
    end_key = end.key if isinstance(end, Position) else None
    end_ms = end.ms if isinstance(end, EventTime) else None
    if isinstance(start, Position):
        if isinstance(end, Position) and start.key > end.key:
            raise ReplayError(f"range start {format_position(start)} is after its end {format_position(end)}")
        start_cfg = StartConfig(journal_name=start.journal, position=start.offset)
    else:
        if end_ms is not None and start.ms > end_ms:
            raise ReplayError(f"range start {start.ms} ms is after its end {end_ms} ms")
        start_cfg = StartConfig(timestamp=start.ms)
    if isinstance(start, Position) and start.key >= head.key:
        return  # nothing written since

    work = Path(tempfile.mkdtemp(prefix="canal-replay-"))
    history_dir = work / "history"
    try:
        if source.history_dir is not None and Path(source.history_dir).is_dir():
            shutil.copytree(source.history_dir, history_dir)
        history = SchemaHistory(history_dir)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    if from_history_start and (begins := history.begins()) is not None:
        first, taken_at = begins
        # a binlog position compares by (file, offset); a time against the snapshot's event time, or, for a
        # bootstrap at the binlog head (no event time), against when it was taken: later events are after it
        first_ms = first.timestamp or taken_at
        if first.journal_name and (start.key < order_key(first.journal_name, first.position or 0)
                                   if isinstance(start, Position) else start.ms < first_ms):
            log.info("replay start %s is before the schema history begins (%s:%s): starting there", start,
                     first.journal_name, first.position)
            start_cfg = StartConfig(journal_name=first.journal_name, position=first.position)

    collector = _Collector(end_key, end_ms, head.key)
    event_filter = dataclasses.replace(source.event_filter)
    if tables:
        event_filter.white = TableFilter(_tables_regex(tables), empty_accepts=False)
    cfg = dataclasses.replace(
        source.parser_config, master_start=start_cfg, standby=None, heartbeat_ha_enable=False,
        detecting_enable=False, heartbeat_period=0.5,
        # a replica id of its own: the server drops an older connection with the same id (the live parser)
        slave_id=random.randint(1 << 20, (1 << 31) - 1))
    try:
        parser = EventParser(cfg, sink=collector, history=history, positions=collector,
                             converter_factory=lambda ident: EntryConverter(ident, timezone=source.timezone),
                             event_filter=event_filter)
        parser.start()
        try:
            waited = 0.0
            while True:
                finished = collector.done.wait(0.2)
                waited += 0.2
                if not finished and not parser.running:
                    # name the destination's history, not this replay's temporary copy of it
                    why = str(parser.last_error).replace(str(history_dir), str(source.history_dir or "<data-dir>"))
                    raise ReplayError(f"replay parser stopped: {why}")
                if not finished and (err := parser.health.error) is not None and err.kind in _FATAL_KINDS:
                    # retrying will not change the account or the server answering: fail the replay now
                    raise ReplayError(f"replay parser cannot read {parser.health.source}: {err.kind.value}: "
                                      f"{err.type_name}: {err.message}")
                if finished or collector.rows >= chunk_rows:
                    chunk, _ = collector.take()
                    if chunk:
                        yield chunk
                    if finished:
                        break
                if waited > timeout:
                    raise ReplayError(f"replay did not reach the range end within {timeout:.0f} s "
                                      f"(last position {collector.last})")
        finally:
            parser.stop()
        # entries collected between the last take and the stop
        chunk, _ = collector.take()
        if chunk:
            yield chunk
    finally:
        shutil.rmtree(work, ignore_errors=True)


def replay_windows(source: ReplaySource, *, root: Path, destination: str, label: int,
                   start: Position | EventTime, end: Position | EventTime | None = None,
                   tables: list[str] | None = None, chunk_rows: int = 200_000,
                   stage: Callable[..., WindowManifest] | None = None, from_history_start: bool = False,
                   ) -> Iterator[tuple[Path, WindowManifest]]:
    """The range staged as windows under ``root`` (window numbers ``label``, ``label + 1``, ...; attempt 0),
    yielded in order; the caller applies and removes them."""
    from . import staging

    stage = stage or staging.stage_window
    n = label
    for chunk in replay_entries(source, start=start, end=end, tables=tables, chunk_rows=chunk_rows,
                                from_history_start=from_history_start):
        manifest = stage(chunk, root=root, destination=destination, window=n, attempt=0, batch_ids=[],
                         timezone=source.timezone)
        yield staging.window_path(root, destination, n, 0), manifest
        n += 1
