"""The assets: ``mysql/<schema>/<table>`` (source specs), ``canal/changelog`` and ``mirror/<schema>/<table>``,
plus a blocking reconciliation check per mirror.

What an asset does depends on the run that materializes it (all return MaterializeResult, no IO manager):

* window mode (``canal_window`` runs from the sensor: resources.canal_window.config.path is set): the
  changelog appends the staged window; a mirror first replays its snapshot catch-up, if the sensor passed
  one, then MERGEs the window's parts;
* snapshot mode (``canal_snapshot`` runs): a mirror is replaced by a consistent snapshot whose binlog
  position lands in the snapshot registry (the sensor then has the stream catch up from it);
* backfill mode (the changelog materialized for a partition range without a window, e.g. the UI's
  partition backfill): those days are replayed from the binlog, that range of the changelog is replaced and
  the affected mirrors are re-merged (``pipelines.defs.assets.backfill``).
"""


import datetime as dt
import shutil
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetsDefinition,
    AssetSpec,
    BackfillPolicy,
    BetaWarning,
    DailyPartitionsDefinition,
    Failure,
    FreshnessPolicy,
    MaterializeResult,
    MetadataValue,
    asset,
    asset_check,
)

from ...engine.config import PipelineConfig
from ...engine.window import EventTime, Position, WindowManifest, format_position, key_text, parse_position
from ..pools import check_writer_slot, writer_pool
from ..resources import CanalWindowResource, LakeResource, SparkResource
from .keys import LAG_CHECK, RECONCILE_CHECK, keys_for, split_table
from .partitions import first_partition_day


@dataclass
class CdcAssets:
    sources: list[AssetSpec]
    changelog: AssetsDefinition
    mirrors: dict[str, AssetsDefinition]
    checks: list[Any]
    partitions: DailyPartitionsDefinition


# --- positions and metadata -----------------------------------------------------------------------------------

def lag_seconds(timestamp_ms: int) -> float:
    return round(max(0.0, time.time() - timestamp_ms / 1000), 3) if timestamp_ms else 0.0


def window_metadata(manifest: WindowManifest) -> dict[str, Any]:
    return {
        "window": manifest.window,
        "attempt": manifest.attempt,
        "batch_ids": MetadataValue.text(",".join(map(str, manifest.batch_ids))),
        "binlog_start": format_position(manifest.start),
        "binlog_end": format_position(manifest.end),
        "gtid": manifest.end.gtid or "",
        "lag_seconds": lag_seconds(manifest.end.timestamp_ms),
    }


# --- the mirror's three modes ------------------------------------------------------------------------------------

def apply_window_to_table(session: Any, lk: Any, window_dir: Path, manifest: WindowManifest, name: str,
                          defaults: Any = None) -> Any:
    """Apply one staged window to one mirror. A RENAME TABLE naming this table is done at its position: every
    table of the statement is first brought up to it, then the rename (both idempotent, so the other mirror
    steps of the run find them done)."""
    from ...engine import lake as L

    tables = {t.name: t for t in L.mirror_tables(manifest)}
    total = L.MirrorResult()
    lo: int | None = None
    for pos, pairs in L.rename_statements(manifest):
        names = {f"{s}.{t}" for pair in pairs for s, t in pair}
        if name not in names:
            continue
        for other in sorted(names & set(tables)):
            r = L.apply_mirror(session, lk, window_dir, manifest, tables[other], upto=pos, defaults=defaults)
            if other == name:
                total.add(r)
        L.rename_mirror(session, lk, pairs, pos)
        lo = pos
    if name in tables:
        total.add(L.apply_mirror(session, lk, window_dir, manifest, tables[name], after=lo, defaults=defaults))
    return total


