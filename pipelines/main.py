"""The main job: the demo shop on the private MariaDB, mirrored into Delta Lake by the Dagster pipeline.

    python -m pipelines.main [--reset] [--rate TX_PER_S] [--port 3000]
        dagster dev (UI + daemon) with the canal sensor running and a steady demo workload, until Ctrl-C
    python -m pipelines.main --headless [--seconds 60] [--timeout 900]
        the same, but the workload stops after --seconds; then waits until every mirror equals its source
        (row counts and the reconciliation fingerprints), prints them side by side and exits 0, or 1 on
        timeout

scripts/run.sh sets up the machine and calls this. The first start (or --reset) creates the demo schema
and starts from empty pipeline state: the canal destination begins at the binlog end, every table is
loaded by a consistent snapshot, the stream continues from each snapshot's position.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .config import REPO_ROOT, PipelineConfig, load_config

DAGSTER_HOME = REPO_ROOT / "dagster_home"


def _say(msg: str) -> None:
    print(f"[pipeline] {msg}", flush=True)


def reset_state(cfg: PipelineConfig) -> None:
    """Forget everything the pipeline wrote: lake (local roots only), staging, state, Dagster storage and
    the canal destination's cursor and schema history."""
    root = cfg.lake_root
    if "://" in root and not root.startswith("file:"):
        raise SystemExit(f"--reset refuses to delete a remote lake ({root}): empty it yourself")
    for p in (Path(root.removeprefix("file:")), cfg.staging_root, cfg.state_dir, REPO_ROOT / ".runtime" / "dagster"):
        shutil.rmtree(p, ignore_errors=True)
    inst = cfg.instance_config()
    data_dir = Path(inst.data_dir)
    for name in ("meta.dat", "parse.dat", "history", "group-positions.json"):
        p = data_dir / name
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        elif p.exists():
            p.unlink()


def _source_conn(cfg: PipelineConfig, admin: bool = False) -> Any:
    import pymysql

    kw = dict(cfg.conn_kwargs())
    if admin:  # the demo workload writes; the canal account only reads
        kw.update(user="canal_admin", password="canal_admin")
    kw.setdefault("autocommit", True)
    return pymysql.connect(**kw)


