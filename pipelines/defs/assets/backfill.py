"""Backfill by time: replay a binlog period through a separate client (the live cursor is untouched),
replace that period of the changelog and re-merge the affected mirrors.

Used by the ``canal_backfill`` job (Launchpad config or ``python -m pipelines.cli.launch_backfill``) and by a partition
backfill of ``canal/changelog`` over days in the UI. The period is [start, end) in execute time (UTC);
the replay is staged to disk in bounded windows first, so memory stays bounded however long the period.
Only the part of the changelog the live pipeline has written is replaced: from the destination's first start
(the oldest snapshot of its schema history: nothing earlier decodes or was streamed) up to the changelog's
applied end; later changes are left to the live windows, which append them.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dagster import (
    AssetExecutionContext,
    AssetMaterialization,
    MetadataValue,
    OpExecutionContext,
    TableColumn,
    TableRecord,
    TableSchema,
)

from ...engine.config import PipelineConfig
from ...engine.window import EventTime, Position, format_position, key_text, split_key
from ..resources import LakeResource, SparkResource
from .keys import keys_for


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


def _history_start(history_dir: Path | None) -> Position | None:
    """The position of the live schema history's oldest snapshot (the destination's first start, unless old
    snapshots expired): the earliest point a replay can decode rows from."""
    out: Position | None = None
    for f in sorted(Path(history_dir).glob("snapshots/snapshot-*.json")) if history_dir else []:
        p = json.loads(f.read_text())["position"]
        pos = Position(p["journalName"], int(p["position"]), int(p.get("timestamp") or 0))
        if out is None or pos.key < out.key:
            out = pos
    return out


def run_backfill(context: Any, config: PipelineConfig, tables: Sequence[str], spark: SparkResource,
                 lake: LakeResource, *, start: dt.datetime, end: dt.datetime | None = None,
                 selection: Sequence[str] | None = None, report_mirrors: bool = False,
                 report_changelog: bool = False) -> dict[str, Any]:
    """Replay [start, end) (end None: up to the binlog's current end) for ``selection`` (default: every
    mirrored table), replace that changelog period, re-merge the mirrors that have their snapshot.
    ``report_*``: log materializations for assets that are not outputs of the running step."""
    from ...engine import lake as L
    from ...engine.registry import registry_for
    from ...engine.remerge import remerge_mirror
    from ...engine.replay import replay_windows

    unknown = sorted(set(selection or ()) - set(tables))
    if unknown:
        raise ValueError(f"tables {', '.join(unknown)} are not mirrored by destination {config.destination!r} "
                         f"(known: {', '.join(tables)})")
    chosen = list(selection) if selection else list(tables)
    end = end or dt.datetime.now(dt.UTC)
    if end <= start:
        raise ValueError(f"backfill end {end.isoformat()} is not after its start {start.isoformat()}")
    # an asset's context.run_id is deprecated in favour of context.run; a directly built op context has no run
    run_id = context.run.run_id if isinstance(context, AssetExecutionContext) else context.run_id
    root = config.staging_root / config.destination / "backfill" / run_id
    session, lk = spark.session(), lake.lake(config.lake_subdir)
    snapshotted = set(registry_for(config).load())
    source = config.replay_source()
    # The changelog part a backfill may replace: what the live pipeline wrote or could have written there, i.e.
    # positions from the live schema history's start (nothing before it decodes, and the destination did not
    # stream before it) up to the changelog's applied end W. Changes above W belong to live windows not applied
    # yet: stored now, they would be stored again by their window's plain append (replacing them instead would
    # delete the ones a window applies while the replay runs).
    applied = L.read_table_version(session, lk.changelog_path(), L.changelog_app_id(config.destination))
    start_at: Position | EventTime = EventTime(_ms(start))
    lo_key = 0
    clamped: dict[str, str] = {}
    first = _history_start(source.history_dir)
    if first is not None and first.timestamp_ms >= _ms(start):  # e.g. the first day of a day-partition backfill
        start_at, lo_key = first, first.key
        clamped["replayed_from"] = format_position(first)
        context.log.info(f"the destination's schema history begins at {format_position(first)} (its first "
                         "start): the backfill replays from there")
    merged: dict[str, L.MirrorResult] = {}
    journal = first.journal if first is not None else ""
    try:
        windows = list(replay_windows(source, root=root, destination=config.destination, label=0, start=start_at,
                                      end=EventTime(_ms(end) - 1), tables=chosen))
        rows = sum(m.rows for _, m in windows)
        journal = windows[0][1].start.journal if windows else journal
        context.log.info(f"backfill {start.isoformat()} .. {end.isoformat()} of {', '.join(chosen)}: "
                         f"{rows} row changes in {len(windows)} staged windows; the changelog is replaced up to "
                         f"its applied end {_at(applied, journal)}")
        replaced = 0
        if windows and applied is not None:
            # the changelog first: remerge_mirror decides by it which window holds a key's last change
            replaced = L.replace_changelog_range(session, lk, windows, tables=chosen, lo_key=lo_key,
                                                 hi_key=applied, start_ms=_ms(start), end_ms=_ms(end) - 1)
        refused: dict[str, str] = {}
        for d, m in windows:
            for t in L.mirror_tables(m):
                if t.name not in chosen or t.name not in snapshotted or t.name in refused:
                    continue  # a table still waiting for its snapshot has no mirror to repair
                try:
                    r = remerge_mirror(session, lk, d, m, t)
                except L.KeylessRemergeError as e:  # the other tables are still repaired; the summary says why
                    refused[t.name] = str(e)
                    context.log.warning(str(e))
                    continue
                merged.setdefault(t.name, L.MirrorResult()).add(r)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    span = {"backfill_start": start.isoformat(), "backfill_end": end.isoformat(), **clamped}
    if report_mirrors:
        for name, r in merged.items():
            context.log_event(AssetMaterialization(
                asset_key=keys_for(config).mirror(name), description="re-merged by a backfill",
                metadata={**span, "rows_inserted": r.inserted, "rows_updated": r.updated, "rows_deleted": r.deleted,
                          "replans": r.replans, "mirror_position": _at(r.position, journal),
                          "delta_version": r.version}))
    if report_changelog:
        from .partitions import first_partition_day

        for day in _days(start, end, first_partition_day(config)):
            context.log_event(AssetMaterialization(asset_key=keys_for(config).changelog, partition=day,
                                                   description="period replaced by a backfill", metadata=span))
    for name, r in merged.items():
        context.log.info(f"{name}: re-merge inserted {r.inserted}, updated {r.updated}, deleted {r.deleted} rows "
                         f"(passes planned again: {r.replans}); the mirror is at {_at(r.position, journal)}")
    return {**span, "rows_replayed": rows, "rows_replaced": int(replaced or 0),
            "changelog_applied_end": _at(applied, journal), "tables": MetadataValue.text(", ".join(chosen)),
            "mirrors": _mirrors_table(merged, journal),
            **({"mirrors_not_remerged": _refused_md(refused)} if refused else {})}


def _refused_md(refused: dict[str, str]) -> MetadataValue:
    return MetadataValue.md("\n".join(f"* `{t}`: {why}" for t, why in sorted(refused.items())))


def _at(key: int | None, journal: str) -> str:
    """An order key as binlog file:offset (named like ``journal``); "none" for no position."""
    if key is None:
        return "none"
    return key_text(key, journal) if journal else "{}:{}".format(*split_key(key))


def _mirrors_table(merged: dict[str, Any], journal: str) -> MetadataValue:
    """What the re-merge did per mirror, as a table the Dagster UI shows."""
    cols = [("table", "string"), ("inserted", "int"), ("updated", "int"), ("deleted", "int"), ("replans", "int"),
            ("mirror_position", "string"), ("delta_version", "int")]
    records = [TableRecord({"table": name, "inserted": r.inserted, "updated": r.updated, "deleted": r.deleted,
                            "replans": r.replans, "mirror_position": _at(r.position, journal),
                            "delta_version": r.version}) for name, r in sorted(merged.items())]
    return MetadataValue.table(records, schema=TableSchema([TableColumn(n, t) for n, t in cols]))


def backfill_op_body(context: OpExecutionContext, config: PipelineConfig, tables: Sequence[str],
                     spark: SparkResource, lake: LakeResource, start_time: str, end_time: str,
                     selection: Sequence[str]) -> dict[str, Any]:
    start = parse_time(start_time, "start_time")
    end = parse_time(end_time, "end_time") if end_time.strip() else None
    return run_backfill(context, config, tables, spark, lake, start=start, end=end, selection=list(selection),
                        report_mirrors=True, report_changelog=True)
