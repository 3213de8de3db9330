"""Every MariaDB column type, random values inserted, updated and deleted on the private server; the
decoded after and before images must equal what SELECT returns for those rows."""

from __future__ import annotations

import datetime as dt
import json
import random
import struct
from decimal import Decimal
from typing import Any

import pymysql
import pytest

from canal_core.binlog import BinlogDecoder
from canal_core.binlog.events import RowsEvent
from canal_core.mysql import ReplicationConnection
from canal_core.mysql.schema import column_hints

pytestmark = pytest.mark.integration

UNI = "aZ09 é中文ß∑😀🚀Ωñ'\"\\%_"
LATIN1 = "aZ09 éñüßÆø'"


def _text(r: random.Random, n: int, palette: str = UNI) -> str:
    return "".join(r.choice(palette) for _ in range(r.randint(0, n)))


def _bytes(r: random.Random, n: int) -> bytes:
    return bytes(r.getrandbits(8) for _ in range(r.randint(0, n)))


def _decimal(r: random.Random, p: int, s: int) -> str:
    ip = "".join(r.choice("0123456789") for _ in range(r.randint(1, p - s))) if p > s else "0"
    fp = "".join(r.choice("0123456789") for _ in range(s))
    return ("-" if r.random() < 0.5 else "") + ip + ("." + fp if s else "")


def _datetime(r: random.Random, fsp: int, lo: int = 1000, hi: int = 9999) -> str:
    if r.random() < 0.08:
        return "0000-00-00 00:00:00"
    if r.random() < 0.04:
        return "2019-02-30 10:11:12"  # invalid date kept under ALLOW_INVALID_DATES
    d = dt.datetime(r.randint(lo, hi), r.randint(1, 12), r.randint(1, 28), r.randint(0, 23), r.randint(0, 59),
                    r.randint(0, 59), r.randint(0, 999999))
    text = d.strftime("%Y-%m-%d %H:%M:%S")
    return text + (f".{d.microsecond:06d}"[: fsp + 1] if fsp else "")


def _timestamp(r: random.Random, fsp: int) -> str:
    if r.random() < 0.08:
        return "0000-00-00 00:00:00"
    d = dt.datetime(1970, 1, 2) + dt.timedelta(seconds=r.randint(0, 2**31 - 3 * 86400),
                                               microseconds=r.randint(0, 999999))
    return d.strftime("%Y-%m-%d %H:%M:%S") + (f".{d.microsecond:06d}"[: fsp + 1] if fsp else "")


def _time(r: random.Random, fsp: int) -> str:
    secs = r.randint(0, 838 * 3600 + 59 * 60 + 59)
    text = f"{'-' if r.random() < 0.4 else ''}{secs // 3600}:{secs // 60 % 60:02d}:{secs % 60:02d}"
    return text + (f".{r.randint(0, 10**fsp - 1):0{fsp}d}" if fsp else "")


def _json(r: random.Random, big: bool = False) -> str:
    if big:
        return json.dumps({"big": [_text(r, 40) for _ in range(4000)], "n": r.random()})
    return json.dumps({"k": r.randint(-10**12, 10**12), "s": _text(r, 10), "a": [1, 2.5, None, True],
                       "o": {"x": _text(r, 5)}}, ensure_ascii=False)


