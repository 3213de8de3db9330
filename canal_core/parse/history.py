"""The schema history (Canal's TSDB): every DDL the parser sees, recorded with its binlog position and
applied to an in-memory schema model, plus periodic snapshots of the whole model, so that the table
definitions can be rebuilt as of any position.

Semantics of positions. A DDL record carries the position of its QUERY event (file, start offset,
server id, timestamp, GTID). A snapshot carries ``seq`` (the last record it includes) and a position:
the model it holds is valid for every position from there on, until the next record. ``restore(P)``
rebuilds the model as it was just before the event at P (P is where the dump restarts; with
``P.included`` the event at P counts as consumed): the latest snapshot at or before P whose records
all precede P, plus the records after that snapshot and before P, in recorded order.

Positions compare by (binlog file sequence number, offset) when both carry a file name, else by
timestamp; a history follows one source (after a switch to another server, rebuild it).

Where a history is kept: ``history_store`` (which describes the file layout); a TABLE_MAP checked against
the history: ``table_map_check``; the live server's schema a history starts from: ``server_schema``.

Snapshots follow Canal's canal.instance.tsdb.snapshot.interval (hours, default 24: ``maybe_snapshot``
takes one when that long has passed since the last and DDL happened since) and .expire (hours, default
360: older snapshots are deleted, except the newest, and records older than the oldest kept snapshot
are compacted away).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..binlog.tablemap import ColumnHint, TableDef
from ..protocol.position import EntryPosition
from . import ddl as D
from .history_store import FileHistoryStore, HistoryStore, MemoryHistoryStore
from .model import (
    EVENT_QUERY,
    DdlResult,
    SchemaHistoryError,
    SchemaMismatchError,
    TableMeta,
    UnknownTableError,
    UnparsableDdlError,
)
from .schema import SchemaApplyError, SchemaModel
from .server_schema import read_server_schema
from .table_map_check import table_map_differences

log = logging.getLogger(__name__)

FORMAT = 1
REBUILD_COMMAND = "python -m canal_core.parse.history_cli rebuild"


# ---- positions -------------------------------------------------------------------------------------

_FILE_RE = re.compile(r"^(.*?)(\d+)$")


def position_key(p: EntryPosition) -> tuple:
    """Sort key of a position within one source's binlog."""
    if p.journal_name:
        m = _FILE_RE.match(p.journal_name)
        base, num = (m.group(1), int(m.group(2))) if m else (p.journal_name, 0)
        return (0, base, num, p.position)
    return (1, "", p.timestamp or 0, p.position)


def _before(a: EntryPosition, b: EntryPosition, *, inclusive: bool = False) -> bool:
    """a < b (a <= b when inclusive), by file and offset when both have a file, else by timestamp."""
    if a.journal_name and b.journal_name:
        ka, kb = position_key(a), position_key(b)
        return ka <= kb if inclusive else ka < kb
    ta, tb = a.timestamp or 0, b.timestamp or 0
    return ta <= tb if inclusive else ta < tb


def format_position(p: EntryPosition) -> str:
    if p.journal_name:
        return f"{p.journal_name}:{p.position}"
    return f"timestamp {p.timestamp}" + (f" gtid {p.gtid}" if p.gtid else "")


# ---- the history -----------------------------------------------------------------------------------

TableFilter = Callable[[str, str], bool]


@dataclass
class _Record:
    seq: int
    position: EntryPosition
    schema: str
    sql: str
    result: dict[str, Any]


