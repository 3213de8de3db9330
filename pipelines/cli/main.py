"""The main job: the demo shop on the private MariaDB, mirrored into Delta Lake by the Dagster pipeline.

    python -m pipelines.cli.main [--reset] [--rate TX_PER_S] [--port 3000] [--spark server|per-run]
        the pipeline (code server, webserver = the UI, daemon, a Spark Connect server for the runs:
        pipelines/cli/deployment.py) with the canal sensor running and a steady demo workload, until SIGINT
        (Ctrl-C) or SIGTERM
    python -m pipelines.cli.main --no-demo [--port 3000]
        the pipeline only, on whatever writes the destination's tables (no demo schema, no demo workload)
    python -m pipelines.cli.main --headless [--seconds 60] [--timeout 900]
        the same, but the workload stops after --seconds; then waits until every mirror equals its source
        (row counts and the reconciliation fingerprints), prints them side by side and exits 0, or 1 on
        timeout

scripts/run.sh sets up the machine and calls this. The first start (or --reset) creates the demo schema
and starts from empty pipeline state: the canal destination begins at the binlog end, every table is
loaded by a consistent snapshot, the stream continues from each snapshot's position.

Every process is supervised: one that dies is restarted with backoff and the terminal says so (a killed code
server is serving again within seconds, the sensor ticking within one interval after that). SIGINT or SIGTERM
stops all of them, run workers and the Spark server (or the runs' own JVMs) included, within
STOP_BOUND_SECONDS (a second signal: at once), and the destination's lock is released with its code server. The
demo destination reads the private MariaDB's port from PRIVATE_MARIADB_PORT (conf/demo/instance.properties),
which this job takes from the instance's my.cnf (scripts/mariadb.sh keeps it across restarts) and passes to
every process it starts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from ..engine.config import REPO_ROOT, PipelineConfig, load_config
from . import deployment
from .supervisor import Supervisor

DAGSTER_HOME = REPO_ROOT / "dagster_home"
PORT_VARIABLE = "PRIVATE_MARIADB_PORT"  # named by conf/demo/instance.properties
STOP_BOUND_SECONDS = 60  # 2 stop stages x 20 s grace + SIGKILL + reaping, with room
SERVER_MEMORY = "2g"     # the Spark Connect server's heap (CANAL_SPARK_DRIVER_MEMORY or spark.conf override it)

_terminal: TextIO = sys.stdout
_terminal_lock = threading.Lock()


def _say(msg: str) -> None:
    with _terminal_lock:
        _terminal.write(f"[pipeline] {msg}\n")
        _terminal.flush()


def _keep_terminal() -> None:
    """Our own copy of the terminal (fd 1): lines reach it while fds 1 and 2 are lent to the headless JVM."""
    global _terminal
    _terminal = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8", errors="replace")


class Stopped(BaseException):
    """SIGINT or SIGTERM: stop everything (BaseException: no ``except Exception`` on the way swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum: int, _frame: Any) -> None:
    raise Stopped(signum)


def dagster_storage_dirs(home: Path) -> list[Path]:
    """The local directories of the Dagster instance at ``home`` (its dagster.yaml's sqlite storage, artifact and
    compute-log directories; relative ones resolve against the repository root, where its processes run)."""
    import yaml

    f = home / "dagster.yaml"
    cfg = (yaml.safe_load(f.read_text()) or {}) if f.is_file() else {}
    found = [((cfg.get("storage") or {}).get("sqlite") or {}).get("base_dir"),
             ((cfg.get("local_artifact_storage") or {}).get("config") or {}).get("base_dir"),
             ((cfg.get("compute_logs") or {}).get("config") or {}).get("base_dir")]
    return [REPO_ROOT / d for d in found if isinstance(d, str) and d]


