"""The faults: what each kind hits, a seeded plan of kinds and times, and their injection with a record each.

Every SIGKILL hits only a process of the main job's tree (``MainJob.tree``: descendants of the main job the suite
started), found by its command line; a fault waits (bounded) for its target to exist and is recorded as skipped
when it never does. ``main_job_tree`` kills the whole tree while a run is in flight and the suite then starts the
main job again, as a service manager would; ``source_restart`` restarts the suite's own MariaDB instance
(``scripts/mariadb.sh restart``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path

from .environment import Source
from .mainjob import MainJob, Proc

TARGET_WAIT_SECONDS = 120.0  # how long a fault waits for its target to exist
RESTART_DELAY_SECONDS = 1.0  # a service manager's pause before it starts the killed main job again


class Kind(StrEnum):
    CODE_SERVER = "code_server"
    RUN_WORKER = "run_worker"
    SPARK_JVM = "spark_jvm"
    DAEMON = "daemon"
    WEBSERVER = "webserver"
    MAIN_JOB_TREE = "main_job_tree"
    SOURCE_RESTART = "source_restart"


KINDS = tuple(Kind)


def _is_run_worker(p: Proc) -> bool:
    # the code server starts each run in a multiprocessing "spawn" child (dagster api grpc's StartRun)
    return "multiprocessing.spawn import spawn_main" in p.cmdline


def _is_spark_jvm(p: Proc) -> bool:
    exe = p.cmdline.split(" ", 1)[0]
    return exe.endswith("/java") and "org.apache.spark.deploy.SparkSubmit" in p.cmdline


_MATCHERS: dict[Kind, Callable[[Proc], bool]] = {
    Kind.CODE_SERVER: lambda p: "dagster api grpc" in p.cmdline,
    Kind.RUN_WORKER: _is_run_worker,
    Kind.SPARK_JVM: _is_spark_jvm,
    Kind.DAEMON: lambda p: "dagster-daemon run" in p.cmdline,
    Kind.WEBSERVER: lambda p: "dagster-webserver" in p.cmdline,
}


@dataclass(frozen=True)
class Planned:
    at: float   # seconds after the workload started
    kind: Kind


def plan(count: int, seconds: float, rnd: random.Random, kinds: tuple[Kind, ...] = KINDS,
         warmup: float = 20.0) -> list[Planned]:
    """``count`` faults over ``seconds``: every kind once when count allows (then at random), in a random order,
    one in each of ``count`` equal slots after ``warmup``, the last at the end (the workload stops after it)."""
    if count <= len(kinds):
        chosen = rnd.sample(list(kinds), count)
    else:
        chosen = [*kinds, *rnd.choices(kinds, k=count - len(kinds))]
        rnd.shuffle(chosen)
    slot = max(0.0, seconds - warmup) / max(1, count)
    times = [warmup + (i + rnd.uniform(0.3, 0.9)) * slot for i in range(count)]
    if times:
        times[-1] = seconds
    return [Planned(round(t, 1), k) for t, k in zip(times, chosen, strict=True)]


@dataclass
class FaultRecord:
    kind: str
    planned_at: float          # seconds after the workload started
    at: float                  # epoch seconds of the injection (or of giving up)
    offset: float              # seconds after the workload started
    waited: float              # seconds spent waiting for the target
    target: str                # what was hit ("pid N: command"), or why nothing was
    injected: bool
    took: float = 0.0          # seconds the injection itself took (a restart of the source)


class Injector:
    """Injects planned faults one by one (``inject``), recording each in ``records`` and ``log``."""

    def __init__(self, job: MainJob, source: Source, rnd: random.Random, log: Path, t0: float,
                 say: Callable[[str], None], job_lock: threading.Lock) -> None:
        self.job = job
        self.source = source
        self.rnd = rnd
        self.log = log
        self.t0 = t0  # epoch seconds the workload started
        self.say = say
        self.job_lock = job_lock  # the service manager's: it must not restart the main job half-way
        self.records: list[FaultRecord] = []

    def _targets(self, kind: Kind) -> list[Proc]:
        if kind == Kind.SOURCE_RESTART:
            return []
        tree = self.job.tree()
        in_flight = any(_is_run_worker(p) for p in tree)
        if kind == Kind.MAIN_JOB_TREE:  # mid-run: a run worker is in flight
            main = [p for p in tree if p.pid == self.job.pid]
            return main if main and in_flight else []
        if kind == Kind.SPARK_JVM and not in_flight:  # the job's Spark Connect server lives between runs: hit it
            return []                                 # while a run uses it
        return [p for p in tree if _MATCHERS[kind](p) and p.alive()]

    def inject(self, planned: Planned, stop: Callable[[], bool] = lambda: False) -> FaultRecord:
        kind = planned.kind
        t_wait = time.monotonic()
        targets = self._targets(kind)
        while kind != Kind.SOURCE_RESTART and not targets and time.monotonic() - t_wait < TARGET_WAIT_SECONDS \
                and not stop():
            time.sleep(0.5)
            targets = self._targets(kind)
        waited = time.monotonic() - t_wait
        now = time.time()
        rec = FaultRecord(kind=kind.value, planned_at=planned.at, at=now, offset=round(now - self.t0, 1),
                          waited=round(waited, 1), target="", injected=False)
        if kind == Kind.SOURCE_RESTART:
            t = time.monotonic()
            self.source.restart()
            rec.took = round(time.monotonic() - t, 1)
            rec.target, rec.injected = f"scripts/mariadb.sh restart {self.source.name}", True
        elif not targets:
            rec.target = f"no {kind.value} appeared within {TARGET_WAIT_SECONDS:.0f} s: skipped"
        elif kind == Kind.MAIN_JOB_TREE:
            with self.job_lock:
                killed = self.job.kill_tree()
                rec.target = f"{len(killed)} processes (main job pid {targets[0].pid})"
                rec.injected = True
                time.sleep(RESTART_DELAY_SECONDS)
                self.job.start()
        else:
            p = self.rnd.choice(targets)
            try:
                os.kill(p.pid, signal.SIGKILL)
                rec.target, rec.injected = f"pid {p.pid}: {p.cmdline[:100]}", True
            except ProcessLookupError:
                rec.target = f"pid {p.pid} exited before the SIGKILL: skipped"
        self.records.append(rec)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(rec)) + "\n")
        self.say(f"fault {len(self.records)} at +{rec.offset:.0f} s: {kind.value} -> {rec.target}"
                 + (f" (waited {rec.waited:.0f} s for it)" if rec.waited >= 1 else ""))
        return rec
