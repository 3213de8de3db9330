"""``canal/changelog``: every row change of a window appended once (an overlapping re-delivery is an insert-only
MERGE on (destination, server_id, pos, row)), and a time range of it replaced for a backfill."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..window import TableChanges, WindowManifest, changelog_schema
from .delta_log import table_state
from .delta_sql import (
    _create_table,
    _local,
    _merge,
    _read_staged,
    _retry_concurrent,
    _same_types,
    _spark_schema,
    _sql_str,
    _txn,
)
from .layout import CHANGELOG_KEY, Lake, LakeError, _file, changelog_app_id

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)


def _changelog_struct() -> StructType:
    return _spark_schema(changelog_schema())


def _ensure_changelog(spark: SparkSession, path: str, exists: bool | None = None) -> None:
    """``exists``: the caller's knowledge of the table (None: look)."""
    if exists is None:
        exists = table_state(spark, path, "").exists
    if not exists:
        _create_table(spark, path, _changelog_struct(), partitioned_by="event_date")


def _read_changelog(spark: SparkSession, window_dir: str | Path, manifest: WindowManifest) -> DataFrame | None:
    if not manifest.changelog:
        return None
    file = _file(window_dir, manifest.changelog)
    df = _read_staged(spark, file)
    want = _changelog_struct()
    if not _same_types(df.schema, want):
        raise LakeError(f"{file}: staged changelog columns {df.schema.simpleString()} are not the contract's "
                        f"{want.simpleString()} (pipelines.engine.window.changelog_schema)")
    return df


def _bounds(src: DataFrame, file: str) -> tuple[int, Any, Any, Any, Any]:
    """(rows, min pos, max pos, min event_date, max event_date) of a staged changelog: from the Parquet footer's
    statistics when the file is local and has them, else with one Spark aggregation."""
    from pyspark.sql import functions as F

    local = _local(file)
    if local is not None:
        import pyarrow.parquet as pq

        meta = pq.ParquetFile(local).metadata
        names = [meta.schema.column(i).name for i in range(meta.num_columns)]
        ip, ie = names.index("pos"), names.index("event_date")
        stats = [(meta.row_group(g).column(ip).statistics, meta.row_group(g).column(ie).statistics)
                 for g in range(meta.num_row_groups) if meta.row_group(g).num_rows]
        if all(sp is not None and sp.has_min_max and se is not None and se.has_min_max
               and sp.null_count == 0 and se.null_count == 0 for sp, se in stats):
            if not stats:
                return 0, None, None, None, None
            return (meta.num_rows, min(sp.min for sp, _ in stats), max(sp.max for sp, _ in stats),
                    min(se.min for _, se in stats), max(se.max for _, se in stats))
    b = src.agg(F.count(F.lit(1)).alias("n"), F.min("pos").alias("lo"), F.max("pos").alias("hi"),
                F.min("event_date").alias("dlo"), F.max("event_date").alias("dhi")).first()
    assert b is not None
    return int(b["n"]), b["lo"], b["hi"], b["dlo"], b["dhi"]


def _changelog_merge(spark: SparkSession, path: str, src: DataFrame, file: str, destination: str) -> int:
    """Insert the rows of ``src`` whose (destination, server_id, pos, row) the table lacks; returns rows added.

    The literal pos and event_date bounds in the ON condition let Delta skip every file outside the window.
    (A staged changelog holds each change once, so the source needs no de-duplication.)"""
    n, lo, hi, dlo, dhi = _bounds(src, file)
    if not n:
        return 0
    dest = _sql_str(destination)
    on = (f"t.destination = {dest} AND s.destination = {dest} AND t.server_id <=> s.server_id "
          f"AND t.pos = s.pos AND t.`row` = s.`row` AND t.pos BETWEEN {int(lo)} AND {int(hi)}")
    if dlo is not None:  # (rows without a date, which the contract does not produce, stay comparable)
        on += (f" AND (t.event_date BETWEEN DATE'{dlo.isoformat()}' AND DATE'{dhi.isoformat()}'"
               " OR t.event_date IS NULL)")
    rows = _retry_concurrent(lambda: _merge(spark, path, src, on, ["WHEN NOT MATCHED THEN INSERT *"]),
                             f"changelog merge into {path}")
    return int(rows[0]["num_inserted_rows"]) if rows else 0


def _append_safe(file: str, done: int | None) -> int | None:
    """Rows of the staged changelog at ``file`` when all of them are new to a table whose txn says every change
    up to ``done`` is applied: one source (a single server id) and every pos above ``done``. None when that is
    unknown from the Parquet footer (an object-store file, no statistics) or not so."""
    local = _local(file)
    if local is None:
        return None
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(local).metadata
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    ip, iserver = names.index("pos"), names.index("server_id")
    lo: int | None = None
    servers: set[Any] = set()
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        if not rg.num_rows:
            continue
        sp, ss = rg.column(ip).statistics, rg.column(iserver).statistics
        if sp is None or ss is None or not (sp.has_min_max and ss.has_min_max) or sp.null_count or ss.null_count:
            return None
        lo = sp.min if lo is None else min(lo, sp.min)
        servers |= {ss.min, ss.max}
    if lo is None or len(servers) != 1 or (done is not None and lo <= done):
        return None
    return meta.num_rows


