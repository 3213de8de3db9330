"""A Spark standalone cluster started by scripts/spark-cluster.sh (fails, never skips, when it cannot start): the
script's own behaviour in the default suite (start, idempotent start, a dead worker and a dead master started
again, stop leaving nothing running), and with --long the pipeline on it: a driver in a pytest process of its own
whose `spark` session and pipeline config name the cluster (CANAL_TEST_SPARK_MASTER), so the executors in the
worker's JVMs, not the driver, read the staged windows and write the Delta tables. test_lake's changelog and mirror
tests (their expected tables written by hand; ~80 s here), then test_pipeline_e2e.py's three tests (~5 min):

    .venv/bin/python -m pytest --long tests/integration/test_spark_cluster.py
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.spark import MASTER_ENV
from tests.support.spark_cluster import ROOT, Cluster, spark_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with spark_cluster(tmp_path_factory.mktemp("spark-cluster")) as c:
        yield c


def _pytest_on(cluster: Cluster, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """pytest in a process of its own (one Spark driver per process) whose Spark master is the cluster."""
    env = {**os.environ, MASTER_ENV: cluster.url}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _wait_gone(pid: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid):
        assert time.monotonic() < deadline, f"pid {pid} still running"
        time.sleep(0.2)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:", 1)[1].split("\n", 1)[0]
    except (OSError, IndexError):
        return "zombie"


def test_script_start_is_idempotent_and_dead_workers_and_masters_are_started_again(cluster: Cluster) -> None:
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

    # the master dies: started again on its port, it recovers the running worker (FILESYSTEM recovery mode)
    worker = cluster.pid("worker-1")
    os.kill(master, signal.SIGKILL)
    _wait_gone(master)
    st = cluster.script("status")
    assert st.returncode == 1 and "running" not in st.stdout, st
    again = cluster.script("start")
    assert again.returncode == 0 and again.stdout.strip() == cluster.url, again.stderr
    assert cluster.pid("master") != master and cluster.pid("worker-1") == worker
    status = cluster.master_status()
    assert status["status"] == "ALIVE" and [w["state"] for w in status["workers"]] == ["ALIVE"], status


@pytest.mark.long  # ~80 s alone, 137 s in a full run: the suite's 30 minutes have no room for it
def test_the_lake_code_runs_on_the_clusters_executors(cluster: Cluster) -> None:
    before = cluster.executor_tasks()
    r = _pytest_on(cluster, "tests/integration/test_lake.py", "-k",
                   "test_changelog_is_idempotent or test_mirror_converges_and_replays_are_harmless", timeout=900)
    assert r.returncode == 0 and "2 passed" in r.stdout, r.stdout[-4000:] + r.stderr[-4000:]
    new = {app: n for app, n in cluster.executor_tasks().items() if app not in before}
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


def test_a_cluster_never_moves_off_its_recorded_port(tmp_path: Path) -> None:
    """Workers, executors and spark.master name the master's port: taken by another process at a start, it is an
    error that says what to do, and nothing is started."""
    import socket

    from tests.support.spark_cluster import SCRIPT

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        (tmp_path / "port").write_text(f"{port}\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("CANAL_SPARK_CLUSTER_")}
        r = subprocess.run([SCRIPT, "start"], env={**env, "CANAL_SPARK_CLUSTER_DIR": str(tmp_path)},
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and f"port {port} of this cluster" in r.stderr, r
    assert "CANAL_SPARK_CLUSTER_PORT=<free port>" in r.stderr
    assert not list(tmp_path.glob("*.pid")), list(tmp_path.iterdir())
