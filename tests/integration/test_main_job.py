"""The main job (`python -m pipelines.cli.main`, what scripts/run.sh execs) with real processes, on a pipeline config,
Canal conf and DAGSTER_HOME of the test's own (the demo schema on the private MariaDB):

1. SIGKILL of the code server while a window run is in flight: the job restarts it and says so, the sensor ticks
   again within TICK_BOUND seconds and a window run launched after the kill succeeds within RUN_BOUND seconds, with
   nobody reloading anything (the in-flight run's worker survives its code server and finishes on its own). Marked
   `long` (scripts/test.sh --long): the chaos suite's short run covers the kill, without the bounds.
2. SIGTERM to the job while a window run is in flight, in both Spark modes (per-run with --long): within STOP_BOUND
   seconds no process it started is left (code server, webserver, daemon, workload, run workers, the Spark Connect
   server or the runs' own Spark JVMs), nothing listens on the UI port, the code server's socket or the Spark
   server's port, and the destination's lock is free. With the default Spark Connect server the run attached to it:
   the only JVM in the job's tree is that server.
"""

from __future__ import annotations

import fcntl
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from dagster import DagsterInstance, DagsterRunStatus
from dagster._core.definitions.run_request import InstigatorType
from dagster._core.scheduler.instigation import TickStatus

from pipelines.engine.processes import read_stat
from tests.integration.dagster_services import REPO_ROOT, instance_home
from tests.support.net import free_port

pytestmark = pytest.mark.integration

TICK_BOUND = 90.0    # restart backoff 1 s + code server load + daemon start + one sensor interval (30 s)
RUN_BOUND = 420.0    # the above, then one window run's Spark work on a loaded 2-core machine
STOP_BOUND = 60.0    # pipelines.cli.main.STOP_BOUND_SECONDS


def _config(root: Path, settings: Any) -> Path:
    """conf/pipeline.yaml and the demo destination's Canal conf, with every path under ``root``."""
    conf = root / "conf"
    (conf / "demo").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "conf" / "canal.properties", conf / "canal.properties")
    # a replica id of its own: two replicas with one id kick each other off the source
    (conf / "demo" / "instance.properties").write_text(
        (REPO_ROOT / "conf" / "demo" / "instance.properties").read_text()
        + f"canal.instance.mysql.slaveId = {random.randint(1 << 20, (1 << 31) - 1)}\n")
    cfg = yaml.safe_load((REPO_ROOT / "conf" / "pipeline.yaml").read_text())
    cfg["canal"]["conf_dir"] = str(conf)
    cfg["paths"] = {"staging": str(root / "staging"), "state": str(root / "pipeline" / "state")}
    cfg["lake"]["root"] = str(root / "lake")
    path = root / "pipeline.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _descendants(root_pid: int) -> dict[int, float]:
    """pid -> start time of every process below ``root_pid`` (by parent links) and of every process sharing a
    session with one of them (children their parents left behind)."""
    stats = [st for p in Path("/proc").iterdir() if p.name.isdigit() and (st := read_stat(int(p.name)))]
    children: dict[int, list[int]] = {}
    for st in stats:
        children.setdefault(st.ppid, []).append(st.pid)
    found, todo = set(), [root_pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in found:
                found.add(c)
                todo.append(c)
    sessions = {st.session for st in stats if st.pid in found}
    found |= {st.pid for st in stats if st.session in sessions and st.session != os.getsid(0)}
    return {st.pid: st.started_at for st in stats if st.pid in found and not st.exited}


def _alive(procs: dict[int, float]) -> list[str]:
    out = []
    for pid, started in procs.items():
        st = read_stat(pid)
        if st is not None and not st.exited and abs(st.started_at - started) < 0.05:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:150]
            out.append(f"{pid}: {cmd}")
    return out


