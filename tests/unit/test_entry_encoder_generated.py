"""Differential test of the generated row encoders (entry/rowcodegen.py ``build_encoder``) against the
generic per-column path (``rowdata.encode_rows``), which stays the reference: random rows per column type,
NULL and ABSENT values, values of unusual Python types (which the generated code hands to the column's
formatter), UPDATE images that differ or not, and time zones must all give identical bytes."""

from __future__ import annotations

import datetime as dt
import math
import random
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from canal_core.binlog import events as E
from canal_core.binlog.constants import ColumnType as CT
from canal_core.binlog.rows import ABSENT
from canal_core.binlog.tablemap import Column, TableDef
from canal_core.entry import EntryConverter, rowcodegen
from canal_core.entry.rowcodegen import TablePlan
from canal_core.entry.rowdata import encode_rows
from canal_core.parse.model import EVENT_DELETE, EVENT_INSERT, EVENT_UPDATE, ColumnMeta, TableMeta
from canal_core.protocol.proto import EntryProtocol_pb2 as pb

Gen = Callable[[random.Random], Any]
UTC = dt.UTC


def pick(*gens: Gen) -> Gen:
    return lambda r: r.choice(gens)(r)


def const(*values: Any) -> Gen:
    return lambda r: r.choice(values)


def ints(bits: int, unsigned: bool) -> Gen:
    half, full = 1 << (bits - 1), 1 << bits
    edges = (0, 1, -1, half - 1, half, -half, full - 1, 127, 128, -128)
    lo, hi = (0, full - 1) if unsigned else (-half, half - 1)
    return pick(lambda r: r.randint(lo, hi), lambda r: r.randint(-half, full - 1), const(*edges),
                lambda r: r.randint(-200, 200), const(True, False, "12", 7.0, Decimal(3)))


def decimals(r: random.Random) -> Any:
    choice = r.random()
    if choice < 0.1:
        return r.choice([Decimal("0"), Decimal("-0.00"), Decimal("0E-10"), Decimal("1E+3"), Decimal("1.5E-7"),
                         Decimal("-1E-12"), Decimal("NaN"), Decimal("-Infinity"), 5, "1.50", 1.5])
    scale = r.randint(0, 30)
    digits = r.randint(1, 65)
    return Decimal(r.randint(-(10**digits), 10**digits)).scaleb(-scale)


def doubles(r: random.Random) -> Any:
    choice = r.random()
    if choice < 0.3:  # any bit pattern: NaNs, infinities, subnormals, huge and tiny values
        return struct.unpack("<d", r.getrandbits(64).to_bytes(8, "little"))[0]
    if choice < 0.5:  # around the edges of Java's plain notation and 1-digit values
        x = r.choice([0.001, 1e7, 1e-4, 1e16, 2.0, 100.0, 0.3, 5e-324, 1e-3 * 3, 9999999.0])
        for _ in range(r.randint(0, 3)):
            x = math.nextafter(x, r.choice([0.0, math.inf]))
        return r.choice([x, -x])
    if choice < 0.55:
        return r.choice([0.0, -0.0, math.inf, -math.nan, 3, Decimal("1.5"), True])
    return r.choice([1.0, -1.0]) * r.uniform(0, 10 ** r.randint(-5, 9)) * r.choice([1, 1, 1e-3])


def floats32(r: random.Random) -> Any:
    return struct.unpack("<f", r.getrandbits(32).to_bytes(4, "little"))[0]


