"""Following the source's column changes in a mirror: which staged types fit the mirror's, which Delta widens in
place, which need an exact rewrite, and the plan that adds, drops and widens columns."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..window import COL_DUP, META_COLUMNS
from .delta_sql import _q, _txn
from .layout import MIRROR_META, MirrorSchemaError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

log = logging.getLogger(__name__)

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
    pipelines.engine.defaults); such a column is added together with its values in one commit."""
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


def _evolve_frame(df: DataFrame, plan: _SchemaPlan, fills: dict[str, Any] | None = None) -> DataFrame:
    """The same plan applied to a DataFrame (for preview_mirror); ``fills`` as for _evolve_table."""
    from pyspark.sql import functions as F

    if plan.drops:
        df = df.drop(*plan.drops)
    casts = {c.lower(): t for c, t in plan.widen + plan.rewrite}
    cols = [F.col(_q(f.name)).cast(casts[f.name.lower()]).alias(f.name) if f.name.lower() in casts
            else F.col(_q(f.name)) for f in df.schema.fields]
    df = df.select(cols)
    for col, typ, _after in plan.adds:
        df = df.withColumn(col, F.lit((fills or {}).get(col)).cast(typ))
    return df
