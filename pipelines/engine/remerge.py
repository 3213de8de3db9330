"""Backfill repair of a mirror: re-merge the keys one staged window changed, beside other writers.

``remerge_mirror`` restores the rows of the keys a window changed to their latest change up to the mirror's
watermark P, as ``canal/changelog`` tells (so replace the changelog range first). It plans against P, read at its
start, and MERGEs afterwards; a window committed in between moves the mirror past P, so the plan can be stale by
the time the MERGE runs. Delta's optimistic concurrency does not see that: it checks a MERGE only against the
commits that land while its own transaction is open. Two things close the gap (docs/lake.md, "Re-merging beside
other writers"):

* the MERGE is guarded like a window's: a change only overwrites or deletes a row written by an older-or-equal
  change, so no row a newer change wrote is touched and no ``_canal_pos`` moves backwards;
* after each commit the Delta history between the plan's version and that commit must hold no other data commit;
  when it does, the plan is made again at the new watermark and applied again. The guard leaves one thing a stale
  plan can do: insert a key that a change after P deleted. A new plan deletes such a key, because a key whose last
  change up to the watermark is a DELETE is deleted by every window that changed it.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import lake as L
from .lake import changelog, delta_log, delta_sql, layout, window_ddl
from .lake import mirror as lake_mirror
from .window import COL_OP, COL_POS, COL_ROW, COL_SUB, OP_DELETE, TableChanges, WindowManifest, key_text

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["REMERGE_NOTE", "Commit", "StaleRemergeError", "commits_after", "remerge_mirror"]

log = logging.getLogger(__name__)

REMERGE_NOTE = "canal:remerge"   # commitInfo.userMetadata prefix of a re-merge's commits
MAX_PASSES = 5
# Delta operations that change no row and no watermark: a plan made before them still holds
NO_DATA_OPERATIONS = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END"})


class StaleRemergeError(L.LakeError):
    """Other writers committed to the mirror during every pass of a re-merge."""


@dataclass(frozen=True, slots=True)
class Commit:
    version: int
    read_version: int | None
    operation: str
    note: str | None


def commits_after(spark: SparkSession, path: str, version: int) -> list[Commit]:
    """The commits of the Delta table at ``path`` after ``version``, oldest first (DESCRIBE HISTORY, reading
    only those commits)."""
    latest = delta_log._log_version(spark, path)
    if latest <= version:
        return []
    rows = (spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT {latest - version}")
            .select("version", "readVersion", "operation", "userMetadata").collect())
    out = [Commit(int(r[0]), None if r[1] is None else int(r[1]), str(r[2]), r[3]) for r in rows
           if int(r[0]) > version]
    return sorted(out, key=lambda c: c.version)


def _identity(img: str) -> str:
    """SQL: a key's identity from a text image of a changelog row: {key column: Canal text} as JSON."""
    return f"to_json(map_from_arrays(keys, transform(keys, k -> element_at({img}, k))))"


@dataclass(slots=True)
class _Pass:
    result: L.MirrorResult
    plan_version: int            # the Delta version the plan read the watermark from
    stale: list[Commit]          # other data commits between the plan and one of this pass's commits


