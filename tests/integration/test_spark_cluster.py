"""The pipeline's lake code on a Spark standalone cluster: a master and a worker started by scripts/spark-cluster.sh
(fails, never skips, when it cannot start), the driver in a pytest process of its own whose `spark` session and
pipeline config name the cluster (CANAL_TEST_SPARK_MASTER), so the executors in the worker's JVMs, not the driver,
read the staged windows and write the Delta tables.

The default suite runs test_lake's changelog and mirror tests there (their expected tables are written by hand);
the e2e pipeline tests against the cluster are `long` (tests/integration/test_pipeline_e2e.py's three, ~5 min here):

    .venv/bin/python -m pytest --long tests/integration/test_spark_cluster.py
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.spark import MASTER_ENV

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "scripts" / "spark-cluster.sh")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    dir: Path
    env: dict[str, str]
    url: str

    def script(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run([SCRIPT, *args], env=self.env, capture_output=True, text=True, timeout=timeout)

    def pid(self, role: str) -> int:
        return int((self.dir / f"{role}.pid").read_text())

    def master_status(self) -> dict:
        ui = (self.dir / "ui-port").read_text().strip()
        with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=10) as r:
            return dict(json.load(r))

    def jvms(self) -> list[int]:
        """Processes still running in the cluster's directory: the master, workers, executors (their cwd)."""
        out = []
        for p in Path("/proc").glob("[0-9]*"):
            try:
                cwd = os.readlink(p / "cwd")
            except OSError:
                continue
            if cwd == str(self.dir) or cwd.startswith(f"{self.dir}/"):
                out.append(int(p.name))
        return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    d = tmp_path_factory.mktemp("spark-cluster")
    env = {**os.environ, "CANAL_SPARK_CLUSTER_DIR": str(d), "CANAL_SPARK_CLUSTER_PORT": str(_free_port()),
           "CANAL_SPARK_CLUSTER_UI_PORT": str(_free_port())}
    c = Cluster(d, env, "")
    r = c.script("start")
    if r.returncode != 0:
        c.script("stop")
        pytest.fail(f"scripts/spark-cluster.sh start failed (exit {r.returncode}):\n{r.stderr[-4000:]}")
    c.url = r.stdout.strip().splitlines()[-1]
    try:
        yield c
    finally:
        r = c.script("stop")
        left = c.jvms()
        assert r.returncode == 0 and not left, (r.stderr, left)


def _pytest_on(cluster: Cluster, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """pytest in a process of its own (one Spark driver per process) whose Spark master is the cluster."""
    env = {**os.environ, MASTER_ENV: cluster.url}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _executor_tasks(cluster: Cluster) -> dict[str, int]:
    """Tasks each application's executors ran, from their logs in the workers' directories."""
    out: dict[str, int] = {}
    for app in sorted((cluster.dir / "work").glob("worker-*/app-*")):
        out[app.name] = sum(f.read_text(errors="replace").count("Executor: Running task")
                            for f in app.glob("*/stderr"))
    return out


def test_script_start_is_idempotent_and_a_dead_worker_is_started_again(cluster: Cluster) -> None:
    assert cluster.url == f"spark://127.0.0.1:{cluster.env['CANAL_SPARK_CLUSTER_PORT']}"
    assert cluster.script("url").stdout.strip() == cluster.url
    st = cluster.script("status")
    assert st.returncode == 0 and "running" in st.stdout, st
    master, worker = cluster.pid("master"), cluster.pid("worker-1")
    status = cluster.master_status()
    assert status["status"] == "ALIVE" and [w["state"] for w in status["workers"]] == ["ALIVE"]
    # the REST submission server is off: nothing may submit jobs through it
    log = (cluster.dir / "master.log").read_text()
    assert "I have been elected leader" in log and "REST server" not in log

    again = cluster.script("start")
    assert again.returncode == 0 and again.stdout.strip() == cluster.url, again
    assert (cluster.pid("master"), cluster.pid("worker-1")) == (master, worker)

    os.kill(worker, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while cluster.script("status").returncode == 0:  # the master notices the lost worker (heartbeat timeout)
        assert time.monotonic() < deadline, "status still says running with the worker killed"
        time.sleep(1)
    st = cluster.script("status")
    assert st.returncode == 1 and "not answering" in st.stdout, st
    again = cluster.script("start")
    assert again.returncode == 0, again.stderr
    assert cluster.pid("master") == master and cluster.pid("worker-1") != worker
    assert cluster.script("status").returncode == 0


def test_the_lake_code_runs_on_the_clusters_executors(cluster: Cluster) -> None:
    before = _executor_tasks(cluster)
    r = _pytest_on(cluster, "tests/integration/test_lake.py", "-k",
                   "test_changelog_is_idempotent or test_mirror_converges_and_replays_are_harmless", timeout=900)
    assert r.returncode == 0 and "2 passed" in r.stdout, r.stdout[-4000:] + r.stderr[-4000:]
    new = {app: n for app, n in _executor_tasks(cluster).items() if app not in before}
    assert len(new) == 1 and next(iter(new.values())) > 20, new  # the driver's application, its tasks on executors
    (app,) = new
    done = {a["id"]: a for a in cluster.master_status().get("completedapps", [])}
    assert done[app]["name"] == "canal-core-tests" and done[app]["cores"] >= 1, done.get(app)


@pytest.mark.long
@pytest.mark.timeout(1800)
def test_the_e2e_pipeline_on_the_cluster(cluster: Cluster, mariadb_settings: object) -> None:
    # the random workload (snapshot, windows, a column added mid-stream, reconcile runs, replays), the failed run
    # left unacked and retried once, the backfill by time beside the live cursor
    r = _pytest_on(cluster, "tests/integration/test_pipeline_e2e.py", timeout=1700)
    assert r.returncode == 0 and "3 passed" in r.stdout, r.stdout[-4000:] + r.stderr[-4000:]
