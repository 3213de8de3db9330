"""Decoded binlog events -> Canal Entries, as Canal's LogEventConvert builds them.

API (pure functions of their inputs; no server needed)::

    conv = EntryConverter(identity, timezone=None)
    conv.begin(query_begin_or_maria_gtid, gtid)   TRANSACTIONBEGIN (threadId from the BEGIN query)
    conv.end(xid_or_commit_query, gtid)           TRANSACTIONEND (transactionId = XID, "0" for COMMIT)
    conv.rows(rows_event, table_meta, gtid)       ROWDATA with RowChange{tableId, INSERT/UPDATE/DELETE, rows}
    conv.ddl(query_event, ddl_result, gtid)       ROWDATA with RowChange{isDdl, sql, ddlSchemaName, type}
    conv.query(query_event, ddl_result, gtid)     any QUERY event, dispatched as Canal's parseQueryEvent
                                                  (XA START/END/COMMIT/ROLLBACK, BEGIN, COMMIT, else ddl)
    conv.rows_query(rows_query_or_annotate, table="", gtid)   ROWDATA QUERY entry with the original SQL
    conv.gtid_log(gtid_or_maria_gtid_or_list, gtid)           GTIDLOG entry
    conv.master_heartbeat(heartbeat_event)        HEARTBEAT entry (header eventType MHEARTBEAT only)
    EntryConverter.heartbeat(now_ms)              HEARTBEAT entry of the parser's idle timer
    conv.log_position(entry)                      LogPosition(identity, entry.position)

``gtid`` is a ``GtidInfo`` (executed set -> Header.gtid; current GTID, sequence number and last
committed -> props curtGtid, curtGtidSn, curtGtidLct), a bare executed-set string, or None.
Every method returns a ``CanalEntry`` (canal_core.entry.model) whose protobuf bytes are built lazily.

Header (LogEventConvert.createHeader): version 1, logfileName, logfileOffset = the event's start
offset, serverId, serverenCode "UTF-8", executeTime = header timestamp x 1000, sourceType MYSQL,
schemaName/tableName, eventLength, eventType (absent on transaction begin/end), props curtGtid /
curtGtidSn / curtGtidLct when known and rowsCount (> 0) on row changes, gtid when non-empty.

Column fields and value texts: ``columns`` (what Canal writes for each binlog type), ``rowdata``
(the RowData bytes) and ``rowcodegen`` (the same bytes from generated encoders).
"""

from __future__ import annotations

import datetime as _dt
import zoneinfo

from ..binlog import events as E
from ..binlog.tablemap import TableDef
from ..parse.model import (
    EVENT_DELETE,
    EVENT_GTID,
    EVENT_INSERT,
    EVENT_MHEARTBEAT,
    EVENT_QUERY,
    EVENT_UPDATE,
    EVENT_XACOMMIT,
    EVENT_XAROLLBACK,
    DdlResult,
    GtidInfo,
    SchemaMismatchError,
    TableMeta,
)
from ..protocol import wire as W
from ..protocol.position import EntryPosition, LogIdentity, LogPosition
from .columns import column_formatter
from .model import (
    ENTRY_GTIDLOG,
    ENTRY_HEARTBEAT,
    ENTRY_ROWDATA,
    ENTRY_TRANSACTIONBEGIN,
    ENTRY_TRANSACTIONEND,
    CanalEntry,
)
from .rowcodegen import TablePlan
from .rowdata import ColPlan

__all__ = [
    "EntryConverter",
    "GtidInfo",
    "classify_query",
]


VERSION = 1
SERVER_ENCODE = "UTF-8"
SOURCE_MYSQL = 2

_ROWS_EVENT_TYPE = {"write": EVENT_INSERT, "update": EVENT_UPDATE, "delete": EVENT_DELETE}
_DML_TYPES = frozenset({EVENT_INSERT, EVENT_UPDATE, EVENT_DELETE})


GtidArg = GtidInfo | str | None


