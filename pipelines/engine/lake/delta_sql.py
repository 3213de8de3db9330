"""The Spark and Delta SQL building blocks shared by the changelog and the mirrors: session confs that make a write
idempotent, retries after a concurrent commit, quoting, the Arrow -> Spark type mapping, CREATE TABLE and MERGE in
SQL (both work on classic and Spark Connect sessions), reading a staged file."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .layout import LakeError

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

log = logging.getLogger(__name__)

_TXN_APP = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
_MATERIALIZE = "spark.databricks.delta.merge.materializeSource"
# MERGE sources here are immutable staged files (deterministic): Delta need not copy them first
MERGE_SOURCE_MATERIALIZE = "none"
_RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
# Delta's idempotency confs are session-wide and never reset by Delta: set and restored under one lock
_CONF_LOCK = threading.RLock()


@contextmanager
def _session_conf(spark: SparkSession, settings: dict[str, str | None]) -> Iterator[None]:
    with _CONF_LOCK:
        saved = {k: spark.conf.get(k, None) for k in settings}

        def put(values: dict[str, Any]) -> None:
            for k, v in values.items():
                if v is None:
                    spark.conf.unset(k)
                else:
                    spark.conf.set(k, v)

        try:
            put(settings)
            yield
        finally:
            put(saved)


def _txn(spark: SparkSession, app_id: str | None, version: int | None, note: str) -> Any:
    """Session confs that make the next Delta write idempotent under (app_id, version) and label its commit
    (and MERGE_SOURCE_MATERIALIZE)."""
    settings: dict[str, str | None] = {_USER_METADATA: note, _TXN_APP: None, _TXN_VERSION: None,
                                       _MATERIALIZE: MERGE_SOURCE_MATERIALIZE}
    if app_id is not None and version is not None:
        settings[_TXN_APP], settings[_TXN_VERSION] = app_id, str(version)
    return _session_conf(spark, settings)


def _retry_concurrent(fn: Any, what: str, attempts: int = 4) -> Any:
    """Run ``fn`` again after a Delta write conflict: every write here is idempotent, so retrying is safe."""
    for i in range(attempts):
        try:
            return fn()
        except Exception as exc:
            if "Concurrent" not in f"{type(exc).__name__} {exc}"[:2000] or i == attempts - 1:
                raise
            log.warning("%s: concurrent Delta commit, retrying (%s)", what, str(exc).splitlines()[0][:200])
            time.sleep(0.2 * (i + 1))
    raise AssertionError("unreachable")


def _q(name: str) -> str:
    """A column name quoted for Spark SQL."""
    return "`" + name.replace("`", "``") + "`"


def _col(alias: str | None, name: str) -> Column:
    from pyspark.sql import functions as F

    return F.col(f"{alias}.{_q(name)}" if alias else _q(name))


def _sql_str(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _spark_type(t: pa.DataType) -> DataType:
    """The Spark type of an Arrow type of the staging contract (no tz timestamp -> TIMESTAMP_NTZ)."""
    import pyarrow as pa
    from pyspark.sql import types as T

    simple: dict[Any, Any] = {
        pa.int8(): T.ByteType(), pa.int16(): T.ShortType(), pa.int32(): T.IntegerType(), pa.int64(): T.LongType(),
        pa.float32(): T.FloatType(), pa.float64(): T.DoubleType(), pa.date32(): T.DateType(),
        pa.bool_(): T.BooleanType(), pa.string(): T.StringType(), pa.large_string(): T.StringType(),
        pa.binary(): T.BinaryType(), pa.large_binary(): T.BinaryType(),
    }
    if t in simple:
        return simple[t]
    if pa.types.is_decimal(t):
        return T.DecimalType(t.precision, t.scale)
    if pa.types.is_timestamp(t):
        return T.TimestampType() if t.tz else T.TimestampNTZType()
    if pa.types.is_map(t):
        return T.MapType(_spark_type(t.key_type), _spark_type(t.item_type), True)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return T.ArrayType(_spark_type(t.value_type), True)
    raise LakeError(f"no Spark type for Arrow type {t}")


def _spark_schema(schema: pa.Schema) -> StructType:
    from pyspark.sql import types as T

    return T.StructType([T.StructField(f.name, _spark_type(f.type), True) for f in schema])


def _same_types(a: StructType, b: StructType) -> bool:
    return [(f.name, f.dataType) for f in a.fields] == [(f.name, f.dataType) for f in b.fields]


def _create_table(spark: SparkSession, path: str, struct: StructType, *, partitioned_by: str | None = None,
                  properties: dict[str, str] | None = None) -> None:
    """CREATE TABLE IF NOT EXISTS at ``path``, in SQL (Delta's DeltaTable builder needs py4j or Delta's Connect
    plugin; SQL needs only the session extension, on both kinds of session)."""
    cols = ", ".join(f"{_q(f.name)} {f.dataType.simpleString()}" for f in struct.fields)
    sql = f"CREATE TABLE IF NOT EXISTS delta.`{path}` ({cols}) USING delta"
    if partitioned_by:
        sql += f" PARTITIONED BY ({_q(partitioned_by)})"
    if properties:
        sql += " TBLPROPERTIES (" + ", ".join(f"{_sql_str(k)} = {_sql_str(v)}" for k, v in properties.items()) + ")"
    _retry_concurrent(lambda: spark.sql(sql), f"create {path}")


def _merge(spark: SparkSession, path: str, src: DataFrame, on: str, clauses: Sequence[str]) -> list[Any]:
    """MERGE INTO the table at ``path`` (alias t) USING ``src`` (alias s), in SQL through a temporary view (for
    the same reason as _create_table); Delta's result rows (none when the txn confs made Delta skip it)."""
    view = f"_canal_src_{uuid.uuid4().hex}"
    src.createOrReplaceTempView(view)
    try:
        sql = f"MERGE INTO delta.`{path}` AS t USING {view} AS s ON {on} " + " ".join(clauses)
        return list(spark.sql(sql).collect())
    finally:
        spark.catalog.dropTempView(view)


def _local(file: str) -> str | None:
    """The local path of a staged file, None for an object-store URI."""
    if file.startswith("file:"):
        return "/" + file[5:].lstrip("/")
    return None if "://" in file else file


def _read_staged(spark: SparkSession, file: str) -> DataFrame:
    """A staged Parquet file; a local file's schema comes from its footer (no Spark job to infer it)."""
    local = _local(file)
    if local is None:
        return spark.read.parquet(file)
    import pyarrow.parquet as pq

    return spark.read.schema(_spark_schema(pq.read_schema(local))).parquet(file)
