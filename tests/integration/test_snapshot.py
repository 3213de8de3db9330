"""pipelines.engine.snapshot: a consistent snapshot whose binlog position is known.

Two independent paths must agree: every MariaDB type read by SELECT in the snapshot, and the same rows
decoded from the binlog and staged (Canal entries' text -> staged types). Writes made after the snapshot
began are not in it, and a replay from its position yields exactly them.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from canal_core.parse.filter import EventFilter
from canal_core.parse.parser import ParserConfig, SourceConfig
from pipelines.engine.replay import ReplaySource, replay_entries
from pipelines.engine.snapshot import SnapshotError, take_snapshot
from pipelines.engine.staging import stage_window, window_path
from pipelines.engine.window import OP_INSERT
from tests.integration.binlog_end import master_status
from tests.integration.type_rows import COLUMNS, MAX_ROW, MIN_ROW, ZERO_ROW, insert_rows, random_row

pytestmark = pytest.mark.integration

TABLE = "snap_types"


def _rows(table: Any) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in table.to_pylist()}


def test_snapshot_equals_binlog_path_and_splits_at_its_position(mariadb_settings: Any, admin_conn: Any,
                                                                 tmp_path: Path) -> None:
    cur = admin_conn.cursor()
    cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES', time_zone = '+00:00'")
    cur.execute(f"DROP TABLE IF EXISTS canal_test.{TABLE}")
    cols_sql = ", ".join(f"{n} {t}" for n, t, _ in COLUMNS)
    cur.execute(f"CREATE TABLE canal_test.{TABLE} (id INT PRIMARY KEY, {cols_sql}) DEFAULT CHARSET=utf8mb4")
    start = master_status(mariadb_settings)
    r = random.Random(11)
    rows = [(1, MAX_ROW), (2, MIN_ROW), (3, {}), (4, ZERO_ROW)] + [(i, random_row(r)) for i in range(5, 31)]
    cur.execute("BEGIN")
    insert_rows(cur, TABLE, rows)
    cur.execute("COMMIT")

    later = [(i, random_row(r)) for i in range(31, 36)]

    def write_meanwhile(_pos: Any) -> None:
        # another session commits while the snapshot transaction is open
        def go() -> None:
            import pymysql

            c = pymysql.connect(**mariadb_settings.admin_kwargs())
            try:
                with c.cursor() as k:
                    k.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES', time_zone = '+00:00'")
                    k.execute("BEGIN")
                    insert_rows(k, TABLE, later)
                    k.execute(f"DELETE FROM canal_test.{TABLE} WHERE id = 5")
                    k.execute("COMMIT")
            finally:
                c.close()

        t = threading.Thread(target=go)
        t.start()
        t.join()

    snap = take_snapshot(mariadb_settings.repl_kwargs(), "canal_test", TABLE, tmp_path / "snap", part_rows=7,
                         on_position=write_meanwhile)
    got = _rows(pq.read_table(snap.path))
    assert sorted(got) == [i for i, _ in rows] and snap.rows == len(rows)
    assert len(list(snap.path.glob("*.parquet"))) == 5  # 30 rows in parts of 7
    assert [c.name for c in snap.columns] == ["id"] + [n for n, *_ in COLUMNS]
    assert snap.columns[0].is_key and not any(c.is_key for c in snap.columns[1:])
    assert snap.unrepresentable  # the zero and invalid dates of ZERO_ROW

    # the binlog path for the same rows: replay from before the insert to the snapshot position
    source = ReplaySource(ParserConfig("snap-test", SourceConfig(mariadb_settings.host, mariadb_settings.port,
                                                                  "canal", "canal")), EventFilter(), None)
    from pipelines.engine.window import Position

    entries = [e for chunk in replay_entries(source, start=Position(*start), end=snap.position,
                                             tables=[f"canal_test.{TABLE}"]) for e in chunk]
    m = stage_window(entries, root=tmp_path / "stg", destination="t", window=1, attempt=0, batch_ids=[])
    (tc,) = m.tables
    staged = pq.read_table(window_path(tmp_path / "stg", "t", 1, 0) / tc.parts[0].file)
    assert set(staged.column("_canal_op").to_pylist()) == {OP_INSERT}
    binlog_rows = {row["id"]: {k: v for k, v in row.items() if not k.startswith("_canal_")}
                   for row in staged.to_pylist()}
    assert sorted(binlog_rows) == sorted(got)
    diffs = [(i, k, got[i][k], binlog_rows[i][k]) for i in got for k in got[i] if got[i][k] != binlog_rows[i][k]]
    assert not diffs, diffs[:5]
    assert m.unrepresentable == snap.unrepresentable

    # what was committed during the snapshot comes after its position, and only that
    after = [e for chunk in replay_entries(source, start=snap.position, tables=[f"canal_test.{TABLE}"])
             for e in chunk]
    m2 = stage_window(after, root=tmp_path / "stg", destination="t", window=2, attempt=0, batch_ids=[])
    (tc2,) = m2.tables
    part = pq.read_table(window_path(tmp_path / "stg", "t", 2, 0) / tc2.parts[0].file)
    assert [(o, i) for o, i in zip(part.column("_canal_op").to_pylist(), part.column("id").to_pylist(),
                                   strict=True)] == [(OP_INSERT, i) for i, _ in later] + [("DELETE", 5)]
    assert min(part.column("_canal_pos").to_pylist()) > snap.position_key
    cur.execute(f"DROP TABLE canal_test.{TABLE}")


def test_snapshot_of_a_missing_table(mariadb_settings: Any, tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match=r"canal_test\.no_such_table"):
        take_snapshot(mariadb_settings.repl_kwargs(), "canal_test", "no_such_table", tmp_path)
