"""Where the lake's tables are and what marks them: table locations under a lake root, the Delta txn
appIds of the changelog and the mirrors, the mirrors' own columns and table properties, and the lake's errors."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..window import COL_POS, COL_ROW, COL_TS

if TYPE_CHECKING:  # pragma: no cover
    pass


# mirror columns after the table's own: the position (and row index) of the change that wrote the row, its time
MIRROR_META = (COL_POS, COL_ROW, COL_TS)
PROP_CHUNKED = "canal.snapshot.chunked"   # a chunked load under way (lake.snapshot_chunks): its begin position
# ... and its plan: JSON {"bounds": the key segments' upper bounds, "columns": a digest of the table's columns}
PROP_CHUNK_PLAN = "canal.snapshot.chunked.plan"
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


class LakeError(RuntimeError):
    """A lake operation that cannot proceed (missing input, unsupported table)."""


class MirrorSchemaError(LakeError):
    """A source column change the mirror cannot follow exactly."""


class MirrorDivergedError(LakeError):
    """Changes that remove rows a mirror of a table without a primary key does not hold (pipelines.engine.keyless)."""


class KeylessRemergeError(LakeError):
    """remerge_mirror of a table without a primary key: its row multiplicities cannot be re-derived."""


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
