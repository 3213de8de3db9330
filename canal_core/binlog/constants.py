"""Binlog event type codes, column type codes and flags (from the MySQL/MariaDB replication docs)."""

from __future__ import annotations

from enum import IntEnum

BINLOG_MAGIC = b"\xfebin"

# The largest event (or inflated compressed event) decoded unless configured otherwise: MySQL 8's default
# max_allowed_packet. Events are bounded by the source's max_allowed_packet, so a larger length is a corrupt or
# crafted file; a source that really writes larger events needs the limit raised (BinlogDecoder max_event_size,
# canal-binlog --max-event-size, canal.instance.parser.maxEventSize).
DEFAULT_MAX_EVENT_SIZE = 64 << 20


class EventType(IntEnum):
    UNKNOWN = 0
    START_V3 = 1
    QUERY = 2
    STOP = 3
    ROTATE = 4
    INTVAR = 5
    LOAD = 6
    SLAVE = 7
    CREATE_FILE = 8
    APPEND_BLOCK = 9
    EXEC_LOAD = 10
    DELETE_FILE = 11
    NEW_LOAD = 12
    RAND = 13
    USER_VAR = 14
    FORMAT_DESCRIPTION = 15
    XID = 16
    BEGIN_LOAD_QUERY = 17
    EXECUTE_LOAD_QUERY = 18
    TABLE_MAP = 19
    PRE_GA_WRITE_ROWS = 20
    PRE_GA_UPDATE_ROWS = 21
    PRE_GA_DELETE_ROWS = 22
    WRITE_ROWS_V1 = 23
    UPDATE_ROWS_V1 = 24
    DELETE_ROWS_V1 = 25
    INCIDENT = 26
    HEARTBEAT = 27
    IGNORABLE = 28
    ROWS_QUERY = 29
    WRITE_ROWS_V2 = 30
    UPDATE_ROWS_V2 = 31
    DELETE_ROWS_V2 = 32
    GTID = 33
    ANONYMOUS_GTID = 34
    PREVIOUS_GTIDS = 35
    TRANSACTION_CONTEXT = 36
    VIEW_CHANGE = 37
    XA_PREPARE = 38
    PARTIAL_UPDATE_ROWS = 39
    TRANSACTION_PAYLOAD = 40
    HEARTBEAT_V2 = 41
    GTID_TAGGED = 42
    # MariaDB
    ANNOTATE_ROWS = 160
    BINLOG_CHECKPOINT = 161
    MARIA_GTID = 162
    GTID_LIST = 163
    START_ENCRYPTION = 164
    QUERY_COMPRESSED = 165
    WRITE_ROWS_COMPRESSED_V1 = 166
    UPDATE_ROWS_COMPRESSED_V1 = 167
    DELETE_ROWS_COMPRESSED_V1 = 168
    WRITE_ROWS_COMPRESSED = 169
    UPDATE_ROWS_COMPRESSED = 170
    DELETE_ROWS_COMPRESSED = 171


EVENT_NAMES: dict[int, str] = {e.value: e.name for e in EventType}

# Rows events by code: (kind, version, compressed); kind is "write" | "update" | "delete".
ROWS_EVENTS: dict[int, tuple[str, int, bool]] = {
    EventType.PRE_GA_WRITE_ROWS: ("write", 0, False),
    EventType.PRE_GA_UPDATE_ROWS: ("update", 0, False),
    EventType.PRE_GA_DELETE_ROWS: ("delete", 0, False),
    EventType.WRITE_ROWS_V1: ("write", 1, False),
    EventType.UPDATE_ROWS_V1: ("update", 1, False),
    EventType.DELETE_ROWS_V1: ("delete", 1, False),
    EventType.WRITE_ROWS_V2: ("write", 2, False),
    EventType.UPDATE_ROWS_V2: ("update", 2, False),
    EventType.DELETE_ROWS_V2: ("delete", 2, False),
    EventType.PARTIAL_UPDATE_ROWS: ("update", 2, False),
    EventType.WRITE_ROWS_COMPRESSED_V1: ("write", 1, True),
    EventType.UPDATE_ROWS_COMPRESSED_V1: ("update", 1, True),
    EventType.DELETE_ROWS_COMPRESSED_V1: ("delete", 1, True),
    EventType.WRITE_ROWS_COMPRESSED: ("write", 2, True),
    EventType.UPDATE_ROWS_COMPRESSED: ("update", 2, True),
    EventType.DELETE_ROWS_COMPRESSED: ("delete", 2, True),
}

# Event header flags
LOG_EVENT_BINLOG_IN_USE_F = 0x1
LOG_EVENT_ARTIFICIAL_F = 0x20
LOG_EVENT_RELAY_LOG_F = 0x40
# A replica that does not know the event's type may skip it (MySQL since 5.6; Aurora's padding events set it).
LOG_EVENT_IGNORABLE_F = 0x80

# Checksum algorithms (FORMAT_DESCRIPTION_EVENT, byte at event_length - 5)
CHECKSUM_OFF = 0
CHECKSUM_CRC32 = 1
CHECKSUM_UNDEF = 255


class ColumnType(IntEnum):
    DECIMAL = 0
    TINY = 1
    SHORT = 2
    LONG = 3
    FLOAT = 4
    DOUBLE = 5
    NULL = 6
    TIMESTAMP = 7
    LONGLONG = 8
    INT24 = 9
    DATE = 10
    TIME = 11
    DATETIME = 12
    YEAR = 13
    NEWDATE = 14
    VARCHAR = 15
    BIT = 16
    TIMESTAMP2 = 17
    DATETIME2 = 18
    TIME2 = 19
    TYPED_ARRAY = 20
    VECTOR = 242
    INVALID = 243
    BOOL = 244
    JSON = 245
    NEWDECIMAL = 246
    ENUM = 247
    SET = 248
    TINY_BLOB = 249
    MEDIUM_BLOB = 250
    LONG_BLOB = 251
    BLOB = 252
    VAR_STRING = 253
    STRING = 254
    GEOMETRY = 255


COLUMN_TYPE_NAMES: dict[int, str] = {t.value: t.name for t in ColumnType}

# Rows event flags
ROWS_FLAG_STMT_END = 0x1

# binlog_row_value_options (PARTIAL_UPDATE_ROWS)
PARTIAL_JSON_UPDATES = 0x1
