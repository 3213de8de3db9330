"""Mirrors of tables without a primary key: the source table as a multiset of row images.

Such a mirror holds every source row as a row of its own: the table's columns, the meta columns of the change
that added it (``_canal_pos``, ``_canal_row``, ``_canal_ts``), and ``_canal_dup``, the copy number of its image
(the identical rows of one image are numbered 1..n). So ``SELECT <columns>`` of the mirror equals ``SELECT
<columns>`` of the source as a multiset, and (image, ``_canal_dup``) names one mirror row.

A staged part of such a table holds INSERT (after image) and DELETE (before image) rows only: staging splits every
UPDATE in two (pipelines.engine.staging). Applying a part to a mirror at watermark P:

* only its rows with pos > P count: the mirror holds every change <= P (docs/lake.md, claim (M)) and a part covers
  a contiguous range of the table's changes, so these rows are exactly the changes the mirror lacks;
* per image, net = inserts - deletes among them; an image whose net is negative loses its -net highest copies,
  one whose net is positive gains copies max+1..max+net, taking the meta columns of its latest inserts;
* removed and added rows go in one MERGE on (every column null-safe, ``_canal_dup``), under the part's txn
  version, so the part is applied exactly once;
* a part that removes more copies of an image than the mirror holds fails with MirrorDivergedError before
  anything is written: the mirror no longer equals the source, and a count that silently stopped at zero would
  hide it.

Which of several identical source rows MySQL changed cannot be known and does not matter: they are equal.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .lake.delta_sql import _merge, _q, _retry_concurrent, _txn
from .lake.layout import MIRROR_META, KeylessRemergeError, LakeError, MirrorDivergedError
from .window import (
    COL_DUP,
    COL_OP,
    COL_POS,
    COL_ROW,
    COL_SUB,
    COL_TS,
    META_COLUMNS,
    OP_DELETE,
    OP_INSERT,
    TablePart,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "changes",
    "conform",
    "conform_frame",
    "drop_columns",
    "image_columns",
    "merge",
    "number_copies",
    "preview",
    "refuse_remerge",
]

log = logging.getLogger(__name__)

_OWN = frozenset((*MIRROR_META, *META_COLUMNS, COL_DUP))   # pipeline columns of a mirror or a staged part
_IMG = "__img"       # the row's image as one struct column (joins and groupings on all columns, NULLs equal)
_NET = "__net"       # inserts - deletes of an image in the part
_HAVE = "__have"     # copies of an image the mirror holds
_TOP = "__top"       # its highest copy number
_RANK = "__rank"


def image_columns(struct: StructType) -> list[str]:
    """The table's own columns of a mirror or a staged part, in order."""
    return [f.name for f in struct.fields if f.name not in _OWN]


def _image(cols: list[str]) -> Column:
    from pyspark.sql import functions as F

    return F.struct(*[F.col(_q(c)) for c in cols])


def number_copies(df: DataFrame) -> DataFrame:
    """``df`` with ``_canal_dup`` (re)numbered 1..n among the rows of each image (added last if missing)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    cols = image_columns(df.schema)
    order = [F.col(COL_DUP)] if COL_DUP in df.columns else []
    w = Window.partitionBy(*[F.col(_q(c)) for c in cols]).orderBy(*order, F.col(COL_POS), F.col(COL_ROW))
    return df.withColumn(COL_DUP, F.row_number().over(w).cast("int"))


def _overwrite(spark: SparkSession, path: str, df: DataFrame, note: str) -> None:
    """Replace the table's rows and columns by ``df`` in one commit (no txn: the watermark is not touched)."""
    with _txn(spark, None, None, note):
        _retry_concurrent(lambda: df.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
                          .save(path), f"rewrite of {path}")


