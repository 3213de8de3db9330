"""Column values as Canal writes them: the java.sql.Types code and the text of each value, per binlog
column type (a formatter per column, built once per table layout).

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
from collections.abc import Callable
from typing import Any, NamedTuple

from ..binlog.constants import ColumnType as T
from ..binlog.tablemap import Column
from ..binlog.values import charset_codec, codec_for_collation
from .decimals import decimal_formatter
from .javafmt import java_double_to_string, java_float_to_string


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


Fmt = Callable[[Any], tuple[int, str]]


class Fast(NamedTuple):
    """A column formatter's inline form in generated encoders, for its usual value type (_fast_code)."""

    kind: str
    sql_type: int
    arg: Any = None



def column_formatter(col: Column, cm: Any, timezone: _dt.tzinfo | None) -> tuple[Fmt, int, Fast | None]:
    """(value -> (sqlType, text), sqlType of a NULL, the generated code's inline form of the
    formatter for the usual value type, or None) for one column."""
    t = col.type
    ctype = (cm.column_type if cm is not None else "").lower()
    if t in _INT_BITS:
        base, bits, bumped = _INT_BITS[t]
        unsigned = cm.unsigned if cm is not None else col.unsigned
        return _int_fmt(base, bits, bumped, unsigned), base, Fast("uint" if unsigned else "int", base,
                                                                    1 << (bits - 1))
    if t in (T.NEWDECIMAL, T.DECIMAL):
        dec = decimal_formatter(col.scale)
        return (lambda v: (J.DECIMAL, dec(v))), J.DECIMAL, Fast("decimal", J.DECIMAL, dec)
    if t == T.FLOAT:
        return (lambda v: (J.REAL, java_float_to_string(v))), J.REAL, None
    if t == T.DOUBLE:
        return (lambda v: (J.DOUBLE, java_double_to_string(v))), J.DOUBLE, Fast("double", J.DOUBLE)
    if t == T.BIT:
        return (lambda v: (J.BIT, str(v))), J.BIT, Fast("bit", J.BIT)
    if t in (T.TIMESTAMP, T.TIMESTAMP2):
        fsp = col.fsp if t == T.TIMESTAMP2 else 0
        tz = timezone

        def ts(v: Any) -> tuple[int, str]:
            if isinstance(v, _dt.datetime):
                v = v.astimezone(tz) if tz is not None else v.astimezone()
            return J.TIMESTAMP, _datetime_text(v, fsp)

        return ts, J.TIMESTAMP, Fast("timestamp", J.TIMESTAMP, (fsp, tz))
    if t in (T.DATETIME, T.DATETIME2):
        fsp = col.fsp if t == T.DATETIME2 else 0
        return (lambda v: (J.TIMESTAMP, _datetime_text(v, fsp))), J.TIMESTAMP, Fast("datetime", J.TIMESTAMP, fsp)
    if t in (T.TIME, T.TIME2):
        fsp = col.fsp if t == T.TIME2 else 0
        return (lambda v: (J.TIME, _time_text(v, fsp))), J.TIME, None
    if t in (T.DATE, T.NEWDATE):
        return (lambda v: (J.DATE, _date_text(v))), J.DATE, Fast("date", J.DATE)
    if t == T.YEAR:
        return (lambda v: (J.VARCHAR, "0000" if not v else str(v))), J.VARCHAR, None
    if t == T.ENUM:
        values = (cm.enum_values if cm is not None else None) or col.enum_values or ()
        index = {v: i + 1 for i, v in enumerate(values)}
        return ((lambda v: (J.INTEGER, str(v if isinstance(v, int) else index.get(v, 0)))), J.INTEGER,
                Fast("enum", J.INTEGER, {k: str(i) for k, i in index.items()}))
    if t == T.SET:
        values = (cm.set_values if cm is not None else None) or col.set_values or ()
        bit = {v: 1 << i for i, v in enumerate(values)}
        return (lambda v: (J.BIT, str(v if isinstance(v, int) else _set_mask(v, bit)))), J.BLOB, None
    if t in (T.BLOB, T.TINY_BLOB, T.MEDIUM_BLOB, T.LONG_BLOB):
        # a NULL carries the code its values carry (Canal 1.1.7+ maps its -3/-4 to CLOB/BLOB)
        if ctype in _TEXT_TYPES or (cm is None and col.collation not in (None, 63)):
            decode = _text_decoder(col, cm)
            return (lambda v: (J.CLOB, decode(v))), J.CLOB, Fast("str", J.CLOB)
        return (lambda v: (J.BLOB, _to_latin1(v))), J.BLOB, Fast("latin1", J.BLOB)
    if t in (T.VARCHAR, T.VAR_STRING, T.STRING):
        binary = "binary" in ctype if cm is not None else col.collation == 63
        if binary:
            return (lambda v: (J.BLOB, _to_latin1(v))), J.BLOB, Fast("latin1", J.BLOB)
        st = J.CHAR if t == T.STRING else J.VARCHAR
        decode = _text_decoder(col, cm)
        return (lambda v: (st, decode(v))), st, Fast("str", st)
    if t == T.JSON:
        return ((lambda v: (J.VARCHAR, v if isinstance(v, str) else _text_decoder(col, cm)(v))), J.OTHER,
                Fast("str", J.VARCHAR))
    if t == T.GEOMETRY:
        return (lambda v: (J.BLOB, _to_latin1(v))), J.BLOB, Fast("latin1", J.BLOB)
    if t == T.VECTOR:
        return ((lambda v: (J.OTHER, "[" + ",".join(java_float_to_string(x) for x in v) + "]")), J.OTHER,
                None)
    return (lambda v: (J.OTHER, _to_latin1(v) if isinstance(v, bytes) else str(v))), J.OTHER, None


_TEXT_TYPES = frozenset({"tinytext", "text", "mediumtext", "longtext"})

# binlog integer type -> (sqlType, bits, sqlType of an unsigned value above the signed range)
_INT_BITS: dict[int, tuple[int, int, int]] = {
    T.TINY: (J.TINYINT, 8, J.SMALLINT),
    T.SHORT: (J.SMALLINT, 16, J.INTEGER),
    T.INT24: (J.INTEGER, 24, J.INTEGER),
    T.LONG: (J.INTEGER, 32, J.BIGINT),
    T.LONGLONG: (J.BIGINT, 64, J.DECIMAL),
}


def _int_fmt(base: int, bits: int, bumped: int, unsigned: bool) -> Fmt:
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

