"""The staging tests' every-type table: its columns (DDL type and the documented Spark type), boundary rows (the
largest, the smallest, MariaDB's zero dates) and random rows, and their INSERT. Shared by the staging and the snapshot
tests, which must agree on what every MariaDB type looks like staged."""

from __future__ import annotations

import datetime as dt
import random
import uuid
from typing import Any

TABLE = "stg_types"
UNI = "aZ09 é中文ß∑😀Ω'\"\\%_,"

# (column, DDL type, the documented Spark type)
COLUMNS: list[tuple[str, str, str]] = [
    ("c_tinyint", "TINYINT", "tinyint"),
    ("c_utinyint", "TINYINT UNSIGNED", "smallint"),
    ("c_bool", "BOOLEAN", "tinyint"),
    ("c_smallint", "SMALLINT", "smallint"),
    ("c_usmallint", "SMALLINT UNSIGNED", "int"),
    ("c_mediumint", "MEDIUMINT", "int"),
    ("c_umediumint", "MEDIUMINT UNSIGNED", "int"),
    ("c_int", "INT", "int"),
    ("c_uint", "INT UNSIGNED", "bigint"),
    ("c_bigint", "BIGINT", "bigint"),
    ("c_ubigint", "BIGINT UNSIGNED", "decimal(20,0)"),
    ("c_float", "FLOAT", "float"),
    ("c_double", "DOUBLE", "double"),
    ("c_dec65", "DECIMAL(65,30)", "string"),
    ("c_dec38", "DECIMAL(38,10)", "decimal(38,10)"),
    ("c_dec12", "DECIMAL(12,2)", "decimal(12,2)"),
    ("c_dec55", "DECIMAL(5,5)", "decimal(5,5)"),
    ("c_udec", "DECIMAL(10,3) UNSIGNED", "decimal(10,3)"),
    ("c_bit1", "BIT(1)", "bigint"),
    ("c_bit63", "BIT(63)", "bigint"),
    ("c_bit64", "BIT(64)", "decimal(20,0)"),
    ("c_year", "YEAR", "smallint"),
    ("c_date", "DATE", "date"),
    ("c_datetime", "DATETIME", "timestamp_ntz"),
    ("c_datetime3", "DATETIME(3)", "timestamp_ntz"),
    ("c_datetime6", "DATETIME(6)", "timestamp_ntz"),
    ("c_timestamp", "TIMESTAMP NULL", "timestamp"),
    ("c_timestamp6", "TIMESTAMP(6) NULL", "timestamp"),
    ("c_time", "TIME", "string"),
    ("c_time6", "TIME(6)", "string"),
    ("c_char", "CHAR(10)", "string"),
    ("c_varchar", "VARCHAR(300)", "string"),
    ("c_latin1", "VARCHAR(20) CHARACTER SET latin1", "string"),
    ("c_tinytext", "TINYTEXT", "string"),
    ("c_text", "TEXT", "string"),
    ("c_mediumtext", "MEDIUMTEXT", "string"),
    ("c_longtext", "LONGTEXT", "string"),
    ("c_json", "JSON", "string"),
    ("c_enum", "ENUM('a','b''q','x,y','ü','')", "string"),
    ("c_set", "SET('a','b','c','ü')", "string"),
    ("c_binary", "BINARY(8)", "binary"),
    ("c_varbinary", "VARBINARY(300)", "binary"),
    ("c_tinyblob", "TINYBLOB", "binary"),
    ("c_blob", "BLOB", "binary"),
    ("c_mediumblob", "MEDIUMBLOB", "binary"),
    ("c_longblob", "LONGBLOB", "binary"),
    ("c_geometry", "GEOMETRY", "binary"),
    ("c_point", "POINT", "binary"),
    ("c_uuid", "UUID", "string"),
    ("c_inet6", "INET6", "string"),
    ("c_inet4", "INET4", "string"),
]
NAMES = ["id"] + [n for n, *_ in COLUMNS]
GEOM = {"c_geometry", "c_point"}
ZERO_DATE_COLUMNS = {"c_date", "c_datetime", "c_datetime3", "c_datetime6", "c_timestamp", "c_timestamp6"}

