"""Several destinations in one code location (conf/pipeline.yaml ``destinations: [primary, secondary]``): two
private MariaDB servers (the suite's shared one, and one of this test's own that it stops and starts), one
Definitions, one Dagster instance, each destination's canal sensor evaluated and its runs executed in this
process (tests/integration/pipeline_driver.py), local Spark/Delta.

1. The code location holds each destination's sensor, jobs and assets under its own names; both sources hold the
   same schema and table with different rows, and each mirror and each changelog (a lake directory per
   destination) holds exactly its own source's rows and changes.
2. The secondary's MariaDB stopped: its ticks fail saying the source cannot be read, its mirror's lag check
   fails, while the primary keeps applying its changes (its mirror equal to its source, its lag check passing).
3. The secondary started again: it catches up by itself and its lag check passes again.
4. A destination whose table list cannot be had when the code location loads (source down, nothing cached)
   leaves the other destinations loaded; its sensor's every tick fails saying why and what to do.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from dagster import AssetKey, build_sensor_context

from pipelines.defs.definitions import build_definitions
from pipelines.defs.status import lag_check_result
from pipelines.engine.config import PipelineConfig, parse_config
from pipelines.engine.lake import Lake
from pipelines.engine.reconcile import table_columns
from tests.integration.extra_mariadb import extra_instance
from tests.integration.pipeline_driver import (
    Driver,
    RecordedChanges,
    changelog_changes,
    config_data,
    drive_until_idle,
    mirror_rows,
    source_rows,
    write_conf,
)
from tests.support.instances import script
from tests.support.net import free_port

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_spark_session")]

SCHEMA = "canal_multidest"
INSTANCE = "multidest"      # the secondary's own MariaDB (scripts/mariadb.sh), stopped and started here
SERVER_ID = 74
DESTS = ("primary", "secondary")


@pytest.fixture(scope="module")
def secondary(mariadb_settings: Any) -> Iterator[Any]:
    with extra_instance(INSTANCE, SERVER_ID, mariadb_settings) as settings:
        yield settings


def _create(settings: Any, first: int) -> None:
    """The same schema and table on both servers, with rows of their own (ids from ``first``)."""
    conn = pymysql.connect(**settings.admin_kwargs(autocommit=True))
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
            cur.execute(f"CREATE DATABASE {SCHEMA}")
            cur.execute(f"CREATE TABLE {SCHEMA}.items (id INT PRIMARY KEY, name VARCHAR(32), n INT)")
            cur.executemany(f"INSERT INTO {SCHEMA}.items VALUES (%s, %s, %s)",
                            [(first + i, f"before {first + i}", i) for i in range(10)])
    finally:
        conn.close()


def _config(root: Path, primary: Any, secondary: Any) -> PipelineConfig:
    regex = f"{SCHEMA}\\\\..*"
    data = config_data(root, primary, "primary", regex)
    write_conf(root, secondary, "secondary", regex)
    (root / "conf" / "canal.properties").write_text(f"canal.destinations = {','.join(DESTS)}\n"
                                                     "canal.file.flush.period = 0\n")
    del data["destination"]
    data["destinations"] = list(DESTS)
    return parse_config(data, base_dir=root)


def _equal(spark: Any, cfg: PipelineConfig, settings: Any) -> tuple[bool, str]:
    cols = table_columns(settings.repl_kwargs(), SCHEMA, "items")
    try:
        got = mirror_rows(spark, Lake(cfg.lake_root).mirror_path(SCHEMA, "items"), cols)
    except Exception as e:  # not created yet
        return False, f"{cfg.destination}: {type(e).__name__}"
    want = source_rows(settings, SCHEMA, "items", cols)
    return got == want, f"{cfg.destination}: mirror {sorted(got)} source {sorted(want)}"


def _changes(w: RecordedChanges, new: range, update: int, delete: int, tag: str) -> None:
    for i in new:
        w.insert("items", id=i, name=f"{tag} {i}", n=i)
    w.update("items", update, name=f"{tag} updated")
    w.delete("items", delete)


@pytest.mark.timeout(900)
def test_two_destinations_in_one_code_location(mariadb_settings: Any, secondary: Any, tmp_path: Path,
                                               spark: Any) -> None:
    servers = {"primary": mariadb_settings, "secondary": secondary}
    firsts = {"primary": 1000, "secondary": 5000}
    for d in DESTS:
        _create(servers[d], firsts[d])
    cfg = _config(tmp_path, mariadb_settings, secondary)
    parts = {c.destination: c for c in cfg.per_destination()}
    p = Driver(cfg, tmp_path / "home", sensor_name="canal_primary")
    s = Driver(cfg, tmp_path / "home", sensor_name="canal_secondary", instance=p.instance)
    drivers = {"primary": p, "secondary": s}

    # 1. one code location, each destination under its own names and in its own lake directory
    repo = p.defs.get_repository_def()
    assert {x.name for x in repo.sensor_defs} == {"canal_primary", "canal_secondary"}
    assert {"primary__canal_window", "secondary__canal_window", "primary__canal_backfill",
            "secondary__canal_snapshot"} <= {j.name for j in repo.get_all_jobs()}
    keys = set(repo.asset_graph.get_all_asset_keys())
    for d in DESTS:
        assert {AssetKey([d, "mirror", SCHEMA, "items"]), AssetKey([d, "canal", "changelog"]),
                AssetKey([d, "mysql", SCHEMA, "items"])} <= keys
    assert parts["primary"].lake_root == f"{tmp_path / 'lake'}/primary"

    recorded = {d: RecordedChanges(servers[d], SCHEMA) for d in DESTS}
    try:
        for d in DESTS:
            drive_until_idle(drivers[d], timeout=300)   # the snapshot, then the stream
            f = firsts[d]
            _changes(recorded[d], range(f + 100, f + 105), f + 1, f + 2, f"{d} one")
        for d in DESTS:
            drive_until_idle(drivers[d], timeout=300, settle=1)
            ok, why = _equal(spark, parts[d], servers[d])
            assert ok, why
            # each changelog holds its own source's changes, and only those
            lake = Lake(parts[d].lake_root)
            assert changelog_changes(spark, lake.changelog_path(), SCHEMA) == recorded[d].log, d
            assert {rr.job_name for rr, _ in drivers[d].runs} <= {f"{d}__canal_snapshot", f"{d}__canal_window"}
            assert lag_check_result(parts[d], f"{SCHEMA}.items").passed, d

        # 2. the secondary's source stopped: its ticks fail, the primary keeps going
        assert script("stop", INSTANCE).returncode == 0
        deadline = time.monotonic() + 120
        while not s.failed_ticks and time.monotonic() < deadline:
            s.tick()
            time.sleep(1)
        assert s.failed_ticks and "CANNOT READ THE SOURCE" in s.failed_ticks[-1], s.failed_ticks
        f = firsts["primary"]
        _changes(recorded["primary"], range(f + 110, f + 113), f + 3, f + 4, "primary, secondary down")
        s.tick()
        t0 = time.monotonic()
        drive_until_idle(p, timeout=300, settle=1)
        assert time.monotonic() - t0 < 120
        ok, why = _equal(spark, parts["primary"], mariadb_settings)
        assert ok, why
        assert lag_check_result(parts["primary"], f"{SCHEMA}.items").passed
        down = lag_check_result(parts["secondary"], f"{SCHEMA}.items")
        assert not down.passed and "cannot read the source" in (down.description or ""), down.description

        # 3. the secondary started again (same port, same data): it catches up by itself
        out = script("start", INSTANCE, env={"MARIADB_PORT": str(secondary.port),
                                             "MARIADB_SERVER_ID": str(SERVER_ID)})
        assert out.returncode == 0, out.stderr[-2000:]
        before = recorded["secondary"]
        recorded["secondary"] = again = RecordedChanges(secondary, SCHEMA)
        again.log = list(before.log)
        _close(before)
        f = firsts["secondary"]
        _changes(again, range(f + 110, f + 113), f + 3, f + 4, "secondary back")
        deadline = time.monotonic() + 240   # the parser's reconnect backoff reaches 30 s (+ jitter) meanwhile
        while not _equal(spark, parts["secondary"], secondary)[0]:
            assert time.monotonic() < deadline, _equal(spark, parts["secondary"], secondary)[1]
            s.tick()
            time.sleep(1)
        failed = len(s.failed_ticks)   # and from here on its ticks are healthy again
        drive_until_idle(s, timeout=300, settle=1)
        assert len(s.failed_ticks) == failed, s.failed_ticks[failed:]
        assert lag_check_result(parts["secondary"], f"{SCHEMA}.items").passed
        ok, why = _equal(spark, parts["primary"], mariadb_settings)
        assert ok, why
    finally:
        for w in recorded.values():
            _close(w)


def _close(w: RecordedChanges) -> None:
    try:
        w.close()
    except pymysql.Error:  # its server was stopped under it
        pass


def test_a_destination_that_cannot_load_leaves_the_others(tmp_path: Path) -> None:
    """No source and no cached table list for ``secondary``: the location loads with ``primary``'s definitions and a
    ``canal_secondary`` sensor whose ticks fail naming the destination, its address and what to do."""
    closed = free_port()

    class Down:
        host, port = "127.0.0.1", closed

    class Up:
        host, port = "127.0.0.1", closed + 1

    data = config_data(tmp_path, Up, "primary", "shop\\\\..*")
    write_conf(tmp_path, Down, "secondary", "shop\\\\..*")
    (tmp_path / "conf" / "canal.properties").write_text("canal.destinations = primary,secondary\n")
    del data["destination"]
    data["destinations"] = ["primary", "secondary"]
    defs = build_definitions(parse_config(data, base_dir=tmp_path), tables={"primary": ["shop.items"]})
    repo = defs.get_repository_def()
    assert AssetKey(["primary", "mirror", "shop", "items"]) in set(repo.asset_graph.get_all_asset_keys())
    assert {j.name for j in repo.get_all_jobs()} >= {"primary__canal_window", "primary__canal_maintenance"}
    assert not any(j.name.startswith("secondary__") for j in repo.get_all_jobs())
    sensor = next(x for x in repo.sensor_defs if x.name == "canal_secondary")
    with pytest.raises(Exception) as e:
        sensor(build_sensor_context())
    text = str(e.value)
    assert "'secondary'" in text and f"127.0.0.1:{closed}" in text and "reload the code location" in text, text
