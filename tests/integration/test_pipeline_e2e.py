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
import time
from pathlib import Path
from typing import Any

import pytest

from pipelines.engine.lake import Lake, apply_changelog, apply_mirror
from pipelines.engine.reconcile import dataframe_fingerprint, source_fingerprint, table_columns
from pipelines.engine.sensor_state import SensorState
from pipelines.engine.staging import load_window
from tests.integration.e2e_workload import SCHEMA, TABLES, Workload, changelog_counts, converge, mirrors_equal
from tests.integration.pipeline_driver import Driver, make_config

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_spark_session")]

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
    # the reconcile checks in runs of their own beside the windows (one mirror per run), as by default, only more
    # often: each mirror about every two minutes
    cfg = make_config(tmp_path, mariadb_settings, "e2e", f"{SCHEMA}\\\\..*", sensor={"reconcile_interval_seconds": 120})
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
    converge(driver, mariadb_settings, spark)

    lake = Lake(cfg.lake_root)
    # reconciliation: the same fingerprint on both sides
    for t in TABLES:
        cols = table_columns(mariadb_settings.repl_kwargs(), SCHEMA, t)
        src = source_fingerprint(mariadb_settings.repl_kwargs(), SCHEMA, t, cols)
        mir = dataframe_fingerprint(spark.read.format("delta").load(lake.mirror_path(SCHEMA, t)), cols)
        assert src == mir, src.diff(mir)
    # the changelog holds each change of the workload once (the snapshot rows are not changes)
    total, distinct = changelog_counts(spark, lake)
    assert total == distinct == w.changes
    assert all(ok for _, ok in driver.runs)
    # every mirror was reconciled in a canal_reconcile run, and passed
    from dagster import AssetCheckKey, AssetKey

    reconciled = [rr for rr, _ in driver.runs if rr.job_name == "canal_reconcile"]
    assert {k.asset_key.path[-1] for rr in reconciled for k in rr.asset_check_keys or []} == set(TABLES)
    assert not [rr for rr, _ in driver.runs if rr.job_name == "canal_window" and rr.asset_check_keys]

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
    partial, _ = changelog_counts(spark, lake)
    assert partial > 0  # the changelog step of the failed run did write

    driver.before_run = None
    converge(driver, mariadb_settings, spark)
    dest, window, attempt = failed_key.split(":")
    retried = [rr.run_key for rr, ok in driver.runs if ok and rr.run_key.startswith(f"{dest}:{window}:")]
    assert retried and all(int(k.split(":")[2]) > int(attempt) for k in retried)  # a new run key
    assert not src._server.list_batch_ids(src.client)  # everything acked once applied
    total, distinct = changelog_counts(spark, lake)
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
    converge(driver, mariadb_settings, spark)
    changes = w.changes

    lake = Lake(cfg.lake_root)
    period = f"_canal_ts >= '{t1:%Y-%m-%d %H:%M:%S}' AND _canal_ts < '{t2:%Y-%m-%d %H:%M:%S}'"
    spark.sql(f"UPDATE delta.`{lake.mirror_path(SCHEMA, 'orders')}` SET amount = -1, customer = 'DAMAGED' "
              f"WHERE {period}")
    spark.sql(f"DELETE FROM delta.`{lake.mirror_path(SCHEMA, 'items')}` WHERE {period}")
    ok, why = mirrors_equal(driver, mariadb_settings, spark)
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
    ok, why = mirrors_equal(driver, mariadb_settings, spark)
    assert ok, why
    assert meta.read_bytes() == live_meta and driver.cursor == live_cursor  # the live cursor did not move
    total, distinct = changelog_counts(spark, lake)
    assert total == distinct == changes  # the period was replaced, not appended
