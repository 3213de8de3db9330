"""Applying staged windows (pipelines.window) to Delta Lake with Spark: ``canal/changelog`` and the mirrors.

Tables under a lake root (a local path or an object-store URI; see docs/lake.md for the full argument):

    {root}/canal/changelog             every row change, partitioned by event_date; appended (an overlapping
                                       re-delivery: insert-only MERGE on (destination, server_id, pos, row)),
                                       Delta txn "canal:changelog:<dest>"
    {root}/mirror/{schema}/{table}     current state: table columns + _canal_pos, _canal_row, _canal_ts;
                                       one MERGE per staged part, Delta txn "canal:mirror:<schema>.<table>"
                                       with version = the part's max_pos (the mirror's watermark)

Idempotency rests on two things: Delta's transaction identifiers (a write whose txnVersion is not above the
one recorded for its appId is skipped, atomically with the commit) and, for the rows of a part that overlaps
what was applied, the guard ``target (pos, row) <= source (pos, row)`` plus "latest change per key over a
contiguous range". Works on a classic SparkSession with the Delta extension (pipelines.sparkenv) and on a Spark
Connect session to a server that has it (scripts/spark-connect.sh): every write is SQL or DataFrame API, only the
table state is read differently (py4j on classic, the Delta log through Spark on Connect).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from canal_core.parse.ddl import (
    AlterTable,
    ChangeColumn,
    DropTables,
    RenameColumn,
    RenameTables,
    RenameTo,
    TruncateTables,
    parse_ddl,
)
from pipelines.sparkenv import is_connect

from .window import (
    COL_DUP,
    COL_OP,
    COL_POS,
    COL_ROW,
    COL_SUB,
    COL_TS,
    META_COLUMNS,
    OP_DELETE,
    TableChanges,
    TablePart,
    WindowManifest,
    changelog_schema,
    split_key,
)

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

__all__ = [
    "MIRROR_META",
    "KeylessRemergeError",
    "Lake",
    "LakeError",
    "MirrorDivergedError",
    "MirrorResult",
    "MirrorSchemaError",
    "TableState",
    "apply_changelog",
    "apply_mirror",
    "apply_mirrors",
    "changelog_app_id",
    "drop_mirror",
    "is_delta_table",
    "mirror_app_id",
    "mirror_tables",
    "mirror_version",
    "optimize",
    "preview_mirror",
    "read_table_version",
    "rename_mirror",
    "rename_statements",
    "replace_changelog_range",
    "table_state",
    "truncate_mirror",
    "vacuum",
    "write_snapshot",
]

log = logging.getLogger(__name__)

# mirror columns after the table's own: the position (and row index) of the change that wrote the row, its time
MIRROR_META = (COL_POS, COL_ROW, COL_TS)
# table property marking a mirror whose source table was dropped (value: the DROP's order key)
PROP_DROPPED = "canal.dropped"
# table property: the order key of the last TRUNCATE / DROP TABLE / RENAME away that emptied the mirror
PROP_EMPTIED = "canal.emptied"
MIRROR_PROPERTIES = {
    "delta.columnMapping.mode": "name",   # DROP / RENAME COLUMN without rewriting the table
    "delta.enableTypeWidening": "true",   # INT -> BIGINT etc. in place
}
# merge-on-read: a window's MERGE marks the rows it replaces or deletes in deletion vectors and writes only the
# changed rows, instead of rewriting every file it touches (with changes spread over the keys: the whole table)
DELETION_VECTORS = {"delta.enableDeletionVectors": "true"}
CHANGELOG_KEY = ("destination", "server_id", "pos", "row")

_TXN_APP = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
_MATERIALIZE = "spark.databricks.delta.merge.materializeSource"
# MERGE sources here are immutable staged files (deterministic): Delta need not copy them first
MERGE_SOURCE_MATERIALIZE = "none"
_RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
# Delta's idempotency confs are session-wide and never reset by Delta: set and restored under one lock
_CONF_LOCK = threading.RLock()


class LakeError(RuntimeError):
    """A lake operation that cannot proceed (missing input, unsupported table)."""


class MirrorSchemaError(LakeError):
    """A source column change the mirror cannot follow exactly."""


class MirrorDivergedError(LakeError):
    """Changes that remove rows a mirror of a table without a primary key does not hold (pipelines.keyless)."""


class KeylessRemergeError(LakeError):
    """remerge_mirror of a table without a primary key: its row multiplicities cannot be re-derived."""


# ---- locations and identifiers ---------------------------------------------------------------------------


def _check_name(kind: str, name: str) -> str:
    if not name or name in (".", "..") or "/" in name or "\\" in name:
        raise ValueError(f"{kind} name {name!r} cannot be a lake path segment")
    return name


@dataclass(frozen=True, slots=True)
class Lake:
    """Table locations under a lake root: a local directory or an object-store URI (s3a://, abfss://, gs://)."""

    root: str
    deletion_vectors: bool = True  # new mirrors are created with deletion vectors (lake.deletion_vectors)

    def __post_init__(self) -> None:
        root = str(self.root)
        if "://" not in root and not root.startswith("file:"):
            root = os.path.abspath(root)  # the JVM and Python must agree on a relative path
        object.__setattr__(self, "root", root.rstrip("/") or "/")

    def changelog_path(self) -> str:
        return f"{self.root}/canal/changelog"

    def mirror_path(self, schema: str, table: str) -> str:
        return f"{self.root}/mirror/{_check_name('schema', schema)}/{_check_name('table', table)}"

    def mirror_properties(self) -> dict[str, str]:
        """Table properties of a new mirror (an existing mirror keeps its own)."""
        return {**MIRROR_PROPERTIES, **(DELETION_VECTORS if self.deletion_vectors else {})}


def changelog_app_id(destination: str) -> str:
    return f"canal:changelog:{destination}"


def mirror_app_id(schema: str, table: str) -> str:
    return f"canal:mirror:{schema}.{table}"


def _file(window_dir: str | Path, rel: str) -> str:
    return f"{str(window_dir).rstrip('/')}/{rel}"


# ---- results ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class MirrorResult:
    """What one mirror operation did, as a Dagster materialization reports it.

    ``position``: the mirror's txn version afterwards (the order key up to which every change is applied; None
    while the mirror has none); ``version``: the Delta table version afterwards (-1: no table)."""

    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    skipped_parts: int = 0
    version: int = -1
    position: int | None = None
    applied_parts: int = 0
    reason: str = ""
    replans: int = 0   # re-merges planned again because another writer committed meanwhile (pipelines.remerge)

    def add(self, other: MirrorResult) -> None:
        self.inserted += other.inserted
        self.updated += other.updated
        self.deleted += other.deleted
        self.skipped_parts += other.skipped_parts
        self.applied_parts += other.applied_parts
        self.replans += other.replans
        self.version, self.position = other.version, other.position
        self.reason = self.reason or other.reason

    def summary(self) -> str:
        """One line for run logs: '3 inserted, 1 updated, 0 deleted, Delta version 7' (+ skipped parts, replans)."""
        text = f"{self.inserted} inserted, {self.updated} updated, {self.deleted} deleted"
        text += f", Delta version {self.version}" if self.version >= 0 else ", no table"
        if self.skipped_parts:
            text += f", {self.skipped_parts} part(s) already applied"
        if self.replans:
            text += f", planned again {self.replans} time(s)"
        return text + (f" ({self.reason})" if self.reason else "")

    def to_metadata(self) -> dict[str, Any]:
        d = asdict(self)
        d["position"] = -1 if self.position is None else self.position
        if self.position is not None:
            d["binlog_file_seq"], d["binlog_offset"] = split_key(self.position)
        return d


@dataclass(frozen=True, slots=True)
class TableState:
    exists: bool
    version: int               # Delta table version, -1 when there is no table
    position: int | None       # the txn version of the asked appId
    properties: dict[str, str]


# ---- Spark helpers ---------------------------------------------------------------------------------------


def _delta_log(spark: SparkSession, path: str) -> Any:
    """The Delta snapshot of ``path`` (fresh; version -1 when there is no table), through py4j (classic only)."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    pair = jvm.org.apache.spark.sql.delta.DeltaLog.forTableWithSnapshot(spark._jsparkSession, path)  # type: ignore[attr-defined]
    return pair._2()


# Error conditions of DESCRIBE HISTORY that mean "no Delta table at this path" (anything else is raised)
_NO_TABLE = ("DELTA_TABLE_ONLY_OPERATION", "DELTA_MISSING_DELTA_TABLE", "DELTA_PATH_DOES_NOT_EXIST", "PATH_NOT_FOUND")
# the two actions a table state needs, as both a checkpoint (Parquet) and a commit line (JSON) hold them
_ACTIONS = "txn STRUCT<appId: STRING, version: BIGINT>, metaData STRUCT<configuration: MAP<STRING, STRING>>"


def _condition(exc: Exception) -> str:
    get = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    try:
        return str(get() or "") if get else ""
    except Exception:  # pragma: no cover - an exception type without the method's backing fields
        return ""


def _log_version(spark: SparkSession, path: str) -> int:
    """The table's latest version as Delta resolves it (listing the log), -1 when there is no Delta table."""
    try:
        row = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").select("version").first()
    except Exception as exc:
        if _condition(exc) in _NO_TABLE:
            return -1
        raise
    return -1 if row is None else int(row[0])


@dataclass(frozen=True, slots=True)
class _LogSnapshot:
    version: int
    txns: dict[str, int]
    properties: dict[str, str]


def _log_snapshot(spark: SparkSession, path: str) -> _LogSnapshot | None:
    """The table state at its latest version, replayed from the Delta log through Spark (no py4j: works on Spark
    Connect). Exact: the checkpoint named by ``_last_checkpoint`` plus every commit after it up to the version
    Delta reports; a missing file is an error, never a guess. None when there is no table.

    ``_last_checkpoint`` is read before the version so that its checkpoint is at or below that version (a
    checkpoint is written after its commit). Only the txn and metaData actions are read (Parquet column pruning;
    the commits' JSON parsed by Spark), the newest of each wins."""
    from pyspark.sql import functions as F

    log_dir = f"{path}/_delta_log"
    try:
        text = [r[0] for r in spark.read.text(f"{log_dir}/_last_checkpoint").collect()]
        hint: dict[str, Any] | None = json.loads("".join(text)) if text else None
    except Exception as exc:
        if _condition(exc) not in _NO_TABLE:
            raise
        hint = None   # no checkpoint yet: replay from commit 0
    version = _log_version(spark, path)
    if version < 0:
        return None
    frames = []
    first = 0
    if hint is not None and int(hint["version"]) <= version:
        cp = int(hint["version"])
        first = cp + 1
        if hint.get("v2Checkpoint"):   # a v2 checkpoint: its top file holds every non-file action
            files = [f"{log_dir}/{hint['v2Checkpoint']['path']}"]
        elif hint.get("parts"):
            n = int(hint["parts"])
            files = [f"{log_dir}/{cp:020d}.checkpoint.{i:010d}.{n:010d}.parquet" for i in range(1, n + 1)]
        else:
            files = [f"{log_dir}/{cp:020d}.checkpoint.parquet"]
        if files[0].endswith(".json"):
            df = spark.read.text(files).select(F.from_json("value", _ACTIONS).alias("a")).select("a.*")
        else:
            df = spark.read.schema(_ACTIONS).parquet(*files)
        frames.append(df.select(F.lit(cp).cast("bigint").alias("v"), "txn", "metaData"))
    if first <= version:
        commits = [f"{log_dir}/{v:020d}.json" for v in range(first, version + 1)]
        df = spark.read.text(commits).select(
            F.regexp_extract("_metadata.file_name", r"^(\d+)\.json$", 1).cast("bigint").alias("v"),
            F.from_json("value", _ACTIONS).alias("a"))
        frames.append(df.select("v", "a.txn", "a.metaData"))
    both = frames[0]
    for f in frames[1:]:
        both = both.unionByName(f)
    try:
        rows = both.where("txn IS NOT NULL OR metaData IS NOT NULL").collect()
    except Exception as exc:
        raise LakeError(f"{path}: cannot replay the Delta log up to version {version} ({_condition(exc) or 'error'}: "
                        f"{str(exc).splitlines()[0][:300]})") from exc
    txns: dict[str, tuple[int, int]] = {}
    meta: tuple[int, dict[str, str]] | None = None
    for r in rows:
        if r["txn"] is not None and r["txn"]["appId"] is not None:
            app, ver = r["txn"]["appId"], int(r["txn"]["version"])
            if app not in txns or r["v"] >= txns[app][0]:
                txns[app] = (int(r["v"]), ver)
        if r["metaData"] is not None and (meta is None or r["v"] >= meta[0]):
            meta = (int(r["v"]), dict(r["metaData"]["configuration"] or {}))
    if meta is None:
        raise LakeError(f"{path}: the Delta log up to version {version} has no metaData action")
    return _LogSnapshot(version, {a: v for a, (_, v) in txns.items()}, meta[1])


def table_state(spark: SparkSession, path: str, app_id: str) -> TableState:
    """Existence, Delta version, the txn version of ``app_id`` and the table properties, from one snapshot."""
    if is_connect(spark):
        ls = _log_snapshot(spark, path)
        if ls is None:
            return TableState(False, -1, None, {})
        return TableState(True, ls.version, ls.txns.get(app_id), ls.properties)
    snap = _delta_log(spark, path)
    version = int(snap.version())
    if version < 0:
        return TableState(False, -1, None, {})
    opt = snap.transactions().get(app_id)
    position = int(opt.get()) if opt.isDefined() else None
    conf = snap.metadata().configuration()
    it = conf.iterator()
    props: dict[str, str] = {}
    while it.hasNext():
        kv = it.next()
        props[str(kv._1())] = str(kv._2())
    return TableState(True, version, position, props)


def read_table_version(spark: SparkSession, path: str, app_id: str) -> int | None:
    """The latest Delta txn version recorded for ``app_id`` in the table at ``path`` (None: no table or none).

    Reads the table's snapshot (checkpoint + log): on a classic session through Delta's own DeltaLog (py4j), on
    Spark Connect by replaying the log through Spark; either works for any path Spark can read, object stores
    included."""
    if is_connect(spark):
        return table_state(spark, path, app_id).position
    snap = _delta_log(spark, path)
    if int(snap.version()) < 0:
        return None
    opt = snap.transactions().get(app_id)
    return int(opt.get()) if opt.isDefined() else None


def is_delta_table(spark: SparkSession, path: str) -> bool:
    """A Delta table exists at ``path`` (a version was committed)."""
    if is_connect(spark):
        return _log_version(spark, path) >= 0
    return int(_delta_log(spark, path).version()) >= 0


def mirror_version(spark: SparkSession, lake: Lake, schema: str, table: str) -> int | None:
    """The mirror's watermark: every change of schema.table with order key <= it is applied."""
    return read_table_version(spark, lake.mirror_path(schema, table), mirror_app_id(schema, table))


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


# ---- the changelog ----------------------------------------------------------------------------------------


def _changelog_struct() -> StructType:
    return _spark_schema(changelog_schema())


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


def _ensure_changelog(spark: SparkSession, path: str, exists: bool | None = None) -> None:
    """``exists``: the caller's knowledge of the table (None: look)."""
    if exists is None:
        exists = table_state(spark, path, "").exists
    if not exists:
        _create_table(spark, path, _changelog_struct(), partitioned_by="event_date")


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


def _read_changelog(spark: SparkSession, window_dir: str | Path, manifest: WindowManifest) -> DataFrame | None:
    if not manifest.changelog:
        return None
    file = _file(window_dir, manifest.changelog)
    df = _read_staged(spark, file)
    want = _changelog_struct()
    if not _same_types(df.schema, want):
        raise LakeError(f"{file}: staged changelog columns {df.schema.simpleString()} are not the contract's "
                        f"{want.simpleString()} (pipelines.window.changelog_schema)")
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


# ---- DDL of a table in a window ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Ddl:
    pos: int
    kind: str                 # "truncate" | "erase" | "rename_column"
    old: str = ""
    new: str = ""


def _table_ddl(manifest: WindowManifest, schema: str, table: str) -> list[_Ddl]:
    """TRUNCATE / DROP TABLE / column renames of schema.table in the window, by position."""
    out: list[_Ddl] = []
    for rec in manifest.ddl:
        parsed = parse_ddl(rec.sql, rec.schema)
        for op in parsed.operations:
            if isinstance(op, TruncateTables) and (schema, table) in op.tables:
                out.append(_Ddl(rec.pos, "truncate"))
            elif isinstance(op, DropTables) and (schema, table) in op.tables:
                out.append(_Ddl(rec.pos, "erase"))
            elif isinstance(op, AlterTable) and (op.schema, op.name) == (schema, table):
                for a in op.actions:
                    if isinstance(a, RenameColumn) and a.old != a.new:
                        out.append(_Ddl(rec.pos, "rename_column", a.old, a.new))
                    elif isinstance(a, ChangeColumn) and a.old != a.spec.name:
                        out.append(_Ddl(rec.pos, "rename_column", a.old, a.spec.name))
    return sorted(set(out), key=lambda d: d.pos)


def mirror_tables(manifest: WindowManifest) -> list[TableChanges]:
    """The tables apply_mirror must see for this window: those with changes plus those the window truncates,
    drops or renames a column of (as TableChanges without parts)."""
    out = list(manifest.tables)
    have = {(t.schema, t.table) for t in out}
    for rec in manifest.ddl:
        for op in parse_ddl(rec.sql, rec.schema).operations:
            names: tuple[tuple[str, str], ...] = ()
            if isinstance(op, TruncateTables | DropTables):
                names = op.tables
            elif isinstance(op, AlterTable) and any(isinstance(a, RenameColumn | ChangeColumn) for a in op.actions):
                names = ((op.schema, op.name),)
            for s, t in names:
                if (s, t) not in have:
                    have.add((s, t))
                    out.append(TableChanges(s, t, []))
    return out


def rename_statements(manifest: WindowManifest) -> list[tuple[int, list[tuple[tuple[str, str], tuple[str, str]]]]]:
    """The window's RENAME TABLE / ALTER TABLE ... RENAME TO statements: (position, pairs in statement order)."""
    out = []
    for rec in manifest.ddl:
        pairs: list[tuple[tuple[str, str], tuple[str, str]]] = []
        for op in parse_ddl(rec.sql, rec.schema).operations:
            if isinstance(op, RenameTables):
                pairs.extend(op.pairs)
            elif isinstance(op, AlterTable):
                pairs.extend(((op.schema, op.name), (a.schema, a.name)) for a in op.actions if isinstance(a, RenameTo))
        if pairs:
            out.append((rec.pos, pairs))
    return sorted(out, key=lambda r: r[0])




# ---- schema evolution -------------------------------------------------------------------------------------

_INT_RANK = {"byte": 1, "short": 2, "integer": 3, "long": 4}
_INT_DIGITS = {"byte": 3, "short": 5, "integer": 10, "long": 19}


def _kind(t: DataType) -> str:
    return t.typeName()


def _fits(src: DataType, dst: DataType) -> bool:
    """Every value of ``src`` has an exact ``dst`` value (so a cast src -> dst never fails or rounds)."""
    from pyspark.sql import types as T

    s, d = _kind(src), _kind(dst)
    if src == dst:
        return True
    if s in _INT_RANK and d in _INT_RANK:
        return _INT_RANK[s] <= _INT_RANK[d]
    if s in _INT_RANK and isinstance(dst, T.DecimalType):
        return dst.precision - dst.scale >= _INT_DIGITS[s]
    if isinstance(src, T.DecimalType) and isinstance(dst, T.DecimalType):
        return dst.scale >= src.scale and dst.precision - dst.scale >= src.precision - src.scale
    if s == "float" and d == "double":
        return True
    if s in ("byte", "short", "integer") and d == "double":
        return True
    return s in ("byte", "short") and d == "float"


def _delta_widens(src: DataType, dst: DataType) -> bool:
    """Delta's in-place type widening (ALTER COLUMN TYPE with delta.enableTypeWidening) covers src -> dst."""
    from pyspark.sql import types as T

    s, d = _kind(src), _kind(dst)
    if s in _INT_RANK and d in _INT_RANK:
        return _INT_RANK[s] < _INT_RANK[d]
    if s == "float" and d == "double":
        return True
    if (s in _INT_RANK or isinstance(src, T.DecimalType)) and isinstance(dst, T.DecimalType):
        return _fits(src, dst)
    return False


def _exact_rewrite(src: DataType, dst: DataType) -> bool:
    """A change the mirror follows by rewriting the column with an exact cast (no in-place widening exists)."""
    from pyspark.sql import types as T

    s, d = _kind(src), _kind(dst)
    if d == "string":   # decimal digits are MySQL's text for integers and decimals
        return s in _INT_RANK or isinstance(src, T.DecimalType)
    if s == "date" and d == "timestamp_ntz":   # midnight, as MySQL converts DATE to DATETIME
        return True
    return _fits(src, dst)


@dataclass(slots=True)
class _SchemaPlan:
    drops: list[str]
    adds: list[tuple[str, DataType, str | None]]   # name, type, after column (None: first)
    widen: list[tuple[str, DataType]]
    rewrite: list[tuple[str, DataType]]

    def empty(self) -> bool:
        return not (self.drops or self.adds or self.widen or self.rewrite)


def _plan_schema(name: str, mirror: StructType, part: StructType, where: str) -> _SchemaPlan:
    """How the mirror's columns follow the part's: drops, adds, widenings, exact rewrites (column renames are
    done at their DDL's position, in apply_mirror). Names compare case-insensitively, as MySQL's and Delta's do.

    A part narrower than the mirror (MODIFY BIGINT -> INT) keeps the mirror type (values cast exactly)."""
    mfields = [f for f in mirror.fields if f.name not in MIRROR_META and f.name != COL_DUP]
    mcols = {f.name.lower(): f.dataType for f in mfields}
    pfields = [f for f in part.fields if f.name not in META_COLUMNS]
    pcols = {f.name.lower() for f in pfields}
    plan = _SchemaPlan([], [], [], [])
    plan.drops = [f.name for f in mfields if f.name.lower() not in pcols]
    prev: str | None = None
    for f in pfields:
        old = mcols.get(f.name.lower())
        if old is None:
            plan.adds.append((f.name, f.dataType, prev))
        elif old != f.dataType and not _fits(f.dataType, old):
            if _delta_widens(old, f.dataType):
                plan.widen.append((f.name, f.dataType))
            elif _exact_rewrite(old, f.dataType):
                plan.rewrite.append((f.name, f.dataType))
            else:
                raise MirrorSchemaError(
                    f"{name}: column {f.name!r} changed from {old.simpleString()} to {f.dataType.simpleString()} "
                    f"{where}; the mirror cannot convert its rows exactly: re-snapshot the table (write_snapshot) "
                    "or rewrite the mirror column yourself, then apply the window again")
        prev = f.name
    return plan


def _evolve_table(spark: SparkSession, path: str, name: str, plan: _SchemaPlan, where: str,
                  fills: dict[str, Any] | None = None) -> None:
    """``fills``: added column -> the value rows that predate it take (its source default, see
    pipelines.defaults); such a column is added together with its values in one commit."""
    from pyspark.sql import functions as F

    tbl = f"delta.`{path}`"
    fills = {k: v for k, v in (fills or {}).items() if v is not None}
    if plan.drops:
        spark.sql(f"ALTER TABLE {tbl} DROP COLUMNS ({', '.join(_q(c) for c in plan.drops)})")
    for col, typ, after in plan.adds:
        if col in fills:
            continue
        place = f" AFTER {_q(after)}" if after else " FIRST"
        spark.sql(f"ALTER TABLE {tbl} ADD COLUMNS ({_q(col)} {typ.simpleString()}{place})")
    if fills:
        df = spark.read.format("delta").load(path)
        names = [f.name for f in df.schema.fields]
        cols = [F.col(_q(n)) for n in names]
        for col, typ, after in plan.adds:
            if col not in fills:
                continue
            low = [n.lower() for n in names]
            at = 0 if after is None else (low.index(after.lower()) + 1 if after.lower() in low else len(names))
            names.insert(at, col)
            cols.insert(at, F.lit(fills[col]).cast(typ).alias(col))
        try:
            with _txn(spark, None, None, f"canal:add-with-default:{','.join(fills)}"):
                df.select(cols).write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(path)
        except Exception as exc:
            raise MirrorSchemaError(
                f"{name}: adding columns {', '.join(fills)} with their defaults {where} failed "
                f"({str(exc).splitlines()[0][:300]})") from exc
    rewrite = list(plan.rewrite)
    for col, typ in plan.widen:
        try:
            spark.sql(f"ALTER TABLE {tbl} ALTER COLUMN {_q(col)} TYPE {typ.simpleString()}")
        except Exception as exc:  # a Delta build without this widening: the exact rewrite below instead
            log.warning("%s: in-place widening of %s to %s refused (%s); rewriting the column", name, col,
                        typ.simpleString(), str(exc).splitlines()[0][:200])
            rewrite.append((col, typ))
    if rewrite:
        casts = {c.lower(): t for c, t in rewrite}
        df = spark.read.format("delta").load(path)
        out = df.select([F.col(_q(f.name)).cast(casts[f.name.lower()]).alias(f.name) if f.name.lower() in casts
                         else F.col(_q(f.name)) for f in df.schema.fields])
        try:
            with _txn(spark, None, None, f"canal:retype:{','.join(casts)}"):
                out.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(path)
        except Exception as exc:
            raise MirrorSchemaError(
                f"{name}: rewriting columns {', '.join(f'{c} as {t.simpleString()}' for c, t in rewrite)} {where} "
                f"failed ({str(exc).splitlines()[0][:300]}): re-snapshot the table (write_snapshot)") from exc
    log.info("%s: schema follows the source %s: %s", name, where, plan)


def _evolve_frame(df: DataFrame, plan: _SchemaPlan) -> DataFrame:
    """The same plan applied to a DataFrame (for preview_mirror)."""
    from pyspark.sql import functions as F

    if plan.drops:
        df = df.drop(*plan.drops)
    casts = {c.lower(): t for c, t in plan.widen + plan.rewrite}
    cols = [F.col(_q(f.name)).cast(casts[f.name.lower()]).alias(f.name) if f.name.lower() in casts
            else F.col(_q(f.name)) for f in df.schema.fields]
    df = df.select(cols)
    for col, typ, _after in plan.adds:
        df = df.withColumn(col, F.lit(None).cast(typ))
    return df


# ---- mirrors ----------------------------------------------------------------------------------------------


def _keys(part: TablePart) -> list[str]:
    return [c.name for c in part.columns if c.is_key]


def _where(name: str, pos: int) -> str:
    seq, off = split_key(pos)
    return f"at position {seq}:{off} (order key {pos}) of {name}"


def _mirror_struct(part_schema: StructType, keyless: bool = False) -> StructType:
    """``keyless``: a table without a primary key, whose mirror numbers the copies of a row (pipelines.keyless)."""
    from pyspark.sql import types as T

    fields = [f for f in part_schema.fields if f.name not in META_COLUMNS]
    meta = [T.StructField(COL_POS, T.LongType(), True), T.StructField(COL_ROW, T.IntegerType(), True),
            T.StructField(COL_TS, T.TimestampType(), True)]
    meta += [T.StructField(COL_DUP, T.IntegerType(), True)] if keyless else []
    return T.StructType([T.StructField(f.name, f.dataType, True) for f in fields] + meta)


def _create_mirror(spark: SparkSession, lake: Lake, path: str, struct: StructType, name: str) -> None:
    _create_table(spark, path, struct, properties={"canal.table": name, **lake.mirror_properties()})


def _latest(df: DataFrame, keys: Sequence[str]) -> DataFrame:
    """The last change per key in (pos, row, sub) order."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy(*[_col(None, k) for k in keys]).orderBy(
        F.col(COL_POS).desc(), F.col(COL_ROW).desc(), F.col(COL_SUB).desc())
    return df.withColumn("__rn", F.row_number().over(w)).where("__rn = 1").drop("__rn")


def _project(src: DataFrame, mirror: StructType) -> DataFrame:
    """The source as mirror columns (exact casts to the mirror's types; absent columns NULL) plus _canal_op."""
    from pyspark.sql import functions as F

    have = {c.lower() for c in src.columns}
    cols = [(F.col(_q(f.name)).cast(f.dataType) if f.name.lower() in have else F.lit(None).cast(f.dataType))
            .alias(f.name) for f in mirror.fields]
    return src.select([*cols, F.col(COL_OP)])


def _newer() -> Column:
    """The source change is not older than the target row's: (t.pos, t.row) <= (s.pos, s.row)."""
    tp, sp, tr, sr = _col("t", COL_POS), _col("s", COL_POS), _col("t", COL_ROW), _col("s", COL_ROW)
    return (tp < sp) | ((tp == sp) & (tr <= sr))


def _newer_sql() -> str:
    """_newer() as SQL: (t._canal_pos, t._canal_row) <= (s._canal_pos, s._canal_row)."""
    tp, sp, tr, sr = f"t.{_q(COL_POS)}", f"s.{_q(COL_POS)}", f"t.{_q(COL_ROW)}", f"s.{_q(COL_ROW)}"
    return f"({tp} < {sp} OR ({tp} = {sp} AND {tr} <= {sr}))"


def _merge_part(spark: SparkSession, path: str, src: DataFrame, keys: Sequence[str], mirror: StructType, *,
                guard: bool, only_changed: bool = False) -> tuple[int, int, int] | None:
    """One MERGE of the latest change per key; (inserted, updated, deleted), None when Delta skipped it (txn)."""
    on = " AND ".join(f"t.{_q(k)} = s.{_q(k)}" for k in keys)
    is_del = f"s.{_q(COL_OP)} = {_sql_str(OP_DELETE)}"
    ok = _newer_sql() if guard else "TRUE"
    changed = "TRUE"
    if only_changed:
        changed = "NOT (" + " AND ".join(f"t.{_q(f.name)} <=> s.{_q(f.name)}" for f in mirror.fields) + ")"
    names = [_q(f.name) for f in mirror.fields]
    clauses = [
        f"WHEN MATCHED AND ({is_del}) AND {ok} THEN DELETE",
        f"WHEN MATCHED AND NOT ({is_del}) AND {ok} AND {changed} THEN UPDATE SET "
        + ", ".join(f"t.{n} = s.{n}" for n in names),
        f"WHEN NOT MATCHED AND NOT ({is_del}) THEN INSERT ({', '.join(names)}) VALUES "
        f"({', '.join(f's.{n}' for n in names)})",
    ]
    rows = _retry_concurrent(lambda: _merge(spark, path, src, on, clauses), f"merge into {path}")
    if not rows:
        return None
    r = rows[0]
    return int(r["num_inserted_rows"]), int(r["num_updated_rows"]), int(r["num_deleted_rows"])


def _events(manifest: WindowManifest, table: TableChanges, after: int | None,
            upto: int | None) -> list[tuple[int, TablePart | _Ddl]]:
    evs: list[tuple[int, TablePart | _Ddl]] = [(p.min_pos, p) for p in table.parts]
    evs += [(d.pos, d) for d in _table_ddl(manifest, table.schema, table.table)]
    evs.sort(key=lambda e: (e[0], isinstance(e[1], TablePart)))
    return [e for e in evs if (after is None or e[0] > after) and (upto is None or e[0] <= upto)]


def _empty_mirror(spark: SparkSession, path: str, app: str, pos: int, kind: str,
                  note: str | None = None) -> int | None:
    """Remove every row in one commit that also records txn version ``pos``; rows removed, None if skipped.

    An overwrite with no rows, not a DELETE: Delta commits nothing for a DELETE on an empty table, so the txn
    version would not be recorded. The properties go first (canal.emptied = pos; "erase" also canal.dropped):
    a crash in between leaves a table that claims the emptying its retry completes."""
    props = {PROP_EMPTIED: str(pos), **({PROP_DROPPED: str(pos)} if kind == "erase" else {})}
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ("
              + ", ".join(f"'{k}' = '{v}'" for k, v in props.items()) + ")")
    df = spark.read.format("delta").load(path)
    n = df.count()
    with _txn(spark, app, pos, note or f"canal:{kind}@{pos}"):
        df.limit(0).write.format("delta").mode("overwrite").save(path)
    return n if read_table_version(spark, path, app) == pos else None


def _clear_dropped(spark: SparkSession, path: str) -> None:
    spark.sql(f"ALTER TABLE delta.`{path}` UNSET TBLPROPERTIES IF EXISTS ('{PROP_DROPPED}')")


def _renamable(struct: StructType, ddl: _Ddl) -> bool:
    """A column rename still to do: the mirror has the old name and not the new one (a replay finds it done)."""
    names = {f.name.lower() for f in struct.fields}
    return ddl.old.lower() in names and ddl.new.lower() not in names


def apply_mirror(spark: SparkSession, lake: Lake, window_dir: str | Path, manifest: WindowManifest,
                 table: TableChanges, *, after: int | None = None, upto: int | None = None,
                 defaults: Callable[[str, str, str, str], Any] | None = None) -> MirrorResult:
    """Apply the table's staged parts (and the window's TRUNCATE / DROP TABLE / column renames of it) in order to
    mirror/<schema>/<table>, one MERGE of the latest change per primary key per part.

    A part whose max_pos is not above the mirror's txn version is skipped; the MERGE commit records txn
    ("canal:mirror:<schema>.<table>", part.max_pos). Rows: an update or delete wins only over a target row
    written by an older-or-equal change. A part without a primary key goes to a multiset mirror instead
    (pipelines.keyless: its rows above the watermark, net copies per row image).
    ``after`` / ``upto``: only the events with after < position <= upto (apply_mirrors splits at RENAME).
    ``defaults(schema, table, column, mysql_type)``: the value rows that predate an added column take
    (pipelines.defaults.source_defaults); without it they are NULL."""
    from . import keyless

    path, app = lake.mirror_path(table.schema, table.table), mirror_app_id(table.schema, table.table)
    state = table_state(spark, path, app)
    res = MirrorResult(version=state.version, position=state.position)
    events = _events(manifest, table, after, upto)
    if not events:
        return res
    position, dropped = state.position, PROP_DROPPED in state.properties
    struct = spark.read.format("delta").load(path).schema if state.exists else None
    for _pos, ev in events:
        if isinstance(ev, _Ddl):
            if (position is not None and ev.pos <= position) or struct is None:
                continue
            if ev.kind == "rename_column":
                if _renamable(struct, ev):
                    spark.sql(f"ALTER TABLE delta.`{path}` RENAME COLUMN {_q(ev.old)} TO {_q(ev.new)}")
                    struct = spark.read.format("delta").load(path).schema
                    log.info("%s: column %s renamed to %s %s", table.name, ev.old, ev.new, _where(table.name, ev.pos))
                continue
            n = _empty_mirror(spark, path, app, ev.pos, ev.kind)
            if n is not None:
                res.deleted += n
                position, dropped = ev.pos, ev.kind == "erase"
                log.info("%s: %s at %s emptied the mirror (%d rows)", table.name, ev.kind, ev.pos, n)
            continue
        part = ev
        if position is not None and part.max_pos <= position:
            res.skipped_parts += 1
            continue
        keys = _keys(part)
        df = _read_staged(spark, _file(window_dir, part.file))
        where = _where(table.name, part.min_pos)
        if struct is None:
            _create_mirror(spark, lake, path, _mirror_struct(df.schema, keyless=not keys), table.name)
            struct = spark.read.format("delta").load(path).schema
        struct = keyless.conform(spark, path, table.name, struct, keyless=not keys, where=where)
        plan = _plan_schema(table.name, struct, df.schema, where)
        if not keys and plan.drops:  # rows may become copies of one image: renumbered with the drop
            keyless.drop_columns(spark, path, table.name, plan.drops, where)
            plan.drops = []
            struct = spark.read.format("delta").load(path).schema
        if not plan.empty():
            fills: dict[str, Any] = {}
            if defaults is not None and plan.adds:
                types = {c.name.lower(): c.mysql_type for c in part.columns}
                fills = {col: defaults(table.schema, table.table, col, types[col.lower()]) for col, _t, _a in plan.adds}
            _evolve_table(spark, path, table.name, plan, where, fills)
            struct = spark.read.format("delta").load(path).schema
        note = f"canal:window:{manifest.destination}:{manifest.window}:{part.max_pos}"
        if keys:
            src = _project(_latest(df, keys), struct)
            with _txn(spark, app, part.max_pos, note):
                counts = _merge_part(spark, path, src, keys, struct, guard=True)
        else:
            cur = spark.read.format("delta").load(path)
            src = keyless.changes(cur, df, part, struct, position, table.name, where)
            with _txn(spark, app, part.max_pos, note):
                counts = keyless.merge(spark, path, src, struct)
        if counts is None:  # another writer recorded this part between our read and our commit
            res.skipped_parts += 1
            continue
        res.inserted += counts[0]
        res.updated += counts[1]
        res.deleted += counts[2]
        res.applied_parts += 1
        position = part.max_pos
        if dropped:
            _clear_dropped(spark, path)
            dropped = False
    final = table_state(spark, path, app)
    res.version, res.position = final.version, final.position
    return res


def apply_mirrors(spark: SparkSession, lake: Lake, window_dir: str | Path,
                  manifest: WindowManifest) -> dict[str, MirrorResult]:
    """Every mirror of the window, with RENAME TABLE applied at its position between the tables' changes."""
    tables = mirror_tables(manifest)
    results: dict[str, MirrorResult] = {}
    renames = dict(rename_statements(manifest))
    bounds = sorted(renames)
    lo: int | None = None
    for hi in [*bounds, None]:
        for t in tables:
            r = apply_mirror(spark, lake, window_dir, manifest, t, after=lo, upto=hi)
            results.setdefault(t.name, MirrorResult()).add(r)
        if hi is not None:
            rename_mirror(spark, lake, renames[hi], hi)
        lo = hi
    return results


def truncate_mirror(spark: SparkSession, lake: Lake, schema: str, table: str, pos: int) -> int:
    """TRUNCATE TABLE at ``pos``: every row deleted, txn version ``pos`` (so older parts stay skipped); rows
    deleted (0 when already done or there is no mirror)."""
    path = lake.mirror_path(schema, table)
    state = table_state(spark, path, mirror_app_id(schema, table))
    if not state.exists or (state.position is not None and pos <= state.position):
        return 0
    return _empty_mirror(spark, path, mirror_app_id(schema, table), pos, "truncate") or 0


def drop_mirror(spark: SparkSession, lake: Lake, schema: str, table: str, pos: int) -> int:
    """DROP TABLE at ``pos``: like truncate_mirror, and the table property canal.dropped = pos marks it (until a
    change of a re-created table arrives). The old rows stay readable by time travel until VACUUM."""
    path = lake.mirror_path(schema, table)
    state = table_state(spark, path, mirror_app_id(schema, table))
    if not state.exists or (state.position is not None and pos <= state.position):
        return 0
    return _empty_mirror(spark, path, mirror_app_id(schema, table), pos, "erase") or 0


def _version_before(spark: SparkSession, path: str, note: str) -> int | None:
    """The Delta version just before the first commit labelled ``note`` (None: no such commit)."""
    from pyspark.sql import functions as F

    row = (spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where(F.col("userMetadata") == note)
           .agg(F.min("version").alias("v")).first())
    return None if row is None or row["v"] is None else int(row["v"]) - 1


def rename_mirror(spark: SparkSession, lake: Lake,
                  pairs: Sequence[tuple[tuple[str, str], tuple[str, str]]], pos: int) -> dict[str, int]:
    """RENAME TABLE (one statement: pairs in statement order) at ``pos``: every target mirror becomes a copy of
    its source's rows (txn version ``pos``, one commit each), a source left without a name is emptied and
    marked dropped. Sources are read as of before the rename, so a retry after a crash half-way is exact.
    Returns rows written per target ("schema.table")."""
    holder: dict[tuple[str, str], tuple[str, str] | None] = {}
    for old, new in pairs:
        holder.setdefault(old, old)
        holder.setdefault(new, new)
        holder[new], holder[old] = holder[old], None
    note = f"canal:rename@{pos}"
    read_at: dict[tuple[str, str], int | None] = {}   # Delta version of each source before the rename
    states = {n: table_state(spark, lake.mirror_path(*n), mirror_app_id(*n)) for n in holder}
    for name, src in holder.items():
        if src is None or src == name or src in read_at:
            continue
        st = states[src]
        if not st.exists:
            read_at[src] = None   # no mirror (e.g. a table waiting for its snapshot): the target ends up empty
        elif st.position is not None and st.position >= pos:
            read_at[src] = _version_before(spark, lake.mirror_path(*src), note)
            if read_at[src] is None:
                raise LakeError(f"rename at {pos}: mirror {src[0]}.{src[1]} is past the rename (position "
                                f"{st.position}) but has no commit {note!r} to read its rows before it")
        else:
            read_at[src] = st.version
    out: dict[str, int] = {}
    # copies first, then the names left empty: a source is emptied only after its copy exists
    for name, src in sorted(holder.items(), key=lambda kv: kv[1] is None):
        if src == name:
            continue
        path, app, st = lake.mirror_path(*name), mirror_app_id(*name), states[name]
        if st.position is not None and st.position >= pos:
            continue
        at = read_at.get(src) if src is not None else None
        if src is None or at is None:
            if st.exists:
                _empty_mirror(spark, path, app, pos, "erase", note)
                out[f"{name[0]}.{name[1]}"] = 0
            continue
        df = spark.read.format("delta").option("versionAsOf", at).load(lake.mirror_path(*src))
        w = df.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
        # changes of this name before the rename describe other rows: for remerge_mirror it was emptied at pos
        emptied = f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{PROP_EMPTIED}' = '{pos}')"
        if st.exists:
            spark.sql(emptied)
        else:
            w = w.options(**lake.mirror_properties())
        with _txn(spark, app, pos, note):
            w.save(path)
        if not st.exists:
            spark.sql(emptied)
        if PROP_DROPPED in st.properties:
            _clear_dropped(spark, path)
        out[f"{name[0]}.{name[1]}"] = df.count()
        log.info("rename at %s: mirror %s.%s now holds %s.%s (Delta version %s)", pos, *name, *src, at)
    return out


def preview_mirror(spark: SparkSession, lake: Lake, window_dir: str | Path, manifest: WindowManifest,
                   table: TableChanges) -> DataFrame:
    """The mirror as apply_mirror would leave it (same skipping, guard, schema evolution), nothing written."""
    from pyspark.sql import functions as F

    from . import keyless

    path, app = lake.mirror_path(table.schema, table.table), mirror_app_id(table.schema, table.table)
    state = table_state(spark, path, app)
    cur = spark.read.format("delta").load(path) if state.exists else None
    position = state.position
    for _pos, ev in _events(manifest, table, None, None):
        if isinstance(ev, _Ddl):
            if (position is not None and ev.pos <= position) or cur is None:
                continue
            if ev.kind != "rename_column":
                cur, position = cur.limit(0), ev.pos
            elif _renamable(cur.schema, ev):
                cur = cur.withColumnRenamed(ev.old, ev.new)
            continue
        part = ev
        keys = _keys(part)
        if position is not None and part.max_pos <= position:
            continue
        df = _read_staged(spark, _file(window_dir, part.file))
        where = _where(table.name, part.min_pos)
        if cur is None:
            cur = spark.createDataFrame([], _mirror_struct(df.schema, keyless=not keys))
        cur = keyless.conform_frame(cur, keyless=not keys)
        plan = _plan_schema(table.name, cur.schema, df.schema, where)
        cur = _evolve_frame(cur, plan)
        if not keys:
            cur = keyless.preview(keyless.number_copies(cur) if plan.drops else cur, df, part, position, table.name,
                                  where)
            position = part.max_pos
            continue
        struct = cur.schema
        src = _project(_latest(df, keys), struct)
        t, s = cur.alias("t"), src.alias("s")
        cond = None
        for k in keys:
            c = _col("t", k) == _col("s", k)
            cond = c if cond is None else cond & c
        j = t.join(s, cond, "full_outer")
        t_here, s_here = _col("t", COL_POS).isNotNull(), _col("s", COL_OP).isNotNull()
        take_s = s_here & (~t_here | _newer())
        keep = (take_s & (_col("s", COL_OP) != F.lit(OP_DELETE))) | (~take_s & t_here)
        cur = j.where(keep).select([F.when(take_s, _col("s", f.name)).otherwise(_col("t", f.name)).alias(f.name)
                                    for f in struct.fields])
        position = part.max_pos
    if cur is None:
        raise LakeError(f"{table.name}: no mirror at {path} and no change to preview")
    return cur


def write_snapshot(spark: SparkSession, lake: Lake, schema: str, table: str,
                   source: pa.Table | str | Path, position_key: int, *, snapshot_ts: dt.datetime | None = None,
                   keyless: bool = False) -> int:
    """(Re)create mirror/<schema>/<table> from a consistent snapshot; returns the Delta version of the commit.

    ``position_key``: the order key of the snapshot position as SHOW MASTER STATUS gives it (where the next event
    starts): every change below it is in the snapshot, none at or after it. The rows (source columns; meta
    columns of a staged part are ignored) get _canal_pos = position_key - 1, _canal_row 0, _canal_ts
    ``snapshot_ts``, and the same commit records txn version position_key - 1, so parts ending before the
    position are skipped and later changes win. A snapshot not ahead of the mirror's position is skipped (the
    current Delta version is returned). ``keyless``: a table without a primary key, whose mirror numbers the
    copies of each row in _canal_dup (pipelines.keyless)."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    from .keyless import number_copies

    path, app = lake.mirror_path(schema, table), mirror_app_id(schema, table)
    version = position_key - 1
    state = table_state(spark, path, app)
    if state.position is not None and version <= state.position:
        log.info("%s.%s: snapshot at %s not ahead of the mirror (position %s): skipped", schema, table,
                 position_key, state.position)
        return state.version
    if isinstance(source, pa.Table):
        df = spark.createDataFrame(source, schema=_spark_schema(source.schema))
    else:
        df = spark.read.parquet(str(source))
    df = df.select([F.col(_q(c)) for c in df.columns if c not in META_COLUMNS and c != COL_DUP])
    ts = F.lit(snapshot_ts).cast("timestamp") if snapshot_ts is not None else F.lit(None).cast("timestamp")
    df = df.select("*", F.lit(version).cast("bigint").alias(COL_POS), F.lit(0).alias(COL_ROW), ts.alias(COL_TS))
    if keyless:
        df = number_copies(df)
    w = df.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
    if not state.exists:  # writer options delta.* become table properties of a new table
        w = w.options(**lake.mirror_properties())
    with _txn(spark, app, version, f"canal:snapshot@{position_key}"):
        _retry_concurrent(lambda: w.save(path), f"snapshot into {path}")
    if PROP_DROPPED in state.properties:
        _clear_dropped(spark, path)
    after = table_state(spark, path, app)
    log.info("%s.%s: snapshot at %s written (Delta version %s)", schema, table, position_key, after.version)
    return after.version


# ---- maintenance ------------------------------------------------------------------------------------------


def _default_parallelism(spark: SparkSession) -> int:
    """The cluster's default parallelism; a Connect client has no SparkContext, so there from the conf."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    value = spark.conf.get("spark.default.parallelism", None)
    return int(value) if value and value.isdigit() else (os.cpu_count() or 2)


def optimize(spark: SparkSession, path: str) -> dict[str, Any]:
    """OPTIMIZE (bin-packing compaction); Delta's metrics (numFilesAdded, numFilesRemoved, ...)."""
    row = spark.sql(f"OPTIMIZE delta.`{path}`").first()
    metrics = row["metrics"].asDict(recursive=True) if row is not None and row["metrics"] is not None else {}
    return {k: v for k, v in metrics.items() if isinstance(v, int | float | str)}


def vacuum(spark: SparkSession, path: str, retention_hours: float, *, parallelism: int | None = None) -> dict[str, Any]:
    """VACUUM files unreferenced for ``retention_hours``; {"files_deleted", "dirs_vacuumed", "retention_hours"}
    from the VACUUM END commit Delta logs (-1 when Delta logged none).

    Below Delta's 168 h default the safety check is lifted for this call only: time travel and readers slower
    than the retention then lose files. The file listing runs in ``parallelism`` tasks (default 4 per core):
    Spark's default of 10000 listing tasks costs minutes on a small cluster for one directory."""
    from pyspark.sql import functions as F

    hours = float(retention_hours)
    tasks = parallelism or max(4, 4 * _default_parallelism(spark))
    settings: dict[str, str | None] = {"spark.sql.sources.parallelPartitionDiscovery.parallelism": str(tasks)}
    if hours < 168:
        settings[_RETENTION_CHECK] = "false"
    with _session_conf(spark, settings):
        spark.sql(f"VACUUM delta.`{path}` RETAIN {hours} HOURS").collect()
    end = (spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").where(F.col("operation") == "VACUUM END")
           .select("operationMetrics").first())
    metrics = (end[0] or {}) if end is not None else {}
    return {"files_deleted": int(metrics.get("numDeletedFiles", -1)),
            "dirs_vacuumed": int(metrics.get("numVacuumedDirectories", -1)), "retention_hours": hours}