def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    fh = open(log, "ab")  # the child writes to it; our copy closes with the process
    return subprocess.Popen(args, cwd=REPO_ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop(proc: subprocess.Popen[bytes] | None, timeout: float = 30) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def compare(cfg: PipelineConfig, spark: Any, tables: list[str]) -> list[tuple[str, int, int | None, bool]]:
    """(table, source rows, mirror rows, fingerprints equal) for each table (mirror rows None: no mirror yet). The
    fingerprints count every row, so the mirror of a table without a primary key is compared as a multiset."""
    from .lake import Lake
    from .reconcile import dataframe_fingerprint, source_fingerprint
    from .snapshot import table_columns

    lake = Lake(cfg.lake_root)
    out = []
    conn = _source_conn(cfg)
    try:
        for name in tables:
            schema, table = name.split(".", 1)
            with conn.cursor() as cur:
                columns = table_columns(cur, schema, table)
            src = source_fingerprint(cfg.conn_kwargs(), schema, table, columns)
            try:
                df = spark.read.format("delta").load(lake.mirror_path(schema, table))
            except Exception:
                out.append((name, src.count, None, False))
                continue
            mir = dataframe_fingerprint(df, columns)
            out.append((name, src.count, mir.count, (src.count, src.checksum) == (mir.count, mir.checksum)))
    finally:
        conn.close()
    return out


def _print_table(rows: list[tuple[str, int, int | None, bool]]) -> None:
    w = max([len(r[0]) for r in rows] + [5])
    print(f"{'table':<{w}}  {'MySQL rows':>10}  {'Delta rows':>10}  fingerprints", flush=True)
    for name, s, m, same in rows:
        verdict = "equal" if same else "no mirror yet" if m is None else "DIFFERENT"
        print(f"{name:<{w}}  {s:>10}  {'-' if m is None else m:>10}  {verdict}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipelines.main", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--headless", action="store_true")
    ap.add_argument("--reset", action="store_true", help="drop the demo schema and all pipeline state first")
    ap.add_argument("--rate", type=float, default=20.0, help="demo workload: transactions per second")
    ap.add_argument("--seconds", type=float, default=60.0, help="--headless: how long the workload runs")
    ap.add_argument("--timeout", type=float, default=900.0, help="--headless: how long to wait for convergence")
    ap.add_argument("--port", type=int, default=3000, help="the Dagster UI port")
    args = ap.parse_args(argv)

    cfg = load_config()
    from . import demo

    fresh = args.reset or not cfg.state_dir.exists()
    conn = _source_conn(cfg, admin=True)
    try:
        if fresh:
            _say("fresh start: creating the demo schema and empty pipeline state")
            reset_state(cfg)
            demo.create(conn)
        counts = demo.counts(conn)
    finally:
        conn.close()
    _say("source: " + ", ".join(f"{k}={v}" for k, v in counts.items()))
    cfg.state_dir.mkdir(parents=True, exist_ok=True)

    env = dict(os.environ)
    env.setdefault("DAGSTER_HOME", str(DAGSTER_HOME))
    logs = REPO_ROOT / ".runtime" / "pipeline" / "logs"
    m = cfg.conn_kwargs()
    workload_cmd = [sys.executable, "-m", "pipelines.demo", "workload", "--host", m["host"], "--port", str(m["port"]),
                    "--rate", str(args.rate)]
    if args.headless:
        workload_cmd += ["--seconds", str(args.seconds)]
    dagster = [str(Path(sys.executable).with_name("dagster")), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1",
               "-p", str(args.port)]
    dev = work = None
    try:
        dev = _spawn(dagster, env, logs / "dagster-dev.log")
        _say(f"Dagster UI: http://127.0.0.1:{args.port}  (DAGSTER_HOME={env['DAGSTER_HOME']}, "
             f"log {logs}/dagster-dev.log)")
        work = _spawn(workload_cmd, env, logs / "workload.log")
        _say(f"demo workload: {args.rate:g} transactions/s (log {logs}/workload.log)")
        if not args.headless:
            _say("the canal sensor is on; Ctrl-C stops everything")
            while dev.poll() is None:
                time.sleep(1)
            _say(f"dagster dev exited with {dev.returncode}")
            return dev.returncode or 1
        return _headless(cfg, args, dev, work)
    except KeyboardInterrupt:
        return 130
    finally:
        _stop(work)
        _stop(dev, 60)


def _headless(cfg: PipelineConfig, args: argparse.Namespace, dev: subprocess.Popen[bytes],
              work: subprocess.Popen[bytes]) -> int:
    from canal_core.sparkenv import quiet_delta_scan_noise, spark_session_builder

    from . import demo

    work.wait(args.seconds + 120)
    _say(f"workload finished (exit {work.returncode}); waiting for the mirrors to catch up")
    tables = [f"{demo.SCHEMA}.{t}" for t in demo.TABLES]
    spark = spark_session_builder("canal-pipeline-headless", master="local[1]").getOrCreate()
    quiet_delta_scan_noise(spark)
    try:
        deadline = time.monotonic() + args.timeout
        rows: list[tuple[str, int, int | None, bool]] = []
        while time.monotonic() < deadline:
            if dev.poll() is not None:
                _say(f"dagster dev exited with {dev.returncode}: see .runtime/pipeline/logs/dagster-dev.log")
                return 1
            rows = compare(cfg, spark, tables)
            if all(r[3] for r in rows):
                _print_table(rows)
                _say("caught up: every mirror equals its source")
                return 0
            _say("not yet: " + ", ".join(f"{r[0]} {r[1]}/{'-' if r[2] is None else r[2]}" for r in rows))
            time.sleep(15)
        _print_table(rows)
        _say(f"timed out after {args.timeout:.0f} s")
        return 1
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