def classify_query(sql: str) -> str:
    """How Canal's parseQueryEvent treats a QUERY event, in its order of tests: "xa_start", "xa_end",
    "xa_commit", "xa_rollback" (statement starts with it, any case), "begin", "commit" (statement
    ends with it, any case), else "other" (DDL, DCL or statement-based DML)."""
    head = sql[:11].upper()
    if head.startswith("XA START"):
        return "xa_start"
    if head.startswith("XA END"):
        return "xa_end"
    if head.startswith("XA COMMIT"):
        return "xa_commit"
    if head.startswith("XA ROLLBACK"):
        return "xa_rollback"
    tail = sql[-6:].upper()
    if tail.endswith("BEGIN"):
        return "begin"
    if tail == "COMMIT":
        return "commit"
    return "other"


def _xa_xid(sql: str, marker: str) -> str:
    # Canal: StringUtils.substringAfter(query, marker): case-sensitive, "" when not found
    i = sql.find(marker)
    return sql[i + len(marker):] if i >= 0 else ""


# --- protobuf fragments ---------------------------------------------------------------------------

_VERSION_F = W.field_oneof_int(1, VERSION)
_ENCODE_F = W.field_str(5, SERVER_ENCODE)
_SOURCE_F = W.field_oneof_int(7, SOURCE_MYSQL)
_ISDDL_FALSE = W.field_oneof_int(10, 0)
_ISDDL_TRUE = W.field_oneof_int(10, 1)
_ENTRY_HEADER_KEY = W.key(1, W.LEN)
_varint = W.varint


def _entry_bytes(header: bytes, entry_type: int, store: bytes) -> bytes:
    return W.field_message(1, header) + W.field_oneof_int(2, entry_type) + W.field_bytes(3, store)


_ENTRY_ROWDATA_F = W.field_oneof_int(2, ENTRY_ROWDATA)
_STORE_KEY = W.key(3, W.LEN)


def _rows_entry_bytes(header: bytes, store_head: bytes, rows: bytes) -> bytes:
    """_entry_bytes(header, ENTRY_ROWDATA, store_head + rows) in one join: a rows entry is tens of KB,
    and each ``+`` of the general form copies all of it again."""
    n = len(store_head) + len(rows)
    if not n:
        return _entry_bytes(header, ENTRY_ROWDATA, b"")
    return b"".join((_ENTRY_HEADER_KEY, _varint(len(header)), header, _ENTRY_ROWDATA_F, _STORE_KEY, _varint(n),
                     store_head, rows))


_TABLE_PLANS: dict[tuple[object, ...], TablePlan] = {}