def datetimes(fsp: int, aware: bool = False) -> Gen:
    def gen(r: random.Random) -> Any:
        choice = r.random()
        if choice < 0.08:
            zero = "0000-00-00 00:00:00" + ("." + "0" * fsp if fsp else "")
            return r.choice([zero, dt.date(2020, 5, 6), "2020-01-01 00:00:00", dt.datetime(2020, 1, 1, tzinfo=UTC)])
        if aware:  # TIMESTAMP: UTC-aware, within the range every zone can convert
            v = dt.datetime.fromtimestamp(r.randint(0, 2**31 - 1), UTC)
        else:
            v = dt.datetime(r.randint(1, 9999), r.randint(1, 12), r.randint(1, 28), r.randint(0, 23),
                            r.randint(0, 59), r.randint(0, 59))
        us = r.choice([0, r.randint(0, 999999), r.randint(0, 999999) // 10 ** (6 - fsp) * 10 ** (6 - fsp)])
        return v.replace(microsecond=us)
    return gen


def dates(r: random.Random) -> Any:
    if r.random() < 0.1:
        return r.choice(["0000-00-00", "2020-00-00", dt.datetime(2020, 1, 2, 3, 4, 5)])
    return dt.date(r.randint(1, 9999), r.randint(1, 12), r.randint(1, 28))


def times(r: random.Random) -> Any:
    if r.random() < 0.05:
        return "12:00:00"
    return dt.timedelta(microseconds=r.randint(-838 * 3600 * 10**6, 838 * 3600 * 10**6)) * r.choice([1, 0])


def texts(r: random.Random) -> Any:
    choice = r.random()
    if choice < 0.1:
        return r.choice(["", "\ud800", "a\udfffb", b"caf\xc3\xa9", bytearray(b"xy"), 12, "?"])
    n = r.choice([0, 1, 5, 60, 120, 127, 128, 130, 300, 17000] if choice < 0.3 else [r.randint(0, 40)])
    alphabet = r.choice(["abc xyz", "é文本😀", "\x00\x7f\x80\uffff", "'\"\\%{}"])
    return "".join(r.choice(alphabet) for _ in range(n))


def binaries(r: random.Random) -> Any:
    if r.random() < 0.1:
        return r.choice([b"", "text", bytearray(b"\xff\x00"), memoryview(b"mv"), 5])
    n = r.choice([0, 1, 16, 100, 127, 128, 300, 20000] if r.random() < 0.3 else [r.randint(0, 40)])
    return r.randbytes(n)


ENUM = ("new", "paid", "shipped", "new", "")
SET = ("a", "b", "c")
U8 = {"charset": "utf8mb4", "collation_id": 45}

# (binlog column, schema column or None, value generator)
SPECS: dict[str, tuple[Column, ColumnMeta | None, Gen]] = {
    "tinyint": (Column(0, CT.TINY, 0, True), ColumnMeta("c", "tinyint", "tinyint(4)"), ints(8, False)),
    "tinyint_u": (Column(0, CT.TINY, 0, True, unsigned=True),
                  ColumnMeta("c", "tinyint", "tinyint(3) unsigned", unsigned=True), ints(8, True)),
    "smallint_u": (Column(0, CT.SHORT, 0, True), ColumnMeta("c", "smallint", "smallint unsigned", unsigned=True),
                   ints(16, True)),
    "mediumint": (Column(0, CT.INT24, 0, True), ColumnMeta("c", "mediumint", "mediumint(9)"), ints(24, False)),
    "mediumint_u": (Column(0, CT.INT24, 0, True, unsigned=True), None, ints(24, True)),
    "int": (Column(0, CT.LONG, 0, True), ColumnMeta("c", "int", "int(11)"), ints(32, False)),
    "int_u": (Column(0, CT.LONG, 0, True), ColumnMeta("c", "int", "int(10) unsigned", unsigned=True),
              ints(32, True)),
    "bigint": (Column(0, CT.LONGLONG, 0, False), ColumnMeta("c", "bigint", "bigint(20)", is_key=True),
               ints(64, False)),
    "bigint_u": (Column(0, CT.LONGLONG, 0, True), ColumnMeta("c", "bigint", "bigint(20) unsigned", unsigned=True),
                 ints(64, True)),
    "decimal": (Column(0, CT.NEWDECIMAL, 0, True, precision=65, scale=30), ColumnMeta("c", "decimal", "decimal(65,30)"),
                decimals),
    "double": (Column(0, CT.DOUBLE, 8, True), ColumnMeta("c", "double", "double"), doubles),
    "float": (Column(0, CT.FLOAT, 4, True), ColumnMeta("c", "float", "float"), floats32),
    "bit": (Column(0, CT.BIT, 0, True, bits=64), ColumnMeta("c", "bit", "bit(64)"),
            pick(lambda r: r.getrandbits(64), const(True, 0, "5"))),
    **{f"datetime{f}": (Column(0, CT.DATETIME2, f, True, fsp=f), ColumnMeta("c", "datetime", f"datetime({f})"),
                        datetimes(f)) for f in range(7)},
    "datetime_old": (Column(0, CT.DATETIME, 0, True), None, datetimes(0)),
    **{f"timestamp{f}": (Column(0, CT.TIMESTAMP2, f, True, fsp=f), ColumnMeta("c", "timestamp", f"timestamp({f})"),
                         datetimes(f, aware=True)) for f in (0, 3, 6)},
    "timestamp_old": (Column(0, CT.TIMESTAMP, 0, True), None, datetimes(0, aware=True)),
    "date": (Column(0, CT.DATE, 0, True), ColumnMeta("c", "date", "date"), dates),
    "time2": (Column(0, CT.TIME2, 3, True, fsp=3), ColumnMeta("c", "time", "time(3)"), times),
    "year": (Column(0, CT.YEAR, 0, True), ColumnMeta("c", "year", "year(4)"),
             pick(lambda r: r.randint(1901, 2155), const(0, None))),
    "enum": (Column(0, CT.ENUM, 0, True), ColumnMeta("c", "enum", "enum('new','paid','shipped','new','')",
                                                      enum_values=ENUM),
             pick(const(*ENUM, "other", 2, 0, True))),
    "enum_binlog": (Column(0, CT.ENUM, 0, True, enum_values=ENUM), None, const(*ENUM, "x", 1)),
    "set": (Column(0, CT.SET, 0, True), ColumnMeta("c", "set", "set('a','b','c')", set_values=SET),
            pick(const("", "a", "a,c", "b,c,a", "z", 5))),
    "varchar": (Column(0, CT.VARCHAR, 400, True, collation=45), ColumnMeta("c", "varchar", "varchar(100)", **U8),
                texts),
    "varchar_binlog": (Column(0, CT.VARCHAR, 400, True, name="nm", collation=45), None, texts),
    "char_latin1": (Column(0, CT.STRING, 20, True, collation=8),
                    ColumnMeta("c", "char", "char(20)", charset="latin1", collation_id=8), pick(texts, binaries)),
    "text": (Column(0, CT.BLOB, 2, True, collation=45), ColumnMeta("c", "text", "text", **U8), texts),
    "tinytext_binlog": (Column(0, CT.BLOB, 1, True, collation=45), None, texts),
    "blob": (Column(0, CT.BLOB, 2, True, collation=63), ColumnMeta("c", "blob", "blob"), binaries),
    "blob_binlog": (Column(0, CT.BLOB, 4, True), None, binaries),
    "varbinary": (Column(0, CT.VARCHAR, 40, True), ColumnMeta("c", "varbinary", "varbinary(40)"), binaries),
    "binary": (Column(0, CT.STRING, 40, True, collation=63), None, binaries),
    "json": (Column(0, CT.JSON, 4, True), ColumnMeta("c", "json", "json"), pick(texts, const(b'{"a": 1}'))),
    "geometry": (Column(0, CT.GEOMETRY, 4, True), ColumnMeta("c", "geometry", "geometry"), binaries),
    "uuid": (Column(0, CT.STRING, 16, True, logical="uuid"), ColumnMeta("c", "uuid", "uuid"),
             const("123e4567-e89b-12d3-a456-426614174000", "")),
    "vector": (Column(0, CT.VECTOR, 4, True), None, lambda r: [floats32(r) for _ in range(r.randint(0, 4))]),
    "other": (Column(0, CT.NULL, 0, True), None, pick(texts, binaries)),
}

ZONES = ["UTC", "America/New_York", "Asia/Kolkata", None]


@pytest.fixture(autouse=True)
def generate_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Use the generated encoder from the first row on (normally after _GENERATE_AFTER_ROWS)."""
    monkeypatch.setattr(rowcodegen, "GENERATE_AFTER_ROWS", 0)


def table(cols: list[Column], metas: list[ColumnMeta | None]) -> tuple[TableDef, TableMeta | None]:
    cols = [Column(i, **{f: getattr(c, f) for f in Column.__dataclass_fields__ if f != "index"})
            for i, c in enumerate(cols)]
    tdef = TableDef("db", "t", tuple(cols), primary_key=(0,))
    if any(m is None for m in metas):
        return tdef, None
    return tdef, TableMeta("db", "t", tuple(metas))  # type: ignore[arg-type]


def value(gen: Gen, r: random.Random) -> Any:
    x = r.random()
    return None if x < 0.1 else ABSENT if x < 0.14 else gen(r)


def rows_for(gens: list[Gen], r: random.Random, n: int) -> dict[int, list[Any]]:
    flat = [tuple(value(g, r) for g in gens) for _ in range(n)]
    updates = []
    for before in flat:
        after = tuple(b if r.random() < 0.5 and b is not ABSENT else value(g, r) for g, b in zip(gens, before,
                                                                                                  strict=True))
        updates.append((before, after))
    # an image whose values differ as objects but print the same (updated stays false)
    updates.append(((1,) * len(gens), (True,) * len(gens)))
    return {EVENT_INSERT: flat, EVENT_DELETE: flat, EVENT_UPDATE: updates}


def check(tdef: TableDef, meta: TableMeta | None, tz: str | None, rows: dict[int, list[Any]]) -> None:
    """Row by row (a value the formatter rejects must fail the same way), then the rows that encode
    as one event."""
    plan = EntryConverter(timezone=tz)._plan(tdef, meta)
    assert isinstance(plan, TablePlan)
    for et, rs in rows.items():
        good, want = [], []
        for row in rs:
            try:
                expected = encode_rows(plan.cols, et, [row])
            except Exception as e:
                with pytest.raises(type(e)):
                    plan.encode(et, [row])
                continue
            assert plan.encode(et, [row]) == expected, (et, tz, row)
            good.append(row)
            want.append(expected)
        assert plan.encode(et, good) == b"".join(want)


@pytest.mark.parametrize("tz", ZONES)
@pytest.mark.parametrize("spec", sorted(SPECS))
def test_one_column_random_rows(spec: str, tz: str | None) -> None:
    col, cm, gen = SPECS[spec]
    r = random.Random(f"{spec}/{tz}")
    tdef, meta = table([col], [cm])
    check(tdef, meta, tz, rows_for([gen], r, 300))


@pytest.mark.parametrize("with_meta", [True, False])
def test_wide_table(with_meta: bool) -> None:
    """All types side by side; past 128 columns the index takes two bytes, long rows three-byte lengths."""
    specs = [SPECS[k] for k in sorted(SPECS)] * 4
    r = random.Random(f"wide/{with_meta}")
    metas = [ColumnMeta(f"col_{i}_{'é' * (i % 70)}", cm.data_type, cm.column_type + " " + "x" * (i % 130),
                        unsigned=cm.unsigned, charset=cm.charset, collation_id=cm.collation_id,
                        enum_values=cm.enum_values, set_values=cm.set_values, is_key=i % 7 == 0)
             if cm is not None else ColumnMeta(f"c{i}", "x", "x")
             for i, (_, cm, _) in enumerate(specs)]
    tdef, meta = table([c for c, _, _ in specs], metas if with_meta else [None])
    check(tdef, meta, "Asia/Kolkata", rows_for([g for _, _, g in specs], r, 40))


def test_rows_of_another_length_fall_back() -> None:
    col, cm, _ = SPECS["int"]
    tdef, meta = table([col, col], [cm, cm])
    rows = {EVENT_INSERT: [(1, 2), (3,), (4, 5, 6), (7, 8)], EVENT_UPDATE: [((1, 2), (1,)), ((1, 2), (1, 3))]}
    check(tdef, meta, "UTC", rows)


def test_converter_generates_encoders_for_busy_layouts_and_shares_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rowcodegen, "GENERATE_AFTER_ROWS", 64)
    col = SPECS["varchar"][0]
    cm = ColumnMeta("busy", "varchar", "varchar(100)", **U8)  # a layout no other test has encoded
    tdef, meta = table([col], [cm])
    conv = EntryConverter(timezone="UTC")

    def insert(n: int) -> pb.RowChange:
        ev = E.RowsEvent(type_code=30, timestamp=1, server_id=1, length=100, log_pos=1100, flags=0, file="f",
                         position=1000, kind="write", version=2, table_id=42, rows_flags=1, table=tdef,
                         rows=[(f"héllo{i}",) for i in range(n)], columns_present=b"")
        return pb.RowChange.FromString(conv.rows(ev, meta).entry.storeValue)

    plan = conv._plan(tdef, meta)
    rc = insert(63)  # the generic path up to 64 rows of a kind
    assert EVENT_INSERT not in plan.encoders and rc.rowDatas[62].afterColumns[0].value == "héllo62"
    rc = insert(2)
    assert EVENT_INSERT in plan.encoders
    assert [(c.value, c.updated) for r in rc.rowDatas for c in r.afterColumns] == [("héllo0", True), ("héllo1", True)]
    # an equal layout under new objects, in another converter, shares the plan and its encoders
    tdef2, meta2 = table([col], [ColumnMeta(**{f: getattr(cm, f) for f in ColumnMeta.__dataclass_fields__})])
    assert tdef2 is not tdef and meta2 is not meta
    assert EntryConverter(timezone="UTC")._plan(tdef2, meta2) is plan
    assert EntryConverter(timezone="Asia/Kolkata")._plan(tdef2, meta2) is not plan