def conform(spark: SparkSession, path: str, name: str, struct: StructType, *, keyless: bool,
            where: str) -> StructType:
    """The mirror's shape made to fit a part with (``keyless`` False) or without a primary key, in one commit each
    way: a table that lost its key gains ``_canal_dup`` (its rows were distinct by the key: one copy each), one
    that gained a key loses it (MySQL refused duplicates when the key was added). Returns the mirror's columns."""
    has = COL_DUP in {f.name for f in struct.fields}
    if has == keyless:
        return struct
    df = spark.read.format("delta").load(path)
    out = number_copies(df) if keyless else df.drop(COL_DUP)
    _overwrite(spark, path, out, f"canal:{'keyless' if keyless else 'keyed'}:{where}")
    log.info("%s: %s %s: the mirror %s", name, "no primary key any more" if keyless else "a primary key now", where,
             "numbers the copies of each row (_canal_dup)" if keyless else "dropped _canal_dup")
    return spark.read.format("delta").load(path).schema


def conform_frame(df: DataFrame, *, keyless: bool) -> DataFrame:
    """conform() on a DataFrame (for preview_mirror)."""
    has = COL_DUP in df.columns
    if has == keyless:
        return df
    return number_copies(df) if keyless else df.drop(COL_DUP)


def drop_columns(spark: SparkSession, path: str, name: str, columns: list[str], where: str) -> None:
    """Drop source columns from a keyless mirror: rows that differed only there become copies of one image, so the
    copies are renumbered in the same commit (a metadata-only DROP COLUMNS would leave two rows with one name)."""
    df = spark.read.format("delta").load(path).drop(*columns)
    _overwrite(spark, path, number_copies(df), f"canal:drop-columns:{','.join(columns)}")
    log.info("%s: columns %s dropped %s, copies renumbered", name, ", ".join(columns), where)


def _staged_rows(part_df: DataFrame, part: TablePart, struct: StructType, position: int | None,
                 name: str, where: str) -> DataFrame:
    """The part's rows above ``position`` as the mirror's columns (exact casts; absent columns NULL), with
    _canal_op, _canal_sub and the image."""
    from pyspark.sql import functions as F

    if part.updates:
        raise LakeError(
            f"{name}: part {part.file} {where} holds {part.updates} UPDATE rows without their before images (staged "
            "by a version that did not split them into DELETE + INSERT): the window's next attempt stages it again")
    rows = part_df if position is None else part_df.where(F.col(COL_POS) > F.lit(position))
    have = {c.lower() for c in rows.columns}
    cols = [(F.col(_q(f.name)).cast(f.dataType) if f.name.lower() in have else F.lit(None).cast(f.dataType))
            .alias(f.name) for f in struct.fields if f.name != COL_DUP]
    return rows.select(*cols, F.col(COL_OP), F.col(COL_SUB)).withColumn(_IMG, _image(image_columns(struct)))


