"""The changelog's daily partitions begin on the destination's first day, not on a fixed date: a partition
exists for every UTC day the destination could have streamed, and no empty years before it.

The first day is ``changelog.start_date`` when configured, else the day recorded in ``{state}/first_day`` (written
once, by the sensor's first evaluation or a snapshot), else today.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from ...engine.config import PipelineConfig


def first_day_file(config: PipelineConfig) -> Path:
    return config.state_dir / "first_day"


def first_partition_day(config: PipelineConfig) -> dt.date:
    if config.changelog.start_date:
        return dt.date.fromisoformat(config.changelog.start_date)
    try:
        return dt.date.fromisoformat(first_day_file(config).read_text().strip())
    except (FileNotFoundError, ValueError):
        return dt.datetime.now(dt.UTC).date()


def record_first_day(config: PipelineConfig) -> None:
    """Remember today as the destination's first day, unless a day is already recorded."""
    from canal_core.parse.position import write_atomically

    path = first_day_file(config)
    if config.changelog.start_date or path.is_file():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, dt.datetime.now(dt.UTC).date().isoformat().encode())
