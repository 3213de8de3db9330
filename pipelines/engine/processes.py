"""Linux process facts from /proc: whether a pid still names the process that was reported under it, and which
processes belong to a session (the tree the main job started, including children their parents left behind)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
_TICKS = os.sysconf("SC_CLK_TCK")
_boot_time: float | None = None


def boot_time() -> float:
    """The machine's boot time, epoch seconds (/proc/stat btime)."""
    global _boot_time
    if _boot_time is None:
        for line in (PROC / "stat").read_text().splitlines():
            if line.startswith("btime "):
                _boot_time = float(line.split()[1])
                break
        else:  # pragma: no cover - every Linux /proc/stat has btime
            raise RuntimeError("/proc/stat has no btime line")
    return _boot_time


@dataclass(frozen=True, slots=True)
class ProcStat:
    pid: int
    state: str        # R, S, D, Z (zombie: exited, not reaped), ...
    ppid: int
    pgrp: int
    session: int
    started_at: float  # epoch seconds (to the clock tick; btime is whole seconds)

    @property
    def exited(self) -> bool:
        return self.state in ("Z", "X")


def read_stat(pid: int) -> ProcStat | None:
    """/proc/<pid>/stat, or None when there is no such process."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # the command name (field 2) may hold spaces and parentheses: the fields after it start at the last ")"
    fields = text[text.rindex(")") + 2:].split()
    return ProcStat(pid=pid, state=fields[0], ppid=int(fields[1]), pgrp=int(fields[2]), session=int(fields[3]),
                    started_at=boot_time() + int(fields[19]) / _TICKS)


def alive_since(pid: int, reported_at: float, slack: float = 2.0) -> bool:
    """True when ``pid`` runs and is the process that reported itself at ``reported_at`` (epoch seconds): a
    process started after that moment only reuses the number. ``slack`` covers btime's whole-second rounding."""
    st = read_stat(pid)
    return st is not None and not st.exited and st.started_at <= reported_at + slack


def session_members(sessions: Iterable[int], not_before: float = 0.0) -> list[ProcStat]:
    """Live processes whose session is one of ``sessions`` and that started at or after ``not_before`` (a session
    id is a pid: once its processes are all gone, an unrelated session could take the number later)."""
    wanted = set(sessions)
    out: list[ProcStat] = []
    if not wanted:
        return out
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        st = read_stat(int(entry.name))
        if st is not None and st.session in wanted and not st.exited and st.started_at >= not_before - 2.0:
            out.append(st)
    return out


def signal_all(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_sessions(sessions: Iterable[int], not_before: float, timeout: float) -> list[ProcStat]:
    """SIGTERM every process of the sessions, SIGKILL what is left after ``timeout`` seconds; returns what
    was still there for the SIGKILL."""
    sessions = list(sessions)
    signal_all((p.pid for p in session_members(sessions, not_before)), signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not session_members(sessions, not_before):
            return []
        time.sleep(0.2)
    left = session_members(sessions, not_before)
    signal_all((p.pid for p in left), signal.SIGKILL)
    return left


def _ancestors(pid: int) -> set[int]:
    out: set[int] = set()
    st = read_stat(pid)
    while st is not None and st.ppid > 0 and st.ppid not in out:
        out.add(st.ppid)
        st = read_stat(st.ppid)
    return out


def _env_value(pid: int, name: str) -> str | None:
    """``name`` in the environment ``pid`` started with; None when unset. PermissionError and FileNotFoundError
    pass through (the caller decides what an unreadable process means)."""
    prefix = name.encode() + b"="
    for item in (PROC / str(pid) / "environ").read_bytes().split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode(errors="replace")
    return None


def processes_with_env_path(name: str, path: Path, program: str = "") -> list[int]:
    """Live processes of this user, other than this one and its ancestors, whose environment sets ``name`` to
    ``path`` (relative values resolve against the process's working directory); with ``program``, only those
    whose executable's file name starts with it (e.g. "python"). A process of this user whose environment cannot
    be read counts: the answer errs towards "something may still use it"."""
    me = os.getpid()
    skip = {me, *_ancestors(me)}
    want = path.resolve()
    uid = os.getuid()
    out: list[int] = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        pid = int(entry.name)
        try:
            if entry.stat().st_uid != uid:
                continue
            st = read_stat(pid)
            if st is None or st.exited:
                continue
            if program and not os.path.basename(os.readlink(entry / "exe")).startswith(program):
                continue
            value = _env_value(pid, name)
            if value is None:
                continue
            found = Path(value) if os.path.isabs(value) else Path(os.readlink(entry / "cwd")) / value
        except (FileNotFoundError, ProcessLookupError):  # gone meanwhile
            continue
        except OSError:  # unreadable (permissions, a process in an odd state): it may still use the path
            out.append(pid)
            continue
        if found.resolve() == want:
            out.append(pid)
    return out
