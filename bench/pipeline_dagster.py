"""bench/pipeline's side of Dagster: a temporary DAGSTER_HOME, `dagster dev` in a process group of its own, and
what the instance recorded about each window (sensor tick, run events, step and materialization times)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHANGELOG_KEY = "canal/changelog"


def write_home(home: Path) -> None:
    """The project's dagster.yaml (run coordinator, monitoring, sensor threads) with storage under ``home``."""
    cfg = yaml.safe_load((ROOT / "dagster_home" / "dagster.yaml").read_text())
    cfg["storage"] = {"sqlite": {"base_dir": str(home / "storage")}}
    cfg["local_artifact_storage"]["config"]["base_dir"] = str(home)
    cfg["compute_logs"]["config"]["base_dir"] = str(home / "compute_logs")
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`dagster dev` (webserver, daemon, code server) from the repository root."""
    exe = Path(sys.executable).with_name("dagster")
    cmd = [str(exe), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(free_port())]
    with open(log, "ab") as fh:  # the child keeps its own descriptor
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen[Any] | None, timeout: float = 60) -> None:
    """SIGTERM to the process group (dagster dev, its code server, daemon and run workers), SIGKILL if it lingers."""
    if proc is None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        return
    try:  # children (a run worker, the code server) may outlive their parent
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(10)


def log_tail(log: Path, n: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-n:])
    except FileNotFoundError:
        return "(no log)"


def instance(home: Path) -> Any:
    from dagster import DagsterInstance

    return DagsterInstance.from_config(str(home))


def runs(inst: Any, destination: str, kind: str) -> list[Any]:
    from dagster import RunsFilter

    return list(inst.get_runs(filters=RunsFilter(tags={"canal/destination": destination, "canal/kind": kind})))


def tick_failures(inst: Any, sensor_name: str, n: int = 2) -> str | None:
    """The error of the sensor's last ``n`` ticks when they all failed (one may be a passing hiccup)."""
    from dagster._core.scheduler.instigation import InstigatorType, TickStatus

    for state in inst.all_instigator_state(instigator_type=InstigatorType.SENSOR):
        if state.instigator_name == sensor_name:
            ticks = inst.get_ticks(state.instigator_origin_id, state.selector_id, limit=n)
            if len(ticks) == n and all(t.status == TickStatus.FAILURE for t in ticks):
                err = ticks[0].error
                return f"the last {n} ticks of sensor {sensor_name} failed: " + \
                    (err.to_string().strip() if err else "(no error recorded)")
    return None


def failed(inst: Any, destination: str) -> str | None:
    """The first failed or canceled run of the destination, with its error from the event log."""
    from dagster import DagsterRunStatus

    from pipelines.defs.sensor import run_error

    for kind in ("snapshot", "window"):
        for run in runs(inst, destination, kind):
            if run.status in (DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED):
                return f"{kind} run {run.run_id} ({run.tags.get('dagster/run_key')}) {run.status.value}: " \
                       f"{run_error(inst, run)}"
    return None


def applied_rows(inst: Any, destination: str) -> int:
    """Row changes of the destination's successful window runs (one per window)."""
    from dagster import DagsterRunStatus

    done = {r.tags["canal/window"]: int(r.tags.get("canal/rows", "0")) for r in runs(inst, destination, "window")
            if r.status == DagsterRunStatus.SUCCESS}
    return sum(done.values())


