"""pipelines.engine.lake against Delta: staged windows written with pyarrow per pipelines.engine.window's contract
(tests/support/staged_windows.py), and every expected table state written out by hand (never computed by the lake
package)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pipelines.engine import lake as L
from pipelines.engine.lake.schema_evolution import _plan_schema
from pipelines.engine.remerge import remerge_mirror
from pipelines.engine.window import META_COLUMNS
from tests.support.spark import table_with_txns
from tests.support.staged_windows import (
    ITEMS,
    D,
    I,
    Part,
    U,
    Win,
    changelog_windows,
    k,
    p,
    remerge_beside_a_window,
    rows,
    stage,
    table_of,
)

# ---- tests --------------------------------------------------------------------------------------------------


def test_lake_paths() -> None:
    assert L.Lake("s3a://bucket/lake/").changelog_path() == "s3a://bucket/lake/canal/changelog"
    assert L.Lake("abfss://c@acct.dfs.core.windows.net/x").mirror_path("shop", "items") == \
        "abfss://c@acct.dfs.core.windows.net/x/mirror/shop/items"
    assert L.Lake("/data/lake").mirror_path("a", "b") == "/data/lake/mirror/a/b"
    with pytest.raises(ValueError):
        L.Lake("/x").mirror_path("a", "b/c")


def test_changelog_is_idempotent(spark: Any, tmp_path: Path) -> None:
    lake = L.Lake(str(tmp_path / "lake"))
    w1, w2, w2b = changelog_windows(tmp_path)
    path = lake.changelog_path()
    assert L.apply_changelog(spark, lake, *w1) == 3
    assert L.apply_changelog(spark, lake, *w2) == 2
    assert L.apply_changelog(spark, lake, *w2) == 0    # the same window again
    assert L.apply_changelog(spark, lake, *w1) == 0    # an older window after a newer one
    assert L.apply_changelog(spark, lake, *w2b) == 1   # the overlap is not duplicated
    assert rows(spark, path, "pos", "row", "op", "event_date") == [
        (k(10), 0, I, dt.date(2024, 5, 1)), (k(10), 1, I, dt.date(2024, 5, 1)), (k(40), 0, I, dt.date(2024, 5, 1)),
        (k(50), 0, D, dt.date(2024, 5, 1)), (k(70), 0, I, dt.date(2024, 5, 2)), (k(90), 0, I, dt.date(2024, 5, 2))]
    assert L.read_table_version(spark, path, L.changelog_app_id("d1")) == k(90)
    assert L.read_table_version(spark, path, L.changelog_app_id("other")) is None
    assert L.read_table_version(spark, str(tmp_path / "nothing"), "x") is None
    parts = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["partitionColumns"]
    assert list(parts) == ["event_date"]


def test_mirror_converges_and_replays_are_harmless(spark: Any, tmp_path: Path) -> None:
    lake = L.Lake(str(tmp_path / "lake"))
    name = "shop.items"
    w1 = stage(tmp_path / "s", Win(1, 100, 160, {name: [Part(ITEMS, [
        (I, 100, 0, 0, 1, "ann", p("1.00")), (I, 100, 1, 0, 2, "bob", p("2.00")), (I, 100, 2, 0, 3, "cyd", p("3.00")),
        (U, 110, 0, 0, 2, "bob", p("2.50")),
        (D, 120, 0, 0, 3, "cyd", p("3.00")),
        (D, 130, 0, 0, 1, "ann", p("1.00")), (I, 130, 0, 1, 10, "ann", p("1.00")),   # UPDATE id 1 -> 10
        (I, 160, 0, 0, 3, "cy2", p("3.30")),                                           # id 3 again
    ])]}))
    w2 = stage(tmp_path / "s", Win(2, 200, 210, {name: [Part(ITEMS, [
        (U, 200, 0, 0, 10, "ann", p("1.10")), (I, 210, 0, 0, 4, "dan", p("4.00"))])]}))
    w2b = stage(tmp_path / "s", Win(3, 200, 260, {name: [Part(ITEMS, [           # re-delivery: same start, later end
        (U, 200, 0, 0, 10, "ann", p("1.10")), (I, 210, 0, 0, 4, "dan", p("4.00")),
        (D, 250, 0, 0, 4, "dan", p("4.00")), (I, 260, 0, 0, 5, "eve", p("5.00"))])]}))
    path = lake.mirror_path("shop", "items")

    r1 = L.apply_mirror(spark, lake, *w1, table_of(w1[1], name))
    assert (r1.inserted, r1.updated, r1.deleted, r1.skipped_parts, r1.position) == (3, 0, 0, 0, k(160))
    assert rows(spark, path) == [(2, "bob", p("2.50")), (3, "cy2", p("3.30")), (10, "ann", p("1.00"))]
    assert rows(spark, path, "id", "_canal_pos", "_canal_row") == [(2, k(110), 0), (3, k(160), 0), (10, k(130), 0)]
    r2 = L.apply_mirror(spark, lake, *w2, table_of(w2[1], name))
    assert (r2.inserted, r2.updated, r2.position) == (1, 1, k(210))
    after_w2 = [(2, "bob", p("2.50")), (3, "cy2", p("3.30")), (4, "dan", p("4.00")), (10, "ann", p("1.10"))]
    assert rows(spark, path) == after_w2

    again = L.apply_mirror(spark, lake, *w1, table_of(w1[1], name))   # older window after a newer one
    assert (again.skipped_parts, again.applied_parts, again.position) == (1, 0, k(210))
    assert rows(spark, path) == after_w2

    expected = [(2, "bob", p("2.50")), (3, "cy2", p("3.30")), (5, "eve", p("5.00")), (10, "ann", p("1.10"))]
    preview = L.preview_mirror(spark, lake, *w2b, table_of(w2b[1], name))
    assert sorted(tuple(r) for r in preview.select("id", "name", "price").collect()) == expected
    assert rows(spark, path) == after_w2   # the preview wrote nothing
    r3 = L.apply_mirror(spark, lake, *w2b, table_of(w2b[1], name))
    assert (r3.inserted, r3.deleted, r3.position) == (1, 1, k(260))
    assert rows(spark, path) == expected
    assert L.mirror_version(spark, lake, "shop", "items") == k(260)
    # Delta never resets its idempotency confs; the lake package must not leave them set for the next write
    assert spark.conf.get("spark.databricks.delta.write.txnAppId", None) is None
    assert spark.conf.get("spark.databricks.delta.write.txnVersion", None) is None
    props = dict(spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect())
    assert props["delta.columnMapping.mode"] == "name"


@pytest.mark.parametrize("deletion_vectors", [True, False])
def test_mirror_merge_on_read(spark: Any, tmp_path: Path, deletion_vectors: bool) -> None:
    """lake.deletion_vectors: a MERGE that updates and deletes rows copies none of the untouched ones (it marks
    the replaced rows in deletion vectors); off, the touched files are rewritten. Same rows either way."""
    lake = L.Lake(str(tmp_path / "lake"), deletion_vectors=deletion_vectors)
    name = "shop.items"
    w1 = stage(tmp_path / "s", Win(1, 100, 100, {name: [Part(ITEMS, [
        (I, 100, i, 0, i, f"n{i}", p(f"{i}.00")) for i in range(1, 9)])]}))
    w2 = stage(tmp_path / "s", Win(2, 200, 210, {name: [Part(ITEMS, [
        (U, 200, 0, 0, 2, "two", p("2.50")), (D, 210, 0, 0, 3, "n3", p("3.00")),
        (I, 210, 1, 0, 9, "n9", p("9.00"))])]}))
    path = lake.mirror_path("shop", "items")
    L.apply_mirror(spark, lake, *w1, table_of(w1[1], name))
    r2 = L.apply_mirror(spark, lake, *w2, table_of(w2[1], name))
    assert (r2.inserted, r2.updated, r2.deleted) == (1, 1, 1)
    assert rows(spark, path) == [(1, "n1", p("1.00")), (2, "two", p("2.50")), (4, "n4", p("4.00")),
                                 (5, "n5", p("5.00")), (6, "n6", p("6.00")), (7, "n7", p("7.00")),
                                 (8, "n8", p("8.00")), (9, "n9", p("9.00"))]
    merge = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()
    assert merge is not None and merge["operation"] == "MERGE"
    metrics = {k: int(v) for k, v in merge["operationMetrics"].items()}
    features = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["tableFeatures"]
    if deletion_vectors:
        assert "deletionVectors" in features
        assert metrics["numTargetRowsCopied"] == 0 and metrics["numTargetDeletionVectorsAdded"] >= 1
    else:
        assert "deletionVectors" not in features
        assert metrics["numTargetRowsCopied"] >= 4 and metrics["numTargetDeletionVectorsAdded"] == 0


def test_schema_plan_decisions() -> None:
    from pyspark.sql import types as T

    def st(*fields: tuple[str, Any]) -> Any:
        return T.StructType([T.StructField(n, t) for n, t in fields])

    mirror = st(("id", T.IntegerType()), ("n", T.LongType()), ("d", T.DecimalType(10, 2)), ("s", T.ShortType()),
                ("f", T.FloatType()), ("day", T.DateType()), ("gone", T.StringType()), ("_canal_pos", T.LongType()))
    part = st(("_canal_op", T.StringType()), ("_canal_pos", T.LongType()), ("ID", T.IntegerType()),
              ("n", T.IntegerType()), ("d", T.DecimalType(12, 2)), ("s", T.StringType()), ("f", T.DoubleType()),
              ("day", T.TimestampNTZType()), ("new", T.BinaryType()))
    plan = _plan_schema("a.b", mirror, part, "here")
    assert plan.drops == ["gone"]
    assert [(c, t.simpleString(), after) for c, t, after in plan.adds] == [("new", "binary", "day")]
    assert [(c, t.simpleString()) for c, t in plan.widen] == [("d", "decimal(12,2)"), ("f", "double")]
    assert [(c, t.simpleString()) for c, t in plan.rewrite] == [("s", "string"), ("day", "timestamp_ntz")]
    with pytest.raises(L.MirrorSchemaError, match=r"a\.b: column 'n' changed from bigint to timestamp here"):
        _plan_schema("a.b", mirror, st(("n", T.TimestampType())), "here")


def test_schema_evolution_mid_stream(spark: Any, tmp_path: Path) -> None:
    lake = L.Lake(str(tmp_path / "lake"))
    name = "shop.s"
    base = [("id", pa.int32(), True), ("a", pa.int32(), False), ("b", pa.string(), False)]
    added = [*base, ("c", pa.date32(), False)]                                             # ADD COLUMN c DATE
    dropped = [("id", pa.int32(), True), ("a", pa.int64(), False), ("c", pa.date32(), False)]   # DROP b, a BIGINT
    renamed = [("id", pa.int32(), True), ("a", pa.string(), False), ("d", pa.date32(), False)]  # c -> d, a VARCHAR
    day = dt.date(2024, 1, 2)
    w = stage(tmp_path / "s", Win(1, 100, 400, {name: [
        Part(base, [(I, 100, 0, 0, 1, 10, "x"), (I, 100, 1, 0, 2, 20, "y")]),
        Part(added, [(U, 200, 0, 0, 2, 21, "y", day), (I, 210, 0, 0, 3, 30, "z", None)]),
        Part(dropped, [(I, 300, 0, 0, 4, 2**40, day)]),
        Part(renamed, [(U, 400, 0, 0, 1, "ten", day)]),
    ]}, ddl=[(150, "shop", "s", "ALTER", "ALTER TABLE s ADD COLUMN c DATE"),
             (250, "shop", "s", "ALTER", "ALTER TABLE s DROP COLUMN b, MODIFY a BIGINT"),
             (350, "shop", "s", "ALTER", "ALTER TABLE s RENAME COLUMN c TO d, MODIFY a VARCHAR(20)")]))
    t = table_of(w[1], name)
    expected = [(1, "ten", day), (2, "21", day), (3, "30", None), (4, "1099511627776", day)]
    preview = L.preview_mirror(spark, lake, *w, t)
    assert sorted(tuple(r) for r in preview.select("id", "a", "d").collect()) == expected
    r = L.apply_mirror(spark, lake, *w, t)
    assert (r.applied_parts, r.position) == (4, k(400))
    path = lake.mirror_path("shop", "s")
    schema = spark.read.format("delta").load(path).schema
    assert [(f.name, f.dataType.simpleString()) for f in schema.fields] == [
        ("id", "int"), ("a", "string"), ("d", "date"), ("_canal_pos", "bigint"), ("_canal_row", "int"),
        ("_canal_ts", "timestamp")]
    assert rows(spark, path) == expected

    # a change no exact conversion follows: a typed error naming the table and the position
    bad = stage(tmp_path / "s2", Win(2, 500, 500, {name: [Part([("id", pa.int32(), True), ("a", pa.binary(), False),
                                                               ("d", pa.date32(), False)],
                                                              [(I, 500, 0, 0, 9, b"\x01", None)])]}))
    with pytest.raises(L.MirrorSchemaError, match=r"shop\.s: column 'a' changed from string to binary at position "
                                                  r"7:500"):
        L.apply_mirror(spark, lake, *bad, table_of(bad[1], name))
    assert L.mirror_version(spark, lake, "shop", "s") == k(400)


def test_truncate_drop_rename(spark: Any, tmp_path: Path) -> None:
    lake = L.Lake(str(tmp_path / "lake"))
    kv = [("id", pa.int32(), True), ("v", pa.string(), False)]
    w1 = stage(tmp_path / "s", Win(1, 110, 120, {
        "shop.t": [Part(kv, [(I, 110, 0, 0, 1, "a"), (I, 110, 1, 0, 2, "b")])],
        "shop.old": [Part(kv, [(I, 120, 0, 0, 7, "g")])]}))
    for name in ("shop.t", "shop.old"):
        L.apply_mirror(spark, lake, *w1, table_of(w1[1], name))

    # TRUNCATE t; insert 3; RENAME old TO new; insert into new; DROP TABLE t
    w2 = stage(tmp_path / "s", Win(2, 200, 260, {
        "shop.t": [Part(kv, [(I, 210, 0, 0, 3, "c")])],
        "shop.new": [Part(kv, [(I, 240, 0, 0, 8, "h")])]},
        ddl=[(200, "shop", "t", "TRUNCATE", "TRUNCATE TABLE t"),
             (230, "shop", "new", "RENAME", "RENAME TABLE old TO new"),
             (260, "shop", "t", "ERASE", "DROP TABLE t")]))
    assert [t.name for t in L.mirror_tables(w2[1])] == ["shop.t", "shop.new"]
    res = L.apply_mirrors(spark, lake, *w2)
    assert res["shop.t"].deleted == 3 and res["shop.t"].position == k(260)
    t_path = lake.mirror_path("shop", "t")
    assert rows(spark, t_path) == []
    assert dict(spark.sql(f"SHOW TBLPROPERTIES delta.`{t_path}`").collect())[L.PROP_DROPPED] == str(k(260))
    assert rows(spark, lake.mirror_path("shop", "new")) == [(7, "g"), (8, "h")]
    assert L.mirror_version(spark, lake, "shop", "new") == k(240)
    assert rows(spark, lake.mirror_path("shop", "old")) == []
    # replaying both windows resurrects nothing
    L.apply_mirrors(spark, lake, *w1)
    L.apply_mirrors(spark, lake, *w2)
    assert rows(spark, t_path) == [] and rows(spark, lake.mirror_path("shop", "old")) == []
    assert rows(spark, lake.mirror_path("shop", "new")) == [(7, "g"), (8, "h")]


def test_snapshot_then_overlapping_window(spark: Any, tmp_path: Path) -> None:
    lake = L.Lake(str(tmp_path / "lake"))
    snap_pos = k(300)   # SHOW MASTER STATUS: changes below 300 are in the snapshot
    snap = pa.table({"id": pa.array([1, 2, 6], pa.int32()), "name": ["ann", "bob", "fay"],
                     "price": pa.array([p("1.00"), p("2.00"), p("6.00")], pa.decimal128(10, 2))})
    v = L.write_snapshot(spark, lake, "shop", "items", snap, snap_pos)
    path = lake.mirror_path("shop", "items")
    assert L.mirror_version(spark, lake, "shop", "items") == snap_pos - 1
    assert rows(spark, path, "id", "_canal_pos") == [(1, snap_pos - 1), (2, snap_pos - 1), (6, snap_pos - 1)]
    assert L.write_snapshot(spark, lake, "shop", "items", snap, snap_pos) == v   # the same snapshot again: skipped
    name = "shop.items"
    w = stage(tmp_path / "s", Win(1, 200, 320, {name: [Part(ITEMS, [
        (I, 200, 0, 0, 1, "old", p("0.10")),      # in the snapshot already (and later updated): must not win
        (I, 210, 0, 0, 3, "cyd", p("3.00")),      # inserted and deleted before the snapshot
        (D, 220, 0, 0, 3, "cyd", p("3.00")),
        (D, 230, 0, 0, 4, "dan", p("4.00")),      # deleted before the snapshot
        (U, 240, 0, 0, 6, "fay", p("6.00")),      # the snapshot holds this state
        (U, 300, 0, 0, 2, "bea", p("2.20")),      # at the snapshot position: after it
        (I, 310, 0, 0, 5, "eve", p("5.00")),
        (D, 320, 0, 0, 6, "fay", p("6.00")),
    ])]}))
    r = L.apply_mirror(spark, lake, *w, table_of(w[1], name))
    assert (r.inserted, r.updated, r.deleted, r.position) == (1, 1, 1, k(320))
    assert rows(spark, path) == [(1, "ann", p("1.00")), (2, "bea", p("2.20")), (5, "eve", p("5.00"))]
    # a part entirely below the snapshot is skipped
    old = stage(tmp_path / "s2", Win(2, 100, 110, {name: [Part(ITEMS, [(I, 110, 0, 0, 9, "x", p("9.00"))])]}))
    assert L.apply_mirror(spark, lake, *old, table_of(old[1], name)).skipped_parts == 1
    assert rows(spark, path, "id") == [(1,), (2,), (5,)]


def test_backfill_restores_damaged_rows_only(spark: Any, tmp_path: Path) -> None:
    lake = L.Lake(str(tmp_path / "lake"))
    name = "shop.items"
    w1 = stage(tmp_path / "s", Win(1, 100, 150, {name: [Part(ITEMS, [
        (I, 100, 0, 0, 1, "ann", p("1.00")), (I, 100, 1, 0, 2, "bob", p("2.00")), (I, 100, 2, 0, 3, "cyd", p("3.00")),
        (I, 100, 3, 0, 7, "gus", p("7.00")), (I, 100, 4, 0, 9, "ida", p("9.00")),
        (U, 120, 0, 0, 2, "bo2", p("2.20")), (D, 130, 0, 0, 9, "ida", p("9.00")), (U, 140, 0, 0, 3, "cy2", p("3.30")),
        (U, 150, 0, 0, 1, "an2", p("1.10"))])]}))
    w2 = stage(tmp_path / "s", Win(2, 200, 210, {name: [Part(ITEMS, [
        (U, 200, 0, 0, 1, "an3", p("1.20")), (I, 210, 0, 0, 4, "dan", p("4.00"))])]}))
    for w in (w1, w2):
        L.apply_changelog(spark, lake, *w)
        L.apply_mirror(spark, lake, *w, table_of(w[1], name))
    path, clog = lake.mirror_path("shop", "items"), lake.changelog_path()
    good = [(1, "an3", p("1.20")), (2, "bo2", p("2.20")), (3, "cy2", p("3.30")), (4, "dan", p("4.00")),
            (7, "gus", p("7.00"))]
    assert rows(spark, path) == good
    # damage: row 2 lost, rows 3 and 7 corrupted, deleted row 9 back; the changelog lost pos 120 and got a bogus
    # row inside the range
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 2")
    spark.sql(f"UPDATE delta.`{path}` SET name = 'bad' WHERE id IN (3, 7)")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (9, 'ida', 9.00, {k(100)}, 4, NULL)")
    spark.sql(f"DELETE FROM delta.`{clog}` WHERE pos = {k(120)}")
    spark.sql(f"INSERT INTO delta.`{clog}` SELECT destination, schema_name, table_name, op, binlog_file, "
              f"binlog_offset, {k(125)}, `row`, gtid, server_id, execute_time, event_date, `window`, keys, updated, "
              f"before, after FROM delta.`{clog}` WHERE pos = {k(150)}")
    lo, hi = k(110), k(140)   # keys changed in the range: 2, 3, 9 (1 and 7 only outside it)
    version = L.mirror_version(spark, lake, "shop", "items")
    assert L.replace_changelog_range(spark, lake, *w1, [name], lo, hi) == 3
    assert rows(spark, clog, "pos", "row") == [(k(100), i) for i in range(5)] + [
        (k(120), 0), (k(130), 0), (k(140), 0), (k(150), 0), (k(200), 0), (k(210), 0)]
    for w in (w2, w1):   # any order
        remerge_mirror(spark, lake, *w, table_of(w[1], name), lo, hi)
    assert rows(spark, path) == [(1, "an3", p("1.20")), (2, "bo2", p("2.20")), (3, "cy2", p("3.30")),
                                 (4, "dan", p("4.00")), (7, "bad", p("7.00"))]
    assert rows(spark, path, "id", "_canal_pos") == [(1, k(200)), (2, k(120)), (3, k(140)), (4, k(210)),
                                                     (7, k(100))]
    assert L.mirror_version(spark, lake, "shop", "items") == version   # not moved
    # without bounds every key the window changed is checked: 7 is repaired by w1, nothing else changes
    r = remerge_mirror(spark, lake, *w1, table_of(w1[1], name))
    assert (r.inserted, r.updated, r.deleted) == (0, 1, 0)
    assert rows(spark, path) == good


@pytest.mark.long   # the same scenario runs on Spark Connect (test_spark_connect.py), the pipeline's default, and
                    # through the pipeline with forced interleavings in test_backfill_live.py
def test_remerge_beside_a_window(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    remerge_beside_a_window(spark, tmp_path, monkeypatch)


def test_maintenance(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "m")
    for i in range(3):
        spark.createDataFrame([(i,)], "x INT").coalesce(1).write.format("delta").mode("append").save(path)
    assert L.optimize(spark, path)["numFilesRemoved"] == 3
    assert L.vacuum(spark, path, 0)["files_deleted"] == 3
    assert rows(spark, path, "x") == [(0,), (1,), (2,)]
    assert META_COLUMNS[0] == "_canal_op"


def test_table_state_is_read_from_the_log_files_without_a_spark_job(spark: Any, tmp_path: Path) -> None:
    """On a classic session the table state of a table on this disk is read from its log files (no Spark job:
    Delta's own snapshot computes its txns with one), past a checkpoint, with two txn appIds and a property
    change; it equals Delta's own snapshot and what was written."""
    from pipelines.engine.lake import delta_log

    path = str(tmp_path / "t")
    table_with_txns(spark, path)
    assert (tmp_path / "t" / "_delta_log" / "_last_checkpoint").exists()

    tracker, group = spark.sparkContext.statusTracker(), "canal-table-state"
    spark.sparkContext.setJobGroup(group, "table state")
    try:
        st = L.table_state(spark, path, "even")
        assert L.read_table_version(spark, path, "odd") == 111
        assert L.is_delta_table(spark, path) and not L.is_delta_table(spark, str(tmp_path / "none"))
        assert L.table_state(spark, str(tmp_path / "none"), "even") == L.TableState(False, -1, None, {})
        assert list(tracker.getJobIdsForGroup(group)) == []   # no Spark job
        jvm = delta_log._jvm_snapshot(spark, path)   # Delta's own snapshot (the fallback for other disks)
        assert list(tracker.getJobIdsForGroup(group)) != []   # ... which the check above would have seen
    finally:
        spark.sparkContext.setJobGroup(None, None)  # type: ignore[arg-type]
    assert (st.exists, st.version, st.position) == (True, 13, 112)
    assert (st.properties["canal.x"], st.properties["canal.y"]) == ("b", "c")
    assert jvm is not None and (jvm.version, jvm.txns) == (13, {"odd": 111, "even": 112})
    assert jvm == delta_log._read_local_log(f"{path}/_delta_log")
    assert delta_log._local_log_dir(spark, "s3a://bucket/lake/t") is None
