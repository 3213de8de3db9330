"""MySQL/MariaDB column types -> Arrow -> Spark, and the values of each type as staging produces them.

Keyed by Canal's ``Column.mysqlType`` (information_schema COLUMN_TYPE: ``int(10) unsigned``,
``decimal(12,2)``, ``enum('a','b')``, ``datetime(6)``, ...). docs/type-mapping.md is the table.

Three ways a value arrives, one result (the Python value ``pa.Array.to_pylist()`` gives for the staged type):

- ``convert_texts`` / ``text_converter``: Canal's text of the value in an entry (vectorized / one value);
- ``from_db``: what PyMySQL returns for ``select_expr(column)`` on a session with ``time_zone = '+00:00'``.

Values the target type cannot hold (zero dates, month or day 0, dates before year 1, local times that
do not exist in the zone) become NULL; callers count them (a non-NULL text that converts to None).
"""

from __future__ import annotations

import datetime as dt
import re
import struct
import zoneinfo
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Context, Decimal
from functools import lru_cache
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from canal_core.mysql.schema import parse_enum_values

__all__ = [
    "MysqlType",
    "TypeMappingError",
    "arrow_schema",
    "arrow_type",
    "convert_texts",
    "db_rows_to_arrow",
    "from_db",
    "parse_type",
    "select_expr",
    "spark_type",
    "text_converter",
]


class TypeMappingError(ValueError):
    """A column type the mapping does not know (names the column when the caller knows it)."""

    def __init__(self, mysql_type: str, column: str = "") -> None:
        where = f"column {column}: " if column else ""
        super().__init__(f"{where}unsupported MySQL type {mysql_type!r} (no Arrow/Spark mapping; "
                         "see docs/type-mapping.md)")
        self.mysql_type = mysql_type
        self.column = column


# kind of each base type name (aliases included: COLUMN_TYPE is normalized, DDL text may not be)
_INT_BASES = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "integer": 32, "bigint": 64}
_KINDS: dict[str, str] = {
    **dict.fromkeys(_INT_BASES, "int"),
    **dict.fromkeys(("decimal", "numeric", "dec", "fixed"), "decimal"),
    "float": "float",
    **dict.fromkeys(("double", "double precision", "real"), "double"),
    "bit": "bit",
    "date": "date",
    "datetime": "datetime",
    "timestamp": "timestamp",
    "time": "time",
    "year": "year",
    # MariaDB stores JSON as longtext; UUID/INET4/INET6 arrive as their text; MySQL VECTOR as "[f1,...]"
    **dict.fromkeys(("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "json", "uuid", "inet4",
                     "inet6", "vector"), "string"),
    "enum": "enum",
    "set": "set",
    **dict.fromkeys(("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "geometry", "point",
                     "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
                     "geometrycollection", "geomcollection"), "binary"),
}
_ALIASES = {"bool": ("tinyint", (1,)), "boolean": ("tinyint", (1,))}
_TYPE_RE = re.compile(r"\s*([a-z][a-z0-9_ ]*?)\s*(?:\((.*)\))?((?:\s+(?:unsigned|signed|zerofill))*)\s*$",
                      re.IGNORECASE | re.DOTALL)

_DECIMAL_MAX = 38  # decimal128
_WIDE = Context(prec=100)  # DECIMAL has up to 65 digits, the default context 28


@dataclass(frozen=True, slots=True)
class MysqlType:
    text: str                  # the mysqlType as given
    base: str                  # lower-case type name: "int", "decimal", "enum", ...
    kind: str                  # int, decimal, float, double, bit, date, datetime, timestamp, time, year, string,
    # enum, set, binary
    args: tuple[int, ...] = ()  # numeric arguments: width, (precision, scale), fsp, bits
    labels: tuple[str, ...] = ()  # ENUM / SET values in definition order
    unsigned: bool = False

    @property
    def bits(self) -> int:
        """BIT(n) width; integer types' storage width."""
        if self.kind == "bit":
            return self.args[0] if self.args else 1
        return _INT_BASES.get(self.base, 0)

    @property
    def precision_scale(self) -> tuple[int, int]:
        p = self.args[0] if self.args else 10
        return p, (self.args[1] if len(self.args) > 1 else 0)

    @property
    def fsp(self) -> int:
        return self.args[0] if self.args and self.kind in ("datetime", "timestamp", "time") else 0


