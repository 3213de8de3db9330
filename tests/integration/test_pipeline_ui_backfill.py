"""The UI's partition backfill of ``canal/changelog`` (daily partitions, BackfillPolicy.single_run), end to end.

What the UI does (dagster-webserver's LaunchAssetChoosePartitionsDialog): with more than one partition chosen it
sends the ``launchPartitionBackfill`` mutation with the asset selection and the partition names; the backfill
daemon then submits, for a single-run backfill policy, one run of the implicit asset job with the tags
``dagster/asset_partition_range_start`` / ``_end``. With one partition chosen it launches one run of that job
tagged ``dagster/partition`` ("Launch 1 run"). Here the same GraphQL mutations go through dagster-graphql
against an in-process workspace (tests/integration/pipeline_location.py), the daemon's own iteration
(``execute_backfill_iteration``) submits the backfill's run, and the instance's run launcher executes it in this
process; the job's step runs in a child process of its own (the implicit asset job's multiprocess executor),
with its own Spark, as in a deployment.

1. A range backfill of yesterday..today after changelog rows of today were lost, corrupted and duplicated, while
   the live pipeline is behind (changes in the binlog not applied yet): today's changelog is again exactly the
   changes the live pipeline applied (each once, equal to the workload's changes as the server printed them);
   the live Canal cursor, the sensor cursor and the outstanding batches did not move; once the live pipeline
   catches up, the changelog holds every change once and the mirrors equal the source tables.
2. The same damage repaired by a one-day run launched as the UI launches it.

A day's backfill replays that whole UTC day of the binlog, so the tests use a MariaDB of their own
(scripts/mariadb.sh, a fresh datadir): the shared private primary holds many GB written today by other tests.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterRunStatus, RunsFilter
from dagster._core.execution.backfill import BulkActionStatus
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._daemon.backfill import execute_backfill_iteration
from dagster_graphql.client.query import LAUNCH_PARTITION_BACKFILL_MUTATION, LAUNCH_PIPELINE_EXECUTION_MUTATION
from dagster_graphql.test.utils import execute_dagster_graphql

from pipelines.engine.config import parse_config
from pipelines.engine.lake import Lake
from pipelines.engine.reconcile import table_columns
from pipelines.engine.source import make_source
from tests.integration import pipeline_location
from tests.integration.pipeline_driver import (
    Driver,
    RecordedChanges,
    changelog_changes,
    config_data,
    drive_until_idle,
    mirror_rows,
    source_rows,
)

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]

SCHEMA = "canal_uibf_it"
TABLES = ["accounts", "transfers"]
INSTANCE = "uibackfill-it"   # scripts/mariadb.sh instance of this test
PORT, SERVER_ID = 3412, 12
LOCATION = "canal_test_location"
ASSET_JOB = "__ASSET_JOB"
SYNC_RUNS = {  # runs execute in this process when submitted (the daemon's launcher would start a process)
    "run_coordinator": {"module": "dagster._core.run_coordinator", "class": "DefaultRunCoordinator"},
    "run_launcher": {"module": "dagster._core.launcher.sync_in_memory_run_launcher",
                     "class": "SyncInMemoryRunLauncher"},
}


@pytest.fixture
def own_mariadb(mariadb_settings: Any) -> Iterator[Any]:
    """A fresh private MariaDB (its binlog holds only this test's day), stopped at the end."""
    script = str(REPO_ROOT / "scripts" / "mariadb.sh")
    subprocess.run([script, "stop", INSTANCE], capture_output=True, timeout=120)
    shutil.rmtree(REPO_ROOT / ".runtime" / "mariadb" / INSTANCE, ignore_errors=True)
    port = PORT
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", port)) == 0:  # taken by something else
            with socket.socket() as free:
                free.bind(("127.0.0.1", 0))
                port = free.getsockname()[1]
    env = {**os.environ, "MARIADB_PORT": str(port), "MARIADB_SERVER_ID": str(SERVER_ID)}
    out = subprocess.run([script, "start", INSTANCE], capture_output=True, text=True, env=env, timeout=180)
    if out.returncode != 0:
        pytest.fail(f"scripts/mariadb.sh start {INSTANCE} failed: {out.stderr[-2000:]}", pytrace=False)
    got = subprocess.run([script, "port", INSTANCE], capture_output=True, text=True, check=True)
    try:
        # the accounts (canal, canal_admin) are the primary's: only the port differs
        yield dataclasses.replace(mariadb_settings, port=int(got.stdout.strip()))
    finally:
        subprocess.run([script, "stop", INSTANCE], capture_output=True, timeout=120)


@pytest.fixture
def db(own_mariadb: Any) -> Iterator[RecordedChanges]:
    w = RecordedChanges(own_mariadb, SCHEMA)
    w.execute(f"CREATE DATABASE {SCHEMA}")
    w.execute(f"CREATE TABLE {SCHEMA}.accounts (id INT PRIMARY KEY, name VARCHAR(32) NOT NULL, "
              "balance DECIMAL(12,2) NOT NULL)")
    w.execute(f"CREATE TABLE {SCHEMA}.transfers (id INT PRIMARY KEY, account INT NOT NULL, "
              "amount DECIMAL(12,2) NOT NULL, memo VARCHAR(64) NULL)")
    yield w
    w.close()


@pytest.fixture
def workspace(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """load(driver): the driver's pipeline config as an in-process code location (a workspace as the webserver
    and the daemon have it; runs and their step processes load the same definitions); closed at the end."""
    contexts: list[WorkspaceProcessContext] = []

    def load(driver: Driver, data: dict[str, Any]) -> WorkspaceProcessContext:
        path = driver.home.parent / "pipeline.json"
        path.write_text(json.dumps(data))
        monkeypatch.setenv(pipeline_location.ENV, str(path))
        # an attribute of this test's own (pipeline_location.attribute): Dagster caches the last job it
        # reconstructed by module and attribute in this process, where the runs here are orchestrated
        origin = InProcessCodeLocationOrigin(
            LoadableTargetOrigin(module_name=pipeline_location.__name__, attribute=pipeline_location.attribute(path),
                                 working_directory=str(REPO_ROOT)), location_name=LOCATION)
        ctx = WorkspaceProcessContext(driver.instance, InProcessWorkspaceLoadTarget(origin))
        contexts.append(ctx.__enter__())
        return ctx

    yield load
    for ctx in contexts:
        ctx.__exit__(None, None, None)


def _transactions(w: RecordedChanges, first: int, n: int) -> None:
    for i in range(first, first + n):
        w.insert("accounts", id=i, name=f"acct{i}", balance=f"{i}.10")
        w.insert("transfers", id=i, account=i, amount=f"{i * 3}.33", memo=None if i % 2 else f"memo {i}")
        if i > first:
            w.update("accounts", i - 1, balance=f"{i * 7}.77")
            w.update("transfers", i - 1, memo=f"settled {i}")
            if i % 4 == 0:
                w.delete("transfers", i - 1)
        if i % 5 == 0:
            w.update("accounts", i, name=f"renamed{i}")
        if i % 6 == 0 and i - 2 >= first:
            w.delete("accounts", i - 2)


def _mirrors_equal_sources(spark: Any, lake: Lake, settings: Any) -> None:
    for t in TABLES:
        cols = table_columns(settings.repl_kwargs(), SCHEMA, t)
        assert mirror_rows(spark, lake.mirror_path(SCHEMA, t), cols) == source_rows(settings, SCHEMA, t, cols), t


def _damage(spark: Any, lake: Lake, day: str) -> None:
    """Lose some changelog rows of the day, corrupt others, store others twice."""
    path = lake.changelog_path()
    where = f"schema_name = '{SCHEMA}' AND event_date = DATE'{day}'"
    spark.sql(f"DELETE FROM delta.`{path}` WHERE {where} AND table_name = 'transfers' AND op = 'UPDATE'")
    spark.sql(f"UPDATE delta.`{path}` SET after = map('name', 'DAMAGED') WHERE {where} AND table_name = 'accounts' "
              "AND op = 'INSERT' AND row = 0")
    spark.sql(f"INSERT INTO delta.`{path}` SELECT * FROM delta.`{path}` WHERE {where} AND op = 'DELETE'")


def _live_state(driver: Driver) -> tuple[bytes, str | None, list[int] | None]:
    """The live Canal cursor (meta.dat, written at every ack), the sensor's cursor, the outstanding batches."""
    meta = Path(driver.config.instance_config().data_dir) / "meta.dat"
    return meta.read_bytes(), driver.cursor, make_source(driver.config).outstanding()


def _gql_ok(result: Any, key: str) -> dict[str, Any]:
    data = result.data[key]
    assert data["__typename"] in ("LaunchBackfillSuccess", "LaunchRunSuccess"), data
    return data


def _backfill_from_ui(ctx: WorkspaceProcessContext, days: list[str]) -> Any:
    """What the UI sends for several partitions of canal/changelog, then the backfill daemon until it is done;
    returns the backfill's runs."""
    instance = ctx.instance
    result = execute_dagster_graphql(ctx.create_request_context(), LAUNCH_PARTITION_BACKFILL_MUTATION, {
        "backfillParams": {
            "assetSelection": [{"path": ["canal", "changelog"]}], "partitionNames": days, "fromFailure": False,
            "tags": [{"key": "dagster/from_ui", "value": "true"}]}})
    backfill_id = _gql_ok(result, "launchPartitionBackfill")["backfillId"]
    log = logging.getLogger("backfill-daemon")
    deadline = time.monotonic() + 180
    while instance.get_backfill(backfill_id).status not in (BulkActionStatus.COMPLETED_SUCCESS,
                                                            BulkActionStatus.COMPLETED_FAILED,
                                                            BulkActionStatus.FAILED):
        assert time.monotonic() < deadline, f"backfill {backfill_id} not done: {instance.get_backfill(backfill_id)}"
        list(execute_backfill_iteration(ctx, log))
    status = instance.get_backfill(backfill_id).status
    runs = instance.get_runs(filters=RunsFilter(tags={"dagster/backfill": backfill_id}))
    assert status == BulkActionStatus.COMPLETED_SUCCESS, (status, [(r.run_id, r.status) for r in runs])
    return runs


def _one_partition_from_ui(ctx: WorkspaceProcessContext, day: str) -> Any:
    """What the UI sends for one partition ("Launch 1 run"): a run of the asset job tagged with the partition."""
    result = execute_dagster_graphql(ctx.create_request_context(), LAUNCH_PIPELINE_EXECUTION_MUTATION, {
        "executionParams": {
            "selector": {"repositoryLocationName": LOCATION, "repositoryName": "__repository__",
                         "pipelineName": ASSET_JOB, "assetSelection": [{"path": ["canal", "changelog"]}]},
            "executionMetadata": {"tags": [{"key": "dagster/partition", "value": day},
                                           {"key": "dagster/from_ui", "value": "true"}]},
            "runConfigData": {}, "mode": "default"}})
    run_id = _gql_ok(result, "launchPipelineExecution")["run"]["runId"]
    return ctx.instance.get_run_by_id(run_id)


def _running_pipeline(settings: Any, w: RecordedChanges, tmp_path: Path, workspace: Any, destination: str,
                      spark: Any) -> tuple[Driver, Lake, WorkspaceProcessContext]:
    """The pipeline started on the empty tables, a workload applied; the live pipeline idle."""
    data = config_data(tmp_path, settings, destination, f"{SCHEMA}\\\\..*")
    # the changelog's partitions from yesterday (a configured first day; by default they begin on the
    # destination's first day, today here), so that a range of two days can be chosen
    data["changelog"] = {"start_date": _days()[0]}
    driver = Driver(parse_config(data, base_dir=tmp_path), tmp_path / "home", instance_overrides=SYNC_RUNS)
    lake = Lake(driver.config.lake_root)
    driver.tick()  # the live instance starts at the binlog end; both (empty) tables are snapshotted
    _transactions(w, 1, 12)
    drive_until_idle(driver, settle=1)
    _mirrors_equal_sources(spark, lake, settings)
    assert changelog_changes(spark, lake.changelog_path(), SCHEMA) == w.log
    return driver, lake, workspace(driver, data)


def _days() -> tuple[str, str]:
    today = dt.datetime.now(dt.UTC).date()
    return (today - dt.timedelta(days=1)).isoformat(), today.isoformat()


@pytest.mark.timeout(600)
def test_ui_range_backfill_restores_the_changelog_and_leaves_the_live_pipeline(
        own_mariadb: Any, db: RecordedChanges, workspace: Any, tmp_path: Path, spark: Any) -> None:
    settings, w = own_mariadb, db
    driver, lake, ctx = _running_pipeline(settings, w, tmp_path, workspace, "uibf", spark)
    applied = list(w.log)
    # the live pipeline is behind, as it usually is: these changes are in the binlog, not applied yet
    _transactions(w, 100, 5)
    yesterday, day = _days()
    _damage(spark, lake, day)
    assert changelog_changes(spark, lake.changelog_path(), SCHEMA) != applied
    live = _live_state(driver)
    assert live[2] == []  # nothing outstanding: every window taken was applied and acked

    runs = _backfill_from_ui(ctx, [yesterday, day])
    assert len(runs) == 1 and runs[0].status == DagsterRunStatus.SUCCESS, runs
    assert runs[0].job_name == ASSET_JOB
    assert runs[0].tags["dagster/asset_partition_range_start"] == yesterday
    assert runs[0].tags["dagster/asset_partition_range_end"] == day
    # the day's rows are what the binlog holds up to the applied end, each once; the changes the live pipeline
    # has not applied are left to it
    assert changelog_changes(spark, lake.changelog_path(), SCHEMA, f"event_date = DATE'{day}'") == applied
    assert changelog_changes(spark, lake.changelog_path(), SCHEMA) == applied
    assert _live_state(driver) == live  # the live Canal cursor and the sensor's cursor did not move

    drive_until_idle(driver, settle=1)  # the live pipeline goes on: each change once
    assert changelog_changes(spark, lake.changelog_path(), SCHEMA) == w.log
    _mirrors_equal_sources(spark, lake, settings)


@pytest.mark.timeout(600)
def test_ui_one_day_run_restores_the_changelog(own_mariadb: Any, db: RecordedChanges, workspace: Any,
                                               tmp_path: Path, spark: Any) -> None:
    settings, w = own_mariadb, db
    driver, lake, ctx = _running_pipeline(settings, w, tmp_path, workspace, "uibf1", spark)
    _, day = _days()
    _damage(spark, lake, day)
    assert changelog_changes(spark, lake.changelog_path(), SCHEMA) != w.log
    live = _live_state(driver)

    run = _one_partition_from_ui(ctx, day)
    assert run.status == DagsterRunStatus.SUCCESS, run
    assert run.job_name == ASSET_JOB and run.tags["dagster/partition"] == day
    assert changelog_changes(spark, lake.changelog_path(), SCHEMA) == w.log
    assert _live_state(driver) == live
    _mirrors_equal_sources(spark, lake, settings)