def reset_state(cfg: PipelineConfig, dagster_home: Path) -> None:
    """Forget everything the pipeline wrote: lake (local roots only), staging, state, the Dagster instance's local
    storage and the canal destination's cursor and schema history."""
    root = cfg.lake_root
    if "://" in root and not root.startswith("file:"):
        raise SystemExit(f"--reset refuses to delete a remote lake ({root}): empty it yourself")
    storage = dagster_storage_dirs(dagster_home)
    if not storage:
        _say(f"--reset: {dagster_home}/dagster.yaml names no local storage directory: its runs and sensor state stay")
    home = dagster_home.resolve()
    storage = [d for d in storage if not home.is_relative_to(d.resolve())]  # never the instance's own settings
    for p in storage:
        shutil.rmtree(p, ignore_errors=True)
    for one in cfg.per_destination():
        for p in (Path(one.lake_root.removeprefix("file:")), one.staging_root / one.destination, one.state_dir):
            shutil.rmtree(p, ignore_errors=True)
        data_dir = Path(one.instance_config().data_dir)
        for name in ("meta.dat", "parse.dat", "history", "group-positions.json"):
            p = data_dir / name
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            elif p.exists():
                p.unlink()


def _prepare_dagster_instance(home: Path) -> list[str]:
    """Create the instance's storage before its processes start: processes creating a fresh SQLite storage at the
    same moment race on its schema version (alembic: "more than one head"), and the loser fails to start. Then fail
    the runs a killed predecessor left STARTING (pipelines.defs.launcher.fail_orphaned_starting_runs); their ids.
    Relative paths in dagster.yaml resolve against the repository root, where the processes run."""
    from dagster import DagsterInstance

    from ..defs.launcher import fail_orphaned_starting_runs

    cwd = os.getcwd()
    os.chdir(REPO_ROOT)
    try:
        instance = DagsterInstance.from_config(str(home))
        try:
            return fail_orphaned_starting_runs(instance, home)
        finally:
            instance.dispose()
    finally:
        os.chdir(cwd)


def _private_mariadb_port() -> None:
    """PRIVATE_MARIADB_PORT for this process and every one it starts: the private MariaDB's port from its my.cnf,
    unless the environment names one (then said when it differs)."""
    from .demo import private_mariadb_port

    port = private_mariadb_port()
    given = os.environ.get(PORT_VARIABLE)
    if given:
        if port is not None and given != str(port):
            _say(f"{PORT_VARIABLE}={given} from the environment, not {port} (the private MariaDB's my.cnf)")
    elif port is not None:
        os.environ[PORT_VARIABLE] = str(port)


def _source_conn(cfg: PipelineConfig, admin: bool = False) -> Any:
    import pymysql

    kw = dict(cfg.conn_kwargs())
    if admin:  # the demo workload writes; the canal account only reads
        kw.update(user="canal_admin", password="canal_admin")
    kw.setdefault("autocommit", True)
    return pymysql.connect(**kw)