def changes(cur: DataFrame, part_df: DataFrame, part: TablePart, struct: StructType, position: int | None,
            name: str, where: str) -> DataFrame:
    """What the part does to the mirror rows ``cur`` (at watermark ``position``): one row per mirror row it removes
    (_canal_op DELETE, its image and _canal_dup) and per row it adds (INSERT, with _canal_dup and the meta columns
    of the insert); the mirror's columns plus _canal_op. MirrorDivergedError when it removes a copy the mirror
    lacks."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    cols = image_columns(struct)
    rows = _staged_rows(part_df, part, struct, position, name, where)
    sign = F.when(F.col(COL_OP) == OP_DELETE, F.lit(-1)).otherwise(F.lit(1))
    net = rows.groupBy(_IMG).agg(F.sum(sign).alias(_NET)).where(F.col(_NET) != 0)
    # the mirror's copies of the images the part changes, read once: the copy numbers removed and added below
    # come from one read of the mirror, whatever Spark evaluates twice
    held = (cur.select(_image(cols).alias(_IMG), F.col(COL_DUP)).join(net.select(_IMG), _IMG, "left_semi")
            .localCheckpoint())
    counts = held.groupBy(_IMG).agg(F.count(F.lit(1)).alias(_HAVE), F.max(COL_DUP).alias(_TOP))
    plan = net.join(counts, _IMG, "left").fillna(0, [_HAVE, _TOP])
    short = plan.where(F.col(_HAVE) + F.col(_NET) < 0).limit(3).collect()
    if short:
        seen = "; ".join(f"{r[_IMG].asDict()} held {r[_HAVE]} times, {-r[_NET]} removed" for r in short)
        raise MirrorDivergedError(
            f"{name}: the changes {where} remove rows the mirror does not hold ({seen}): the mirror no longer equals "
            f"the source (a change made to it outside the pipeline, or rows that predate an ADD COLUMN whose "
            f"default the mirror could not reproduce). Reload it with a canal_snapshot run for {name}; the window "
            "then applies")
    gone = (held.join(plan.where(F.col(_NET) < 0).select(_IMG, _NET), _IMG)
            .withColumn(_RANK, F.row_number().over(Window.partitionBy(_IMG).orderBy(F.col(COL_DUP).desc())))
            .where(F.col(_RANK) <= -F.col(_NET))
            .select(_IMG, F.col(COL_DUP), F.lit(None).cast("bigint").alias(COL_POS),
                    F.lit(None).cast("int").alias(COL_ROW), F.lit(None).cast("timestamp").alias(COL_TS),
                    F.lit(OP_DELETE).alias(COL_OP)))
    latest = Window.partitionBy(_IMG).orderBy(F.col(COL_POS).desc(), F.col(COL_ROW).desc(), F.col(COL_SUB).desc())
    added = (rows.where(F.col(COL_OP) == OP_INSERT).join(plan.where(F.col(_NET) > 0).select(_IMG, _NET, _TOP), _IMG)
             .withColumn(_RANK, F.row_number().over(latest))
             .where(F.col(_RANK) <= F.col(_NET))
             # the latest insert gets the highest copy number: the copies removed first are the newest
             .select(_IMG, (F.col(_TOP) + F.col(_NET) - F.col(_RANK) + 1).cast("int").alias(COL_DUP),
                     F.col(COL_POS), F.col(COL_ROW), F.col(COL_TS), F.lit(OP_INSERT).alias(COL_OP)))
    both = gone.unionByName(added)
    image = set(cols)
    out = [(F.col(f"{_IMG}.{_q(f.name)}") if f.name in image else F.col(_q(f.name)).cast(f.dataType)).alias(f.name)
           for f in struct.fields]
    return both.select(*out, F.col(COL_OP))


def merge(spark: SparkSession, path: str, src: DataFrame, struct: StructType) -> tuple[int, int, int] | None:
    """One MERGE of changes() into the mirror: (inserted, updated, deleted), None when Delta skipped it (txn)."""
    cols = image_columns(struct)
    on = " AND ".join([f"t.{_q(c)} <=> s.{_q(c)}" for c in cols] + [f"t.{_q(COL_DUP)} = s.{_q(COL_DUP)}"])
    names = [_q(f.name) for f in struct.fields]
    clauses = [
        f"WHEN MATCHED AND s.{_q(COL_OP)} = '{OP_DELETE}' THEN DELETE",
        f"WHEN NOT MATCHED AND s.{_q(COL_OP)} = '{OP_INSERT}' THEN INSERT ({', '.join(names)}) VALUES "
        f"({', '.join(f's.{n}' for n in names)})",
    ]
    rows = _retry_concurrent(lambda: _merge(spark, path, src, on, clauses), f"merge into {path}")
    if not rows:
        return None
    r = rows[0]
    return int(r["num_inserted_rows"]), int(r["num_updated_rows"]), int(r["num_deleted_rows"])


def preview(cur: DataFrame, part_df: DataFrame, part: TablePart, position: int | None, name: str,
            where: str) -> DataFrame:
    """The mirror rows ``cur`` after the part, as merge() would leave them (nothing written)."""
    from pyspark.sql import functions as F

    struct = cur.schema
    src = changes(cur, part_df, part, struct, position, name, where)
    key = [*image_columns(struct), COL_DUP]
    gone = src.where(F.col(COL_OP) == OP_DELETE).select(_image(key).alias(_IMG))
    kept = cur.withColumn(_IMG, _image(key)).join(gone, _IMG, "left_anti").drop(_IMG)
    return kept.unionByName(src.where(F.col(COL_OP) == OP_INSERT).drop(COL_OP))


def refuse_remerge(name: str) -> KeylessRemergeError:
    return KeylessRemergeError(
        f"{name} has no primary key: a backfill cannot re-merge its mirror (how many copies of a row it holds "
        "depends on every change since its snapshot, not only those of the period); its changelog period is "
        f"replaced all the same. If the mirror is damaged, reload it with a canal_snapshot run for {name}")
