"""Order-independent table fingerprints, computed the same way on MariaDB, on Arrow tables and inside Spark.

A fingerprint is (row count, checksum): the checksum is the sum mod 2**64 of one 64-bit hash per row, so
row order and partitioning do not matter. The row hash is the first 8 bytes (big-endian) of SHA-256 over a
canonical text of the row's columns in the given order: per column ``~`` for NULL, else ``<chars>:<text>``
(``chars`` = the text's length in code points), with the column's text by staged type:

    integers          decimal digits                    decimal(p,s)  plain, exactly s fraction digits
    float / double    Java's %a hex of (v + 0.0)        date          days since 1970-01-01
    timestamp (UTC)   microseconds since the epoch      datetime      microseconds since 1970-01-01 00:00
    string            the string                        binary        upper-case hex

(``+ 0.0`` folds -0.0 into 0.0, as SQL compares them equal.) Spark builds the same text with built-in
functions (cast, format_string('%a'), unix_date, unix_micros, hex, sha2, conv), so a DataFrame is
fingerprinted by Spark itself, no Python workers involved; Python builds it from the staged Python values
(pipelines.engine.types: ``from_db`` for MariaDB rows, ``to_pylist`` for Arrow).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Context, Decimal
from typing import Any

import pyarrow as pa

from .types import arrow_type, from_db, select_expr, spark_type
from .window import ColumnSpec, Position, format_position

__all__ = [
    "Fingerprint",
    "ReconcileError",
    "arrow_fingerprint",
    "dataframe_fingerprint",
    "read_columns",
    "row_hash",
    "source_fingerprint",
    "table_columns",
]

_MOD = 1 << 64
_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_US = dt.timedelta(microseconds=1)
_FETCH = 10_000
_WIDE = Context(prec=100)  # decimal128 has 38 digits, the default context 28


class ReconcileError(Exception):
    """A fingerprint that cannot be computed as asked (a column missing or of another type)."""


@dataclass(slots=True)
class Fingerprint:
    """Row count and checksum of a table; equal fingerprints mean equal multisets of rows (up to a 2**-64
    collision). ``position``: the binlog position the source snapshot is consistent with (MariaDB only)."""

    count: int
    checksum: int
    position: Position | None = field(default=None, compare=False)
    label: str = field(default="", compare=False)

    def __str__(self) -> str:
        at = f" at {format_position(self.position)}" if self.position else ""
        return f"{self.label or 'table'}: {self.count} rows, checksum {self.checksum:016x}{at}"

    def diff(self, other: Fingerprint) -> str:
        """"" when both agree, else one line saying how they differ."""
        if self == other:
            return ""
        a, b = self.label or "left", other.label or "right"
        if self.count != other.count:
            d = self.count - other.count
            return (f"row count differs: {a} {self.count}, {b} {other.count} "
                    f"({abs(d)} {'more' if d > 0 else 'fewer'} in {a})")
        return (f"same row count {self.count} but the rows differ: checksum {a} {self.checksum:016x}, "
                f"{b} {other.checksum:016x}")


# ---- canonical text (Python side) ----------------------------------------------------------------------

def _java_hex(v: float) -> str:
    """Java's Formatter %a (Double.toHexString) of a finite double: 0x1.8p1, 0x0.0p0, 0x0.0000000000001p-1022."""
    v += 0.0
    if v == 0.0:
        return "0x0.0p0"
    h = v.hex()  # [-]0x1.8000000000000p+1
    sign = "-" if h[0] == "-" else ""
    mantissa, exp = h.lstrip("-")[2:].split("p")
    lead, frac = mantissa.split(".")
    return f"{sign}0x{lead}.{frac.rstrip('0') or '0'}p{int(exp)}"


def _decimal_text(scale: int) -> Callable[[Any], str]:
    unit = Decimal(1).scaleb(-scale)

    def text(v: Any) -> str:
        q = Decimal(v).quantize(unit, context=_WIDE)
        return format(q if q else abs(q), "f")  # no "-0.00"

    return text