def mirror_from_window(context: AssetExecutionContext, config: PipelineConfig, name: str, spark: SparkResource,
                       lake: LakeResource, window: CanalWindowResource) -> MaterializeResult:
    """The window's changes of this table, after its snapshot catch-up when the sensor passed one (a run
    without a window is a catch-up alone, up to ``catch_up_end``)."""
    from ...engine import lake as L
    from ...engine.replay import replay_windows
    from ...engine.staging import load_window

    path = Path(window.path) if window.path else None
    manifest = load_window(path) if path is not None else None
    if manifest is not None:
        end = manifest.start  # the window itself applies from its start on
    elif window.catch_up_end:
        end = parse_position(window.catch_up_end)
    else:
        raise Failure(description=f"{name}: canal_window config has catch_up but neither path nor catch_up_end")
    from ...engine.defaults import source_defaults

    session, lk = spark.session(), lake.lake(config.lake_subdir)
    defaults = source_defaults(config.conn_kwargs)  # for rows that predate an ADD COLUMN (asked only then)
    total = L.MirrorResult()
    caught: dict[str, Any] = {}
    if catch_up := window.catch_up.get(name):
        start = parse_position(catch_up)
        rows = 0
        if start.key <= end.key:
            # the changes between the snapshot and this point, which earlier windows applied to the changelog
            # only: replayed for this table through a separate client (overlaps are harmless: applied parts
            # are skipped by position)
            root = config.staging_root / config.destination / "catchup" / context.run.run_id / name
            try:
                for d, m in replay_windows(config.replay_source(), root=root, destination=config.destination,
                                           label=0, start=start, end=end, tables=[name]):
                    total.add(apply_window_to_table(session, lk, d, m, name, defaults))
                    rows += m.rows
                    shutil.rmtree(d, ignore_errors=True)
            finally:
                shutil.rmtree(root, ignore_errors=True)
        caught = {"catch_up_from": catch_up, "catch_up_rows": rows}
    if manifest is not None and path is not None:
        total.add(apply_window_to_table(session, lk, path, manifest, name, defaults))
    at = manifest.end if manifest is not None else end
    context.log.info(f"{name}: {'window ' + str(manifest.window) if manifest else 'catch-up'}: {total.summary()}")
    return MaterializeResult(metadata={
        "rows_inserted": total.inserted, "rows_updated": total.updated, "rows_deleted": total.deleted,
        "skipped_parts": total.skipped_parts, "delta_version": total.version,
        "mirror_position": MetadataValue.text("-" if total.position is None else key_text(total.position, at.journal)),
        "binlog_position": MetadataValue.text(format_position(at)), "gtid": MetadataValue.text(at.gtid or "-"),
        "lag_seconds": lag_seconds(at.timestamp_ms),
        "window": manifest.window if manifest is not None else -1,
        **({"note": total.reason} if total.reason else {}), **caught,
    })


def _in_chunks(context: AssetExecutionContext, config: PipelineConfig, schema: str, table: str,
               spark: SparkResource, lake: LakeResource) -> bool:
    """Whether this load goes in chunks: a canal_snapshot run (the sensor's: the mirror stays pending until it is
    recorded), chunks configured, a table at least snapshot.chunked_above_rows large with a chunkable key, or a
    chunked load an earlier attempt began."""
    from ...engine import lake as L
    from ...engine.chunked_snapshot import chunk_key, estimated_rows
    from ...engine.reconcile import table_columns

    if not config.snapshot.chunk_rows or context.job_def.name != keys_for(config).snapshot_job:
        return False
    key = chunk_key(table_columns(config.conn_kwargs(), schema, table))
    if key is None:
        return False
    if L.chunked_begin(spark.session(), lake.lake(config.lake_subdir), schema, table) is not None:
        return True   # (where it stands is read once, by the load)
    return estimated_rows(config.conn_kwargs(), schema, table) >= config.snapshot.chunked_above_rows


