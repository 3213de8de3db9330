"""The workload and checks the pipeline end-to-end tests share (test_pipeline_e2e, _remote, _cluster): the
canal_e2e schema, a random transactional workload on it, and waiting until every mirror equals its source."""

from __future__ import annotations

import datetime as dt
import json
import random
import time
from decimal import Decimal
from typing import Any

import pymysql
import pytest

from pipelines.engine.lake import Lake
from pipelines.engine.reconcile import table_columns
from pipelines.engine.sensor_state import SensorState
from tests.integration.pipeline_driver import Driver, mirror_rows, source_rows

SCHEMA = "canal_e2e"
TABLES = ["orders", "items", "notes"]


def create_schema(conn: pymysql.connections.Connection) -> None:
    """The canal_e2e schema, empty: orders (most column types), items (a composite key), notes."""
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
        cur.execute(f"CREATE DATABASE {SCHEMA}")
        cur.execute(f"""CREATE TABLE {SCHEMA}.orders (
            id INT PRIMARY KEY, customer VARCHAR(32) NOT NULL, amount DECIMAL(10,2) NOT NULL,
            status ENUM('new','paid','shipped') NOT NULL DEFAULT 'new', placed DATETIME(6) NOT NULL,
            touched TIMESTAMP(3) NULL, data JSON, big BIGINT UNSIGNED, flags BIT(3), raw VARBINARY(8),
            ratio DOUBLE) DEFAULT CHARSET=utf8mb4""")
        cur.execute(f"""CREATE TABLE {SCHEMA}.items (
            order_id INT NOT NULL, line SMALLINT NOT NULL, sku CHAR(6) NOT NULL, qty INT NOT NULL,
            PRIMARY KEY (order_id, line))""")
        cur.execute(f"CREATE TABLE {SCHEMA}.notes (id INT PRIMARY KEY, body TEXT, at DATE)")


def drop_schema(conn: pymysql.connections.Connection) -> None:
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")


class Workload:
    def __init__(self, conn: pymysql.connections.Connection, seed: int) -> None:
        self.conn = conn
        self.r = random.Random(seed)
        self.next_id = 1
        self.changes = 0  # row changes the binlog records (rows affected)
        self.extra = False  # notes.extra added

    def _order(self) -> tuple[Any, ...]:
        r = self.r
        oid = self.next_id
        self.next_id += 1
        return (oid, r.choice(["Zoë", "Ahmed", "陈", "O'Brien"]) + str(oid), Decimal(r.randint(-10**6, 10**6)) / 100,
                r.choice(["new", "paid", "shipped"]),
                dt.datetime(2026, 1, 1) + dt.timedelta(seconds=r.randint(0, 10**7), microseconds=r.randint(0, 999999)),
                r.choice([None, dt.datetime(2025, 6, 1, 12, 0, 0, 123000)]),
                json.dumps({"k": r.randint(0, 9), "tags": ["a", "ü"]}),
                r.choice([None, 2**64 - 1, r.randint(0, 10**12)]),
                r.randint(0, 7), bytes(r.randint(0, 255) for _ in range(r.randint(0, 8))), r.random() * 1e6)

    def _ids(self, cur: Any) -> list[int]:
        cur.execute(f"SELECT id FROM {SCHEMA}.orders")
        return [row[0] for row in cur.fetchall()]

    def tx(self) -> None:
        r = self.r
        with self.conn.cursor() as cur:
            cur.execute("BEGIN")
            for _ in range(r.randint(1, 4)):  # multi-statement transactions
                x = r.random()
                ids = self._ids(cur)
                if x < 0.4 or not ids:
                    o = self._order()
                    self.changes += cur.execute(f"INSERT INTO {SCHEMA}.orders VALUES "
                                                "(%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)", o)
                    self.changes += cur.executemany(f"INSERT INTO {SCHEMA}.items VALUES (%s,%s,%s,%s)",
                                                    [(o[0], n, f"S{n:05d}", r.randint(1, 9))
                                                     for n in range(1, r.randint(1, 3) + 1)])
                elif x < 0.65:
                    self.changes += cur.execute(
                        f"UPDATE {SCHEMA}.orders SET amount = amount + 1, status = %s, touched = NOW(3) "
                        "WHERE id = %s", (r.choice(["paid", "shipped"]), r.choice(ids)))
                elif x < 0.72:  # a primary-key change
                    old, new = r.choice(ids), self.next_id
                    self.next_id += 1
                    self.changes += cur.execute(f"UPDATE {SCHEMA}.items SET order_id = %s WHERE order_id = %s",
                                                (new, old))
                    self.changes += cur.execute(f"UPDATE {SCHEMA}.orders SET id = %s WHERE id = %s", (new, old))
                elif x < 0.85:
                    oid = r.choice(ids)
                    self.changes += cur.execute(f"DELETE FROM {SCHEMA}.items WHERE order_id = %s", (oid,))
                    self.changes += cur.execute(f"DELETE FROM {SCHEMA}.orders WHERE id = %s", (oid,))
                else:  # no REPLACE: its rows-affected count (2) is not what the binlog records (1 UPDATE)
                    nid = r.randint(1, 40)
                    body = "note " * r.randint(0, 5)
                    extra = (", extra = %s", (r.randint(0, 100),)) if self.extra else ("", ())
                    if cur.execute(f"SELECT 1 FROM {SCHEMA}.notes WHERE id = %s", (nid,)):
                        self.changes += cur.execute(f"UPDATE {SCHEMA}.notes SET body = %s{extra[0]} WHERE id = %s",
                                                    (body, *extra[1], nid))
                    else:
                        self.changes += cur.execute(f"INSERT INTO {SCHEMA}.notes SET id = %s, body = %s, "
                                                    f"at = CURDATE(){extra[0]}", (nid, body, *extra[1]))
            cur.execute("COMMIT")

    def add_column(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute(f"ALTER TABLE {SCHEMA}.notes ADD COLUMN extra INT DEFAULT 7")
        self.extra = True


def mirrors_equal(driver: Driver, settings: Any, spark: Any) -> tuple[bool, str]:
    lake = Lake(driver.config.lake_root)
    for t in TABLES:
        cols = table_columns(settings.repl_kwargs(), SCHEMA, t)
        try:
            got = mirror_rows(spark, lake.mirror_path(SCHEMA, t), cols)
        except Exception as e:  # not created yet
            return False, f"{t}: {type(e).__name__}"
        want = source_rows(settings, SCHEMA, t, cols)
        if got != want:
            bad = [k for k in set(got) | set(want) if got.get(k) != want.get(k)]
            return False, f"{t}: {len(bad)} rows differ, e.g. {bad[:1]}: {[got.get(bad[0]), want.get(bad[0])]}"
    return True, ""


def converge(driver: Driver, settings: Any, spark: Any, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    why = ""
    while time.monotonic() < deadline:
        for _ in range(3):
            driver.tick()
        state = SensorState.from_cursor(driver.cursor)
        if state.inflight is None:
            ok, why = mirrors_equal(driver, settings, spark)
            if ok:
                return
        assert not state.stopped, state.stopped
    pytest.fail(f"mirrors did not converge in {timeout:.0f} s: {why}; cursor {driver.cursor}")


def changelog_counts(spark: Any, lake: Lake) -> tuple[int, int]:
    df = spark.read.format("delta").load(lake.changelog_path()).where(f"schema_name = '{SCHEMA}'")
    return df.count(), df.select("pos", "row").distinct().count()