MAX_ROW = {
    "c_tinyint": 127, "c_utinyint": 255, "c_bool": 1, "c_smallint": 32767, "c_usmallint": 65535,
    "c_mediumint": 2**23 - 1, "c_umediumint": 2**24 - 1, "c_int": 2**31 - 1, "c_uint": 2**32 - 1,
    "c_bigint": 2**63 - 1, "c_ubigint": 2**64 - 1, "c_float": 3.4028234e38, "c_double": 1.7976931348623157e308,
    "c_dec65": "9" * 35 + "." + "9" * 30, "c_dec38": "9" * 28 + "." + "9" * 10, "c_dec12": "9999999999.99",
    "c_dec55": "0.99999", "c_udec": "9999999.999", "c_bit1": 1, "c_bit63": 2**63 - 1, "c_bit64": 2**64 - 1,
    "c_year": 2155, "c_date": "9999-12-31", "c_datetime": "9999-12-31 23:59:59",
    "c_datetime3": "9999-12-31 23:59:59.999", "c_datetime6": "9999-12-31 23:59:59.999999",
    "c_timestamp": "2038-01-19 03:14:07", "c_timestamp6": "2038-01-19 03:14:07.999999", "c_time": "838:59:59",
    "c_time6": "838:59:59.000000", "c_char": "中文😀中文😀中文😀z", "c_varchar": "😀" * 300, "c_latin1": "éñüßÆø",
    "c_tinytext": "x" * 255, "c_text": UNI * 10, "c_mediumtext": UNI * 100, "c_longtext": "y" * 70000,
    "c_json": '{"a": [1, 2.5, null, true], "ü": "😀"}', "c_enum": "ü", "c_set": "a,b,c,ü",
    "c_binary": bytes(range(0xF8, 0x100)), "c_varbinary": bytes(range(256)) + b"\xff" * 44,
    "c_tinyblob": bytes(range(0x80, 0x100)), "c_blob": bytes(range(256)) * 3, "c_mediumblob": b"\x00\xff" * 500,
    "c_longblob": bytes(range(256)) * 300, "c_geometry": "POLYGON((0 0,4 0,4 4,0 4,0 0))", "c_point": "POINT(1 2)",
    "c_uuid": "ffffffff-ffff-ffff-ffff-ffffffffffff", "c_inet6": "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
    "c_inet4": "255.255.255.255",
}
MIN_ROW = {
    "c_tinyint": -128, "c_utinyint": 0, "c_bool": 0, "c_smallint": -32768, "c_usmallint": 0, "c_mediumint": -2**23,
    "c_umediumint": 0, "c_int": -2**31, "c_uint": 0, "c_bigint": -2**63, "c_ubigint": 0, "c_float": -1.17549435e-38,
    "c_double": -2.2250738585072014e-308, "c_dec65": "-" + "9" * 35 + "." + "9" * 30, "c_dec38": "-0.0000000001",
    "c_dec12": "-9999999999.99", "c_dec55": "-0.00001", "c_udec": "0.000", "c_bit1": 0, "c_bit63": 0, "c_bit64": 0,
    "c_year": 0, "c_date": "1000-01-01", "c_datetime": "1000-01-01 00:00:00",
    "c_datetime3": "1000-01-01 00:00:00.001", "c_datetime6": "1000-01-01 00:00:00.000001",
    "c_timestamp": "1970-01-01 00:00:01", "c_timestamp6": "1970-01-01 00:00:01.000001", "c_time": "-838:59:59",
    "c_time6": "-00:00:00.000001", "c_char": "", "c_varchar": "", "c_latin1": "", "c_tinytext": "", "c_text": "",
    "c_mediumtext": "", "c_longtext": "", "c_json": "[]", "c_enum": "", "c_set": "", "c_binary": b"",
    "c_varbinary": b"", "c_tinyblob": b"", "c_blob": b"", "c_mediumblob": b"", "c_longblob": b"",
    "c_geometry": "POINT(0 0)", "c_point": "POINT(-180 -90)", "c_uuid": "00000000-0000-0000-0000-000000000000",
    "c_inet6": "::", "c_inet4": "0.0.0.0",
}
# zero dates, invalid dates (ALLOW_INVALID_DATES) and the invalid ENUM value '' (index 0)
ZERO_ROW = {**MIN_ROW, "c_date": "0000-00-00", "c_datetime": "2019-02-30 10:11:12",
            "c_datetime3": "0000-00-00 00:00:00.000", "c_datetime6": "2020-00-10 00:00:00.000001",
            "c_timestamp": "0000-00-00 00:00:00", "c_timestamp6": "0000-00-00 00:00:00.000000", "c_enum": "nope"}