def mirror_in_chunks(context: AssetExecutionContext, config: PipelineConfig, name: str,
                     spark: SparkResource, lake: LakeResource) -> MaterializeResult:
    from ...engine.chunked_snapshot import load_in_chunks
    from ...engine.registry import registry_for, snapshot_data_dir

    schema, table = split_table(name)
    t0 = time.monotonic()
    r = load_in_chunks(spark.session(), lake.lake(config.lake_subdir), config.conn_kwargs(), schema, table,
                       snapshot_data_dir(config, context.run.run_id) / name, chunk_rows=config.snapshot.chunk_rows,
                       readers=config.snapshot.readers, chunk_bytes=config.snapshot.chunk_bytes,
                       on_chunk=lambda c: context.log.info(
                           f"{name}: chunk {c.segment}.{c.index} ({c.after}, {c.last}]: {c.rows} rows at "
                           f"{format_position(c.position)}, transaction open {c.held_seconds:.2f} s"))
    registry_for(config).record_snapshot(name, format_position(r.begin), r.begin.key, r.rows, context.run.run_id)
    took = time.monotonic() - t0
    resumed = ", ".join(f"{s}: {k}" for s, k in sorted(r.resumed_after.items())) if r.resumed else "-"
    context.log.info(f"{name}: loaded in chunks of {config.snapshot.chunk_rows} rows by {len(r.readers)} readers: "
                     f"{r.rows} rows in {r.chunks} chunks over {r.segments} key segments"
                     f"{' (resumed, by segment after key: ' + resumed + ')' if r.resumed else ''}"
                     f"{' (started again: the columns changed since the unfinished load began)' if r.restarted else ''}"
                     f", longest source transaction {r.longest_hold:.2f} s; the stream catches up from "
                     f"{format_position(r.begin)}")
    return MaterializeResult(metadata={
        "rows_inserted": r.rows, "rows_updated": 0, "rows_deleted": 0, "snapshot_rows": r.rows,
        "snapshot_chunks": r.chunks, "chunk_rows": config.snapshot.chunk_rows, "key_segments": r.segments,
        "readers": len(r.readers),
        "resumed_after_keys": MetadataValue.text(resumed), "restarted_for_changed_columns": r.restarted,
        "longest_source_transaction_seconds": round(r.longest_hold, 3),
        "largest_chunk_bytes": r.largest_chunk_bytes,
        "binlog_position": MetadataValue.text(format_position(r.begin)),
        "rows_per_second": round(r.rows / took, 1) if took > 0 else 0.0,
        "unrepresentable": MetadataValue.json(r.unrepresentable),
    })


def mirror_from_snapshot(context: AssetExecutionContext, config: PipelineConfig, name: str,
                         spark: SparkResource, lake: LakeResource) -> MaterializeResult:
    from ...engine import lake as L
    from ...engine.registry import registry_for, snapshot_data_dir
    from ...engine.snapshot import take_snapshot

    schema, table = split_table(name)
    if _in_chunks(context, config, schema, table, spark, lake):
        return mirror_in_chunks(context, config, name, spark, lake)
    out = snapshot_data_dir(config, context.run.run_id) / name
    taken = dt.datetime.now(dt.UTC)
    try:
        snap = take_snapshot(config.conn_kwargs(), schema, table, out)
        version = L.write_snapshot(spark.session(), lake.lake(config.lake_subdir), schema, table, snap.path,
                                   snap.position_key, snapshot_ts=taken,
                                   keyless=not any(c.is_key for c in snap.columns))
    finally:
        shutil.rmtree(out, ignore_errors=True)
    # the sensor reads this: the next window run catches the mirror up from this position
    registry_for(config).record_snapshot(name, format_position(snap.position), snap.position_key, snap.rows,
                                         context.run.run_id)
    return MaterializeResult(metadata={
        "rows_inserted": snap.rows, "rows_updated": 0, "rows_deleted": 0, "snapshot_rows": snap.rows,
        "binlog_position": MetadataValue.text(format_position(snap.position)), "delta_version": version,
        "lag_seconds": round((dt.datetime.now(dt.UTC) - taken).total_seconds(), 3),
        "unrepresentable": MetadataValue.json(snap.unrepresentable),
    })


# --- reconciliation ----------------------------------------------------------------------------------------------

RECONCILE_MARGIN_MS = 60_000  # replay from this long before the mirror's last change: a transaction boundary


