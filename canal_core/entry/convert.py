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

Column (LogEventConvert.parseOneRow + RowsLogBuffer.fetchValue/mysqlToJavaType):

- index = position in the table; name, isKey, mysqlType from the TableMeta (mysqlType = COLUMN_TYPE
  text); columns the row image omits (ABSENT) are left out; ``length`` is never set (Canal doesn't).
- isNull is always written (false or true); ``updated``: INSERT after columns true (Canal compares
  with an empty before image), DELETE and UPDATE before columns false, UPDATE after columns true
  when the value text or null-ness differs from the before column of the same index (or that
  column is absent from the before image).
- sqlType (java.sql.Types) by binlog column type, for a non-NULL value:
  TINYINT -6 / SMALLINT 5 / MEDIUMINT, INT 4 / BIGINT -5; an unsigned value above the signed range
  moves up one type (TINYINT->SMALLINT, SMALLINT->INTEGER, MEDIUMINT->INTEGER, INT->BIGINT,
  BIGINT->DECIMAL 3), so the code depends on the value; DECIMAL 3; FLOAT REAL 7; DOUBLE 8; BIT -7;
  DATETIME/TIMESTAMP 93; TIME 92; DATE 91; YEAR VARCHAR 12; ENUM INTEGER 4; SET BIT -7;
  CHAR 1; VARCHAR 12; JSON VARCHAR 12; TEXT types CLOB 2005; BLOB types, BINARY, VARBINARY and
  GEOMETRY BLOB 2004 (a column is binary when its COLUMN_TYPE contains "binary"; text when it is
  exactly tinytext/text/mediumtext/longtext). NULL values keep the type-level code instead:
  the integer/decimal/float/temporal codes above, YEAR 12, ENUM 4, VARCHAR 12, CHAR 1, JSON (and
  anything else) OTHER 1111; the types whose type-level code is BINARY -2, VARBINARY -3 or
  LONGVARBINARY -4 (SET, GEOMETRY, BINARY, VARBINARY, the BLOB and TEXT types) carry CLOB 2005 for a
  text column, else BLOB 2004, as Canal 1.1.7+ does (1.1.6 and older sent the -2/-3/-4 codes).
- value text: integers in decimal (unsigned as unsigned); DECIMAL as Canal's decoder writes it
  (entry/decimals.py: zero digits after the last full 9-digit word are left out, so DECIMAL(12,2)
  1.00 is "1.0"); FLOAT/DOUBLE as Java Float/Double.toString (javafmt);
  BIT and SET as the unsigned number; ENUM as its 1-based index (0 for the invalid ''), as Canal
  does; YEAR as the year, "0000" for 0; DATE "YYYY-MM-DD"; DATETIME "YYYY-MM-DD HH:MM:SS" plus
  "." and exactly fsp fraction digits when the column has fsp > 0; TIME "[-]HH:MM:SS[.f]" (hours
  unpadded from 100 on); zero dates as "0000-00-00[ 00:00:00[.000]]"; TIMESTAMP in the converter's
  time zone (Canal prints java.sql.Timestamp in the JVM default zone, i.e. the Canal host's local
  zone: ``timezone=None`` here means the local zone of this process; pass "UTC" or any IANA name
  to pin it); BLOB/BINARY/GEOMETRY bytes as an ISO-8859-1 string (one char per byte); CHAR,
  VARCHAR and TEXT text as decoded in the column's charset (Canal decodes with its connection
  charset, UTF-8 by default: identical for utf8/utf8mb4/ascii columns); JSON as MySQL prints it.

