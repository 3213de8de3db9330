"""Schedules: Delta maintenance (OPTIMIZE + VACUUM with the configured retention) on maintenance.cron (UTC)."""

from __future__ import annotations

from dagster import DefaultScheduleStatus, JobDefinition, ScheduleDefinition

from ..engine.config import PipelineConfig
from .assets.keys import keys_for


def build_schedules(config: PipelineConfig, maintenance: JobDefinition) -> list[ScheduleDefinition]:
    return [ScheduleDefinition(
        name=keys_for(config).maintenance_schedule, job=maintenance, cron_schedule=config.maintenance.cron,
        execution_timezone="UTC", default_status=DefaultScheduleStatus.RUNNING,
        description=f"OPTIMIZE and VACUUM (retention {config.maintenance.vacuum_retention_hours} h) of the "
                    "changelog and every mirror.")]