# (name, SQL type, generator, SQL placeholder)
COLUMNS: list[tuple[str, str, Any, str]] = [
    ("c_tinyint", "TINYINT", lambda r: r.choice([-128, 127, 0, r.randint(-128, 127)]), "%s"),
    ("c_utinyint", "TINYINT UNSIGNED", lambda r: r.choice([0, 255, r.randint(0, 255)]), "%s"),
    ("c_bool", "BOOLEAN", lambda r: r.randint(0, 1), "%s"),
    ("c_smallint", "SMALLINT", lambda r: r.choice([-32768, 32767, r.randint(-32768, 32767)]), "%s"),
    ("c_usmallint", "SMALLINT UNSIGNED", lambda r: r.choice([65535, r.randint(0, 65535)]), "%s"),
    ("c_mediumint", "MEDIUMINT", lambda r: r.choice([-2**23, 2**23 - 1, -1, r.randint(-2**23, 2**23 - 1)]), "%s"),
    ("c_umediumint", "MEDIUMINT UNSIGNED", lambda r: r.choice([2**24 - 1, r.randint(0, 2**24 - 1)]), "%s"),
    ("c_int", "INT", lambda r: r.choice([-2**31, 2**31 - 1, r.randint(-2**31, 2**31 - 1)]), "%s"),
    ("c_uint", "INT UNSIGNED", lambda r: r.choice([2**32 - 1, r.randint(0, 2**32 - 1)]), "%s"),
    ("c_bigint", "BIGINT", lambda r: r.choice([-2**63, 2**63 - 1, r.randint(-2**63, 2**63 - 1)]), "%s"),
    ("c_ubigint", "BIGINT UNSIGNED", lambda r: r.choice([2**64 - 1, r.randint(0, 2**64 - 1)]), "%s"),
    ("c_float", "FLOAT", lambda r: r.choice([0.0, -1.5, 3.4e38, r.uniform(-1e6, 1e6)]), "%s"),
    ("c_double", "DOUBLE", lambda r: r.choice([0.0, 1.7976931348623157e308, -2.2250738585072014e-308,
                                               r.uniform(-1e15, 1e15)]), "%s"),
    ("c_dec65", "DECIMAL(65,30)", lambda r: _decimal(r, 65, 30), "%s"),
    ("c_dec12", "DECIMAL(12,2)", lambda r: _decimal(r, 12, 2), "%s"),
    ("c_dec18", "DECIMAL(18,0)", lambda r: _decimal(r, 18, 0), "%s"),
    ("c_dec55", "DECIMAL(5,5)", lambda r: _decimal(r, 5, 5), "%s"),
    ("c_dec_u", "DECIMAL(10,3) UNSIGNED", lambda r: _decimal(r, 10, 3).lstrip("-"), "%s"),
    ("c_year", "YEAR", lambda r: r.choice([0, 1901, 2155, r.randint(1901, 2155)]), "%s"),
    ("c_date", "DATE", lambda r: _datetime(r, 0)[:10], "%s"),
    ("c_time", "TIME", lambda r: _time(r, 0), "%s"),
    ("c_time3", "TIME(3)", lambda r: _time(r, 3), "%s"),
    ("c_time6", "TIME(6)", lambda r: _time(r, 6), "%s"),
    ("c_datetime", "DATETIME", lambda r: _datetime(r, 0), "%s"),
    ("c_datetime2", "DATETIME(2)", lambda r: _datetime(r, 2), "%s"),
    ("c_datetime6", "DATETIME(6)", lambda r: _datetime(r, 6), "%s"),
    ("c_timestamp", "TIMESTAMP NULL", lambda r: _timestamp(r, 0), "%s"),
    ("c_timestamp6", "TIMESTAMP(6) NULL", lambda r: _timestamp(r, 6), "%s"),
    ("c_bit1", "BIT(1)", lambda r: r.randint(0, 1), "%s"),
    ("c_bit13", "BIT(13)", lambda r: r.randint(0, 2**13 - 1), "%s"),
    ("c_bit64", "BIT(64)", lambda r: r.choice([2**64 - 1, r.getrandbits(64)]), "%s"),
    ("c_enum", "ENUM('a','b','ü','x y','')", lambda r: r.choice(["a", "b", "ü", "x y", ""]), "%s"),
    ("c_set", "SET('a','b','c','ü')", lambda r: ",".join(v for v in "a b c ü".split() if r.random() < 0.5), "%s"),
    ("c_char", "CHAR(10)", lambda r: _text(r, 10).rstrip(" "), "%s"),
    ("c_varchar", "VARCHAR(300)", lambda r: _text(r, 300) if r.random() < 0.9 else "😀" * 300, "%s"),
    ("c_varchar_small", "VARCHAR(60)", lambda r: _text(r, 60), "%s"),
    ("c_latin1", "VARCHAR(20) CHARACTER SET latin1", lambda r: _text(r, 20, LATIN1), "%s"),
    ("c_ascii", "CHAR(5) CHARACTER SET ascii", lambda r: _text(r, 5, "abcXYZ09-").rstrip(" "), "%s"),
    ("c_binary", "BINARY(8)", lambda r: _bytes(r, 8), "%s"),
    ("c_varbinary", "VARBINARY(300)", lambda r: _bytes(r, 300), "%s"),
    ("c_tinytext", "TINYTEXT", lambda r: _text(r, 60), "%s"),
    ("c_text", "TEXT", lambda r: _text(r, 400), "%s"),
    ("c_mediumtext", "MEDIUMTEXT", lambda r: _text(r, 400), "%s"),
    ("c_longtext", "LONGTEXT", lambda r: _text(r, 400) if r.random() < 0.9 else "x" * 70000, "%s"),
    ("c_tinyblob", "TINYBLOB", lambda r: _bytes(r, 255), "%s"),
    ("c_blob", "BLOB", lambda r: _bytes(r, 600), "%s"),
    ("c_mediumblob", "MEDIUMBLOB", lambda r: _bytes(r, 600), "%s"),
    ("c_longblob", "LONGBLOB", lambda r: _bytes(r, 600) if r.random() < 0.9 else b"\0\xff" * 40000, "%s"),
    ("c_json", "JSON", lambda r: _json(r, big=r.random() < 0.1), "%s"),
    ("c_geometry", "GEOMETRY", lambda r: r.choice(["POINT(1 2)", "LINESTRING(0 0,1 1,2 5)",
                                                   "POLYGON((0 0,4 0,4 4,0 4,0 0))",
                                                   f"POINT({r.uniform(-180, 180)} {r.uniform(-90, 90)})"]),
     "ST_GeomFromText(%s)"),
    ("c_point", "POINT", lambda r: f"POINT({r.uniform(-1e3, 1e3)} {r.uniform(-1e3, 1e3)})", "ST_GeomFromText(%s)"),
    ("c_uuid", "UUID", lambda r: str(__import__("uuid").UUID(int=r.getrandbits(128),
                                                              version=r.choice([1, 4]))) if r.random() < 0.8
     else "00000000-0000-0000-0000-000000000000", "%s"),
    ("c_inet6", "INET6", lambda r: r.choice(["::", "::1", "::ffff:1.2.3.4", "2001:db8::8a2e:370:7334",
                                             f"fe80::{r.randint(0, 65535):x}:{r.randint(0, 65535):x}"]), "%s"),
    ("c_inet4", "INET4", lambda r: f"{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(0, 255)}",
     "%s"),
]

