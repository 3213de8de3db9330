"""The chaos run's own world under one directory: a MariaDB instance of its own (restarting it disturbs nothing
else), the Canal destination reading it, the pipeline's configuration and a DAGSTER_HOME.

The pipeline configuration is the project's, tuned for a short run on a small machine: a sensor tick every 5 s,
windows of at most 2000 rows, a failed window retried after 1 s (doubling to at most 10 s), a run request that
never shows up given up after 120 s (not 600 s), no reconciliation riding along with the windows (the suite
compares every mirror itself). The Dagster instance is the project's dagster_home/dagster.yaml (same run launcher,
queue and run monitoring) with its storage moved under the run's directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
import yaml

from tests.integration.binlog_end import binlog_end

REPO_ROOT = Path(__file__).resolve().parents[2]
MARIADB_SCRIPT = REPO_ROOT / "scripts" / "mariadb.sh"
DESTINATION = "chaos"
SCHEMA = "canal_chaos"

PIPELINE_SETTINGS: dict[str, Any] = {
    "window": {"max_rows": 20000, "max_wait_seconds": 1, "stage_ahead": True},
    "sensor": {"interval_seconds": 5, "backoff_seconds": 1, "backoff_max_seconds": 10,
               "launch_timeout_seconds": 120, "max_run_seconds": 600, "reconcile_interval_seconds": 0},
}


class ChaosSetupError(RuntimeError):
    """The suite could not set up or drive its environment: the message says what failed and where to look."""


def mariadb_script(*args: str, env: dict[str, str] | None = None,
                   timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """scripts/mariadb.sh with ``env`` over an environment without MARIADB_* settings (and without CI, which lets
    the script move a taken port: the suite's instance keeps the port it was given)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MARIADB_") and k != "CI"}
    return subprocess.run([str(MARIADB_SCRIPT), *args], capture_output=True, text=True, env={**base, **(env or {})},
                          timeout=timeout)


@dataclass(frozen=True)
class Source:
    """The suite's MariaDB instance (``scripts/mariadb.sh`` instance ``name``)."""

    name: str
    port: int
    server_id: int
    host: str = "127.0.0.1"

    @property
    def instance_dir(self) -> Path:
        return REPO_ROOT / ".runtime" / "mariadb" / self.name

    def admin_kwargs(self, **overrides: Any) -> dict[str, Any]:
        kw: dict[str, Any] = {"host": self.host, "port": self.port, "user": "canal_admin",
                              "password": "canal_admin", "charset": "utf8mb4", "autocommit": True,
                              "connect_timeout": 5, "read_timeout": 60, "write_timeout": 60}
        kw.update(overrides)
        return kw

    def replication_settings(self) -> dict[str, Any]:
        """python-mysql-replication's connection_settings: the canal account, as the pipeline reads."""
        return {"host": self.host, "port": self.port, "user": "canal", "passwd": "canal"}

    def start_fresh(self) -> None:
        """A new, empty instance (a previous one of this name is stopped and removed first)."""
        mariadb_script("stop", self.name)
        shutil.rmtree(self.instance_dir, ignore_errors=True)
        out = mariadb_script("start", self.name, env={"MARIADB_PORT": str(self.port),
                                                      "MARIADB_SERVER_ID": str(self.server_id)})
        if out.returncode != 0:
            raise ChaosSetupError(f"scripts/mariadb.sh start {self.name} on port {self.port} failed "
                                  f"(is the port free? --mariadb-port chooses another):\n{out.stderr[-2000:]}")

    def restart(self) -> None:
        out = mariadb_script("restart", self.name)
        if out.returncode != 0:
            raise ChaosSetupError(f"scripts/mariadb.sh restart {self.name} failed (log "
                                  f"{self.instance_dir / 'error.log'}):\n{out.stderr[-2000:]}")

    def stop(self) -> None:
        mariadb_script("stop", self.name)

    def connect(self, **overrides: Any) -> pymysql.connections.Connection:
        return pymysql.connect(**self.admin_kwargs(**overrides))

    def master_status(self) -> tuple[str, int]:
        return binlog_end(self.admin_kwargs())


@dataclass(frozen=True)
class Layout:
    """Where one chaos run keeps everything (``--dir``)."""

    root: Path

    @property
    def conf_dir(self) -> Path:
        return self.root / "conf"

    @property
    def pipeline_yaml(self) -> Path:
        return self.conf_dir / "pipeline.yaml"

    @property
    def dagster_home(self) -> Path:
        return self.root / "dagster" / "home"

    @property
    def dagster_storage(self) -> Path:
        return self.root / "dagster" / "runtime"

    @property
    def lake(self) -> Path:
        return self.root / "lake"

    @property
    def state(self) -> Path:
        """paths.state; the main job keeps its logs and code server socket beside it (root/pipeline)."""
        return self.root / "pipeline" / "state"

    @property
    def pipeline_logs(self) -> Path:
        return self.root / "pipeline" / "logs"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def main_job_log(self) -> Path:
        return self.logs / "main-job.log"

    @property
    def workload_log(self) -> Path:
        return self.logs / "workload.jsonl"

    @property
    def fault_log(self) -> Path:
        return self.logs / "faults.jsonl"

    @property
    def history_dir(self) -> Path:
        """The destination's schema history (canal.file.data.dir = the conf dir)."""
        return self.conf_dir / DESTINATION / "history"


def write_configuration(layout: Layout, source: Source, slave_id: int) -> Path:
    """Canal conf, pipeline.yaml and DAGSTER_HOME of the run; returns pipeline.yaml."""
    conf = layout.conf_dir
    (conf / DESTINATION).mkdir(parents=True, exist_ok=True)
    (conf / "canal.properties").write_text(
        "# written by the chaos suite (tests/chaos/environment.py)\n"
        f"canal.destinations = {DESTINATION}\n"
        "canal.file.flush.period = 0\n")
    (conf / DESTINATION / "instance.properties").write_text(
        f"canal.instance.mysql.slaveId = {slave_id}\n"
        f"canal.instance.master.address = {source.host}:{source.port}\n"
        "canal.instance.dbUsername = canal\n"
        "canal.instance.dbPassword = canal\n"
        f"canal.instance.filter.regex = {SCHEMA}\\\\..*\n"
        "canal.instance.memory.buffer.size = 16384\n"
        "canal.instance.memory.buffer.memunit = 1024\n")
    data: dict[str, Any] = {
        "destination": DESTINATION,
        "canal": {"conf_dir": str(conf)},
        "paths": {"staging": str(layout.root / "staging"), "state": str(layout.state)},
        "lake": {"root": str(layout.lake)},
        **PIPELINE_SETTINGS,
    }
    layout.pipeline_yaml.write_text("# written by the chaos suite (tests/chaos/environment.py)\n"
                                    + yaml.safe_dump(data, sort_keys=False))
    _write_dagster_home(layout)
    return layout.pipeline_yaml


def _write_dagster_home(layout: Layout) -> None:
    cfg: dict[str, Any] = yaml.safe_load((REPO_ROOT / "dagster_home" / "dagster.yaml").read_text())
    runtime = layout.dagster_storage
    cfg["storage"] = {"sqlite": {"base_dir": str(runtime / "storage")}}
    cfg["local_artifact_storage"]["config"]["base_dir"] = str(runtime)
    cfg["compute_logs"]["config"]["base_dir"] = str(runtime / "compute_logs")
    layout.dagster_home.mkdir(parents=True, exist_ok=True)
    (layout.dagster_home / "dagster.yaml").write_text(
        "# dagster_home/dagster.yaml with its storage under the chaos run's directory (tests/chaos/environment.py)\n"
        + yaml.safe_dump(cfg, sort_keys=False))


def destination_start(layout: Layout) -> tuple[str, int] | None:
    """The binlog position the destination first started reading from (its schema history's bootstrap), None
    before its first start. Every row change from there on belongs in the changelog."""
    import json

    from canal_core.protocol.position import EntryPosition

    try:
        meta = json.loads((layout.history_dir / "meta.json").read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):  # not bootstrapped yet (the file is written atomically)
        return None
    boot = (meta.get("bootstrap") or {}).get("position")
    if not boot:
        return None
    pos = EntryPosition.from_json_dict(boot)
    return pos.journal_name, pos.position
