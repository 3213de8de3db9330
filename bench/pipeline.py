"""bench/pipeline: sustained rows/s from MySQL into the Delta mirrors and freshness (commit -> visible), through the
real daemon path, beside the usual non-CDC peer (a periodic full reload), in one run.

    .venv/bin/python bench/pipeline.py [--workload growth|cdc] [--rate 20000] [--seconds 180] [--preload 100000]
                                       [--window-rows 600000] [--spark-remote] [--peer none]
                                       [--reconcile-seconds 0] [--no-deletion-vectors]

Workload (bench/pipeline_workload.py): bench/decode.py's 14-column table in schema canal_bench, preloaded, then a
writer process commits transactions of --tx-rows row changes at --rate row changes per second for --seconds,
recording each commit's GTID and time. "growth" (the default): 60% inserts, 25% updates, 15% deletes of the oldest
rows, 20k rows/s for 180 s on 0.1M rows (the table grows ~17x); "cdc": 70% updates, 15% inserts, 15% deletes over
random keys, 2k rows/s for 300 s on 5M rows (a small share of a large table changes). Both sides report machine
CPU per row change.

Ours: `dagster dev` (webserver, daemon, code server with the embedded Canal instance) on a temporary DAGSTER_HOME,
Canal conf, pipeline.yaml, staging and lake; the canal sensor at sensor.interval_seconds (30); local Spark, or with
--spark-remote one long-lived Spark Connect server (scripts/spark-connect.sh, started before ours and stopped after;
pipeline.yaml's spark.remote points the runs at it, so no run starts a JVM). The
table is loaded by the sensor's canal_snapshot run first, then the writer starts. Each window: the sensor tick
(getWithoutAck + staging + the previous window's ack), the run's launch, Spark start and warm-up, the changelog
MERGE and the mirror MERGE, read back from the Dagster instance (tick times, run events, the changelog's
spark_started_at metadata) and the runs' Spark event logs. Freshness of every row (not a sample) = the
ASSET_MATERIALIZATION time of the mirror in the run of the window that applied it - its commit time; the window
of each row comes from the Delta changelog (window column; transactions matched to the writer's commits in binlog
order, by row count). Sustained = row changes applied / (first commit -> last visible).

Peer (bench/pipeline_peer.py): the same workload from the same preload, mirrored by a full reload (consistent
SELECT * -> Delta overwrite) every --interval seconds, after ours: "cold" (a process and SparkSession per
reload, as a periodic run would) and "warm" (one session throughout, its best case).

Tuned for the bench (see --help): window.max_rows (600k; max_bytes and the ring store follow), Spark event logs
on, canal.instance.filter.query.dml (other sessions' statement-based DML on the shared server). Everything else is
conf/pipeline.yaml's defaults.

Prints both, their ratios and the per-window breakdown; writes .runtime/bench-pipeline.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import cpu_account as CPU  # noqa: E402
import decode as D  # noqa: E402  (the private MariaDB's address)
import pipeline_dagster as DG  # noqa: E402
import pipeline_peer as P  # noqa: E402
import pipeline_workload as W  # noqa: E402

DESTINATION = "bench"
SENSOR = f"canal_{DESTINATION}"
TABLE = f"{W.SCHEMA}.{W.TABLE}"
# the writer's figures per workload (bench/pipeline_workload.py); --rate, --seconds, --tx-rows, --preload override
PRESETS: dict[str, dict[str, Any]] = {
    "growth": {"rate": 20000.0, "seconds": 180.0, "tx_rows": 2000, "preload": 100_000},
    "cdc": {"rate": 2000.0, "seconds": 300.0, "tx_rows": 100, "preload": 5_000_000},
}
OUT = ROOT / ".runtime" / "bench-pipeline.json"
ENTRY_BYTES_PER_ROW = 1100   # Canal Entry bytes per row change of this table: ~890 measured, plus headroom
MEMUNIT = 16384


class BenchError(RuntimeError):
    pass


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --- configuration of the run under test ---------------------------------------------------------------------

def write_conf(tmp: Path, args: argparse.Namespace) -> Path:
    """Canal conf + pipeline.yaml for the bench destination; returns pipeline.yaml."""
    import random

    import yaml

    window_bytes = args.window_rows * ENTRY_BYTES_PER_ROW
    # the ring store keeps the un-acked window while its run works, and takes what arrives meanwhile
    units = 1 << max(1, (2 * window_bytes // MEMUNIT - 1).bit_length())
    conf = tmp / "conf"
    (conf / DESTINATION).mkdir(parents=True)
    (conf / "canal.properties").write_text(f"canal.destinations = {DESTINATION}\ncanal.file.flush.period = 0\n")
    (conf / DESTINATION / "instance.properties").write_text(
        # a replica id of its own: two replicas with one id kick each other off the primary
        f"canal.instance.mysql.slaveId = {random.randint(1 << 20, (1 << 31) - 1)}\n"
        f"canal.instance.master.address = {D.HOST}:{D.PORT}\ncanal.instance.master.sslMode = DISABLED\n"
        "canal.instance.dbUsername = canal\ncanal.instance.dbPassword = canal\n"
        f"canal.instance.filter.regex = {W.SCHEMA}\\\\..*\n"
        # other sessions' statement-based DML on the shared server carries no table the filter could reject,
        # and staging refuses statement-based DML: drop it at the source, as a ROW-only destination may
        "canal.instance.filter.query.dml = true\n"
        f"canal.instance.memory.buffer.size = {units}\ncanal.instance.memory.buffer.memunit = {MEMUNIT}\n")
    pipeline = {
        "destination": DESTINATION,
        "canal": {"conf_dir": str(conf)},
        "window": {"max_rows": args.window_rows, "max_bytes": window_bytes, "max_wait_seconds": 1},
        "sensor": {"interval_seconds": args.interval, **({} if args.reconcile_seconds is None
                                                          else {"reconcile_interval_seconds": args.reconcile_seconds})},
        "paths": {"staging": str(tmp / "staging"), "state": str(tmp / "state")},
        "lake": {"root": str(tmp / "lake"), "deletion_vectors": args.deletion_vectors},
        "spark": {"master": "local[2]", "conf": run_spark_conf(args, tmp)},
    }
    if args.remote_url:   # the server has the event-log settings (server-level); the runs only their session conf
        pipeline["spark"] = {"remote": args.remote_url, "conf": spark_conf(args)}
    path = conf / "pipeline.yaml"
    path.write_text(yaml.safe_dump(pipeline, sort_keys=False))
    return path


# --- processes ---------------------------------------------------------------------------------------------------

def start_writer(args: argparse.Namespace, out: Path, log: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, str(ROOT / "bench" / "pipeline_workload.py"), "--host", D.HOST, "--port", str(D.PORT),
           "--rate", str(args.rate), "--seconds", str(args.seconds), "--tx-rows", str(args.tx_rows),
           "--next-id", str(args.preload + 1), "--out", str(out), "--workload", args.workload]
    with open(log, "ab") as fh:
        return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)


def stop_writer(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def read_commits(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    commits, summary = [], {}
    for line in path.read_text().splitlines():
        d = json.loads(line)
        if d.get("done"):
            summary = d
        else:
            commits.append(d)
    return commits, summary


def writer_result(proc: subprocess.Popen[bytes], out: Path, log: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    commits, summary = read_commits(out)
    if proc.returncode != 0 or not summary:
        raise BenchError(f"the writer exited with {proc.returncode}:\n{DG.log_tail(log)}")
    return commits, summary


# --- statistics --------------------------------------------------------------------------------------------------

def percentile(samples: list[tuple[float, int]], q: float) -> float | None:
    """The q-quantile of values weighted by row counts."""
    total = sum(n for _, n in samples)
    if not total:
        return None
    acc = 0
    for v, n in sorted(samples):
        acc += n
        if acc >= q * total:
            return v
    return sorted(samples)[-1][0]


class Load:
    """1-minute load averages sampled while a side runs."""

    def __init__(self) -> None:
        self.samples: list[float] = []

    def sample(self) -> None:
        self.samples.append(os.getloadavg()[0])

    def summary(self) -> dict[str, float]:
        s = self.samples or [os.getloadavg()[0]]
        return {"mean": round(sum(s) / len(s), 2), "max": round(max(s), 2)}


# --- ours --------------------------------------------------------------------------------------------------------

def cpu_since(cpu0: CPU.Snapshot, c0: float) -> dict[str, float]:
    """Core-seconds by role since ``cpu0`` (taken at monotonic time ``c0``), and the seconds elapsed."""
    return {"seconds": round(time.monotonic() - c0, 1),
            **{k: round(v, 1) for k, v in CPU.account(cpu0, CPU.snapshot()).items()}}


def poll(what: str, cond: Callable[[], Any], timeout: float, check: Callable[[], None], load: Load) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        check()
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")
        load.sample()
        time.sleep(2.0)


def last_tick(inst: Any) -> str:
    from dagster._core.scheduler.instigation import InstigatorType

    for state in inst.all_instigator_state(instigator_type=InstigatorType.SENSOR):
        if state.instigator_name == SENSOR:
            ticks = inst.get_ticks(state.instigator_origin_id, state.selector_id, limit=1)
            if ticks:
                t = ticks[0]
                why = t.error.message.strip() if t.error else t.skip_reason or ",".join(t.run_keys)
                return f"last tick {time.strftime('%H:%M:%S', time.localtime(t.timestamp))} {t.status.value}: {why}"
    return "no sensor tick yet"


def run_ours(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from dagster import DagsterRunStatus

    say(f"ours: {TABLE} with {args.preload} rows, dagster dev on a temporary DAGSTER_HOME")
    W.create_table(D.HOST, D.PORT, args.preload)
    conf = write_conf(tmp, args)
    home = tmp / "dagster_home"
    DG.write_home(home)
    env = {**os.environ, "DAGSTER_HOME": str(home), "CANAL_PIPELINE_CONF": str(conf)}
    log, wlog, commits_path = tmp / "dagster-dev.log", tmp / "writer.log", tmp / "commits.jsonl"
    load = Load()
    dev = writer = None
    try:
        # the storage is created here, before the dagster processes: each of them creating a fresh SQLite storage
        # at once races ("table jobs already exists", "more than one head")
        inst = DG.instance(home)
        inst.upgrade()
        dev = DG.start(env, log)

        def check() -> None:
            if dev is not None and dev.poll() is not None:
                raise BenchError(f"dagster dev exited with {dev.returncode}:\n{DG.log_tail(log)}")
            err = DG.failed(inst, DESTINATION)
            if err:
                raise BenchError(f"{err}\n{last_tick(inst)}")
            err = DG.tick_failures(inst, SENSOR)
            if err:
                raise BenchError(err)

        def snapshot_done() -> bool:
            return any(r.status == DagsterRunStatus.SUCCESS for r in DG.runs(inst, DESTINATION, "snapshot"))

        t0 = time.monotonic()
        try:
            poll("the initial snapshot run", snapshot_done, args.timeout, check, load)
        except BenchError as e:
            raise BenchError(f"{e}\n{last_tick(inst)}\n{DG.log_tail(log)}") from None
        say(f"ours: snapshot loaded ({time.monotonic() - t0:.0f} s after dagster dev started); writer starts: "
            f"{args.rate:,.0f} rows/s for {args.seconds:.0f} s in transactions of {args.tx_rows} rows")
        load = Load()
        cpu0, c0 = CPU.snapshot(), time.monotonic()
        writer = start_writer(args, commits_path, wlog)
        poll("the writer", lambda: writer.poll() is not None, args.seconds + 120, check, load)
        commits, wsum = writer_result(writer, commits_path, wlog)
        say(f"ours: writer done: {wsum['rows']} row changes in {wsum['transactions']} transactions, "
            f"{wsum['rate']:,.0f} rows/s; waiting for the mirrors")
        try:
            poll("the mirrors to apply every change", lambda: DG.applied_rows(inst, DESTINATION) >= wsum["rows"],
                 args.timeout, check, load)
        except BenchError as e:
            raise BenchError(f"{e}: {DG.applied_rows(inst, DESTINATION)} of {wsum['rows']} applied\n"
                             f"{last_tick(inst)}") from None
        cpu = cpu_since(cpu0, c0)
        windows = DG.timelines(inst, DESTINATION, SENSOR, tmp / "spark-events")
    finally:
        stop_writer(writer)
        DG.stop(dev)
    say(f"ours: {len(windows)} windows applied; dagster dev stopped")
    return {"conf": conf, "commits": commits, "writer": wsum, "windows": windows, "load": load.summary(),
            "cpu": cpu}


def analyse_ours(spark: Any, raw: dict[str, Any]) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from pipelines.cli.main import compare
    from pipelines.engine.config import load_config
    from pipelines.engine.lake import Lake

    cfg = load_config(raw["conf"])
    commits, windows = raw["commits"], raw["windows"]
    vis = {w.window: w.visible.get(TABLE) for w in windows}
    # The table's only writer is the bench's writer, and its transactions reach the changelog whole and in binlog
    # order, so the changelog's rows in (pos, row) order are the writer's commits one after another: the i-th
    # commit's rows are the next commits[i]["rows"] of them. (Header.gtid, which earlier grouped them, is empty
    # unless the dump goes by GTID, as in Canal.)
    order = (spark.read.format("delta").load(Lake(cfg.lake_root).changelog_path())
             .where((F.col("schema_name") == W.SCHEMA) & (F.col("table_name") == W.TABLE))
             .select("pos", "row", "window").orderBy("pos", "row").collect())
    wins = [r["window"] for r in order]
    samples: list[tuple[float, int]] = []
    per_window: dict[int, list[tuple[float, int]]] = defaultdict(list)
    unmatched = 0
    if len(wins) != sum(c["rows"] for c in commits):
        unmatched = len(wins)   # rows of other transactions (or some missing): no commit can be placed
    else:
        i = 0
        for c in commits:
            counts: dict[int, int] = defaultdict(int)
            for w in wins[i:i + c["rows"]]:
                counts[w] += 1
            i += c["rows"]
            for w, n in counts.items():
                v = vis.get(w)
                if v is None:
                    unmatched += n
                    continue
                samples.append((v - c["t"], n))
                per_window[w].append((v - c["t"], n))
    applied = sum(n for _, n in samples)
    first = min(c["t"] for c in commits)
    last_visible = max((v for v in vis.values() if v is not None), default=first)
    # rows committed before each tick that no earlier-or-this window carried: the backlog the window left behind
    assigned: dict[int, int] = defaultdict(int)
    for w in wins:
        assigned[w] += 1
    table = []
    prev_tick = None
    done = 0
    for w in windows:
        b = w.breakdown()
        done += assigned.get(w.window, 0)
        committed = sum(c["rows"] for c in commits if w.tick_start is not None and c["t"] < w.tick_start)
        table.append({
            "window": w.window, "rows": w.rows, **b,
            "cycle": None if prev_tick is None or w.tick_start is None else round(w.tick_start - prev_tick, 3),
            "visible_after_tick": None if w.tick_start is None or vis.get(w.window) is None
            else round(vis[w.window] - w.tick_start, 3),
            "backlog": max(0, committed - done) if w.tick_start is not None else None,
            "freshness_p50": _r(percentile(per_window.get(w.window, []), 0.5)),
        })
        prev_tick = w.tick_start
    check = compare(cfg, spark, [TABLE])[0]
    cycled = [w for w in table if w["cycle"]]
    return {
        "rows_written": raw["writer"]["rows"], "rows_applied": applied, "unmatched_rows": unmatched,
        "writer_rate": round(raw["writer"]["rate"], 1), "first_commit": first, "last_visible": last_visible,
        "sustained_rows_per_s": round(applied / (last_visible - first), 1) if last_visible > first else None,
        # what the windows carried per second of sensor cycle (their rate while a backlog keeps them full)
        "cycle_rows_per_s": round(sum(w["rows"] for w in cycled) / sum(w["cycle"] for w in cycled), 1)
        if cycled else None,
        "freshness_p50": _r(percentile(samples, 0.5)), "freshness_p95": _r(percentile(samples, 0.95)),
        "freshness_max": _r(max((v for v, _ in samples), default=None)),
        "source_rows_read": applied, "snapshot_rows": raw["preload"],
        "source_rows": check[1], "mirror_rows": check[2], "mirror_equals_source": check[3],
        "windows": table, "load": raw["load"], "cpu": raw.get("cpu"),
        "cpu_us_per_row": _per_row(raw.get("cpu"), raw["writer"]["rows"]),
    }


def _r(v: float | None, nd: int = 2) -> float | None:
    return None if v is None else round(v, nd)


# --- the peer ----------------------------------------------------------------------------------------------------

def run_peer(args: argparse.Namespace, tmp: Path, mode: str, spark: Any = None) -> dict[str, Any]:
    say(f"peer ({mode}): {TABLE} reset to {args.preload} rows; full reload every {args.interval} s")
    W.create_table(D.HOST, D.PORT, args.preload)
    job = {"conn": {"host": D.HOST, "port": D.PORT, "user": "canal", "password": "canal", "connect_timeout": 5},
           "schema": W.SCHEMA, "table": W.TABLE, "lake_path": str(tmp / f"peer-{mode}" / W.SCHEMA / W.TABLE),
           "scratch": str(tmp / f"peer-{mode}-scratch"), "spark_conf": spark_conf(args)}
    wlog, commits_path = tmp / f"peer-{mode}-writer.log", tmp / f"peer-{mode}-commits.jsonl"
    load = Load()
    writer = None
    try:
        start = time.time()
        cpu0, c0 = CPU.snapshot(), time.monotonic()
        writer = start_writer(args, commits_path, wlog)

        def stop_after() -> float | None:
            load.sample()
            if writer is None or writer.poll() is None:
                return None
            commits, _ = writer_result(writer, commits_path, wlog)
            return max(c["t"] for c in commits)

        cycles = P.reload_loop(job, args.interval, start, stop_after, spark=spark if mode == "warm" else None, log=say)
        cpu = cpu_since(cpu0, c0)
    except RuntimeError as e:
        raise BenchError(str(e)) from None
    finally:
        stop_writer(writer)
    commits, wsum = read_commits(commits_path)
    samples = []
    for c in commits:
        cyc = next((y for y in cycles if y.snapshot > c["t"]), None)
        if cyc is not None:
            samples.append((cyc.end - c["t"], c["rows"]))
    applied = sum(n for _, n in samples)
    first = min(c["t"] for c in commits)
    last_visible = cycles[-1].end
    read = sum(y.rows for y in cycles)
    busy = sum(y.end - y.snapshot for y in cycles)
    return {
        "mode": mode, "rows_written": wsum["rows"], "rows_applied": applied, "writer_rate": round(wsum["rate"], 1),
        "sustained_rows_per_s": round(applied / (last_visible - first), 1),
        "freshness_p50": _r(percentile(samples, 0.5)), "freshness_p95": _r(percentile(samples, 0.95)),
        "freshness_max": _r(max((v for v, _ in samples), default=None)),
        "source_rows_read": read, "rows_moved_per_s": round(read / busy, 1) if busy else None,
        "cycles": [y.as_dict() for y in cycles], "load": load.summary(), "cpu": cpu,
        "cpu_us_per_row": _per_row(cpu, wsum["rows"]),
    }


def _per_row(cpu: dict[str, float] | None, rows: int) -> float | None:
    """Machine CPU (us) per row change the writer committed, from its start to the last change visible."""
    return round(cpu["machine"] / rows * 1e6, 1) if cpu and rows else None


# --- report ------------------------------------------------------------------------------------------------------

def _f(v: Any, nd: int = 1) -> str:
    return "-" if v is None else f"{v:,.{nd}f}" if isinstance(v, float) else f"{v:,}"


def _cell(side: dict[str, Any], key: str, nd: int) -> str:
    v = side[key]["mean"] if key == "load" else side.get(key)
    return _f(float(v), nd) if isinstance(v, int | float) and nd else _f(v)


WINDOW_COLS = [("window", "window"), ("rows", "rows"), ("tick", "tick s"), ("launch", "launch s"),
               ("spark", "spark s"), ("warmup", "warm-up s"), ("changelog", "changelog s"), ("mirror", "mirror s"),
               ("teardown", "teardown s"), ("run", "run s"), ("cycle", "cycle s"),
               ("visible_after_tick", "tick->vis s"),
               ("backlog", "backlog"), ("freshness_p50", "p50 s")]
SUMMARY_ROWS = [("rows written", "rows_written", 0), ("writer rows/s", "writer_rate", 0),
                ("rows applied", "rows_applied", 0), ("sustained rows/s", "sustained_rows_per_s", 0),
                ("freshness p50 s", "freshness_p50", 1), ("freshness p95 s", "freshness_p95", 1),
                ("freshness max s", "freshness_max", 1), ("source rows read", "source_rows_read", 0),
                ("machine CPU us/row", "cpu_us_per_row", 1),
                ("load (1 min) mean", "load", 1)]


def print_report(res: dict[str, Any]) -> None:
    ours, peers = res["ours"], res["peers"]
    if res["config"].get("spark_remote"):
        print("\nours ran through one long-lived Spark Connect server (spark.remote): spark: first step start -> "
              "the run's\nConnect session is ready; warm-up: -> its first query on the server")
    print("\nours, per window. tick: sensor evaluation (getWithoutAck up to window.max_wait_seconds, staging, the "
          "previous\nwindow's ack); launch: run enqueued -> RUN_START; spark: first step start -> SparkContext "
          "start; warm-up:\nSparkContext start -> the run's first Spark query (session, Delta, JIT); changelog: "
          "-> changelog step end\n(Delta log reads + the insert-only MERGE); mirror: the mirror MERGE step; cycle: "
          "tick to tick; backlog: rows\ncommitted before the tick that later windows carry")
    print(" ".join(f"{h:>11}" for _, h in WINDOW_COLS))
    for w in ours["windows"]:
        print(" ".join(f"{_f(w[c]):>11}" for c, _ in WINDOW_COLS))
    full = [w for w in ours["windows"] if w["rows"]]
    if full:
        vals = {c: [w[c] for w in full if w[c] is not None] for c, _ in WINDOW_COLS[1:-2]}
        mean = [_f(sum(v) / len(v)) if v else "-" for v in vals.values()]
        print(" ".join(f"{s:>11}" for s in ["mean", *mean, "", ""]))
    for name, peer in peers.items():
        print(f"\npeer {name}, per reload (read: consistent SELECT * -> Parquet; spark: session start; write: Delta "
              "overwrite)")
        print(" ".join(f"{h:>11}" for h in ["reload", "rows read", "read s", "spark s", "write s", "total s"]))
        for i, c in enumerate(peer["cycles"]):
            print(" ".join(f"{v:>11}" for v in [str(i), _f(c["rows"]), _f(c["read_s"]), _f(c["spark_s"]),
                                                 _f(c["write_s"]), _f(round(c["end"] - c["snapshot"], 3))]))
    sides = [("ours", ours)] + [(f"peer {n}", p) for n, p in peers.items()]
    print("\n" + f"{'':>20}" + "".join(f"{n:>18}" for n, _ in sides))
    for label, key, nd in SUMMARY_ROWS:
        print(f"{label:>20}" + "".join(f"{_cell(side, key, nd):>18}" for _, side in sides))
    print(f"{'ours, rows/cycle s':>20}{_f(ours['cycle_rows_per_s']):>18}   (window rows / tick-to-tick time, "
          "windows 1..n)")
    cpu, applied = ours.get("cpu"), ours["rows_applied"]
    if cpu and applied:
        secs = cpu["seconds"]
        print(f"\nours, CPU from the writer's start to the last window applied ({secs:.0f} s, /proc; 'other' "
              "holds the ended\nper-window run workers and anything else on the machine):")
        print(f"{'role':>45} {'core-s':>8} {'cores':>6} {'us/row':>7} {'cores at 20k rows/s':>20}")
        for role, v in cpu.items():
            if role == "seconds":
                continue
            per_row = v / applied * 1e6
            print(f"{role:>45} {v:>8.1f} {v / secs:>6.2f} {per_row:>7.1f} {per_row * 20_000 / 1e6:>20.2f}")
    print(f"\nmirror == source after ours (count + checksum): {ours['mirror_equals_source']} "
          f"({ours['source_rows']:,} rows)")
    for name, r in res["ratios"].items():
        for k, v in r.items():
            print(f"ratio vs peer {name}, {k}: {v}")
    g = res["goals"]
    print(f"goals: >= 20,000 rows/s sustained: {'met' if g['rows_per_s'] else 'NOT met'} "
          f"({_f(ours['sustained_rows_per_s'])}); p50 freshness < 60 s: {'met' if g['p50'] else 'NOT met'} "
          f"({_f(ours['freshness_p50'])} s)")


def ratios(ours: dict[str, Any], peer: dict[str, Any]) -> dict[str, str]:
    def div(a: float | None, b: float | None) -> str:
        return "-" if not a or not b else f"{a / b:.2f}x"

    return {
        "freshness p50 peer/ours": div(peer["freshness_p50"], ours["freshness_p50"]),
        "freshness p95 peer/ours": div(peer["freshness_p95"], ours["freshness_p95"]),
        "sustained rows/s ours/peer": div(ours["sustained_rows_per_s"], peer["sustained_rows_per_s"]),
        "source rows read per changed row, peer vs ours":
            f"{peer['source_rows_read'] / peer['rows_applied']:.2f} vs "
            f"{ours['source_rows_read'] / ours['rows_applied']:.2f} "
            f"(+{ours['snapshot_rows'] / ours['rows_applied']:.2f} once, the initial snapshot)",
    }


def spark_conf(args: argparse.Namespace) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in args.spark_conf)


def connect_env(tmp: Path) -> dict[str, str]:
    """scripts/spark-connect.sh's environment for the bench's own server: state under ``tmp``, a free port."""
    env = {**os.environ, "CANAL_SPARK_CONNECT_DIR": str(tmp / "spark-connect"),
           "CANAL_SPARK_CONNECT_PORT": str(DG.free_port())}
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    return env


def start_connect(args: argparse.Namespace, tmp: Path, env: dict[str, str]) -> str:
    """Start the Spark Connect server (with the event logs the warm-up column needs); its sc:// URL."""
    confs: list[str] = []
    if args.spark_events:
        (tmp / "spark-events").mkdir(exist_ok=True)
        for k, v in {"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(tmp / "spark-events"),
                     "spark.eventLog.compress": "false"}.items():
            confs += ["--conf", f"{k}={v}"]
    t0 = time.monotonic()
    r = subprocess.run([str(ROOT / "scripts" / "spark-connect.sh"), "start", *confs], env=env, capture_output=True,
                       text=True, timeout=300)
    if r.returncode != 0:
        raise BenchError(f"scripts/spark-connect.sh start failed ({r.returncode}):\n{r.stderr[-3000:]}")
    url = r.stdout.strip().splitlines()[-1]
    say(f"Spark Connect server at {url} ({time.monotonic() - t0:.1f} s to accept a session)")
    return url