def random_row(r: random.Random) -> dict[str, Any]:
    def text(n: int) -> str:
        return "".join(r.choice(UNI) for _ in range(r.randint(0, n)))

    def dec(p: int, s: int, signed: bool = True) -> str:
        ip = "".join(r.choice("0123456789") for _ in range(r.randint(1, p - s))) if p > s else "0"
        return ("-" if signed and r.random() < 0.5 else "") + ip + ("." + "".join(r.choice("0123456789")
                                                                               for _ in range(s)) if s else "")

    def when(fsp: int, lo: int = 1000, hi: int = 9999) -> str:
        d = dt.datetime(r.randint(lo, hi), r.randint(1, 12), r.randint(1, 28), r.randint(0, 23), r.randint(0, 59),
                        r.randint(0, 59), r.randint(0, 999999))
        return d.strftime("%Y-%m-%d %H:%M:%S") + (f".{d.microsecond:06d}"[:fsp + 1] if fsp else "")

    row = {
        "c_tinyint": r.randint(-128, 127), "c_utinyint": r.randint(0, 255), "c_bool": r.randint(0, 1),
        "c_smallint": r.randint(-32768, 32767), "c_usmallint": r.randint(0, 65535),
        "c_mediumint": r.randint(-2**23, 2**23 - 1), "c_umediumint": r.randint(0, 2**24 - 1),
        "c_int": r.randint(-2**31, 2**31 - 1), "c_uint": r.randint(0, 2**32 - 1),
        "c_bigint": r.randint(-2**63, 2**63 - 1), "c_ubigint": r.randint(0, 2**64 - 1),
        "c_float": r.uniform(-1e6, 1e6), "c_double": r.uniform(-1e15, 1e15), "c_dec65": dec(65, 30),
        "c_dec38": dec(38, 10), "c_dec12": dec(12, 2), "c_dec55": dec(5, 5), "c_udec": dec(10, 3, False),
        "c_bit1": r.randint(0, 1), "c_bit63": r.getrandbits(63), "c_bit64": r.getrandbits(64),
        "c_year": r.randint(1901, 2155), "c_date": when(0)[:10], "c_datetime": when(0), "c_datetime3": when(3),
        "c_datetime6": when(6), "c_timestamp": when(0, 1971, 2037), "c_timestamp6": when(6, 1971, 2037),
        "c_time": f"{r.randint(-838, 838)}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}",
        "c_time6": f"{r.randint(0, 99)}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}.{r.randint(0, 999999):06d}",
        "c_char": text(10).rstrip(" "), "c_varchar": text(300), "c_latin1": "".join(r.choice("aZ éñüßÆø'")
                                                                                   for _ in range(r.randint(0, 20))),
        "c_tinytext": text(60), "c_text": text(400), "c_mediumtext": text(400), "c_longtext": text(400),
        "c_json": f'{{"k": {r.randint(-10**12, 10**12)}, "s": "{r.choice("abc")}"}}',
        "c_enum": r.choice(["a", "b'q", "x,y", "ü", ""]),
        "c_set": ",".join(v for v in ("a", "b", "c", "ü") if r.random() < 0.5),
        "c_binary": bytes(r.getrandbits(8) for _ in range(r.randint(0, 8))),
        "c_varbinary": bytes(r.getrandbits(8) for _ in range(r.randint(0, 300))),
        "c_tinyblob": bytes(r.getrandbits(8) for _ in range(r.randint(0, 255))),
        "c_blob": bytes(r.getrandbits(8) for _ in range(r.randint(0, 600))),
        "c_mediumblob": bytes(r.getrandbits(8) for _ in range(r.randint(0, 600))),
        "c_longblob": bytes(r.getrandbits(8) for _ in range(r.randint(0, 600))),
        "c_geometry": f"POINT({r.uniform(-180, 180)} {r.uniform(-90, 90)})",
        "c_point": f"POINT({r.uniform(-1e3, 1e3)} {r.uniform(-1e3, 1e3)})",
        "c_uuid": str(uuid.UUID(int=r.getrandbits(128), version=4)),
        "c_inet6": r.choice(["::1", "::ffff:1.2.3.4", "2001:db8::8a2e:370:7334"]),
        "c_inet4": ".".join(str(r.randint(0, 255)) for _ in range(4)),
    }
    for name in list(row):
        if r.random() < 0.1:
            row[name] = None
    return row


def insert_rows(cur: Any, table: str, rows: list[tuple[int, dict[str, Any]]]) -> int:
    cols = ", ".join(NAMES)
    ph = ", ".join(["%s"] + ["ST_GeomFromText(%s)" if n in GEOM else "%s" for n, *_ in COLUMNS])
    return cur.executemany(f"INSERT INTO canal_test.{table} ({cols}) VALUES ({ph})",
                           [[i] + [row.get(n) for n, *_ in COLUMNS] for i, row in rows])
