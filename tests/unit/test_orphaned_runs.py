"""Runs a killed main job left STARTING are failed when it starts again (pipelines.defs.launcher
.fail_orphaned_starting_runs), but only when no process that could be their worker is left: every process of the
pipeline has the instance's DAGSTER_HOME in its environment. A real Dagster instance on disk and real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from dagster import DagsterEventType, DagsterInstance, DagsterRun, DagsterRunStatus

from pipelines.defs.dagster_compat import GRPC_INFO_TAG
from pipelines.defs.launcher import fail_orphaned_starting_runs
from pipelines.engine.processes import processes_with_env_path
from pipelines.engine.sensor_failures import FailureKind, classify


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[DagsterInstance]:
    (tmp_path / "home").mkdir()
    inst = DagsterInstance.local_temp(tempdir=str(tmp_path / "home"))
    try:
        yield inst
    finally:
        inst.dispose()


def _run(instance: DagsterInstance, status: DagsterRunStatus, **tags: str) -> str:
    run_id = str(uuid.uuid4())
    instance.add_run(DagsterRun(job_name="canal_window", run_id=run_id, status=status, tags=tags))
    return run_id


def _holder(env_home: str, cwd: Path) -> subprocess.Popen[bytes]:
    """A process that could be a run worker of the instance: DAGSTER_HOME in its environment."""
    env = {**os.environ, "DAGSTER_HOME": env_home}
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env, cwd=cwd)


def _status(instance: DagsterInstance, run_id: str) -> DagsterRunStatus:
    run = instance.get_run_by_id(run_id)
    assert run is not None
    return run.status


def test_starting_runs_are_failed_only_when_no_process_of_the_instance_is_left(
        instance: DagsterInstance, tmp_path: Path) -> None:
    home = tmp_path / "home"
    starting = _run(instance, DagsterRunStatus.STARTING)
    started = _run(instance, DagsterRunStatus.STARTED)      # run monitoring checks these by their worker's pid
    done = _run(instance, DagsterRunStatus.SUCCESS)
    remote = _run(instance, DagsterRunStatus.STARTING, **{GRPC_INFO_TAG: '{"host": "10.9.8.7", "port": 4000}'})

    # a live process with the instance's home (given relative to its working directory): nothing is failed
    holder = _holder("home", tmp_path)
    try:
        assert holder.pid in _wait_listed(home, holder.pid, program="python")
        assert fail_orphaned_starting_runs(instance, home) == []
        assert _status(instance, starting) == DagsterRunStatus.STARTING
    finally:
        holder.kill()
        holder.wait()
    # a Python process of another instance, and a process of this one that is no Python (a daemonized server
    # started from a shell that exported DAGSTER_HOME) could not be a run worker of it
    other = _holder(str(tmp_path / "other-home"), tmp_path)
    server = subprocess.Popen(["sleep", "60"], env={**os.environ, "DAGSTER_HOME": str(home)})
    try:
        assert server.pid in _wait_listed(home, server.pid, program="")
        assert other.pid not in processes_with_env_path("DAGSTER_HOME", home, program="python")
        assert server.pid not in processes_with_env_path("DAGSTER_HOME", home, program="python")
        assert fail_orphaned_starting_runs(instance, home) == [starting]
    finally:
        for p in (other, server):
            p.kill()
            p.wait()
    assert _status(instance, starting) == DagsterRunStatus.FAILURE
    assert [_status(instance, r) for r in (started, done, remote)] == [
        DagsterRunStatus.STARTED, DagsterRunStatus.SUCCESS, DagsterRunStatus.STARTING]
    (failure,) = instance.all_logs(starting, of_type=DagsterEventType.RUN_FAILURE)
    assert "run worker gone" in (failure.message or "")
    # the sensor retries its window for ever: an infrastructure fault, not the window's data
    assert classify(failure.message or "") is FailureKind.INFRA
    # a second start finds nothing left to fail
    assert fail_orphaned_starting_runs(instance, home) == []


def _wait_listed(home: Path, pid: int, program: str) -> list[int]:
    """The holders, once ``pid`` runs its program (between fork and exec it is still this interpreter)."""
    deadline = time.monotonic() + 10
    found = processes_with_env_path("DAGSTER_HOME", home, program)
    while pid not in found and time.monotonic() < deadline:
        time.sleep(0.05)
        found = processes_with_env_path("DAGSTER_HOME", home, program)
    return found


def test_this_process_and_its_ancestors_do_not_count(tmp_path: Path) -> None:
    """The main job itself (and whatever started it, e.g. scripts/run.sh) carries DAGSTER_HOME too."""
    code = ("import sys; from pathlib import Path; from pipelines.engine.processes import processes_with_env_path; "
            "print(processes_with_env_path('DAGSTER_HOME', Path(sys.argv[1])))")
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "h")}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "h")], env=env, capture_output=True,
                         text=True, check=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
