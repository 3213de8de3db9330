"""Which tables load in chunks (pipelines.engine.chunked_snapshot.chunk_key): one integer primary-key column only."""

from __future__ import annotations

from pipelines.engine.chunked_snapshot import chunk_key, plan_bounds, segments_of
from pipelines.engine.window import ColumnSpec as C


def test_chunk_key() -> None:
    assert chunk_key([C("id", "bigint(20) unsigned", True), C("v", "varchar(10)")]) == C("id", "bigint(20) unsigned",
                                                                                         True)
    assert chunk_key([C("v", "varchar(10)"), C("n", "int(11)", True)]) == C("n", "int(11)", True)
    for t in ("tinyint(4)", "smallint(6)", "mediumint(9)", "int", "bigint(20)"):
        assert chunk_key([C("id", t, True)]) is not None, t
    # a string, decimal or date key orders differently in MariaDB (collations) and in the mirror: not chunked
    for t in ("varchar(32)", "decimal(10,0)", "date", "binary(16)", "interval"):
        assert chunk_key([C("id", t, True)]) is None, t
    assert chunk_key([C("a", "int(11)", True), C("b", "int(11)", True)]) is None   # a composite key
    assert chunk_key([C("a", "int(11)"), C("b", "int(11)")]) is None                # no key


def test_plan_bounds_cut_the_key_range_into_segments_of_equal_width() -> None:
    # keys 1..6000 in 8 segments of 750 keys: (-inf, 750], (750, 1500], ..., (5250, 6000]
    assert plan_bounds(1, 6000, 8) == [750, 1500, 2250, 3000, 3750, 4500, 5250, 6000]
    assert plan_bounds(1, 10, 3) == [3, 6, 10]
    assert plan_bounds(-5, 4, 2) == [-1, 4]                 # negative keys: (-inf, -1], (-1, 4]
    assert plan_bounds(1, 3, 8) == [1, 2, 3]                # fewer keys than segments: one key each
    assert plan_bounds(42, 42, 4) == [42]
    assert plan_bounds(0, 2**64 - 1, 2) == [2**63 - 1, 2**64 - 1]   # BIGINT UNSIGNED: exact, no float
    assert [(s.after, s.upto) for s in segments_of([3, 6, 10])] == [(None, 3), (3, 6), (6, 10)]
    assert [(s.after, s.upto) for s in segments_of([None])] == [(None, None)]   # a load begun without a plan
