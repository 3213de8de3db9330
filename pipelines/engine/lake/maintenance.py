"""Table maintenance: OPTIMIZE (compaction) and VACUUM of a lake table."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from pipelines.engine.sparkenv import is_connect

from .delta_sql import _RETENTION_CHECK, _session_conf

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession


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