@lru_cache(maxsize=4096)
def parse_type(mysql_type: str, column: str = "") -> MysqlType:
    """Parse Canal's mysqlType text; TypeMappingError for anything without a mapping."""
    m = _TYPE_RE.fullmatch(mysql_type or "")
    if m is None:
        raise TypeMappingError(mysql_type, column)
    base = " ".join(m.group(1).lower().split())
    args_text = m.group(2)
    flags = m.group(3).lower()
    if base in _ALIASES:
        base, default_args = _ALIASES[base]
        args_text = args_text or ",".join(map(str, default_args))
    kind = _KINDS.get(base)
    if kind is None:
        raise TypeMappingError(mysql_type, column)
    labels: tuple[str, ...] = ()
    args: tuple[int, ...] = ()
    if kind in ("enum", "set"):
        if args_text is None:
            raise TypeMappingError(mysql_type, column)
        labels = parse_enum_values(mysql_type)
    elif args_text is not None and args_text.strip():
        try:
            args = tuple(int(a) for a in args_text.split(","))
        except ValueError:
            raise TypeMappingError(mysql_type, column) from None
    t = MysqlType(mysql_type, base, kind, args, labels, "unsigned" in flags or "zerofill" in flags)
    if kind == "bit" and not 1 <= t.bits <= 64:
        raise TypeMappingError(mysql_type, column)
    return t


# ---- Arrow and Spark types ---------------------------------------------------------------------------

_UTC_TS = pa.timestamp("us", tz="UTC")
_NTZ_TS = pa.timestamp("us")
_U64 = pa.decimal128(20, 0)
_SIGNED_INT = {8: pa.int8(), 16: pa.int16(), 24: pa.int32(), 32: pa.int32(), 64: pa.int64()}
# unsigned widens to the next type that holds the whole range
_UNSIGNED_INT = {8: pa.int16(), 16: pa.int32(), 24: pa.int32(), 32: pa.int64(), 64: _U64}


def _arrow(t: MysqlType) -> pa.DataType:
    k = t.kind
    if k == "int":
        return (_UNSIGNED_INT if t.unsigned else _SIGNED_INT)[t.bits]
    if k == "decimal":
        p, s = t.precision_scale
        return pa.decimal128(p, s) if p <= _DECIMAL_MAX else pa.string()
    if k == "bit":
        return pa.int64() if t.bits <= 63 else _U64
    return {"float": pa.float32(), "double": pa.float64(), "date": pa.date32(), "datetime": _NTZ_TS,
            "timestamp": _UTC_TS, "year": pa.int16(), "binary": pa.binary()}.get(k, pa.string())


def arrow_type(mysql_type: str, column: str = "") -> pa.DataType:
    """The Arrow type of a column in staged parts (``column`` only names it in errors)."""
    return _arrow(parse_type(mysql_type, column))


def arrow_schema(columns: Sequence[Any], prefix: Sequence[pa.Field] = ()) -> pa.Schema:
    """Schema of ``columns`` (ColumnSpec-like: name, mysql_type) after the ``prefix`` fields; each field keeps
    its mysqlType in the field metadata."""
    fields = list(prefix)
    for c in columns:
        fields.append(pa.field(c.name, arrow_type(c.mysql_type, c.name), metadata={"mysql_type": c.mysql_type}))
    return pa.schema(fields)


def spark_type(mysql_type: str, column: str = "") -> Any:
    """The Spark SQL type of the column (what Spark reads from the staged Parquet)."""
    from pyspark.sql import types as T

    a = arrow_type(mysql_type, column)
    if pa.types.is_decimal(a):
        return T.DecimalType(a.precision, a.scale)
    if pa.types.is_timestamp(a):
        return T.TimestampType() if a.tz else T.TimestampNTZType()
    simple = {pa.int8(): T.ByteType, pa.int16(): T.ShortType, pa.int32(): T.IntegerType, pa.int64(): T.LongType,
              pa.float32(): T.FloatType, pa.float64(): T.DoubleType, pa.date32(): T.DateType,
              pa.string(): T.StringType, pa.binary(): T.BinaryType}
    return simple[a]()


# ---- Canal text -> value -----------------------------------------------------------------------------

_EPOCH_DAYS_YEAR1 = (dt.date(1, 1, 1) - dt.date(1970, 1, 1)).days
_MIN_US = (dt.datetime(1, 1, 1) - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)


def _zone(timezone: str) -> dt.tzinfo:
    if timezone.upper() in ("UTC", "Z", "+00:00", "ETC/UTC"):
        return dt.UTC
    m = re.fullmatch(r"([+-])(\d\d):(\d\d)", timezone)
    if m:
        off = dt.timedelta(hours=int(m.group(2)), minutes=int(m.group(3)))
        return dt.timezone(-off if m.group(1) == "-" else off)
    return zoneinfo.ZoneInfo(timezone)


