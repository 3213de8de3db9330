"""pipelines.engine.processes on this machine's /proc: a pid names the reported process only while it runs, is not a
zombie and started before the report; a session's members include the children a parent left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable

from pipelines.engine.processes import alive_since, read_stat, session_members, stop_sessions
from tests.support.waiting import wait_until


def _wait(cond: Callable[[], object], timeout: float = 10.0) -> None:
    wait_until(cond, timeout)


def test_a_pid_is_the_reported_process_only_if_it_started_before_the_report() -> None:
    me = read_stat(os.getpid())
    assert me is not None and not me.exited and me.started_at <= time.time() + 2
    assert alive_since(os.getpid(), time.time())
    # a report from before this process started names another process that had the same pid
    assert not alive_since(os.getpid(), me.started_at - 60)


def test_an_exited_child_not_yet_reaped_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    reported = time.time()
    _wait(lambda: (st := read_stat(child.pid)) is None or st.exited)
    assert not alive_since(child.pid, reported)
    child.wait()
    assert read_stat(child.pid) is None and not alive_since(child.pid, reported)


def test_a_session_holds_the_orphans_of_its_processes_and_stops_with_them() -> None:
    # the session leader starts a grandchild and exits: the grandchild is orphaned, still in the session
    code = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
            "print(p.pid, flush=True)")
    started = time.time()
    leader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    orphan = int(leader.stdout.readline())  # type: ignore[union-attr]
    leader.wait()
    try:
        _wait(lambda: (st := read_stat(orphan)) is not None and st.ppid != leader.pid)
        assert [p.pid for p in session_members([leader.pid], started)] == [orphan]
        assert session_members([leader.pid], time.time() + 60) == []  # started before: not counted
        assert stop_sessions([leader.pid], started, timeout=10) == []
        _wait(lambda: read_stat(orphan) is None or read_stat(orphan).exited)  # type: ignore[union-attr]
    finally:
        try:
            os.kill(orphan, 9)
        except ProcessLookupError:
            pass