class EntryConverter:
    """Builds Canal entries from decoded events; see the module docstring.

    ``identity`` is the source (kept for callers building positions); ``timezone`` the zone TIMESTAMP
    values are printed in (None: this process's local zone, as Canal uses its JVM's default zone).
    """

    def __init__(self, identity: LogIdentity | None = None, *, timezone: str | _dt.tzinfo | None = None) -> None:
        self.identity = identity or LogIdentity()
        if isinstance(timezone, str):
            timezone = _dt.UTC if timezone.upper() == "UTC" else zoneinfo.ZoneInfo(timezone)
        self.timezone: _dt.tzinfo | None = timezone
        self._plans: dict[tuple[int, int], tuple[TableDef, TableMeta | None, TablePlan]] = {}

    def log_position(self, entry: CanalEntry) -> LogPosition:
        """Canal's LogPosition of an entry (identity + position), as the parser records it."""
        return LogPosition(identity=self.identity, position=entry.position)

    # ---- header --------------------------------------------------------------------------------

    @staticmethod
    def _start(event: E.Event) -> int:
        if event.position is not None:
            return event.position
        return event.log_pos - event.length if event.log_pos >= event.length else 0

    def _position(self, event: E.Event, gtid: GtidArg) -> EntryPosition:
        executed = gtid.executed if isinstance(gtid, GtidInfo) else (gtid or "")
        return EntryPosition(journal_name=event.file or "", position=self._start(event), server_id=event.server_id,
                             timestamp=event.timestamp * 1000, gtid=executed)

    @staticmethod
    def _header(pos: EntryPosition, event: E.Event, schema: str | None, table: str | None, event_type: int | None,
                gtid: GtidArg, rows_count: int = 0) -> bytes:
        parts = [_VERSION_F, W.field_str(2, pos.journal_name), W.field_int(3, pos.position),
                 W.field_int(4, pos.server_id or 0), _ENCODE_F, W.field_int(6, pos.timestamp or 0), _SOURCE_F,
                 W.field_str(8, schema), W.field_str(9, table), W.field_int(10, event.length)]
        if event_type is not None:
            parts.append(W.field_oneof_int(11, event_type))
        if isinstance(gtid, GtidInfo):
            props = []
            if gtid.current:
                props.append(("curtGtid", gtid.current))
            if gtid.sequence_number is not None:
                props.append(("curtGtidSn", str(gtid.sequence_number)))
            if gtid.last_committed is not None:
                props.append(("curtGtidLct", str(gtid.last_committed)))
            if rows_count > 0:
                props.append(("rowsCount", str(rows_count)))
            parts.append(W.pairs(12, props))
        elif rows_count > 0:
            parts.append(W.pairs(12, [("rowsCount", str(rows_count))]))
        parts.append(W.field_str(13, pos.gtid))
        return b"".join(parts)

    def _simple(self, event: E.Event, gtid: GtidArg, entry_type: int, event_type: int | None, store: bytes,
                schema: str = "", table: str = "", sql: str | None = None) -> CanalEntry:
        pos = self._position(event, gtid)

        def encode() -> bytes:
            return _entry_bytes(self._header(pos, event, schema, table, event_type, gtid), entry_type, store)

        return CanalEntry(entry_type=entry_type, event_type=event_type or 0, schema=schema, table=table,
                          position=pos, event_length=event.length, sql=sql, _encode=encode)

    # ---- transaction boundaries ----------------------------------------------------------------

    def begin(self, event: E.QueryEvent | E.MariaGtidEvent, gtid: GtidArg = None) -> CanalEntry:
        """TRANSACTIONBEGIN: TransactionBegin{threadId} from a "BEGIN" QUERY event. A MariaDB GTID
        event (which replaces BEGIN in MariaDB binlogs) also starts one, with no thread id (Canal
        itself emits a GTIDLOG entry there: see gtid_log)."""
        thread_id = event.thread_id if isinstance(event, E.QueryEvent) else 0
        return self._simple(event, gtid, ENTRY_TRANSACTIONBEGIN, None, W.field_int(4, thread_id))

    def end(self, event: E.XidEvent | E.QueryEvent, gtid: GtidArg = None) -> CanalEntry:
        """TRANSACTIONEND: TransactionEnd{transactionId = XID as a decimal string}; a "COMMIT" QUERY
        event (non-transactional engines, no XID) ends with transactionId "0", as in Canal."""
        xid = event.xid if isinstance(event, E.XidEvent) else 0
        if xid >= 1 << 63:
            xid -= 1 << 64  # Java reads the XID as a signed long
        return self._simple(event, gtid, ENTRY_TRANSACTIONEND, None, W.field_str(2, str(xid)))

    # ---- query events --------------------------------------------------------------------------

    def query(self, event: E.QueryEvent, result: DdlResult | None = None, gtid: GtidArg = None) -> CanalEntry:
        """Any QUERY event, as Canal's parseQueryEvent: XA START / XA END become transaction begin / end
        with XA_TYPE and XA_XID props, XA COMMIT / XA ROLLBACK a ROWDATA entry of type XACOMMIT /
        XAROLLBACK, BEGIN / COMMIT transaction boundaries, anything else ``ddl(event, result)``."""
        sql = event.query
        kind = classify_query(sql)
        if kind == "xa_start":
            store = (W.pairs(3, [("XA_TYPE", "XA START"), ("XA_XID", _xa_xid(sql, "XA START"))])
                     + W.field_int(4, event.thread_id))
            return self._simple(event, gtid, ENTRY_TRANSACTIONBEGIN, None, store)
        if kind == "xa_end":
            store = W.field_str(2, "0") + W.pairs(3, [("XA_TYPE", "XA END"), ("XA_XID", _xa_xid(sql, "XA END"))])
            return self._simple(event, gtid, ENTRY_TRANSACTIONEND, None, store)
        if kind in ("xa_commit", "xa_rollback"):
            marker, et = ("XA COMMIT", EVENT_XACOMMIT) if kind == "xa_commit" else ("XA ROLLBACK", EVENT_XAROLLBACK)
            store = (W.field_oneof_int(2, et) + W.field_str(11, sql)
                     + W.pairs(13, [("XA_TYPE", marker), ("XA_XID", _xa_xid(sql, marker))]))
            return self._simple(event, gtid, ENTRY_ROWDATA, et, store, sql=sql)
        if kind == "begin":
            return self.begin(event, gtid)
        if kind == "commit":
            return self.end(event, gtid)
        if result is None:
            result = DdlResult(event_type=EVENT_QUERY, schema=event.schema, table="", ddl_schema=event.schema)
        return self.ddl(event, result, gtid)

    def ddl(self, event: E.QueryEvent, result: DdlResult, gtid: GtidArg = None) -> CanalEntry:
        """ROWDATA for a DDL (or other non-transactional) statement: header schema/table/eventType from
        the DdlResult; RowChange{eventType, isDdl (false only for INSERT/UPDATE/DELETE statements),
        sql, ddlSchemaName (the session schema, when non-empty)}."""
        et = result.event_type
        ddl_schema = result.ddl_schema or event.schema
        store = (W.field_oneof_int(2, et) + (_ISDDL_FALSE if et in _DML_TYPES else _ISDDL_TRUE)
                 + W.field_str(11, event.query) + W.field_str(14, ddl_schema))
        return self._simple(event, gtid, ENTRY_ROWDATA, et, store, schema=result.schema or "",
                            table=result.table or "", sql=event.query)

    def rows_query(self, event: E.RowsQueryEvent | E.AnnotateRowsEvent, table: str = "",
                   gtid: GtidArg = None) -> CanalEntry:
        """ROWDATA QUERY entry for the original statement of a rows event (MySQL ROWS_QUERY with
        binlog_rows_query_log_events, MariaDB ANNOTATE_ROWS): header schema "", table ``table`` (Canal
        fills it for ROWS_QUERY from its SQL parser, leaves it empty for ANNOTATE_ROWS)."""
        store = W.field_oneof_int(2, EVENT_QUERY) + W.field_str(11, event.query)
        return self._simple(event, gtid, ENTRY_ROWDATA, EVENT_QUERY, store, table=table, sql=event.query)

    # ---- GTID and heartbeats ------------------------------------------------------------------

    def gtid_log(self, event: E.GtidEvent | E.MariaGtidEvent | E.GtidListEvent, gtid: GtidArg = None) -> CanalEntry:
        """GTIDLOG entry (header eventType GTID, storeValue a Pair). For MySQL GTID events Canal's
        builder overwrites its one Pair: with logical clocks it ends as {sequenceNumber: n}, else
        {gtid: uuid:n}; MariaDB: {gtid: domain-server-seq}, GTID_LIST: {gtid: the list}."""
        if isinstance(event, E.GtidEvent):
            if event.last_committed is not None:
                store = W.pair("sequenceNumber", str(event.sequence_number))
            else:
                store = W.pair("gtid", event.gtid)
        elif isinstance(event, E.MariaGtidEvent):
            store = W.pair("gtid", event.gtid)
        else:
            store = W.pair("gtid", event.gtid_position)
        return self._simple(event, gtid, ENTRY_GTIDLOG, EVENT_GTID, store)

    def master_heartbeat(self, event: E.HeartbeatEvent) -> CanalEntry:
        """HEARTBEAT entry for the server's HEARTBEAT_LOG_EVENT: a header holding only eventType
        MHEARTBEAT (Canal sets nothing else). The sink drops heartbeats; they never reach clients."""
        header = W.field_oneof_int(11, EVENT_MHEARTBEAT)
        pos = EntryPosition(journal_name=event.log_file, position=event.log_position, server_id=event.server_id,
                            timestamp=event.timestamp * 1000)
        data = _entry_bytes(header, ENTRY_HEARTBEAT, b"")
        return CanalEntry(entry_type=ENTRY_HEARTBEAT, event_type=EVENT_MHEARTBEAT, schema="", table="",
                          position=pos, _data=data)

    @staticmethod
    def heartbeat(now_ms: int) -> CanalEntry:
        """HEARTBEAT entry of the parser's idle timer (AbstractEventParser heartBeatTimerTask): a header
        holding only executeTime = now in ms."""
        data = _entry_bytes(W.field_int(6, now_ms), ENTRY_HEARTBEAT, b"")
        return CanalEntry(entry_type=ENTRY_HEARTBEAT, event_type=0, schema="", table="",
                          position=EntryPosition(timestamp=now_ms), _data=data)

    # ---- row changes ---------------------------------------------------------------------------

    def rows(self, event: E.RowsEvent, table: TableMeta | None, gtid: GtidArg = None) -> CanalEntry:
        """ROWDATA for a rows event decoded with ``table``'s schema. ``table`` None: names and keys
        from the table map's optional metadata, no mysqlType (Canal's fallback)."""
        tdef = event.table
        if tdef is None or event.rows is None:
            raise ValueError(f"rows event at {event.file}:{self._start(event)} was not decoded")
        et = _ROWS_EVENT_TYPE[event.kind]
        rows = event.rows
        ncols = len(tdef.columns)
        if table is not None and ncols > len(table.columns):
            raise SchemaMismatchError(
                f"column size is not match for table {table.full_name}: the binlog has {ncols} columns, "
                f"the schema history {len(table.columns)}, at {event.file}:{self._start(event)}")
        if table is not None:
            names = tuple(c.name for c in table.columns[:ncols])
        else:
            names = tuple(c.name or "" for c in tdef.columns)
        pos = self._position(event, gtid)
        schema, tname = tdef.schema, tdef.table
        plan = self._plan(tdef, table)

        def encode() -> bytes:
            store_head = W.field_int(1, event.table_id) + W.field_oneof_int(2, et) + _ISDDL_FALSE
            header = self._header(pos, event, schema, tname, et, gtid, len(rows))
            return _rows_entry_bytes(header, store_head, plan.encode(et, rows))

        return CanalEntry(entry_type=ENTRY_ROWDATA, event_type=et, schema=schema, table=tname, position=pos,
                          event_length=event.length, columns=names, rows=rows, _encode=encode)

    def _plan(self, tdef: TableDef, meta: TableMeta | None) -> TablePlan:
        k = (id(tdef), id(meta))
        hit = self._plans.get(k)
        if hit is not None and hit[0] is tdef and hit[1] is meta:
            return hit[2]
        if len(self._plans) >= 1024:
            self._plans.clear()
        # the same layout under new objects (a table map re-read after DDL, another converter) keeps
        # its plan: generated encoders are compiled once per layout, not per object
        layout = (tdef, meta, self.timezone)
        vkey: tuple[object, ...] | None = layout
        try:
            plan = _TABLE_PLANS.get(layout)
        except TypeError:  # unhashable values in hand-built metadata
            vkey, plan = None, None
        if plan is None:
            plan = TablePlan(self._columns(tdef, meta))
            if vkey is not None:
                if len(_TABLE_PLANS) >= 1024:
                    _TABLE_PLANS.clear()
                _TABLE_PLANS[vkey] = plan
        self._plans[k] = (tdef, meta, plan)
        return plan

    def _columns(self, tdef: TableDef, meta: TableMeta | None) -> list[ColPlan]:
        pk = set(tdef.primary_key)
        plans = []
        for i, col in enumerate(tdef.columns):
            cm = meta.columns[i] if meta is not None else None
            if cm is not None:
                name, is_key, mysql_type = cm.name, cm.is_key, cm.column_type
            else:
                name, is_key, mysql_type = col.name or "", i in pk, ""
            fmt, null_type, fast = column_formatter(col, cm, self.timezone)
            plans.append(ColPlan(i, fmt, null_type, name, is_key, mysql_type, fast))
        return plans