Deliberate differences from the Java server: text columns in non-UTF-8 charsets are decoded in their
own charset (Canal mis-decodes them with the connection charset); JSON text is MySQL's own rendering
(Canal's JsonConversion prints doubles the Java way, escapes only quote and backslash and prints JSON
DATE values with a time part); a PARTIAL_UPDATE_ROWS JSON column carries the full document after the
update, not Canal's JSON_REPLACE(...) diff text; MariaDB UUID/INET4/INET6 columns carry their text
(CHAR 1) where Canal decodes the raw bytes as a string; VECTOR columns print "[f1,f2,...]" (OTHER 1111)
where Canal fails.
"""

from __future__ import annotations

import datetime as _dt
import zoneinfo
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any, NamedTuple

from ..binlog import events as E
from ..binlog.constants import ColumnType as T
from ..binlog.rows import ABSENT
from ..binlog.tablemap import Column, TableDef
from ..binlog.values import charset_codec, codec_for_collation
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
from .decimals import decimal_formatter
from .javafmt import java_double_to_string, java_float_to_string
from .model import (
    ENTRY_GTIDLOG,
    ENTRY_HEARTBEAT,
    ENTRY_ROWDATA,
    ENTRY_TRANSACTIONBEGIN,
    ENTRY_TRANSACTIONEND,
    CanalEntry,
)

__all__ = [
    "EntryConverter",
    "GtidInfo",
    "JavaTypes",
    "classify_query",
]


class JavaTypes:
    """java.sql.Types codes Canal puts in Column.sqlType."""

    BIT = -7
    TINYINT = -6
    BIGINT = -5
    LONGVARBINARY = -4
    VARBINARY = -3
    BINARY = -2
    CHAR = 1
    DECIMAL = 3
    INTEGER = 4
    SMALLINT = 5
    REAL = 7
    DOUBLE = 8
    VARCHAR = 12
    DATE = 91
    TIME = 92
    TIMESTAMP = 93
    OTHER = 1111
    BLOB = 2004
    CLOB = 2005


J = JavaTypes

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
_ISNULL_FALSE = W.field_oneof_int(6, 0)
_ISNULL_TRUE = W.field_oneof_int(6, 1)
_UPDATED = W.field_int(5, 1)
_IS_KEY = W.field_int(4, 1)
_ISDDL_FALSE = W.field_oneof_int(10, 0)
_ISDDL_TRUE = W.field_oneof_int(10, 1)
_SQLTYPE_F: dict[int, bytes] = {}
_VALUE_KEY = W.key(8, W.LEN)
_BEFORE_KEY = W.key(1, W.LEN)
_AFTER_KEY = W.key(2, W.LEN)
_ROWDATA_KEY = W.key(12, W.LEN)
_ENTRY_HEADER_KEY = W.key(1, W.LEN)
_varint = W.varint


def _sqltype_f(code: int) -> bytes:
    f = _SQLTYPE_F.get(code)
    if f is None:
        f = _SQLTYPE_F[code] = W.field_int(2, code)
    return f


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


# --- value formatting -------------------------------------------------------------------------------

def _to_latin1(v: Any) -> str:
    if isinstance(v, bytes | bytearray | memoryview):
        return bytes(v).decode("latin-1")
    return str(v).encode("utf-8", "replace").decode("latin-1")


def _date_text(v: Any) -> str:
    if isinstance(v, _dt.date):
        return f"{v.year:04d}-{v.month:02d}-{v.day:02d}"
    return str(v)


def _datetime_text(v: Any, fsp: int) -> str:
    if isinstance(v, _dt.datetime):
        text = v.isoformat(" ")  # "YYYY-MM-DD HH:MM:SS[.ffffff][+HH:MM]", year zero-padded to 4 digits
        if fsp:
            return text[:19] + "." + (text[20:20 + fsp] if v.microsecond else "000000"[:fsp])
        return text[:19]
    return str(v)  # zero / invalid dates: the decoder keeps MySQL's text, with fsp digits


def _time_text(v: Any, fsp: int) -> str:
    if not isinstance(v, _dt.timedelta):
        return str(v)
    us = (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds
    sign = "-" if us < 0 else ""
    secs, frac = divmod(abs(us), 1_000_000)
    h = secs // 3600
    text = f"{sign}{h:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}"
    if fsp:
        text += "." + f"{frac:06d}"[:fsp]
    return text


_Fmt = Callable[[Any], tuple[int, str]]


class _Fast(NamedTuple):
    """A column formatter's inline form in generated encoders, for its usual value type (_fast_code)."""

    kind: str
    sql_type: int
    arg: Any = None


# key, body up to the value's length field, body length without the value and its length, head of ""
_HeadInfo = tuple[bytes, bytes, int, bytes]


