"""Real Dagster processes for tests: a private instance home built from the project's dagster_home/dagster.yaml
(same run launcher, coordinator and run monitoring; storage under the test's directory), free ports, processes
started in sessions of their own and stopped with everything they started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipelines.engine.processes import session_members, stop_sessions

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def instance_home(root: Path) -> Path:
    """A DAGSTER_HOME under ``root`` with the project's dagster.yaml, its storage moved under ``root``."""
    cfg: dict[str, Any] = yaml.safe_load((REPO_ROOT / "dagster_home" / "dagster.yaml").read_text())
    runtime = root / "runtime"  # as .runtime/dagster holds the project's
    cfg["storage"] = {"sqlite": {"base_dir": str(runtime / "storage")}}
    cfg["local_artifact_storage"]["config"]["base_dir"] = str(runtime)
    cfg["compute_logs"]["config"]["base_dir"] = str(runtime / "compute_logs")
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(yaml.safe_dump(cfg))
    return home


@dataclass
class Service:
    """A process in a session of its own (its children stay in it), output in ``log``."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    started_at: float

    def tail(self, n: int = 60) -> str:
        lines = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return "\n".join(lines[-n:])

    def members(self) -> list[int]:
        return [p.pid for p in session_members([self.proc.pid], self.started_at)]

    def stop(self, timeout: float = 30.0) -> None:
        stop_sessions([self.proc.pid], self.started_at, timeout)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def start(name: str, argv: list[str], env: dict[str, str], log: Path, cwd: Path = REPO_ROOT) -> Service:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    return Service(name, proc, log, time.time())


def wait_for(what: str, cond: Callable[[], Any], timeout: float, step: float = 0.5,
             services: tuple[Service, ...] = ()) -> Any:
    """cond()'s first truthy value; fails with the services' logs when ``timeout`` passes or one of them exits."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        for s in services:
            if s.proc.poll() is not None:
                pytest.fail(f"{s.name} exited with {s.proc.returncode} while waiting for {what}:\n{s.tail()}")
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {s.name} ({s.log}):\n{s.tail()}" for s in services)
            pytest.fail(f"{what}: not within {timeout:.0f} s\n{logs}")
        time.sleep(step)


def grpc_serving(port: int) -> bool:
    from dagster._core.errors import DagsterUserCodeUnreachableError
    from dagster._grpc.client import DagsterGrpcClient

    try:
        DagsterGrpcClient(port=port, host="127.0.0.1").ping("")
        return True
    except DagsterUserCodeUnreachableError:
        return False


def kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
