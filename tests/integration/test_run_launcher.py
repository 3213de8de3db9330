"""The project's instance settings (dagster_home/dagster.yaml: pipelines.defs.launcher.MonitoredRunLauncher, run
monitoring, the run queue) with real processes: a `dagster api grpc` code server, `dagster-daemon run` (the run
queue and run monitoring), and a run launched from the CLI that the daemon starts in a worker process of the code
server.

A run worker that dies with its code server (what a host crash looks like) is never reported by anyone: Dagster's
own launcher leaves the run STARTED for ever. Here it must be FAILED within WORKER_LOST_BOUND seconds: run
monitoring polls every 10 s and the launcher's health check sees the pid gone.

A run past its maximum run time whose code server is gone (its worker orphaned, still running): Dagster's
launcher cannot reach the code server to cancel it and only marks the run failed, the worker goes on; this one
signals the worker itself.

A run the daemon dequeues while its code server is down goes back into the queue (run_coordinator
max_user_code_failure_retries) instead of failing, and is launched once a code server serves again."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from dagster import DagsterEventType, DagsterInstance, DagsterRun, DagsterRunStatus

from pipelines.defs.dagster_compat import WorkerStatus
from pipelines.defs.launcher import MonitoredRunLauncher, max_runtime_tags, run_worker
from tests.integration.dagster_services import (
    BIN,
    REPO_ROOT,
    Service,
    grpc_serving,
    instance_home,
    kill,
    start,
    wait_for,
)
from tests.support.net import free_port

pytestmark = pytest.mark.integration

WORKER_LOST_BOUND = 30.0  # run_monitoring.poll_interval_seconds (10) + one check, with room for a loaded machine
MAX_RUNTIME = 15


@dataclass
class Setup:
    """A code server serving slow_job on ``port``, the daemon (started by ``run_daemon``), the instance."""

    root: Path
    env: dict[str, str]
    port: int
    instance: DagsterInstance
    server: Service | None = None
    daemon: Service | None = None
    gone: list[Service] = field(default_factory=list)  # killed or stopped: their sessions are swept at the end

    @property
    def workspace(self) -> Path:
        return self.root / "workspace.yaml"

    def serve(self) -> Service:
        self.server = start("code server", [
            str(BIN / "dagster"), "api", "grpc", "-m", "tests.integration.slow_job_location", "-h", "127.0.0.1",
            "-p", str(self.port), "-d", str(REPO_ROOT), "--location-name", "slow"], self.env,
            self.root / f"code-server-{len(self.gone)}.log")
        wait_for("the code server serving", lambda: grpc_serving(self.port), 120, services=(self.server,))
        return self.server

    def kill_server(self) -> None:
        """SIGKILL of the code server alone: its run workers live on, orphaned."""
        assert self.server is not None
        kill(self.server.proc.pid)
        self.server.proc.wait(10)
        self.gone.append(self.server)
        self.server = None

    def stop_daemon(self) -> None:
        assert self.daemon is not None
        self.daemon.stop()
        self.gone.append(self.daemon)
        self.daemon = None

    def run_daemon(self) -> Service:
        self.daemon = start("daemon", [str(BIN / "dagster-daemon"), "run", "-w", str(self.workspace)], self.env,
                            self.root / "daemon.log", cwd=self.root)
        return self.daemon

    def services(self) -> tuple[Service, ...]:
        return tuple(s for s in (self.server, self.daemon) if s is not None)

    def enqueue(self, tags: dict[str, str] | None = None) -> DagsterRun:
        """slow_job into the run queue (QueuedRunCoordinator: the daemon launches it)."""
        launched = subprocess.run([str(BIN / "dagster"), "job", "launch", "-w", str(self.workspace), "-j", "slow_job",
                                   "--tags", json.dumps(tags or {})],
                                  cwd=self.root, env=self.env, capture_output=True, text=True, timeout=120)
        assert launched.returncode == 0, launched.stdout + launched.stderr
        (run,) = self.instance.get_runs()
        return run

    def status(self, run_id: str, statuses: tuple[DagsterRunStatus, ...], timeout: float) -> DagsterRun:
        def reached() -> object:
            r = self.instance.get_run_by_id(run_id)
            return r if r is not None and r.status in statuses else None

        what = f"run {run_id} {'/'.join(s.value for s in statuses)}"
        return wait_for(what, reached, timeout, services=self.services())  # type: ignore[no-any-return]

    def launch(self, tags: dict[str, str] | None = None) -> DagsterRun:
        """slow_job through the run queue; returns it once STARTED in its worker."""
        return self.status(self.enqueue(tags).run_id, (DagsterRunStatus.STARTED,), 120)

    def finished(self, run_id: str, timeout: float) -> DagsterRun:
        done = (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)
        return self.status(run_id, done, timeout)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    home = instance_home(tmp_path)
    port = free_port()
    (tmp_path / "workspace.yaml").write_text(yaml.safe_dump({"load_from": [{"grpc_server": {
        "host": "127.0.0.1", "port": port, "location_name": "slow"}}]}))
    with DagsterInstance.from_config(str(home)) as instance:
        assert isinstance(instance.run_launcher, MonitoredRunLauncher)
        s = Setup(tmp_path, {**os.environ, "DAGSTER_HOME": str(home)}, port, instance)
        try:
            yield s
        finally:
            for service in (*s.services(), *s.gone):
                service.stop()


@pytest.mark.timeout(300)
def test_a_run_whose_worker_died_with_its_code_server_is_failed_within_the_bound(setup: Setup) -> None:
    setup.serve()
    setup.run_daemon()
    run = setup.launch()
    worker = run_worker(setup.instance, run.run_id)
    assert worker is not None and worker.alive, setup.instance.all_logs(run.run_id)
    health = setup.instance.run_launcher.check_run_worker_health(run)
    assert health.status == WorkerStatus.RUNNING, health

    setup.kill_server()  # then its run worker: nobody is left to report the run
    kill(worker.pid)
    t_killed = time.monotonic()
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
    setup.serve()
    setup.run_daemon()
    run = setup.launch(max_runtime_tags(MAX_RUNTIME))
    worker = run_worker(setup.instance, run.run_id)
    assert worker is not None and worker.alive
    setup.kill_server()  # the worker lives on, orphaned: only the launcher can still stop it
    done = setup.finished(run.run_id, MAX_RUNTIME + WORKER_LOST_BOUND + 30)
    # the worker, interrupted while its run was CANCELING, may report it CANCELED first: the sensor treats both alike
    assert done.status in (DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED), done.status
    wait_for("the worker stopped", lambda: not worker.alive, 15)
    messages = [e.message or "" for e in setup.instance.all_logs(run.run_id)]
    # the run's logs show who stopped the worker: the launcher, not the worker on its own
    assert any(f"run worker pid {worker.pid} signalled directly" in m for m in messages), messages


@pytest.mark.timeout(300)
def test_a_run_dequeued_while_its_code_server_is_down_waits_for_it(setup: Setup) -> None:
    """What the main job does around a code server restart: the daemon dequeues a run the moment its code server
    died, is stopped, and starts again once a new code server serves. The run is launched then, not failed."""
    setup.serve()
    run = setup.enqueue()  # queued: no daemon yet
    setup.kill_server()
    daemon = setup.run_daemon()

    def requeued() -> object:
        return any("re-submitting the run into the queue" in (e.message or "")
                   for e in setup.instance.all_logs(run.run_id, of_type=DagsterEventType.ENGINE_EVENT))

    wait_for("the dequeue failing and the run back in the queue", requeued, 90, services=(daemon,))
    # the daemon logs that engine event first and the run's ENQUEUED event after it; the run then stays QUEUED for
    # the retry delay (user_code_failure_retry_delay, 10 s) before its next dequeue. FAILED would never get there.
    setup.status(run.run_id, (DagsterRunStatus.QUEUED,), 8)
    setup.stop_daemon()
    setup.serve()
    setup.run_daemon()
    setup.status(run.run_id, (DagsterRunStatus.STARTED,), 120)
