"""Backfill by time: replay a binlog period through a separate client (the live cursor is untouched),
replace that period of the changelog and re-merge the affected mirrors.

Used by the ``canal_backfill`` job (Launchpad config or ``python -m pipelines.backfill``) and by a partition
backfill of ``canal/changelog`` over days in the UI. The period is [start, end) in execute time (UTC);
the replay is staged to disk in bounded windows first, so memory stays bounded however long the period.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Sequence
from typing import Any

from dagster import AssetMaterialization, MetadataValue, OpExecutionContext

from ..config import PipelineConfig
from ..resources import LakeResource, SparkResource
from .keys import CHANGELOG, mirror_key


def parse_time(text: str, key: str = "time") -> dt.datetime:
    """ISO 8601 ('2026-01-31', '2026-01-31 12:00', '...T12:00:00+02:00'); UTC unless it names an offset."""
    try:
        t = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{key} {text!r}: expected an ISO 8601 date or time, e.g. 2026-01-31T12:00:00") from None
    return t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t.astimezone(dt.UTC)


def _ms(t: dt.datetime) -> int:
    return int(t.timestamp() * 1000)


def _days(start: dt.datetime, end: dt.datetime, first: dt.date) -> list[str]:
    """Changelog partition keys (UTC dates) touched by [start, end), from the partitions' first day to today."""
    last = dt.datetime.now(dt.UTC).date()
    d, stop = max(start.date(), first), min((end - dt.timedelta(microseconds=1)).date(), last)
    out = []
    while d <= stop:
        out.append(d.isoformat())
        d += dt.timedelta(days=1)
    return out


def run_backfill(context: Any, config: PipelineConfig, tables: Sequence[str], spark: SparkResource,
                 lake: LakeResource, *, start: dt.datetime, end: dt.datetime | None = None,
                 selection: Sequence[str] | None = None, report_mirrors: bool = False,
                 report_changelog: bool = False) -> dict[str, Any]:
    """Replay [start, end) (end None: up to the binlog's current end) for ``selection`` (default: every
    mirrored table), replace that changelog period, re-merge the mirrors that have their snapshot.
    ``report_*``: log materializations for assets that are not outputs of the running step."""
    from .. import lake as L
    from ..replay import replay_windows
    from ..sensor import registry_for

    unknown = sorted(set(selection or ()) - set(tables))
    if unknown:
        raise ValueError(f"tables {', '.join(unknown)} are not mirrored by destination {config.destination!r} "
                         f"(known: {', '.join(tables)})")
    chosen = list(selection) if selection else list(tables)
    end = end or dt.datetime.now(dt.UTC)
    if end <= start:
        raise ValueError(f"backfill end {end.isoformat()} is not after its start {start.isoformat()}")
    root = config.staging_root / config.destination / "backfill" / context.run_id
    session, lk = spark.session(), lake.lake()
    snapshotted = set(registry_for(config).load())
    try:
        windows = list(replay_windows(config.replay_source(), root=root, destination=config.destination, label=0,
                                      start=_ms(start), end=_ms(end) - 1, tables=chosen))
        rows = sum(m.rows for _, m in windows)
        context.log.info(f"backfill {start.isoformat()} .. {end.isoformat()} of {', '.join(chosen)}: "
                         f"{rows} row changes in {len(windows)} staged windows")
        replaced = 0
        if windows:  # the changelog first: remerge_mirror decides by it which window holds a key's last change
            replaced = L.replace_changelog_range(session, lk, windows, tables=chosen, start_ms=_ms(start),
                                                 end_ms=_ms(end) - 1)
        merged: dict[str, dict[str, int]] = {}
        for d, m in windows:
            for t in L.mirror_tables(m):
                if t.name not in chosen or t.name not in snapshotted:
                    continue  # a table still waiting for its snapshot has no mirror to repair
                r = L.remerge_mirror(session, lk, d, m, t)
                acc = merged.setdefault(t.name, {"inserted": 0, "updated": 0, "deleted": 0})
                for k in acc:
                    acc[k] += int(getattr(r, k, 0) or 0)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    span = {"backfill_start": start.isoformat(), "backfill_end": end.isoformat()}
    if report_mirrors:
        for name, counts in merged.items():
            context.log_event(AssetMaterialization(
                asset_key=mirror_key(name), description="re-merged by a backfill",
                metadata={**span, **{f"rows_{k}": v for k, v in counts.items()}}))
    if report_changelog:
        first = dt.date.fromisoformat(config.changelog.start_date)
        for day in _days(start, end, first):
            context.log_event(AssetMaterialization(asset_key=CHANGELOG, partition=day,
                                                   description="period replaced by a backfill", metadata=span))
    return {**span, "rows": rows, "rows_replaced": int(replaced or 0), "tables": MetadataValue.json(chosen),
            "mirrors_remerged": MetadataValue.json(merged)}


def backfill_op_body(context: OpExecutionContext, config: PipelineConfig, tables: Sequence[str],
                     spark: SparkResource, lake: LakeResource, start_time: str, end_time: str,
                     selection: Sequence[str]) -> dict[str, Any]:
    start = parse_time(start_time, "start_time")
    end = parse_time(end_time, "end_time") if end_time.strip() else None
    return run_backfill(context, config, tables, spark, lake, start=start, end=end, selection=list(selection),
                        report_mirrors=True, report_changelog=True)