class _ColPlan:
    """One column's formatter and its constant protobuf fragments."""

    __slots__ = ("_heads", "fast", "fmt", "head", "index", "mid", "null_pre", "pre", "tail")

    def __init__(self, index: int, fmt: _Fmt, null_type: int, name: str, is_key: bool, mysql_type: str,
                 fast: _Fast | None = None) -> None:
        self.index = index
        self.fmt = fmt
        self.fast = fast
        self.head = W.field_int(1, index)
        self.mid = W.field_str(3, name) + (_IS_KEY if is_key else b"")
        self.tail = W.field_str(10, mysql_type)
        self.pre: dict[int, bytes] = {}  # sqlType -> index + sqlType + name + isKey fields
        self.null_pre = self.prefix(null_type)
        self._heads: dict[tuple[int, bytes, bool], tuple[dict[int, bytes], _HeadInfo]] = {}

    def prefix(self, sql_type: int) -> bytes:
        p = self.pre.get(sql_type)
        if p is None:
            p = self.pre[sql_type] = self.head + _sqltype_f(sql_type) + self.mid
        return p

    def heads(self, sql_type: int, key: bytes, updated: bool) -> tuple[dict[int, bytes], _HeadInfo]:
        """For generated encoders: (heads, info). heads[n] (n < 128, filled by _head as lengths show
        up) is what precedes a value of n bytes in a non-NULL Column field: ``key``, the field's
        length and the Column's fields up to the value's length."""
        k = (sql_type, key, updated)
        h = self._heads.get(k)
        if h is None:
            pre = self.prefix(sql_type) + (_UPDATED if updated else b"")
            prefix = pre + _ISNULL_FALSE_VALUE
            empty = pre + _ISNULL_FALSE  # an empty text has no value field
            h = self._heads[k] = ({}, (key, prefix, len(prefix) + len(self.tail),
                                       key + _varint(len(empty) + len(self.tail)) + empty))
        return h

    def null_head(self, key: bytes, updated: bool) -> bytes:
        """A NULL Column field without its tail."""
        body = self.null_pre + (_UPDATED if updated else b"") + _ISNULL_TRUE
        return key + _varint(len(body) + len(self.tail)) + body


class _TablePlan:
    """A table layout's column plans and its generated row encoders, one per event type.

    An encoder is generated once the layout has had _GENERATE_AFTER_ROWS rows of its event type:
    compiling one costs about what it saves on ~100 rows, so tables that see a few rows (or keep
    falling out of the caches) stay on the generic path and cost neither compile time nor memory."""

    __slots__ = ("cols", "encoders", "seen")

    def __init__(self, cols: list[_ColPlan]) -> None:
        self.cols = cols
        self.encoders: dict[int, Callable[[list[Any]], bytes]] = {}
        self.seen: dict[int, int] = {}  # rows encoded by the generic path, by event type

    def encode(self, et: int, rows: list[Any]) -> bytes:
        fn = self.encoders.get(et)
        if fn is None:
            seen = self.seen.get(et, 0) + len(rows)
            if seen < _GENERATE_AFTER_ROWS:
                self.seen[et] = seen
                return _encode_rows(self.cols, et, rows)
            fn = self.encoders[et] = _build_encoder(self.cols, et)
        return fn(rows)


_GENERATE_AFTER_ROWS = 64


