"""pipelines.cli.supervisor with small real processes: restarts with backoff, a dependent service stopped while its
dependency is down and started again once it is ready, a clean finish, and a shutdown that leaves nothing
behind (orphans and processes ignoring SIGTERM included)."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pipelines.cli.supervisor import Service, Supervisor
from pipelines.engine.processes import read_stat
from tests.support.waiting import wait_until

SLEEPER = [sys.executable, "-c", "import time; time.sleep(300)"]


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, msg: str) -> None:
        self.lines.append(msg)

    def has(self, fragment: str) -> bool:
        return any(fragment in line for line in self.lines)


# A bound, not a duration: on a machine saturated by the rest of the suite, a child's start and stop have taken
# over 15 s; the wait returns as soon as the condition holds.
def _wait(cond: Callable[[], object], timeout: float = 60.0) -> None:
    wait_until(cond, timeout, step=0.05)


def _gone(pid: int) -> bool:
    st = read_stat(pid)
    return st is None or st.exited


@pytest.fixture
def said() -> Lines:
    return Lines()


@pytest.fixture
def sup(said: Lines, tmp_path: Path) -> Iterator[Supervisor]:
    s = Supervisor(said, tmp_path)
    yield s
    s.shutdown([])


def test_a_killed_process_is_restarted_with_backoff(sup: Supervisor, said: Lines, tmp_path: Path) -> None:
    svc = sup.add(Service("sleeper", SLEEPER, tmp_path / "sleeper.log"))
    sup.start()
    _wait(lambda: svc.pid is not None)
    first = svc.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    t0 = time.monotonic()
    _wait(lambda: svc.pid not in (None, first))
    assert 0.9 <= time.monotonic() - t0 < 5  # the first restart waits 1 s
    assert said.has("sleeper was killed by SIGKILL after 0s; restarting in 1 s (restart 1")
    assert said.has(f"sleeper started again (pid {svc.pid})")
    second = svc.pid
    assert second is not None
    os.kill(second, signal.SIGKILL)  # again before it ran STABLE_SECONDS: the wait doubles
    _wait(lambda: svc.pid not in (None, second))
    assert said.has("restarting in 2 s (restart 2")


def test_a_dependent_stops_while_its_dependency_is_down(sup: Supervisor, said: Lines, tmp_path: Path) -> None:
    flag = tmp_path / "ready"
    base = sup.add(Service("base", SLEEPER, tmp_path / "base.log", ready=flag.exists))
    dep = sup.add(Service("dependent", SLEEPER, tmp_path / "dep.log", after=("base",), stops_with=True))
    sup.start()
    _wait(lambda: base.pid is not None)
    time.sleep(1)
    assert dep.pid is None  # base not ready yet
    flag.touch()
    _wait(lambda: dep.pid is not None)
    old_dep = dep.pid
    assert old_dep is not None
    flag.unlink()
    os.kill(base.pid, signal.SIGKILL)  # type: ignore[arg-type]
    _wait(lambda: old_dep is not None and _gone(old_dep))
    assert said.has("dependent: stopping while base is down")
    _wait(lambda: base.pid is not None)
    time.sleep(1)
    assert dep.pid is None  # the new base is not ready
    flag.touch()
    _wait(lambda: dep.pid not in (None, old_dep))
    assert said.has("dependent started again")


def test_a_dependent_of_two_runs_only_while_both_are_ready(sup: Supervisor, said: Lines, tmp_path: Path) -> None:
    flags = {n: tmp_path / f"{n}-ready" for n in ("a", "b")}
    a = sup.add(Service("a", SLEEPER, tmp_path / "a.log", ready=flags["a"].exists))
    sup.add(Service("b", SLEEPER, tmp_path / "b.log", ready=flags["b"].exists))
    dep = sup.add(Service("dependent", SLEEPER, tmp_path / "dep.log", after=("a", "b"), stops_with=True))
    sup.start()
    flags["a"].touch()
    time.sleep(1.5)
    assert dep.pid is None  # b not ready yet
    flags["b"].touch()
    _wait(lambda: dep.pid is not None)
    first = dep.pid
    assert first is not None
    flags["a"].unlink()
    os.kill(a.pid, signal.SIGKILL)  # type: ignore[arg-type]
    _wait(lambda: _gone(first))
    assert said.has("dependent: stopping while a is down")
    flags["a"].touch()
    _wait(lambda: dep.pid not in (None, first))
    assert said.has("dependent started again")


def test_a_clean_exit_of_a_finite_service_is_its_end(sup: Supervisor, said: Lines, tmp_path: Path) -> None:
    svc = sup.add(Service("once", [sys.executable, "-c", "print('hello'); print('bye')"], tmp_path / "once.log",
                          echo=True, done_on_success=True))
    sup.start()
    _wait(lambda: svc.done)
    _wait(lambda: said.has("once: bye"))
    assert said.has("once: hello") and said.has("once finished")
    assert "hello\nbye\n" in (tmp_path / "once.log").read_text()
    time.sleep(1.5)
    assert svc.pid is None and svc.restarts == 0


def test_shutdown_stops_orphans_and_processes_that_ignore_sigterm(sup: Supervisor, said: Lines, tmp_path: Path) -> None:
    # the service starts a child that ignores SIGTERM, then exits: the child is an orphan in its session
    code = ("import signal, subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
            "signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(300)'], "
            "stdout=subprocess.PIPE); p.stdout.readline(); print(p.pid, flush=True); time.sleep(300)")
    svc = sup.add(Service("parent", [sys.executable, "-c", code], tmp_path / "parent.log", stop_seconds=2.0))
    sup.start()
    log = tmp_path / "parent.log"

    def last_line() -> str:
        lines = log.read_text().strip().splitlines() if log.exists() else []
        return lines[-1] if lines else ""

    _wait(lambda: last_line().isdigit())
    orphan = int(last_line())
    parent = svc.pid
    assert parent is not None
    t0 = time.monotonic()
    assert sup.shutdown([["parent"]]) == []
    assert time.monotonic() - t0 < 10
    assert _gone(parent) and _gone(orphan)
    assert said.has(f"still running after SIGTERM, sending SIGKILL: {orphan}")