def _date(text: str) -> dt.date | None:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        return None  # zero / invalid date, or year 0


def _naive(text: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return None


def _local_to_utc(v: dt.datetime, tz: dt.tzinfo) -> dt.datetime | None:
    if tz is dt.UTC:
        return v.replace(tzinfo=dt.UTC)
    # the text is a wall-clock time in the converter's zone: the earlier instant when it is ambiguous (fold 0),
    # none when the wall-clock time does not exist there (a DST gap)
    aware = v.replace(tzinfo=tz).astimezone(dt.UTC)
    if aware.astimezone(tz).replace(tzinfo=None) != v:
        return None
    return aware


def _enum_label(labels: tuple[str, ...]) -> Callable[[str], str | None]:
    def conv(text: str) -> str | None:
        i = int(text)
        if i == 0:
            return ""  # the invalid value MySQL stores for an out-of-list insert, shown as ''
        return labels[i - 1] if 0 < i <= len(labels) else None

    return conv


def _set_labels(labels: tuple[str, ...]) -> Callable[[str], str | None]:
    def conv(text: str) -> str | None:
        mask = int(text)
        if mask >> len(labels):
            return None
        return ",".join(label for i, label in enumerate(labels) if mask >> i & 1)

    return conv


def _scalar(t: MysqlType, timezone: str) -> Callable[[str], Any]:
    k = t.kind
    if k in ("int", "year", "bit"):
        if _arrow(t) == _U64:
            return Decimal
        return int
    if k == "decimal":
        # Canal leaves out zero digits (1.00 is "1.0"): a wide decimal's staged text has all of them
        return Decimal if t.precision_scale[0] <= _DECIMAL_MAX else _plain_decimal(t.precision_scale[1])
    if k == "float":
        # Arrow's parser rounds the decimal text to float32 directly, as the vectorized path does
        return lambda s: pa.scalar(s, pa.string()).cast(pa.float32()).as_py()
    if k == "double":
        return float
    if k == "date":
        return _date
    if k == "datetime":
        return _naive
    if k == "timestamp":
        tz = _zone(timezone)

        def ts(s: str) -> dt.datetime | None:
            v = _naive(s)
            return None if v is None else _local_to_utc(v, tz)

        return ts
    if k == "enum":
        return _enum_label(t.labels)
    if k == "set":
        return _set_labels(t.labels)
    if k == "binary":
        return lambda s: s.encode("latin-1")  # Canal carries bytes as one ISO-8859-1 char per byte
    return str


def text_converter(mysql_type: str, timezone: str = "UTC", column: str = "") -> Callable[[str | None], Any]:
    """Canal's text of one value -> the staged Python value (None for NULL and for unrepresentable values).
    ``timezone``: the zone the entries' TIMESTAMP text is in (the Canal converter's zone)."""
    f = _scalar(parse_type(mysql_type, column), timezone)
    return lambda s: None if s is None else f(s)


def _python_array(f: Callable[[str], Any], arr: pa.Array, typ: pa.DataType) -> tuple[pa.Array, int]:
    # dictionary-encode first: the Python conversion runs once per distinct text
    enc = arr.dictionary_encode()
    out = pc.take(pa.array([f(s) for s in enc.dictionary.to_pylist()], typ), enc.indices)
    return out, out.null_count - enc.null_count


def convert_texts(mysql_type: str, texts: Sequence[str | None] | pa.Array, timezone: str = "UTC",
                  column: str = "") -> tuple[pa.Array, int]:
    """Canal's texts of one column (a sequence or an Arrow string array) -> (Arrow array of the staged type,
    number of unrepresentable values set NULL). Exact Arrow casts where Arrow parses the text exactly, Python
    conversion otherwise; the result equals ``[text_converter(...)(s) for s in texts]``."""
    t = parse_type(mysql_type, column)
    typ = _arrow(t)
    k = t.kind
    arr = texts if isinstance(texts, pa.Array) else pa.array(texts, pa.string())
    if k == "binary":
        return pa.array([None if s is None else s.encode("latin-1") for s in arr.to_pylist()], pa.binary()), 0
    if k == "string":
        return arr, 0
    if k == "decimal" and typ == pa.string():
        return _python_array(_scalar(t, timezone), arr, typ)
    try:
        if k in ("int", "year", "bit", "decimal", "float", "double"):
            return arr.cast(typ), 0
        if k == "enum":
            idx = arr.cast(pa.int32())
            return pc.take(pa.array(("", *t.labels), pa.string()), idx), 0
        if k in ("date", "datetime", "timestamp"):
            parsed = arr.cast(pa.date32() if k == "date" else _NTZ_TS)
            low = pc.min(parsed.cast(pa.int32() if k == "date" else pa.int64())).as_py()
            if low is not None and low < (_EPOCH_DAYS_YEAR1 if k == "date" else _MIN_US):
                raise pa.ArrowInvalid("year 0")  # Arrow takes year 0, Python dates and Spark's text do not
            if k != "timestamp":
                return parsed, 0
            tz = _zone(timezone)
            if tz is not dt.UTC:
                parsed = pc.assume_timezone(parsed, timezone, ambiguous="earliest", nonexistent="raise")
            return parsed.cast(_UTC_TS), 0
    except (pa.ArrowInvalid, IndexError):
        pass  # zero / invalid dates, out-of-range indexes: the exact Python path decides value by value
    return _python_array(_scalar(t, timezone), arr, typ)


# ---- database values -> value ---------------------------------------------------------------------------

def select_expr(name: str, mysql_type: str) -> str:
    """The SELECT expression that reads a column exactly (FLOAT text on the wire has only 6 digits: read it as
    the double it widens to)."""
    q = "`" + name.replace("`", "``") + "`"
    return f"{q} * 1e0" if parse_type(mysql_type, name).kind == "float" else q


def _time_text(v: dt.timedelta, fsp: int) -> str:
    # Canal's TIME text: [-]HH:MM:SS[.f{fsp}], hours at least two digits
    us = v // dt.timedelta(microseconds=1)
    secs, frac = divmod(abs(us), 1_000_000)
    text = f"{'-' if us < 0 else ''}{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}"
    return text + "." + f"{frac:06d}"[:fsp] if fsp else text


def _plain_decimal(scale: int) -> Callable[[Any], str]:
    """A DECIMAL value (Decimal, or Canal's text of it) -> plain text with exactly ``scale`` fraction digits
    and no "-0": the staged form of a decimal too wide for decimal128, the same from a snapshot and a window."""
    unit = Decimal(1).scaleb(-scale)

    def plain(v: Any) -> str:
        q = Decimal(v).quantize(unit, context=_WIDE)
        return format(q if q else abs(q), "f")

    return plain


def _db(t: MysqlType) -> Callable[[Any], Any]:
    k = t.kind
    if k in ("int", "year", "bit"):
        wide = _arrow(t) == _U64

        def integer(v: Any) -> Any:
            if isinstance(v, bytes | bytearray):  # BIT arrives as big-endian bytes
                v = int.from_bytes(v, "big")
            return Decimal(int(v)) if wide else int(v)

        return integer
    if k == "decimal":
        return Decimal if t.precision_scale[0] <= _DECIMAL_MAX else _plain_decimal(t.precision_scale[1])
    if k == "float":
        return lambda v: struct.unpack("<f", struct.pack("<f", float(v)))[0]
    if k == "double":
        return float
    if k == "date":
        return lambda v: v if isinstance(v, dt.date) else None  # PyMySQL returns zero / invalid dates as str
    if k == "datetime":
        return lambda v: v if isinstance(v, dt.datetime) else None
    if k == "timestamp":
        return lambda v: v.replace(tzinfo=dt.UTC) if isinstance(v, dt.datetime) else None
    if k == "time":
        fsp = t.fsp
        return lambda v: _time_text(v, fsp) if isinstance(v, dt.timedelta) else str(v)
    if k == "set":
        order = {label: i for i, label in enumerate(t.labels)}
        return lambda v: ",".join(sorted(v, key=order.__getitem__)) if isinstance(v, set) else str(v)
    if k == "binary":
        return bytes
    return lambda v: v.decode("utf-8") if isinstance(v, bytes | bytearray) else str(v)


def from_db(mysql_type: str, column: str = "") -> Callable[[Any], Any]:
    """PyMySQL's value of ``select_expr(column)`` (session time_zone '+00:00') -> the staged Python value;
    None stays None, zero and invalid dates become None as in staging."""
    f = _db(parse_type(mysql_type, column))
    return lambda v: None if v is None else f(v)


def db_rows_to_arrow(columns: Sequence[Any], rows: Sequence[Sequence[Any]]) -> pa.Table:
    """Rows of ``SELECT select_expr(c) ...`` over ``columns`` -> an Arrow table of the staged types."""
    convs = [from_db(c.mysql_type, c.name) for c in columns]
    schema = arrow_schema(columns)
    cols = list(zip(*rows, strict=True)) if rows else [() for _ in columns]
    return pa.table([[f(v) for v in col] for f, col in zip(convs, cols, strict=True)], schema=schema)
