"""One chaos run, start to end (tests/chaos/__init__.py gives the steps): ``run(options, say) -> Report``."""

from __future__ import annotations

import datetime as dt
import random
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.net import free_port

from . import verify
from .binlog_truth import Change, position_key, read_changes
from .environment import (
    DESTINATION,
    REPO_ROOT,
    SCHEMA,
    ChaosSetupError,
    Layout,
    Source,
    destination_start,
    write_configuration,
)
from .faults import KINDS, Injector, Kind, plan
from .mainjob import MainJob
from .report import Report
from .workload import TABLES, Workload, create_schema, read_log

SENSOR = f"canal_{DESTINATION}"
START_SECONDS = 420.0     # the main job's first start until the destination reads the source (Spark-free)
MARKER = ".chaos-run"     # a directory the suite may empty holds this file
SOURCE_SERVER_ID = 57


@dataclass
class Options:
    minutes: float = 10.0
    faults: int = 20
    seed: int = field(default_factory=lambda: int(time.time()) % 100_000)
    rate: float = 8.0                  # workload transactions per second
    accounts: int = 300                # rows of accounts (and transfers) before the pipeline starts
    root: Path = REPO_ROOT / ".runtime" / "chaos"
    instance: str = "chaos"            # scripts/mariadb.sh instance name
    mariadb_port: int = 0              # 0: a free port
    ui_port: int = 0                   # 0: a free port
    converge_seconds: float = 600.0    # bound: the last fault -> every check holding
    kinds: tuple[Kind, ...] = KINDS
    spark: str = "server"              # the main job's --spark: its Spark Connect server, or a JVM per run
    command: str = ""


def _fresh_root(root: Path) -> None:
    """Empty the run directory: only one the suite made (it holds MARKER), or a new or empty one."""
    if root.exists() and any(root.iterdir()) and not (root / MARKER).exists():
        raise ChaosSetupError(f"{root} is not empty and was not made by the chaos suite: choose another --dir")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    (root / MARKER).write_text("made by the chaos suite (tests/chaos): emptied at the start of every run\n")


class ServiceManager:
    """Keeps the main job running as a service manager would: started again a second after it exited. An exit no
    fault caused is recorded (the main job is meant to keep its processes alive itself)."""

    def __init__(self, job: MainJob, say: Callable[[str], None]) -> None:
        self.job = job
        self.say = say
        self.lock = threading.Lock()  # held by a fault that kills the main job on purpose
        self.unexpected: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos-service-manager", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            with self.lock:
                rc = self.job.exit_code()
                if rc is None or self._stop.is_set():
                    continue
                msg = f"the main job exited with {rc} at {dt.datetime.now(dt.UTC):%H:%M:%S} UTC without a fault"
                self.unexpected.append(msg)
                self.say(f"{msg}: starting it again (log {self.job.layout.main_job_log})")
                self.job.start()