@dataclass
class Window:
    window: int
    run_id: str
    rows: int
    tick_start: float | None = None      # the sensor evaluation that fetched, staged and requested it
    tick_end: float | None = None
    enqueued: float | None = None        # run created (QueuedRunCoordinator)
    started: float | None = None         # RUN_START: the run worker executes
    spark_started: float | None = None   # SparkContext.startTime, or the Connect session's (changelog metadata)
    first_query: float | None = None     # the run's first Spark SQL execution (Spark event log)
    steps: dict[str, tuple[float, float]] = field(default_factory=dict)  # "changelog" / "mirror:<table>"
    visible: dict[str, float] = field(default_factory=dict)              # mirror table -> its materialization
    ended: float | None = None

    def breakdown(self) -> dict[str, float | None]:
        """Seconds per phase (None when the instance lacks the event)."""
        def d(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else round(b - a, 3)

        cl = self.steps.get("changelog")
        mirrors = [v for k, v in self.steps.items() if k.startswith("mirror:")]
        first_step = min((s for s, _ in self.steps.values()), default=None)
        return {
            "tick": d(self.tick_start, self.tick_end),
            "submit": d(self.tick_end, self.enqueued),
            "launch": d(self.enqueued, self.started),
            "spark": d(first_step, self.spark_started),
            "warmup": d(self.spark_started, self.first_query),
            "changelog": d(self.first_query or self.spark_started, cl[1]) if cl else None,
            "mirror": round(sum(e - s for s, e in mirrors), 3) if mirrors else None,
            "teardown": d(max((e for _, e in self.steps.values()), default=None), self.ended),
            "run": d(self.enqueued, self.ended),
        }


def _value(v: Any) -> Any:
    return getattr(v, "value", v)


def timelines(inst: Any, destination: str, sensor_name: str, events_dir: Path | None = None) -> list[Window]:
    """Every successful window run, in window order, with its events' times, its sensor tick and (from the Spark
    event logs in ``events_dir``) its first Spark query."""
    from dagster import DagsterEventType, DagsterRunStatus
    from dagster._core.scheduler.instigation import InstigatorType

    ticks: dict[str, tuple[float, float | None]] = {}
    for state in inst.all_instigator_state(instigator_type=InstigatorType.SENSOR):
        if state.instigator_name == sensor_name:
            for t in inst.get_ticks(state.instigator_origin_id, state.selector_id, limit=100_000):
                for key in t.run_keys:
                    ticks[key] = (t.timestamp, t.end_timestamp)
    out = []
    for run in runs(inst, destination, "window"):
        if run.status != DagsterRunStatus.SUCCESS:
            continue
        w = Window(int(run.tags["canal/window"]), run.run_id, int(run.tags.get("canal/rows", "0")))
        w.tick_start, w.tick_end = ticks.get(run.tags.get("dagster/run_key", ""), (None, None))
        starts: dict[str, float] = {}
        step_names: dict[str, str] = {}
        for rec in inst.get_records_for_run(run.run_id, limit=100_000).records:
            e = rec.event_log_entry
            ev = e.dagster_event
            if ev is None:
                continue
            et = ev.event_type
            if et == DagsterEventType.RUN_ENQUEUED:
                w.enqueued = e.timestamp
            elif et == DagsterEventType.RUN_START:
                w.started = e.timestamp
            elif et == DagsterEventType.RUN_SUCCESS:
                w.ended = e.timestamp
            elif et == DagsterEventType.STEP_START and ev.step_key:
                starts[ev.step_key] = e.timestamp
            elif et == DagsterEventType.ASSET_MATERIALIZATION and ev.step_key:
                mat = ev.event_specific_data.materialization
                key = "/".join(mat.asset_key.path)
                if key == CHANGELOG_KEY:
                    step_names[ev.step_key] = "changelog"
                    if "spark_started_at" in mat.metadata:
                        w.spark_started = float(_value(mat.metadata["spark_started_at"]))
                else:
                    table = ".".join(mat.asset_key.path[1:])
                    step_names[ev.step_key] = f"mirror:{table}"
                    w.visible[table] = e.timestamp
            elif et == DagsterEventType.STEP_SUCCESS and ev.step_key in starts:
                name = step_names.get(ev.step_key, ev.step_key)
                w.steps[name] = (starts[ev.step_key], e.timestamp)
        out.append(w)
    queries = first_queries(events_dir) if events_dir is not None and events_dir.is_dir() else {}
    for w in out:
        if w.spark_started is not None:
            w.first_query = queries.get(round(w.spark_started * 1000))
    return sorted(out, key=lambda w: w.window)


def fill_first_queries(windows: list[Window], events_dir: Path) -> None:
    """Spark Connect: every run is a session of one server application, so a run's first query is the server's
    first SQL execution at or after the run's session was ready (window runs do not overlap)."""
    import json

    starts: list[float] = []
    for f in sorted(events_dir.rglob("*")) if events_dir.is_dir() else []:
        if f.is_file() and (f.name.startswith("events_") or f.name.startswith("local-")):
            with open(f) as fh:
                starts += [json.loads(line)["time"] / 1000 for line in fh if "SQLExecutionStart" in line[:120]]
    starts.sort()
    for w in windows:
        if w.spark_started is not None:
            w.first_query = next((t for t in starts if t >= w.spark_started), None)


def first_queries(events_dir: Path) -> dict[int, float]:
    """SparkContext start (ms) -> start of the application's first SQL execution (s), from Spark's event logs
    (spark.eventLog.enabled, uncompressed). The start time is the same number as SparkContext.startTime, which
    the changelog's metadata carries: the join key between a run and its application."""
    import json

    out: dict[int, float] = {}
    for f in sorted(events_dir.rglob("*")):
        if not f.is_file() or not (f.name.startswith("events_") or f.name.startswith("local-")):
            continue
        start, first = None, None
        with open(f) as fh:
            for line in fh:
                if "SparkListenerApplicationStart" in line[:80]:
                    start = int(json.loads(line)["Timestamp"])
                elif "SQLExecutionStart" in line[:120]:
                    first = json.loads(line)["time"] / 1000
                    break
        if start is not None and first is not None:
            out[start] = first
    return out