class Job:
    def __init__(self, root: Path, settings: Any, spark: str = "server") -> None:
        self.root = root
        self.home = instance_home(root / "dagster")
        self.ui_port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CANAL_PIPELINE_", "DAGSTER_HOME"))}
        env.update(CANAL_PIPELINE_CONF=str(_config(root, settings)), DAGSTER_HOME=str(self.home),
                   PRIVATE_MARIADB_PORT=str(settings.port))
        self.out = root / "main.out"
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli.main", "--reset", "--rate", "5",
                                          "--port", str(self.ui_port), "--spark", spark], cwd=REPO_ROOT, env=env,
                                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._instance: DagsterInstance | None = None

    @property
    def instance(self) -> DagsterInstance:
        """Opened once the job has reset its storage and started its services."""
        if self._instance is None:
            self.wait("the job starting its services", lambda: "[pipeline] Dagster UI:" in self.text(), 120)
            self._instance = DagsterInstance.from_config(str(self.home))
        return self._instance

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def wait(self, what: str, cond: Any, timeout: float, step: float = 1.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            got = cond()
            if got:
                return got
            assert self.proc.poll() is None, f"the main job exited with {self.proc.returncode}:\n{self.text()[-4000:]}"
            if time.monotonic() > deadline:
                pytest.fail(f"{what}: not within {timeout:.0f} s\n{self.text()[-4000:]}")
            time.sleep(step)

    def window_runs(self, status: DagsterRunStatus | None = None, after: float = 0.0) -> list[Any]:
        recs = self.instance.get_run_records()
        return [r for r in recs if r.dagster_run.job_name == "canal_window" and r.create_timestamp.timestamp() > after
                and (status is None or r.dagster_run.status == status)]

    def evaluated_ticks(self, after: float) -> list[Any]:
        """Sensor ticks after ``after`` whose evaluation finished (SUCCESS or SKIPPED, not FAILURE)."""
        ticks = []
        for st in self.instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
            ticks += [t for t in self.instance.get_ticks(st.instigator_origin_id, st.selector_id, limit=20)
                      if t.timestamp > after and t.status in (TickStatus.SUCCESS, TickStatus.SKIPPED)]
        return ticks

    def child(self, marker: str) -> int:
        for pid in _descendants(self.proc.pid):
            try:
                if marker in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode():
                    return pid
            except FileNotFoundError:
                continue
        raise AssertionError(f"no process {marker!r} under the main job")

    def close(self) -> None:
        if self.proc.poll() is None:  # a failed test: stop it the way a user would
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_BOUND + 30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self._instance is not None:
            self._instance.dispose()


@pytest.fixture
def job(tmp_path: Path, mariadb_settings: Any, request: pytest.FixtureRequest) -> Any:
    j = Job(tmp_path, mariadb_settings, getattr(request, "param", "server"))
    yield j
    j.close()


def _jvms(tree: dict[int, float]) -> list[str]:
    """The full command lines of the Spark JVMs among ``tree``'s live processes."""
    out = []
    for pid in tree:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "org.apache.spark.deploy.SparkSubmit" in cmd:
            out.append(cmd)
    return out


@pytest.mark.long  # the chaos suite's short run (test_chaos.py) kills the code server too, without these bounds
@pytest.mark.timeout(1500)
def test_main_job_heals_a_killed_code_server(job: Job) -> None:
    # a window run in flight, then SIGKILL of the code server
    job.wait("a window run STARTED", lambda: job.window_runs(DagsterRunStatus.STARTED), 400)
    code_server = job.child("api grpc")
    os.kill(code_server, signal.SIGKILL)
    t_kill, wall_kill = time.monotonic(), time.time()
    job.wait("the job saying it restarts the code server",
             lambda: re.search(r"code server was killed by SIGKILL after \S+; restarting in 1 s", job.text()), 30)
    job.wait("the code server serving again", lambda: job.text().count("] code server ready (pid") >= 2, 120)
    t_serving = time.monotonic() - t_kill
    job.wait("a sensor tick evaluated after the kill", lambda: job.evaluated_ticks(wall_kill), TICK_BOUND + 60)
    t_tick = time.monotonic() - t_kill
    job.wait("a window run launched after the kill SUCCEEDED",
             lambda: job.window_runs(DagsterRunStatus.SUCCESS, after=wall_kill), RUN_BOUND + 120, step=2)
    t_run = time.monotonic() - t_kill
    print(f"code server SIGKILLed -> serving again after {t_serving:.1f} s, sensor tick evaluated after {t_tick:.1f} s,"
          f" a new window run succeeded after {t_run:.1f} s")
    assert t_tick <= TICK_BOUND, t_tick
    assert t_run <= RUN_BOUND, t_run
    assert code_server != job.child("api grpc")


@pytest.mark.timeout(900)
# per-run (a JVM per run, not the default) is long: its run's own JVM gone after the stop is the difference
@pytest.mark.parametrize("job", ["server", pytest.param("per-run", marks=pytest.mark.long)], indirect=True)
def test_main_job_stops_everything_on_sigterm(job: Job, tmp_path: Path) -> None:
    server = re.search(r"Spark for the runs: sc://127\.0\.0\.1:(\d+) \(a Connect server of this job",
                       job.wait("the job naming its Spark", lambda: "Spark for the runs:" in job.text() and job.text(),
                                120))
    job.wait("a window run STARTED", lambda: job.window_runs(DagsterRunStatus.STARTED), 400)
    if server is None:  # per-run: the run's worker starts its own JVM
        assert "Spark for the runs: a JVM per run, master local[2]" in job.text()
        job.wait("the run's own Spark JVM", lambda: _jvms(_descendants(job.proc.pid)), 120)
    tree = _descendants(job.proc.pid)
    jvms = _jvms(tree)
    if server is not None:  # the run attached to the job's Connect server: no JVM of its own
        assert len(jvms) == 1 and "SparkConnectServer" in jvms[0], [j[-300:] for j in jvms]
    assert jvms and len(tree) >= 6, _alive(tree)
    lock = tmp_path / "conf" / "demo" / "pipeline.lock"  # canal.file.data.dir = ${canal.conf.dir}
    code_socket = tmp_path / "pipeline" / "code-server.sock"  # beside paths.state
    assert lock.exists() and code_socket.exists()
    job.proc.send_signal(signal.SIGTERM)
    t_term = time.monotonic()
    rc = job.proc.wait(STOP_BOUND + 30)
    took = time.monotonic() - t_term
    print(f"SIGTERM -> main job exited {rc} after {took:.1f} s; {len(tree)} processes stopped")
    assert rc == 128 + signal.SIGTERM, job.text()[-3000:]
    assert took <= STOP_BOUND, took
    assert _alive(tree) == [], _alive(tree)
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", job.ui_port)) != 0, "something still listens on the UI port"
    with socket.socket(socket.AF_UNIX) as s:
        assert s.connect_ex(str(code_socket)) != 0, "something still listens on the code server's socket"
    if server is not None:
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", int(server.group(1)))) != 0, "the Spark server's port still listens"
    with open(lock, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError while a process holds it
    assert "[pipeline] SIGTERM: stopping every process of the pipeline" in job.text()
