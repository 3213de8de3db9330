"""pipelines.engine.types: the MySQL -> Arrow -> Spark mapping and the conversion of Canal's text and of PyMySQL
values, edge values included (expected values are the documented rule applied by hand)."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from pipelines.engine.reconcile import _java_hex, row_hash
from pipelines.engine.types import (
    TypeMappingError,
    arrow_type,
    convert_texts,
    from_db,
    parse_type,
    select_expr,
    spark_type,
    text_converter,
)

UTC = dt.UTC

# mysqlType (as Canal carries COLUMN_TYPE) -> (Arrow type, Spark type)
MAPPING: list[tuple[str, pa.DataType, str]] = [
    ("tinyint(4)", pa.int8(), "tinyint"),
    ("tinyint(1)", pa.int8(), "tinyint"),
    ("tinyint(3) unsigned", pa.int16(), "smallint"),
    ("smallint(6)", pa.int16(), "smallint"),
    ("smallint(5) unsigned", pa.int32(), "int"),
    ("mediumint(9)", pa.int32(), "int"),
    ("mediumint(8) unsigned", pa.int32(), "int"),
    ("int(11)", pa.int32(), "int"),
    ("int", pa.int32(), "int"),
    ("int(10) unsigned", pa.int64(), "bigint"),
    ("int unsigned", pa.int64(), "bigint"),
    ("int(10) unsigned zerofill", pa.int64(), "bigint"),
    ("bigint(20)", pa.int64(), "bigint"),
    ("bigint(20) unsigned", pa.decimal128(20, 0), "decimal(20,0)"),
    ("decimal(10,2)", pa.decimal128(10, 2), "decimal(10,2)"),
    ("decimal(10,3) unsigned", pa.decimal128(10, 3), "decimal(10,3)"),
    ("decimal(38,38)", pa.decimal128(38, 38), "decimal(38,38)"),
    ("decimal(39,0)", pa.string(), "string"),
    ("decimal(65,30)", pa.string(), "string"),
    ("float", pa.float32(), "float"),
    ("float(10,2)", pa.float32(), "float"),
    ("double", pa.float64(), "double"),
    ("double(10,2) unsigned", pa.float64(), "double"),
    ("bit(1)", pa.int64(), "bigint"),
    ("bit(63)", pa.int64(), "bigint"),
    ("bit(64)", pa.decimal128(20, 0), "decimal(20,0)"),
    ("date", pa.date32(), "date"),
    ("datetime", pa.timestamp("us"), "timestamp_ntz"),
    ("datetime(6)", pa.timestamp("us"), "timestamp_ntz"),
    ("timestamp", pa.timestamp("us", tz="UTC"), "timestamp"),
    ("timestamp(3)", pa.timestamp("us", tz="UTC"), "timestamp"),
    ("time", pa.string(), "string"),
    ("time(6)", pa.string(), "string"),
    ("year(4)", pa.int16(), "smallint"),
    ("char(10)", pa.string(), "string"),
    ("varchar(300)", pa.string(), "string"),
    ("tinytext", pa.string(), "string"),
    ("text", pa.string(), "string"),
    ("mediumtext", pa.string(), "string"),
    ("longtext", pa.string(), "string"),
    ("json", pa.string(), "string"),
    ("enum('a','b')", pa.string(), "string"),
    ("set('a','b')", pa.string(), "string"),
    ("binary(8)", pa.binary(), "binary"),
    ("varbinary(300)", pa.binary(), "binary"),
    ("tinyblob", pa.binary(), "binary"),
    ("blob", pa.binary(), "binary"),
    ("mediumblob", pa.binary(), "binary"),
    ("longblob", pa.binary(), "binary"),
    ("geometry", pa.binary(), "binary"),
    ("point", pa.binary(), "binary"),
    ("multipolygon", pa.binary(), "binary"),
    ("uuid", pa.string(), "string"),
    ("inet4", pa.string(), "string"),
    ("inet6", pa.string(), "string"),
]


@pytest.mark.parametrize(("mysql_type", "arrow", "spark"), MAPPING)
def test_mapping(mysql_type: str, arrow: pa.DataType, spark: str) -> None:
    assert arrow_type(mysql_type) == arrow
    assert arrow_type(mysql_type.upper()) == arrow  # DDL spelling may be upper case
    assert spark_type(mysql_type).simpleString() == spark


@pytest.mark.parametrize("bad", ["", "geography", "int(x)", "bit(65)", "enum", "decimal(10,2"])
def test_unknown_type_names_the_column(bad: str) -> None:
    with pytest.raises(TypeMappingError) as err:
        arrow_type(bad, "shop.orders.c1")
    assert "shop.orders.c1" in str(err.value) and repr(bad) in str(err.value)


def test_enum_and_set_labels_keep_case_and_quotes() -> None:
    t = parse_type("enum('A','b''c','x,y','(p)','')")
    assert t.labels == ("A", "b'c", "x,y", "(p)", "")


# (mysqlType, Canal text, time zone, staged value); None = NULL (from SQL NULL or unrepresentable)
U64_MAX = "18446744073709551615"
TEXT_CASES: list[tuple[str, str | None, str, Any]] = [
    ("tinyint(4)", "-128", "UTC", -128),
    ("tinyint(3) unsigned", "255", "UTC", 255),
    ("smallint(5) unsigned", "65535", "UTC", 65535),
    ("mediumint(8) unsigned", "16777215", "UTC", 16777215),
    ("int(11)", "-2147483648", "UTC", -2147483648),
    ("int(10) unsigned", "4294967295", "UTC", 4294967295),
    ("bigint(20)", "-9223372036854775808", "UTC", -9223372036854775808),
    ("bigint(20) unsigned", U64_MAX, "UTC", Decimal(U64_MAX)),
    ("bigint(20) unsigned", "0", "UTC", Decimal(0)),
    ("decimal(65,30)", "-12345678901234567890123456789012345.123456789012345678901234567890", "UTC",
     "-12345678901234567890123456789012345.123456789012345678901234567890"),
    ("decimal(65,30)", "0.000000000000000000000000000000", "UTC", "0.000000000000000000000000000000"),
    # Canal's text leaves out a zero left-over fraction word (scale % 9 digits): all scale digits are staged
    ("decimal(65,30)", "0." + "0" * 27, "UTC", "0." + "0" * 30),
    ("decimal(65,30)", "-1." + "0" * 27, "UTC", "-1." + "0" * 30),
    ("decimal(39,2)", "422.0", "UTC", "422.00"),
    ("decimal(39,2)", "-0.50", "UTC", "-0.50"),
    ("decimal(39,0)", "-7", "UTC", "-7"),
    ("decimal(12,2)", "1.0", "UTC", Decimal("1.00")),
    ("decimal(12,2)", "-422.0", "UTC", Decimal("-422.00")),
    ("decimal(20,10)", "1.000000000", "UTC", Decimal("1.0000000000")),
    ("decimal(10,2)", "-99999999.99", "UTC", Decimal("-99999999.99")),
    ("decimal(10,2)", "0.00", "UTC", Decimal("0.00")),
    ("decimal(38,0)", "9" * 38, "UTC", Decimal("9" * 38)),
    ("decimal(5,5)", "-0.00001", "UTC", Decimal("-0.00001")),
    ("float", "-0.0", "UTC", -0.0),
    ("float", "3.4028235E38", "UTC", 3.4028234663852886e38),
    ("float", "1.4E-45", "UTC", 1.401298464324817e-45),
    ("float", "0.1", "UTC", 0.10000000149011612),
    ("double", "-0.0", "UTC", -0.0),
    ("double", "4.9E-324", "UTC", 5e-324),
    ("double", "1.7976931348623157E308", "UTC", 1.7976931348623157e308),
    ("bit(1)", "1", "UTC", 1),
    ("bit(63)", str(2**63 - 1), "UTC", 2**63 - 1),
    ("bit(64)", U64_MAX, "UTC", Decimal(U64_MAX)),
    ("year(4)", "0000", "UTC", 0),
    ("year(4)", "2155", "UTC", 2155),
    ("date", "1000-01-01", "UTC", dt.date(1000, 1, 1)),
    ("date", "9999-12-31", "UTC", dt.date(9999, 12, 31)),
    ("date", "0000-00-00", "UTC", None),
    ("date", "2019-02-30", "UTC", None),
    ("date", "2019-00-10", "UTC", None),
    ("date", "2019-04-00", "UTC", None),
    ("date", "0000-01-01", "UTC", None),
    ("datetime", "2019-02-28 23:59:59", "UTC", dt.datetime(2019, 2, 28, 23, 59, 59)),
    ("datetime(3)", "2019-02-28 23:59:59.120", "UTC", dt.datetime(2019, 2, 28, 23, 59, 59, 120000)),
    ("datetime(6)", "9999-12-31 23:59:59.999999", "UTC", dt.datetime(9999, 12, 31, 23, 59, 59, 999999)),
    ("datetime(6)", "1000-01-01 00:00:00.000001", "UTC", dt.datetime(1000, 1, 1, 0, 0, 0, 1)),
    ("datetime", "0000-00-00 00:00:00", "UTC", None),
    ("datetime(3)", "0000-00-00 00:00:00.000", "UTC", None),
    ("datetime", "2019-02-30 10:11:12", "UTC", None),
    ("timestamp", "1970-01-01 00:00:01", "UTC", dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)),
    ("timestamp(6)", "2038-01-19 03:14:07.999999", "UTC", dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC)),
    ("timestamp", "0000-00-00 00:00:00", "UTC", None),
    # the text is in the converter's zone: Shanghai is UTC+8 all year
    ("timestamp", "2024-01-01 08:00:00", "Asia/Shanghai", dt.datetime(2024, 1, 1, 0, 0, tzinfo=UTC)),
    ("timestamp(3)", "2024-07-01 12:00:00.500", "+05:30", dt.datetime(2024, 7, 1, 6, 30, 0, 500000, tzinfo=UTC)),
    # New York: summer UTC-4, winter UTC-5; 01:30 on 2024-11-03 happens twice (the earlier one is taken),
    # 02:30 on 2024-03-10 never happens
    ("timestamp", "2024-07-01 12:00:00", "America/New_York", dt.datetime(2024, 7, 1, 16, 0, tzinfo=UTC)),
    ("timestamp", "2024-01-01 12:00:00", "America/New_York", dt.datetime(2024, 1, 1, 17, 0, tzinfo=UTC)),
    ("timestamp", "2024-11-03 01:30:00", "America/New_York", dt.datetime(2024, 11, 3, 5, 30, tzinfo=UTC)),
    ("timestamp", "2024-03-10 02:30:00", "America/New_York", None),
    ("time", "-838:59:59", "UTC", "-838:59:59"),
    ("time(6)", "00:00:00.000001", "UTC", "00:00:00.000001"),
    ("enum('a','b''c','x,y')", "0", "UTC", ""),
    ("enum('a','b''c','x,y')", "2", "UTC", "b'c"),
    ("enum('a','b''c','x,y')", "3", "UTC", "x,y"),
    ("set('a','b','c','ü')", "0", "UTC", ""),
    ("set('a','b','c','ü')", "5", "UTC", "a,c"),
    ("set('a','b','c','ü')", "15", "UTC", "a,b,c,ü"),
    ("blob", "\x00\x7f\x80\xff", "UTC", b"\x00\x7f\x80\xff"),
    ("binary(4)", "".join(map(chr, range(0x80, 0x84))), "UTC", bytes(range(0x80, 0x84))),
    ("longblob", "".join(map(chr, range(256))), "UTC", bytes(range(256))),
    ("varchar(10)", "", "UTC", ""),
    ("text", "中文😀", "UTC", "中文😀"),
    ("uuid", "00000000-0000-0000-0000-000000000000", "UTC", "00000000-0000-0000-0000-000000000000"),
    ("int(11)", None, "UTC", None),
    ("date", None, "UTC", None),
]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)  # -0.0 keeps its sign
    return type(a) is type(b) and a == b


@pytest.mark.parametrize(("mysql_type", "text", "tz", "want"), TEXT_CASES)
def test_text_conversion(mysql_type: str, text: str | None, tz: str, want: Any) -> None:
    got = text_converter(mysql_type, tz)(text)
    assert _same(got, want), (got, want)
    arr, bad = convert_texts(mysql_type, [text], tz)
    assert arr.type == arrow_type(mysql_type)
    assert _same(arr.to_pylist()[0], want)
    assert bad == (1 if text is not None and want is None else 0)  # unrepresentable, counted


def test_vectorized_column_counts_every_unrepresentable_value() -> None:
    texts = ["2020-02-29", "0000-00-00", None, "2019-02-30", "2020-02-29", "0000-00-00"]
    arr, bad = convert_texts("date", texts)
    assert arr.to_pylist() == [dt.date(2020, 2, 29), None, None, None, dt.date(2020, 2, 29), None]
    assert bad == 3
    arr, bad = convert_texts("timestamp", ["2024-03-10 02:30:00", "2024-03-10 03:30:00"], "America/New_York")
    assert arr.to_pylist() == [None, dt.datetime(2024, 3, 10, 7, 30, tzinfo=UTC)] and bad == 1


def test_vectorized_path_accepts_an_arrow_array() -> None:
    arr, bad = convert_texts("bigint(20) unsigned", pa.array([U64_MAX, None, "1"]))
    assert arr.to_pylist() == [Decimal(U64_MAX), None, Decimal(1)] and bad == 0


# PyMySQL values (session time_zone '+00:00') -> staged value
DB_CASES: list[tuple[str, Any, Any]] = [
    ("bigint(20) unsigned", 2**64 - 1, Decimal(U64_MAX)),
    ("int(10) unsigned", 4294967295, 4294967295),
    ("bit(64)", b"\xff" * 8, Decimal(U64_MAX)),
    ("bit(13)", b"\x1f\xff", 8191),
    ("bit(1)", b"\x01", 1),
    ("decimal(65,30)", Decimal("0E-30"), "0.000000000000000000000000000000"),
    ("decimal(65,30)", Decimal("-1.500000000000000000000000000000"), "-1.500000000000000000000000000000"),
    ("decimal(10,2)", Decimal("-12.50"), Decimal("-12.50")),
    ("float", 0.10000000149011612, 0.10000000149011612),  # `c * 1e0`: the double the float widens to
    ("double", 1.7976931348623157e308, 1.7976931348623157e308),
    ("date", dt.date(2020, 1, 1), dt.date(2020, 1, 1)),
    ("date", "0000-00-00", None),  # PyMySQL returns zero and invalid dates as str
    ("datetime(6)", dt.datetime(2020, 1, 1, 1, 2, 3, 4), dt.datetime(2020, 1, 1, 1, 2, 3, 4)),
    ("datetime", "2019-02-30 00:00:00", None),
    ("timestamp(6)", dt.datetime(2020, 1, 1, 1, 2, 3, 4), dt.datetime(2020, 1, 1, 1, 2, 3, 4, tzinfo=UTC)),
    ("timestamp", "0000-00-00 00:00:00", None),
    ("time(3)", dt.timedelta(seconds=-1.5), "-00:00:01.500"),
    ("time", dt.timedelta(hours=838, minutes=59, seconds=59), "838:59:59"),
    ("time(6)", dt.timedelta(microseconds=1), "00:00:00.000001"),
    ("year(4)", 0, 0),
    ("set('a','b','c')", "a,c", "a,c"),
    ("enum('a','b')", "", ""),
    ("blob", b"\x80\xff", b"\x80\xff"),
    ("longtext", "{\"a\": 1}", "{\"a\": 1}"),
    ("int(11)", None, None),
]


@pytest.mark.parametrize(("mysql_type", "value", "want"), DB_CASES)
def test_from_db(mysql_type: str, value: Any, want: Any) -> None:
    assert _same(from_db(mysql_type)(value), want)


def test_select_expr_reads_float_as_its_double() -> None:
    assert select_expr("f", "float") == "`f` * 1e0"
    assert select_expr("we`ird", "int(11)") == "`we``ird`"


@pytest.mark.parametrize(("value", "java"), [
    # Java's String.format("%a", d) / Double.toHexString(d)
    (1.0, "0x1.0p0"), (-2.5, "-0x1.4p1"), (0.1, "0x1.999999999999ap-4"), (0.0, "0x0.0p0"), (-0.0, "0x0.0p0"),
    (5e-324, "0x0.0000000000001p-1022"), (1.7976931348623157e308, "0x1.fffffffffffffp1023"),
    (0.10000000149011612, "0x1.99999ap-4"),
])
def test_canonical_float_text_is_javas_hex(value: float, java: str) -> None:
    assert _java_hex(value) == java


def test_row_hash_separates_columns_and_nulls() -> None:
    fns = [str, str]
    assert row_hash(["ab", "c"], fns) != row_hash(["a", "bc"], fns)
    assert row_hash([None, "~"], fns) != row_hash(["~", None], fns)
    assert row_hash(["", None], fns) != row_hash([None, ""], fns)
