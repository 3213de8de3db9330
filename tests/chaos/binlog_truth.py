"""An independent reading of the source's binlog: python-mysql-replication (not canal_core's decoder) over the
destination's range, every row change of the chaos schema with its position, transaction and images.

A change is identified as the changelog identifies it: (binlog file, offset of its rows event, index of the row in
that event). Images are rendered as Canal's text for the column types the workload uses (integers, DECIMAL,
DATETIME, ENUM as its 1-based index, character columns), so they compare with the changelog's ``before`` /
``after`` maps.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from .environment import Source


@dataclass(frozen=True)
class Change:
    file: str
    offset: int
    row: int
    table: str
    op: str                                   # INSERT / UPDATE / DELETE
    gtid: str                                 # the transaction's GTID (MariaDB domain-server-sequence)
    before: dict[str, str | None] | None
    after: dict[str, str | None] | None

    @property
    def key(self) -> tuple[str, int, int]:
        return self.file, self.offset, self.row


def canal_text(value: Any) -> str | None:
    """A decoded value as Canal's entries carry it."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, Decimal):
        return canal_decimal_text(value)
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S") + (f".{value.microsecond:06d}" if value.microsecond else "")
    raise TypeError(f"no Canal text for {type(value).__name__} {value!r} (a column type the workload does not use)")


def canal_decimal_text(value: Decimal) -> str:
    """Canal's text of a DECIMAL the binlog holds with ``scale`` fraction digits (python-mysql-replication keeps
    them all): Canal's decoder writes every digit of each full nine-digit fraction word, but the left-over
    ``scale % 9`` digits only when they are not all zero, and a lone ``0`` when no fraction digit is left
    (DECIMAL(12,2): 333.00 -> 333.0, 333.50 -> 333.50)."""
    exponent = value.as_tuple().exponent
    scale = -exponent if isinstance(exponent, int) and exponent < 0 else 0
    text = format(abs(value) if value == 0 else value, "f")
    if not scale:
        return text
    whole, frac = text.split(".")
    kept = scale - scale % 9
    frac = frac[:kept] + (frac[kept:] if frac[kept:].strip("0") else "")
    return f"{whole}.{frac or '0'}"


def _image(values: dict[str, Any] | None, enums: dict[str, list[str]]) -> dict[str, str | None] | None:
    """Canal's text of each value; an ENUM column carries its 1-based index, as Canal's entries do (the mirrors
    map it back to the label; docs/type-mapping.md)."""
    if values is None:
        return None
    out = {k: canal_text(v) for k, v in values.items()}
    for col, labels in enums.items():
        v = out.get(col)
        if v is not None:
            out[col] = str(labels.index(v) + 1) if v in labels else "0"
    return out


def enum_columns(source: Source, schema: str) -> dict[str, dict[str, list[str]]]:
    """table -> ENUM column -> its labels, from information_schema (the workload never alters its tables)."""
    conn = source.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
                        "WHERE TABLE_SCHEMA = %s AND DATA_TYPE = 'enum'", (schema,))
            rows = cur.fetchall()
    finally:
        conn.close()
    out: dict[str, dict[str, list[str]]] = {}
    for table, column, ctype in rows:
        labels = [x[1:-1].replace("''", "'") for x in str(ctype)[len("enum("):-1].split(",")]
        out.setdefault(str(table), {})[str(column)] = labels
    return out


def read_changes(source: Source, start: tuple[str, int], schema: str, server_id: int) -> list[Change]:
    """Every row change of ``schema`` from ``start`` to the binlog's current end, in binlog order."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import MariadbGtidEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    enums = enum_columns(source, schema)
    stream = BinLogStreamReader(connection_settings=source.replication_settings(), server_id=server_id,
                                blocking=False, resume_stream=True, log_file=start[0], log_pos=start[1],
                                only_events=[MariadbGtidEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
                                enable_logging=False)
    out: list[Change] = []
    gtid = ""
    try:
        for ev in stream:
            if isinstance(ev, MariadbGtidEvent):
                gtid = ev.gtid
                continue
            if ev.schema != schema:
                continue
            offset = ev.packet.log_pos - ev.packet.event_size  # the event's start (ev.event_size lacks the header)
            for i, row in enumerate(ev.rows):
                e = enums.get(ev.table, {})
                if isinstance(ev, WriteRowsEvent):
                    op, before, after = "INSERT", None, _image(row["values"], e)
                elif isinstance(ev, DeleteRowsEvent):
                    op, before, after = "DELETE", _image(row["values"], e), None
                else:
                    op, before, after = "UPDATE", _image(row["before_values"], e), _image(row["after_values"], e)
                out.append(Change(stream.log_file, offset, i, ev.table, op, gtid, before, after))
    finally:
        stream.close()
    return out


def position_key(file: str, offset: int) -> tuple[int, int]:
    """(binlog file sequence, offset): positions in binlog order across files."""
    return int(file.rsplit(".", 1)[-1]), offset
