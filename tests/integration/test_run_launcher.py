"""pipelines.launcher.MonitoredRunLauncher in the project's instance settings (dagster_home/dagster.yaml), with real
processes: a `dagster api grpc` code server, `dagster-daemon run` (the run queue and run monitoring), and a run
launched from the CLI that the daemon starts in a worker process of the code server.

A run worker that dies with its code server (what a host crash looks like) is never reported by anyone: Dagster's
own launcher leaves the run STARTED for ever. Here it must be FAILED within WORKER_LOST_BOUND seconds: run
monitoring polls every 10 s and the launcher's health check sees the pid gone.

A run past its maximum run time whose code server is gone (its worker orphaned, still running): Dagster's
launcher cannot reach the code server to cancel it and only marks the run failed, the worker goes on; this one
signals the worker itself."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from dagster import DagsterEventType, DagsterInstance, DagsterRun, DagsterRunStatus
from dagster._core.launcher import WorkerStatus

from pipelines.launcher import MonitoredRunLauncher, max_runtime_tags, run_worker
from tests.integration.dagster_services import (
    BIN,
    REPO_ROOT,
    Service,
    free_port,
    grpc_serving,
    instance_home,
    kill,
    start,
    wait_for,
)

pytestmark = pytest.mark.integration

WORKER_LOST_BOUND = 30.0  # run_monitoring.poll_interval_seconds (10) + one check, with room for a loaded machine
MAX_RUNTIME = 15


@dataclass
class Setup:
    home: Path
    env: dict[str, str]
    workspace: Path
    server: Service
    daemon: Service
    instance: DagsterInstance

    def launch(self, tags: dict[str, str] | None = None) -> DagsterRun:
        """slow_job through the run queue; returns it once STARTED in its worker."""
        launched = subprocess.run([str(BIN / "dagster"), "job", "launch", "-w", str(self.workspace), "-j", "slow_job",
                                   "--tags", json.dumps(tags or {})],
                                  cwd=self.workspace.parent, env=self.env, capture_output=True, text=True, timeout=120)
        assert launched.returncode == 0, launched.stdout + launched.stderr
        (run,) = self.instance.get_runs()

        def started() -> object:
            r = self.instance.get_run_by_id(run.run_id)
            return r if r is not None and r.status == DagsterRunStatus.STARTED else None

        return wait_for("the run STARTED", started, 120, services=(self.server, self.daemon))  # type: ignore[no-any-return]

    def finished(self, run_id: str, timeout: float) -> DagsterRun:
        def done() -> object:
            r = self.instance.get_run_by_id(run_id)
            return r if r is not None and r.is_finished else None

        return wait_for("the run finished", done, timeout, services=(self.daemon,))  # type: ignore[no-any-return]


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    """A code server serving slow_job, the daemon, the instance (the project's dagster.yaml settings)."""
    home = instance_home(tmp_path)
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    port = free_port()
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(yaml.safe_dump({"load_from": [{"grpc_server": {
        "host": "127.0.0.1", "port": port, "location_name": "slow"}}]}))
    server = start("code server", [str(BIN / "dagster"), "api", "grpc", "-m", "tests.integration.slow_job_location",
                                   "-h", "127.0.0.1", "-p", str(port), "-d", str(REPO_ROOT),
                                   "--location-name", "slow"], env, tmp_path / "code-server.log")
    daemon = None
    try:
        wait_for("the code server serving", lambda: grpc_serving(port), 120, services=(server,))
        daemon = start("daemon", [str(BIN / "dagster-daemon"), "run", "-w", str(workspace)], env,
                       tmp_path / "daemon.log", cwd=tmp_path)
        with DagsterInstance.from_config(str(home)) as instance:
            assert isinstance(instance.run_launcher, MonitoredRunLauncher)
            yield Setup(home, env, workspace, server, daemon, instance)
    finally:
        if daemon is not None:
            daemon.stop()
        server.stop()


@pytest.mark.timeout(300)
def test_a_run_whose_worker_died_with_its_code_server_is_failed_within_the_bound(setup: Setup) -> None:
    run = setup.launch()
    worker = run_worker(setup.instance, run.run_id)
    assert worker is not None and worker.alive, setup.instance.all_logs(run.run_id)
    health = setup.instance.run_launcher.check_run_worker_health(run)
    assert health.status == WorkerStatus.RUNNING, health

    kill(setup.server.proc.pid)  # the code server, then its run worker: nobody is left to report the run
    kill(worker.pid)
    t_killed = time.monotonic()
    setup.server.proc.wait(10)
    wait_for("the worker gone", lambda: not worker.alive, 10)
    done = setup.finished(run.run_id, WORKER_LOST_BOUND + 30)
    took = time.monotonic() - t_killed
    print(f"run worker SIGKILLed -> run {done.status.value} after {took:.1f} s")
    assert done.status == DagsterRunStatus.FAILURE
    assert took <= WORKER_LOST_BOUND, took
    failure = setup.instance.all_logs(run.run_id, of_type=DagsterEventType.RUN_FAILURE)
    assert failure and f"run worker pid {worker.pid}" in (failure[-1].message or ""), failure


@pytest.mark.timeout(300)
def test_the_maximum_run_time_stops_a_worker_whose_code_server_is_gone(setup: Setup) -> None:
    run = setup.launch(max_runtime_tags(MAX_RUNTIME))
    worker = run_worker(setup.instance, run.run_id)
    assert worker is not None and worker.alive
    kill(setup.server.proc.pid)  # the worker lives on, orphaned: only the launcher can still stop it
    setup.server.proc.wait(10)
    done = setup.finished(run.run_id, MAX_RUNTIME + WORKER_LOST_BOUND + 30)
    # the worker, interrupted while its run was CANCELING, may report it CANCELED first: the sensor treats both alike
    assert done.status in (DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED), done.status
    wait_for("the worker stopped", lambda: not worker.alive, 15)
    messages = [e.message or "" for e in setup.instance.all_logs(run.run_id)]
    assert any(f"run worker pid {worker.pid} signalled directly" in m for m in messages), messages
