"""README's run command, headless: `scripts/run.sh --headless --reset` sets up, creates the demo shop, starts the
pipeline's processes (code server, webserver, daemon: the canal sensor launches real runs in their own processes)
and a demo workload, and exits 0 once every mirror equals its source by the reconciliation fingerprints, its
terminal output free of Spark's JVM console lines. Then the mirrors read by Spark are compared with SELECTs row
by row."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pipelines.engine.config import REPO_ROOT, load_config
from pipelines.engine.lake import Lake
from pipelines.engine.reconcile import table_columns
from tests.integration.pipeline_driver import mirror_multiset, mirror_rows, source_multiset, source_rows
from tests.support.net import free_port
from tests.support.spark_cluster import spark_cluster

pytestmark = pytest.mark.integration


@pytest.mark.timeout(1800)
def test_run_command_headless_converges(mariadb_settings: Any, spark: Any) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CANAL_PIPELINE_", "DAGSTER_HOME"))}
    proc = subprocess.run(["scripts/run.sh", "--headless", "--reset", "--seconds", "30", "--rate", "10",
                           "--port", str(free_port()), "--timeout", "1200"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1700)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "caught up: every mirror equals its source" in out
    # the headless check's own Spark JVM keeps its console lines to .runtime/pipeline/logs/headless-spark.log
    noise = re.findall(r"^.*(?:log4j|Setting default log level|NativeCodeLoader|:: loading settings).*$", out,
                       re.MULTILINE)
    assert noise == [], noise
    rows = re.findall(r"^(canal_demo\.\w+)\s+(\d+)\s+(\d+|-)\s+(.+)$", proc.stdout, re.MULTILINE)
    assert {r[0] for r in rows} == {"canal_demo.customers", "canal_demo.orders", "canal_demo.order_items",
                                    "canal_demo.page_views"}, proc.stdout
    for name, src, mir, verdict in rows:  # page_views (no primary key) too: its mirror is a multiset of rows
        assert src == mir and verdict == "equal", (name, src, mir, verdict)
        assert int(src) > 0

    # Spark reads of the mirrors == SELECTs, row by row
    cfg = load_config(REPO_ROOT / "conf" / "pipeline.yaml", env={})
    lake = Lake(cfg.lake_root)
    for table in ("customers", "orders", "order_items"):
        cols = table_columns(mariadb_settings.repl_kwargs(), "canal_demo", table)
        assert mirror_rows(spark, lake.mirror_path("canal_demo", table), cols) == \
            source_rows(mariadb_settings, "canal_demo", table, cols), table
    # page_views has no key: every row, identical rows included, as a sorted list
    cols = table_columns(mariadb_settings.repl_kwargs(), "canal_demo", "page_views")
    views = source_multiset(mariadb_settings, "canal_demo", "page_views", cols)
    assert mirror_multiset(spark, lake.mirror_path("canal_demo", "page_views"), cols) == views
    assert len(set(views)) < len(views), "the demo workload left no identical page views"


@pytest.mark.long  # ~6 min here; tests/integration/test_spark_cluster.py covers the lake code on a cluster in the suite
@pytest.mark.timeout(1800)
def test_run_command_headless_on_a_spark_cluster(mariadb_settings: Any, tmp_path: Path) -> None:
    """The same command with conf/pipeline.yaml's spark.master naming a standalone cluster (scripts/spark-cluster.sh):
    the main job's Connect server is the cluster's one application, its executors write the mirrors."""
    import yaml

    with spark_cluster(tmp_path / "cluster") as cluster:
        data = yaml.safe_load((REPO_ROOT / "conf" / "pipeline.yaml").read_text())
        data["base_dir"] = str(REPO_ROOT)
        data.setdefault("spark", {})["master"] = cluster.url
        conf = tmp_path / "pipeline.yaml"
        conf.write_text(yaml.safe_dump(data))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CANAL_PIPELINE_", "DAGSTER_HOME"))}
        proc = subprocess.run(["scripts/run.sh", "--headless", "--reset", "--seconds", "30", "--rate", "10",
                               "--port", str(free_port()), "--timeout", "1200"],
                              cwd=REPO_ROOT, env={**env, "CANAL_PIPELINE_CONF": str(conf)}, capture_output=True,
                              text=True, timeout=1700)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-4000:]
        assert "caught up: every mirror equals its source" in out
        assert f"(a Connect server of this job, master {cluster.url})" in out, out[-4000:]
        apps = {a["id"]: a["name"] for a in cluster.master_status()["completedapps"]}
        assert sorted(apps.values()) == ["canal-pipeline-connect"], apps  # one application for every run
        tasks = cluster.executor_tasks()
        assert tasks[next(iter(apps))] > 20, tasks
