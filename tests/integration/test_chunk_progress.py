"""Where a chunked load stands (pipelines.engine.lake.snapshot_chunks.chunked_progress), read from a real Delta
mirror: per key segment, the largest key written in it. BIGINT UNSIGNED keys beyond 2^63 (the mirror's
DECIMAL(20,0)) are compared exactly: a resume must not fail on them."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from pipelines.engine import lake as L
from pipelines.engine import types as T
from pipelines.engine.snapshot import _write_parts
from pipelines.engine.window import ColumnSpec

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_spark_session")]

BIG = 2**63


@pytest.mark.parametrize("mysql_type, base", [("bigint(20) unsigned", BIG), ("int(11)", -1000)])
def test_progress_per_segment(spark: Any, tmp_path: Path, mysql_type: str, base: int) -> None:
    cols = [ColumnSpec("id", mysql_type, True), ColumnSpec("v", "varchar(10)")]
    lake = L.Lake(str(tmp_path / "lake"))
    # segments (-inf, base + 5], (base + 5, base + 100]
    L.begin_chunked(spark, lake, "s", "t", T.arrow_schema(cols), "mysql-bin.000001:4", [base + 5, base + 100])
    for i, keys in enumerate(([base + 1, base + 3], [base + 6, base + 40])):
        parts = tmp_path / f"chunk{i}"
        parts.mkdir()
        _write_parts([(k, "x") for k in keys], cols, parts, 10, "s", "t")
        L.append_chunk(spark, lake, "s", "t", parts, 100 + i, dt.datetime.now(dt.UTC), f"test chunk {i}")
    got = L.chunked_progress(spark, lake, "s", "t", "id")
    assert got is not None
    assert (got.begin, got.bounds) == ("mysql-bin.000001:4", [base + 5, base + 100])
    assert {s: int(k) for s, k in got.done.items()} == {0: base + 3, 1: base + 40}
    L.finish_chunked(spark, lake, "s", "t", 4)
    assert L.chunked_progress(spark, lake, "s", "t", "id") is None
