"""The reconcile check in a canal_reconcile run of its own, as the canal sensor launches it beside the windows
(checks only: an empty asset selection). Real MariaDB, real Spark, a real Dagster instance directory, the sensor
driven by tests/integration/pipeline_driver.py.

Beside the windows means a window run may commit to the mirror while the check runs. The check compares the source
at its snapshot position S with the mirror at the watermark W it read (plus the binlog W..S replayed on top), so the
rows it reads of the mirror must be those of that same Delta version, not of a later commit.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from pipelines.defs.assets.keys import RECONCILE_JOB, reconcile_check_key
from pipelines.engine import reconcile as R
from pipelines.engine.lake import Lake
from tests.integration.pipeline_driver import Driver, drive_until_idle, make_config
from tests.support.schema import scratch_schema

pytestmark = pytest.mark.integration

SCHEMA = "canal_reconcile_run"
NAME = f"{SCHEMA}.items"


@pytest.fixture
def db(mariadb_settings: Any) -> Iterator[pymysql.connections.Connection]:
    with scratch_schema(mariadb_settings, SCHEMA, "items (id INT PRIMARY KEY, v VARCHAR(32))") as conn:
        yield conn


def _insert(db: Any, first: int, n: int) -> None:
    with db.cursor() as cur:
        cur.executemany(f"INSERT INTO {NAME} (id, v) VALUES (%s, %s)", [(i, f"v{i}") for i in range(first, first + n)])


def _check(driver: Driver) -> Any:
    """One canal_reconcile run of the table's check, as the sensor requests it; its evaluation."""
    job = driver.defs.resolve_job_def(RECONCILE_JOB).get_subset(
        asset_selection=set(), asset_check_selection={reconcile_check_key(NAME)})
    result = job.execute_in_process(instance=driver.instance, raise_on_error=False)
    assert result.success
    assert not result.get_asset_materialization_events()  # it writes nothing
    (evaluation,) = result.get_asset_check_evaluations()
    return evaluation


@pytest.mark.timeout(900)
def test_a_commit_to_the_mirror_while_the_check_runs_is_not_compared(mariadb_settings: Any, db: Any, tmp_path: Path,
                                                                     spark: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = make_config(tmp_path, mariadb_settings, "recrun", f"{SCHEMA}\\\\..*")
    driver = Driver(cfg, tmp_path / "home")
    _insert(db, 0, 20)
    drive_until_idle(driver, settle=1.0)
    _insert(db, 100, 7)  # not applied yet: the check replays them on top of the mirror
    mirror = Lake(cfg.lake_root).mirror_path(SCHEMA, "items")

    real = R.source_fingerprint

    def a_writer_commits_meanwhile(*args: Any, **kwargs: Any) -> R.Fingerprint:
        fp = real(*args, **kwargs)
        # after the check read the mirror's watermark and the source's position: a commit to the mirror (a row
        # removed behind the watermark's back, which no replay of W..S can explain)
        spark.sql(f"DELETE FROM delta.`{mirror}` WHERE id = 5")
        return fp

    monkeypatch.setattr(R, "source_fingerprint", a_writer_commits_meanwhile)
    ev = _check(driver)
    assert ev.passed, ev.description
    assert ev.metadata["source_rows"].value == 27 and ev.metadata["replayed_rows"].value == 7, ev.metadata

    # the same check on the mirror as it is now finds the row the commit removed: it can fail
    monkeypatch.setattr(R, "source_fingerprint", real)
    ev = _check(driver)
    assert not ev.passed and "1" in ev.description, ev.description
    assert ev.metadata["mirror_rows"].value == 26, ev.metadata


@pytest.mark.timeout(900)
def test_a_column_added_since_the_mirror_s_last_change_is_compared_as_its_default(
        mariadb_settings: Any, db: Any, tmp_path: Path, spark: Any) -> None:
    cfg = make_config(tmp_path, mariadb_settings, "reccol", f"{SCHEMA}\\\\..*")
    driver = Driver(cfg, tmp_path / "home")
    _insert(db, 0, 10)
    drive_until_idle(driver, settle=1.0)
    with db.cursor() as cur:  # existing rows get 7 on the source, with no row event in the binlog
        cur.execute(f"ALTER TABLE {NAME} ADD COLUMN extra INT DEFAULT 7")
    ev = _check(driver)  # no change of the table since: the mirror has not added the column
    assert ev.passed and "extra not in the mirror yet" in ev.description, ev.description
    assert ev.metadata["replayed_rows"].value == 0
    _insert(db, 50, 3)  # replayed on top of the mirror: the preview adds the column, old rows with the default
    with db.cursor() as cur:
        cur.execute(f"UPDATE {NAME} SET extra = NULL WHERE id = 51")
    ev = _check(driver)
    assert ev.passed and "not in the mirror yet" not in ev.description, ev.description
    assert ev.metadata["replayed_rows"].value == 4
    # applied for real, the mirror holds what the check compared
    drive_until_idle(driver, settle=1.0)
    ev = _check(driver)
    assert ev.passed and "not in the mirror yet" not in ev.description, ev.description
