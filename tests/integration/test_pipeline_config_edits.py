"""Edits of the destination's Canal conf take effect, or are refused loudly, with no code-location reload: the
canal sensor (real definitions, real Dagster instance, the embedded Canal instance on the private MariaDB, real
Spark runs through tests/integration/pipeline_driver.py) after instance.properties is edited under it.

1. A wrong password: the instance restarts with it, the sensor's ticks fail saying the source cannot be read
   (the server's "Access denied" and the conf file), the lag checks turn WARN; the password fixed: the failure
   clears by itself within two ticks and the changes written meanwhile are applied.
2. A file that does not load (a port that is not a number): refused, naming the file and the key; the running
   instance keeps its previous conf and windows keep flowing; fixed: the refusal clears.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from dagster import AssetCheckKey, AssetKey

from pipelines.engine.lake import Lake
from pipelines.engine.reconcile import table_columns
from pipelines.engine.sensor_state import SensorState
from tests.integration.pipeline_driver import Driver, drive_until_idle, make_config, mirror_rows, source_rows
from tests.support.schema import scratch_schema

pytestmark = pytest.mark.integration

SCHEMA = "canal_confedit"


@pytest.fixture
def db(mariadb_settings: Any) -> Iterator[pymysql.connections.Connection]:
    with scratch_schema(mariadb_settings, SCHEMA, "items (id INT PRIMARY KEY, name VARCHAR(32), qty INT)") as conn:
        yield conn


def _insert(db: Any, first: int, n: int) -> None:
    with db.cursor() as cur:
        cur.executemany(f"INSERT INTO {SCHEMA}.items VALUES (%s, %s, %s)",
                        [(i, f"item {i}", i % 7) for i in range(first, first + n)])


def _edit(path: Path, key: str, value: str) -> None:
    lines = [f"{key} = {value}" if ln.split("=", 1)[0].strip() == key else ln for ln in path.read_text().splitlines()]
    path.write_text("\n".join(lines) + "\n")


def _tick_until(driver: Driver, want: str, failed: bool, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        r = driver.tick()
        text = (r.skip_reason.skip_message if r.skip_reason else "") or ""
        if want in text and text.startswith("FAILED") == failed:
            return text
        time.sleep(0.5)
    pytest.fail(f"no {'failed' if failed else ''} tick saying {want!r} within {timeout:.0f} s; last: {text!r}")


def _lag(driver: Driver) -> tuple[bool, str]:
    rec = driver.instance.get_latest_asset_check_evaluation_record(
        AssetCheckKey(AssetKey(["mirror", SCHEMA, "items"]), "lag"))
    assert rec is not None and rec.event is not None
    ev = rec.event.dagster_event.event_specific_data  # type: ignore[union-attr]
    return ev.passed, ev.description or ""


def _mirror_equals_source(driver: Driver, settings: Any, spark: Any) -> None:
    cols = table_columns(settings.repl_kwargs(), SCHEMA, "items")
    lake = Lake(driver.config.lake_root)
    assert mirror_rows(spark, lake.mirror_path(SCHEMA, "items"), cols) == source_rows(settings, SCHEMA, "items", cols)


@pytest.mark.timeout(900)
def test_a_password_edit_takes_effect_and_its_failure_clears(mariadb_settings: Any, db: Any, tmp_path: Path,
                                                            spark: Any) -> None:
    cfg = make_config(tmp_path, mariadb_settings, "confedit", f"{SCHEMA}\\\\..*")
    props = cfg.canal.conf_dir / "confedit" / "instance.properties"
    driver = Driver(cfg, tmp_path / "home")
    _insert(db, 0, 10)
    drive_until_idle(driver, settle=1.0)
    assert _lag(driver)[0], _lag(driver)

    _edit(props, "canal.instance.dbPassword", "not-the-password")
    _insert(db, 100, 5)  # written while the destination cannot read: applied once the password is fixed
    text = _tick_until(driver, "CANNOT READ THE SOURCE", failed=True)
    assert "Access denied" in text and str(props) in text, text
    passed, desc = _lag(driver)
    assert not passed and "Access denied" in desc

    _edit(props, "canal.instance.dbPassword", "canal")
    r1, r2 = driver.tick(), driver.tick()  # within two ticks the failure is gone ...
    texts = [(r.skip_reason.skip_message if r.skip_reason else "") or "" for r in (r1, r2)]
    assert not texts[1].startswith("FAILED"), texts
    drive_until_idle(driver, settle=1.0)  # ... and what was written meanwhile is applied
    _mirror_equals_source(driver, mariadb_settings, spark)
    assert _lag(driver)[0]
    assert not SensorState.from_cursor(driver.cursor).stopped


@pytest.mark.timeout(900)
def test_an_edit_that_does_not_load_is_refused_and_the_old_conf_keeps_running(
        mariadb_settings: Any, db: Any, tmp_path: Path, spark: Any) -> None:
    cfg = make_config(tmp_path, mariadb_settings, "confbad", f"{SCHEMA}\\\\..*")
    props = cfg.canal.conf_dir / "confbad" / "instance.properties"
    driver = Driver(cfg, tmp_path / "home")
    _insert(db, 0, 10)
    drive_until_idle(driver, settle=1.0)
    _insert(db, 50, 3)  # a first window: the mirror's catch-up from its snapshot (which reads the conf) is done
    drive_until_idle(driver, settle=1.0)

    good = props.read_text()
    _edit(props, "canal.instance.master.address", f"{mariadb_settings.host}:not-a-port")
    text = _tick_until(driver, "refused", failed=True)
    assert str(props) in text and "canal.instance.master.address" in text, text
    _insert(db, 100, 5)
    # the running instance keeps its conf: the changes still arrive, and a window that carries them is applied
    deadline = time.monotonic() + 60
    while not any(rr.tags.get("canal/rows") == "5" and ok for rr, ok in driver.runs):
        assert time.monotonic() < deadline, [rr.tags for rr, _ in driver.runs]
        driver.tick()
        time.sleep(0.5)
    _mirror_equals_source(driver, mariadb_settings, spark)

    props.write_text(good)
    _tick_until(driver, "no new changes", failed=False)
    assert _lag(driver)[0]
