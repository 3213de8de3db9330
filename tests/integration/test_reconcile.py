"""Fingerprints: a MariaDB table (read inside a consistent snapshot) and a Spark DataFrame built from the same
SELECT through the staging types agree, as does the Arrow table; one changed value or one missing row makes
them differ; the snapshot's binlog position is the server's."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pymysql
import pytest

from pipelines.engine.reconcile import (
    Fingerprint,
    ReconcileError,
    arrow_fingerprint,
    dataframe_fingerprint,
    source_fingerprint,
    table_columns,
)
from pipelines.engine.types import db_rows_to_arrow, select_expr
from pipelines.engine.window import order_key
from tests.integration.binlog_end import binlog_end

pytestmark = pytest.mark.integration

TABLE = "rec_types"
DDL = """CREATE TABLE canal_test.{t} (
  id INT PRIMARY KEY, c_tiny TINYINT, c_utiny TINYINT UNSIGNED, c_int INT, c_uint INT UNSIGNED, c_big BIGINT,
  c_ubig BIGINT UNSIGNED, c_float FLOAT, c_double DOUBLE, c_dec DECIMAL(12,2), c_dec38 DECIMAL(38,20),
  c_dec65 DECIMAL(65,30), c_bit BIT(13), c_bit64 BIT(64), c_year YEAR, c_date DATE, c_dt DATETIME(6),
  c_ts TIMESTAMP(3) NULL, c_time TIME(2), c_char CHAR(5), c_text TEXT, c_json JSON, c_enum ENUM('a','b','c'),
  c_set SET('x','y','z'), c_bin VARBINARY(20), c_blob BLOB, c_geo POINT, c_uuid UUID, c_inet6 INET6
) DEFAULT CHARSET=utf8mb4"""


def _row(r: random.Random, i: int) -> tuple[Any, ...]:
    def maybe(v: Any) -> Any:
        return None if r.random() < 0.1 else v

    return (
        i, maybe(r.randint(-128, 127)), maybe(r.randint(0, 255)), maybe(r.randint(-2**31, 2**31 - 1)),
        maybe(r.randint(0, 2**32 - 1)), maybe(r.randint(-2**63, 2**63 - 1)), maybe(r.randint(0, 2**64 - 1)),
        maybe(r.uniform(-1e6, 1e6)), maybe(r.uniform(-1e300, 1e300)), maybe(f"{r.uniform(-1e9, 1e9):.2f}"),
        maybe(f"{r.randint(-10**17, 10**17)}.{r.randint(0, 10**20 - 1):020d}"),
        maybe(f"-{r.randint(0, 10**30)}.{r.randint(0, 10**30 - 1):030d}"), maybe(r.randint(0, 8191)),
        maybe(r.getrandbits(64)), maybe(r.choice([0, 1901, 2155, 2024])),
        maybe(r.choice(["0000-00-00", "2019-02-30", f"{r.randint(1000, 9999)}-0{r.randint(1, 9)}-1{r.randint(0, 9)}"])),
        maybe(f"{r.randint(1000, 9999)}-12-31 23:59:59.{r.randint(0, 999999):06d}"),
        maybe(f"{r.randint(1971, 2037)}-06-15 12:34:56.{r.randint(0, 999):03d}"),
        maybe(f"{r.randint(-838, 838)}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}.{r.randint(0, 99):02d}"),
        maybe(r.choice(["", "ab", "中文😀x"])), maybe("é" * r.randint(0, 50)), maybe('{"k": [1, "ü"]}'),
        maybe(r.choice(["a", "b", "c", ""])), maybe(r.choice(["", "x", "x,z", "x,y,z"])),
        maybe(bytes(r.getrandbits(8) for _ in range(r.randint(0, 20)))),
        maybe(bytes(r.getrandbits(8) for _ in range(r.randint(0, 300)))),
        maybe(f"POINT({r.uniform(-90, 90)} {r.uniform(-90, 90)})"),
        maybe("6ccd780c-baba-1026-9564-5b8c656024db"), maybe(r.choice(["::1", "2001:db8::1"])),
    )


def _master(settings: Any) -> int:
    return order_key(*binlog_end(settings.repl_kwargs()))


@pytest.fixture
def rec_table(admin_conn: Any) -> Iterator[str]:
    with admin_conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS canal_test.{TABLE}")
        cur.execute(DDL.format(t=TABLE))
        cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES', time_zone = '+00:00'")
        r = random.Random(7)
        rows = [_row(r, i) for i in range(1, 301)]
        ph = ", ".join(["%s"] * 26 + ["ST_GeomFromText(%s)", "%s", "%s"])
        cur.executemany(f"INSERT INTO canal_test.{TABLE} VALUES ({ph})", rows)
    yield TABLE
    with admin_conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS canal_test.{TABLE}")


def test_fingerprints_agree_and_detect_differences(mariadb_settings: Any, admin_conn: Any, rec_table: str,
                                                   tmp_path: Path, spark: Any) -> None:
    repl = mariadb_settings.repl_kwargs()  # the canal user: SELECT and the binlog status are enough
    columns = table_columns(repl, "canal_test", rec_table)
    assert [c.name for c in columns if c.is_key] == ["id"] and len(columns) == 29
    before = _master(mariadb_settings)
    source = source_fingerprint(repl, "canal_test", rec_table, columns)
    after = _master(mariadb_settings)
    with admin_conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM canal_test.{rec_table}")
        assert source.count == cur.fetchone()[0] == 300
    # the snapshot's binlog position lies between the server's positions before and after (other tests may
    # write to the server meanwhile)
    assert source.position is not None and before <= source.position.key <= after

    # the same rows through the staging types: Arrow, then Parquet read by Spark
    conn = pymysql.connect(**mariadb_settings.admin_kwargs())
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute(f"SELECT {', '.join(select_expr(c.name, c.mysql_type) for c in columns)} "
                        f"FROM canal_test.{rec_table}")
            table = db_rows_to_arrow(columns, cur.fetchall())
    finally:
        conn.close()
    assert table.column("c_date").null_count > 0  # zero and invalid dates were read as NULL
    assert arrow_fingerprint(table, columns) == source
    pq.write_table(table, tmp_path / "t.parquet")
    df = spark.read.parquet(str(tmp_path / "t.parquet")).repartition(3)  # order and partitioning do not matter
    mirror = dataframe_fingerprint(df, columns, label="mirror")
    assert mirror == source, source.diff(mirror)
    assert source.diff(mirror) == ""

    # _canal_* columns are ignored
    from pyspark.sql import functions as F

    with_meta = df.withColumn("_canal_op", F.lit("INSERT")).withColumn("_canal_pos", F.lit(1))
    assert dataframe_fingerprint(with_meta, columns) == source

    # one changed value, in any column type, changes the checksum but not the count
    for name, value in (("c_text", F.lit("changed")), ("c_float", F.lit(1.5).cast("float")),
                        ("c_ts", F.expr("TIMESTAMP'2001-02-03 04:05:06.007'"))):
        changed = df.withColumn(name, F.when(F.col("id") == 150, value).otherwise(F.col(name)))
        fp = dataframe_fingerprint(changed, columns, label="mirror")
        assert fp.count == source.count and fp.checksum != source.checksum, name
        assert "same row count 300 but the rows differ" in source.diff(fp)
    # the same values computed another way: the checksum does not move
    unchanged = (df.withColumn("c_text", F.concat(F.col("c_text"), F.lit("")))
                 .withColumn("c_int", F.col("c_int").cast("bigint").cast("int")))
    assert dataframe_fingerprint(unchanged, columns) == source

    # one missing row
    fp = dataframe_fingerprint(df.where("id <> 42"), columns, label="mirror")
    assert fp.count == 299 and fp != source
    assert source.diff(fp) == f"row count differs: canal_test.{rec_table} 300, mirror 299 (1 more in canal_test." \
                              f"{rec_table})"

    # and on the source side: one value changed on the server
    with admin_conn.cursor() as cur:
        cur.execute(f"UPDATE canal_test.{rec_table} SET c_bit64 = c_bit64 ^ 1 WHERE id = 7")
    changed = source_fingerprint(repl, "canal_test", rec_table, columns)
    assert changed.count == source.count and changed.checksum != source.checksum
    assert changed.position is not None and changed.position.key > source.position.key

    # a DataFrame column of another type than the mapping's is refused, not hashed differently
    with pytest.raises(ReconcileError, match="c_int"):
        dataframe_fingerprint(df.withColumn("c_int", F.col("c_int").cast("bigint")), columns)


def test_fingerprint_diff_text() -> None:
    a = Fingerprint(3, 0xABC, label="src")
    assert a.diff(Fingerprint(3, 0xABC)) == ""
    assert a.diff(Fingerprint(4, 0xABC, label="dst")) == "row count differs: src 3, dst 4 (1 fewer in src)"
    assert "0000000000000abc" in a.diff(Fingerprint(3, 1))
