"""A mirror loaded in key-range chunks (pipelines.engine.chunked_snapshot): the Delta side.

While a chunked load is under way the mirror carries the table property ``canal.snapshot.chunked`` = the binlog
position ("file:offset") read when the load began, before its first chunk, and ``canal.snapshot.chunked.plan`` =
the upper bounds of the key segments the load was cut into and a digest of the table's columns then (set in one
commit). Each chunk is one append commit of
rows whose ``_canal_pos`` is that chunk's own snapshot position (minus one, as write_snapshot does); a segment's
chunks cover ascending, disjoint key ranges, committed in that order, and nothing else writes the mirror meanwhile
(its table is pending a snapshot, and the writer pool holds window steps back), so the largest key in a segment
says where its next chunk starts, whatever happened between a commit and a crash. ``finish_chunked`` records the
begin position as the mirror's txn version and clears the properties: the stream's catch-up from there applies
every later change, and the per-row guard (``_canal_pos``) drops the ones a chunk already saw.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .delta_log import is_delta_table, table_state
from .delta_sql import _q, _retry_concurrent, _txn
from .layout import PROP_CHUNK_PLAN, PROP_CHUNKED, Lake, mirror_app_id
from .mirror import snapshot_frame

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import SparkSession


def _properties(spark: SparkSession, lake: Lake, schema: str, table: str) -> dict[str, str]:
    path = lake.mirror_path(schema, table)
    return table_state(spark, path, mirror_app_id(schema, table)).properties if is_delta_table(spark, path) else {}


def chunked_begin(spark: SparkSession, lake: Lake, schema: str, table: str) -> str | None:
    """The begin position ("file:offset") of a chunked load under way in the mirror, else None."""
    return _properties(spark, lake, schema, table).get(PROP_CHUNKED) or None


@dataclass(frozen=True, slots=True)
class ChunkedProgress:
    begin: str                   # the load's begin position, "file:offset"
    bounds: list[Any]            # the key segments' upper bounds (segment i is (bounds[i-1], bounds[i]]); a load
                                 # begun without a plan: [None], one segment over every key
    columns: str                 # the digest of the columns the load began with ("": not recorded)
    done: dict[int, Any]         # segment -> the largest key written in it (segments with nothing written: absent)


def chunked_progress(spark: SparkSession, lake: Lake, schema: str, table: str, key: str) -> ChunkedProgress | None:
    """A chunked load under way: its begin position, its segments and how far each got; else None. Each segment's
    chunks are committed in key order, so its largest key written is where it goes on."""
    from pyspark.sql import functions as F

    props = _properties(spark, lake, schema, table)
    begin = props.get(PROP_CHUNKED)
    if not begin:
        return None
    plan = json.loads(props.get(PROP_CHUNK_PLAN) or "{}")
    bounds: list[Any] = plan.get("bounds", [None])
    k = F.col(_q(key))
    segment: Any = F.lit(len(bounds) - 1)
    for i in reversed(range(len(bounds) - 1)):
        segment = F.when(k <= _key_literal(bounds[i]), F.lit(i)).otherwise(segment)
    mirror = spark.read.format("delta").load(lake.mirror_path(schema, table))
    rows = mirror.where(k.isNotNull()).groupBy(segment.alias("s")).agg(F.max(k).alias("k")).collect()
    return ChunkedProgress(begin, bounds, str(plan.get("columns", "")), {int(r["s"]): r["k"] for r in rows})


def _key_literal(key: int) -> Any:
    """A key as a Spark literal: BIGINT UNSIGNED keys past 2^63 (DECIMAL(20,0) in the mirror) do not fit a long."""
    from pyspark.sql import functions as F

    return F.lit(key) if -(2**63) <= key < 2**63 else F.lit(Decimal(key))


def begin_chunked(spark: SparkSession, lake: Lake, schema: str, table: str, arrow_schema: pa.Schema,
                  begin: str, bounds: list[Any], columns: str) -> None:
    """An empty mirror of the table's columns, marked as loading in chunks from ``begin`` over the key segments
    whose upper bounds are ``bounds``, of the columns whose digest is ``columns``."""
    import pyarrow as pa

    path = lake.mirror_path(schema, table)
    exists = is_delta_table(spark, path)
    df = snapshot_frame(spark, pa.Table.from_batches([], schema=arrow_schema), 0, None, keyless=False)
    w = df.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
    if not exists:
        w = w.options(**lake.mirror_properties())
    with _txn(spark, None, None, f"canal:snapshot-chunked:begin@{begin}"):
        _retry_concurrent(lambda: w.save(path), f"chunked snapshot into {path}")
    plan = json.dumps({"bounds": bounds, "columns": columns}, separators=(",", ":"))   # ints and hex: no quoting
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{PROP_CHUNK_PLAN}' = '{plan}', "
              f"'{PROP_CHUNKED}' = '{begin}')")


def append_chunk(spark: SparkSession, lake: Lake, schema: str, table: str, parts: str | Path, position_key: int,
                 snapshot_ts: dt.datetime, note: str) -> None:
    """One chunk's rows (Parquet parts), each at the chunk's snapshot position: one append commit."""
    path = lake.mirror_path(schema, table)
    df = snapshot_frame(spark, str(parts), position_key - 1, snapshot_ts, keyless=False)
    with _txn(spark, None, None, note):
        _retry_concurrent(lambda: df.write.format("delta").mode("append").save(path), f"chunk into {path}")


def finish_chunked(spark: SparkSession, lake: Lake, schema: str, table: str, begin_key: int) -> int:
    """The load done: txn version begin_key - 1 recorded (as a snapshot at the begin position would), the property
    cleared; returns the Delta version. Done again after a crash between the two, it changes nothing more."""
    path, app = lake.mirror_path(schema, table), mirror_app_id(schema, table)
    df = spark.read.format("delta").load(path).limit(0)
    with _txn(spark, app, begin_key - 1, f"canal:snapshot-chunked:done@{begin_key}"):
        df.write.format("delta").mode("append").save(path)
    spark.sql(f"ALTER TABLE delta.`{path}` UNSET TBLPROPERTIES IF EXISTS ('{PROP_CHUNKED}', '{PROP_CHUNK_PLAN}')")
    return table_state(spark, path, app).version
