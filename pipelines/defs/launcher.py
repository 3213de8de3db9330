"""The run launcher of the project's Dagster instance (dagster_home/dagster.yaml ``run_launcher``).

Dagster's ``DefaultRunLauncher`` starts each run in a process the code server spawns, but cannot say whether that
process is still there (``supports_check_run_worker_health`` is False): a run whose worker died with its code
server (a host crash, a SIGKILL of the tree) stays STARTED for ever, and the canal sensor waits on it. This
launcher adds the health check run monitoring calls every ``run_monitoring.poll_interval_seconds``: the worker's
pid is the one its "Started process for run (pid: N)" engine event reported; the run's worker is gone when that
pid has no process, or a zombie, or a process started after the report (the number was reused). A gone worker is
reported FAILED (the sensor then rolls the window back and retries it like any failed run).

Pids mean something only on the host that ran the worker: for a run launched through a code server on another
host (``grpc_info`` tag) the check answers RUNNING and only the maximum run time (``MAX_RUNTIME_TAG``) bounds it.

``terminate`` (the UI's terminate, the maximum run time) asks the code server first, as Dagster does; when the
code server that started the run is gone or does not know it, the worker is signalled directly (SIGTERM, SIGKILL
after ``TERMINATE_GRACE_SECONDS``).
"""

from __future__ import annotations

import json
import logging
import re
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dagster import MAX_RUNTIME_SECONDS_TAG, DagsterEventType, DagsterRun, DefaultRunLauncher

from ..engine.processes import alive_since, processes_with_env_path, signal_all
from .dagster_compat import GRPC_INFO_TAG, CheckRunHealthResult, WorkerStatus

log = logging.getLogger(__name__)

# The tag run monitoring reads a run's maximum run time from (seconds, as text): a run still going after that is
# terminated and marked FAILED. For window runs: tags={MAX_RUNTIME_TAG: str(seconds)} (max_runtime_tags below).
MAX_RUNTIME_TAG = MAX_RUNTIME_SECONDS_TAG
TERMINATE_GRACE_SECONDS = 10.0

_STARTED = re.compile(r"^Started process for run \(pid: (\d+)\)\.?$")
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0", ""}


def max_runtime_tags(seconds: float) -> dict[str, str]:
    """Run tags that bound a run's time: run monitoring terminates and fails it after ``seconds``."""
    return {MAX_RUNTIME_TAG: str(int(seconds))}


@dataclass(frozen=True, slots=True)
class RunWorker:
    pid: int
    reported_at: float  # epoch seconds of the "Started process" event

    @property
    def alive(self) -> bool:
        return alive_since(self.pid, self.reported_at)


def run_worker(instance: Any, run_id: str) -> RunWorker | None:
    """The run's latest worker process as its engine events reported it, or None when none reported yet (a run
    executed in the caller's own process has none)."""
    found = None
    for entry in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        m = _STARTED.match(entry.message or "")
        if m:
            found = RunWorker(int(m.group(1)), entry.timestamp)
    return found


def _launched_here(run: DagsterRun) -> bool:
    """Whether the run's code server (hence its worker) is on this host."""
    info = run.tags.get(GRPC_INFO_TAG)
    if not info:
        return True
    try:
        grpc = json.loads(info)
    except ValueError:
        return True
    if grpc.get("socket"):
        return True
    host = str(grpc.get("host") or "")
    return host in _LOCAL_HOSTS or host in (socket.gethostname(), socket.getfqdn())


class MonitoredRunLauncher(DefaultRunLauncher):
    """``DefaultRunLauncher`` whose run workers are health-checked by run monitoring (see the module doc)."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        if not _launched_here(run):
            return CheckRunHealthResult(WorkerStatus.RUNNING, "run worker on another host: not checked here")
        worker = run_worker(self._instance, run.run_id)
        if worker is None:
            return CheckRunHealthResult(WorkerStatus.RUNNING, "no run worker process reported yet")
        if worker.alive:
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"run worker pid {worker.pid} is running",
                                        run_worker_id=str(worker.pid))
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(worker.reported_at))
        return CheckRunHealthResult(
            WorkerStatus.FAILED, f"run worker pid {worker.pid} (started {started}) is gone: killed, crashed or its "
            "host restarted", run_worker_id=str(worker.pid))

    def terminate(self, run_id: str) -> bool:
        try:
            if super().terminate(run_id):
                return True
        except Exception as e:  # the code server that started the run is gone: the worker may not be
            log.warning("run %s: its code server could not terminate it (%s: %s); signalling the worker",
                        run_id, type(e).__name__, e)
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished or not _launched_here(run):
            return False
        worker = run_worker(self._instance, run_id)
        if worker is None or not worker.alive:
            return False
        # reported before the signal: the worker may report its run CANCELED the moment it gets SIGTERM
        self._instance.report_engine_event(f"run worker pid {worker.pid} signalled directly (SIGTERM): its code "
                                           "server could not terminate the run", run, cls=self.__class__)
        signal_all([worker.pid], signal.SIGTERM)
        deadline = time.monotonic() + TERMINATE_GRACE_SECONDS
        while worker.alive and time.monotonic() < deadline:
            time.sleep(0.2)
        if worker.alive:
            signal_all([worker.pid], signal.SIGKILL)
            self._instance.report_engine_event(
                f"run worker pid {worker.pid} still running {TERMINATE_GRACE_SECONDS:.0f} s after SIGTERM: SIGKILL",
                run, cls=self.__class__)
        return True


def fail_orphaned_starting_runs(instance: Any, home: Path) -> list[str]:
    """At a start of the main job (before its daemon): fail at once the runs left STARTING by processes that are
    gone, instead of run monitoring failing them after ``start_timeout_seconds`` while every window queued behind
    them waits. A STARTING run's worker has not reported its pid yet, so it is known to be gone only when no
    process of this host is left that could be it: no Python process but this one and its ancestors has
    ``DAGSTER_HOME`` = ``home`` in its environment (every process of the pipeline inherits it; a run worker is a
    Python process the code server spawns). Otherwise nothing is failed and run monitoring decides as before. Runs
    launched through a code server on another host are left alone. Returns the ids of the runs failed (the sensor
    rolls their windows back and retries them: "run worker" is an infrastructure fault)."""
    from dagster import DagsterRunStatus, RunsFilter

    runs = [r for r in instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.STARTING])) if _launched_here(r)]
    if not runs:
        return []
    holders = processes_with_env_path("DAGSTER_HOME", home, program="python")
    if holders:
        log.info("%d run(s) STARTING, and processes %s of this Dagster instance are still there: left to run "
                 "monitoring", len(runs), holders[:10])
        return []
    for run in runs:
        instance.report_run_failed(
            run, "run worker gone: the run was STARTING and no process of this Dagster instance is left (the main "
                 "job was killed with its processes); failed when the main job started again, its window is retried")
    return [r.run_id for r in runs]
