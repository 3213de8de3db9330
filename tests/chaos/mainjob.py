"""The main job (``python -m pipelines.cli.main --no-demo``) as the suite runs it, and its process tree.

The tree is found by walking /proc from the main job's pid (parent links), plus the members of every session a
process of the tree had: the supervisor starts each service in a session of its own, so a run worker whose code
server was killed (reparented to init) is still found through the session it kept. Linux does not hand out a
number still in use as a session id, so a remembered session holds only processes the tree started; a session
is forgotten once it has no member left. Only processes started after the suite are ever considered.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pipelines.engine.processes import read_stat

from .environment import REPO_ROOT, Layout

STOP_SECONDS = 90.0  # pipelines.cli.main.STOP_BOUND_SECONDS (60) with room


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    session: int
    started_at: float
    cmdline: str

    def alive(self) -> bool:
        st = read_stat(self.pid)
        return st is not None and not st.exited and abs(st.started_at - self.started_at) < 0.05


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _all_procs(not_before: float) -> list[Proc]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        st = read_stat(int(entry.name))
        if st is None or st.exited or st.started_at < not_before - 2.0:
            continue
        out.append(Proc(st.pid, st.ppid, st.session, st.started_at, _cmdline(st.pid)))
    return out


class MainJob:
    """Starts, stops and walks the main job; ``born``: nothing older than the suite is ever part of its tree."""

    def __init__(self, layout: Layout, pipeline_yaml: Path, ui_port: int, spark: str = "server") -> None:
        self.layout = layout
        self.spark = spark
        self.ui_port = ui_port
        self.born = time.time()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._sessions: set[int] = set()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CANAL_PIPELINE_", "DAGSTER_HOME"))}
        env.update(CANAL_PIPELINE_CONF=str(pipeline_yaml), DAGSTER_HOME=str(layout.dagster_home))
        self.env = env

    # --- running ------------------------------------------------------------------------------------------------

    def start(self) -> None:
        self.layout.logs.mkdir(parents=True, exist_ok=True)
        with open(self.layout.main_job_log, "ab") as out:
            out.write(f"---- {time.strftime('%Y-%m-%d %H:%M:%S')} main job start {self.starts + 1}\n".encode())
            out.flush()
            # a session of its own: a Ctrl-C at the suite's terminal reaches the suite, which stops it with SIGTERM
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pipelines.cli.main", "--no-demo", "--port", str(self.ui_port),
                 "--spark", self.spark],
                cwd=REPO_ROOT, env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)
        self.starts += 1

    def exit_code(self) -> int | None:
        """None while it runs."""
        return None if self.proc is None else self.proc.poll()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    # --- the tree -----------------------------------------------------------------------------------------------

    def tree(self) -> list[Proc]:
        """Every live process of the main job's tree (the main job itself included)."""
        procs = _all_procs(self.born)
        children: dict[int, list[Proc]] = {}
        for p in procs:
            children.setdefault(p.ppid, []).append(p)
        found: dict[int, Proc] = {}
        root = self.pid
        if root is not None:
            todo = [root]
            found.update({p.pid: p for p in procs if p.pid == root})
            while todo:
                for c in children.get(todo.pop(), []):
                    if c.pid not in found:
                        found[c.pid] = c
                        todo.append(c.pid)
        own = os.getsid(0)
        self._sessions |= {p.session for p in found.values() if p.session != own}
        for p in procs:
            if p.session in self._sessions and p.pid not in found:
                found[p.pid] = p
                for c in children.get(p.pid, []):  # an orphan's own children (a worker's JVM)
                    found.setdefault(c.pid, c)
        live_sessions = {p.session for p in found.values()}
        self._sessions &= live_sessions
        return sorted(found.values(), key=lambda p: p.started_at)

    def find(self, marker: str) -> list[Proc]:
        return [p for p in self.tree() if marker in p.cmdline]

    # --- stopping -----------------------------------------------------------------------------------------------

    def kill_tree(self) -> list[Proc]:
        """SIGKILL of the main job and every process of its tree at once (the supervisor first, so it restarts
        nothing meanwhile); returns what was killed."""
        killed: dict[int, Proc] = {}
        for _ in range(50):
            live = [p for p in self.tree() if p.alive()]
            if not live:
                break
            main = self.pid
            for p in sorted(live, key=lambda p: p.pid != main):
                try:
                    os.kill(p.pid, signal.SIGKILL)
                    killed[p.pid] = p
                except ProcessLookupError:
                    pass
            if self.proc is not None:
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
            time.sleep(0.2)
        return list(killed.values())

    def stop(self) -> tuple[int | None, float, list[Proc]]:
        """SIGTERM, as a service manager stops it: (its exit code, seconds it took, processes still there after
        it exited, which are then killed)."""
        if self.proc is None:
            return None, 0.0, []
        tree = self.tree()
        t0 = time.monotonic()
        rc = self.proc.poll()
        if rc is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                rc = None
        took = time.monotonic() - t0
        left = [p for p in tree if p.alive()] + [p for p in self.tree() if p.pid not in {q.pid for q in tree}]
        if left or rc is None:
            self.kill_tree()
            for p in left:
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        return rc, took, left
