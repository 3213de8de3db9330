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
from decimal import Decimal
from pathlib import Path
from typing import Any

import pymysql
from dagster import DagsterInstance, RunRequest, SensorResult, build_sensor_context
from pymysql.constants import FIELD_TYPE

from pipelines.defs.definitions import build_definitions
from pipelines.defs.pools import INSTANCE_SETTINGS
from pipelines.engine.config import PipelineConfig, parse_config
from pipelines.engine.sensor_state import SensorState
from pipelines.engine.types import from_db, select_expr
from tests.chaos.binlog_truth import canal_decimal_text
from tests.support.spark import suite_master


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
    return parse_config(config_data(root, settings, destination, regex, **overrides), base_dir=root)


def config_data(root: Path, settings: Any, destination: str, regex: str, **overrides: Any) -> dict[str, Any]:
    """The pipeline config (as conf/pipeline.yaml would hold it) of a test destination under ``root``."""
    conf = write_conf(root, settings, destination, regex)
    data: dict[str, Any] = {
        "destination": destination,
        "canal": {"conf_dir": str(conf)},
        "paths": {"staging": str(root / "staging"), "state": str(root / "state")},
        "lake": {"root": str(root / "lake")},
        "window": {"max_rows": 5000, "max_wait_seconds": 1},
        # reconciliation inside window runs is switched on by the tests about it (it costs a Spark job per run)
        "sensor": {"backoff_seconds": 0, "backoff_max_seconds": 0, "reconcile_interval_seconds": 0},
        "spark": {"master": suite_master()},
    }
    for k, v in overrides.items():
        data.setdefault(k, {}).update(v) if isinstance(v, dict) else data.__setitem__(k, v)
    return data


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
    instance_overrides: dict[str, Any] | None = None  # dagster.yaml settings of the instance (e.g. run launcher)
    failed_ticks: list[str] = field(default_factory=list)
    sensor_name: str = ""     # the sensor this driver ticks when the config has several destinations
    instance: Any = None      # another driver's instance (several destinations of one code location)

    def __post_init__(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        if self.instance is None:
            # the lake writers' one-slot pools, as the project's dagster.yaml configures them
            overrides = {**INSTANCE_SETTINGS, **(self.instance_overrides or {})}
            self.instance = DagsterInstance.local_temp(tempdir=str(self.home), overrides=overrides)
        self.reload()

    def reload(self) -> None:
        """What a code-location reload does: the definitions built again (the table list read again from the
        source); the instance, the sensor cursor and the process's Canal source stay."""
        self.defs = build_definitions(self.config)
        sensors = list(self.defs.get_repository_def().sensor_defs)
        (self.sensor,) = [s for s in sensors if s.name == self.sensor_name] if self.sensor_name else sensors

    def tick(self) -> SensorResult:
        """One evaluation, as the daemon runs it. A failed one (the destination cannot progress and has nothing
        to persist: Dagster shows the tick failed) comes back as a SensorResult whose skip reason starts with
        "FAILED", the cursor unchanged."""
        from pipelines.defs.sensor import DestinationNotProgressing

        ctx = build_sensor_context(instance=self.instance, cursor=self.cursor, definitions=self.defs)
        try:
            result = self.sensor(ctx)
        except DestinationNotProgressing as e:
            self.failed_ticks.append(str(e))
            return SensorResult(skip_reason=f"FAILED {e}", cursor=self.cursor)
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


def _staged_source_rows(settings: Any, schema: str, table: str, columns: list[Any]) -> list[tuple[Any, ...]]:
    """Every row of the table by SELECT (UTC session), each value normalized to its staged form (types.from_db)."""
    conn = pymysql.connect(**settings.admin_kwargs(init_command="SET time_zone = '+00:00'"))
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT {', '.join(select_expr(c.name, c.mysql_type) for c in columns)} "
                        f"FROM `{schema}`.`{table}`")
            rows = cur.fetchall()
    finally:
        conn.close()
    convs = [from_db(c.mysql_type, c.name) for c in columns]
    return [tuple(f(v) for f, v in zip(convs, r, strict=True)) for r in rows]