_TABLE_PLANS: dict[tuple, _TablePlan] = {}


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
        self._plans: dict[tuple[int, int], tuple[TableDef, TableMeta | None, _TablePlan]] = {}

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

    def _plan(self, tdef: TableDef, meta: TableMeta | None) -> _TablePlan:
        k = (id(tdef), id(meta))
        hit = self._plans.get(k)
        if hit is not None and hit[0] is tdef and hit[1] is meta:
            return hit[2]
        if len(self._plans) >= 1024:
            self._plans.clear()
        # the same layout under new objects (a table map re-read after DDL, another converter) keeps
        # its plan: generated encoders are compiled once per layout, not per object
        try:
            vkey: tuple | None = (tdef, meta, self.timezone)
            plan = _TABLE_PLANS.get(vkey)
        except TypeError:  # unhashable values in hand-built metadata
            vkey, plan = None, None
        if plan is None:
            plan = _TablePlan(self._columns(tdef, meta))
            if vkey is not None:
                if len(_TABLE_PLANS) >= 1024:
                    _TABLE_PLANS.clear()
                _TABLE_PLANS[vkey] = plan
        self._plans[k] = (tdef, meta, plan)
        return plan

    def _columns(self, tdef: TableDef, meta: TableMeta | None) -> list[_ColPlan]:
        pk = set(tdef.primary_key)
        plans = []
        for i, col in enumerate(tdef.columns):
            cm = meta.columns[i] if meta is not None else None
            if cm is not None:
                name, is_key, mysql_type = cm.name, cm.is_key, cm.column_type
            else:
                name, is_key, mysql_type = col.name or "", i in pk, ""
            fmt, null_type, fast = self._formatter(col, cm)
            plans.append(_ColPlan(i, fmt, null_type, name, is_key, mysql_type, fast))
        return plans

    def _formatter(self, col: Column, cm: Any) -> tuple[_Fmt, int, _Fast | None]:
        """(value -> (sqlType, text), sqlType of a NULL, the generated code's inline form of the
        formatter for the usual value type, or None) for one column."""
        t = col.type
        ctype = (cm.column_type if cm is not None else "").lower()
        if t in _INT_BITS:
            base, bits, bumped = _INT_BITS[t]
            unsigned = cm.unsigned if cm is not None else col.unsigned
            return _int_fmt(base, bits, bumped, unsigned), base, _Fast("uint" if unsigned else "int", base,
                                                                        1 << (bits - 1))
        if t in (T.NEWDECIMAL, T.DECIMAL):
            dec = decimal_formatter(col.scale)
            return (lambda v: (J.DECIMAL, dec(v))), J.DECIMAL, _Fast("decimal", J.DECIMAL, dec)
        if t == T.FLOAT:
            return (lambda v: (J.REAL, java_float_to_string(v))), J.REAL, None
        if t == T.DOUBLE:
            return (lambda v: (J.DOUBLE, java_double_to_string(v))), J.DOUBLE, _Fast("double", J.DOUBLE)
        if t == T.BIT:
            return (lambda v: (J.BIT, str(v))), J.BIT, _Fast("bit", J.BIT)
        if t in (T.TIMESTAMP, T.TIMESTAMP2):
            fsp = col.fsp if t == T.TIMESTAMP2 else 0
            tz = self.timezone

            def ts(v: Any) -> tuple[int, str]:
                if isinstance(v, _dt.datetime):
                    v = v.astimezone(tz) if tz is not None else v.astimezone()
                return J.TIMESTAMP, _datetime_text(v, fsp)

            return ts, J.TIMESTAMP, _Fast("timestamp", J.TIMESTAMP, (fsp, tz))
        if t in (T.DATETIME, T.DATETIME2):
            fsp = col.fsp if t == T.DATETIME2 else 0
            return (lambda v: (J.TIMESTAMP, _datetime_text(v, fsp))), J.TIMESTAMP, _Fast("datetime", J.TIMESTAMP, fsp)
        if t in (T.TIME, T.TIME2):
            fsp = col.fsp if t == T.TIME2 else 0
            return (lambda v: (J.TIME, _time_text(v, fsp))), J.TIME, None
        if t in (T.DATE, T.NEWDATE):
            return (lambda v: (J.DATE, _date_text(v))), J.DATE, _Fast("date", J.DATE)
        if t == T.YEAR:
            return (lambda v: (J.VARCHAR, "0000" if not v else str(v))), J.VARCHAR, None
        if t == T.ENUM:
            values = (cm.enum_values if cm is not None else None) or col.enum_values or ()
            index = {v: i + 1 for i, v in enumerate(values)}
            return ((lambda v: (J.INTEGER, str(v if isinstance(v, int) else index.get(v, 0)))), J.INTEGER,
                    _Fast("enum", J.INTEGER, {k: str(i) for k, i in index.items()}))
        if t == T.SET:
            values = (cm.set_values if cm is not None else None) or col.set_values or ()
            bit = {v: 1 << i for i, v in enumerate(values)}
            return (lambda v: (J.BIT, str(v if isinstance(v, int) else _set_mask(v, bit)))), J.BLOB, None
        if t in (T.BLOB, T.TINY_BLOB, T.MEDIUM_BLOB, T.LONG_BLOB):
            # a NULL carries the code its values carry (Canal 1.1.7+ maps its -3/-4 to CLOB/BLOB)
            if ctype in _TEXT_TYPES or (cm is None and col.collation not in (None, 63)):
                decode = _text_decoder(col, cm)
                return (lambda v: (J.CLOB, decode(v))), J.CLOB, _Fast("str", J.CLOB)
            return (lambda v: (J.BLOB, _to_latin1(v))), J.BLOB, _Fast("latin1", J.BLOB)
        if t in (T.VARCHAR, T.VAR_STRING, T.STRING):
            binary = "binary" in ctype if cm is not None else col.collation == 63
            if binary:
                return (lambda v: (J.BLOB, _to_latin1(v))), J.BLOB, _Fast("latin1", J.BLOB)
            st = J.CHAR if t == T.STRING else J.VARCHAR
            decode = _text_decoder(col, cm)
            return (lambda v: (st, decode(v))), st, _Fast("str", st)
        if t == T.JSON:
            return ((lambda v: (J.VARCHAR, v if isinstance(v, str) else _text_decoder(col, cm)(v))), J.OTHER,
                    _Fast("str", J.VARCHAR))
        if t == T.GEOMETRY:
            return (lambda v: (J.BLOB, _to_latin1(v))), J.BLOB, _Fast("latin1", J.BLOB)
        if t == T.VECTOR:
            return ((lambda v: (J.OTHER, "[" + ",".join(java_float_to_string(x) for x in v) + "]")), J.OTHER,
                    None)
        return (lambda v: (J.OTHER, _to_latin1(v) if isinstance(v, bytes) else str(v))), J.OTHER, None


