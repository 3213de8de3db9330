"""EventParser: owns the dump loop of one destination.

find the start position -> dump -> decode (schema hints from the history) -> convert to Canal entries
-> hand them to the sink (which blocks until stored) -> at each transaction boundary record the
position. Errors reconnect with backoff from the last recorded boundary; a heartbeat detector can
switch to the standby, which resumes by timestamp (Canal's fallbackIntervalInSeconds rewind).

Every reconnect goes through the locator again, with the parser's in-memory ``Provenance`` of the
position it recorded last (the event, the server's uuid): a different server at the source's address is
refused (``SourceMismatchError``) and retried with back-off, so the right server coming back resumes the
stream. Errors that retrying cannot fix (schema history, start position) stop the parser. ``health``
says which of these is happening (``canal_core.parse.health``).

Positions recorded are transaction boundaries: journal + the offset where the next transaction
starts (the end of its XID/COMMIT/DDL event), the event's time in ms, the executed GTID set. A restart
from there never splits a transaction and loses nothing; what was sunk after the last record is
delivered again (at least once).
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import pymysql

from ..binlog import ABSENT, DEFAULT_MAX_EVENT_SIZE, BinlogDecoder
from ..binlog import events as E
from ..binlog.gtid import MariaGtidPosition, MySQLGtidSet
from ..binlog.tablemap import ColumnHint, TableDef
from ..mysql import ConnectionLostError, PacketTooLargeError, ReplicationConnection, ReplicationError
from ..protocol.position import EntryPosition, LogIdentity, LogPosition
from .ddl import parse_ddl
from .filter import EventFilter, dml_verb, statement_kind
from .health import HealthTracker, ParserHealth
from .identity import Provenance, RecordedEvent, SourceMismatchError
from .locator import StartConfig, StartPositionError, StartPositionLocator, same_source
from .model import (
    EVENT_DELETE,
    EVENT_INSERT,
    EVENT_UPDATE,
    DdlResult,
    GtidInfo,
    SchemaHistoryError,
    TableMeta,
    UnknownTableError,
)
from .position import PositionManager

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourceConfig:
    host: str
    port: int
    user: str = "canal"
    password: str = "canal"
    ssl: dict[str, Any] | None = None

    @property
    def identity(self) -> LogIdentity:
        return LogIdentity(address=self.host, port=self.port)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass
class ParserConfig:
    destination: str
    master: SourceConfig
    standby: SourceConfig | None = None
    slave_id: int = 0  # 0: derive a stable one (canal.instance.mysql.slaveId)
    heartbeat_period: float = 15.0  # @master_heartbeat_period
    detecting_enable: bool = False  # canal.instance.detecting.enable
    detecting_sql: str = "select 1"
    detecting_interval: float = 3.0  # seconds (canal.instance.detecting.interval.time)
    detecting_retry_threshold: int = 3
    heartbeat_ha_enable: bool = False
    master_start: StartConfig = field(default_factory=StartConfig)  # canal.instance.master.*
    standby_start: StartConfig = field(default_factory=StartConfig)  # canal.instance.standby.*
    reconnect_min: float = 0.5
    reconnect_max: float = 30.0
    subscribed: Callable[[str, str], bool] | None = None  # tables whose unparsable DDL must stop us
    bootstrap_schemas: tuple[str, ...] | None = None  # schemas a first start snapshots (None: all user schemas)
    max_event_size: int = DEFAULT_MAX_EVENT_SIZE  # bytes, canal.instance.parser.maxEventSize
    extra: dict[str, Any] = field(default_factory=dict)


class Sink(Protocol):
    def __call__(self, entries: list[Any]) -> None: ...


@runtime_checkable
class ResettableSink(Sink, Protocol):
    """A sink that buffers a transaction: ``reset`` drops what it holds of one the dump broke off."""

    def reset(self) -> None: ...


class EntryConverting(Protocol):
    """What the parser asks of the converter (canal_core.entry.EntryConverter): one Canal entry per call."""

    def begin(self, event: Any, gtid: GtidInfo | str | None = None) -> Any: ...

    def end(self, event: Any, gtid: GtidInfo | str | None = None) -> Any: ...

    def ddl(self, event: Any, result: DdlResult, gtid: GtidInfo | str | None = None) -> Any: ...

    def rows(self, event: Any, table: TableMeta | None, gtid: GtidInfo | str | None = None) -> Any: ...

    def master_heartbeat(self, event: Any) -> Any: ...


class History(Protocol):
    """What the parser uses of the schema history (canal_core.parse.history.SchemaHistory)."""

    @property
    def empty(self) -> bool: ...

    def bootstrap(self, conn: Any, position: EntryPosition | None = None, *,
                  schemas: list[str] | tuple[str, ...] | None = None) -> None: ...

    def restore(self, as_of: EntryPosition) -> None: ...

    def maybe_snapshot(self, position: EntryPosition, *, force: bool = False) -> bool: ...

    def table(self, schema: str, name: str) -> TableMeta | None: ...

    def hints(self, schema: str, name: str) -> list[ColumnHint] | None: ...

    def apply_ddl(self, default_schema: str, sql: str, position: EntryPosition, *,
                  is_subscribed: Callable[[str, str], bool] | None = None) -> DdlResult: ...

    def check_table_map(self, table_def: TableDef, position: EntryPosition) -> TableMeta: ...


Locate = Callable[[SourceConfig, LogPosition | None], tuple[EntryPosition, bool]]


class _Switch(Exception):
    """Internal: leave the dump to change source."""


class EventParser:
    def __init__(self, config: ParserConfig, *, sink: Sink, history: History, positions: PositionManager,
                 converter_factory: Callable[[LogIdentity], EntryConverting], event_filter: EventFilter | None = None,
                 locate: Locate | None = None,
                 restore_history: Callable[[EntryPosition], None] | None = None) -> None:
        self.config = config
        self.sink = sink
        self.history = history
        self.positions = positions
        self.locate = locate or self._locate
        self.converter_factory = converter_factory
        self.filter = event_filter or EventFilter()
        self.restore_history = restore_history or history.restore
        self.source = config.master
        self.running = False
        self._health = HealthTracker(config.master.address)
        self.switches = 0
        self.switched_at: float | None = None  # time.monotonic() of the last switch
        self._source_server_id: int | None = None
        self._source_uuid: str | None = None
        self._recorded: tuple[LogPosition, E.Event, str | None] | None = None  # the last position, its event, uuid
        self.events = 0
        self.entries = 0
        # counters behind Canal's metrics (docs/canal-compat.md §7)
        self.received_bytes = 0  # canal_instance_received_binlog_bytes
        self.transactions = 0  # canal_instance_transactions
        self.last_event_ms = 0  # executeTime of the last event: canal_instance_traffic_delay = now - this
        self.sink_blocking = 0.0  # seconds spent handing entries to the sink: publish_blocking_time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: ReplicationConnection | None = None
        self._conn_lock = threading.Lock()
        self._switch_requested = threading.Event()
        self._detector: threading.Thread | None = None

    # ---- lifecycle -----------------------------------------------------------------------------

    @property
    def health(self) -> ParserHealth:
        """The parser's current state, immutable (see ``canal_core.parse.health``)."""
        return self._health.snapshot

    @property
    def last_error(self) -> BaseException | None:
        """The error holding the parser up now (retrying or stopped on it); None once a dump streams again.
        The last error after it cleared: ``health.last_error``."""
        err = self._health.snapshot.error
        return err.error if err is not None else None

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self.running = True
        self._health.connecting(self.source.address)
        self._thread = threading.Thread(target=self.run, name=f"parser-{self.config.destination}", daemon=True)
        self._thread.start()
        if self.config.detecting_enable:
            self._detector = threading.Thread(target=self._detect, name=f"detect-{self.config.destination}",
                                              daemon=True)
            self._detector.start()

    def request_stop(self) -> None:
        """Ask the parser to stop without waiting: the dump's connection is closed; a put waiting for room in the
        store wakes when the store closes (the instance closes it next, then joins with ``stop``)."""
        self._stop.set()
        self._close_conn()

    def stop(self, timeout: float = 10.0) -> None:
        self.request_stop()
        for t in (self._thread, self._detector):
            if t is not None and t is not threading.current_thread():
                t.join(timeout)
        self.running = False

    def _close_conn(self) -> None:
        with self._conn_lock:
            conn = self._conn
        if conn is not None:
            conn.close()

    # ---- main loop -----------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._run()
        except Exception as e:  # a bug or an unexpected failure ends the thread: say so, never look started
            if self._stop.is_set():   # e.g. the store closed under a waiting put: how a stop wakes the parser
                log.info("%s: the parser stopped (%s: %s, on its way out)", self.config.destination,
                         type(e).__name__, e)
                return
            self._health.failed(e, retrying=False)
            log.exception("%s: the parser stopped on an unexpected error", self.config.destination)
        finally:
            self.running = False
            self._health.stopped()

    def _run(self) -> None:
        backoff = self.config.reconnect_min
        while not self._stop.is_set():
            try:
                self._dump_once()
                backoff = self.config.reconnect_min
            except _Switch:
                self._do_switch()
                backoff = self.config.reconnect_min
            except PacketTooLargeError as e:
                # the same event comes again on every retry: the limit must be raised (or the source fixed)
                self._health.failed(e, retrying=False)
                log.error("%s: the parser stops: %s", self.config.destination, e)
                break
            except (ReplicationError, OSError, pymysql.err.MySQLError, SourceMismatchError) as e:
                if self._stop.is_set():
                    break  # our own stop closed the connection: not an error
                # another server at the address may give way to ours again (a moved port, a VIP): retried,
                # delivering nothing meanwhile, and said loudly
                err = self._health.failed(e, retrying=True)
                if self._switch_requested.is_set():
                    self._do_switch()
                    continue
                level = logging.ERROR if isinstance(e, SourceMismatchError) else logging.WARNING
                log.log(level, "%s: dump from %s failed (%s: %s); retrying in %.1f s", self.config.destination,
                        self.source.address, err.kind.value, e, backoff)
                self._stop.wait(backoff * (0.8 + 0.4 * random.random()))
                backoff = min(backoff * 2, self.config.reconnect_max)
            except (SchemaHistoryError, StartPositionError) as e:
                # needs a person (rebuild the history, fix the configured position): retrying would loop
                self._health.failed(e, retrying=False)
                log.error("%s: the parser stops: %s", self.config.destination, e)
                break

    def _do_switch(self) -> None:
        self._switch_requested.clear()
        standby = self.config.standby
        if standby is None:
            return
        old = self.source
        self.source = standby if self.source == self.config.master else self.config.master
        self.switches += 1
        self.switched_at = time.monotonic()
        self._health.connecting(self.source.address)
        log.warning("%s: switching from %s to %s", self.config.destination, old.address, self.source.address)

    def _dump_once(self) -> None:
        if isinstance(self.sink, ResettableSink):
            self.sink.reset()  # the dump restarts at a transaction boundary: drop what was buffered of a broken one
        stored = self.positions.get_latest(self.config.destination)
        start, gtid_mode = self.locate(self.source, stored)
        if stored is None and self.history.empty:
            # first start: the history's first snapshot is the live server's schema at the start position
            boot = pymysql.connect(host=self.source.host, port=self.source.port, user=self.source.user,
                                   password=self.source.password, ssl=self.source.ssl)
            try:
                self.history.bootstrap(boot, start, schemas=self.config.bootstrap_schemas)
            finally:
                boot.close()
        else:
            if stored is None or same_source(stored.identity, self.source.identity):
                self.restore_history(start)
            else:
                # binlog coordinates of another server mean nothing here: restore by time, as Canal's
                # TSDB rolls back by timestamp
                when = start.timestamp
                if when is None and stored.position.timestamp is not None:
                    cfg = self.config.master_start if self.source == self.config.master else self.config.standby_start
                    when = stored.position.timestamp - cfg.fallback_interval * 1000
                self.restore_history(EntryPosition(timestamp=when))
        identity = self.source.identity
        converter = self.converter_factory(identity)
        conn = self._connection(self.source)
        with self._conn_lock:
            self._conn = conn
        try:
            conn.connect()
            info = conn.server_info()
            flavor = info.flavor
            self._source_server_id = info.server_id
            self._source_uuid = info.server_uuid
            gtid_state: MySQLGtidSet | MariaGtidPosition | None = None
            if start.gtid:
                gtid_state = MariaGtidPosition(start.gtid) if flavor == "mariadb" else MySQLGtidSet(start.gtid)
            elif flavor == "mariadb":
                gtid_state = MariaGtidPosition()
            decoder = BinlogDecoder(checksum=None, schema_hints=self._hints, table_filter=self.filter.table,
                                    file=start.journal_name or None, max_event_size=self.config.max_event_size)
            stream = conn.dump(start.journal_name, start.position, gtid=start.gtid if gtid_mode else None)
            state = _TxState(gtid_state, by_gtid=gtid_mode)
            first = True
            for raw in stream:
                if first:  # the server streams (a heartbeat counts): an earlier error is over
                    self._health.streaming()
                    first = False
                if self._stop.is_set():
                    return
                if self._switch_requested.is_set():
                    raise _Switch
                ev = decoder.decode(raw)
                self.received_bytes += len(raw)
                if ev.timestamp:
                    self.last_event_ms = ev.timestamp * 1000
                for inner in decoder.iter_events(ev):
                    self._handle(inner, decoder, converter, state)
        except ConnectionLostError:
            if self._switch_requested.is_set():
                raise _Switch from None
            raise
        finally:
            with self._conn_lock:
                self._conn = None
            conn.close()

    def _connection(self, src: SourceConfig) -> ReplicationConnection:
        return ReplicationConnection(src.host, src.port, src.user, src.password, ssl=src.ssl,
                                     server_id=self.config.slave_id, heartbeat_period=self.config.heartbeat_period,
                                     destination=self.config.destination,
                                     max_event_size=self.config.max_event_size)

    def _locate(self, src: SourceConfig, stored: LogPosition | None) -> tuple[EntryPosition, bool]:
        cfg = self.config.master_start if src == self.config.master else self.config.standby_start
        locator = StartPositionLocator(lambda: self._connection(src), src.identity, cfg)
        start = locator.locate(stored, provenance=self._provenance())
        log.info("%s: starting %s at %s:%s (%s)", self.config.destination, src.address,
                 start.position.journal_name, start.position.position, start.rule)
        return start.position, start.gtid_mode

    def _provenance(self) -> Provenance | None:
        """What a reconnect checks the server against (identity.py): the event the last position was recorded
        from, and the server's uuid. Memory only: Canal's position JSON has no room for it."""
        if self._recorded is None:
            return None
        recorded, ev, uuid = self._recorded
        assert ev.file is not None
        start = ev.position if ev.position is not None else ev.log_pos - ev.length
        return Provenance(recorded, RecordedEvent(ev.file, start, ev.log_pos, ev.timestamp, ev.server_id, ev.type_code),
                          uuid)

    def _hints(self, schema: str, table: str) -> Any:
        return self.history.hints(schema, table)

    # ---- one event -----------------------------------------------------------------------------

    def _handle(self, ev: E.Event, decoder: BinlogDecoder, converter: EntryConverting, st: _TxState) -> None:
        self.events += 1
        f = self.filter
        if isinstance(ev, E.MariaGtidEvent):
            st.pending_gtid = ev.gtid
            st.standalone = ev.standalone
            st.in_tx = not ev.standalone
            st.begin_position = ev.position
            if not ev.standalone:
                self._emit([converter.begin(ev, st.gtid_arg())])
            return
        if isinstance(ev, E.GtidEvent):
            st.pending_gtid = None if ev.anonymous else ev.gtid
            if not ev.anonymous:
                st.gtid_event = ev
            return
        if isinstance(ev, E.QueryEvent):
            self._query(ev, decoder, converter, st)
            return
        if isinstance(ev, E.TableMapEvent):
            if f.table(ev.table.schema, ev.table.table):
                self.history.check_table_map(ev.table, self._pos(ev, st))
            return
        if isinstance(ev, E.RowsEvent):
            self._rows(ev, converter, st)
            return
        if isinstance(ev, E.XidEvent):
            st.commit()
            self._emit([converter.end(ev, st.gtid_arg())])
            self._boundary(ev, st)
            return
        if isinstance(ev, E.HeartbeatEvent):
            self._emit([converter.master_heartbeat(ev)])
            return
        if isinstance(ev, E.RotateEvent | E.FormatDescriptionEvent):
            return

    def _query(self, ev: E.QueryEvent, decoder: BinlogDecoder, converter: EntryConverting, st: _TxState) -> None:
        f = self.filter
        sql = ev.query.strip()
        upper = sql[:9].upper()
        if upper.startswith("BEGIN"):
            st.in_tx = True
            if not isinstance(st.gtid_state, MariaGtidPosition):
                self._emit([converter.begin(ev, st.gtid_arg())])
            return
        if upper.startswith("COMMIT") and st.in_tx:
            st.commit()
            self._emit([converter.end(ev, st.gtid_arg())])
            self._boundary(ev, st)
            return
        kind = statement_kind(sql)
        if kind == "dml":  # statement-based DML: typed INSERT/UPDATE/DELETE, isDdl false, unless filtered
            if not f.query_dml:
                etype = {"UPDATE": EVENT_UPDATE, "DELETE": EVENT_DELETE}.get(dml_verb(sql) or "", EVENT_INSERT)
                # the header names the statement's target table, as Canal's DruidDdlParser result does, so the
                # table filter applies to it; a target we cannot read stays unnamed and passes (never dropped)
                target = parse_ddl(sql, ev.schema)
                schema, table = (target.schema or ev.schema, target.table) if target.table else (ev.schema, "")
                if not table or f.table(schema, table):
                    self._emit([converter.ddl(ev, DdlResult(etype, schema, table, ev.schema, (), True),
                                              st.gtid_arg())])
            return
        result = self.history.apply_ddl(ev.schema, sql, self._pos(ev, st), is_subscribed=self.filter.table)
        decoder.invalidate_table_cache()
        st.commit()
        wanted = not (kind == "dcl" and f.query_dcl) and not f.query_ddl
        if wanted and (not result.tables or any(f.table(s, t) for s, t in result.tables)):
            self._emit([converter.ddl(ev, result, st.gtid_arg())])
        if not st.in_tx:
            self._boundary(ev, st)

    def _rows(self, ev: E.RowsEvent, converter: EntryConverting, st: _TxState) -> None:
        f = self.filter
        tdef = ev.table
        if tdef is None or ev.rows is None or not f.table(tdef.schema, tdef.table) or not f.dml_kind(ev.kind):
            return
        meta = self.history.table(tdef.schema, tdef.table)
        if meta is None:
            if f.table_error:
                log.warning("%s: skipping rows of unknown table %s.%s at %s:%s", self.config.destination,
                            tdef.schema, tdef.table, ev.file, ev.position)
                return
            raise UnknownTableError(f"rows for {tdef.schema}.{tdef.table} at {ev.file}:{ev.position}, a table the "
                                    f"schema history does not know")
        keep = f.columns(tdef.schema, tdef.table, [c.name for c in meta.columns])
        if keep is not None:  # field filters: dropped columns become ABSENT, which entries leave out
            ev = dataclasses.replace(ev, rows=_mask_rows(ev.rows, ev.kind, keep))
        self._emit([converter.rows(ev, meta, st.gtid_arg())])

    # ---- positions -----------------------------------------------------------------------------

    def _pos(self, ev: E.Event, st: _TxState) -> EntryPosition:
        return EntryPosition(journal_name=ev.file or "", position=ev.position or 0, server_id=ev.server_id,
                             timestamp=ev.timestamp * 1000, gtid=st.gtid_text())

    def _boundary(self, ev: E.Event, st: _TxState) -> None:
        self.transactions += 1
        if ev.file is None or not ev.log_pos:
            return
        # server_id: the source's own @@server_id, not the event's origin (which differs when the source
        # is itself a replica), so a restart can tell that another server took over the address
        pos = EntryPosition(journal_name=ev.file, position=ev.log_pos, server_id=self._source_server_id,
                            timestamp=ev.timestamp * 1000, gtid=st.gtid_text())
        recorded = LogPosition(identity=self.source.identity, position=pos)
        self.positions.persist(self.config.destination, recorded)
        self._recorded = (recorded, ev, self._source_uuid)
        self.history.maybe_snapshot(pos)  # periodic (canal.instance.tsdb.snapshot.interval)

    def _emit(self, entries: list[Any]) -> None:
        entries = [e for e in entries if e is not None]
        if entries:
            t0 = time.monotonic()
            self.sink(entries)  # blocks until stored
            self.sink_blocking += time.monotonic() - t0
            self.entries += len(entries)

    # ---- heartbeat detection -------------------------------------------------------------------

    def _detect(self) -> None:
        failures = 0
        c = self.config
        while not self._stop.wait(c.detecting_interval):
            src = self.source
            try:
                conn = pymysql.connect(host=src.host, port=src.port, user=src.user, password=src.password,
                                       ssl=src.ssl, connect_timeout=max(1, int(c.detecting_interval)),
                                       read_timeout=max(1, int(c.detecting_interval)))
                try:
                    with conn.cursor() as cur:
                        cur.execute(c.detecting_sql)
                        cur.fetchall()
                finally:
                    conn.close()
                failures = 0
            except (pymysql.err.MySQLError, OSError) as e:
                failures += 1
                log.warning("%s: heartbeat to %s failed (%d/%d): %s", c.destination, src.address, failures,
                            c.detecting_retry_threshold, e)
                if failures > c.detecting_retry_threshold and c.heartbeat_ha_enable and c.standby is not None:
                    failures = 0
                    self._switch_requested.set()
                    self._close_conn()