def compare(cfg: PipelineConfig, spark: Any, tables: list[str]) -> list[tuple[str, int, int | None, bool]]:
    """(table, source rows, mirror rows, fingerprints equal) for each table (mirror rows None: no mirror yet). The
    fingerprints count every row, so the mirror of a table without a primary key is compared as a multiset."""
    from ..engine.lake import Lake, is_delta_table
    from ..engine.reconcile import dataframe_fingerprint, source_fingerprint
    from ..engine.snapshot import table_columns

    lake = Lake(cfg.lake_root)
    out: list[tuple[str, int, int | None, bool]] = []
    conn = _source_conn(cfg)
    try:
        for name in tables:
            schema, table = name.split(".", 1)
            with conn.cursor() as cur:
                columns = table_columns(cur, schema, table)
            src = source_fingerprint(cfg.conn_kwargs(), schema, table, columns)
            path = lake.mirror_path(schema, table)
            if not is_delta_table(spark, path):  # (on Spark Connect a load is lazy: it would fail later)
                out.append((name, src.count, None, False))
                continue
            mir = dataframe_fingerprint(spark.read.format("delta").load(path), columns)
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
    ap = argparse.ArgumentParser(prog="python -m pipelines.cli.main", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--headless", action="store_true")
    ap.add_argument("--reset", action="store_true", help="drop the demo schema and all pipeline state first")
    ap.add_argument("--rate", type=float, default=20.0, help="demo workload: transactions per second")
    ap.add_argument("--seconds", type=float, default=60.0, help="--headless: how long the workload runs")
    ap.add_argument("--timeout", type=float, default=900.0, help="--headless: how long to wait for convergence")
    ap.add_argument("--port", type=int, default=3000, help="the Dagster UI port")
    ap.add_argument("--no-demo", action="store_true",
                    help="the pipeline only: no demo schema, no demo workload (another writer feeds the source)")
    ap.add_argument("--spark", choices=("server", "per-run"), default="server",
                    help="server (default): runs attach to a Spark Connect server this job starts and supervises "
                         "(unless the config names spark.remote), with the config's spark.master (local or a cluster); "
                         "per-run: each run starts its own Spark JVM (with a cluster master: its own application)")
    args = ap.parse_args(argv)
    if args.no_demo and args.headless:
        ap.error("--headless compares the demo tables: it cannot run with --no-demo")

    _keep_terminal()
    _private_mariadb_port()
    cfg = load_config()
    from . import demo

    layout = deployment.Layout(cfg.paths.state.parent)
    try:  # before anything is reset: another main job on this config must not lose its state
        deployment.check_free(layout, args.port)
    except deployment.DeploymentError as e:
        _say(str(e))
        return 2
    dagster_home = Path(os.environ.get("DAGSTER_HOME") or DAGSTER_HOME)
    every = cfg.per_destination()
    for one in every:   # several destinations (conf destinations:): each one's source
        inst = one.instance_config()
        _say(f"source{' of ' + one.destination if len(every) > 1 else ''}: MariaDB at {inst.master_address} "
             f"({inst.conf_file})")
    fresh = args.reset or not cfg.state_dir.exists()
    if args.no_demo:
        if fresh:
            _say("fresh start: empty pipeline state")
            reset_state(cfg, dagster_home)
    else:
        conn = _source_conn(cfg, admin=True)
        try:
            if fresh:
                _say("fresh start: creating the demo schema and empty pipeline state")
                reset_state(cfg, dagster_home)
                demo.create(conn)
            counts = demo.counts(conn)
        finally:
            conn.close()
        _say("source: " + ", ".join(f"{k}={v}" for k, v in counts.items()))
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    for run_id in _prepare_dagster_instance(dagster_home):
        _say(f"run {run_id} was left STARTING by processes that are gone: failed now, its window is retried")

    env = {**os.environ, "DAGSTER_HOME": str(dagster_home)}
    m = cfg.conn_kwargs()
    workload = None if args.no_demo else (
        [sys.executable, "-m", "pipelines.cli.demo", "workload", "--host", m["host"], "--port", str(m["port"]),
         "--rate", str(args.rate)] + (["--seconds", str(args.seconds)] if args.headless else []))
    spark = spark_server_for(cfg, args.spark)
    sup = Supervisor(_say, REPO_ROOT)
    try:
        deployment.build(sup, layout, env, args.port, workload, workload_ends=args.headless, spark=spark)
    except deployment.DeploymentError as e:
        _say(str(e))
        return 2
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _raise_stopped)
    rc = 1
    try:
        sup.start()
        _say(f"Dagster UI: http://127.0.0.1:{args.port}  (DAGSTER_HOME={dagster_home}, logs {layout.logs})")
        _say(f"Spark for the runs: {spark.url} (a Connect server of this job, master {spark.master})" if spark
             else f"Spark for the runs: {cfg.spark.remote} (spark.remote)" if cfg.spark.remote
             else f"Spark for the runs: a JVM per run, master {cfg.spark.master}")
        if workload is not None:
            _say(f"demo workload: {args.rate:g} transactions/s")
        if args.headless:
            rc = _headless(cfg, args, sup, layout, spark.url if spark else cfg.spark.remote)
        else:
            from ..defs.assets.keys import sensor_name

            names = ", ".join(sensor_name(one) for one in every)
            _say(f"the canal sensor{'s are' if len(every) > 1 else ' is'} on ({names}); Ctrl-C (or SIGTERM) stops "
                 "everything")
            while True:
                time.sleep(3600)
    except Stopped as e:
        _say(f"{e}: stopping every process of the pipeline")
        rc = 128 + e.signum
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: sup.hurry())
        t0 = time.monotonic()
        left = sup.shutdown(deployment.STOP_STAGES)
        if left:
            _say(f"still running after the stop: {left}")
        else:
            _say(f"stopped in {time.monotonic() - t0:.1f} s")
    return rc