def _replay_start(config: PipelineConfig, session: Any, lk: Any, name: str, version: int,
                  ) -> Position | EventTime | None:
    """A binlog start at or before a transaction boundary below the mirror's position ``version``: starting
    early is harmless (applied parts are skipped, the guard keeps newer rows), starting inside a
    transaction is not."""
    from pyspark.sql import functions as F

    from ...engine.registry import registry_for

    snap = registry_for(config).load().get(name)
    if snap and int(snap["position_key"]) == version + 1:  # still exactly at its snapshot
        return parse_position(snap["position"])
    schema, table = split_table(name)
    row = (session.read.format("delta").load(lk.changelog_path())
           .where((F.col("schema_name") == schema) & (F.col("table_name") == table) & (F.col("pos") == version))
           .select(F.min("execute_time").alias("t")).first())
    if row is None or row["t"] is None:
        return None
    return EventTime(int(row["t"].timestamp() * 1000) - RECONCILE_MARGIN_MS)


def _columns_not_added_yet(df: Any, columns: Sequence[Any], defaults: Any, schema: str,
                           table: str) -> tuple[Any, list[str]]:
    """Source columns the mirror has not added yet (an ADD COLUMN, and no change of the table since): the mirror adds
    them at the table's next change, existing rows taking the source's default (apply_mirror), so the mirror at S
    is compared as that. Returns the frame and those columns."""
    from pyspark.sql import functions as F

    from ...engine.types import spark_type

    have = {f.name.lower() for f in df.schema.fields}
    added = [c for c in columns if c.name.lower() not in have]
    for c in added:
        value = defaults(schema, table, c.name, c.mysql_type)
        df = df.withColumn(c.name, F.lit(value).cast(spark_type(c.mysql_type, c.name)))
    return df, [c.name for c in added]


def reconcile_mirror(context: AssetCheckExecutionContext, config: PipelineConfig, name: str,
                     spark: SparkResource, lake: LakeResource) -> AssetCheckResult:
    """Row count and order-independent checksum of the source (consistent snapshot at position S) against
    the mirror moved forward to S: the mirror is at its position W <= S, so the binlog up to S is replayed and
    previewed on top of it (nothing written)."""
    from ...engine import lake as L
    from ...engine.defaults import source_defaults
    from ...engine.reconcile import ReconcileError, dataframe_fingerprint, source_fingerprint, table_columns
    from ...engine.replay import replay_windows

    schema, table = split_table(name)
    session, lk = spark.session(), lake.lake(config.lake_subdir)

    def fail(why: str) -> AssetCheckResult:
        return AssetCheckResult(passed=False, severity=AssetCheckSeverity.ERROR, description=f"{name}: {why}")

    # one snapshot of the mirror, its watermark W and its Delta version together: a window run may commit beside
    # this check, and the rows compared must be those at W. W is read before the source's position S, so W <= S.
    path = lk.mirror_path(schema, table)
    state = L.table_state(session, path, L.mirror_app_id(schema, table))
    version = state.position
    if version is None:
        return fail("the mirror has no applied change yet")
    columns = table_columns(config.conn_kwargs(), schema, table)
    src = source_fingerprint(config.conn_kwargs(), schema, table, columns)
    if src.position is None:
        return fail("the source reports no binlog snapshot position")
    df = L.read_version(session, path, state)
    defaults = source_defaults(config.conn_kwargs)
    replayed, not_yet = 0, list[str]()
    root = config.staging_root / config.destination / "reconcile" / context.run.run_id / name
    try:
        if src.position.key > version + 1:
            start = _replay_start(config, session, lk, name, version)
            if start is None:
                return fail(f"no changelog row at the mirror's position {version}: cannot tell where to replay from")
            windows = list(replay_windows(config.replay_source(), root=root, destination=config.destination,
                                          label=0, start=start, end=src.position, tables=[name], chunk_rows=10**9,
                                          from_history_start=True))
            with_rows = [(d, m, t) for d, m in windows for t in m.tables if t.name == name]
            if len(with_rows) > 1:  # preview_mirror previews one window on top of the stored mirror
                return fail(f"the replay up to {format_position(src.position)} came in {len(with_rows)} windows")
            for d, m, t in with_rows:
                df = L.preview_mirror(session, lk, d, m, t, state, defaults=defaults)
            replayed = sum(m.rows for _, m in windows)
        df, not_yet = _columns_not_added_yet(df, columns, defaults, schema, table)
        mine = dataframe_fingerprint(df, columns, label="mirror")
    except (ReconcileError, L.MirrorDivergedError) as e:  # e.g. a source column the mirror has not seen yet
        return fail(str(e))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    src.label = "source"
    diff = src.diff(mine)
    note = (f" (source column(s) {', '.join(not_yet)} not in the mirror yet: compared as their defaults, which the "
            "mirror gives existing rows with the table's next change)") if not_yet else ""
    return AssetCheckResult(
        passed=not diff, severity=AssetCheckSeverity.ERROR,
        description=(f"{name}: {diff}" if diff else f"{name}: {src.count} rows match at "
                     f"{format_position(src.position)}") + note,
        metadata={"source_rows": src.count, "mirror_rows": mine.count, "source_checksum": f"{src.checksum:016x}",
                  "mirror_checksum": f"{mine.checksum:016x}", "source_position": format_position(src.position),
                  "mirror_position": key_text(version, src.position.journal), "replayed_rows": replayed})


