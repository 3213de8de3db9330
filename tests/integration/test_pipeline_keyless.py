"""A table without a primary key through the whole pipeline: the canal sensor, its staged windows and the window
runs (tests/integration/pipeline_driver.py) against a real Dagster instance directory, the private MariaDB and
local Spark/Delta. docs/lake.md, "Tables without a primary key": the mirror equals the source as a multiset.

1. Rows with many exact duplicates exist before the pipeline starts (the initial snapshot numbers the copies);
   then a random workload of multi-row inserts that repeat existing rows, UPDATE ... LIMIT 1 of one of several
   identical rows, updates that turn a row into a copy of another, multi-row updates, DELETE ... LIMIT 1 of one
   copy, multi-row deletes, multi-statement transactions, rolled-back transactions and an ADD COLUMN with a
   default while the stream runs. The mirror read by Spark equals SELECT * of the source as a sorted row list.
2. A window applied twice: a run crashes right after its mirror commit, so the window is rolled back and
   delivered again, with more changes behind it (its part straddles the mirror's watermark); afterwards the
   mirror still equals the source. Every kept window applied once more changes nothing.
3. The blocking reconcile check, executed as the UI does, passes; a backfill of the period replaces the
   changelog and refuses, in its log, to re-merge the table; a mirror with the same row count but one copy
   of an image turned into another copy fails the check.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pymysql
import pytest

import pipelines.engine.lake as L
from pipelines.defs.assets.keys import BACKFILL_JOB, WINDOW_JOB, reconcile_check_key
from pipelines.engine.reconcile import table_columns
from pipelines.engine.sensor_state import SensorState
from pipelines.engine.staging import load_window
from tests.integration.pipeline_driver import Driver, make_config, mirror_multiset, source_multiset
from tests.support.schema import scratch_schema

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_spark_session")]

SCHEMA = "canal_keyless_it"
TABLE = "visits"
NAME = f"{SCHEMA}.{TABLE}"


@pytest.fixture
def db(mariadb_settings: Any) -> Iterator[pymysql.connections.Connection]:
    with scratch_schema(mariadb_settings, SCHEMA, f"{TABLE} (who INT NULL, page VARCHAR(16) NOT NULL, "
                        "amount DECIMAL(6,2) NULL, note TEXT NULL) DEFAULT CHARSET=utf8mb4",
                        init_command="SET time_zone = '+00:00'") as conn:
        yield conn


class Workload:
    """Random statements over few distinct values, so that most rows have identical copies. A row can only be
    named by its values: ``image`` is the WHERE clause matching every column (NULL-safe)."""

    def __init__(self, conn: pymysql.connections.Connection, seed: int) -> None:
        self.conn = conn
        self.r = random.Random(seed)
        self.columns = ["who", "page", "amount", "note"]
        self.done: dict[str, int] = {}  # statement kind -> rows it changed

    def _value(self, col: str) -> Any:
        r = self.r
        return {"who": lambda: r.choice([1, 2, 3, None]), "page": lambda: r.choice(["/a", "/b"]),
                "amount": lambda: r.choice([None, Decimal("1.00"), Decimal("2.50")]),
                "note": lambda: r.choice([None, "x"]), "tag": lambda: r.choice(["n", "y"])}[col]()

    def _row(self) -> tuple[Any, ...]:
        return tuple(self._value(c) for c in self.columns)

    def _image(self) -> str:
        return " AND ".join(f"`{c}` <=> %s" for c in self.columns)

    def _rows(self, cur: Any, duplicated: bool = False) -> list[tuple[Any, ...]]:
        having = "HAVING COUNT(*) > 1" if duplicated else ""
        cols = ", ".join(f"`{c}`" for c in self.columns)
        cur.execute(f"SELECT {cols} FROM {SCHEMA}.{TABLE} GROUP BY {cols} {having}")
        return list(cur.fetchall())

    def _run(self, cur: Any, kind: str, sql: str, args: Any) -> None:
        self.done[kind] = self.done.get(kind, 0) + cur.execute(sql, args)

    def statement(self, cur: Any) -> None:
        r, x = self.r, self.r.random()
        cols = ", ".join(f"`{c}`" for c in self.columns)
        marks = ", ".join(["%s"] * len(self.columns))
        rows = self._rows(cur)
        if x < 0.35 or not rows:
            new = [r.choice(rows) if rows and r.random() < 0.5 else self._row() for _ in range(r.randint(1, 4))]
            self._run(cur, "insert", f"INSERT INTO {SCHEMA}.{TABLE} ({cols}) VALUES "
                      + ", ".join([f"({marks})"] * len(new)), [v for row in new for v in row])
        elif x < 0.50:  # one of several identical rows changes
            dup = self._rows(cur, duplicated=True)
            if dup:
                col = r.choice(self.columns)
                self._run(cur, "update one copy", f"UPDATE {SCHEMA}.{TABLE} SET `{col}` = %s WHERE {self._image()} "
                          "LIMIT 1", (self._value(col), *r.choice(dup)))
        elif x < 0.62:  # a row becomes a copy of another one
            a, b = r.choice(rows), r.choice(rows)
            sets = ", ".join(f"`{c}` = %s" for c in self.columns)
            self._run(cur, "update into a copy", f"UPDATE {SCHEMA}.{TABLE} SET {sets} WHERE {self._image()} LIMIT 1",
                      (*b, *a))
        elif x < 0.70:  # several rows in one row event
            self._run(cur, "update many", f"UPDATE {SCHEMA}.{TABLE} SET note = %s WHERE who <=> %s",
                      (self._value("note"), self._value("who")))
        elif x < 0.88:
            dup = self._rows(cur, duplicated=True)
            self._run(cur, "delete one copy", f"DELETE FROM {SCHEMA}.{TABLE} WHERE {self._image()} LIMIT 1",
                      r.choice(dup or rows))
        else:
            self._run(cur, "delete many", f"DELETE FROM {SCHEMA}.{TABLE} WHERE who <=> %s AND page = %s",
                      (self._value("who"), self._value("page")))

    def tx(self, rollback: bool = False) -> None:
        with self.conn.cursor() as cur:
            cur.execute("BEGIN")
            for _ in range(self.r.randint(1, 4)):
                self.statement(cur)
            cur.execute("ROLLBACK" if rollback else "COMMIT")

    def add_column(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute(f"ALTER TABLE {SCHEMA}.{TABLE} ADD COLUMN tag VARCHAR(4) NOT NULL DEFAULT 'n'")
        self.columns.append("tag")


def _columns(settings: Any) -> list[Any]:
    return table_columns(settings.repl_kwargs(), SCHEMA, TABLE)


def _differs(spark: Any, lake: L.Lake, settings: Any) -> str:
    """'' when the mirror equals the source as a multiset, else why not."""
    cols = _columns(settings)
    try:
        got = mirror_multiset(spark, lake.mirror_path(SCHEMA, TABLE), cols)
    except Exception as e:  # no mirror yet, or a column it has not seen yet
        return f"{type(e).__name__}: {str(e)[:200]}"
    want = source_multiset(settings, SCHEMA, TABLE, cols)
    if got != want:
        extra = [r for r in got if r not in want or got.count(r) > want.count(r)]
        lack = [r for r in want if r not in got or want.count(r) > got.count(r)]
        return f"mirror {len(got)} rows, source {len(want)}; e.g. extra {extra[:2]}, missing {lack[:2]}"
    return ""


def _converge(driver: Driver, spark: Any, lake: L.Lake, settings: Any, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    why = ""
    while time.monotonic() < deadline:
        for _ in range(3):
            driver.tick()
        state = SensorState.from_cursor(driver.cursor)
        assert not state.stopped and not state.snapshot.stopped, driver.cursor
        if state.inflight is None and not (why := _differs(spark, lake, settings)):
            return
        time.sleep(0.5)
    pytest.fail(f"the mirror did not converge in {timeout:.0f} s: {why}; cursor {driver.cursor}")


def _check(driver: Driver) -> Any:
    """The reconcile check of the table, executed on its own as the UI's "Execute" does (a non-blocking check: the
    run succeeds whether the check passes or fails)."""
    job = driver.defs.resolve_job_def(WINDOW_JOB).get_subset(
        asset_selection=set(), asset_check_selection={reconcile_check_key(NAME)})
    result = job.execute_in_process(instance=driver.instance, raise_on_error=False)
    (evaluation,) = result.get_asset_check_evaluations()
    assert result.success
    return evaluation


@pytest.mark.timeout(2400)
def test_keyless_table_mirrors_the_source_as_a_multiset(mariadb_settings: Any, db: Any, tmp_path: Path,
                                                         spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    w = Workload(db, seed=20261126)
    for _ in range(12):  # before the pipeline: the snapshot loads these, copies and all
        w.tx()
    with db.cursor() as cur:
        assert w._rows(cur, duplicated=True), "no identical rows before the snapshot"
    cfg = make_config(tmp_path, mariadb_settings, "keyless", f"{SCHEMA}\\\\..*")
    driver = Driver(cfg, tmp_path / "home", keep_windows=tmp_path / "kept")
    lake = L.Lake(cfg.lake_root)
    driver.tick()  # starts the Canal instance at the binlog end, snapshots the table
    assert any(rr.tags.get("canal/kind") == "snapshot" for rr, _ in driver.runs)
    assert all(ok for _, ok in driver.runs)
    start = dt.datetime.fromtimestamp(int(time.time()) - 1, dt.UTC)

    for i in range(60):
        w.tx(rollback=i % 17 == 5)  # now and then a transaction rolled back: nothing of it in the binlog
        if i == 30:
            w.add_column()  # existing rows get the default 'n' without row events; the mirror fills it in
        if i % 10 == 9:
            driver.tick()
    _converge(driver, spark, lake, mariadb_settings)
    assert set(w.done) == {"insert", "update one copy", "update into a copy", "update many", "delete one copy",
                           "delete many"}, w.done
    assert all(n > 0 for n in w.done.values()), w.done
    with db.cursor() as cur:
        assert len(w._rows(cur, duplicated=True)) >= 3, "the workload left too few identical rows"
    path = lake.mirror_path(SCHEMA, TABLE)
    assert "_canal_dup" in spark.read.format("delta").load(path).columns

    # a run that crashes right after its mirror commit: the window is rolled back and delivered again
    real, crashed = L.apply_mirror, []

    def crash_after_commit(*args: Any, **kwargs: Any) -> L.MirrorResult:
        res = real(*args, **kwargs)
        if not crashed and args[4].name == NAME and res.applied_parts:
            crashed.append(res.position)
            raise RuntimeError("the run process died after the mirror commit")
        return res

    monkeypatch.setattr(L, "apply_mirror", crash_after_commit)
    deadline = time.monotonic() + 300
    while not crashed:
        assert time.monotonic() < deadline, "no window run applied changes of the table"
        w.tx()
        time.sleep(1)
        driver.tick()
    for _ in range(8):  # more changes behind the failed window: its retry ends later than the mirror's watermark
        w.tx()
    monkeypatch.setattr(L, "apply_mirror", real)
    _converge(driver, spark, lake, mariadb_settings)
    assert [ok for _, ok in driver.runs].count(False) == 1
    kept = [load_window(p) for p in driver.staged_copies if (p / "manifest.json").is_file()]
    straddling = [m for m in kept for t in m.tables if t.name == NAME
                  for part in t.parts if part.min_pos <= crashed[0] < part.max_pos]
    assert straddling, f"no re-delivered window straddled the watermark {crashed[0]}"

    # every kept window applied once more: nothing changes, not even the Delta version
    version = L.table_state(spark, path, L.mirror_app_id(SCHEMA, TABLE)).version
    before = mirror_multiset(spark, path, _columns(mariadb_settings))
    for p in driver.staged_copies:
        if (p / "manifest.json").is_file():
            L.apply_mirrors(spark, lake, p, load_window(p))
    assert mirror_multiset(spark, path, _columns(mariadb_settings)) == before
    assert L.table_state(spark, path, L.mirror_app_id(SCHEMA, TABLE)).version == version

    evaluation = _check(driver)
    assert evaluation.passed, evaluation.description
    assert evaluation.metadata["source_rows"].value == evaluation.metadata["mirror_rows"].value == len(before)

    # a backfill of the period: the changelog is replaced, the mirror is not re-merged and the run says so
    job = driver.defs.resolve_job_def(BACKFILL_JOB)
    result = job.execute_in_process(
        run_config={"ops": {"backfill_period": {"config": {"start_time": start.isoformat(), "end_time": "",
                                                           "tables": [NAME]}}}},
        instance=driver.instance, raise_on_error=False)
    assert result.success
    warnings = [e.user_message for e in driver.instance.all_logs(result.run_id) if e.level == logging.WARNING]
    assert any(f"{NAME} has no primary key: a backfill cannot re-merge its mirror" in m for m in warnings), warnings
    assert mirror_multiset(spark, path, _columns(mariadb_settings)) == before

    # the check compares multiplicities, not only counts: one copy of an image turned into a copy of another
    with db.cursor() as cur:
        (a, *_), b = w._rows(cur, duplicated=True), w._rows(cur)[0]
    assert a != b
    cols = w.columns
    sets = ", ".join(f"`{c}` = {_sql(v)}" for c, v in zip(cols, b, strict=True))
    match = " AND ".join(f"`{c}` <=> {_sql(v)}" for c, v in zip(cols, a, strict=True))
    spark.sql(f"UPDATE delta.`{path}` SET {sets}, _canal_dup = 1000 WHERE {match} AND _canal_dup = 1")
    assert len(mirror_multiset(spark, path, _columns(mariadb_settings))) == len(before)
    evaluation = _check(driver)
    assert not evaluation.passed
    assert f"same row count {len(before)} but the rows differ" in evaluation.description


def _sql(v: Any) -> str:
    """A Spark SQL literal of a source value of the workload."""
    if v is None:
        return "NULL"
    if isinstance(v, Decimal):
        return f"{v}BD"
    if isinstance(v, int):
        return str(v)
    return "'" + str(v).replace("'", "\\'") + "'"
