"""Column values, sqlType codes and flags of converted row changes.

Expected strings come from documented behaviour, never from running the converter:
- Java's ``Double.toString`` / ``Float.toString`` Javadoc (JDK 19+ wording, quoted where used);
- Canal's LogEventConvert.parseOneRow / RowsLogBuffer.fetchValue / mysqlToJavaType (cited per test);
- java.sql.Types constants (BIT -7, TINYINT -6, BIGINT -5, LONGVARBINARY -4, VARBINARY -3, BINARY -2,
  CHAR 1, DECIMAL 3, INTEGER 4, SMALLINT 5, REAL 7, DOUBLE 8, VARCHAR 12, DATE 91, TIME 92,
  TIMESTAMP 93, OTHER 1111, BLOB 2004, CLOB 2005).
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from canal_core.binlog import events as E
from canal_core.binlog.constants import ColumnType as CT
from canal_core.binlog.rows import ABSENT
from canal_core.binlog.tablemap import Column, TableDef
from canal_core.entry import EntryConverter, classify_query
from canal_core.entry.javafmt import (
    _double_parts,
    _exact_digits,
    _repr_digits,
    java_double_to_string,
    java_float_to_string,
)
from canal_core.parse.model import ColumnMeta, DdlResult, GtidInfo, SchemaMismatchError, TableMeta
from canal_core.protocol.position import LogIdentity
from canal_core.protocol.proto import EntryProtocol_pb2 as pb

UTC = dt.UTC


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


# ---- Java Double.toString / Float.toString -------------------------------------------------------

# Javadoc of Double.toString (JDK 19+): "123 x 10^-5 is formatted as 0.00123", "123 x 10^2 is formatted
# as 12300.0", "123 x 10^-1 is formatted as 12.3", "1 x 10^23 is formatted as 1.0E23",
# "123 x 10^-21 is formatted as 1.23E-19"; plain notation for 10^-3 <= |d| < 10^7, otherwise
# computerized scientific notation, always with at least one digit after the point.
@pytest.mark.parametrize(("value", "text"), [
    (0.00123, "0.00123"), (12300.0, "12300.0"), (12.3, "12.3"), (1e23, "1.0E23"), (1.23e-19, "1.23E-19"),
    (1.0, "1.0"), (2.0, "2.0"), (0.001, "0.001"), (0.0001, "1.0E-4"), (9999999.0, "9999999.0"),
    (1e7, "1.0E7"), (449847.0, "449847.0"), (-2.5, "-2.5"), (0.1, "0.1"), (100.0, "100.0"),
    # Double.MIN_VALUE / MAX_VALUE / MIN_NORMAL as their Javadoc prints them
    (5e-324, "4.9E-324"), (1.7976931348623157e308, "1.7976931348623157E308"),
    (2.2250738585072014e-308, "2.2250738585072014E-308"),
    # "If the argument is NaN, the result is the string "NaN"" ... infinities, signed zeros
    (math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "-Infinity"), (0.0, "0.0"), (-0.0, "-0.0"),
])
def test_java_double_to_string(value: float, text: str) -> None:
    assert java_double_to_string(value) == text


# Float.toString: same rules on float32 values; Float.MIN_VALUE is 1.4E-45 and Float.MAX_VALUE
# 3.4028235E38 (their Javadoc); 0.1f prints 0.1 because float32 needs fewer digits than double.
@pytest.mark.parametrize(("value", "text"), [
    (0.1, "0.1"), (1.1, "1.1"), (4.0, "4.0"), (1.0, "1.0"), (3.0, "3.0"), (1e10, "1.0E10"),
    (1.4e-45, "1.4E-45"), (3.4028234663852886e38, "3.4028235E38"), (16777216.0, "1.6777216E7"),
    (1 / 3, "0.33333334"), (100 / 3, "33.333332"), (1e-5, "1.0E-5"), (0.001, "0.001"), (-0.5, "-0.5"),
    (math.nan, "NaN"), (math.inf, "Infinity"), (-0.0, "-0.0"),
])
def test_java_float_to_string(value: float, text: str) -> None:
    assert java_float_to_string(f32(value)) == text


@settings(max_examples=400, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, min_value=1e-320))
def test_double_exact_search_agrees_with_shortest_repr(x: float) -> None:
    """The exact search (the reference) and the repr fast path pick the same digits (length >= 2)."""
    s, i = _repr_digits(x)
    if s >= 10:
        assert _exact_digits(*_double_parts(x)) == (s, i)


@settings(max_examples=400, deadline=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False, min_value=0.0, exclude_min=True))
def test_float_text_round_trips_and_is_shortest(x: float) -> None:
    text = java_float_to_string(x)
    assert f32(float(text)) == x
    n = len(text.split("E")[0].replace("-", "").replace(".", "").strip("0"))  # significant digits
    if n > 2:  # the closest decimal of one digit less does not round to x (Java's minimal length)
        assert f32(float(f"{x:.{n - 2}e}")) != x


# ---- converting rows -------------------------------------------------------------------------------

def rows_event(cols: list[Column], rows: list[Any], kind: str = "write", *, schema: str = "db",
               table: str = "t") -> E.RowsEvent:
    code = {"write": 30, "update": 31, "delete": 32}[kind]
    return E.RowsEvent(type_code=code, timestamp=1_600_000_000, server_id=1, length=100, log_pos=1100, flags=0,
                       file="mysql-bin.000001", position=1000, kind=kind, version=2, table_id=42, rows_flags=1,
                       table=TableDef(schema, table, tuple(cols)), rows=rows, columns_present=b"")


def convert(cols: list[Column], metas: list[ColumnMeta] | None, rows: list[Any], kind: str = "write",
            tz: str | None = "UTC") -> pb.RowChange:
    meta = TableMeta("db", "t", tuple(metas)) if metas is not None else None
    ce = EntryConverter(timezone=tz).rows(rows_event(cols, rows, kind), meta)
    return pb.RowChange.FromString(ce.entry.storeValue)


def one(col: Column, cm: ColumnMeta | None, value: Any, tz: str | None = "UTC") -> pb.Column:
    rc = convert([col], [cm] if cm is not None else None, [(value,)], tz=tz)
    (c,) = rc.rowDatas[0].afterColumns
    return c


def c(t: int, meta: int = 0, **kw: Any) -> Column:
    return Column(0, t, meta, True, **kw)


def m(data_type: str, column_type: str, **kw: Any) -> ColumnMeta:
    return ColumnMeta("v", data_type, column_type, **kw)


# LogEventConvert.parseOneRow: an unsigned value whose signed read is negative is printed +2^N and its
# javaType goes "up one level": TINYINT->SMALLINT, SMALLINT->INTEGER, MEDIUMINT->INTEGER,
# INT->BIGINT, BIGINT->DECIMAL; values within the signed range keep the binlog type's code.
@pytest.mark.parametrize(("t", "ctype", "unsigned", "value", "sql_type", "text"), [
    (CT.TINY, "tinyint(4)", False, -128, -6, "-128"),
    (CT.TINY, "tinyint(3) unsigned", True, 127, -6, "127"),
    (CT.TINY, "tinyint(3) unsigned", True, 200, 5, "200"),
    (CT.TINY, "tinyint(1)", False, 1, -6, "1"),
    (CT.SHORT, "smallint(5) unsigned", True, 40000, 4, "40000"),
    (CT.SHORT, "smallint(6)", False, -2, 5, "-2"),
    (CT.INT24, "mediumint(8) unsigned", True, 16777215, 4, "16777215"),
    (CT.INT24, "mediumint(9)", False, -8388608, 4, "-8388608"),
    (CT.LONG, "int(10) unsigned", True, 4294967295, -5, "4294967295"),
    (CT.LONG, "int(11)", False, 2147483647, 4, "2147483647"),
    (CT.LONGLONG, "bigint(20) unsigned", True, 18446744073709551615, 3, "18446744073709551615"),
    (CT.LONGLONG, "bigint(20) unsigned", True, 9223372036854775807, -5, "9223372036854775807"),
    (CT.LONGLONG, "bigint(20)", False, -9223372036854775808, -5, "-9223372036854775808"),
    # a value decoded signed for a column the schema says is unsigned is printed unsigned
    (CT.LONGLONG, "bigint(20) unsigned", True, -1, 3, "18446744073709551615"),
    (CT.TINY, "tinyint(3) unsigned", True, -1, 5, "255"),
])
def test_integers(t: int, ctype: str, unsigned: bool, value: int, sql_type: int, text: str) -> None:
    col = one(c(t, unsigned=unsigned), m(ctype.split("(")[0], ctype, unsigned=unsigned), value)
    assert (col.sqlType, col.value, col.isNull, col.mysqlType) == (sql_type, text, False, ctype)


# Canal's LogBuffer.getDecimal0 writes the digits of MySQL's binary DECIMAL into a char buffer for new
# BigDecimal(...), printed back by toPlainString(): each full 9-digit word of the fraction is written with
# its zeros, the left-over word (scale % 9 digits) only when it is not zero, and "0" when no fraction digit
# was written; no leading zeros in the integer part; BigDecimal has no negative zero. Texts below are
# worked out by hand from that rule (1.0 and 422.0 for DECIMAL(12,2) as a Canal 1.1.7 server sent them).
@pytest.mark.parametrize(("precision", "scale", "value", "text"), [
    (12, 2, "1.00", "1.0"), (12, 2, "422.00", "422.0"), (12, 2, "1.50", "1.50"), (12, 2, "1.05", "1.05"),
    (12, 2, "-1.00", "-1.0"), (12, 2, "-0.50", "-0.50"), (12, 2, "0.00", "0.0"), (12, 2, "-0.00", "0.0"),
    (12, 2, "9999999999.99", "9999999999.99"), (12, 2, "0.01", "0.01"), (12, 2, "-422.10", "-422.10"),
    (10, 0, "422", "422"), (10, 0, "0", "0"), (10, 0, "-7", "-7"),
    (5, 5, "0.00000", "0.0"), (5, 5, "0.00010", "0.00010"), (3, 1, "5.0", "5.0"), (3, 1, "-5.0", "-5.0"),
    (9, 8, "1.00000000", "1.0"), (9, 8, "1.00000001", "1.00000001"),
    # scale 9: one full word, always written
    (20, 9, "1.000000000", "1.000000000"), (20, 9, "0.000000000", "0.000000000"),
    # scale 10: a full word (always) and one left-over digit (only when not 0)
    (20, 10, "1.0000000000", "1.000000000"), (20, 10, "1.1000000000", "1.100000000"),
    (20, 10, "1.0000000001", "1.0000000001"), (20, 10, "-1.0000000000", "-1.000000000"),
    (30, 18, "1.000000000000000000", "1.000000000000000000"),
    (30, 20, "1.00000000000000000000", "1.000000000000000000"),
    (30, 20, "1.00000000000000000010", "1.00000000000000000010"),
    (65, 30, "12345678901234567890123456789012345.000000000000000000000000000000",
     "12345678901234567890123456789012345.000000000000000000000000000"),
    (65, 0, "-" + "9" * 65, "-" + "9" * 65),
    (18, 0, "123456789012345678", "123456789012345678"),
])
def test_decimal(precision: int, scale: int, value: str, text: str) -> None:
    col = one(c(CT.NEWDECIMAL, precision=precision, scale=scale), m("decimal", f"decimal({precision},{scale})"),
              Decimal(value))
    assert (col.sqlType, col.value) == (3, text)
    assert Decimal(col.value) == Decimal(value)  # only zeros are left out, never a digit of the value


def test_float_and_double_columns() -> None:
    # FLOAT -> Types.REAL (7) printed with Float.toString; DOUBLE -> Types.DOUBLE (8), Double.toString
    assert (lambda x: (x.sqlType, x.value))(one(c(CT.FLOAT, 4), m("float", "float"), f32(0.1))) == (7, "0.1")
    assert (lambda x: (x.sqlType, x.value))(one(c(CT.DOUBLE, 8), m("double", "double"), 449847.0)) == (8, "449847.0")
    assert one(c(CT.DOUBLE, 8), m("double", "double"), 1e-7).value == "1.0E-7"


# RowsLogBuffer: DATETIME2/TIMESTAMP2/TIME2 print "." + exactly meta (fsp) digits when meta >= 1;
# zero values are "0000-00-00 00:00:00"; TIMESTAMP goes through java.sql.Timestamp.toString (JVM zone).
def test_datetime_and_date() -> None:
    v = dt.datetime(2020, 1, 2, 3, 4, 5, 120000)
    assert (lambda x: (x.sqlType, x.value))(one(c(CT.DATETIME2, fsp=3), m("datetime", "datetime(3)"), v)) == (
        93, "2020-01-02 03:04:05.120")
    assert one(c(CT.DATETIME2, fsp=0), m("datetime", "datetime"), v.replace(microsecond=0)).value == \
        "2020-01-02 03:04:05"
    assert one(c(CT.DATETIME2, fsp=6), m("datetime", "datetime(6)"), dt.datetime(2020, 1, 2)).value == \
        "2020-01-02 00:00:00.000000"
    assert one(c(CT.DATETIME2, fsp=2), m("datetime", "datetime(2)"), "0000-00-00 00:00:00.00").value == \
        "0000-00-00 00:00:00.00"
    assert one(c(CT.DATETIME, 0), m("datetime", "datetime"), dt.datetime(999, 12, 31, 23, 59, 59)).value == \
        "0999-12-31 23:59:59"
    assert (lambda x: (x.sqlType, x.value))(one(c(CT.DATE), m("date", "date"), dt.date(2017, 4, 24))) == (
        91, "2017-04-24")
    assert one(c(CT.DATE), m("date", "date"), "0000-00-00").value == "0000-00-00"


def test_time() -> None:
    assert (lambda x: (x.sqlType, x.value))(one(c(CT.TIME2, fsp=0), m("time", "time"),
                                               dt.timedelta(hours=838, minutes=59, seconds=59))) == (92, "838:59:59")
    assert one(c(CT.TIME2, fsp=2), m("time", "time(2)"), -dt.timedelta(seconds=1, microseconds=100000)).value == \
        "-00:00:01.10"
    assert one(c(CT.TIME2, fsp=2), m("time", "time(2)"), -dt.timedelta(microseconds=500000)).value == "-00:00:00.50"
    assert one(c(CT.TIME2, fsp=6), m("time", "time(6)"), dt.timedelta(hours=1, microseconds=5)).value == \
        "01:00:00.000005"
    assert one(c(CT.TIME, 0), m("time", "time"), dt.timedelta(0)).value == "00:00:00"


def test_timestamp_time_zone() -> None:
    # 1493012711 is 2017-04-24 05:45:11 UTC (zalora fixture); Asia/Shanghai is UTC+8 all year
    v = dt.datetime.fromtimestamp(1493012711, UTC)
    assert (lambda x: (x.sqlType, x.value))(one(c(CT.TIMESTAMP2, fsp=0), m("timestamp", "timestamp"), v)) == (
        93, "2017-04-24 05:45:11")
    assert one(c(CT.TIMESTAMP2, fsp=0), m("timestamp", "timestamp"), v, tz="Asia/Shanghai").value == \
        "2017-04-24 13:45:11"
    assert one(c(CT.TIMESTAMP2, fsp=3), m("timestamp", "timestamp(3)"), v + dt.timedelta(microseconds=5000),
               tz="America/New_York").value == "2017-04-24 01:45:11.005"
    assert one(c(CT.TIMESTAMP, 0), m("timestamp", "timestamp"), "0000-00-00 00:00:00").value == "0000-00-00 00:00:00"
    # default zone: this process's local zone, like Canal's JVM default
    local = v.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    assert one(c(CT.TIMESTAMP2, fsp=0), m("timestamp", "timestamp"), v, tz=None).value == local


# RowsLogBuffer: YEAR -> "0000" for 0 else the year, javaType VARCHAR; ENUM -> the stored index,
# javaType INTEGER; SET -> the bitmask, javaType BIT; BIT -> the unsigned number, javaType BIT.
def test_year_enum_set_bit() -> None:
    assert (lambda x: (x.sqlType, x.value))(one(c(CT.YEAR), m("year", "year(4)"), 2155)) == (12, "2155")
    assert one(c(CT.YEAR), m("year", "year(4)"), 0).value == "0000"
    ev = ("a", "b", "c")
    assert (lambda x: (x.sqlType, x.value))(one(c(CT.ENUM, enum_values=ev), m("enum", "enum('a','b','c')",
                                                                                enum_values=ev), "b")) == (4, "2")
    assert one(c(CT.ENUM, enum_values=ev), m("enum", "enum('a','b','c')", enum_values=ev), "").value == "0"
    assert one(c(CT.ENUM), m("enum", "enum('a','b','c')"), 3).value == "3"  # index from a decoder without values
    assert (lambda x: (x.sqlType, x.value))(one(c(CT.SET, set_values=ev), m("set", "set('a','b','c')",
                                                                              set_values=ev), "a,c")) == (-7, "5")
    assert one(c(CT.SET, set_values=ev), m("set", "set('a','b','c')", set_values=ev), "").value == "0"
    assert (lambda x: (x.sqlType, x.value))(one(c(CT.BIT, bits=64), m("bit", "bit(64)"), 2**64 - 1)) == (
        -7, "18446744073709551615")


# LogEventConvert: BINARY/VARBINARY/LONGVARBINARY values -> CLOB (2005) text when the column type is
# exactly tinytext/text/mediumtext/longtext, else BLOB (2004) as new String(bytes, "ISO-8859-1");
# a column type containing "binary" makes CHAR/VARCHAR binary (BINARY/VARBINARY -> BLOB).
def test_strings_and_binaries() -> None:
    assert (lambda x: (x.sqlType, x.value))(one(c(CT.VARCHAR, 80, collation=45), m(
        "varchar", "varchar(20)", charset="utf8mb4", collation_id=45), "héllo")) == (12, "héllo")
    assert (lambda x: (x.sqlType, x.value))(one(c(CT.STRING, collation=33), m(
        "char", "char(20)", charset="utf8", collation_id=33), "German")) == (1, "German")
    assert (lambda x: (x.sqlType, x.value))(one(c(CT.BLOB, 2, collation=45), m(
        "text", "text", charset="utf8mb4", collation_id=45), "文本")) == (2005, "文本")
    # a text value the decoder left as bytes is decoded in the column's charset
    assert one(c(CT.BLOB, 2), m("text", "text", charset="latin1"), "café".encode("latin-1")).value == "café"
    assert (lambda x: (x.sqlType, x.value))(one(c(CT.BLOB, 2, collation=63), m("blob", "blob"),
                                               b"\x00\xff\x80A")) == (2004, "\x00\xff\x80A")
    assert (lambda x: (x.sqlType, x.value))(one(c(CT.VARCHAR, 16, collation=63), m("varbinary", "varbinary(16)"),
                                               b"\xde\xad")) == (2004, "\xde\xad")
    assert (lambda x: (x.sqlType, x.value))(one(c(CT.STRING, collation=63), m("binary", "binary(2)"),
                                               b"\x01\x02")) == (2004, "\x01\x02")
    assert (lambda x: (x.sqlType, x.value))(one(c(CT.GEOMETRY, 4), m("point", "point"),
                                               b"\x00\x00\x00\x00\x01")) == (2004, "\x00\x00\x00\x00\x01")
    assert (lambda x: (x.sqlType, x.value))(one(c(CT.JSON, 4), m("json", "json"), '{"a": [1, 2.5]}')) == (
        12, '{"a": [1, 2.5]}')
    assert one(c(CT.VARCHAR, 80, collation=45), m("varchar", "varchar(20)"), "").value == ""


# RowsLogBuffer.mysqlToJavaType for NULL values; since Canal 1.1.7 LogEventConvert.parseOneRow maps a NULL's
# BINARY/VARBINARY/LONGVARBINARY (-2/-3/-4) to CLOB (2005) when the column type is exactly
# tinytext/text/mediumtext/longtext, else BLOB (2004): the codes of the non-NULL values
@pytest.mark.parametrize(("col", "cm", "sql_type"), [
    (c(CT.LONG), m("int", "int(11)"), 4), (c(CT.TINY), m("tinyint", "tinyint(4)"), -6),
    (c(CT.LONGLONG, unsigned=True), m("bigint", "bigint(20) unsigned", unsigned=True), -5),
    (c(CT.NEWDECIMAL, precision=10, scale=2), m("decimal", "decimal(10,2)"), 3),
    (c(CT.FLOAT, 4), m("float", "float"), 7), (c(CT.DOUBLE, 8), m("double", "double"), 8),
    (c(CT.TIMESTAMP2), m("timestamp", "timestamp"), 93), (c(CT.DATETIME2), m("datetime", "datetime"), 93),
    (c(CT.TIME2), m("time", "time"), 92), (c(CT.DATE), m("date", "date"), 91), (c(CT.YEAR), m("year", "year"), 12),
    (c(CT.ENUM), m("enum", "enum('a')"), 4), (c(CT.SET), m("set", "set('a')"), 2004),
    (c(CT.BIT), m("bit", "bit(3)"), -7),
    (c(CT.BLOB, 1), m("tinytext", "tinytext"), 2005), (c(CT.BLOB, 2), m("text", "text"), 2005),
    (c(CT.BLOB, 3), m("mediumtext", "mediumtext"), 2005),
    (c(CT.BLOB, 4), m("longtext", "longtext"), 2005),  # also MariaDB's JSON
    (c(CT.BLOB, 1), m("tinyblob", "tinyblob"), 2004), (c(CT.BLOB, 4), m("longblob", "longblob"), 2004),
    (c(CT.VARCHAR, 40), m("varchar", "varchar(10)"), 12),
    (c(CT.VARCHAR, 40), m("varbinary", "varbinary(40)"), 2004), (c(CT.STRING, 40), m("char", "char(10)"), 1),
    (c(CT.STRING, 40), m("binary", "binary(40)"), 2004), (c(CT.GEOMETRY, 4), m("geometry", "geometry"), 2004),
    (c(CT.GEOMETRY, 4), m("point", "point"), 2004),
    (c(CT.JSON, 4), m("json", "json"), 1111),  # MySQL's JSON type: OTHER, which the 1.1.7 rule leaves alone
])
def test_null_sql_types(col: Column, cm: ColumnMeta, sql_type: int) -> None:
    x = one(col, cm, None)
    assert (x.sqlType, x.isNull, x.HasField("isNull"), x.value) == (sql_type, True, True, "")


# ---- flags and layout --------------------------------------------------------------------------------

COLS = [Column(0, CT.LONG, 0, False), Column(1, CT.VARCHAR, 40, True, collation=45), Column(2, CT.LONG, 0, True)]
METAS = [ColumnMeta("id", "int", "int(11)", nullable=False, is_key=True),
         ColumnMeta("name", "varchar", "varchar(10)", charset="utf8mb4", collation_id=45),
         ColumnMeta("n", "int", "int(11)")]


def test_insert_after_columns_only_all_updated() -> None:
    # LogEventConvert: INSERT rows go to afterColumns (isAfter=true) and isUpdate() finds no before
    # column, so every column is updated=true
    rc = convert(COLS, METAS, [(1, "a", None)])
    (rd,) = rc.rowDatas
    assert len(rd.beforeColumns) == 0
    assert [(x.index, x.name, x.isKey, x.updated, x.isNull) for x in rd.afterColumns] == [
        (0, "id", True, True, False), (1, "name", False, True, False), (2, "n", False, True, True)]


def test_delete_before_columns_only_not_updated() -> None:
    rc = convert(COLS, METAS, [(1, "a", None), (2, "b", 5)], kind="delete")
    assert [len(rd.afterColumns) for rd in rc.rowDatas] == [0, 0]
    assert [[x.updated for x in rd.beforeColumns] for rd in rc.rowDatas] == [[False] * 3, [False] * 3]
    assert rc.eventType == pb.DELETE and rc.HasField("isDdl") and not rc.isDdl


def test_update_flags() -> None:
    rows = [((1, "a", None), (1, "b", None)),  # name changed, NULL -> NULL unchanged
            ((2, "x", None), (2, "x", 7)),  # NULL -> value changed
            ((3, "y", 4), (3, "y", None))]  # value -> NULL changed
    rc = convert(COLS, METAS, rows, kind="update")
    assert [[x.updated for x in rd.beforeColumns] for rd in rc.rowDatas] == [[False] * 3] * 3
    assert [[x.updated for x in rd.afterColumns] for rd in rc.rowDatas] == [
        [False, True, False], [False, False, True], [False, False, True]]


def test_minimal_image_absent_columns_are_left_out() -> None:
    # binlog_row_image=MINIMAL: before holds the key only, after the changed columns; Canal skips
    # columns missing from the image (cols.get(i) false) and treats after columns with no before
    # counterpart as updated
    rows = [((1, ABSENT, ABSENT), (ABSENT, "n", ABSENT))]
    rc = convert(COLS, METAS, rows, kind="update")
    (rd,) = rc.rowDatas
    assert [(x.index, x.name) for x in rd.beforeColumns] == [(0, "id")]
    assert [(x.index, x.name, x.updated) for x in rd.afterColumns] == [(1, "name", True)]


def test_rows_header_and_typed_rows() -> None:
    rows = [(1, "a", None), (2, "b", 3), (3, "c", 4)]
    ce = EntryConverter().rows(rows_event(COLS, rows), TableMeta("db", "t", tuple(METAS)),
                               GtidInfo(executed="u:1-3", current="u:3", sequence_number=3, last_committed=2))
    h = ce.entry.header
    assert (h.logfileName, h.logfileOffset, h.executeTime, h.eventLength, h.schemaName, h.tableName) == (
        "mysql-bin.000001", 1000, 1_600_000_000_000, 100, "db", "t")
    assert [(p.key, p.value) for p in h.props] == [("curtGtid", "u:3"), ("curtGtidSn", "3"), ("curtGtidLct", "2"),
                                                   ("rowsCount", "3")]
    assert h.gtid == "u:1-3" and h.eventType == pb.INSERT
    assert ce.columns == ("id", "name", "n") and ce.rows is rows
    assert ce.position.journal_name == "mysql-bin.000001" and ce.position.position == 1000
    assert ce.position.timestamp == 1_600_000_000_000 and ce.position.gtid == "u:1-3"
    assert pb.RowChange.FromString(ce.entry.storeValue).tableId == 42
    lp = EntryConverter(LogIdentity("10.0.0.5", 3306)).log_position(ce)
    assert lp.to_json() == ('{"identity":{"slaveId":-1,"sourceAddress":{"address":"10.0.0.5","port":3306}},'
                            '"postion":{"gtid":"u:1-3","included":false,"journalName":"mysql-bin.000001",'
                            '"position":1000,"serverId":1,"timestamp":1600000000000}}')


def test_without_table_meta_names_come_from_the_table_map() -> None:
    cols = [Column(0, CT.LONG, 0, False, name="id"), Column(1, CT.VARCHAR, 40, True, name="s", collation=45)]
    tdef_rows = rows_event(cols, [(1, "x")])
    tdef_rows.table = TableDef("db", "t", tuple(cols), primary_key=(0,))
    ce = EntryConverter().rows(tdef_rows, None)
    after = pb.RowChange.FromString(ce.entry.storeValue).rowDatas[0].afterColumns
    assert [(x.name, x.isKey, x.mysqlType, x.sqlType) for x in after] == [("id", True, "", 4), ("s", False, "", 12)]


def test_more_binlog_columns_than_history_is_a_mismatch() -> None:
    with pytest.raises(SchemaMismatchError, match=r"db\.t.*mysql-bin\.000001:1000"):
        EntryConverter().rows(rows_event(COLS, [(1, "a", 2)]), TableMeta("db", "t", tuple(METAS[:2])))


# ---- queries -------------------------------------------------------------------------------------------

def query_event(sql: str, schema: str = "db") -> E.QueryEvent:
    return E.QueryEvent(type_code=2, timestamp=1_600_000_000, server_id=1, length=80, log_pos=280, flags=0,
                        file="mysql-bin.000001", position=200, thread_id=77, exec_time=0, error_code=0,
                        schema=schema, query=sql, status={})


@pytest.mark.parametrize(("sql", "kind"), [
    ("BEGIN", "begin"), ("begin", "begin"), ("COMMIT", "commit"), ("XA START 'x'", "xa_start"),
    ("xa end 'x'", "xa_end"), ("XA COMMIT 'x'", "xa_commit"), ("XA ROLLBACK 'x'", "xa_rollback"),
    ("XA PREPARE 'x'", "other"), ("CREATE TABLE t (a int)", "other"), ("DELETE FROM t", "other"),
])
def test_classify_query(sql: str, kind: str) -> None:
    assert classify_query(sql) == kind


def test_query_dispatch() -> None:
    conv = EntryConverter()
    b = conv.query(query_event("BEGIN"))
    assert b.entry.entryType == pb.TRANSACTIONBEGIN
    assert pb.TransactionBegin.FromString(b.entry.storeValue).threadId == 77
    assert not b.entry.header.HasField("eventType")
    # LogEventConvert: "COMMIT" query -> createTransactionEnd(0L) (MyISAM has no XID event)
    e = conv.query(query_event("COMMIT"))
    assert pb.TransactionEnd.FromString(e.entry.storeValue).transactionId == "0"
    xs = conv.query(query_event("XA START X'61',X'',1"))
    tb = pb.TransactionBegin.FromString(xs.entry.storeValue)
    assert [(p.key, p.value) for p in tb.props] == [("XA_TYPE", "XA START"), ("XA_XID", " X'61',X'',1")]
    xc = conv.query(query_event("XA COMMIT X'61',X'',1"))
    assert xc.entry.header.eventType == pb.XACOMMIT
    rc = pb.RowChange.FromString(xc.entry.storeValue)
    assert rc.eventType == pb.XACOMMIT and not rc.HasField("isDdl") and rc.sql == "XA COMMIT X'61',X'',1"
    # statement-based DML: RowChange.isDdl false; DDL: true; ddlSchemaName = the session schema
    dml = conv.query(query_event("DELETE FROM `test_db`.`filler`"),
                     DdlResult(event_type=3, schema="test_db", table="filler", ddl_schema="db"))
    rc = pb.RowChange.FromString(dml.entry.storeValue)
    assert (rc.eventType, rc.isDdl, rc.ddlSchemaName, dml.entry.header.tableName) == (3, False, "db", "filler")
    other = conv.query(query_event("GRANT SELECT ON *.* TO u", schema=""))
    rc = pb.RowChange.FromString(other.entry.storeValue)
    assert (rc.eventType, rc.isDdl, rc.ddlSchemaName) == (7, True, "")


def test_gtid_log_entries() -> None:
    conv = EntryConverter()
    g = E.GtidEvent(type_code=33, timestamp=1, server_id=1, length=65, log_pos=219, flags=0, file="f", position=154,
                    anonymous=False, commit_flag=True, sid="u", gno=5, last_committed=4, sequence_number=5)
    ce = conv.gtid_log(g)
    assert ce.entry.entryType == pb.GTIDLOG and ce.entry.header.eventType == pb.GTID
    # LogEventConvert.parseGTIDLogEvent overwrites its single Pair: with logical clocks it ends as
    # {sequenceNumber: n}
    assert pb.Pair.FromString(ce.entry.storeValue) == pb.Pair(key="sequenceNumber", value="5")
    mg = E.MariaGtidEvent(type_code=162, timestamp=1, server_id=2, length=38, log_pos=300, flags=0, file="f",
                          position=262, seq_no=9, domain_id=0, gtid_flags=0)
    assert pb.Pair.FromString(conv.gtid_log(mg).entry.storeValue) == pb.Pair(key="gtid", value="0-2-9")
    # a MariaDB GTID event starts a transaction: TRANSACTIONBEGIN without a thread id
    b = conv.begin(mg)
    assert b.entry.entryType == pb.TRANSACTIONBEGIN and b.entry.storeValue == b""
