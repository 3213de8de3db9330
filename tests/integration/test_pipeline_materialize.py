"""Materialize on a mirror, as the UI launches it (the implicit asset job, that mirror selected), does what its
description says: the mirror is reloaded from a consistent snapshot of the source, and the stream catches it up
from the snapshot's binlog position while windows keep flowing. Real MariaDB, real Spark, a real Dagster
instance directory, the canal sensor driven by tests/integration/pipeline_driver.py.

The mirror is damaged first (rows deleted and changed behind the pipeline's back): only a reload repairs that.
Changes written between the damage, the reload and after it all end up in the mirror exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from dagster import AssetKey

from pipelines.engine.lake import Lake
from pipelines.engine.reconcile import table_columns
from pipelines.engine.registry import registry_for
from tests.integration.pipeline_driver import Driver, drive_until_idle, make_config, mirror_rows, source_rows
from tests.support.schema import scratch_schema

pytestmark = pytest.mark.integration

SCHEMA = "canal_materialize"


@pytest.fixture
def db(mariadb_settings: Any) -> Iterator[pymysql.connections.Connection]:
    with scratch_schema(mariadb_settings, SCHEMA,
                        "accounts (id INT PRIMARY KEY, owner VARCHAR(32), balance DECIMAL(10,2))",
                        "events (id INT PRIMARY KEY, kind VARCHAR(16))") as conn:
        yield conn


def _write(db: Any, first: int, n: int) -> None:
    with db.cursor() as cur:
        cur.executemany(f"INSERT INTO {SCHEMA}.accounts VALUES (%s, %s, %s)",
                        [(i, f"owner {i}", i * 1.5) for i in range(first, first + n)])
        cur.executemany(f"INSERT INTO {SCHEMA}.events VALUES (%s, %s)", [(i, "open") for i in range(first, first + n)])
        cur.execute(f"UPDATE {SCHEMA}.accounts SET balance = balance + 1 WHERE id % 3 = 0")


def _equal(driver: Driver, settings: Any, spark: Any, table: str) -> bool:
    cols = table_columns(settings.repl_kwargs(), SCHEMA, table)
    lake = Lake(driver.config.lake_root)
    return bool(mirror_rows(spark, lake.mirror_path(SCHEMA, table), cols) == source_rows(settings, SCHEMA, table, cols))


@pytest.mark.timeout(1200)
def test_materializing_a_mirror_reloads_it_from_a_snapshot(mariadb_settings: Any, db: Any, tmp_path: Path,
                                                           spark: Any) -> None:
    cfg = make_config(tmp_path, mariadb_settings, "materialize", f"{SCHEMA}\\\\..*")
    driver = Driver(cfg, tmp_path / "home")
    _write(db, 0, 20)
    drive_until_idle(driver, settle=1.0)
    _write(db, 100, 10)
    drive_until_idle(driver, settle=1.0)
    assert _equal(driver, mariadb_settings, spark, "accounts")

    # damage behind the pipeline's back: only a reload brings these rows back
    path = Lake(cfg.lake_root).mirror_path(SCHEMA, "accounts")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id < 5")
    spark.sql(f"UPDATE delta.`{path}` SET owner = 'tampered' WHERE id >= 100")
    assert not _equal(driver, mariadb_settings, spark, "accounts")
    _write(db, 200, 5)  # a window still to come, taken before the reload

    # what the UI's Materialize launches: the implicit asset job with the mirror selected
    key = AssetKey(["mirror", SCHEMA, "accounts"])
    job = driver.defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection={key})
    before = registry_for(cfg).load()["canal_materialize.accounts"]
    result = job.execute_in_process(instance=driver.instance, raise_on_error=False)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    mats = [e.materialization for e in result.get_asset_materialization_events()]
    assert [m.asset_key for m in mats] == [key] and "binlog_position" in mats[0].metadata
    after = registry_for(cfg).load()["canal_materialize.accounts"]
    assert after["run_id"] == result.run_id and after["caught_up"] is False
    assert after["position_key"] > before["position_key"]

    _write(db, 300, 5)  # after the reload: the catch-up replays from the snapshot, then the windows go on
    drive_until_idle(driver, settle=1.0)
    assert registry_for(cfg).load()["canal_materialize.accounts"]["caught_up"] is True
    assert _equal(driver, mariadb_settings, spark, "accounts")
    assert _equal(driver, mariadb_settings, spark, "events")  # the other mirror was not touched by the reload
    assert all(ok for _, ok in driver.runs)


def test_ui_runs_execute_in_one_process() -> None:
    """Runs launched from the UI (Materialize, executing checks) run their steps in one process, sharing one Spark
    session, not a process and a JVM per step."""
    from pipelines.defs.definitions import defs

    job = defs.resolve_implicit_global_asset_job_def()
    assert job.executor_def.name == "in_process"
