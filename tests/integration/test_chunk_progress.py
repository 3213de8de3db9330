"""Where a chunked load stands (pipelines.engine.lake.snapshot_chunks.chunked_progress), read from a real Delta
mirror: per key segment, the largest key written in it. BIGINT UNSIGNED keys beyond 2^63 (the mirror's
DECIMAL(20,0)) are compared exactly: a resume must not fail on them. And a load whose table changed its columns
while it was unfinished starts again instead of appending chunks of another shape."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from pipelines.engine import chunked_snapshot as C
from pipelines.engine import lake as L
from pipelines.engine import types as T
from pipelines.engine.reconcile import table_columns
from pipelines.engine.snapshot import _write_parts
from pipelines.engine.window import ColumnSpec
from tests.integration.pipeline_driver import mirror_rows, source_rows
from tests.support.schema import scratch_schema

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_spark_session")]

BIG = 2**63


@pytest.mark.parametrize("mysql_type, base", [("bigint(20) unsigned", BIG), ("int(11)", -1000)])
def test_progress_per_segment(spark: Any, tmp_path: Path, mysql_type: str, base: int) -> None:
    cols = [ColumnSpec("id", mysql_type, True), ColumnSpec("v", "varchar(10)")]
    lake = L.Lake(str(tmp_path / "lake"))
    # segments (-inf, base + 5], (base + 5, base + 100]
    L.begin_chunked(spark, lake, "s", "t", T.arrow_schema(cols), "mysql-bin.000001:4", [base + 5, base + 100],
                    C.columns_digest(cols))
    for i, keys in enumerate(([base + 1, base + 3], [base + 6, base + 40])):
        parts = tmp_path / f"chunk{i}"
        parts.mkdir()
        _write_parts([(k, "x") for k in keys], cols, parts, 10, "s", "t")
        L.append_chunk(spark, lake, "s", "t", parts, 100 + i, dt.datetime.now(dt.UTC), f"test chunk {i}")
    got = L.chunked_progress(spark, lake, "s", "t", "id")
    assert got is not None
    assert (got.begin, got.bounds, got.columns) == ("mysql-bin.000001:4", [base + 5, base + 100],
                                                    C.columns_digest(cols))
    assert {s: int(k) for s, k in got.done.items()} == {0: base + 3, 1: base + 40}
    L.finish_chunked(spark, lake, "s", "t", 4)
    assert L.chunked_progress(spark, lake, "s", "t", "id") is None


def _fill(admin: Any, schema: str, rows: int) -> None:
    with admin.cursor() as cur:
        cur.execute(f"INSERT INTO {schema}.t SELECT seq, seq % 5, CONCAT('b', seq) FROM {schema}.seq_1_to_{rows}")


def _mirror_equals_source(spark: Any, settings: Any, lake: L.Lake, schema: str) -> dict[Any, Any]:
    cols = table_columns(settings.repl_kwargs(), schema, "t")
    got = mirror_rows(spark, lake.mirror_path(schema, "t"), cols)
    assert got == source_rows(settings, schema, "t", cols)
    return got


def test_a_table_changed_during_its_load_is_loaded_again(mariadb_settings: Any, spark: Any, tmp_path: Path) -> None:
    schema = "canal_chunk_ddl"
    lake, kw = L.Lake(str(tmp_path / "lake")), mariadb_settings.repl_kwargs()
    commits: list[int] = []

    def die_after_two(c: C.ChunkRead) -> None:
        commits.append(c.rows)
        if len(commits) == 2:
            raise RuntimeError("the load dies here (test)")

    with scratch_schema(mariadb_settings, schema, "t (id BIGINT PRIMARY KEY, a INT, b VARCHAR(20))") as admin:
        _fill(admin, schema, 3000)
        with pytest.raises(RuntimeError, match="dies here"):
            C.load_in_chunks(spark, lake, kw, schema, "t", tmp_path / "w", chunk_rows=500, readers=1,
                             on_chunk=die_after_two)
        assert commits == [500, 500]
        with admin.cursor() as cur:   # while the load is unfinished: a column renamed, another dropped
            cur.execute(f"ALTER TABLE {schema}.t CHANGE b c VARCHAR(20), DROP COLUMN a")
        r = C.load_in_chunks(spark, lake, kw, schema, "t", tmp_path / "w", chunk_rows=500, readers=1)
        assert (r.restarted, r.resumed, r.rows) == (True, False, 3000)
        assert len(_mirror_equals_source(spark, mariadb_settings, lake, schema)) == 3000
        names = set(spark.read.format("delta").load(lake.mirror_path(schema, "t")).columns)
        assert {"id", "c"} <= names and not {"a", "b"} & names, names


def test_a_ddl_during_a_load_stops_it_before_rows_of_another_shape(mariadb_settings: Any, spark: Any,
                                                                    tmp_path: Path) -> None:
    schema = "canal_chunk_ddl2"
    lake, kw = L.Lake(str(tmp_path / "lake")), mariadb_settings.repl_kwargs()
    with scratch_schema(mariadb_settings, schema, "t (id BIGINT PRIMARY KEY, a INT, b VARCHAR(20))") as admin:
        _fill(admin, schema, 3000)
        altered: list[int] = []

        def alter_after_the_first(c: C.ChunkRead) -> None:   # a's values become text that is no integer
            if not altered:
                altered.append(c.index)
                with admin.cursor() as cur:
                    cur.execute(f"ALTER TABLE {schema}.t MODIFY a VARCHAR(20)")
                    cur.execute(f"UPDATE {schema}.t SET a = CONCAT('x', id)")

        with pytest.raises(C.SnapshotError, match="columns changed during its chunked load"):
            C.load_in_chunks(spark, lake, kw, schema, "t", tmp_path / "w", chunk_rows=500, readers=1,
                             on_chunk=alter_after_the_first)
        r = C.load_in_chunks(spark, lake, kw, schema, "t", tmp_path / "w", chunk_rows=500, readers=1)
        assert (r.restarted, r.rows, r.unrepresentable) == (True, 3000, {})
        assert _mirror_equals_source(spark, mariadb_settings, lake, schema)[(7,)]["a"] == "x7"


def test_wide_rows_end_chunks_at_the_byte_bound(mariadb_settings: Any, spark: Any, tmp_path: Path) -> None:
    """300 rows of 50 KB (15 MB), chunks of up to 1,000 rows but 1 MB: no chunk holds much more than 1 MB."""
    schema, bound = "canal_chunk_wide", 1024 * 1024
    lake, kw = L.Lake(str(tmp_path / "lake")), mariadb_settings.repl_kwargs()
    chunks: list[C.ChunkRead] = []
    with scratch_schema(mariadb_settings, schema, "t (id BIGINT PRIMARY KEY, body LONGBLOB)") as admin:
        with admin.cursor() as cur:
            cur.execute(f"INSERT INTO {schema}.t SELECT seq, REPEAT(CHAR(65 + seq % 26), 50000) "
                        f"FROM {schema}.seq_1_to_300")
        r = C.load_in_chunks(spark, lake, kw, schema, "t", tmp_path / "w", chunk_rows=1000, readers=1,
                             chunk_bytes=bound, on_chunk=chunks.append)
        assert r.rows == 300 and len(chunks) >= 15, (r.rows, len(chunks))
        assert max(c.bytes for c in chunks) <= bound + 50_100, [c.bytes for c in chunks]   # at most one row past it
        assert len(_mirror_equals_source(spark, mariadb_settings, lake, schema)) == 300
