"""The staged window: what the sensor writes and the run reads (the contract between them).

A window is one or more Canal batches taken with getWithoutAck, written under
``{staging root}/{destination}/w{window:012d}-a{attempt}/`` before its run is launched, because the sensor
and the run are different processes and the ring store never leaves its process:

    manifest.json                 WindowManifest (below), written last: a directory without it is incomplete
    changelog.parquet             one row per row change, CHANGELOG_SCHEMA (absent when the window has none)
    tables/<schema>.<table>/NNN.parquet
                                  typed row changes of one table, one part per run of rows that share a
                                  column layout (a DDL on the table starts a new part)

Order: every row change has a total order ``(pos, row, sub)``: ``pos = order_key(binlog file, event offset)``,
``row`` its index inside the rows event, ``sub`` 0, except that an UPDATE that changes the primary key is
staged as a DELETE of the old key (sub 0) followed by an INSERT of the new one (sub 1), and so is every UPDATE
of a table without a primary key (DELETE of the before image, INSERT of the after image: pipelines.engine.keyless).

Per-table part columns: META_COLUMNS first, then the table's columns in table order, typed by
``pipelines.engine.types`` (the MySQL -> Arrow/Spark mapping). INSERT and UPDATE rows carry the after image,
DELETE rows the before image.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

FORMAT_VERSION = 1

# op codes in staged parts and in the changelog
OP_INSERT = "INSERT"
OP_UPDATE = "UPDATE"
OP_DELETE = "DELETE"

# leading columns of every staged table part (and, except _canal_sub, of every mirror table)
COL_OP = "_canal_op"        # string: INSERT / UPDATE / DELETE
COL_POS = "_canal_pos"      # int64: order_key(file, offset) of the rows event
COL_ROW = "_canal_row"      # int32: row index in the rows event
COL_SUB = "_canal_sub"      # int8: 0, or 1 for the INSERT half of an UPDATE staged as DELETE + INSERT
COL_TS = "_canal_ts"        # timestamp[us, UTC]: the event's execute time
META_COLUMNS = (COL_OP, COL_POS, COL_ROW, COL_SUB, COL_TS)
# mirrors of tables without a primary key only: the copy number of the row's image, 1..n (pipelines.engine.keyless)
COL_DUP = "_canal_dup"

_SEQ = re.compile(r"(\d+)$")


def file_sequence(journal_name: str) -> int:
    """The numeric suffix of a binlog file name (``mysql-bin.000123`` -> 123)."""
    m = _SEQ.search(journal_name)
    if m is None:
        raise ValueError(f"binlog file name without a sequence number: {journal_name!r}")
    return int(m.group(1))


def order_key(journal_name: str, offset: int) -> int:
    """A position as one int64 that sorts like binlog order on one source: file sequence << 32 | offset.
    (Offsets are below 2**32: max_binlog_size is at most 1 GiB.)"""
    if not 0 <= offset < 1 << 32:
        raise ValueError(f"binlog offset out of range: {journal_name}:{offset}")
    return file_sequence(journal_name) << 32 | offset


def split_key(key: int) -> tuple[int, int]:
    """(file sequence, offset) of an order key."""
    return key >> 32, key & 0xFFFFFFFF


@dataclass(slots=True)
class Position:
    """A binlog position of the source: file and offset (what orders it), and the event's time, GTID and server
    id when known. Its text form is ``file:offset`` (``format_position`` / ``parse_position``)."""

    journal: str
    offset: int
    timestamp_ms: int = 0
    gtid: str = ""
    server_id: int = 0

    @property
    def key(self) -> int:
        return order_key(self.journal, self.offset)


@dataclass(frozen=True, slots=True)
class EventTime:
    """A point in time (ms since the epoch) where a replayed range starts or ends instead of at a Position: the
    first transaction executed at or after it, or the last change executed at or before it."""

    ms: int


def format_position(p: Position) -> str:
    """``mysql-bin.000012:4567``: the one text form of a position (metadata, tags, registry, messages)."""
    return f"{p.journal}:{p.offset}"


def parse_position(text: str) -> Position:
    """``mysql-bin.000012:4567`` -> Position; a ValueError naming the text when it is not ``file:offset``."""
    journal, sep, offset = text.rpartition(":")
    if not sep or not journal or not offset.isdigit():
        raise ValueError(f"binlog position {text!r}: expected file:offset, e.g. mysql-bin.000012:4567")
    return Position(journal, int(offset))


def key_text(key: int, journal_like: str) -> str:
    """An order key as ``file:offset``, the file named like ``journal_like`` (a binlog file name of the same
    source: ``mysql-bin.000001`` gives ``mysql-bin.000002:6039762``)."""
    seq, off = split_key(key)
    m = _SEQ.search(journal_like)
    if m is None:
        raise ValueError(f"binlog file name without a sequence number: {journal_like!r}")
    return format_position(Position(f"{journal_like[:m.start()]}{seq:0{len(m.group(1))}d}", off))


@dataclass(slots=True)
class ColumnSpec:
    """One source column as Canal's entries describe it."""

    name: str
    mysql_type: str          # Canal's Column.mysqlType, e.g. "decimal(10,2)", "int(10) unsigned", "enum('a','b')"
    is_key: bool = False     # part of the primary key


