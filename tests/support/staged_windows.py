"""Staged windows for the lake tests, written with pyarrow per pipelines.engine.window's contract (the writer is
the tests' own: nothing here comes from the staging code under test), and the lake scenarios that run on both a
classic and a Spark Connect session."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.engine import lake as L
from pipelines.engine import window as W
from pipelines.engine.lake import delta_sql
from pipelines.engine.remerge import REMERGE_NOTE, commits_after, remerge_mirror

BINLOG = "mysql-bin.000007"
T0 = dt.datetime(2024, 5, 1, 23, 59, 0, tzinfo=dt.UTC)   # offsets >= 60 fall on the next day (two partitions)
I, U, D = W.OP_INSERT, W.OP_UPDATE, W.OP_DELETE  # noqa: E741


def k(offset: int) -> int:
    return W.order_key(BINLOG, offset)


@dataclass
class Part:
    """One staged part: columns (name, Arrow type, is_key) and rows (op, offset, row, sub, *values)."""

    columns: list[tuple[str, pa.DataType, bool]]
    rows: list[tuple[Any, ...]]


@dataclass
class Win:
    window: int
    start: int                 # offsets in BINLOG
    end: int
    tables: dict[str, list[Part]] = field(default_factory=dict)
    ddl: list[tuple[int, str, str, str, str]] = field(default_factory=list)   # offset, schema, table, kind, sql
    destination: str = "d1"


def _text(v: Any) -> str | None:
    return None if v is None else str(v)


def stage(root: Path, w: Win) -> tuple[Path, W.WindowManifest]:
    d = root / f"w{w.window:012d}-a0"
    (d / "tables").mkdir(parents=True)
    tables: list[W.TableChanges] = []
    log: list[dict[str, Any]] = []
    for name, parts in w.tables.items():
        schema, table = name.split(".")
        (d / "tables" / name).mkdir()
        tc = W.TableChanges(schema, table, [])
        for i, p in enumerate(parts):
            meta = [("_canal_op", pa.string()), ("_canal_pos", pa.int64()), ("_canal_row", pa.int32()),
                    ("_canal_sub", pa.int8()), ("_canal_ts", pa.timestamp("us", tz="UTC"))]
            fields = meta + [(c, t) for c, t, _ in p.columns]
            cols: list[list[Any]] = [[] for _ in fields]
            for op, off, row, sub, *vals in p.rows:
                for j, v in enumerate([op, k(off), row, sub, T0 + dt.timedelta(seconds=off), *vals]):
                    cols[j].append(v)
            rel = f"tables/{name}/{i:03d}.parquet"
            pq.write_table(pa.table({n: pa.array(c, t) for (n, t), c in zip(fields, cols, strict=True)}), d / rel)
            poss = [k(r[1]) for r in p.rows]
            tc.parts.append(W.TablePart(rel, len(p.rows), min(poss), max(poss),
                                        [W.ColumnSpec(c, "x", key) for c, _, key in p.columns]))
            keys = [c for c, _, key in p.columns if key]
            names = [c for c, _, _ in p.columns]
            by_event: dict[tuple[int, int], list[tuple[Any, ...]]] = {}
            for r in p.rows:
                by_event.setdefault((r[1], r[2]), []).append(r)
            for (off, row), rs in by_event.items():
                images = [dict(zip(names, map(_text, r[4:]), strict=True)) for r in rs]
                op = rs[0][0]
                before, after = None, None
                if len(rs) == 2:            # a primary-key change: DELETE old (sub 0) + INSERT new (sub 1)
                    op, before, after = U, images[0], images[1]
                elif op == D:
                    before = images[0]
                elif op == U:
                    before, after = images[0], images[0]
                else:
                    after = images[0]
                ts = T0 + dt.timedelta(seconds=off)
                log.append({"destination": w.destination, "schema_name": schema, "table_name": table, "op": op,
                            "binlog_file": BINLOG, "binlog_offset": off, "pos": k(off), "row": row, "gtid": "",
                            "server_id": 1, "execute_time": ts, "event_date": ts.date(), "window": w.window,
                            "keys": keys, "updated": [], "before": before and list(before.items()),
                            "after": after and list(after.items())})
        tables.append(tc)
    changelog = None
    if log:
        changelog = "changelog.parquet"
        pq.write_table(pa.Table.from_pylist(log, schema=W.changelog_schema()), d / changelog)
    m = W.WindowManifest(w.destination, w.window, 0, [w.window], W.Position(BINLOG, w.start),
                         W.Position(BINLOG, w.end), rows=len(log), changelog=changelog, tables=tables,
                         ddl=[W.DdlRecord(k(off), s, t, kind, sql) for off, s, t, kind, sql in w.ddl])
    (d / "manifest.json").write_text(m.to_json())
    return d, m


def rows(spark: Any, path: str, *cols: str) -> list[tuple[Any, ...]]:
    df = spark.read.format("delta").load(path)
    names = list(cols) or [c for c in df.columns if not c.startswith("_canal_")]
    return sorted(tuple(r) for r in df.select(*names).collect())


def table_of(m: W.WindowManifest, name: str) -> W.TableChanges:
    return next(t for t in m.tables if t.name == name)


ITEMS = [("id", pa.int32(), True), ("name", pa.string(), False), ("price", pa.decimal128(10, 2), False)]


def p(x: str) -> Decimal:
    return Decimal(x)


def changelog_windows(tmp_path: Path) -> tuple[Any, Any, Any]:
    """Windows 1 (3 inserts at 10..40), 2 (a delete and an insert at 50..70) and 2b: after a restart the server
    re-delivers from its acked cursor (50) with other batch boundaries, to 90 (one change more)."""
    cols = [("id", pa.int32(), True)]
    w1 = stage(tmp_path / "s1", Win(1, 10, 40, {"shop.a": [Part(cols, [(I, 10, 0, 0, 1), (I, 10, 1, 0, 2),
                                                                              (I, 40, 0, 0, 3)])]}))
    w2 = stage(tmp_path / "s2", Win(2, 50, 70, {"shop.a": [Part(cols, [(D, 50, 0, 0, 1), (I, 70, 0, 0, 4)])]}))
    w2b = stage(tmp_path / "s3", Win(3, 50, 90, {"shop.a": [Part(cols, [(D, 50, 0, 0, 1), (I, 70, 0, 0, 4),
                                                                           (I, 90, 0, 0, 5)])]}))
    return w1, w2, w2b



def remerge_beside_a_window(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A re-merge planned before a window's commits and merged after them (the window deletes key 1 and updates
    key 4) writes none of its stale plan: key 1 stays deleted, key 4 keeps the window's row; the damage it
    was run for (key 2 lost, key 3 corrupted) is repaired. Shared by the classic and the Spark Connect tests."""
    lake = L.Lake(str(tmp_path / "lake"))
    name = "shop.items"
    w1 = stage(tmp_path / "s", Win(1, 100, 150, {name: [Part(ITEMS, [
        (I, 100, 0, 0, 1, "ann", p("1.00")), (I, 100, 1, 0, 2, "bob", p("2.00")), (I, 100, 2, 0, 3, "cyd", p("3.00")),
        (I, 100, 3, 0, 4, "dan", p("4.00")), (U, 150, 0, 0, 4, "da2", p("4.40"))])]}))
    w2 = stage(tmp_path / "s", Win(2, 200, 210, {name: [Part(ITEMS, [
        (D, 200, 0, 0, 1, "ann", p("1.00")), (U, 210, 0, 0, 4, "da3", p("4.50"))])]}))
    path = lake.mirror_path("shop", "items")
    L.apply_changelog(spark, lake, *w1)
    L.apply_mirror(spark, lake, *w1, table_of(w1[1], name))
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 2")
    spark.sql(f"UPDATE delta.`{path}` SET name = 'bad' WHERE id = 3")

    real_txn = delta_sql._txn
    between: list[Any] = []   # what runs once between the re-merge's plan and its first MERGE

    def txn(session: Any, app: str | None, version: int | None, note: str) -> Any:
        if note.startswith(REMERGE_NOTE) and between:
            between.pop()()
        return real_txn(session, app, version, note)

    def window_2() -> None:
        L.apply_changelog(spark, lake, *w2)
        L.apply_mirror(spark, lake, *w2, table_of(w2[1], name))

    monkeypatch.setattr(delta_sql, "_txn", txn)
    between.append(window_2)
    r = remerge_mirror(spark, lake, *w1, table_of(w1[1], name))
    assert not between
    assert rows(spark, path, "id", "name", "price", "_canal_pos") == [
        (2, "bob", p("2.00"), k(100)), (3, "cyd", p("3.00"), k(100)), (4, "da3", p("4.50"), k(210))]
    assert L.mirror_version(spark, lake, "shop", "items") == k(210)
    assert r.replans == 1   # the first plan was stale: planned again
    # a commit that changes no row (OPTIMIZE) between the plan and the MERGE leaves the plan good
    spark.sql(f"UPDATE delta.`{path}` SET name = 'bad' WHERE id = 3")
    damaged = L.table_state(spark, path, "").version
    between.append(lambda: spark.sql(f"OPTIMIZE delta.`{path}`").collect())
    r = remerge_mirror(spark, lake, *w1, table_of(w1[1], name))
    assert not between and (r.updated, r.replans) == (1, 0)
    assert [c.operation for c in commits_after(spark, path, damaged)] == ["OPTIMIZE", "MERGE"]
    assert rows(spark, path, "id", "name") == [(2, "bob"), (3, "cyd"), (4, "da3")]
