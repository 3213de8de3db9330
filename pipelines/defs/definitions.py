"""The Dagster code location (workspace.yaml: python_module pipelines.defs.definitions).

Importing this builds ``defs`` from conf/pipeline.yaml ($CANAL_PIPELINE_CONF): no service is started and
no SparkSession created (the Canal instance starts on the sensor's first evaluation, Spark on a run's first
asset). Only the table list needs the source database, or its cache from an earlier load.
"""

from __future__ import annotations

from dagster import Definitions, in_process_executor

from ..engine.config import PipelineConfig, load_config
from .assets.cdc import build_cdc_assets
from .assets.tables import resolve_tables
from .jobs import build_jobs
from .resources import resources_for
from .schedules import build_schedules
from .sensor import CanalSensor


def build_definitions(config: PipelineConfig, tables: list[str] | None = None) -> Definitions:
    tables = resolve_tables(config) if tables is None else tables
    cdc = build_cdc_assets(config, tables)
    jobs = build_jobs(config, tables, cdc)
    sensor = CanalSensor(config, tables).definition(jobs.sensor_jobs())
    return Definitions(
        assets=[*cdc.sources, cdc.changelog, *cdc.mirrors.values()],
        asset_checks=cdc.checks,
        jobs=jobs.all(),
        sensors=[sensor],
        schedules=build_schedules(config, jobs.maintenance),
        resources=resources_for(config),
        # one process per run, one Spark session for all its steps: also for runs launched from the UI
        # (Materialize, executing checks), which otherwise start a process (and a Spark JVM) per step
        executor=in_process_executor,
    )


defs = build_definitions(load_config())