NROWS = 60


def _rows(r: random.Random, ids: range, null_rate: float) -> list[list[Any]]:
    out = []
    for i in ids:
        row: list[Any] = [i]
        for _name, _sql, gen, _ph in COLUMNS:
            row.append(None if r.random() < null_rate else gen(r))
        out.append(row)
    return out


def _select(cur: Any, table: str) -> dict[int, tuple[Any, ...]]:
    exprs = ["id"] + [f"{n} + 0e0" if n == "c_float" else n for n, *_ in COLUMNS]
    cur.execute(f"SELECT {', '.join(exprs)} FROM {table} ORDER BY id")
    out = {}
    for row in cur.fetchall():
        vals = list(row)
        for k, (name, *_rest) in enumerate(COLUMNS, start=1):
            if name.startswith("c_bit") and vals[k] is not None:
                vals[k] = int.from_bytes(vals[k], "big")
        out[vals[0]] = tuple(vals)
    return out


def _normalize(row: tuple[Any, ...]) -> tuple[Any, ...]:
    out = []
    for k, v in enumerate(row):
        if isinstance(v, dt.datetime) and v.tzinfo is not None:
            v = v.replace(tzinfo=None)  # TIMESTAMP decodes as UTC; the SELECT session runs in UTC
        if k > 0 and COLUMNS[k - 1][0] == "c_float" and isinstance(v, float):
            v = struct.unpack("<f", struct.pack("<f", v))[0]
        out.append(v)
    return tuple(out)


def _diff(expected: tuple[Any, ...], got: tuple[Any, ...]) -> list[str]:
    names = ["id"] + [n for n, *_ in COLUMNS]
    return [f"{names[k]}: select={e!r} decoded={g!r}" for k, (e, g) in enumerate(zip(expected, got, strict=True))
            if e != g or type(e) is not type(g)]


@pytest.fixture
def matrix_table(admin_conn: Any) -> Any:
    table = "type_matrix"
    with admin_conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS canal_test.{table}")
    yield table
    with admin_conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS canal_test.{table}")


def _run(mariadb_settings: Any, admin_conn: Any, table: str, seed: int) -> tuple[dict, dict, list[RowsEvent],
                                                                                   BinlogDecoder]:
    r = random.Random(seed)
    s = mariadb_settings
    with ReplicationConnection(s.host, s.port, s.repl_user, s.repl_password) as rc:
        start_file, start_pos, _ = rc.master_status()
    cur = admin_conn.cursor()
    cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES', time_zone = '+00:00'")
    cols_sql = ", ".join(f"{n} {t}" for n, t, *_ in COLUMNS)
    cur.execute(f"CREATE TABLE canal_test.{table} (id INT PRIMARY KEY, {cols_sql}) DEFAULT CHARSET=utf8mb4")
    placeholders = ", ".join(["%s"] + [ph for *_, ph in COLUMNS])
    insert = f"INSERT INTO canal_test.{table} VALUES ({placeholders})"
    # half the rows have NULLs, half none: the generated decoders have a separate no-NULL fast path
    half = NROWS // 2
    rows = _rows(r, range(1, half + 1), 0.15) + _rows(r, range(half + 1, NROWS + 1), 0.0)
    rows.append([NROWS + 1] + [None] * len(COLUMNS))  # all NULL
    cur.execute("BEGIN")
    cur.executemany(insert, rows)
    cur.execute("COMMIT")
    s1 = _select(cur, f"canal_test.{table}")
    new = _rows(r, range(1, half + 1), 0.0) + _rows(r, range(half + 1, NROWS + 2), 0.15)
    sets = ", ".join(f"{n} = {ph}" for n, _t, _g, ph in COLUMNS)
    cur.execute("BEGIN")
    for row in new:
        cur.execute(f"UPDATE canal_test.{table} SET {sets} WHERE id = %s", [*row[1:], row[0]])
    cur.execute("COMMIT")
    s2 = _select(cur, f"canal_test.{table}")
    cur.execute(f"DELETE FROM canal_test.{table}")
    with ReplicationConnection(s.host, s.port, s.repl_user, s.repl_password) as rc:
        hints_conn = pymysql.connect(host=s.host, port=s.port, user=s.repl_user, password=s.repl_password)
        try:
            hints = column_hints(hints_conn, "canal_test", table)
        finally:
            hints_conn.close()
        dec = BinlogDecoder(schema_hints=lambda sch, tbl: hints if (sch, tbl) == ("canal_test", table) else None)
        evs: list[RowsEvent] = []
        for raw in rc.dump(start_file, start_pos, non_blocking=True):
            ev = dec.decode(raw)
            if isinstance(ev, RowsEvent) and ev.table is not None and ev.table.table == table:
                evs.append(ev)
    return s1, s2, evs, dec