def _wait(what: str, cond: Callable[[], Any], timeout: float, job: MainJob, step: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if job.exit_code() is not None:
            raise ChaosSetupError(f"the main job exited with {job.exit_code()} while waiting for {what} "
                                  f"(log {job.layout.main_job_log})")
        if time.monotonic() > deadline:
            raise ChaosSetupError(f"{what}: not within {timeout:.0f} s (logs under {job.layout.root})")
        time.sleep(step)


def _pipeline_caught_up(layout: Layout, last: Change | None, since: float) -> bool:
    """The sensor applied (ran and acked) a window reaching past the last row change, or, with no change at all,
    found the source fully applied after ``since``."""
    state = verify.sensor_cursor(layout.dagster_home, SENSOR)
    if state is None:
        return False
    if last is None:
        return state.caught_up_at > since
    if not state.applied_position:
        return False
    file, _, offset = state.applied_position.rpartition(":")
    return position_key(file, int(offset)) >= position_key(last.file, last.offset)


def run(opts: Options, say: Callable[[str], None]) -> Report:
    t_begin = time.monotonic()
    rnd = random.Random(opts.seed)
    report = Report(command=opts.command, started=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                    seed=opts.seed, converge_bound=opts.converge_seconds)
    _fresh_root(opts.root)
    layout = Layout(opts.root)
    source = Source(opts.instance, opts.mariadb_port or free_port(), SOURCE_SERVER_ID)
    slave_id = rnd.randint(1 << 20, (1 << 31) - 2)
    job = MainJob(layout, write_configuration(layout, source, slave_id), opts.ui_port or free_port(), opts.spark)
    manager = ServiceManager(job, say)
    workload: Workload | None = None
    try:
        say(f"source: MariaDB instance {source.name} on port {source.port}; everything else under {opts.root}")
        source.start_fresh()
        conn = source.connect()
        try:
            create_schema(conn, opts.accounts, opts.seed)
        finally:
            conn.close()
        job.start()
        say(f"main job started (pid {job.pid}, UI http://127.0.0.1:{job.ui_port}); waiting for the destination")
        start = _wait("the destination reading the source", lambda: destination_start(layout), START_SECONDS, job)
        say(f"destination reads from {start[0]}:{start[1]}")
        manager.start()

        workload = Workload(lambda: source.connect(read_timeout=30, write_timeout=30), layout.workload_log,
                            opts.rate, opts.seed + 1, say)
        seconds = opts.minutes * 60
        planned = plan(opts.faults, seconds, rnd, opts.kinds)
        t0 = time.time()
        workload.start()
        say(f"workload: {opts.rate:g} transactions/s for {seconds:.0f} s; {len(planned)} faults planned")
        injector = Injector(job, source, rnd, layout.fault_log, t0, say, manager.lock)
        for p in planned:
            time.sleep(max(0.0, t0 + p.at - time.time()))
            injector.inject(p)
        time.sleep(max(0.0, t0 + seconds - time.time()))
        workload.stop()
        t_workload_end = time.time()
        report.faults = injector.records
        t_last = max([f.at for f in injector.records if f.injected], default=t_workload_end)
        say(f"workload stopped after {workload.n} transactions; waiting for the pipeline to catch up "
            f"(bound {opts.converge_seconds:.0f} s after the last fault)")
        _converge(opts, layout, source, start, slave_id, report, t_last, t_workload_end, say)
        report.sensor = verify.sensor_history(layout.dagster_home, SENSOR)
    finally:
        if workload is not None:
            workload.stop()
        manager.stop()
        rc, took, left = job.stop()
        report.main_job_starts = job.starts
        report.unexpected_exits = manager.unexpected
        if left:
            report.problems.append(f"{len(left)} processes of the main job outlived its stop (SIGTERM, {took:.0f} s): "
                                   + "; ".join(f"{p.pid} {p.cmdline[:80]}" for p in left[:5]))
        say(f"main job stopped (exit {rc}, {took:.1f} s); stopping the source")
        source.stop()
        report.wall_seconds = time.monotonic() - t_begin
    (opts.root / "report.txt").write_text(report.text() + "\n")
    (opts.root / "report.json").write_text(report.to_json() + "\n")
    return report


def _converge(opts: Options, layout: Layout, source: Source, start: tuple[str, int], slave_id: int, report: Report,
              t_last: float, t_workload_end: float, say: Callable[[str], None]) -> None:
    """Wait (bounded) until the pipeline applied the last change and every lake check holds; fills ``report``."""
    truth = read_changes(source, start, SCHEMA, server_id=slave_id + 1)
    last = truth[-1] if truth else None
    say(f"binlog: {len(truth)} row changes of {SCHEMA} from {start[0]}:{start[1]}"
        + (f" to {last.file}:{last.offset}" if last else ""))
    deadline = t_last + opts.converge_seconds
    with verify.spark_session(layout.logs / "verify-spark.log") as spark:
        while True:
            if _pipeline_caught_up(layout, last, t_workload_end):
                t_seen = time.time()
                stored = verify.read_changelog(spark, str(layout.lake))
                report.changelog = verify.compare_changelog(stored, truth)
                report.tables = verify.compare_mirrors(spark, source, str(layout.lake), TABLES)
                report.workload = verify.check_workload(read_log(layout.workload_log), truth, stored)
                if report.changelog.ok and not any(t.mismatched for t in report.tables):
                    report.converged_after_fault = t_seen - t_last
                    report.converged_after_workload = t_seen - t_workload_end
                    say(f"converged {t_seen - t_last:.0f} s after the last fault")
                    return
                say(f"the pipeline applied the last change but the lake differs (lost {report.lost}, duplicated "
                    f"{report.duplicated}, mismatched {report.mismatched}); checking again")
            if time.time() > deadline:
                say(f"not converged {opts.converge_seconds:.0f} s after the last fault")
                if report.changelog is None:  # never caught up: verify what is there, for the report
                    stored = verify.read_changelog(spark, str(layout.lake))
                    report.changelog = verify.compare_changelog(stored, truth)
                    report.tables = verify.compare_mirrors(spark, source, str(layout.lake), TABLES)
                    report.workload = verify.check_workload(read_log(layout.workload_log), truth, stored)
                return
            time.sleep(5)