_TEXT_TYPES = frozenset({"tinytext", "text", "mediumtext", "longtext"})

# binlog integer type -> (sqlType, bits, sqlType of an unsigned value above the signed range)
_INT_BITS = {
    T.TINY: (J.TINYINT, 8, J.SMALLINT),
    T.SHORT: (J.SMALLINT, 16, J.INTEGER),
    T.INT24: (J.INTEGER, 24, J.INTEGER),
    T.LONG: (J.INTEGER, 32, J.BIGINT),
    T.LONGLONG: (J.BIGINT, 64, J.DECIMAL),
}


def _int_fmt(base: int, bits: int, bumped: int, unsigned: bool) -> _Fmt:
    half = 1 << (bits - 1)
    full = 1 << bits
    if unsigned:
        def fmt(v: Any) -> tuple[int, str]:
            v = int(v)
            if v < 0:
                v += full
            return (bumped if v >= half else base), str(v)
    else:
        def fmt(v: Any) -> tuple[int, str]:
            v = int(v)
            if v >= half:
                v -= full
            return base, str(v)
    return fmt


def _set_mask(v: str, bit: dict[str, int]) -> int:
    mask = 0
    if v:
        for part in v.split(","):
            mask |= bit.get(part, 0)
    return mask


def _text_decoder(col: Column, cm: Any) -> Callable[[Any], str]:
    codec: str | None = None
    try:
        if cm is not None and cm.charset:
            codec = charset_codec(cm.charset)
        elif col.collation is not None:
            codec = codec_for_collation(col.collation)
    except (ValueError, KeyError):
        codec = None
    codec = codec or "utf-8"

    def decode(v: Any) -> str:
        if isinstance(v, str):
            return v
        if isinstance(v, bytes | bytearray | memoryview):
            return bytes(v).decode(codec, "replace")
        return str(v)

    return decode


_LEN1 = [bytes([i]) for i in range(128)]
_NOT_UPDATED, _ALL_UPDATED, _COMPARE = 0, 1, 2
_ISNULL_FALSE_VALUE = _ISNULL_FALSE + _VALUE_KEY


def _encode_rows(plans: Sequence[_ColPlan], et: int, rows: list[Any]) -> bytes:
    out = []
    for row in rows:
        if et == EVENT_UPDATE:
            before, after = row
            texts: dict[int, str | None] = {}
            parts = _encode_image(plans, before, _BEFORE_KEY, _NOT_UPDATED, texts)
            parts += _encode_image(plans, after, _AFTER_KEY, _COMPARE, texts)
        elif et == EVENT_INSERT:
            parts = _encode_image(plans, row, _AFTER_KEY, _ALL_UPDATED, None)
        else:
            parts = _encode_image(plans, row, _BEFORE_KEY, _NOT_UPDATED, None)
        rd = b"".join(parts)
        n = len(rd)
        out.append(_ROWDATA_KEY)
        out.append(_LEN1[n] if n < 128 else _varint(n))
        out.append(rd)
    return b"".join(out)