class SchemaHistory:
    """Table definitions as of any binlog position.

    ``table_filter(schema, table)`` says which tables are subscribed (default: all): DDL we cannot
    parse on a subscribed table is an UnparsableDdlError, on others it is recorded and passed on.
    ``source`` (host, port, user) only feeds the rebuild command printed in error messages.
    """

    def __init__(self, store: HistoryStore | str | os.PathLike[str] | None = None, *,
                 snapshot_interval_hours: float = 24, snapshot_expire_hours: float = 360,
                 table_filter: TableFilter | None = None, source: dict[str, Any] | None = None,
                 clock: Callable[[], float] = time.time, server_version: int = D.DEFAULT_SERVER_VERSION) -> None:
        if store is None:
            store = MemoryHistoryStore()
        elif isinstance(store, str | os.PathLike):
            store = FileHistoryStore(store)
        self.store: HistoryStore = store
        self.snapshot_interval_hours = snapshot_interval_hours
        self.snapshot_expire_hours = snapshot_expire_hours
        self.table_filter = table_filter
        self.clock = clock
        self.server_version = server_version
        meta = self.store.read_meta()
        self.source: dict[str, Any] = dict(source or meta.get("source") or {})
        self.model = SchemaModel()
        self.position: EntryPosition | None = None  # the model is valid just before this position
        self._records: list[_Record] = [self._record(r) for r in self.store.records()]
        self._index = {(position_key(r.position), r.sql) for r in self._records}
        self._next_seq = (self._records[-1].seq + 1) if self._records else 1
        snaps = self.store.snapshots()
        self._next_seq = max([self._next_seq] + [s["seq"] + 1 for s in snaps])
        self._applied_seq = 0  # last record reflected in the model
        self._last_snapshot_at = max((s["taken_at"] for s in snaps), default=None)
        self._last_snapshot_seq = max((s["seq"] for s in snaps), default=0)
        self._dirty = False  # DDL applied since the last snapshot
        self._stale: dict[tuple[str, str], str] = {}
        self._restored = False
        boot = meta.get("bootstrap") or {}
        self.tracked_schemas: frozenset[str] | None = frozenset(boot["schemas"]) if boot.get("schemas") else None

    @staticmethod
    def _record(r: dict[str, Any]) -> _Record:
        return _Record(seq=int(r["seq"]), position=EntryPosition.from_json_dict(r["position"]),
                       schema=r.get("schema") or "", sql=r["sql"], result=r.get("result") or {})

    @property
    def data_dir(self) -> str | None:
        d = getattr(self.store, "dir", None)
        return str(d) if d is not None else None

    # ---- construction -------------------------------------------------------------------------

    @classmethod
    def bootstrap_from_server(cls, conn: Any, position: EntryPosition | None = None, *,
                              schemas: list[str] | tuple[str, ...] | None = None,
                              store: HistoryStore | str | os.PathLike[str] | None = None,
                              **kwargs: Any) -> SchemaHistory:
        """A new history whose first snapshot is the live server's schema (SHOW CREATE TABLE of
        every table in ``schemas``, default all but the system schemas), labelled with ``position``
        (default: the server's current SHOW MASTER STATUS). The store must be empty."""
        hist = cls(store, **kwargs)
        hist.bootstrap(conn, position, schemas=schemas)
        return hist

    @classmethod
    def create(cls, model: SchemaModel, position: EntryPosition, *,
               schemas: list[str] | tuple[str, ...] | None = None,
               store: HistoryStore | str | os.PathLike[str] | None = None, **kwargs: Any) -> SchemaHistory:
        """A new history whose first snapshot is ``model``, valid at ``position``; ``schemas``: the
        schemas it tracks (None = all). The store must be empty."""
        hist = cls(store, **kwargs)
        hist._start(model, position, schemas)
        return hist

    @property
    def empty(self) -> bool:
        """No snapshot and no record yet: a first start, to be bootstrapped from the server."""
        return not self._records and not self.store.snapshots()

    def bootstrap(self, conn: Any, position: EntryPosition | None = None, *,
                  schemas: list[str] | tuple[str, ...] | None = None) -> None:
        """Take the first snapshot from the live server (see bootstrap_from_server)."""
        self._check_empty()
        model, position = read_server_schema(conn, position, schemas, server_version=self.server_version)
        self._start(model, position, schemas)

    def _check_empty(self) -> None:
        if not self.empty:
            raise SchemaHistoryError(f"bootstrap into a non-empty history ({self.data_dir or 'store'}); use "
                                     f"{REBUILD_COMMAND} to replace a history")

    def _start(self, model: SchemaModel, position: EntryPosition,
               schemas: list[str] | tuple[str, ...] | None) -> None:
        self._check_empty()
        self.model = model
        self.position = position
        self._restored = True
        self._write_snapshot(position)
        meta = self.store.read_meta()
        meta.update({"format": FORMAT, "source": self.source,
                     "bootstrap": {"position": position.to_json_dict(), "schemas": list(schemas) if schemas else None}})
        self.store.write_meta(meta)
        self.tracked_schemas = frozenset(schemas) if schemas else None

    # ---- reading ------------------------------------------------------------------------------

    def restore(self, as_of: EntryPosition) -> None:
        """Rebuild the model as it was just before the event at ``as_of`` (see the module doc)."""
        recs = {r.seq: r for r in self._records}
        best = None
        for s in self.store.snapshots():
            spos = EntryPosition.from_json_dict(s["position"])
            if not _before(spos, as_of, inclusive=True):
                continue
            last = recs.get(s["seq"])
            if last is not None and not _before(last.position, as_of, inclusive=as_of.included):
                continue  # the snapshot already holds DDL at or after as_of
            if best is None or s["seq"] > best["seq"] or (s["seq"] == best["seq"] and s["taken_at"] > best["taken_at"]):
                best = s
        if best is None:
            raise SchemaHistoryError(
                f"the schema history{' in ' + self.data_dir if self.data_dir else ''} has no snapshot at or before "
                f"{format_position(as_of)}; rebuild it from the server at that position: {self.rebuild_command(as_of)}")
        snap = self.store.read_snapshot(best["id"])
        self.model = SchemaModel.from_dict(snap["model"])
        self._stale = {}
        self._applied_seq = snap["seq"]
        for r in self._records:
            if r.seq <= snap["seq"]:
                continue
            if not _before(r.position, as_of, inclusive=as_of.included):
                continue
            self._replay(r)
        self.position = as_of
        self._restored = True
        self._dirty = False

    def _replay(self, r: _Record) -> None:
        parsed = D.parse_ddl(r.sql, r.schema, server_version=self.server_version)
        if parsed.parsed:
            try:
                self.model.apply(parsed)
            except SchemaApplyError as e:
                self._mark_stale(parsed.tables, f"{e} (DDL at {format_position(r.position)})")
        else:
            self._mark_stale(parsed.tables, f"unparsed DDL at {format_position(r.position)}: {parsed.error}")
        self._applied_seq = r.seq

    def _require_restored(self) -> None:
        if not self._restored:
            raise SchemaHistoryError("the schema history is not positioned: call restore(position) first")

    def table(self, schema: str, name: str) -> TableMeta | None:
        return self.model.table(schema, name)

    def hints(self, schema: str, name: str) -> list[ColumnHint] | None:
        """Column facts for the decoder (BinlogDecoder(schema_hints=history.hints))."""
        t = self.model.table(schema, name)
        return t.hints() if t is not None else None

    def rebuild_command(self, at: EntryPosition | None = None) -> str:
        src = self.source
        parts = [REBUILD_COMMAND, "--data-dir", self.data_dir or "<data-dir>",
                 "--host", str(src.get("host") or "<host>")]
        if src.get("port"):
            parts += ["--port", str(src["port"])]
        parts += ["--user", str(src.get("user") or "<user>"),
                  "--at", f"{at.journal_name}:{at.position}" if at is not None and at.journal_name else "<file:pos>"]
        return " ".join(parts)

    # ---- DDL ----------------------------------------------------------------------------------

    def _subscribed(self, schema: str, table: str, is_subscribed: TableFilter | None) -> bool:
        """Whether DDL trouble on this table is fatal: the caller's filter, else the history's, else
        "in a bootstrapped schema" (all schemas when the bootstrap took them all)."""
        f = is_subscribed or self.table_filter
        if f is not None:
            return bool(f(schema, table))
        return self.tracked_schemas is None or schema in self.tracked_schemas

    def apply_ddl(self, default_schema: str, sql: str, position: EntryPosition, *,
                  is_subscribed: TableFilter | None = None) -> DdlResult:
        """Record and apply the statement of a QUERY event at ``position``."""
        self._require_restored()
        parsed = D.parse_ddl(sql, default_schema, server_version=self.server_version)
        if not parsed.changes_schema:
            return parsed.result()  # DML, GRANT, BEGIN ...: nothing to record
        where = format_position(position)
        if not parsed.parsed:
            hit = [t for t in parsed.tables if self._subscribed(t[0], t[1], is_subscribed)]
            if hit or not parsed.tables:
                names = ", ".join(f"{s}.{t}" for s, t in (hit or parsed.tables)) or "an unidentified table"
                raise UnparsableDdlError(
                    f"cannot parse DDL on {names} at {where} ({parsed.error}): {sql!r}. The schema history would "
                    f"no longer match the server; after the DDL has run, rebuild the history at the position "
                    f"after this statement: {self.rebuild_command()}")
            self._append(parsed, position)
            self._mark_stale(parsed.tables, f"unparsed DDL at {where}: {parsed.error}")
            log.warning("schema history: recorded unparsed DDL at %s on unsubscribed %s: %s", where,
                        parsed.tables, parsed.error)
            return parsed.result()
        trial = self.model.copy()
        try:
            trial.apply(parsed)
        except SchemaApplyError as e:
            t = e.table or (parsed.tables[0] if parsed.tables else ("", ""))
            if self._subscribed(t[0], t[1], is_subscribed) and not self._stale.get(t):
                raise SchemaMismatchError(
                    f"DDL at {where} does not fit the schema history of {t[0]}.{t[1]}: {e}. The history has "
                    f"drifted from the server; rebuild it at this position: {self.rebuild_command(position)}"
                ) from None
            self._append(parsed, position)
            self._mark_stale(parsed.tables, f"{e} (DDL at {where})")
            log.warning("schema history: DDL at %s does not fit unsubscribed %s.%s: %s", where, t[0], t[1], e)
            return parsed.result()
        self.model = trial
        self.position = replace(position, included=True)
        for t in parsed.tables:
            if self.model.table(*t) is not None or parsed.event_type != EVENT_QUERY:
                self._stale.pop(t, None)
        self._append(parsed, position)
        return parsed.result()

    def _append(self, parsed: D.ParsedDdl, position: EntryPosition) -> None:
        key = (position_key(position), parsed.sql)
        if key in self._index:
            # replayed after a restore: already recorded
            match = next((r for r in self._records if (position_key(r.position), r.sql) == key), None)
            if match is not None:
                self._applied_seq = max(self._applied_seq, match.seq)
            return
        res = parsed.result()
        rec = {"seq": self._next_seq, "position": position.to_json_dict(), "schema": parsed.default_schema,
               "sql": parsed.sql,
               "result": {"type": res.event_type, "schema": res.schema, "table": res.table,
                          "tables": [list(t) for t in res.tables], "parsed": res.parsed},
               "recorded_at": int(self.clock() * 1000)}
        self.store.append(rec)
        self._records.append(self._record(rec))
        self._index.add(key)
        self._applied_seq = self._next_seq
        self._next_seq += 1
        self._dirty = True

    def _mark_stale(self, tables: tuple[tuple[str, str], ...], reason: str) -> None:
        for t in tables:
            self.model.tables.pop(self.model.key(*t), None)
            self._stale[t] = reason

    # ---- TABLE_MAP checks ---------------------------------------------------------------------

    def check_table_map(self, table_def: TableDef, position: EntryPosition) -> TableMeta:
        """The history's definition of the TABLE_MAP's table, checked against what the binlog says:
        column count, each column's binlog type against the history's type, names, signedness,
        ENUM/SET values, DECIMAL precision/scale and fractional seconds when the binlog carries them."""
        self._require_restored()
        s, t = table_def.schema, table_def.table
        where = format_position(position)
        meta = self.model.table(s, t)
        if meta is None:
            why = self._stale.get((s, t))
            raise UnknownTableError(
                f"rows for {s}.{t} at {where}, but the schema history has no such table"
                + (f" (it lost track of it: {why})" if why else "")
                + f"; rebuild the history at this position: {self.rebuild_command(position)}")
        problems = table_map_differences(meta, table_def)
        if problems:
            raise SchemaMismatchError(
                f"TABLE_MAP for {s}.{t} at {where} disagrees with the schema history: {'; '.join(problems)}. "
                f"The history has drifted from the server; rebuild it at this position: "
                f"{self.rebuild_command(position)}")
        return meta

    # ---- snapshots ----------------------------------------------------------------------------

    def maybe_snapshot(self, position: EntryPosition, *, force: bool = False) -> bool:
        """Take a snapshot at ``position`` (an event boundary the model is valid at) if the interval
        has passed since the last one and DDL happened since (or ``force``); then expire old ones."""
        now = self.clock()
        due = self._last_snapshot_at is None or \
            now * 1000 - self._last_snapshot_at >= self.snapshot_interval_hours * 3600_000
        if not force and not (due and (self._dirty or self._applied_seq > self._last_snapshot_seq)):
            return False
        self._write_snapshot(position)
        self.expire()
        return True

    def _write_snapshot(self, position: EntryPosition) -> None:
        taken = int(self.clock() * 1000)
        self.store.write_snapshot({"format": FORMAT, "seq": self._applied_seq, "position": position.to_json_dict(),
                                   "taken_at": taken, "model": self.model.to_dict()})
        self._last_snapshot_at = taken
        self._last_snapshot_seq = self._applied_seq
        self._dirty = False

    def expire(self) -> None:
        """Delete snapshots older than snapshot_expire_hours (never the newest) and the records that
        only they needed."""
        snaps = sorted(self.store.snapshots(), key=lambda s: (s["taken_at"], s["seq"]))
        if len(snaps) <= 1:
            return
        limit = self.clock() * 1000 - self.snapshot_expire_hours * 3600_000
        old = [s for s in snaps[:-1] if s["taken_at"] < limit]
        if not old:
            return
        for s in old:
            self.store.delete_snapshot(s["id"])
        kept = [s for s in snaps if s not in old]
        floor = min(s["seq"] for s in kept)
        if self._records and self._records[0].seq <= floor:
            self.store.compact(floor)
            self._records = [r for r in self._records if r.seq > floor]
            self._index = {(position_key(r.position), r.sql) for r in self._records}

    def begins(self) -> tuple[EntryPosition, int] | None:
        """Where the history begins: the oldest snapshot's position and when it was taken (ms); None when
        empty. Nothing before that position can be decoded with this history."""
        snaps = self.snapshot_list()
        if not snaps:
            return None
        first = snaps[0]
        return EntryPosition.from_json_dict(first["position"]), int(first["taken_at"])

    def snapshot_list(self) -> list[dict[str, Any]]:
        return sorted(self.store.snapshots(), key=lambda s: (s["seq"], s["taken_at"]))

    def records(self) -> list[dict[str, Any]]:
        return [{"seq": r.seq, "position": r.position.to_json_dict(), "schema": r.schema, "sql": r.sql,
                 "result": r.result} for r in self._records]

