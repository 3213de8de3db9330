"""Jobs. Every one runs in process: one run process, one SparkSession.

* ``canal_window``: the changelog and the mirrors (the sensor selects the mirrors of the window's tables
  and passes the staged window in run config).
* ``canal_snapshot``: initial load of mirrors (the sensor selects the tables waiting for one).
* ``canal_reconcile``: the mirrors' reconcile checks, in runs of their own beside the windows (the sensor selects
  the mirrors due).
* ``canal_backfill``: replay a period by time (Launchpad config: start_time, end_time, tables), replace it
  in the changelog, re-merge the mirrors. Also ``python -m pipelines.cli.launch_backfill``.
* ``canal_maintenance``: OPTIMIZE + VACUUM of every Delta table (on the maintenance schedule).
"""


from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dagster import (
    AssetSelection,
    Config,
    JobDefinition,
    OpExecutionContext,
    define_asset_job,
    in_process_executor,
    job,
    op,
)
from pydantic import Field

from ..engine.config import PipelineConfig
from .assets.cdc import CdcAssets
from .assets.keys import keys_for, split_table
from .dagster_compat import UnresolvedAssetJobDefinition
from .pools import check_writer_slot, writer_pool
from .resources import LakeResource, SparkResource


class BackfillConfig(Config):
    start_time: str = Field(description="ISO 8601 date or time, UTC unless an offset is given, e.g. 2026-01-31T12:00")
    end_time: str = Field(default="", description="exclusive end, same format; empty: up to now")
    tables: list[str] = Field(default_factory=list, description="schema.table names; empty: every mirrored table")


class MaintenanceConfig(Config):
    vacuum_retention_hours: int = Field(description="VACUUM keeps files needed by versions this recent")
    optimize: bool = True


@dataclass
class Jobs:
    window: UnresolvedAssetJobDefinition
    snapshot: UnresolvedAssetJobDefinition
    reconcile: UnresolvedAssetJobDefinition
    backfill: JobDefinition
    maintenance: JobDefinition

    def sensor_jobs(self) -> list[Any]:
        """The jobs the canal sensor launches."""
        return [self.window, self.snapshot, self.reconcile]

    def all(self) -> list[Any]:
        return [*self.sensor_jobs(), self.backfill, self.maintenance]


def build_jobs(settings: PipelineConfig, tables: Sequence[str], cdc: CdcAssets) -> Jobs:
    keys = keys_for(settings)
    mirrors = AssetSelection.assets(*cdc.mirrors.values())
    window = define_asset_job(
        keys.window_job, selection=AssetSelection.assets(keys.changelog) | mirrors, executor_def=in_process_executor,
        description="Applies one staged binlog window to the changelog and the mirrors (launched by the sensor).")
    snapshot = define_asset_job(
        keys.snapshot_job, selection=mirrors.without_checks(), executor_def=in_process_executor,
        description="Initial load of mirrors from a consistent snapshot with a known binlog position.")
    # checks only: it reads the source and the mirrors and writes nothing, so it needs no writer slot
    reconcile = define_asset_job(
        keys.reconcile_job, selection=AssetSelection.checks(*(keys.reconcile_check(t) for t in tables)),
        executor_def=in_process_executor,
        description="Reconcile checks of mirrors (launched by the sensor beside the windows, for the mirrors checked "
                    "longest ago): source and mirror compared at one binlog position.")

    pool = writer_pool(settings.destination)

    @op(name=keys.backfill_op, pool=pool, description="Replay the period from the binlog, replace it in the "
        "changelog, re-merge the mirrors (one writer at a time per destination: pool canal/<destination>).")
    def backfill_period(context: OpExecutionContext, config: BackfillConfig, spark: SparkResource,
                        lake: LakeResource) -> None:
        from .assets.backfill import backfill_op_body

        check_writer_slot(context)
        summary = backfill_op_body(context, settings, tables, spark, lake, config.start_time, config.end_time,
                                   config.tables)
        context.add_output_metadata(summary)
        context.log.info(f"backfill done: {summary['rows_replayed']} row changes replayed, "
                         f"{summary['rows_replaced']} changelog rows replaced up to "
                         f"{summary['changelog_applied_end']}")

    @job(name=keys.backfill_job, executor_def=in_process_executor,
         description="Backfill by time (Launchpad: start_time, optional end_time, tables) through a separate "
                     "binlog client; the live cursor is untouched.")
    def backfill() -> None:
        backfill_period()

    @op(name=keys.maintenance_op, pool=pool)
    def optimize_and_vacuum(context: OpExecutionContext, config: MaintenanceConfig, spark: SparkResource,
                            lake: LakeResource) -> None:
        from ..engine import lake as L

        check_writer_slot(context)
        session, lk = spark.session(), lake.lake(settings.lake_subdir)
        paths = [str(lk.changelog_path())] + [str(lk.mirror_path(*split_table(t))) for t in tables]
        for path in paths:
            if not L.is_delta_table(session, path):
                continue
            optimized = L.optimize(session, path) if config.optimize else {}
            vacuumed = L.vacuum(session, path, config.vacuum_retention_hours)
            context.log.info(f"{path}: OPTIMIZE {optimized}; VACUUM {vacuumed}")

    @job(name=keys.maintenance_job, executor_def=in_process_executor,
         config={"ops": {keys.maintenance_op: {"config": {
             "vacuum_retention_hours": settings.maintenance.vacuum_retention_hours,
             "optimize": settings.maintenance.optimize}}}},
         description="Delta maintenance: OPTIMIZE (compaction) and VACUUM with the configured retention.")
    def maintenance() -> None:
        optimize_and_vacuum()

    return Jobs(window, snapshot, reconcile, backfill, maintenance)