def _encode_image(plans: Sequence[_ColPlan], image: Sequence[Any], key: bytes, mode: int,
                  texts: dict[int, str | None] | None) -> list[bytes]:
    """The Column fields (key, length, body) of one row image. ``mode``: updated=false everywhere
    (before images, deletes), true everywhere (inserts: no before image), or true where the text
    differs from ``texts`` (the before image's, by index; filled when mode is not _COMPARE)."""
    out: list[bytes] = []
    append = out.append
    fill = texts is not None and mode != _COMPARE
    for plan, v in zip(plans, image, strict=False):
        if v is ABSENT:
            continue
        if v is None:
            text = None
            pre = plan.null_pre
        else:
            st, text = plan.fmt(v)
            pre = plan.pre.get(st) or plan.prefix(st)
        if fill:
            texts[plan.index] = text  # type: ignore[index]
        if mode == _NOT_UPDATED:
            upd = b""
        elif mode == _ALL_UPDATED:
            upd = _UPDATED
        else:
            i = plan.index
            upd = b"" if (i in texts and texts[i] == text) else _UPDATED  # type: ignore[operator,index]
        if text is None:
            body = b"".join((pre, upd, _ISNULL_TRUE, plan.tail))
        elif text:
            vb = text.encode("utf-8", "replace")
            n = len(vb)
            body = b"".join((pre, upd, _ISNULL_FALSE_VALUE, _LEN1[n] if n < 128 else _varint(n), vb, plan.tail))
        else:
            body = b"".join((pre, upd, _ISNULL_FALSE, plan.tail))
        n = len(body)
        append(key)
        append(_LEN1[n] if n < 128 else _varint(n))
        append(body)
    return out


# --- generated row encoders -----------------------------------------------------------------------
#
# _encode_image pays a formatter call, a tuple, dict lookups and two joins per column: ~3x the work of
# the encoders below, which are generated per table layout and event type (kept in its _TablePlan)
# and write the same bytes. Each column's usual value type is formatted inline (_fast_code); all that
# precedes a value (Column key and length, index, sqlType, name, isKey, updated, isNull, value key and
# length) is one table lookup by value length (_ColPlan.heads), the tail (mysqlType) a constant; a
# row is one join. Other value types, and types without an inline form, go through the column's
# formatter as _encode_image does, which stays the reference (tests/unit/test_entry_encoder_generated).

def _head(heads: dict[int, bytes], info: _HeadInfo, n: int) -> bytes:
    """heads[n], computed (and kept when n < 128: the table stays small) from info = _ColPlan.heads()[1]."""
    key, prefix, const, empty = info
    if n:
        ln = _varint(n)
        h = key + _varint(const + len(ln) + n) + prefix + ln
    else:
        h = empty
    if n < 128:
        heads[n] = h
    return h


def _join_present(parts: tuple[Any, ...]) -> bytes:
    """Row data from (head, value, tail) triples, leaving out ABSENT columns (head None)."""
    return b"".join(b"".join(parts[i:i + 3]) for i in range(0, len(parts), 3) if parts[i] is not None)


_ROWDATA_HEAD = [_ROWDATA_KEY + _LEN1[n] for n in range(128)]
_ROWDATA_LOW = [_ROWDATA_KEY + bytes([n | 0x80]) for n in range(128)]  # + the second byte of a length < 16384
_D2 = [f"{i:02d}" for i in range(100)]
_D3 = [f"{i:03d}" for i in range(1000)]
_ENCODE_REPLACE = '.encode("utf-8", "replace")'  # Java writes unpaired surrogates as '?'


def _datetime_code(x: str, fsp: int) -> str:
    """_datetime_text of datetime ``x`` (with ``y``, ``us`` its year and microsecond): isoformat goes
    through printf, table lookups cost half."""
    text = (f"{{_D2[y // 100]}}{{_D2[y % 100]}}-{{_D2[{x}.month]}}-{{_D2[{x}.day]}} "
            f"{{_D2[{x}.hour]}}:{{_D2[{x}.minute]}}:{{_D2[{x}.second]}}")
    if not fsp:
        return f'f"{text}"'
    if fsp == 3:
        return f'f"{text}.{{_D3[us // 1000]}}"'
    code = f'f"{text}.{{_D3[us // 1000]}}{{_D3[us % 1000]}}"'
    return code if fsp >= 6 else f"{code}[:{20 + fsp}]"


