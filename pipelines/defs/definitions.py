"""The Dagster code location (workspace.yaml: python_module pipelines.defs.definitions).

Importing this builds ``defs`` from conf/pipeline.yaml ($CANAL_PIPELINE_CONF): no service is started and
no SparkSession created (the Canal instance starts on the sensor's first evaluation, Spark on a run's first
asset). Only the table list needs the source database, or its cache from an earlier load.

With several destinations (``destinations:``) each has its own sensor, jobs, schedule and assets, under names
prefixed by the destination (pipelines.defs.assets.keys); they share the Spark and lake resources. A destination
whose table list cannot be had (source down and nothing cached) must not take the others down with it: it gets a
sensor whose every tick fails saying so, and the rest load as usual.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dagster import Definitions, SensorDefinition, SensorEvaluationContext, in_process_executor, sensor

from ..engine.config import PipelineConfig, load_config
from .assets.cdc import build_cdc_assets
from .assets.keys import sensor_name
from .assets.tables import TableListUnavailable, resolve_tables
from .jobs import build_jobs
from .resources import resources_for
from .schedules import build_schedules
from .sensor import CanalSensor


def _unavailable_sensor(config: PipelineConfig, problem: TableListUnavailable) -> SensorDefinition:
    @sensor(name=sensor_name(config), minimum_interval_seconds=config.sensor.interval_seconds,
            description=f"Canal destination {config.destination!r}: not loaded (its table list is unavailable).")
    def unavailable(context: SensorEvaluationContext) -> None:
        raise TableListUnavailable(f"{problem} Then reload the code location (Deployment > Reload in the UI): the "
                                   "other destinations keep running meanwhile.")

    return unavailable


def build_definitions(config: PipelineConfig,
                      tables: Sequence[str] | Mapping[str, Sequence[str]] | None = None) -> Definitions:
    """``tables``: the mirrored tables (one destination), or destination -> tables; None (or a destination not in
    the mapping): from the source."""
    parts = config.per_destination()
    assets: list[Any] = []
    checks: list[Any] = []
    jobs: list[Any] = []
    sensors: list[Any] = []
    schedules: list[Any] = []
    for part in parts:
        given = tables.get(part.destination) if isinstance(tables, Mapping) else tables
        if given is not None:
            chosen = list(given)
        else:
            try:
                chosen = resolve_tables(part)
            except TableListUnavailable as e:
                if len(parts) == 1:
                    raise   # the one destination: the location does not load, and says why
                sensors.append(_unavailable_sensor(part, e))
                continue
        cdc = build_cdc_assets(part, chosen)
        built = build_jobs(part, chosen, cdc)
        assets += [*cdc.sources, cdc.changelog, *cdc.mirrors.values()]
        checks += cdc.checks
        jobs += built.all()
        sensors.append(CanalSensor(part, chosen).definition(built.sensor_jobs()))
        schedules += build_schedules(part, built.maintenance)
    return Definitions(
        assets=assets, asset_checks=checks, jobs=jobs, sensors=sensors, schedules=schedules,
        resources=resources_for(config),
        # one process per run, one Spark session for all its steps: also for runs launched from the UI
        # (Materialize, executing checks), which otherwise start a process (and a Spark JVM) per step
        executor=in_process_executor,
    )


config = load_config()
defs = build_definitions(config)