def apply_changelog(spark: SparkSession, lake: Lake, window_dir: str | Path, manifest: WindowManifest) -> int:
    """Append the window's changelog rows to ``canal/changelog``; returns the rows added.

    Idempotent: the commit carries txn ("canal:changelog:<destination>", end position key), so the same window
    again or an older one after a newer one is skipped by Delta. A window that starts after the recorded end
    (the steady state) is a plain append; an overlapping re-delivery (same start, later end) goes through an
    insert-only MERGE that adds only the changes the table does not hold yet."""
    path = lake.changelog_path()
    app, version = changelog_app_id(manifest.destination), manifest.end.key
    src = _read_changelog(spark, window_dir, manifest)
    if src is None:
        return 0
    state = table_state(spark, path, app)
    done = state.position
    if done is not None and version <= done:
        log.info("changelog: window %s (end %s) already applied (txn %s >= %s), skipped",
                 manifest.window, version, done, version)
        return 0
    _ensure_changelog(spark, path, state.exists)
    file = _file(window_dir, manifest.changelog or "")
    fresh = _append_safe(file, done)
    with _txn(spark, app, version, f"canal:window:{manifest.destination}:{manifest.window}:{version}"):
        if fresh is not None:
            # no row at or below the recorded end: nothing to de-duplicate against (a MERGE would re-read the
            # table's files in the window's range for nothing)
            _retry_concurrent(lambda: src.write.format("delta").mode("append").save(path),
                              f"changelog append to {path}")
            added = fresh
        else:
            added = _changelog_merge(spark, path, src, file, manifest.destination)
    log.info("changelog: window %s added %d rows (%s)", manifest.window, added,
             "append" if fresh is not None else "insert-only merge")
    return added


def _table_filter(tables: Iterable[str | tuple[str, str] | TableChanges]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for t in tables:
        if isinstance(t, TableChanges):
            out.append((t.schema, t.table))
        elif isinstance(t, tuple):
            out.append((t[0], t[1]))
        else:
            schema, sep, table = t.partition(".")
            if not sep:
                raise ValueError(f"table {t!r} is not schema.table")
            out.append((schema, table))
    return sorted(set(out))


def replace_changelog_range(
    spark: SparkSession,
    lake: Lake,
    window_dir: str | Path | Sequence[tuple[str | Path, WindowManifest]],
    manifest: WindowManifest | None = None,
    tables: Iterable[str | tuple[str, str] | TableChanges] = (),
    lo_key: int | None = None,
    hi_key: int | None = None,
    *,
    start_ms: int | None = None,
    end_ms: int | None = None,
) -> int:
    """Replace the changelog rows of ``tables`` in a range by the staged rows of one window (``window_dir`` +
    ``manifest``) or of several (``window_dir`` = [(dir, manifest), ...], e.g. a whole backfill replay), in one
    commit (replaceWhere); returns the rows written.

    The range: lo_key <= pos <= hi_key and/or start_ms <= execute_time (ms since the epoch) <= end_ms; rows of
    the range the windows do not hold are deleted. The changelog txn version is left alone (a backfill replays
    positions below it)."""
    from pyspark.sql import functions as F

    windows = [(window_dir, manifest)] if isinstance(window_dir, str | Path) else list(window_dir)
    if not windows or any(m is None for _, m in windows):
        raise ValueError("replace_changelog_range needs a window directory and its manifest, or (dir, manifest) pairs")
    dests = {m.destination for _, m in windows if m is not None}
    if len(dests) != 1:
        raise ValueError(f"windows of several destinations: {sorted(dests)}")
    destination = dests.pop()
    chosen = _table_filter(tables)
    if not chosen:
        raise ValueError("replace_changelog_range needs the tables whose rows it replaces")
    if (lo_key is None) != (hi_key is None) or (start_ms is None) != (end_ms is None) or (
            lo_key is None and start_ms is None):
        raise ValueError("give the range as lo_key and hi_key, and/or start_ms and end_ms")

    which = " OR ".join(f"(schema_name = {_sql_str(s)} AND table_name = {_sql_str(t)})" for s, t in chosen)
    preds = [f"destination = {_sql_str(destination)}", f"({which})"]
    if lo_key is not None:
        # no BETWEEN and no function calls: replaceWhere on this Delta/Spark pair fails to resolve them
        preds.append(f"pos >= {int(lo_key)} AND pos <= {int(hi_key)}")  # type: ignore[arg-type]
    if start_ms is not None:
        day = dt.datetime.fromtimestamp(start_ms / 1000, dt.UTC).date()
        last = dt.datetime.fromtimestamp(end_ms / 1000, dt.UTC).date()  # type: ignore[operator]
        preds.append(f"event_date >= DATE'{day.isoformat()}' AND event_date <= DATE'{last.isoformat()}'")
        preds.append(f"execute_time >= {_ts_literal(start_ms)} AND execute_time <= {_ts_literal(end_ms)}")  # type: ignore[arg-type]
    predicate = " AND ".join(preds)

    frames = [df for d, m in windows if (df := _read_changelog(spark, d, m)) is not None]  # type: ignore[arg-type]
    src = frames[0] if frames else spark.createDataFrame([], _changelog_struct())
    for f in frames[1:]:
        src = src.unionByName(f)
    src = src.where(F.expr(predicate)).dropDuplicates(list(CHANGELOG_KEY))
    path = lake.changelog_path()
    _ensure_changelog(spark, path)
    written = src.count()   # (the commit's numOutputRows also counts the rows it copies out of rewritten files)
    with _txn(spark, None, None, f"canal:backfill:{destination}"):
        _retry_concurrent(lambda: src.write.format("delta").mode("overwrite").option("replaceWhere", predicate)
                          .save(path), f"replace range of {path}")
    log.info("changelog: replaced %s with %d staged rows", predicate, written)
    return written


def _ts_literal(ms: int) -> str:
    t = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return f"TIMESTAMP'{t:%Y-%m-%d %H:%M:%S.%f}+00:00'"