@dataclass(slots=True)
class TablePart:
    file: str                # relative to the window directory
    rows: int
    min_pos: int             # smallest / largest _canal_pos in the part
    max_pos: int
    columns: list[ColumnSpec] = field(default_factory=list)
    inserts: int = 0
    updates: int = 0
    deletes: int = 0


@dataclass(slots=True)
class TableChanges:
    schema: str
    table: str
    parts: list[TablePart] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.table}"

    @property
    def primary_key(self) -> list[str]:
        return [c.name for c in self.parts[-1].columns if c.is_key] if self.parts else []


@dataclass(slots=True)
class DdlRecord:
    pos: int
    schema: str
    table: str
    kind: str                # Canal's EventType name: ALTER, CREATE, ERASE (drop table), RENAME, TRUNCATE, ...
    sql: str
    timestamp_ms: int = 0


@dataclass(slots=True)
class WindowManifest:
    destination: str
    window: int              # the sensor's window number (monotone per destination)
    attempt: int
    batch_ids: list[int]
    start: Position
    end: Position
    rows: int = 0
    entries: int = 0
    bytes: int = 0
    changelog: str | None = None
    tables: list[TableChanges] = field(default_factory=list)
    ddl: list[DdlRecord] = field(default_factory=list)
    unrepresentable: dict[str, int] = field(default_factory=dict)  # "schema.table.column" -> values set NULL
    timezone: str = "UTC"    # zone of the TIMESTAMP text in the entries
    created_ms: int = 0
    format: int = FORMAT_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, indent=1)

    @classmethod
    def from_json(cls, text: str) -> WindowManifest:
        d: dict[str, Any] = json.loads(text)
        if d.get("format") != FORMAT_VERSION:
            raise ValueError(f"staged window format {d.get('format')!r}, expected {FORMAT_VERSION}")
        d["start"] = Position(**d["start"])
        d["end"] = Position(**d["end"])
        d["tables"] = [TableChanges(t["schema"], t["table"],
                                    [TablePart(**{**p, "columns": [ColumnSpec(**c) for c in p["columns"]]})
                                     for p in t["parts"]]) for t in d["tables"]]
        d["ddl"] = [DdlRecord(**x) for x in d["ddl"]]
        return cls(**d)


def window_dir_name(window: int, attempt: int) -> str:
    return f"w{window:012d}-a{attempt}"


def changelog_schema() -> Any:
    """The changelog rows (staged changelog.parquet and the canal/changelog Delta table, which adds nothing).

    ``before`` / ``after`` are the images as Canal's entries carry them: column name -> Canal's text value
    (NULL for SQL NULL), so the changelog is what a Canal client saw; typed values live in the mirrors.
    ``event_date`` (UTC date of ``execute_time``) is the Delta partition column."""
    import pyarrow as pa

    text_map = pa.map_(pa.string(), pa.string())
    return pa.schema([
        ("destination", pa.string()),
        ("schema_name", pa.string()),
        ("table_name", pa.string()),
        ("op", pa.string()),
        ("binlog_file", pa.string()),
        ("binlog_offset", pa.int64()),
        ("pos", pa.int64()),
        ("row", pa.int32()),
        ("gtid", pa.string()),
        ("server_id", pa.int64()),
        ("execute_time", pa.timestamp("us", tz="UTC")),
        ("event_date", pa.date32()),
        ("window", pa.int64()),
        ("keys", pa.list_(pa.string())),
        ("updated", pa.list_(pa.string())),
        ("before", text_map),
        ("after", text_map),
    ])
