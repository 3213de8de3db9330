"""A Delta table's state (version, txn versions, properties) as its log records it: read from the log files by this
process when the table is on this machine's disk and Spark runs here too (a classic session, or a Connect server on
a loopback address: no Spark job at all), else through Delta's snapshot (py4j, classic) or replayed through Spark
(Connect)."""

from __future__ import annotations

import ipaddress
import json
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipelines.engine.sparkenv import is_connect

from .layout import Lake, LakeError, mirror_app_id
from .results import TableState

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession


def _delta_log(spark: SparkSession, path: str) -> Any:
    """The Delta snapshot of ``path`` (fresh; version -1 when there is no table), through py4j (classic only)."""
    jvm = spark._jvm
    if jvm is None:  # only a classic session has a py4j gateway; table_state takes the log path on Connect
        raise LakeError(f"{path}: no py4j gateway on this Spark session to read the Delta log with")
    pair = jvm.org.apache.spark.sql.delta.DeltaLog.forTableWithSnapshot(spark._jsparkSession, path)
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


_COMMIT = re.compile(r"^(\d{20})\.json$")


def _local_log_dir(spark: SparkSession, path: str) -> str | None:
    """The table's _delta_log directory when this process can read it as Spark does: a plain or file: path, and a
    classic session (its driver is this process's JVM, on this machine) or a Connect server on a loopback address
    (a server elsewhere may see another disk under the same path)."""
    if "://" in path and not path.startswith("file://"):
        return None
    if not path.startswith("/") and not path.startswith("file:"):
        return None
    if is_connect(spark):
        try:
            host = str(spark.client.host)
            loopback = host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
        except (AttributeError, ValueError):
            return None
        if not loopback:
            return None
    local = re.sub(r"^file:(//)?", "", path) if path.startswith("file:") else path
    return os.path.join(local, "_delta_log")


class _Unreadable(Exception):
    """The local log files do not make an exact replay (a file missing or unreadable, a checkpoint format this
    reader does not know): the caller replays through Spark instead, which raises what is wrong."""


def _read_local_log(log_dir: str) -> _LogSnapshot | None:
    """The table state from the log files themselves: the checkpoint ``_last_checkpoint`` names plus every commit
    after it up to the newest commit file (as _log_snapshot does through Spark). None when there is no table;
    _Unreadable when the files do not make an exact replay."""
    import pyarrow.parquet as pq

    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _Unreadable(str(exc)) from exc
    versions = [int(m.group(1)) for n in names if (m := _COMMIT.match(n))]
    if not versions:
        if any(n.endswith(".parquet") for n in names):
            raise _Unreadable(f"{log_dir}: checkpoints but no commit files")
        return None
    version = max(versions)
    txns: dict[str, tuple[int, int]] = {}
    meta: tuple[int, dict[str, str]] | None = None

    def take(v: int, txn: Any, md: Any) -> None:
        nonlocal meta
        if txn and txn.get("appId") is not None:
            app = txn["appId"]
            if app not in txns or v >= txns[app][0]:
                txns[app] = (v, int(txn["version"]))
        if md and (meta is None or v >= meta[0]):
            conf = md.get("configuration") or {}
            meta = (v, dict(conf) if isinstance(conf, dict) else {str(k): str(x) for k, x in conf})

    first = 0
    try:
        hint_file = os.path.join(log_dir, "_last_checkpoint")
        hint = None
        if os.path.exists(hint_file):
            with open(hint_file, encoding="utf-8") as fh:
                hint = json.loads(fh.read())
        if hint is not None and int(hint["version"]) <= version:
            cp = int(hint["version"])
            first = cp + 1
            if hint.get("v2Checkpoint"):
                raise _Unreadable("a v2 checkpoint")  # its sidecars: left to the Spark replay
            n = int(hint.get("parts") or 0)
            files = ([f"{cp:020d}.checkpoint.{i:010d}.{n:010d}.parquet" for i in range(1, n + 1)] if n
                     else [f"{cp:020d}.checkpoint.parquet"])
            for f in files:
                table = pq.read_table(os.path.join(log_dir, f), columns=["txn", "metaData"])
                for txn, md in zip(table.column("txn").to_pylist(), table.column("metaData").to_pylist(), strict=True):
                    take(cp, txn, md)
        for v in range(first, version + 1):
            with open(os.path.join(log_dir, f"{v:020d}.json"), encoding="utf-8") as fh:
                for line in fh:
                    if line.strip():
                        action = json.loads(line)
                        take(v, action.get("txn"), action.get("metaData"))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise _Unreadable(f"{type(exc).__name__}: {exc}") from exc
    if meta is None:
        raise _Unreadable(f"{log_dir}: no metaData action up to version {version}")
    return _LogSnapshot(version, {a: ver for a, (_, ver) in txns.items()}, meta[1])


