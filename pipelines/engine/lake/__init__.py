"""Applying staged windows (pipelines.engine.window) to Delta Lake with Spark: ``canal/changelog`` and the mirrors.

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
contiguous range". Works on a classic SparkSession with the Delta extension (pipelines.engine.sparkenv) and on a Spark
Connect session to a server that has it (scripts/spark-connect.sh): every write is SQL or DataFrame API, only the
table state is read differently (py4j on classic, the Delta log through Spark on Connect).

The package's modules, one concern each: layout (locations, appIds, properties, errors), results, delta_log (a
table's state), delta_sql (shared SQL building blocks), changelog, window_ddl, schema_evolution, mirror,
snapshot_chunks, maintenance. This module is the API the pipeline's assets, jobs and CLIs use.
"""

from __future__ import annotations

from .changelog import apply_changelog, replace_changelog_range
from .delta_log import is_delta_table, mirror_version, read_table_version, read_version, table_state
from .delta_sql import MERGE_SOURCE_MATERIALIZE
from .layout import (
    MIRROR_META,
    PROP_DROPPED,
    PROP_EMPTIED,
    KeylessRemergeError,
    Lake,
    LakeError,
    MirrorDivergedError,
    MirrorSchemaError,
    changelog_app_id,
    mirror_app_id,
)
from .maintenance import optimize, vacuum
from .mirror import (
    apply_mirror,
    apply_mirrors,
    drop_mirror,
    preview_mirror,
    rename_mirror,
    truncate_mirror,
    write_snapshot,
)
from .results import MirrorResult, TableState
from .snapshot_chunks import (
    PROP_CHUNK_PLAN,
    PROP_CHUNKED,
    append_chunk,
    begin_chunked,
    chunked_begin,
    chunked_progress,
    finish_chunked,
)
from .window_ddl import mirror_tables, rename_statements

__all__ = [
    "MERGE_SOURCE_MATERIALIZE",
    "MIRROR_META",
    "PROP_CHUNKED",
    "PROP_CHUNK_PLAN",
    "PROP_DROPPED",
    "PROP_EMPTIED",
    "KeylessRemergeError",
    "Lake",
    "LakeError",
    "MirrorDivergedError",
    "MirrorResult",
    "MirrorSchemaError",
    "TableState",
    "append_chunk",
    "apply_changelog",
    "apply_mirror",
    "apply_mirrors",
    "begin_chunked",
    "changelog_app_id",
    "chunked_begin",
    "chunked_progress",
    "drop_mirror",
    "finish_chunked",
    "is_delta_table",
    "mirror_app_id",
    "mirror_tables",
    "mirror_version",
    "optimize",
    "preview_mirror",
    "read_table_version",
    "read_version",
    "rename_mirror",
    "rename_statements",
    "replace_changelog_range",
    "table_state",
    "truncate_mirror",
    "vacuum",
    "write_snapshot",
]
