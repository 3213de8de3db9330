"""pipelines.launcher.MonitoredRunLauncher in the project's instance settings (dagster_home/dagster.yaml), with real
processes: a `dagster api grpc` code server, `dagster-daemon run` (the run queue and run monitoring), and a run
launched from the CLI that the daemon starts in a worker process of the code server.

A run worker that dies with its code server (what a host crash looks like) is never reported by anyone: Dagster's
own launcher leaves the run STARTED for ever. Here it must be FAILED within WORKER_LOST_BOUND seconds: run
monitoring polls every 10 s and the launcher's health check sees the pid gone."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus
from dagster._core.launcher import WorkerStatus

from pipelines.launcher import MonitoredRunLauncher, run_worker
from tests.integration.dagster_services import (
    BIN,
    REPO_ROOT,
    free_port,
    grpc_serving,
    instance_home,
    kill,
    start,
    wait_for,
)

pytestmark = pytest.mark.integration

WORKER_LOST_BOUND = 30.0  # run_monitoring.poll_interval_seconds (10) + one check, with room for a loaded machine


@pytest.mark.timeout(300)
def test_a_run_whose_worker_died_with_its_code_server_is_failed_within_the_bound(tmp_path: Path) -> None:
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
            launched = subprocess.run(
                [str(BIN / "dagster"), "job", "launch", "-w", str(workspace), "-j", "slow_job"],
                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
            assert launched.returncode == 0, launched.stdout + launched.stderr
            (run,) = instance.get_runs()

            def started() -> object:
                r = instance.get_run_by_id(run.run_id)
                return r if r is not None and r.status == DagsterRunStatus.STARTED else None

            run = wait_for("the run STARTED", started, 120, services=(server, daemon))
            worker = run_worker(instance, run.run_id)
            assert worker is not None and worker.alive, instance.all_logs(run.run_id)
            health = instance.run_launcher.check_run_worker_health(run)
            assert health.status == WorkerStatus.RUNNING, health

            kill(server.proc.pid)  # the code server, then its run worker: nobody is left to report the run
            kill(worker.pid)
            t_killed = time.monotonic()
            server.proc.wait(10)
            wait_for("the worker gone", lambda: not worker.alive, 10)

            def failed() -> object:
                r = instance.get_run_by_id(run.run_id)
                return r if r is not None and r.is_finished else None

            done = wait_for("the run FAILED", failed, WORKER_LOST_BOUND + 30, services=(daemon,))
            took = time.monotonic() - t_killed
            print(f"run worker SIGKILLed -> run {done.status.value} after {took:.1f} s")
            assert done.status == DagsterRunStatus.FAILURE
            assert took <= WORKER_LOST_BOUND, took
            failure = instance.all_logs(run.run_id, of_type=DagsterEventType.RUN_FAILURE)
            assert failure and f"run worker pid {worker.pid}" in (failure[-1].message or ""), failure
    finally:
        if daemon is not None:
            daemon.stop()
        server.stop()