def spark_server_for(cfg: PipelineConfig, mode: str) -> deployment.SparkServer | None:
    """The Connect server this job supervises: by default, unless the config already names one (spark.remote) or
    ``--spark per-run``. With a cluster master (spark://...) the server is the cluster's one long-lived application:
    its driver here, its executors on the workers, kept between windows instead of started for every run."""
    if mode == "per-run" or cfg.spark.remote:
        return None
    # one JVM serves every run (a window, a snapshot and a backfill may overlap): twice a run's own default
    memory = os.environ.get("CANAL_SPARK_DRIVER_MEMORY") or SERVER_MEMORY
    return deployment.SparkServer(port=_free_port(), master=cfg.spark.master,
                                  conf={"spark.driver.memory": memory, **cfg.spark.conf})


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _headless_spark(layout: deployment.Layout, remote: str) -> Any:
    if remote:
        # the classic builder with .remote(): it also switches pyspark.sql.functions to their Connect versions
        from pyspark.sql import SparkSession

        from ..engine.sparkenv import check_connect_reachable

        deadline = time.monotonic() + 300
        while True:  # the supervised server may be restarting
            try:
                check_connect_reachable(remote)  # else the client retries for minutes
                session = SparkSession.builder.remote(remote).getOrCreate()
                session.version  # noqa: B018 - the first round trip
                return session
            except Exception as e:  # grpc and pyspark raise several kinds: say it, retry until the deadline
                if time.monotonic() > deadline:
                    raise
                _say(f"Spark at {remote} not serving yet ({type(e).__name__}); retrying")
                time.sleep(5)
    from pipelines.engine.sparkenv import quiet_delta_scan_noise, spark_session_builder

    with _jvm_output_to(layout.logs / "headless-spark.log"):
        spark = spark_session_builder("canal-pipeline-headless", master="local[1]").getOrCreate()
    quiet_delta_scan_noise(spark)
    return spark


@contextmanager
def _jvm_output_to(log: Path) -> Iterator[None]:
    """Lend fds 1 and 2 to ``log`` while a JVM is launched: it inherits them (spark-submit's and log4j's console
    lines go to the log, not the terminal), and this process gets its own back."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def _headless(cfg: PipelineConfig, args: argparse.Namespace, sup: Supervisor, layout: deployment.Layout,
              remote: str) -> int:
    """Wait for the workload's end, then until every mirror equals its source; the mirrors are read through the
    Spark the runs use (``remote``: a Connect server), else a local JVM of this process's own."""
    from . import demo

    work = sup.services[deployment.WORKLOAD]
    deadline = time.monotonic() + args.seconds + 120
    while not work.done and time.monotonic() < deadline:
        time.sleep(1)
    _say(("" if work.done else "workload still running; ") + "waiting for the mirrors to catch up")
    tables = [f"{demo.SCHEMA}.{t}" for t in demo.TABLES]
    spark = _headless_spark(layout, remote)
    try:
        deadline = time.monotonic() + args.timeout
        rows: list[tuple[str, int, int | None, bool]] = []
        while time.monotonic() < deadline:
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
