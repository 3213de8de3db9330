"""CPU time by role over a bench interval, from /proc: what each part of the path costs per row.

``snapshot()`` reads the machine's busy time (/proc/stat) and every live process's user+system time, by role
(its command line); ``account(a, b)`` is the difference. Processes that ended in between (the per-window run
workers) are not in ``b``: their time is in the machine total, so it shows as "other" (machine - named roles).
Anything else running on the machine lands in "other" too: run benches on an otherwise idle machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")

# first match wins: (role, substrings of the NUL-separated command line, all present)
ROLES: list[tuple[str, tuple[str, ...]]] = [
    ("mariadb", ("mariadbd",)),
    ("spark-connect", ("java", "SparkConnectServer")),
    ("spark-jvm", ("java", "org.apache.spark")),
    ("code-server (parser + sensor staging)", ("dagster", "api", "grpc")),
    ("run workers", ("dagster", "execute_run")),
    ("writer", ("pipeline_workload.py",)),
    ("dagster daemon + webserver", ("dagster",)),
]


@dataclass
class Snapshot:
    machine: float                                          # busy core-seconds since boot
    procs: dict[int, tuple[str, float]] = field(default_factory=dict)  # pid -> (role, cpu seconds)


def _role(cmdline: str) -> str | None:
    for role, parts in ROLES:
        if all(p in cmdline for p in parts):
            return role
    return None


def cpu_seconds(stat: str) -> float:
    """A process's user + system CPU seconds from its /proc/<pid>/stat text."""
    rest = stat.rsplit(")", 1)[1].split()   # after the command name, which may hold spaces
    return (int(rest[11]) + int(rest[12])) / _TICK   # utime, stime


def process_cpu(pid: int) -> float:
    return cpu_seconds(Path(f"/proc/{pid}/stat").read_text())


def snapshot() -> Snapshot:
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    snap = Snapshot(machine=(user + nice + system + irq + softirq + steal) / _TICK)
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (d / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        role = _role(cmd)
        if role is None:
            continue
        snap.procs[int(d.name)] = (role, cpu_seconds(stat))
    return snap


def account(a: Snapshot, b: Snapshot) -> dict[str, float]:
    """Core-seconds by role between the two snapshots, "other", and "machine" (all of it)."""
    out: dict[str, float] = {}
    for pid, (role, cpu) in b.procs.items():
        before = a.procs.get(pid)
        used = cpu - (before[1] if before is not None and before[0] == role else 0.0)
        out[role] = out.get(role, 0.0) + max(0.0, used)
    machine = b.machine - a.machine
    out["other (ended run workers, everything else)"] = max(0.0, machine - sum(out.values()))
    out["machine"] = machine
    return out
