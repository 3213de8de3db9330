"""bench/recovery: how the pipeline comes back from a SIGKILL of its code server, and how long a run whose worker
died with it stays in flight, for three ways of running it:

    .venv/bin/python bench/recovery.py [--topology main|main-daemon-kept|dev] [--trials 3] [--wait 300]

* ``main``: the main job's processes (pipelines/cli/deployment.py under pipelines/cli/supervisor.py, as scripts/run.sh
  runs them): the code server restarted with backoff, the daemon stopped while it is down and started once it
  serves again.
* ``main-daemon-kept``: the same, but the daemon keeps running through the code server's restart (it then sees the
  new code server at its next sensor tick, or after its next workspace refresh when one failed meanwhile).
* ``dev``: ``dagster dev`` with the project's workspace.yaml, as scripts/run.sh ran it before: its code server is a
  proxy that spawns the real one (``dagster api grpc``); that one is killed.

Each on the demo shop (pipelines/cli/demo.py, schema canal_demo on the private MariaDB, 5 transactions/s) with a
temporary pipeline.yaml, Canal conf and DAGSTER_HOME (the project's dagster.yaml: run monitoring every 10 s).
Trials: "code server" kills the code server at a random moment once the pipeline runs windows and measures kill ->
serving again (main only), -> the first sensor tick evaluated after it (SUCCESS or SKIPPED), -> the first window run
created after it that succeeded; "worker" waits for a window run in flight, kills its code server and its worker
together (a host crash) and measures kill -> that run FAILED (by run monitoring) -> the window's retry succeeded.
Nothing is reloaded by hand; --wait bounds every wait ("none within" when it passes).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import pipeline_dagster as DG  # noqa: E402

from pipelines.cli import demo, deployment  # noqa: E402
from pipelines.cli.supervisor import Service, Supervisor  # noqa: E402
from pipelines.defs.launcher import run_worker  # noqa: E402
from pipelines.engine.processes import read_stat, session_members  # noqa: E402

RATE = 5.0


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def wait(cond: Callable[[], Any], timeout: float, step: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(step)
    return None


class Pipeline:
    """The demo destination on a temporary config, run one of the three ways."""

    def __init__(self, root: Path, topology: str) -> None:
        self.root, self.topology = root, topology
        port = demo.private_mariadb_port()
        if port is None:
            raise SystemExit("no private MariaDB: run scripts/setup.sh")
        conf = root / "conf"
        (conf / "demo").mkdir(parents=True)
        shutil.copy(ROOT / "conf" / "canal.properties", conf / "canal.properties")
        (conf / "demo" / "instance.properties").write_text(
            (ROOT / "conf" / "demo" / "instance.properties").read_text()
            + f"canal.instance.mysql.slaveId = {random.randint(1 << 20, (1 << 31) - 1)}\n")
        import yaml

        cfg = yaml.safe_load((ROOT / "conf" / "pipeline.yaml").read_text())
        cfg["canal"]["conf_dir"] = str(conf)
        cfg["paths"] = {"staging": str(root / "staging"), "state": str(root / "pipeline" / "state")}
        cfg["lake"]["root"] = str(root / "lake")
        (root / "pipeline.yaml").write_text(yaml.safe_dump(cfg))
        self.home = root / "home"
        DG.write_home(self.home)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("CANAL_PIPELINE_", "DAGSTER_HOME"))}
        self.env.update(CANAL_PIPELINE_CONF=str(root / "pipeline.yaml"), DAGSTER_HOME=str(self.home),
                        PRIVATE_MARIADB_PORT=str(port))
        conn = demo.connect(port=port)
        try:
            demo.create(conn)
        finally:
            conn.close()
        workload = [sys.executable, "-m", "pipelines.cli.demo", "workload", "--port", str(port), "--rate", str(RATE)]
        # the storage exists before any Dagster process starts: processes creating a fresh SQLite storage at once
        # race on its schema version ("more than one head"), and dagster dev does not recover from that
        self.instance = DG.instance(self.home)
        self.sup = Supervisor(lambda m: say(f"  {m}"), ROOT)
        self.dev: subprocess.Popen[bytes] | None = None
        if topology == "dev":
            self.sup.add(Service(deployment.WORKLOAD, workload, root / "workload.log", self.env))
            with open(root / "dagster-dev.log", "ab") as log:
                self.dev = subprocess.Popen([str(deployment.BIN / "dagster"), "dev", "-w", "workspace.yaml", "-h",
                                             "127.0.0.1", "-p", str(DG.free_port())], cwd=ROOT, env=self.env,
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        else:
            deployment.build(self.sup, deployment.Layout(root / "pipeline"), self.env, DG.free_port(), workload,
                             workload_ends=False)
            if topology == "main-daemon-kept":
                self.sup.services[deployment.DAEMON].stops_with = False
        self.sup.start()

    def code_server(self) -> int | None:
        """The real code server (``dagster api grpc``), whoever started it."""
        if self.topology != "dev":
            return self.sup.services[deployment.CODE_SERVER].pid
        assert self.dev is not None
        for st in session_members([self.dev.pid]):
            cmd = Path(f"/proc/{st.pid}/cmdline").read_bytes().split(b"\0")
            if b"api" in cmd and b"grpc" in cmd:
                return st.pid
        return None

    def window_runs(self, after: float = 0.0, status: str | None = None) -> list[Any]:
        return [r for r in self.instance.get_run_records() if r.dagster_run.job_name == "canal_window"
                and r.create_timestamp.timestamp() > after and (status is None or r.dagster_run.status.value == status)]

    def evaluated_tick(self, after: float) -> float | None:
        from dagster._core.definitions.run_request import InstigatorType
        from dagster._core.scheduler.instigation import TickStatus

        for st in self.instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
            for t in self.instance.get_ticks(st.instigator_origin_id, st.selector_id, limit=20):
                if t.timestamp > after and t.status in (TickStatus.SUCCESS, TickStatus.SKIPPED):
                    return float(t.timestamp)
        return None

    def close(self) -> None:
        self.sup.shutdown(deployment.STOP_STAGES)
        if self.dev is not None:
            DG.stop(self.dev)
            for st in session_members([self.dev.pid]):  # run workers outliving their code server
                os.kill(st.pid, signal.SIGKILL)
        self.instance.dispose()


def _succeeded_after(p: Pipeline, t: float, timeout: float) -> float | None:
    def done() -> float | None:
        ok = [r.end_time for r in p.window_runs(after=t, status="SUCCESS") if r.end_time]
        return min(ok) if ok else None
    return wait(done, timeout, 2)


def code_server_trial(p: Pipeline, timeout: float) -> dict[str, float | None]:
    time.sleep(random.uniform(0, 30))  # a random phase of the sensor interval and of the runs
    pid = p.code_server()
    assert pid is not None, "no code server"
    os.kill(pid, signal.SIGKILL)
    t0 = time.time()
    out: dict[str, float | None] = {}
    if p.topology != "dev":
        cs = p.sup.services[deployment.CODE_SERVER]
        out["serving"] = wait(lambda: cs.pid not in (None, pid) and cs.is_ready and time.time(), timeout, 0.2)
    out["tick"] = wait(lambda: p.evaluated_tick(t0), timeout)
    out["run"] = _succeeded_after(p, t0, timeout) if out["tick"] is not None else None
    return {k: (v - t0 if v is not None else None) for k, v in out.items()}


def worker_trial(p: Pipeline, timeout: float) -> dict[str, float | None]:
    runs = wait(lambda: p.window_runs(status="STARTED"), timeout, 0.5)
    if not runs:
        return {"failed": None, "retried": None}
    run = runs[0].dagster_run
    worker = wait(lambda: run_worker(p.instance, run.run_id), 60)
    cs = p.code_server()
    for pid in (cs, worker.pid if worker else None):
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
    t0 = time.time()

    def finished() -> float | None:
        r = p.instance.get_run_record_by_id(run.run_id)
        return time.time() if r is not None and r.dagster_run.is_finished else None

    failed = wait(finished, timeout)
    retried = _succeeded_after(p, t0, timeout) if failed else None
    return {"failed": failed - t0 if failed else None, "retried": retried - t0 if retried else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/recovery.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topology", choices=["main", "main-daemon-kept", "dev"], default="main")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--wait", type=float, default=300.0, help="longest wait for each step of a trial")
    ap.add_argument("--kinds", default="code-server,worker")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="bench-recovery-"))
    say(f"{args.topology}: starting under {root}")
    p = Pipeline(root, args.topology)
    results: list[tuple[str, dict[str, float | None]]] = []
    try:
        if not wait(lambda: p.window_runs(status="SUCCESS"), 900, 2):
            raise SystemExit(f"no window run succeeded within 900 s (logs under {root})")
        say("the pipeline runs windows")
        for i in range(args.trials):
            for kind in args.kinds.split(","):
                r = code_server_trial(p, args.wait) if kind == "code-server" else worker_trial(p, args.wait)
                results.append((kind, r))
                say(f"trial {i + 1} {kind}: " + ", ".join(
                    f"{k} " + (f"none within {args.wait:.0f} s" if v is None else f"{v:.1f} s") for k, v in r.items()))
                if any(v is None for v in r.values()):
                    say("no recovery: later trials would start from a stuck pipeline")
                    return 1
    finally:
        p.close()
        alive = [pid for pid in (p.code_server(),) if pid is not None and read_stat(pid) is not None]
        if alive:
            say(f"left running: {alive}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