def remerge_mirror(spark: SparkSession, lake: L.Lake, window_dir: str | Path, manifest: WindowManifest,
                   table: TableChanges, lo_key: int | None = None, hi_key: int | None = None, *,
                   passes: int = MAX_PASSES) -> L.MirrorResult:
    """Backfill repair: restore the mirror rows of the keys this window changed (those changed in
    [lo_key, hi_key] when given) to their latest change up to the mirror's position P, without moving P.

    A key whose last change <= P (by canal/changelog plus this window) is in this window gets that change; a key
    whose last change <= P is a DELETE elsewhere is deleted; other keys are left to the windows holding their
    last change. Missing rows are inserted, damaged ones overwritten, rows whose last change is a delete (or
    precedes a TRUNCATE / DROP of the table) deleted, correct rows left alone; a row written by a change newer
    than the one the plan picked (a snapshot row, or a window applied meanwhile) is never touched. Windows may
    be re-merged in any order and beside live windows: a pass whose plan another writer's commit made stale is
    planned and applied again, up to ``passes`` times (then StaleRemergeError). The result's ``replans`` counts
    those."""
    total = L.MirrorResult()
    stale: list[Commit] = []
    for n in range(passes):
        p = _remerge_pass(spark, lake, window_dir, manifest, table, lo_key, hi_key)
        total.add(p.result)
        if not p.stale:
            total.replans = n
            return total
        stale = p.stale
        log.warning("%s: window %s re-merge planned at Delta version %s is stale (other commits at versions %s: "
                    "%s); planning again", table.name, manifest.window, p.plan_version,
                    ", ".join(str(c.version) for c in stale), ", ".join(sorted({c.operation for c in stale})))
    raise StaleRemergeError(
        f"{table.name}: other writers committed to {lake.mirror_path(table.schema, table.table)} during each of "
        f"{passes} re-merges of window {manifest.window} (last at versions "
        f"{', '.join(str(c.version) for c in stale)}), so rows of keys deleted after its plan may be back: run "
        f"the backfill again while no other writer of destination {manifest.destination!r} runs (the Dagster pool "
        f"canal/{manifest.destination} serializes them)")


def _remerge_pass(spark: SparkSession, lake: L.Lake, window_dir: str | Path, manifest: WindowManifest,
                  table: TableChanges, lo_key: int | None, hi_key: int | None) -> _Pass:
    """One plan against the mirror's current watermark and its MERGEs, each checked against the Delta history."""
    from pyspark.sql import functions as F

    path, app = lake.mirror_path(table.schema, table.table), L.mirror_app_id(table.schema, table.table)
    state = L.table_state(spark, path, app)
    res = L.MirrorResult(version=state.version, position=state.position)
    done = _Pass(res, state.version, [])
    if not state.exists or state.position is None or not table.parts:
        res.reason = "no mirror to repair" if not state.exists else res.reason
        return done
    top = state.position
    if any(not lake_mirror._keys(p) for p in table.parts if p.min_pos <= top):
        from .keyless import refuse_remerge

        raise refuse_remerge(table.name)  # its copies depend on every change since its snapshot
    parts = [p for p in table.parts if p.min_pos <= top and lake_mirror._keys(p)]
    if not parts:
        return done
    _require_changelog_upto(spark, lake, manifest, table.name, top)
    staged = changelog._read_changelog(spark, window_dir, manifest)
    if staged is None:
        raise L.LakeError(f"{window_dir}: window {manifest.window} has table parts but no changelog.parquet")
    sel = (F.col("destination") == manifest.destination) & (F.col("schema_name") == table.schema) & (
        F.col("table_name") == table.table)
    staged = staged.where(sel)
    lo = min(p.min_pos for p in parts)
    if lo_key is not None:
        lo = min(lo, lo_key)
    clog = spark.read.format("delta").load(lake.changelog_path()).where(sel & F.col("pos").between(lo, top))
    both = clog.unionByName(staged.where(F.col("pos") <= top))

    def touched(df: DataFrame) -> DataFrame:
        # every key a change touched, and whether the key exists after it: the before image of updates and
        # deletes (no), the after image of inserts and updates (yes; an update keeping its key has both)
        return df.select("pos", "row", F.explode(F.array(
            F.when(F.col("before").isNotNull(), F.struct(F.expr(_identity("before")).alias("i"),
                                                         F.lit(False).alias("e"))),
            F.when(F.col("after").isNotNull(), F.struct(F.expr(_identity("after")).alias("i"),
                                                        F.lit(True).alias("e"))))).alias("__t")).where(
            "__t IS NOT NULL").select("pos", "row", F.col("__t.i").alias("__ident"), F.col("__t.e").alias("__exists"))

    # each key's last change <= top and whether the key exists after it
    last = touched(both).groupBy("__ident").agg(F.max(F.struct("pos", "row", "__exists")).alias("__last"))
    if lo_key is not None or hi_key is not None:
        rng = touched(both.where(F.col("pos").between(lo_key if lo_key is not None else lo,
                                                      hi_key if hi_key is not None else top)))
        last = last.join(rng.select("__ident").distinct(), "__ident")
    ids = staged.select(F.col("pos").alias("__pos"), F.col("row").alias("__row"),
                        F.expr(_identity("before")).alias("__b"), F.expr(_identity("after")).alias("__a"))
    emptied = [int(state.properties[L.PROP_EMPTIED])] if L.PROP_EMPTIED in state.properties else []
    ddl = window_ddl._table_ddl(manifest, table.schema, table.table)
    emptied = [e for e in emptied if e <= top]
    emptied += [d.pos for d in ddl if d.kind in ("truncate", "erase") and d.pos <= top]
    cut = max(emptied, default=None)
    struct = spark.read.format("delta").load(path).schema
    note = f"{REMERGE_NOTE}:{manifest.destination}:{manifest.window}:{uuid.uuid4().hex[:12]}"
    for part in parts:
        keys = lake_mirror._keys(part)
        df = delta_sql._read_staged(spark, layout._file(window_dir, part.file)).where(F.col(COL_POS) <= top)
        # each typed row's key identity: a DELETE (also the old-key half of a key change) by its before image
        df = df.join(ids, (F.col(COL_POS) == F.col("__pos")) & (F.col(COL_ROW) == F.col("__row")))
        df = df.withColumn("__ident", F.when(F.col(COL_OP) == OP_DELETE, F.col("__b")).otherwise(F.col("__a")))
        df = df.join(last, "__ident")
        own = df.where((F.col("__last.pos") == F.col(COL_POS)) & (F.col("__last.row") == F.col(COL_ROW)))
        if cut is not None:  # a change before the table was emptied leaves no row
            own = own.withColumn(COL_OP, F.when(F.col(COL_POS) < cut, F.lit(OP_DELETE)).otherwise(F.col(COL_OP)))
        # keys whose last change is a DELETE in another window: deleted here too, as of that change
        gone = (df.where(~F.col("__last.__exists"))
                .withColumn(COL_OP, F.lit(OP_DELETE)).withColumn(COL_POS, F.col("__last.pos"))
                .withColumn(COL_ROW, F.col("__last.row")).withColumn(COL_SUB, F.lit(0).cast("byte")))
        src = lake_mirror._project(lake_mirror._latest(own.unionByName(gone), keys), struct)
        with delta_sql._txn(spark, None, None, note):
            counts = lake_mirror._merge_part(spark, path, src, keys, struct, guard=True, only_changed=True)
        res.applied_parts += 1
        if not counts or not any(counts):
            continue   # Delta committed nothing (no row differed)
        res.inserted += counts[0]
        res.updated += counts[1]
        res.deleted += counts[2]
        done.stale = _stale_commits(spark, path, state.version, note)
        if done.stale:
            break
    final = L.table_state(spark, path, app)
    res.version, res.position = final.version, final.position
    return done


