"""The pipeline end to end on the private MariaDB and local Spark/Delta.

The canal sensor is evaluated against a real on-disk Dagster instance and every run it requests is
executed in this process with the same job, run config, tags and run key the daemon would use
(tests/integration/pipeline_driver.py); scripts/run.sh --headless covers the daemon path.

1. A random workload (inserts, updates, primary-key changes, deletes, multi-statement transactions, an ADD
   COLUMN while the stream runs) on tables that held rows before the pipeline started (initial snapshot)
   converges: every mirror read by Spark equals its source read by SELECT, row by row, and the
   reconciliation fingerprints agree.
2. A run forced to fail (its staged table file vanished after the changelog step) leaves the window
   unacked; the next attempt applies it; the changelog holds each change exactly once.
3. Applying a window again, and an older window after newer ones, leaves the tables identical.
4. Backfill by timestamp repairs damaged mirror rows of a period; the live cursor does not move.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pymysql
import pytest

from pipelines.defs.resources import SparkResource
from pipelines.engine.lake import Lake, apply_changelog, apply_mirror
from pipelines.engine.reconcile import dataframe_fingerprint, source_fingerprint, table_columns
from pipelines.engine.sensor_state import SensorState
from pipelines.engine.staging import load_window
from tests.integration.pipeline_driver import Driver, make_config, mirror_rows, source_rows

pytestmark = pytest.mark.integration

SCHEMA = "canal_e2e"
TABLES = ["orders", "items", "notes"]


@pytest.fixture(autouse=True)
def _one_spark_session(monkeypatch: pytest.MonkeyPatch) -> None:
    # the daemon runs each run in its own process, whose SparkSession ends with it; in this process the
    # runs share the test session instead of stopping and restarting it after every run
    monkeypatch.setattr(SparkResource, "teardown_after_execution", lambda self, context: None)


@pytest.fixture
def db(mariadb_settings: Any) -> Iterator[pymysql.connections.Connection]:
    conn = pymysql.connect(**mariadb_settings.admin_kwargs(init_command="SET time_zone = '+00:00'"))
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
    yield conn
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
    conn.close()


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


def _mirrors_equal(driver: Driver, settings: Any, spark: Any) -> tuple[bool, str]:
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


def _converge(driver: Driver, settings: Any, spark: Any, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    why = ""
    while time.monotonic() < deadline:
        for _ in range(3):
            driver.tick()
        state = SensorState.from_cursor(driver.cursor)
        if state.inflight is None:
            ok, why = _mirrors_equal(driver, settings, spark)
            if ok:
                return
        assert not state.stopped, state.stopped
    pytest.fail(f"mirrors did not converge in {timeout:.0f} s: {why}; cursor {driver.cursor}")


def _changelog_counts(spark: Any, lake: Lake) -> tuple[int, int]:
    df = spark.read.format("delta").load(lake.changelog_path()).where(f"schema_name = '{SCHEMA}'")
    return df.count(), df.select("pos", "row").distinct().count()


def _state(spark: Any, lake: Lake) -> dict[str, Any]:
    """Everything a replay could disturb: each mirror's rows and the changelog's rows."""
    out: dict[str, Any] = {}
    for t in TABLES:
        df = spark.read.format("delta").load(lake.mirror_path(SCHEMA, t))
        out[t] = sorted(json.dumps(r, sort_keys=True, default=str) for r in df.toArrow().to_pylist())
    cl = spark.read.format("delta").load(lake.changelog_path())
    out["changelog"] = sorted(json.dumps(r, sort_keys=True, default=str) for r in cl.toArrow().to_pylist())
    return out


@pytest.mark.timeout(1500)
def test_random_workload_converges_and_replays_are_harmless(mariadb_settings: Any, db: Any, tmp_path: Path,
                                                            spark: Any) -> None:
    w = Workload(db, seed=20261122)
    for _ in range(30):  # rows that exist before the pipeline: the initial snapshot loads them
        w.tx()
    # the reconcile checks ride along with the window runs (one mirror per run), as by default, only more often
    cfg = make_config(tmp_path, mariadb_settings, "e2e", f"{SCHEMA}\\\\..*", sensor={"reconcile_interval_seconds": 1})
    driver = Driver(cfg, tmp_path / "home", keep_windows=tmp_path / "kept")
    driver.tick()  # starts the instance, snapshots every table
    snapshot_runs = [rr for rr, ok in driver.runs if rr.tags.get("canal/kind") == "snapshot"]
    assert snapshot_runs and all(ok for _, ok in driver.runs)

    w.changes = 0
    for i in range(90):
        w.tx()
        if i == 45:
            w.add_column()  # schema evolution while the stream runs
        if i % 15 == 0:
            driver.tick()
    _converge(driver, mariadb_settings, spark)

    lake = Lake(cfg.lake_root)
    # reconciliation: the same fingerprint on both sides
    for t in TABLES:
        cols = table_columns(mariadb_settings.repl_kwargs(), SCHEMA, t)
        src = source_fingerprint(mariadb_settings.repl_kwargs(), SCHEMA, t, cols)
        mir = dataframe_fingerprint(spark.read.format("delta").load(lake.mirror_path(SCHEMA, t)), cols)
        assert src == mir, src.diff(mir)
    # the changelog holds each change of the workload once (the snapshot rows are not changes)
    total, distinct = _changelog_counts(spark, lake)
    assert total == distinct == w.changes
    assert all(ok for _, ok in driver.runs)
    # every mirror was reconciled inside a window run, and passed
    from dagster import AssetCheckKey, AssetKey

    for t in TABLES:
        rec = driver.instance.get_latest_asset_check_evaluation_record(
            AssetCheckKey(AssetKey(["mirror", SCHEMA, t]), "reconcile"))
        assert rec is not None and rec.event is not None, t
        ev = rec.event.dagster_event.event_specific_data  # type: ignore[union-attr]
        assert ev.passed, (t, ev.description)

    # replays: the same window again, and an older window after the newest, change nothing
    windows = [p for p in driver.staged_copies if (p / "manifest.json").is_file()]
    assert len(windows) >= 3
    before = _state(spark, lake)
    for path in [windows[len(windows) // 2], windows[len(windows) // 2], windows[0], windows[-1]]:
        m = load_window(path)
        apply_changelog(spark, lake, path, m)
        for tc in m.tables:
            apply_mirror(spark, lake, path, m, tc)
    assert _state(spark, lake) == before


def _src(cfg: Any) -> Any:
    from pipelines.engine.source import make_source

    return make_source(cfg)


def test_failed_run_leaves_the_window_unacked_and_the_retry_applies_it_once(mariadb_settings: Any, db: Any,
                                                                             tmp_path: Path, spark: Any) -> None:
    cfg = make_config(tmp_path, mariadb_settings, "e2efail", f"{SCHEMA}\\\\..*")
    driver = Driver(cfg, tmp_path / "home")
    driver.tick()  # snapshots of the (empty) tables
    w = Workload(db, seed=5)
    for _ in range(25):
        w.tx()
    sabotaged: list[str] = []

    def lose_orders_file(rr: Any) -> None:
        # the staged file of one table vanishes once: the changelog step succeeds, that mirror's step fails
        path = (rr.run_config or {}).get("resources", {}).get("canal_window", {}).get("config", {}).get("path")
        if path and not sabotaged:
            files = list(Path(path).glob(f"tables/{SCHEMA}.orders/*.parquet"))
            if files:
                for f in files:
                    f.unlink()
                sabotaged.append(rr.run_key)

    driver.before_run = lose_orders_file
    deadline = time.monotonic() + 120
    while not sabotaged:
        assert time.monotonic() < deadline, "no window with orders changes was taken"
        driver.tick()
    failed_key = sabotaged[0]
    assert [ok for rr, ok in driver.runs if rr.run_key == failed_key] == [False]
    # the window is not acked: its batches are still outstanding at the server
    state = SensorState.from_cursor(driver.cursor)
    assert state.inflight is not None and state.inflight.run_key == failed_key
    src = _src(cfg)
    assert set(state.inflight.batch_ids) <= set(src._server.list_batch_ids(src.client))
    lake = Lake(cfg.lake_root)
    partial, _ = _changelog_counts(spark, lake)
    assert partial > 0  # the changelog step of the failed run did write

    driver.before_run = None
    _converge(driver, mariadb_settings, spark)
    dest, window, attempt = failed_key.split(":")
    retried = [rr.run_key for rr, ok in driver.runs if ok and rr.run_key.startswith(f"{dest}:{window}:")]
    assert retried and all(int(k.split(":")[2]) > int(attempt) for k in retried)  # a new run key
    assert not src._server.list_batch_ids(src.client)  # everything acked once applied
    total, distinct = _changelog_counts(spark, lake)
    assert total == distinct == w.changes  # each change once, although the failed attempt had written some


def test_backfill_by_time_repairs_damaged_rows_and_leaves_the_live_cursor(mariadb_settings: Any, db: Any,
                                                                          tmp_path: Path, spark: Any) -> None:
    cfg = make_config(tmp_path, mariadb_settings, "e2ebf", f"{SCHEMA}\\\\..*")
    driver = Driver(cfg, tmp_path / "home")
    driver.tick()
    w = Workload(db, seed=9)
    for _ in range(15):
        w.tx()
    time.sleep(1.2)  # binlog times have one-second resolution: the period starts on a whole second
    t1 = dt.datetime.fromtimestamp(int(time.time()), dt.UTC)
    for _ in range(25):
        w.tx()
    time.sleep(1.2)
    t2 = dt.datetime.fromtimestamp(int(time.time()), dt.UTC)
    for _ in range(10):
        w.tx()
    _converge(driver, mariadb_settings, spark)
    changes = w.changes

    lake = Lake(cfg.lake_root)
    period = f"_canal_ts >= '{t1:%Y-%m-%d %H:%M:%S}' AND _canal_ts < '{t2:%Y-%m-%d %H:%M:%S}'"
    spark.sql(f"UPDATE delta.`{lake.mirror_path(SCHEMA, 'orders')}` SET amount = -1, customer = 'DAMAGED' "
              f"WHERE {period}")
    spark.sql(f"DELETE FROM delta.`{lake.mirror_path(SCHEMA, 'items')}` WHERE {period}")
    ok, why = _mirrors_equal(driver, mariadb_settings, spark)
    assert not ok, "the damage did not touch any row of the period"

    meta = Path(cfg.instance_config().data_dir) / "meta.dat"
    live_meta, live_cursor = meta.read_bytes(), driver.cursor
    job = driver.defs.resolve_job_def("canal_backfill")
    result = job.execute_in_process(
        run_config={"ops": {"backfill_period": {"config": {
            "start_time": t1.isoformat(), "end_time": t2.isoformat(),
            "tables": [f"{SCHEMA}.orders", f"{SCHEMA}.items"]}}}},
        instance=driver.instance, raise_on_error=False)
    assert result.success
    ok, why = _mirrors_equal(driver, mariadb_settings, spark)
    assert ok, why
    assert meta.read_bytes() == live_meta and driver.cursor == live_cursor  # the live cursor did not move
    total, distinct = _changelog_counts(spark, lake)
    assert total == distinct == changes  # the period was replaced, not appended