def stop_connect(env: dict[str, str] | None) -> None:
    if env is not None:
        subprocess.run([str(ROOT / "scripts" / "spark-connect.sh"), "stop"], env=env, capture_output=True, timeout=120)


def run_spark_conf(args: argparse.Namespace, tmp: Path) -> dict[str, str]:
    """The runs' Spark conf: --spark-conf, plus uncompressed event logs that tell when each run's first query
    started (Spark and Delta warm-up vs work)."""
    if not args.spark_events:
        return spark_conf(args)
    (tmp / "spark-events").mkdir(exist_ok=True)
    return {"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(tmp / "spark-events"),
            "spark.eventLog.compress": "false", **spark_conf(args)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=sorted(PRESETS), default="growth",
                    help="growth: 60%% inserts, updates and deletes of the oldest rows (20k rows/s, 180 s, 0.1M "
                         "rows preloaded); cdc: 70%% updates, 15%% inserts, 15%% deletes over random keys (2k rows/s, "
                         "300 s, 5M rows preloaded). The options below override a preset's figures")
    ap.add_argument("--rate", type=float, help="row changes per second the writer commits")
    ap.add_argument("--seconds", type=float, help="how long the writer runs")
    ap.add_argument("--tx-rows", type=int, help="row changes per transaction")
    ap.add_argument("--preload", type=int, help="rows in the table before the writer starts")
    ap.add_argument("--interval", type=int, default=30, help="sensor.interval_seconds, and the peer's interval")
    ap.add_argument("--reconcile-seconds", type=float, default=None,
                    help="sensor.reconcile_interval_seconds (default: the pipeline's; 0: no reconcile check rides "
                         "along with the window runs)")
    ap.add_argument("--no-deletion-vectors", dest="deletion_vectors", action="store_false",
                    help="lake.deletion_vectors false: the mirrors' MERGEs copy on write")
    ap.add_argument("--window-rows", type=int, default=600_000,
                    help="window.max_rows (max_bytes and the ring store follow from it)")
    ap.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                    help="spark.conf of the runs (and of the peer)")
    ap.add_argument("--no-spark-events", dest="spark_events", action="store_false",
                    help="no Spark event logs in the runs (and no warm-up column)")
    ap.add_argument("--spark-remote", action="store_true",
                    help="ours through one long-lived Spark Connect server (spark.remote) instead of a JVM per run")
    ap.add_argument("--peer", choices=["cold", "warm", "both", "none"], default="both",
                    help="cold: a process and SparkSession per reload; warm: one session throughout")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds to wait for the snapshot, and for the drain")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, lake, DAGSTER_HOME)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    for key, value in PRESETS[args.workload].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if any("=" not in kv for kv in args.spark_conf):
        ap.error("--spark-conf takes KEY=VALUE")

    def on_term(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    tmp = Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    os.environ["CANAL_SPARK_WAREHOUSE"] = str(tmp / "warehouse")  # runs, peers and this process
    started = dt.datetime.now(dt.UTC)
    spark = None
    args.remote_url = ""
    cenv: dict[str, str] | None = None
    try:
        if args.spark_remote:
            cenv = connect_env(tmp)
            args.remote_url = start_connect(args, tmp, cenv)
        raw = run_ours(args, tmp)
        raw["preload"] = args.preload
        if cenv is not None:
            stop_connect(cenv)   # also completes its event log, read for the warm-up column
            cenv = None
            DG.fill_first_queries(raw["windows"], tmp / "spark-events")
        from pipelines.engine.sparkenv import quiet_delta_scan_noise, spark_session_builder

        spark = spark_session_builder("bench-pipeline", "local[2]", spark_conf(args)).getOrCreate()
        quiet_delta_scan_noise(spark)
        ours = analyse_ours(spark, raw)
        peers: dict[str, Any] = {}
        if args.peer in ("warm", "both"):
            peers["warm"] = run_peer(args, tmp, "warm", spark)
        spark.stop()  # idle while the cold peer's own sessions run
        spark = None
        if args.peer in ("cold", "both"):
            peers["cold"] = run_peer(args, tmp, "cold")
        res: dict[str, Any] = {
            "date": started.isoformat(timespec="seconds"), "machine": f"{os.cpu_count()} cores",
            "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "ours": ours, "peers": peers, "ratios": {n: ratios(ours, p) for n, p in peers.items()},
            "goals": {"rows_per_s": (ours["sustained_rows_per_s"] or 0) >= 20000,
                      "p50": ours["freshness_p50"] is not None and ours["freshness_p50"] < 60},
        }
        print_report(res)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=1, default=str))
        say(f"wrote {args.out}")
        return 0
    except BenchError as e:
        say(f"FAILED: {e}")
        return 1
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    finally:
        if spark is not None:
            spark.stop()
        stop_connect(cenv)
        try:
            W.drop_schema(D.HOST, D.PORT)
        except Exception as e:  # the schema is ours alone: a leftover is harmless, say so and go on
            say(f"could not drop {W.SCHEMA}: {e}")
        if args.keep:
            say(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