# --- definitions -------------------------------------------------------------------------------------------------

def _not_a_window_run(name: str) -> Failure:
    return Failure(
        description=f"{name} is written by the canal sensor's window runs and by backfills; materializing it without "
                    "a window or a partition range has nothing to apply. To repair a period, backfill its partitions "
                    "(or run canal_backfill); to reload a mirror, materialize the mirror.")


def _changelog_asset(config: PipelineConfig, tables: Sequence[str], sources: Sequence[AssetSpec],
                     partitions: DailyPartitionsDefinition) -> AssetsDefinition:
    keys = keys_for(config)

    @asset(key=keys.changelog, deps=[s.key for s in sources], partitions_def=partitions,
           group_name=f"{keys.group}canal",
           backfill_policy=BackfillPolicy.single_run(), kinds={"spark", "delta"},
           pool=writer_pool(config.destination),
           description="Every row change, appended to Delta once per batch, partitioned by UTC date. A partition "
                       "backfill replays those days from the binlog and re-merges the affected mirrors.")
    def changelog(context: AssetExecutionContext, spark: SparkResource, lake: LakeResource,
                  canal_window: CanalWindowResource) -> MaterializeResult:
        check_writer_slot(context)
        if canal_window.path:
            from ...engine import lake as L
            from ...engine.staging import load_window

            manifest = load_window(canal_window.path)
            written = L.apply_changelog(spark.session(), lake.lake(config.lake_subdir), Path(canal_window.path),
                                        manifest)
            return MaterializeResult(metadata={"rows": manifest.rows, "rows_written": int(written or 0),
                                               "tables": len(manifest.tables), **window_metadata(manifest),
                                               "spark_started_at": spark.started_at})
        # a range (a backfill), or one day (the UI launches a single partition as a run tagged with it)
        if context.has_partition_key_range or context.has_partition_key:
            from .backfill import run_backfill

            tw = context.partition_time_window
            summary = run_backfill(context, config, tables, spark, lake, start=tw.start, end=tw.end,
                                   report_mirrors=True)
            return MaterializeResult(metadata=summary)
        raise _not_a_window_run("canal/changelog")

    return changelog