def _micros(v: Any) -> str:
    if isinstance(v, int):
        return str(v)
    if v.tzinfo is None:
        return str((v - _EPOCH) // _US)
    return str((v - _EPOCH_UTC) // _US)


def _text_fn(typ: pa.DataType) -> Callable[[Any], str]:
    if pa.types.is_integer(typ):
        return lambda v: str(int(v))
    if pa.types.is_decimal(typ):
        return (lambda v: str(int(v))) if typ.scale == 0 else _decimal_text(typ.scale)
    if pa.types.is_floating(typ):
        return lambda v: _java_hex(float(v))
    if pa.types.is_date(typ):
        return lambda v: str((v - _EPOCH_DATE).days)
    if pa.types.is_timestamp(typ):
        return _micros
    if pa.types.is_binary(typ):
        return lambda v: bytes(v).hex().upper()
    if pa.types.is_string(typ):
        return str
    raise ReconcileError(f"no canonical text for Arrow type {typ}")


def _text_fns(columns: Sequence[ColumnSpec]) -> list[Callable[[Any], str]]:
    return [_text_fn(arrow_type(c.mysql_type, c.name)) for c in columns]


def row_hash(values: Sequence[Any], fns: Sequence[Callable[[Any], str]]) -> int:
    """The 64-bit hash of one row of staged Python values (``fns`` from the columns' types)."""
    parts = []
    for f, v in zip(fns, values, strict=True):
        if v is None:
            parts.append("~")
        else:
            t = f(v)
            parts.append(f"{len(t)}:{t}")
    return int.from_bytes(hashlib.sha256("".join(parts).encode("utf-8")).digest()[:8], "big")


def _fold(rows: Iterable[Sequence[Any]], fns: Sequence[Callable[[Any], str]]) -> tuple[int, int]:
    count = total = 0
    for row in rows:
        total += row_hash(row, fns)
        count += 1
    return count, total % _MOD


def arrow_fingerprint(table: pa.Table, columns: Sequence[ColumnSpec], label: str = "") -> Fingerprint:
    """Fingerprint of ``columns`` of an Arrow table of staged types (a staged part, a snapshot)."""
    missing = [c.name for c in columns if c.name not in table.column_names]
    if missing:
        raise ReconcileError(f"{label or 'table'} has no column(s) {missing}")
    count = total = 0
    fns = _text_fns(columns)
    for batch in table.select([c.name for c in columns]).to_batches(_FETCH):
        n, s = _fold(zip(*(col.to_pylist() for col in batch.columns), strict=True), fns)
        count += n
        total += s
    return Fingerprint(count, total % _MOD, label=label)


# ---- MariaDB ------------------------------------------------------------------------------------------

def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def read_columns(cur: Any, schema: str, table: str) -> list[ColumnSpec]:
    """The table's columns as Canal's entries describe them (COLUMN_TYPE, primary key) from information_schema,
    through an open cursor (the snapshot reads them on its own connection); [] when there is no such table."""
    cur.execute(
        "SELECT c.COLUMN_NAME, c.COLUMN_TYPE, k.COLUMN_NAME IS NOT NULL FROM information_schema.COLUMNS c "
        "LEFT JOIN information_schema.KEY_COLUMN_USAGE k ON k.TABLE_SCHEMA = c.TABLE_SCHEMA "
        "AND k.TABLE_NAME = c.TABLE_NAME AND k.COLUMN_NAME = c.COLUMN_NAME AND k.CONSTRAINT_NAME = 'PRIMARY' "
        "WHERE c.TABLE_SCHEMA = %s AND c.TABLE_NAME = %s ORDER BY c.ORDINAL_POSITION", (schema, table))
    return [ColumnSpec(_str(n), _str(t), bool(k)) for n, t, k in cur.fetchall()]


def table_columns(conn_kwargs: dict[str, Any], schema: str, table: str) -> list[ColumnSpec]:
    """``read_columns`` on a new connection; a missing table is a ReconcileError."""
    import pymysql

    conn = pymysql.connect(**conn_kwargs)
    try:
        with conn.cursor() as cur:
            cols = read_columns(cur, schema, table)
    finally:
        conn.close()
    if not cols:
        raise ReconcileError(f"table {schema}.{table} not found (or no SELECT privilege)")
    return cols


def _str(v: Any) -> str:
    return v.decode() if isinstance(v, bytes | bytearray) else str(v)


def source_fingerprint(conn_kwargs: dict[str, Any], schema: str, table: str,
                       columns: Sequence[ColumnSpec]) -> Fingerprint:
    """Fingerprint of ``schema.table`` read by PyMySQL (``conn_kwargs``) inside START TRANSACTION WITH
    CONSISTENT SNAPSHOT; ``position`` is the binlog position that snapshot is consistent with (MariaDB's
    Binlog_snapshot_file / Binlog_snapshot_position; None when the server has no binlog or is not MariaDB).
    Values go through ``pipelines.engine.types.from_db``, so the result equals the fingerprint of the same rows
    staged from the binlog."""
    import pymysql
    import pymysql.cursors

    conn = pymysql.connect(**{**conn_kwargs, "cursorclass": pymysql.cursors.SSCursor})
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
            status = {_str(k).lower(): _str(v) for k, v in cur.fetchall()}
            exprs = ", ".join(select_expr(c.name, c.mysql_type) for c in columns)
            cur.execute(f"SELECT {exprs} FROM {_quote(schema)}.{_quote(table)}")
            convs = [from_db(c.mysql_type, c.name) for c in columns]
            fns = _text_fns(columns)
            count = total = 0
            while rows := cur.fetchmany(_FETCH):
                n, s = _fold(([f(v) for f, v in zip(convs, row, strict=True)] for row in rows), fns)
                count += n
                total += s
        conn.commit()
    finally:
        conn.close()
    file, offset = status.get("binlog_snapshot_file"), status.get("binlog_snapshot_position")
    position = Position(journal=file, offset=int(offset)) if file and offset else None
    return Fingerprint(count, total % _MOD, position=position, label=f"{schema}.{table}")


# ---- Spark ----------------------------------------------------------------------------------------------

def _spark_text(ident: str, dtype: Any) -> Any:
    """The canonical text of a column (``ident``: its quoted SQL identifier) as a Spark expression."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    col = F.col(ident)
    if isinstance(dtype, T.ByteType | T.ShortType | T.IntegerType | T.LongType | T.DecimalType):
        return col.cast("string")  # Spark prints decimals plain, with all scale digits
    if isinstance(dtype, T.FloatType | T.DoubleType):
        # format_string renders NULL as "null": keep it NULL
        return F.when(col.isNotNull(), F.format_string("%a", col.cast("double") + F.lit(0.0)))
    if isinstance(dtype, T.DateType):
        return F.unix_date(col).cast("string")
    if isinstance(dtype, T.TimestampType):
        return F.unix_micros(col).cast("string")
    if isinstance(dtype, T.TimestampNTZType):
        # no session time zone involved: the difference of two zone-less timestamps
        return F.expr(f"CAST(timestampdiff(MICROSECOND, TIMESTAMP_NTZ'1970-01-01 00:00:00', {ident}) AS STRING)")
    if isinstance(dtype, T.BinaryType):
        return F.hex(col)
    if isinstance(dtype, T.StringType):
        return col
    raise ReconcileError(f"no canonical text for Spark type {dtype.simpleString()}")


def dataframe_fingerprint(df: Any, columns: Sequence[ColumnSpec], label: str = "") -> Fingerprint:
    """Fingerprint of ``columns`` of a Spark DataFrame (a mirror table, a staged part read by Spark), computed
    by Spark; other columns (``_canal_*``) are ignored. Each column must have the type ``spark_type`` maps its
    mysqlType to."""
    from pyspark.sql import functions as F

    types = {f.name: f.dataType for f in df.schema.fields}
    texts = []
    for c in columns:
        if c.name not in types:
            raise ReconcileError(f"{label or 'DataFrame'} has no column {c.name!r}")
        want = spark_type(c.mysql_type, c.name)
        if types[c.name] != want:
            raise ReconcileError(f"{label or 'DataFrame'} column {c.name!r} is {types[c.name].simpleString()}, "
                                 f"expected {want.simpleString()} for {c.mysql_type}")
        t = _spark_text(_quote(c.name), types[c.name])
        texts.append(F.coalesce(F.concat(F.char_length(t).cast("string"), F.lit(":"), t), F.lit("~")))
    digest = F.sha2(F.concat(*texts).cast("binary"), 256)
    h = F.conv(F.substring(digest, 1, 16), 16, 10).cast("decimal(20,0)")
    row = df.select(h.alias("h")).agg(F.count(F.lit(1)).alias("n"), F.sum("h").alias("s")).first()
    return Fingerprint(int(row["n"]), int(row["s"] or 0) % _MOD, label=label)
