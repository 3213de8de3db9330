"""Mirrors of tables without a primary key (pipelines.engine.keyless through pipelines.engine.lake) against Delta:
staged windows written by hand with test_lake's writer (an UPDATE of such a table is staged as DELETE sub 0 + INSERT
sub 1), every expected table state written out by hand: the mirror holds each source row as a row of its own, the
copies of one row image numbered 1..n in _canal_dup."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pipelines.engine import lake as L
from pipelines.engine.remerge import remerge_mirror
from tests.support.staged_windows import D, I, Part, U, Win, k, stage, table_of

LOG = [("a", pa.int32(), False), ("note", pa.string(), False)]
NAME = "shop.log"


def copies(spark: Any, path: str, *cols: str) -> list[tuple[Any, ...]]:
    """The mirror's rows (``cols``, default the table's columns), sorted with NULLs first."""
    df = spark.read.format("delta").load(path)
    names = list(cols) or [c for c in df.columns if not c.startswith("_canal_")]
    return sorted((tuple(r) for r in df.select(*names).collect()),
                  key=lambda r: tuple((v is not None, v) for v in r))


def frame(df: Any, *cols: str) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in df.select(*cols).collect()), key=lambda r: tuple((v is not None, v) for v in r))


def test_keyless_mirror_holds_every_copy_and_replays_are_exact(spark: Any, tmp_path: Path) -> None:
    lake = L.Lake(str(tmp_path / "lake"))
    path = lake.mirror_path("shop", "log")
    first = [
        (I, 100, 0, 0, 1, "x"), (I, 100, 1, 0, 1, "x"), (I, 100, 2, 0, 2, None),   # (1,x) twice
        (I, 110, 0, 0, 1, "x"),                                                     # a third copy
        (D, 120, 0, 0, 1, "x"), (I, 120, 0, 1, 2, None),     # UPDATE of one copy into a copy of (2,NULL)
        (D, 130, 0, 0, 2, None),                             # DELETE ... LIMIT 1 of one of two copies
        (I, 140, 0, 0, 3, "z"), (D, 140, 1, 0, 3, "z"),      # in and out again
    ]
    w1 = stage(tmp_path / "s1", Win(1, 100, 140, {NAME: [Part(LOG, first)]}))
    r1 = L.apply_mirror(spark, lake, *w1, table_of(w1[1], NAME))
    assert (r1.inserted, r1.updated, r1.deleted, r1.applied_parts, r1.position) == (3, 0, 0, 1, k(140))
    # (a, note, copy, the change that added the copy): the latest inserts of an image carry its highest copies
    after_w1 = [(1, "x", 1, k(100), 1), (1, "x", 2, k(110), 0), (2, None, 1, k(120), 0)]
    assert copies(spark, path, "a", "note", "_canal_dup", "_canal_pos", "_canal_row") == after_w1
    schema = spark.read.format("delta").load(path).schema
    assert [(f.name, f.dataType.simpleString()) for f in schema.fields] == [
        ("a", "int"), ("note", "string"), ("_canal_pos", "bigint"), ("_canal_row", "int"), ("_canal_ts", "timestamp"),
        ("_canal_dup", "int")]

    again = L.apply_mirror(spark, lake, *w1, table_of(w1[1], NAME))   # the same window again
    assert (again.skipped_parts, again.applied_parts, again.position) == (1, 0, k(140))
    assert copies(spark, path, "a", "note", "_canal_dup", "_canal_pos", "_canal_row") == after_w1

    # a re-delivery: same start, later end, so its part straddles the watermark; only the changes above it count
    w2 = stage(tmp_path / "s2", Win(2, 100, 190, {NAME: [Part(LOG, [
        *first,
        (I, 150, 0, 0, 1, "x"),                              # (1,x) x3
        (D, 160, 0, 0, 1, "x"), (I, 160, 0, 1, 2, None),     # (1,x) x2, (2,NULL) x2
        (D, 170, 0, 0, 2, None), (D, 170, 1, 0, 1, "x"),     # one event deleting two rows: (1,x) x1, (2,NULL) x1
        (I, 180, 0, 0, 4, None), (I, 180, 1, 0, 4, None), (I, 180, 2, 0, 4, None),
        (D, 190, 0, 0, 4, None),                             # (4,NULL) x2
    ])]}))
    expected = [(1, "x", 1, k(100), 1), (2, None, 1, k(120), 0), (4, None, 1, k(180), 1), (4, None, 2, k(180), 2)]
    preview = L.preview_mirror(spark, lake, *w2, table_of(w2[1], NAME))
    assert frame(preview, "a", "note", "_canal_dup", "_canal_pos", "_canal_row") == expected
    assert L.mirror_version(spark, lake, "shop", "log") == k(140)   # the preview wrote nothing
    r2 = L.apply_mirror(spark, lake, *w2, table_of(w2[1], NAME))
    assert (r2.inserted, r2.updated, r2.deleted, r2.position) == (2, 0, 1, k(190))
    assert copies(spark, path, "a", "note", "_canal_dup", "_canal_pos", "_canal_row") == expected
    L.apply_mirror(spark, lake, *w1, table_of(w1[1], NAME))          # an older window after a newer one
    assert copies(spark, path, "a", "note", "_canal_dup", "_canal_pos", "_canal_row") == expected
    assert spark.conf.get("spark.databricks.delta.write.txnVersion", None) is None

    # a change removing a copy the mirror does not hold: a typed error, nothing written
    gone = [(D, 300, 0, 0, 9, "q"), (D, 300, 1, 0, 4, None), (D, 300, 2, 0, 4, None), (D, 300, 3, 0, 4, None)]
    w3 = stage(tmp_path / "s3", Win(3, 300, 300, {NAME: [Part(LOG, gone)]}))
    with pytest.raises(L.MirrorDivergedError, match=r"shop\.log: the changes at position 7:300 .*remove rows the "
                                                    r"mirror does not hold.*canal_snapshot run for shop\.log") as err:
        L.apply_mirror(spark, lake, *w3, table_of(w3[1], NAME))
    assert "{'a': 9, 'note': 'q'} held 0 times, 1 removed" in str(err.value)
    assert "{'a': 4, 'note': None} held 2 times, 3 removed" in str(err.value)
    assert L.mirror_version(spark, lake, "shop", "log") == k(190)
    assert copies(spark, path, "a", "note", "_canal_dup", "_canal_pos", "_canal_row") == expected

    # a backfill cannot re-derive the copies from the changes of a period: refused, saying what to do
    with pytest.raises(L.KeylessRemergeError, match=r"shop\.log has no primary key.*canal_snapshot run for shop\.log"):
        remerge_mirror(spark, lake, *w2, table_of(w2[1], NAME))


def test_keyless_schema_evolution_truncate_rename(spark: Any, tmp_path: Path) -> None:
    lake = L.Lake(str(tmp_path / "lake"))
    path, path2 = lake.mirror_path("shop", "log"), lake.mirror_path("shop", "log2")
    w1 = stage(tmp_path / "s", Win(1, 100, 100, {NAME: [Part(LOG, [
        (I, 100, 0, 0, 1, "x"), (I, 100, 1, 0, 1, "y"), (I, 100, 2, 0, 1, "y")])]}))
    L.apply_mirror(spark, lake, *w1, table_of(w1[1], NAME))

    wide = [("a", pa.int64(), False), ("note", pa.string(), False), ("tag", pa.string(), False)]
    narrow = [("a", pa.int64(), False), ("tag", pa.string(), False)]
    w2 = stage(tmp_path / "s", Win(2, 200, 230, {NAME: [
        # ADD COLUMN tag and a widened to BIGINT: the older rows have tag NULL (no source default known here)
        Part(wide, [(I, 200, 0, 0, 1, "y", None), (D, 210, 0, 0, 1, "x", None)]),
        # DROP COLUMN note: the three (1,y,NULL) rows become three copies of (1,NULL)
        Part(narrow, [(D, 220, 0, 0, 1, None), (I, 230, 0, 0, 5, "t")]),
    ]}))
    preview = L.preview_mirror(spark, lake, *w2, table_of(w2[1], NAME))
    assert frame(preview, "a", "tag", "_canal_dup") == [(1, None, 1), (1, None, 2), (5, "t", 1)]
    r2 = L.apply_mirror(spark, lake, *w2, table_of(w2[1], NAME))
    assert (r2.inserted, r2.deleted, r2.applied_parts, r2.position) == (2, 2, 2, k(230))
    schema = spark.read.format("delta").load(path).schema
    assert [(f.name, f.dataType.simpleString()) for f in schema.fields] == [
        ("a", "bigint"), ("tag", "string"), ("_canal_pos", "bigint"), ("_canal_row", "int"), ("_canal_ts", "timestamp"),
        ("_canal_dup", "int")]
    assert copies(spark, path, "a", "tag", "_canal_dup") == [(1, None, 1), (1, None, 2), (5, "t", 1)]

    # TRUNCATE, inserts, RENAME TABLE log TO log2, changes under the new name
    w3 = stage(tmp_path / "s", Win(3, 300, 335, {
        NAME: [Part(narrow, [(I, 310, 0, 0, 7, "k"), (I, 310, 1, 0, 7, "k")])],
        "shop.log2": [Part(narrow, [(I, 330, 0, 0, 7, "k"), (D, 335, 0, 0, 7, "k"), (I, 335, 0, 1, 8, "k")])]},
        ddl=[(300, "shop", "log", "TRUNCATE", "TRUNCATE TABLE log"),
             (320, "shop", "log2", "RENAME", "RENAME TABLE log TO log2")]))
    res = L.apply_mirrors(spark, lake, *w3)
    assert res[NAME].deleted == 3 and res["shop.log2"].position == k(335)
    assert copies(spark, path) == []
    props = dict(spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect())
    assert props[L.PROP_DROPPED] == str(k(320))
    # (7,k) gained one copy and lost one at 330..335: net nothing, its copies stay those copied at the rename
    assert copies(spark, path2, "a", "tag", "_canal_dup", "_canal_pos") == [(7, "k", 1, k(310)), (7, "k", 2, k(310)),
                                                                             (8, "k", 1, k(335))]
    # replaying every window brings nothing back and adds no copy
    for w in (w1, w2, w3):
        L.apply_mirrors(spark, lake, *w)
    assert copies(spark, path) == []
    assert copies(spark, path2, "a", "tag", "_canal_dup") == [(7, "k", 1), (7, "k", 2), (8, "k", 1)]


def test_keyless_snapshot_and_primary_key_changes(spark: Any, tmp_path: Path) -> None:
    lake = L.Lake(str(tmp_path / "lake"))
    path = lake.mirror_path("shop", "log")
    snap_pos = k(300)   # changes below 300 are in the snapshot
    snap = pa.table({"a": pa.array([1, 1, 2], pa.int32()), "note": ["x", "x", None]})
    L.write_snapshot(spark, lake, "shop", "log", snap, snap_pos, keyless=True)
    assert copies(spark, path, "a", "note", "_canal_dup", "_canal_pos") == [
        (1, "x", 1, snap_pos - 1), (1, "x", 2, snap_pos - 1), (2, None, 1, snap_pos - 1)]

    w1 = stage(tmp_path / "s", Win(1, 200, 330, {NAME: [Part(LOG, [
        (D, 250, 0, 0, 1, "x"),                  # before the snapshot: in it already
        (I, 310, 0, 0, 2, None),
        (D, 320, 0, 0, 1, "x"),
        (D, 330, 0, 0, 2, None),
    ])]}))
    L.apply_mirror(spark, lake, *w1, table_of(w1[1], NAME))
    assert copies(spark, path, "a", "note", "_canal_dup") == [(1, "x", 1), (2, None, 1)]

    # ALTER TABLE log ADD PRIMARY KEY (a): the copies are single (MySQL refused duplicates), _canal_dup goes
    keyed = [("a", pa.int32(), True), ("note", pa.string(), False)]
    w2 = stage(tmp_path / "s", Win(2, 400, 400, {NAME: [Part(keyed, [(U, 400, 0, 0, 2, "b")])]}))
    preview = L.preview_mirror(spark, lake, *w2, table_of(w2[1], NAME))
    assert frame(preview, "a", "note") == [(1, "x"), (2, "b")] and "_canal_dup" not in preview.columns
    L.apply_mirror(spark, lake, *w2, table_of(w2[1], NAME))
    assert "_canal_dup" not in spark.read.format("delta").load(path).columns
    assert copies(spark, path) == [(1, "x"), (2, "b")]

    # ... and DROP PRIMARY KEY: every row is one copy of its image
    w3 = stage(tmp_path / "s", Win(3, 500, 500, {NAME: [Part(LOG, [(I, 500, 0, 0, 1, "x")])]}))
    preview = L.preview_mirror(spark, lake, *w3, table_of(w3[1], NAME))
    assert frame(preview, "a", "note", "_canal_dup") == [(1, "x", 1), (1, "x", 2), (2, "b", 1)]
    L.apply_mirror(spark, lake, *w3, table_of(w3[1], NAME))
    assert copies(spark, path, "a", "note", "_canal_dup", "_canal_pos") == [
        (1, "x", 1, snap_pos - 1), (1, "x", 2, k(500)), (2, "b", 1, k(400))]
