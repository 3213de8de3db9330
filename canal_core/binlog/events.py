"""Decoded binlog events. Plain slotted dataclasses: cheap to build, easy to print."""

from __future__ import annotations

import base64
import datetime as _dt
from dataclasses import dataclass, field, fields
from decimal import Decimal
from typing import Any

from .constants import EVENT_NAMES
from .tablemap import TableDef


@dataclass(slots=True, kw_only=True)
class Event:
    type_code: int
    timestamp: int  # seconds since the epoch, from the event header
    server_id: int
    length: int  # event length as stored (header + body + checksum)
    log_pos: int  # end position as the server wrote it (0 for artificial and payload-inner events)
    flags: int
    file: str | None = None  # binlog file the event belongs to, when known
    position: int | None = None  # start offset of the event in that file, when known

    @property
    def name(self) -> str:
        return EVENT_NAMES.get(self.type_code, f"UNKNOWN_{self.type_code}")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type_code, "name": self.name, "file": self.file,
                               "position": self.position, "log_pos": self.log_pos,
                               "timestamp": self.timestamp, "server_id": self.server_id}
        for f in fields(self):
            if f.name in _HEADER_FIELDS or f.name.startswith("_"):
                continue
            out[f.name] = _jsonable(getattr(self, f.name))
        return out


_HEADER_FIELDS = frozenset({"type_code", "timestamp", "server_id", "length", "log_pos", "flags", "file",
                            "position"})


def _jsonable(v: Any) -> Any:
    from .rows import ABSENT  # rows imports events' siblings only; no cycle at module load

    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, _dt.datetime):
        return v.isoformat(sep=" ")
    if isinstance(v, _dt.date):
        return v.isoformat()
    if isinstance(v, _dt.timedelta):
        return format_timedelta(v)
    if isinstance(v, bytes | bytearray | memoryview):
        return "base64:" + base64.b64encode(bytes(v)).decode()
    if v is ABSENT:
        return "<absent>"
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, TableDef):
        return {"schema": v.schema, "table": v.table,
                "columns": [{"name": c.name, "type": c.type_name, "unsigned": c.unsigned,
                             "nullable": c.nullable} for c in v.columns],
                "primary_key": list(v.primary_key)}
    if isinstance(v, Event):
        return v.to_dict()
    return str(v)


def format_timedelta(td: _dt.timedelta) -> str:
    """MySQL TIME text: [-]HH:MM:SS[.ffffff]."""
    us = td.days * 86400_000000 + td.seconds * 1000000 + td.microseconds
    sign = "-" if us < 0 else ""
    us = abs(us)
    secs, frac = divmod(us, 1000000)
    text = f"{sign}{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}"
    return text + (f".{frac:06d}" if frac else "")


@dataclass(slots=True, kw_only=True)
class FormatDescriptionEvent(Event):
    binlog_version: int
    server_version: str
    create_timestamp: int
    header_length: int
    checksum_alg: int  # 0 off, 1 CRC32, 255 undefined (pre-checksum server)
    flavor: str  # "mysql" | "mariadb"
    post_header_lengths: bytes = field(repr=False)


@dataclass(slots=True, kw_only=True)
class QueryEvent(Event):
    thread_id: int
    exec_time: int
    error_code: int
    schema: str
    query: str
    status: dict[str, Any]
    compressed: bool = False


@dataclass(slots=True, kw_only=True)
class RotateEvent(Event):
    next_file: str
    next_position: int


@dataclass(slots=True, kw_only=True)
class XidEvent(Event):
    xid: int


@dataclass(slots=True, kw_only=True)
class IntvarEvent(Event):
    kind: int  # 1 LAST_INSERT_ID, 2 INSERT_ID
    value: int


@dataclass(slots=True, kw_only=True)
class RandEvent(Event):
    seed1: int
    seed2: int


@dataclass(slots=True, kw_only=True)
class UserVarEvent(Event):
    var_name: str
    is_null: bool
    value_type: int | None = None
    charset: int | None = None
    value: bytes | None = None
    unsigned: bool = False


@dataclass(slots=True, kw_only=True)
class LoadEvent(Event):
    """LOAD DATA family (6, 8-12, 17, 18): kept with their file id and data."""

    file_id: int | None = None
    data: bytes = b""
    query: str | None = None
    schema: str | None = None