def test_every_type_round_trips_through_the_binlog(mariadb_settings: Any, admin_conn: Any,
                                                   matrix_table: str) -> None:
    s1, s2, evs, _ = _run(mariadb_settings, admin_conn, matrix_table, seed=20261122)
    inserted = [row for ev in evs if ev.kind == "write" for row in ev.rows]
    updated = [pair for ev in evs if ev.kind == "update" for pair in ev.rows]
    deleted = [row for ev in evs if ev.kind == "delete" for row in ev.rows]
    assert len(inserted) == len(s1) == NROWS + 1
    assert len(updated) == NROWS + 1
    assert len(deleted) == NROWS + 1
    problems: list[str] = []
    for row in inserted:
        problems += [f"insert id={row[0]} {d}" for d in _diff(s1[row[0]], _normalize(row))]
    for before, after in updated:
        problems += [f"update-before id={before[0]} {d}" for d in _diff(s1[before[0]], _normalize(before))]
        problems += [f"update-after id={after[0]} {d}" for d in _diff(s2[after[0]], _normalize(after))]
    for row in deleted:
        problems += [f"delete id={row[0]} {d}" for d in _diff(s2[row[0]], _normalize(row))]
    assert not problems, f"{len(problems)} mismatches:\n" + "\n".join(problems[:40])
    # names come from the binlog's own optional metadata (binlog_row_metadata=FULL)
    assert evs[0].table is not None
    assert evs[0].table.column_names == ("id", *[n for n, *_ in COLUMNS])
    assert evs[0].table.primary_key == (0,)
    # the extremes and the large values really were exercised
    flat = [v for row in inserted for v in row]
    assert 2**64 - 1 in flat and -2**63 in flat
    assert any(isinstance(v, str) and len(v.encode()) > 65536 for v in flat), "no JSON/TEXT over 64 KB"
    assert "0000-00-00 00:00:00" in flat
    assert sum(1 for row in inserted if None not in row) >= NROWS // 2, "no NULL-free rows: fast path untested"
    assert any(isinstance(v, Decimal) and len(str(v)) > 40 for v in flat)


def test_signedness_after_a_year_column(mariadb_settings: Any, admin_conn: Any) -> None:
    """MariaDB gives YEAR a bit in the SIGNEDNESS metadata: columns after it must keep their own sign."""
    s = mariadb_settings
    with ReplicationConnection(s.host, s.port, s.repl_user, s.repl_password) as rc:
        file, pos, _ = rc.master_status()
    with admin_conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS canal_test.year_sign")
        cur.execute("CREATE TABLE canal_test.year_sign (y YEAR, i INT UNSIGNED, j INT, k BIGINT UNSIGNED, l SMALLINT)")
        cur.execute("INSERT INTO canal_test.year_sign VALUES (2024, 4294967295, -5, 18446744073709551615, -32768)")
        cur.execute("SELECT * FROM canal_test.year_sign")
        want = cur.fetchone()
        cur.execute("DROP TABLE canal_test.year_sign")
    with ReplicationConnection(s.host, s.port, s.repl_user, s.repl_password) as rc:
        dec = BinlogDecoder()  # signedness from the binlog's own metadata only, no schema hints
        rows = [r for raw in rc.dump(file, pos, non_blocking=True)
                for ev in [dec.decode(raw)] if isinstance(ev, RowsEvent) and ev.table.table == "year_sign"
                for r in ev.rows]
    assert rows == [want]
