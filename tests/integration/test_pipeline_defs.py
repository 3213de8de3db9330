"""The Dagster code location: loads through workspace.yaml, starts nothing at import, and has the lineage
mysql/... -> canal/changelog -> mirror/..., the jobs, the sensor and the schedule. The table list comes from
the private MariaDB (tables created here), then from its cache when the source is unreachable."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetCheckKey, AssetKey, DailyPartitionsDefinition, DefaultScheduleStatus, DefaultSensorStatus

from pipelines.defs.assets.tables import TableListUnavailable, resolve_tables
from pipelines.defs.definitions import build_definitions
from pipelines.engine.config import REPO_ROOT, PipelineConfig, parse_config

TABLES = ["canal_test.pdefs_customers", "canal_test.pdefs_orders"]


def canal_conf(root: Path, port: int, regex: str = "canal_test\\\\.pdefs_.*") -> Path:
    conf = root / "conf"
    (conf / "example").mkdir(parents=True, exist_ok=True)
    (conf / "canal.properties").write_text("canal.destinations = example\n")
    # a replica id of its own: the derived one is the same for every "example" on this machine, and two
    # replicas with one id kick each other off the primary
    (conf / "example" / "instance.properties").write_text(
        f"canal.instance.mysql.slaveId = {random.randint(1 << 20, (1 << 31) - 1)}\n"
        f"canal.instance.master.address = 127.0.0.1:{port}\ncanal.instance.dbUsername = canal\n"
        f"canal.instance.dbPassword = canal\ncanal.instance.filter.regex = {regex}\n")
    return conf


def pipeline_yaml(root: Path, conf: Path) -> Path:
    f = root / "pipeline.yaml"
    f.write_text(f"canal: {{conf_dir: {conf}}}\npaths: {{staging: {root / 'staging'}, state: {root / 'state'}}}\n"
                 f"lake: {{root: {root / 'lake'}}}\n")
    return f


@pytest.fixture(scope="module")
def tables(mariadb_settings: Any) -> Iterator[list[str]]:
    import pymysql

    conn = pymysql.connect(**mariadb_settings.admin_kwargs())
    try:
        with conn.cursor() as cur:
            for t in TABLES:
                cur.execute(f"CREATE TABLE IF NOT EXISTS {t} (id INT PRIMARY KEY, v VARCHAR(10))")
        yield TABLES
        with conn.cursor() as cur:
            for t in TABLES:
                cur.execute(f"DROP TABLE IF EXISTS {t}")
    finally:
        conn.close()


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, mariadb_settings: Any, tables: list[str]) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("defs")
    conf = canal_conf(root, mariadb_settings.port)
    cfg = parse_config({"canal": {"conf_dir": str(conf)}, "paths": {"staging": str(root / "staging"),
                        "state": str(root / "state")}, "lake": {"root": str(root / "lake")}}, base_dir=root)
    return {"root": root, "conf": conf, "config": cfg, "yaml": pipeline_yaml(root, conf)}


def _env(setup: dict[str, Any], home: Path) -> dict[str, str]:
    home.mkdir(exist_ok=True)
    return {**os.environ, "CANAL_PIPELINE_CONF": str(setup["yaml"]), "DAGSTER_HOME": str(home),
            "DAGSTER_DISABLE_TELEMETRY": "yes"}


def test_workspace_loads_and_validates(setup: dict[str, Any]) -> None:
    env = _env(setup, setup["root"] / "home")
    proc = subprocess.run([str(REPO_ROOT / ".venv/bin/dagster"), "definitions", "validate", "-w", "workspace.yaml"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Validation successful for code location pipelines.definitions" in proc.stdout + proc.stderr


def test_import_starts_no_service(setup: dict[str, Any]) -> None:
    code = (
        "import sys\n"
        "import pipelines.defs.definitions as d\n"
        "from pipelines.engine.source import EmbeddedCanalSource\n"
        "assert not EmbeddedCanalSource._registry, 'a Canal instance was created at import'\n"
        "assert 'pyspark.sql' not in sys.modules, 'Spark was imported at definitions load'\n"
        "import json; print(json.dumps(sorted(k.to_user_string() for k in "
        "d.defs.get_repository_def().asset_graph.get_all_asset_keys())))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=_env(setup, setup["root"] / "home2"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == [
        "canal/changelog", "mirror/canal_test/pdefs_customers", "mirror/canal_test/pdefs_orders",
        "mysql/canal_test/pdefs_customers", "mysql/canal_test/pdefs_orders"]


def test_lineage_jobs_sensor_schedule(setup: dict[str, Any]) -> None:
    cfg: PipelineConfig = setup["config"]
    defs = build_definitions(cfg)
    repo = defs.get_repository_def()
    graph = repo.asset_graph
    changelog = AssetKey(["canal", "changelog"])
    sources = {AssetKey(["mysql", *t.split(".")]) for t in TABLES}
    mirrors = {AssetKey(["mirror", *t.split(".")]) for t in TABLES}
    assert set(graph.get_all_asset_keys()) == {changelog} | sources | mirrors

    # lineage: mysql/... -> canal/changelog -> mirror/...
    assert graph.get(changelog).parent_keys == sources
    for m in mirrors:
        assert graph.get(m).parent_keys == {changelog}
    for s in sources:
        assert not graph.get(s).is_materializable and graph.get(s).group_name == "mysql"

    cl = graph.get(changelog)
    assert isinstance(cl.partitions_def, DailyPartitionsDefinition) and cl.partitions_def.timezone == "UTC"
    assert cl.backfill_policy is not None and cl.backfill_policy.max_partitions_per_run is None  # single run
    assert cl.group_name == "canal"
    for m in mirrors:
        node = graph.get(m)
        assert node.group_name == "mirror" and node.partitions_def is None
        assert node.freshness_policy is not None
        checks = {c.name: c for c in node.check_keys}
        assert sorted(checks) == ["lag", "reconcile"]
        # neither stops a window run: a mismatch or a lag shows on the asset, the stream goes on
        assert not graph.get_check_spec(checks["reconcile"]).blocking
        assert not graph.get_check_spec(checks["lag"]).blocking

    jobs = {j.name: j for j in repo.get_all_jobs()}
    names = ("canal_window", "canal_snapshot", "canal_reconcile", "canal_backfill", "canal_maintenance")
    assert set(names) <= set(jobs)
    for name in names:
        assert jobs[name].executor_def.name == "in_process"
    window_assets = jobs["canal_window"].asset_layer.selected_asset_keys
    assert window_assets == {changelog} | mirrors
    assert jobs["canal_snapshot"].asset_layer.selected_asset_keys == mirrors
    # the reconcile checks' runs: checks only, nothing written
    assert jobs["canal_reconcile"].asset_layer.selected_asset_keys == set()
    assert jobs["canal_reconcile"].asset_layer.asset_graph.asset_check_keys == {
        AssetCheckKey(m, "reconcile") for m in mirrors}

    # what the sensor puts into a window run validates against the job
    from dagster._core.system_config.objects import ResolvedRunConfig

    run_config = {"resources": {"canal_window": {"config": {"path": "/x/w000000000000-a0",
                                                            "catch_up": {TABLES[0]: "mysql-bin.000001:4"}}}}}
    ResolvedRunConfig.build(jobs["canal_window"], run_config)
    ResolvedRunConfig.build(jobs["canal_backfill"], {"ops": {"backfill_period": {"config": {
        "start_time": "2026-01-01T00:00:00", "end_time": "", "tables": [TABLES[0]]}}}})

    sensors = {s.name: s for s in repo.sensor_defs}
    assert set(sensors) == {"canal_example"}
    sd = sensors["canal_example"]
    assert sd.default_status == DefaultSensorStatus.RUNNING and sd.minimum_interval_seconds == 30
    assert {t.job_name for t in sd.targets} == {"canal_window", "canal_snapshot", "canal_reconcile"}
    (schedule,) = repo.schedule_defs
    assert schedule.job_name == "canal_maintenance" and schedule.cron_schedule == cfg.maintenance.cron
    assert schedule.default_status == DefaultScheduleStatus.RUNNING and schedule.execution_timezone == "UTC"


def test_table_list_falls_back_to_its_cache(setup: dict[str, Any], tmp_path: Path) -> None:
    cfg: PipelineConfig = setup["config"]
    assert resolve_tables(cfg) == TABLES  # from the source, cached
    cache = json.loads((cfg.state_dir / "tables.json").read_text())
    assert cache["tables"] == TABLES

    # the source unreachable (nothing listens on port 1): the cache answers
    dead = parse_config({"canal": {"conf_dir": str(canal_conf(tmp_path, 1))},
                         "paths": {"state": str(cfg.paths.state)}}, base_dir=tmp_path)
    assert resolve_tables(dead) == TABLES
    assert build_definitions(dead).get_repository_def().has_job("canal_window")

    # ... and without a cache, a message that says what to do
    nocache = parse_config({"canal": {"conf_dir": str(canal_conf(tmp_path, 1))},
                            "paths": {"state": str(tmp_path / "state")}}, base_dir=tmp_path)
    with pytest.raises(TableListUnavailable, match=r"127\.0\.0\.1:1 .*no cached list at .*scripts/setup\.sh"):
        resolve_tables(nocache)


def test_embedded_source_windows(setup: dict[str, Any], mariadb_settings: Any) -> None:
    """The code location's Canal source on the private MariaDB: bounded windows of outstanding batches,
    rollback redelivers, ack moves on, a restart is a new epoch, one host per destination."""
    import pymysql

    from pipelines.engine.source import EmbeddedCanalSource, SourceUnavailable, make_source

    cfg: PipelineConfig = setup["config"]
    src = make_source(cfg)
    assert src is EmbeddedCanalSource.for_config(cfg) and isinstance(src, EmbeddedCanalSource)
    assert not src.started  # lazily: nothing runs until first use
    try:
        epoch = src.epoch
        src.ack(src.get_window(10_000, 1 << 20, 1.0).batch_ids)  # whatever came before this test
        with pytest.raises(SourceUnavailable, match="already hosted by pid"):
            _ = EmbeddedCanalSource(cfg).epoch  # a second host of the same destination
        conn = pymysql.connect(**mariadb_settings.admin_kwargs())
        try:
            with conn.cursor() as cur:
                cur.executemany(f"INSERT INTO {TABLES[0]} VALUES (%s, 'x')", [(i,) for i in range(40)])
                cur.execute(f"DELETE FROM {TABLES[0]}")
        finally:
            conn.close()
        w = src.get_window(10_000, 1 << 20, 2.0)
        assert w.rows == 80 and w.batch_ids and w.bytes == sum(len(e) for e in w.entries)
        src.rollback()
        again = src.get_window(10_000, 1 << 20, 1.0)
        # the same entries again under new ids (a window that was not full may take what arrived since)
        assert again.entries[:len(w.entries)] == w.entries and again.batch_ids[0] > w.batch_ids[-1]
        src.ack(again.batch_ids)
        assert src.get_window(10_000, 1 << 20, 0.5).empty
    finally:
        src.close()
    assert src.epoch != epoch  # restarted: a new epoch
    src.close()