def _fast_code(fast: _Fast, v: str, name: Callable[[Any], str]) -> tuple[str, list[str], str]:
    """(guard on ``v``, statements leaving the text in ``t``, how to encode ``t``) for one _Fast; the
    guard selects the value type (exact class) and range for which the text is the formatter's."""
    kind, arg = fast.kind, fast.arg
    if kind == "int":  # _int_fmt: a value of the signed range prints as is
        return f"{v}.__class__ is int and {v} < {arg}", [f"t = str({v})"], ".encode()"
    if kind == "uint":  # values from the upper half move up one sqlType: left to the formatter
        return f"{v}.__class__ is int and 0 <= {v} < {arg}", [f"t = str({v})"], ".encode()"
    if kind == "decimal":  # the column's decimal_text (its scale decides which zero digits are written)
        return f"{v}.__class__ is _Decimal", [f"t = {name(arg)}({v})"], ".encode()"
    if kind == "double":
        # Double.toString prints this range plainly, with repr's digits (the shortest that round-trip);
        # its extra rule for 1-digit results (also weigh 2-digit decimals) only matters where doubles
        # are coarser than 10**(k-1) around d * 10**k, i.e. for subnormals
        return (f"{v}.__class__ is float and (0.001 <= {v} < 1e7 or -1e7 < {v} <= -0.001)", [f"t = repr({v})"],
                ".encode()")
    if kind == "bit":
        return f"{v}.__class__ is int", [f"t = str({v})"], ".encode()"
    if kind in ("datetime", "timestamp"):
        if kind == "timestamp":
            fsp, tz = arg
            first = [f"x = {v}.astimezone({name(tz)})" if tz is not None else f"x = {v}.astimezone()"]
            x = "x"
        else:
            fsp, first, x = arg, [], v
        frac = [f"us = {x}.microsecond"] if fsp else []
        return (f"{v}.__class__ is _datetime", [*first, f"y = {x}.year", *frac, f"t = {_datetime_code(x, fsp)}"],
                ".encode()")
    if kind == "date":
        return (f"{v}.__class__ is _date",
                [f"y = {v}.year", f'''t = f"{{_D2[y // 100]}}{{_D2[y % 100]}}-{{_D2[{v}.month]}}-{{_D2[{v}.day]}}"'''],
                ".encode()")
    if kind == "enum":  # value text -> its 1-based index as text; anything else misses (str keys)
        return f"(t := {name(arg)}.get({v})) is not None", [], ".encode()"
    if kind == "str":
        return f"{v}.__class__ is str", [f"t = {v}"], _ENCODE_REPLACE
    if kind == "latin1":  # one char per byte: never a surrogate
        return f"{v}.__class__ is bytes", [f"t = {v}.decode('latin-1')"], ".encode()"
    raise AssertionError(kind)