def _stale_commits(spark: SparkSession, path: str, plan_version: int, note: str) -> list[Commit]:
    """Other writers' data commits between ``plan_version`` and this pass's last commit (labelled ``note``)."""
    commits = commits_after(spark, path, plan_version)
    mine = [c.version for c in commits if c.note == note]
    if not mine:
        raise L.LakeError(f"{path}: the re-merge's MERGE reported changed rows but the Delta history after version "
                          f"{plan_version} has no commit labelled {note!r}")
    upto = max(mine)
    return [c for c in commits if c.version < upto and c.note != note and c.operation not in NO_DATA_OPERATIONS]


def _require_changelog_upto(spark: SparkSession, lake: L.Lake, manifest: WindowManifest, name: str,
                            top: int) -> None:
    """The plan reads every key's last change up to the mirror's watermark from canal/changelog: after a snapshot
    the mirror can be ahead of it until the live windows pass the snapshot position."""
    destination, like = manifest.destination, manifest.start.journal
    applied = L.read_table_version(spark, lake.changelog_path(), L.changelog_app_id(destination))
    if applied is None or applied < top:
        raise L.LakeError(
            f"{name}: the mirror is at {key_text(top, like)} but canal/changelog of destination {destination!r} "
            f"only up to {'nothing' if applied is None else key_text(applied, like)} (a snapshot put the mirror "
            "ahead): the last changes of its keys in between are unknown, so it cannot be re-merged yet; run the "
            "backfill again once the live pipeline has applied changes past that position")
