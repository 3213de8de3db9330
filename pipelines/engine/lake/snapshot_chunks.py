"""A mirror loaded in key-range chunks (pipelines.engine.chunked_snapshot): the Delta side.

While a chunked load is under way the mirror carries the table property ``canal.snapshot.chunked`` = the binlog
position ("file:offset") read when the load began, before its first chunk. Each chunk is one append commit of
rows whose ``_canal_pos`` is that chunk's own snapshot position (minus one, as write_snapshot does); chunks cover
ascending, disjoint key ranges and nothing else writes the mirror meanwhile (its table is pending a snapshot, and
the writer pool holds window steps back), so the largest key in the mirror says where the next chunk starts,
whatever happened between a commit and a crash. ``finish_chunked`` records the begin position as the mirror's
txn version and clears the property: the stream's catch-up from there applies every later change, and the per-row
guard (``_canal_pos``) drops the ones a chunk already saw.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .delta_log import is_delta_table, table_state
from .delta_sql import _q, _retry_concurrent, _txn
from .layout import PROP_CHUNKED, Lake, mirror_app_id
from .mirror import snapshot_frame

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import SparkSession

def chunked_begin(spark: SparkSession, lake: Lake, schema: str, table: str) -> str | None:
    """The begin position ("file:offset") of a chunked load under way in the mirror, else None."""
    path = lake.mirror_path(schema, table)
    if not is_delta_table(spark, path):
        return None
    return table_state(spark, path, mirror_app_id(schema, table)).properties.get(PROP_CHUNKED) or None


def chunked_progress(spark: SparkSession, lake: Lake, schema: str, table: str, key: str) -> tuple[str, Any] | None:
    """A chunked load under way: (its begin position "file:offset", the largest key written, None before the first
    chunk); None when no chunked load is under way."""
    from pyspark.sql import functions as F

    begin = chunked_begin(spark, lake, schema, table)
    if begin is None:
        return None
    path = lake.mirror_path(schema, table)
    row = spark.read.format("delta").load(path).agg(F.max(F.col(_q(key))).alias("k")).first()
    return begin, (row["k"] if row is not None else None)


def begin_chunked(spark: SparkSession, lake: Lake, schema: str, table: str, arrow_schema: pa.Schema,
                  begin: str) -> None:
    """An empty mirror of the table's columns, marked as loading in chunks from ``begin``."""
    import pyarrow as pa

    path = lake.mirror_path(schema, table)
    exists = is_delta_table(spark, path)
    df = snapshot_frame(spark, pa.Table.from_batches([], schema=arrow_schema), 0, None, keyless=False)
    w = df.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
    if not exists:
        w = w.options(**lake.mirror_properties())
    with _txn(spark, None, None, f"canal:snapshot-chunked:begin@{begin}"):
        _retry_concurrent(lambda: w.save(path), f"chunked snapshot into {path}")
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{PROP_CHUNKED}' = '{begin}')")


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
    spark.sql(f"ALTER TABLE delta.`{path}` UNSET TBLPROPERTIES IF EXISTS ('{PROP_CHUNKED}')")
    return table_state(spark, path, app).version