def _mask_rows(rows: list[Any], kind: str, keep: list[bool]) -> list[Any]:
    def mask(row: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(v if k else ABSENT for v, k in zip(row, keep, strict=True))

    if kind == "update":
        return [(mask(b), mask(a)) for b, a in rows]
    return [mask(r) for r in rows]


class _TxState:
    """GTID and transaction tracking across events of one dump.

    ``by_gtid``: the dump goes by GTID (gtidon with a start GTID). Only then do entries and recorded positions
    carry GTIDs, as Canal's decoder fills them only when its dump was given a GTID set: the executed set
    (Header.gtid) and, for a MySQL GTID event, curtGtid / curtGtidSn / curtGtidLct."""

    def __init__(self, gtid_state: MySQLGtidSet | MariaGtidPosition | None, *, by_gtid: bool = True) -> None:
        self.gtid_state = gtid_state
        self.by_gtid = by_gtid
        self.gtid_event: E.GtidEvent | None = None  # the last MySQL GTID event (Canal's context keeps it too)
        self.pending_gtid: str | None = None
        self.standalone = False
        self.in_tx = False
        self.begin_position: int | None = None
        self._text_for: str | None = None  # the pending GTID whose set text is cached in _text
        self._text = ""

    @staticmethod
    def _apply(state: MySQLGtidSet | MariaGtidPosition, g: str) -> None:
        if isinstance(state, MariaGtidPosition):
            d, s, n = (int(x) for x in g.split("-"))
            state.update(d, s, n)
        else:
            uuid, _, rest = g.partition(":")
            tag, _, gno = rest.rpartition(":")
            state.add(uuid, int(gno), tag)

    def commit(self) -> None:
        g = self.pending_gtid
        if g is not None and self.gtid_state is not None:
            self._apply(self.gtid_state, g)
        self.pending_gtid = None
        self.in_tx = False

    def gtid_arg(self) -> GtidInfo | str:
        """What the converter puts in an entry's header (Header.gtid and the curtGtid props)."""
        text = self.gtid_text()
        ev = self.gtid_event
        if not text or ev is None:
            return text
        # Canal prints the logical clock as 0 when the event has none (MySQL 5.6)
        return GtidInfo(executed=text, current=ev.gtid, sequence_number=ev.sequence_number or 0,
                        last_committed=ev.last_committed or 0)

    def gtid_text(self, current: str | None = None) -> str:
        """The executed set the entries of the current transaction carry: as Canal's LogDecoder does, it already
        includes the transaction's own GTID from its GTID event on (the resume state adds it only at commit).
        Empty unless the dump goes by GTID."""
        if self.gtid_state is None or not self.by_gtid:
            return ""
        g = self.pending_gtid
        if g is None:
            return str(self.gtid_state)
        if self._text_for != g:
            ahead = self.gtid_state.copy()
            self._apply(ahead, g)
            self._text_for, self._text = g, str(ahead)
        return self._text