def build_cdc_assets(config: PipelineConfig, tables: Sequence[str]) -> CdcAssets:
    keys = keys_for(config)
    sources = [
        AssetSpec(keys.source(t), group_name=f"{keys.group}mysql", kinds={"mysql"},
                  description=f"Source table {t} on {config.destination!r} (read from the binlog by Canal).")
        for t in tables
    ]
    partitions = DailyPartitionsDefinition(start_date=first_partition_day(config).isoformat(), timezone="UTC",
                                           end_offset=1)
    freshness = FreshnessPolicy.time_window(fail_window=dt.timedelta(seconds=config.freshness.fail_seconds),
                                            warn_window=dt.timedelta(seconds=config.freshness.warn_seconds))

    with warnings.catch_warnings():  # backfill_policy is "beta"; a single-run backfill is what we want
        warnings.simplefilter("ignore", BetaWarning)
        changelog = _changelog_asset(config, tables, sources, partitions)

    def make_mirror(name: str) -> AssetsDefinition:
        @asset(key=keys.mirror(name), deps=[keys.changelog], group_name=f"{keys.group}mirror",
               kinds={"spark", "delta"},
               freshness_policy=freshness, pool=writer_pool(config.destination),
               description=f"{name} as of the last applied window: Delta MERGE of the latest change per primary "
                           "key in binlog order; an older change never overwrites a newer one. A table without a "
                           "primary key: every row, duplicates included (copies numbered in _canal_dup). Kept by the "
                           "canal sensor's window runs; materializing it yourself (Materialize in the UI) reloads it "
                           "from a consistent snapshot of the source, and the stream then catches it up from the "
                           "snapshot's binlog position.")
        def mirror(context: AssetExecutionContext, spark: SparkResource, lake: LakeResource,
                   canal_window: CanalWindowResource) -> MaterializeResult:
            check_writer_slot(context)
            if canal_window.path or canal_window.catch_up:
                return mirror_from_window(context, config, name, spark, lake, canal_window)
            if context.job_def.name == keys.window_job:
                raise Failure(description=f"{name}: a canal_window run without a staged window or a catch-up: "
                                          "window runs are launched by the canal sensor")
            # canal_snapshot (initial load), or a materialization from the UI / API: reload from a snapshot
            return mirror_from_snapshot(context, config, name, spark, lake)

        return mirror

    every = config.sensor.reconcile_interval_seconds
    cadence = (f"The canal sensor runs it in canal_reconcile runs beside the windows, for each mirror about every "
               f"{every:.0f} s."
               if every and config.sensor.reconcile_tables_per_run else "It runs on demand only.")

    def make_check(name: str) -> Any:
        @asset_check(asset=keys.mirror(name), name=RECONCILE_CHECK, blocking=False,
                     description="Row count and order-independent checksum of the source (consistent snapshot) "
                                 f"against the mirror moved forward to the same binlog position. {cadence} On a "
                                 "mismatch, materialize the mirror to reload it from a snapshot.")
        def reconcile(context: AssetCheckExecutionContext, spark: SparkResource,
                      lake: LakeResource) -> AssetCheckResult:
            try:
                return reconcile_mirror(context, config, name, spark, lake)
            except Exception as e:  # a check that cannot run is a failed check, never a failed window run
                context.log.exception(f"reconciling {name} failed")
                return AssetCheckResult(passed=False, severity=AssetCheckSeverity.WARN,
                                        description=f"{name}: could not reconcile ({type(e).__name__}: {e})")

        return reconcile

    def make_lag_check(name: str) -> Any:
        @asset_check(asset=keys.mirror(name), name=LAG_CHECK, blocking=False,
                     description="Whether the destination reads its source and holds every change up to "
                                 f"freshness.warn_seconds ({config.freshness.warn_seconds} s) ago: reported by the "
                                 "canal sensor when its verdict changes (a failure shows within a tick and clears by "
                                 "itself); executing it shows the sensor's latest verdict.")
        def lag() -> AssetCheckResult:
            from ..status import lag_check_result

            ev = lag_check_result(config, name)
            return AssetCheckResult(passed=ev.passed, severity=ev.severity, description=ev.description,
                                    metadata=dict(ev.metadata))

        return lag

    mirrors = {t: make_mirror(t) for t in tables}
    checks = [make_check(t) for t in tables] + [make_lag_check(t) for t in tables]
    return CdcAssets(sources, changelog, mirrors, checks, partitions)
