"""A Spark standalone cluster for tests: scripts/spark-cluster.sh in a directory of the test's own, on free ports."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.net import free_port

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "scripts" / "spark-cluster.sh")


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
        import urllib.request

        ui = (self.dir / "ui-port").read_text().strip()
        with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=10) as r:
            return dict(json.load(r))

    def executor_tasks(self) -> dict[str, int]:
        """Tasks each application's executors ran, from their logs in the workers' directories."""
        out: dict[str, int] = {}
        for app in sorted((self.dir / "work").glob("worker-*/app-*")):
            out[app.name] = sum(f.read_text(errors="replace").count("Executor: Running task")
                                for f in app.glob("*/stderr"))
        return out

    def processes(self) -> list[int]:
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


@contextmanager
def spark_cluster(directory: Path) -> Iterator[Cluster]:
    """Started (a failed start fails the test, never skips it), stopped afterwards with nothing left running."""
    env = {**os.environ, "CANAL_SPARK_CLUSTER_DIR": str(directory), "CANAL_SPARK_CLUSTER_PORT": str(free_port()),
           "CANAL_SPARK_CLUSTER_UI_PORT": str(free_port())}
    c = Cluster(directory, env, "")
    r = c.script("start")
    if r.returncode != 0:
        c.script("stop")
        pytest.fail(f"scripts/spark-cluster.sh start failed (exit {r.returncode}):\n{r.stderr[-4000:]}")
    c.url = r.stdout.strip().splitlines()[-1]
    try:
        yield c
    finally:
        r = c.script("stop")
        left = c.processes()
        assert r.returncode == 0 and not left, (r.stderr, left)
