"""Drives the real pipeline definitions in this process: the canal sensor evaluated against a real
(on-disk, not ephemeral) Dagster instance, each run it requests executed in process against that instance,
exactly as the daemon would launch it (same job, run config, tags, run key, asset selection).

Used by the end-to-end pipeline tests; the private MariaDB and the local Spark are real.
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql
from dagster import DagsterInstance, RunRequest, SensorResult, build_sensor_context

from pipelines.config import PipelineConfig, parse_config
from pipelines.definitions import build_definitions
from pipelines.types import from_db, select_expr


def write_conf(root: Path, settings: Any, destination: str, regex: str) -> Path:
    conf = root / "conf"
    (conf / destination).mkdir(parents=True, exist_ok=True)
    (conf / "canal.properties").write_text(f"canal.destinations = {destination}\ncanal.file.flush.period = 0\n")
    # a replica id of its own: two replicas with one id kick each other off the primary
    (conf / destination / "instance.properties").write_text(
        f"canal.instance.mysql.slaveId = {random.randint(1 << 20, (1 << 31) - 1)}\n"
        f"canal.instance.master.address = {settings.host}:{settings.port}\ncanal.instance.dbUsername = canal\n"
        f"canal.instance.dbPassword = canal\ncanal.instance.filter.regex = {regex}\n"
        "canal.instance.memory.buffer.size = 16384\ncanal.instance.memory.buffer.memunit = 1024\n")
    return conf


def make_config(root: Path, settings: Any, destination: str, regex: str, **overrides: Any) -> PipelineConfig:
    conf = write_conf(root, settings, destination, regex)
    data: dict[str, Any] = {
        "destination": destination,
        "canal": {"conf_dir": str(conf)},
        "paths": {"staging": str(root / "staging"), "state": str(root / "state")},
        "lake": {"root": str(root / "lake")},
        "window": {"max_rows": 5000, "max_wait_seconds": 1},
        "sensor": {"backoff_seconds": 0, "backoff_max_seconds": 0},
    }
    for k, v in overrides.items():
        data.setdefault(k, {}).update(v) if isinstance(v, dict) else data.__setitem__(k, v)
    return parse_config(data, base_dir=root)


@dataclass
class Driver:
    config: PipelineConfig
    home: Path
    spark: Any = None
    before_run: Callable[[RunRequest], None] | None = None
    cursor: str | None = None
    runs: list[tuple[RunRequest, bool]] = field(default_factory=list)
    staged_copies: list[Path] = field(default_factory=list)
    keep_windows: Path | None = None

    def __post_init__(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.instance = DagsterInstance.local_temp(tempdir=str(self.home))
        self.defs = build_definitions(self.config)
        (self.sensor,) = list(self.defs.get_repository_def().sensor_defs)

    def tick(self) -> SensorResult:
        ctx = build_sensor_context(instance=self.instance, cursor=self.cursor, definitions=self.defs)
        result = self.sensor(ctx)
        assert isinstance(result, SensorResult), result
        if result.cursor is not None:
            self.cursor = result.cursor
        for rr in result.run_requests or []:
            self._keep(rr)
            if self.before_run is not None:
                self.before_run(rr)
            self.runs.append((rr, self.execute(rr)))
        return result

    def _keep(self, rr: RunRequest) -> None:
        """Copy a window's staged directory (the sensor deletes it once applied) for replay tests."""
        path = (rr.run_config or {}).get("resources", {}).get("canal_window", {}).get("config", {}).get("path")
        if self.keep_windows is not None and path and Path(path).is_dir():
            dst = self.keep_windows / Path(path).name
            shutil.copytree(path, dst, dirs_exist_ok=True)
            self.staged_copies.append(dst)

    def execute(self, rr: RunRequest) -> bool:
        job = self.defs.resolve_job_def(rr.job_name)
        tags = {**rr.tags, "dagster/run_key": rr.run_key}
        if rr.asset_selection is not None:
            # as the daemon does: only the requested assets and checks (execute_in_process(asset_selection=)
            # would run every check of those assets)
            job = job.get_subset(asset_selection=set(rr.asset_selection),
                                 asset_check_selection=set(rr.asset_check_keys or []))
        result = job.execute_in_process(run_config=rr.run_config, instance=self.instance, tags=tags,
                                        raise_on_error=False)
        return result.success

    def run_until(self, done: Callable[[], bool], timeout: float = 300.0, pause: float = 0.2) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"pipeline did not converge in {timeout:.0f} s; cursor {self.cursor}"
            self.tick()
            time.sleep(pause)


def source_rows(settings: Any, schema: str, table: str, columns: list[Any]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The table by SELECT, normalized to staged values (types.from_db), keyed by primary key."""
    kw = settings.admin_kwargs(init_command="SET time_zone = '+00:00'")
    conn = pymysql.connect(**kw)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT {', '.join(select_expr(c.name, c.mysql_type) for c in columns)} "
                        f"FROM `{schema}`.`{table}`")
            rows = cur.fetchall()
    finally:
        conn.close()
    convs = [from_db(c.mysql_type, c.name) for c in columns]
    keys = [i for i, c in enumerate(columns) if c.is_key] or list(range(len(columns)))
    out = {}
    for r in rows:
        vals = {c.name: f(v) for c, f, v in zip(columns, convs, r, strict=True)}
        out[tuple(vals[columns[i].name] for i in keys)] = vals
    return out


def mirror_rows(spark: Any, path: str, columns: list[Any]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The Delta mirror read by Spark (collected as Arrow), keyed by primary key; _canal_* columns dropped."""
    df = spark.read.format("delta").load(path)
    names = [c.name for c in columns]
    table = df.select(*[f"`{n}`" for n in names]).toArrow()
    keys = [c.name for c in columns if c.is_key] or names
    return {tuple(r[k] for k in keys): r for r in table.to_pylist()}