def _local_snapshot(spark: SparkSession, path: str) -> _LogSnapshot | None:
    """The table state from the log files here (None: no table); _Unreadable when they cannot be read here or do
    not make an exact replay."""
    log_dir = _local_log_dir(spark, path)
    if log_dir is None:
        raise _Unreadable(f"{path}: not a table on this machine's disk")
    return _read_local_log(log_dir)


def _jvm_snapshot(spark: SparkSession, path: str) -> _LogSnapshot | None:
    """The table state from Delta's own snapshot through py4j (classic sessions; any path Spark reads)."""
    snap = _delta_log(spark, path)
    version = int(snap.version())
    if version < 0:
        return None
    txns = {str(t.appId()): int(t.version()) for t in _scala_list(snap.setTransactions())}
    props = {str(kv._1()): str(kv._2()) for kv in _scala_list(snap.metadata().configuration())}
    return _LogSnapshot(version, txns, props)


def _scala_list(coll: Any) -> list[Any]:
    """The elements of a Scala collection (a Map's as key-value tuples) through py4j."""
    it = coll.iterator()
    out = []
    while it.hasNext():
        out.append(it.next())
    return out


def _snapshot(spark: SparkSession, path: str) -> _LogSnapshot | None:
    """The table state (None: no table): from the log files when this process can read them (no Spark job; Delta's
    own snapshot computes its txns with a Spark job over the whole log state, about a second per call), else
    through Delta's snapshot (classic) or a replay through Spark (Connect)."""
    try:
        return _local_snapshot(spark, path)
    except _Unreadable:
        return _log_snapshot(spark, path) if is_connect(spark) else _jvm_snapshot(spark, path)


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
    ls = _snapshot(spark, path)
    if ls is None:
        return TableState(False, -1, None, {})
    return TableState(True, ls.version, ls.txns.get(app_id), ls.properties)


def read_version(spark: SparkSession, path: str, state: TableState) -> DataFrame:
    """The table as of ``state`` (its Delta version): what a reader beside a writer compares with the watermark it
    read in the same snapshot."""
    return spark.read.format("delta").option("versionAsOf", state.version).load(path)


def read_table_version(spark: SparkSession, path: str, app_id: str) -> int | None:
    """The latest Delta txn version recorded for ``app_id`` in the table at ``path`` (None: no table or none).

    Reads the table's snapshot (checkpoint + log) as table_state does: from the log files when they are on this
    machine's disk, else through Delta's DeltaLog (classic) or a replay through Spark (Connect), which work for any
    path Spark can read, object stores included."""
    return table_state(spark, path, app_id).position


def is_delta_table(spark: SparkSession, path: str) -> bool:
    """A Delta table exists at ``path`` (a version was committed)."""
    try:
        return _local_snapshot(spark, path) is not None
    except _Unreadable:
        return (_log_version(spark, path) if is_connect(spark) else int(_delta_log(spark, path).version())) >= 0


def mirror_version(spark: SparkSession, lake: Lake, schema: str, table: str) -> int | None:
    """The mirror's watermark: every change of schema.table with order key <= it is applied."""
    return read_table_version(spark, lake.mirror_path(schema, table), mirror_app_id(schema, table))