@dataclass(slots=True, kw_only=True)
class StopEvent(Event):
    pass


@dataclass(slots=True, kw_only=True)
class IncidentEvent(Event):
    incident: int
    message: str


@dataclass(slots=True, kw_only=True)
class HeartbeatEvent(Event):
    log_file: str
    log_position: int  # the server's current position in log_file


@dataclass(slots=True, kw_only=True)
class IgnorableEvent(Event):
    data: bytes = field(repr=False)


@dataclass(slots=True, kw_only=True)
class RowsQueryEvent(Event):
    query: str


@dataclass(slots=True, kw_only=True)
class TableMapEvent(Event):
    table_id: int
    table_flags: int
    table: TableDef


@dataclass(slots=True, kw_only=True)
class RowsEvent(Event):
    kind: str  # "write" | "update" | "delete"
    version: int
    table_id: int
    rows_flags: int
    table: TableDef | None
    # write/delete: tuples over all columns; update: (before, after) pairs; None when not decoded
    rows: list[Any] | None
    columns_present: bytes = field(repr=False)
    columns_present_after: bytes | None = field(default=None, repr=False)
    extra_data: bytes = field(default=b"", repr=False)
    compressed: bool = False
    partial: bool = False

    @property
    def stmt_end(self) -> bool:
        return bool(self.rows_flags & 1)


@dataclass(slots=True, kw_only=True)
class GtidEvent(Event):
    """MySQL GTID / ANONYMOUS_GTID / GTID_TAGGED."""

    anonymous: bool
    commit_flag: bool
    sid: str
    gno: int
    tag: str | None = None
    last_committed: int | None = None
    sequence_number: int | None = None
    immediate_commit_timestamp: int | None = None  # microseconds
    original_commit_timestamp: int | None = None
    transaction_length: int | None = None
    immediate_server_version: int | None = None
    original_server_version: int | None = None

    @property
    def gtid(self) -> str:
        if self.anonymous:
            return "ANONYMOUS"
        return f"{self.sid}:{self.tag}:{self.gno}" if self.tag else f"{self.sid}:{self.gno}"


@dataclass(slots=True, kw_only=True)
class PreviousGtidsEvent(Event):
    gtid_set: str


@dataclass(slots=True, kw_only=True)
class TransactionContextEvent(Event):
    server_uuid: str
    thread_id: int
    gtid_specified: bool
    data: bytes = field(repr=False)


@dataclass(slots=True, kw_only=True)
class ViewChangeEvent(Event):
    view_id: str
    seq_number: int
    data: bytes = field(repr=False)


@dataclass(slots=True, kw_only=True)
class XaPrepareEvent(Event):
    one_phase: bool
    format_id: int
    gtrid: bytes
    bqual: bytes


@dataclass(slots=True, kw_only=True)
class TransactionPayloadEvent(Event):
    compression_type: int  # 0 ZSTD, 255 NONE
    payload_size: int
    uncompressed_size: int
    events: list[Event]


@dataclass(slots=True, kw_only=True)
class MariaGtidEvent(Event):
    seq_no: int
    domain_id: int
    gtid_flags: int
    commit_id: int | None = None
    xid_format_id: int | None = None
    xid_gtrid: bytes | None = None
    xid_bqual: bytes | None = None

    @property
    def gtid(self) -> str:
        return f"{self.domain_id}-{self.server_id}-{self.seq_no}"

    @property
    def standalone(self) -> bool:
        """No BEGIN/COMMIT follows: a DDL or other self-contained statement."""
        return bool(self.gtid_flags & 1)


@dataclass(slots=True, kw_only=True)
class GtidListEvent(Event):
    gtids: list[tuple[int, int, int]]  # (domain, server, seq)
    list_flags: int = 0

    @property
    def gtid_position(self) -> str:
        return ",".join(f"{d}-{s}-{n}" for d, s, n in self.gtids)


@dataclass(slots=True, kw_only=True)
class BinlogCheckpointEvent(Event):
    checkpoint_file: str


@dataclass(slots=True, kw_only=True)
class AnnotateRowsEvent(Event):
    query: str


@dataclass(slots=True, kw_only=True)
class UnknownEvent(Event):
    """An event skipped under skip_unknown_events: counted and logged, kept raw."""

    data: bytes = field(repr=False)