def _build_encoder(plans: Sequence[_ColPlan], et: int) -> Callable[[list[Any]], bytes]:
    """rows -> the RowData fields of a ROWDATA RowChange, as _encode_rows(plans, et, rows)."""
    ns: dict[str, Any] = {"_ABSENT": ABSENT, "_Decimal": Decimal, "_datetime": _dt.datetime, "_date": _dt.date,
                          "_head": _head, "_join": _join_present, "_D2": _D2, "_D3": _D3,
                          "_RDH": _ROWDATA_HEAD, "_RDL": _ROWDATA_LOW, "_LEN1": _LEN1, "_RDK": _ROWDATA_KEY,
                          "_varint": _varint, "_generic": lambda row: _encode_rows(plans, et, [row])}
    names: dict[int, str] = {}

    def name(obj: Any) -> str:
        n = names.get(id(obj))
        if n is None:
            n = names[id(obj)] = f"_k{len(names)}"
            ns[n] = obj
        return n

    ncols = len(plans)

    def image(vs: str, slot: int, key: bytes, mode: int, record: bool) -> list[str]:
        """Code setting h<slot+i>, b<slot+i> (head or None for ABSENT, value bytes) for every column;
        ``record``: keep each text in tb<i> (None for NULL) for the after image's updated flags."""
        out: list[str] = []
        compare = mode == _COMPARE
        for i, plan in enumerate(plans):
            v, h, b = f"{vs}{i}", f"h{slot + i}", f"b{slot + i}"
            keep = [f"    tb{i} = t"] if record else []
            if plan.fast is not None:
                guard, stmts, enc = _fast_code(plan.fast, v, name)
                st = plan.fast.sql_type
                out.append(f"if {guard}:")
                if len(stmts) == 1 and stmts[0].startswith("t = ") and not (record or compare):
                    out.append(f"    {b} = ({stmts[0][4:]}){enc}")
                else:
                    out += ["    " + line for line in stmts] + keep + [f"    {b} = t{enc}"]
                if compare:  # updated unless the before image had the same text
                    same, diff = plan.heads(st, key, False), plan.heads(st, key, True)
                    out += [f"    ht, hi = {name(same)} if t == tb{i} else {name(diff)}", "    try:",
                            f"        {h} = ht[len({b})]", "    except KeyError:",
                            f"        {h} = _head(ht, hi, len({b}))"]
                else:
                    ht, hi = plan.heads(st, key, mode == _ALL_UPDATED)
                    out += ["    try:", f"        {h} = {name(ht)}[len({b})]", "    except KeyError:",
                            f"        {h} = _head({name(ht)}, {name(hi)}, len({b}))"]
                out.append(f"elif {v} is None:")
            else:
                out.append(f"if {v} is None:")
            if compare:  # NULL after NULL is not an update
                same_null, diff_null = plan.null_head(key, False), plan.null_head(key, True)
                out.append(f"    {h} = {name(same_null)} if tb{i} is None else {name(diff_null)}")
            else:
                out.append(f"    {h} = {name(plan.null_head(key, mode == _ALL_UPDATED))}")
            out += [f"    {b} = b''", *([f"    tb{i} = None"] if record else [])]
            out += [f"elif {v} is _ABSENT:", f"    {h} = None", f"    {b} = b''", "    absent = True",
                    *([f"    tb{i} = _ABSENT"] if record else [])]
            upd = f"t != tb{i}" if compare else str(mode == _ALL_UPDATED)
            out += ["else:", f"    st, t = {name(plan.fmt)}({v})", *keep, f"    {b} = t{_ENCODE_REPLACE}",
                    f"    ht, hi = {name(plan)}.heads(st, {key!r}, {upd})", f"    n = len({b})",
                    f"    {h} = ht.get(n) or _head(ht, hi, n)"]
        return out

    def unpack(vs: str, row: str) -> str:
        return f"{', '.join(f'{vs}{i}' for i in range(ncols))}, = {row}"

    def triples(slot: int) -> list[str]:
        return [f"h{slot + i}, b{slot + i}, {plans[i].tail!r}" for i in range(ncols)]

    if et == EVENT_UPDATE:
        head = ["before, after = r", unpack("v", "before"), unpack("w", "after")]
        body = image("v", 0, _BEFORE_KEY, _NOT_UPDATED, True) + image("w", ncols, _AFTER_KEY, _COMPARE, False)
        parts = triples(0) + triples(ncols)
    else:
        head = [unpack("v", "r")]
        if et == EVENT_INSERT:
            body = image("v", 0, _AFTER_KEY, _ALL_UPDATED, False)
        else:
            body = image("v", 0, _BEFORE_KEY, _NOT_UPDATED, False)
        parts = triples(0)
    src = "\n".join([
        "def encode(rows):",
        "    out = []",
        "    for r in rows:",
        "        try:",
        *("            " + line for line in head),
        "        except (TypeError, ValueError):  # not a row of this layout: as _encode_rows does",
        "            out.append(_generic(r))",
        "            continue",
        "        absent = False",
        *("        " + line for line in body),
        f"        p = ({', '.join(parts)},)",
        "        rd = _join(p) if absent else b''.join(p)",
        "        n = len(rd)",
        "        if n < 128:",
        "            out.append(_RDH[n])",
        "        elif n < 16384:",
        "            out.append(_RDL[n & 127] + _LEN1[n >> 7])",
        "        else:",
        "            out.append(_RDK + _varint(n))",
        "        out.append(rd)",
        "    return b''.join(out)",
    ])
    exec(compile(src, "<entry encoder>", "exec"), ns)
    fn = ns["encode"]
    fn.__source__ = src  # type: ignore[attr-defined]  # for debugging generated code
    return fn  # type: ignore[no-any-return]