def source_rows(settings: Any, schema: str, table: str, columns: list[Any]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The table by SELECT, normalized to staged values (types.from_db), keyed by primary key."""
    rows = _staged_source_rows(settings, schema, table, columns)
    keys = [c.name for c in columns if c.is_key] or [c.name for c in columns]
    out = {}
    for r in rows:
        vals = {c.name: v for c, v in zip(columns, r, strict=True)}
        out[tuple(vals[k] for k in keys)] = vals
    return out


def mirror_rows(spark: Any, path: str, columns: list[Any]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The Delta mirror read by Spark (collected as Arrow), keyed by primary key; _canal_* columns dropped."""
    df = spark.read.format("delta").load(path)
    names = [c.name for c in columns]
    table = df.select(*[f"`{n}`" for n in names]).toArrow()
    keys = [c.name for c in columns if c.is_key] or names
    return {tuple(r[k] for k in keys): r for r in table.to_pylist()}


def _nulls_first(row: tuple[Any, ...]) -> tuple[tuple[bool, Any], ...]:
    return tuple((v is not None, v) for v in row)


def source_multiset(settings: Any, schema: str, table: str, columns: list[Any]) -> list[tuple[Any, ...]]:
    """Every row of the table by SELECT (staged values, types.from_db), duplicates kept, sorted."""
    rows = _staged_source_rows(settings, schema, table, columns)
    return sorted(rows, key=_nulls_first)


def mirror_multiset(spark: Any, path: str, columns: list[Any]) -> list[tuple[Any, ...]]:
    """Every row of the Delta mirror read by Spark (``columns`` only), duplicates kept, sorted."""
    df = spark.read.format("delta").load(path)
    table = df.select(*[f"`{c.name}`" for c in columns]).toArrow()
    return sorted((tuple(r[c.name] for c in columns) for r in table.to_pylist()), key=_nulls_first)


class RecordedChanges:
    """Single-row autocommit statements on the source, each recorded as the change the binlog holds for it:
    (table, op, image), the image being the row after an INSERT/UPDATE or before a DELETE as the server prints
    it (a PyMySQL connection without converters: MySQL's own text, which is what Canal's entries carry, but for
    DECIMAL, whose text Canal's decoder shortens: docs/type-mapping.md).
    ``log`` in statement order is the expected changelog of the tables (one row change per statement)."""

    def __init__(self, settings: Any, schema: str) -> None:
        self.schema = schema
        self.conn = pymysql.connect(**settings.admin_kwargs())
        # encoders only (keys are types), no decoders (keys are field type codes): every value comes back as text
        encoders = {k: v for k, v in pymysql.converters.conversions.items() if not isinstance(k, int)}
        self.text = pymysql.connect(**settings.admin_kwargs(conv=encoders))
        self.log: list[tuple[str, str, dict[str, str | None]]] = []

    def close(self) -> None:
        self.conn.close()
        self.text.close()

    def execute(self, sql: str, args: Any = None) -> None:
        """A statement that is not a row change (DDL)."""
        with self.conn.cursor() as cur:
            cur.execute(sql, args)

    def row(self, table: str, key: int) -> dict[str, str | None] | None:
        with self.text.cursor() as cur:
            cur.execute(f"SELECT * FROM `{self.schema}`.`{table}` WHERE id = %s", (key,))
            got = cur.fetchone()
            names = [d[0] for d in cur.description]
        if got is None:
            return None
        image = {n: (v.decode() if isinstance(v, bytes) else v) for n, v in zip(names, got, strict=True)}
        for d in cur.description:  # DECIMAL: Canal's text of the server's (a zero left-over fraction word dropped)
            if d[1] == FIELD_TYPE.NEWDECIMAL and image[d[0]] is not None:
                image[d[0]] = canal_decimal_text(Decimal(str(image[d[0]])))
        return image

    def _changed(self, sql: str, args: Any) -> None:
        with self.conn.cursor() as cur:
            assert cur.execute(sql, args) == 1, (sql, args)  # one row change in the binlog

    def insert(self, table: str, **values: Any) -> None:
        cols = ", ".join(f"`{c}`" for c in values)
        self._changed(f"INSERT INTO `{self.schema}`.`{table}` ({cols}) VALUES ({', '.join(['%s'] * len(values))})",
                      tuple(values.values()))
        image = self.row(table, values["id"])
        assert image is not None
        self.log.append((table, "INSERT", image))

    def update(self, table: str, key: int, **values: Any) -> None:
        sets = ", ".join(f"`{c}` = %s" for c in values)
        self._changed(f"UPDATE `{self.schema}`.`{table}` SET {sets} WHERE id = %s", (*values.values(), key))
        image = self.row(table, key)
        assert image is not None
        self.log.append((table, "UPDATE", image))

    def delete(self, table: str, key: int) -> None:
        image = self.row(table, key)
        assert image is not None, (table, key)
        self._changed(f"DELETE FROM `{self.schema}`.`{table}` WHERE id = %s", (key,))
        self.log.append((table, "DELETE", image))


def changelog_changes(spark: Any, changelog_path: str, schema: str,
                      where: str = "") -> list[tuple[str, str, dict[str, str | None]]]:
    """The changelog's rows of ``schema`` in binlog order as (table, op, image), the image being ``after``
    for INSERT/UPDATE and ``before`` for DELETE (comparable with RecordedChanges.log)."""
    df = spark.read.format("delta").load(changelog_path).where(f"schema_name = '{schema}'")
    if where:
        df = df.where(where)
    rows = df.select("table_name", "op", "before", "after", "pos", "row").orderBy("pos", "row").collect()
    return [(r["table_name"], r["op"], dict(r["before"] if r["op"] == "DELETE" else r["after"])) for r in rows]


def drive_until_idle(driver: Driver, timeout: float = 120, settle: float = 0.0) -> None:
    """Tick until a tick finds no window to take and nothing in flight while the source streams (everything
    written is applied); every run must succeed and the sensor must not stop. ``settle``: seconds to wait first
    (the live parser catching up with what was just written)."""
    deadline = time.monotonic() + timeout
    time.sleep(settle)
    while True:
        assert time.monotonic() < deadline, f"pipeline not idle in {timeout:.0f} s; cursor {driver.cursor}"
        before = len(driver.runs)
        result = driver.tick()
        state = SensorState.from_cursor(driver.cursor)
        assert not state.stopped and not state.snapshot.stopped, driver.cursor
        assert all(ok for _, ok in driver.runs), [rr.run_key for rr, ok in driver.runs if not ok]
        said = (result.skip_reason.skip_message if result.skip_reason else "") or ""
        if (state.inflight is None and state.snapshot.run_key is None and len(driver.runs) == before
                and "no new changes" in said and "connecting" not in said):
            return
        if "connecting" in said:
            time.sleep(0.5)
