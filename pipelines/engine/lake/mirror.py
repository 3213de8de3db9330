"""The mirrors ``{root}/mirror/{schema}/{table}``: one MERGE per staged part at the part's watermark, the window's
TRUNCATE / DROP / RENAME followed, a dry-run preview, and a table's initial snapshot."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..window import (
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
    split_key,
)
from .delta_log import read_table_version, read_version, table_state
from .delta_sql import _col, _create_table, _merge, _q, _read_staged, _retry_concurrent, _spark_schema, _sql_str, _txn
from .layout import PROP_CHUNK_PLAN, PROP_CHUNKED, PROP_DROPPED, PROP_EMPTIED, Lake, LakeError, _file, mirror_app_id
from .results import MirrorResult, TableState
from .schema_evolution import _evolve_frame, _evolve_table, _plan_schema, _SchemaPlan
from .window_ddl import _Ddl, _table_ddl, mirror_tables, rename_statements

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)


def _keys(part: TablePart) -> list[str]:
    return [c.name for c in part.columns if c.is_key]


def _where(name: str, pos: int) -> str:
    seq, off = split_key(pos)
    return f"at position {seq}:{off} (order key {pos}) of {name}"


def _mirror_struct(part_schema: StructType, keyless: bool = False) -> StructType:
    """``keyless``: a table without a primary key, whose mirror numbers the copies of a row
    (pipelines.engine.keyless)."""
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


def _fills(defaults: Callable[[str, str, str, str], Any] | None, table: TableChanges, part: TablePart,
           plan: _SchemaPlan) -> dict[str, Any]:
    """The value each column ``plan`` adds gives the rows that predate it (``defaults``; none: NULL)."""
    if defaults is None or not plan.adds:
        return {}
    types = {c.name.lower(): c.mysql_type for c in part.columns}
    return {col: defaults(table.schema, table.table, col, types[col.lower()]) for col, _t, _a in plan.adds}


def apply_mirror(spark: SparkSession, lake: Lake, window_dir: str | Path, manifest: WindowManifest,
                 table: TableChanges, *, after: int | None = None, upto: int | None = None,
                 defaults: Callable[[str, str, str, str], Any] | None = None) -> MirrorResult:
    """Apply the table's staged parts (and the window's TRUNCATE / DROP TABLE / column renames of it) in order to
    mirror/<schema>/<table>, one MERGE of the latest change per primary key per part.

    A part whose max_pos is not above the mirror's txn version is skipped; the MERGE commit records txn
    ("canal:mirror:<schema>.<table>", part.max_pos). Rows: an update or delete wins only over a target row
    written by an older-or-equal change. A part without a primary key goes to a multiset mirror instead
    (pipelines.engine.keyless: its rows above the watermark, net copies per row image).
    ``after`` / ``upto``: only the events with after < position <= upto (apply_mirrors splits at RENAME).
    ``defaults(schema, table, column, mysql_type)``: the value rows that predate an added column take
    (pipelines.engine.defaults.source_defaults); without it they are NULL."""
    from .. import keyless

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
            _evolve_table(spark, path, table.name, plan, where, _fills(defaults, table, part, plan))
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
                   table: TableChanges, state: TableState | None = None,
                   defaults: Callable[[str, str, str, str], Any] | None = None) -> DataFrame:
    """The mirror as apply_mirror would leave it (same skipping, guard, schema evolution), nothing written.
    ``state``: the mirror at that Delta version and watermark (a reader beside a writer), else its latest;
    ``defaults``: as for apply_mirror."""
    from pyspark.sql import functions as F

    from .. import keyless

    path, app = lake.mirror_path(table.schema, table.table), mirror_app_id(table.schema, table.table)
    if state is None:
        state = table_state(spark, path, app)
    cur = read_version(spark, path, state) if state.exists else None
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
        cur = _evolve_frame(cur, plan, _fills(defaults, table, part, plan))
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


def snapshot_frame(spark: SparkSession, source: pa.Table | str | Path, version: int,
                   snapshot_ts: dt.datetime | None, keyless: bool) -> DataFrame:
    """Snapshot rows (source columns; meta columns of a staged part are ignored) as mirror rows at ``version``."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    from ..keyless import number_copies

    if isinstance(source, pa.Table):
        df = spark.createDataFrame(source, schema=_spark_schema(source.schema))
    else:
        df = spark.read.parquet(str(source))
    df = df.select([F.col(_q(c)) for c in df.columns if c not in META_COLUMNS and c != COL_DUP])
    ts = F.lit(snapshot_ts).cast("timestamp") if snapshot_ts is not None else F.lit(None).cast("timestamp")
    df = df.select("*", F.lit(version).cast("bigint").alias(COL_POS), F.lit(0).alias(COL_ROW), ts.alias(COL_TS))
    return number_copies(df) if keyless else df


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
    copies of each row in _canal_dup (pipelines.engine.keyless)."""


    path, app = lake.mirror_path(schema, table), mirror_app_id(schema, table)
    version = position_key - 1
    state = table_state(spark, path, app)
    if state.position is not None and version <= state.position:
        log.info("%s.%s: snapshot at %s not ahead of the mirror (position %s): skipped", schema, table,
                 position_key, state.position)
        return state.version
    df = snapshot_frame(spark, source, version, snapshot_ts, keyless)
    w = df.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
    if not state.exists:  # writer options delta.* become table properties of a new table
        w = w.options(**lake.mirror_properties())
    with _txn(spark, app, version, f"canal:snapshot@{position_key}"):
        _retry_concurrent(lambda: w.save(path), f"snapshot into {path}")
    if PROP_DROPPED in state.properties:
        _clear_dropped(spark, path)
    if PROP_CHUNKED in state.properties:  # a chunked load left unfinished: this snapshot replaces it
        spark.sql(f"ALTER TABLE delta.`{path}` UNSET TBLPROPERTIES IF EXISTS ('{PROP_CHUNKED}', '{PROP_CHUNK_PLAN}')")
    after = table_state(spark, path, app)
    log.info("%s.%s: snapshot at %s written (Delta version %s)", schema, table, position_key, after.version)
    return after.version
