"""A backfill beside the live pipeline never regresses a mirror (private MariaDB, local Spark/Delta, a real Dagster
instance; the canal sensor and its window runs driven in this process by tests/integration/pipeline_driver.py).

A period of inserts and updates is applied by the live pipeline, then in each round later UPDATEs and DELETEs of
keys the period changed (and a re-insert of a key an earlier round deleted) reach the binlog while the period is
backfilled (replayed, its changelog replaced, both mirrors re-merged). The live window that applies them lands at
a chosen point of the backfill, forced with hooks (and a thread with events where the window run must stop half
way):

1. the window between the accounts re-merge's plan and its MERGE (entries planned after the window);
2. both re-merges between the window's accounts and entries mirror commits;
3. two windows: one between the accounts plan and MERGE, the next between the entries plan and MERGE;
4. the backfill in a thread while this thread keeps changing the source and running windows.

Rounds 2 and 3 always run; rounds 1 and 4 with --long (scripts/test.sh --long): round 3 forces what round 1 does
and more, and round 4's order is left to chance.
After each round both mirrors equal their source tables row for row (the mirror damage made before the first round
repaired), and at the end no commit in either mirror's Delta history moved a key's ``_canal_pos`` backwards
(every version read with time travel, consecutive versions compared per key). A second test shows that the
destination's Dagster pool keeps the lake-writing steps of a backfill run and a window run apart.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
import pytest
from dagster import DagsterEventType, build_op_context

from pipelines.defs.assets.backfill import run_backfill
from pipelines.defs.pools import writer_pool
from pipelines.defs.resources import SparkResource, resources_for
from pipelines.engine import lake as L
from pipelines.engine.lake import delta_sql
from pipelines.engine.reconcile import table_columns
from pipelines.engine.remerge import REMERGE_NOTE
from tests.integration.pipeline_driver import Driver, drive_until_idle, make_config, mirror_rows, source_rows

pytestmark = pytest.mark.integration

SCHEMA = "canal_bflive"
DEST = "bflive"
ACCOUNTS, ENTRIES = f"{SCHEMA}.accounts", f"{SCHEMA}.entries"
TABLES = [ACCOUNTS, ENTRIES]
KEYS = 40          # keys 1..40 are inserted in the period; each round changes five of them later
RUN = 600.0        # seconds any one step may take on a busy machine


@dataclass
class Live:
    driver: Driver
    lake: L.Lake
    settings: Any
    conn: pymysql.connections.Connection
    start: dt.datetime     # the period [start, end) the backfills replay
    end: dt.datetime
    spark: Any


def _tx(conn: pymysql.connections.Connection, *statements: str) -> None:
    """One transaction (a window never splits it): each statement changes exactly one row."""
    with conn.cursor() as cur:
        cur.execute("BEGIN")
        for sql in statements:
            assert cur.execute(sql) == 1, sql
        cur.execute("COMMIT")


def _whole_second() -> dt.datetime:
    time.sleep(1.2)   # binlog times have one-second resolution: a period starts on a whole second
    return dt.datetime.fromtimestamp(int(time.time()), dt.UTC)


@pytest.fixture(scope="module")
def live(mariadb_settings: Any, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with pytest.MonkeyPatch.context() as mp:
        # the runs share this process's Spark session instead of stopping it after each run
        mp.setattr(SparkResource, "teardown_after_execution", lambda self, context: None)
        conn = pymysql.connect(**mariadb_settings.admin_kwargs())
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
            cur.execute(f"CREATE DATABASE {SCHEMA}")
            cur.execute(f"CREATE TABLE {ACCOUNTS} (id INT PRIMARY KEY, owner VARCHAR(32) NOT NULL, "
                        "balance DECIMAL(12,2) NOT NULL, note VARCHAR(64) NULL)")
            cur.execute(f"CREATE TABLE {ENTRIES} (id INT PRIMARY KEY, account INT NOT NULL, "
                        "amount DECIMAL(12,2) NOT NULL, memo VARCHAR(64) NULL)")
        root = tmp_path_factory.mktemp("bflive")
        driver = Driver(make_config(root, mariadb_settings, DEST, f"{SCHEMA}\\\\..*"), root / "home")
        driver.tick()   # the live instance starts at the binlog end; both (empty) tables are snapshotted
        drive_until_idle(driver, timeout=RUN)
        start = _whole_second()
        for i in range(1, KEYS + 1):
            _tx(conn, f"INSERT INTO {ACCOUNTS} VALUES ({i}, 'owner{i}', {i}.10, NULL)",
                f"INSERT INTO {ENTRIES} VALUES ({i}, {i}, {i * 3}.30, 'memo {i}')")
        for i in range(1, KEYS + 1, 2):
            _tx(conn, f"UPDATE {ACCOUNTS} SET balance = balance + 100 WHERE id = {i}",
                f"UPDATE {ENTRIES} SET memo = 'period {i}' WHERE id = {i}")
        end = _whole_second()
        drive_until_idle(driver, timeout=RUN, settle=1)
        state = Live(driver, L.Lake(driver.config.lake_root), mariadb_settings, conn, start, end, spark)
        _assert_mirrors_equal_sources(state)
        yield state
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
        conn.close()


def _assert_mirrors_equal_sources(live: Live, when: str = "") -> None:
    for name in TABLES:
        schema, table = name.split(".")
        cols = table_columns(live.settings.repl_kwargs(), schema, table)
        got = mirror_rows(live.spark, live.lake.mirror_path(schema, table), cols)
        want = source_rows(live.settings, schema, table, cols)
        bad = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
        assert not bad, (f"{when}: {name}: {len(bad)} rows differ, e.g. key {bad[0]}: mirror {got.get(bad[0])} "
                         f"source {want.get(bad[0])}")


def _later(r: int, *, updates: bool = True, deletes: bool = True) -> list[str]:
    """Round r's later changes of keys the period changed (keys 5r+1..5r+5 of both tables): three updates, two
    deletes, and the re-insert of a key round r-1 deleted."""
    base = 5 * r + 1
    out: list[str] = []
    for t, col in ((ACCOUNTS, "note"), (ENTRIES, "memo")):
        if updates:
            out += [f"UPDATE {t} SET {col} = 'round {r}' WHERE id = {i}" for i in range(base, base + 3)]
        if deletes:
            out += [f"DELETE FROM {t} WHERE id = {i}" for i in (base + 3, base + 4)]
            if r > 0:
                out.append(f"INSERT INTO {t} VALUES ({base - 1}, {base - 1}, 0.{r}, 'back in round {r}')"
                           if t == ENTRIES else
                           f"INSERT INTO {t} VALUES ({base - 1}, 'back{r}', 0.{r}, 'back in round {r}')")
    return out


class Interleave:
    """Runs an action once at a chosen point: before a backfill's re-merge of a table MERGEs (after it read the
    mirror's watermark and planned: its first staged part is read), or before a live window run applies a
    table's mirror."""

    def __init__(self, mp: pytest.MonkeyPatch) -> None:
        self.before_remerge: dict[str, Callable[[], None]] = {}
        self.before_mirror: dict[str, Callable[[], None]] = {}
        read, apply = delta_sql._read_staged, L.apply_mirror

        def read_staged(spark: Any, file: str) -> Any:
            if "/backfill/" in file:
                for name in list(self.before_remerge):
                    if f"/tables/{name}/" in file:
                        self.before_remerge.pop(name)()
            return read(spark, file)

        def apply_mirror(spark: Any, lake: Any, window_dir: Any, manifest: Any, table: Any, **kw: Any) -> Any:
            if table.name in self.before_mirror:
                self.before_mirror.pop(table.name)()
            return apply(spark, lake, window_dir, manifest, table, **kw)

        mp.setattr(delta_sql, "_read_staged", read_staged)
        mp.setattr(L, "apply_mirror", apply_mirror)

    def done(self) -> None:
        assert not self.before_remerge and not self.before_mirror, "an interleaving point was never reached"


class Paused:
    """The live pipeline driven in a thread whose window run stops before it applies ``table``'s mirror, until
    resumed."""

    def __init__(self, live: Live, ilv: Interleave, table: str) -> None:
        self.reached, self.go = threading.Event(), threading.Event()
        self.error: BaseException | None = None

        def gate() -> None:
            self.reached.set()
            assert self.go.wait(RUN)

        def drive() -> None:
            try:
                drive_until_idle(live.driver, timeout=RUN, settle=1)
            except BaseException as e:  # reported by finish()
                self.error = e

        ilv.before_mirror[table] = gate
        self.thread = threading.Thread(target=drive, name="live-window")
        self.thread.start()
        assert self.reached.wait(RUN), "the window run never reached the paused mirror"

    def finish(self) -> None:
        self.go.set()
        self.thread.join(RUN)
        assert not self.thread.is_alive() and self.error is None, self.error


def _backfill(live: Live) -> dict[str, Any]:
    res = resources_for(live.driver.config)
    out = run_backfill(build_op_context(), live.driver.config, TABLES, res["spark"], res["lake"],
                       start=live.start, end=live.end)
    return {rec.data["table"]: rec.data for rec in out["mirrors"].records}


def _drive(live: Live) -> None:
    drive_until_idle(live.driver, timeout=RUN, settle=1)


@dataclass
class History:
    versions: int
    resurrected: list[str]   # keys a re-merge put back after a later change had deleted them, and when


def _check_history(spark: Any, path: str, app: str) -> History:
    """Every version of the Delta table at ``path`` read by time travel, consecutive versions compared per key:

    * a key present in both never gets an older (_canal_pos, _canal_row), and a key that comes back never comes
      back older than it last was;
    * a key that a commit moving the watermark (txn ``app``) from W deleted and that comes back with a change at
      or below W (a re-merge planned before that delete) comes back in a re-merge commit only, and the next
      commit of the next re-merge pass removes it again (its plan made again at the new watermark).
    """
    log_dir = Path(path) / "_delta_log"
    versions = sorted(int(f.stem) for f in log_dir.glob("*.json") if f.stem.isdigit())
    notes: dict[int, str] = {}
    prev: dict[int, tuple[int, int]] = {}
    last_seen: dict[int, tuple[int, int]] = {}   # a deleted key's last position
    deleted_at: dict[int, int] = {}              # key -> the watermark before the window commit that deleted it
    pending: dict[int, tuple[int, str]] = {}     # key -> the version (and its label) that put it back too old
    mark: int | None = None
    problems: list[str] = []
    resurrected: list[str] = []
    for v in versions:
        actions = [json.loads(line) for line in (log_dir / f"{v:020d}.json").read_text().splitlines() if line]
        txn = [a["txn"]["version"] for a in actions if "txn" in a and a["txn"]["appId"] == app]
        notes[v] = next((a["commitInfo"].get("userMetadata") or "" for a in actions if "commitInfo" in a), "")
        remerge = notes[v].startswith(REMERGE_NOTE)
        df = spark.read.format("delta").option("versionAsOf", v).load(path)
        cur = {r[0]: (r[1], r[2]) for r in df.select("id", "_canal_pos", "_canal_row").collect()}
        for key, (was, note) in list(pending.items()):
            if remerge and notes[v] != note:   # the next pass of that re-merge, planned again
                if key in cur and cur[key][0] <= deleted_at[key]:
                    problems.append(f"version {v}: key {key}, put back at version {was}, is still there")
                del pending[key]
        for key, at in cur.items():
            low = prev.get(key) or last_seen.get(key)
            if low is not None and at < low:
                problems.append(f"version {v}: key {key} at {at}, before it was at or past {low}")
            if key not in prev and key in deleted_at and at[0] <= deleted_at[key]:
                resurrected.append(f"version {v} ({notes[v]}): key {key} at {at}")
                if not remerge:
                    problems.append(f"version {v}: key {key} back at {at} in a commit that is no re-merge")
                pending[key] = (v, notes[v])
        for key in prev.keys() - cur.keys():
            last_seen[key] = prev[key]
            if txn and mark is not None:
                deleted_at[key] = mark
        for key in cur.keys() - prev.keys():
            if key in deleted_at and cur[key][0] > deleted_at[key]:
                del deleted_at[key]
        prev, mark = cur, max(txn) if txn else mark
    problems += [f"key {key}, put back at version {v}, never taken away" for key, (v, _) in pending.items()]
    assert not problems, f"{path}: {len(problems)} regressions: {problems[:5]}"
    return History(len(versions), resurrected)


@pytest.mark.timeout(3600)
def test_backfill_beside_live_windows_never_regresses_a_mirror(live: Live, monkeypatch: pytest.MonkeyPatch,
                                                               request: pytest.FixtureRequest) -> None:
    """Rounds 2 and 3 always; with --long also rounds 1 and 4 (each round applies the next change set)."""
    long = bool(request.config.getoption("--long"))
    ilv = Interleave(monkeypatch)
    lake = live.lake
    accounts = lake.mirror_path(SCHEMA, "accounts")
    # damage for the backfill to repair: a period row lost, another corrupted (keys no round changes)
    live.spark.sql(f"DELETE FROM delta.`{accounts}` WHERE id = {KEYS - 2}")
    live.spark.sql(f"UPDATE delta.`{lake.mirror_path(SCHEMA, 'entries')}` SET memo = 'DAMAGED' WHERE id = {KEYS - 1}")
    results: dict[int, dict[str, Any]] = {}
    change_sets = iter(range(KEYS // 5 - 1))

    if long:
        # 1: the window between the accounts re-merge's plan and its MERGE
        _tx(live.conn, *_later(next(change_sets)))
        ilv.before_remerge[ACCOUNTS] = lambda: _drive(live)
        results[1] = _backfill(live)
        _assert_mirrors_equal_sources(live, "round 1")

    # 2: both re-merges between the window's accounts and entries mirror commits
    _tx(live.conn, *_later(next(change_sets)))
    paused = Paused(live, ilv, ENTRIES)
    results[2] = _backfill(live)
    paused.finish()
    _assert_mirrors_equal_sources(live, "round 2")

    # 3: one window between the accounts plan and MERGE, the next between the entries plan and MERGE
    def window(*statements: str) -> Callable[[], None]:
        return lambda: (_tx(live.conn, *statements), _drive(live))[1]

    k = next(change_sets)
    first, gone = 5 * k + 1, (f"DELETE FROM {ACCOUNTS} WHERE id = {5 * k + 4}",
                              f"DELETE FROM {ACCOUNTS} WHERE id = {5 * k + 5}")
    ilv.before_remerge[ACCOUNTS] = window(*_later(k, deletes=False), gone[0])
    ilv.before_remerge[ENTRIES] = window(
        gone[1], f"UPDATE {ACCOUNTS} SET note = 'change set {k} again' WHERE id = {first}",
        *(sql for sql in _later(k, updates=False) if sql not in gone))
    results[3] = _backfill(live)
    ilv.done()
    _drive(live)
    _assert_mirrors_equal_sources(live, "round 3")

    if long:
        # 4: no forced order: the backfill in a thread while windows apply later changes here
        box: dict[str, Any] = {}

        def backfill() -> None:
            try:
                box["result"] = _backfill(live)
            except BaseException as e:
                box["error"] = e

        thread = threading.Thread(target=backfill, name="backfill")
        thread.start()
        statements = _later(next(change_sets))
        for chunk in (statements[:4], statements[4:8], statements[8:]):
            if chunk:
                _tx(live.conn, *chunk)
                _drive(live)
        thread.join(RUN)
        assert not thread.is_alive() and "error" not in box, box.get("error")
        results[4] = box["result"]
        _drive(live)
        _assert_mirrors_equal_sources(live, "round 4")

    # the forced stale plans were noticed and planned again; none where nothing committed in between
    if long:
        assert results[1][ACCOUNTS]["replans"] >= 1 and results[1][ENTRIES]["replans"] == 0, results[1]
    assert results[3][ACCOUNTS]["replans"] >= 1 and results[3][ENTRIES]["replans"] >= 1, results[3]
    assert all(r["replans"] == 0 for r in results[2].values()), results
    histories = [_check_history(live.spark, lake.mirror_path(*name.split(".")), L.mirror_app_id(*name.split(".")))
                 for name in TABLES]
    assert sum(h.versions for h in histories) > (14 if long else 8)
    print("keys briefly put back by stale re-merge passes:", [h.resurrected for h in histories])


@pytest.mark.timeout(1800)
def test_the_pool_keeps_backfill_and_window_writers_apart(live: Live, monkeypatch: pytest.MonkeyPatch) -> None:
    """A canal_backfill run and a canal_window run on one Dagster instance: while the backfill's op holds the
    destination's slot, the window run is STARTED and its changelog step waits ("Step blocked by limit for pool");
    no two lake-writing steps of the two runs ever execute at the same time."""
    driver, instance, pool = live.driver, live.driver.instance, writer_pool(DEST)
    inside, seen = threading.Event(), {}
    replace = L.replace_changelog_range

    def replace_when_a_window_waits(*args: Any, **kwargs: Any) -> Any:
        inside.set()   # the backfill op runs, holding the slot: wait until a window step queues for it
        deadline = time.monotonic() + RUN
        while time.monotonic() < deadline:
            pending = [s for s in instance.event_log_storage.get_concurrency_info(pool).pending_steps
                       if s.assigned_timestamp is None]
            if pending:
                seen["step"], seen["status"] = pending[0].step_key, instance.get_run_by_id(pending[0].run_id).status
                break
            time.sleep(0.5)
        return replace(*args, **kwargs)

    monkeypatch.setattr(L, "replace_changelog_range", replace_when_a_window_waits)
    box: dict[str, Any] = {}

    def backfill() -> None:
        job = driver.defs.resolve_job_def("canal_backfill")
        box["result"] = job.execute_in_process(
            run_config={"ops": {"backfill_period": {"config": {
                "start_time": live.start.isoformat(), "end_time": live.end.isoformat(), "tables": TABLES}}}},
            instance=instance, raise_on_error=False)

    thread = threading.Thread(target=backfill, name="backfill-run")
    thread.start()
    assert inside.wait(RUN), "the backfill op never started"
    _tx(live.conn, "UPDATE canal_bflive.accounts SET note = 'pool' WHERE id = 31",
        "DELETE FROM canal_bflive.entries WHERE id = 32")
    _drive(live)   # the window run waits for the backfill's slot, then applies
    thread.join(RUN)
    assert not thread.is_alive() and box["result"].success
    assert seen.get("step") == "canal__changelog", seen
    assert seen["status"].value == "STARTED"   # in flight for the sensor
    window_run = driver.runs[-1][0]
    runs = [box["result"].run_id] + [r.run_id for r in instance.get_runs()
                                      if r.tags.get("dagster/run_key") == window_run.run_key]
    assert len(runs) == 2, runs
    spans: list[tuple[float, float, str]] = []
    blocked: list[str] = []
    for run_id in runs:
        started: dict[str, float] = {}
        for e in instance.all_logs(run_id):
            ev = e.dagster_event
            if ev is None or not ev.step_key:
                continue
            if ev.event_type == DagsterEventType.STEP_START:
                started[ev.step_key] = e.timestamp
            elif ev.event_type in (DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE):
                spans.append((started.pop(ev.step_key), e.timestamp, f"{run_id[:8]}:{ev.step_key}"))
            elif ev.event_type == DagsterEventType.ENGINE_EVENT and f"blocked by limit for pool {pool}" in e.message:
                blocked.append(f"{run_id[:8]}:{ev.step_key}")
    spans.sort()
    assert len(spans) >= 4, spans   # the backfill op, the changelog and the two mirrors
    for (a0, a1, a), (b0, _b1, b) in itertools.pairwise(spans):
        assert a1 <= b0, f"{a} ({a0:.3f}..{a1:.3f}) overlaps {b} (from {b0:.3f})"
    assert blocked and blocked[0].endswith("canal__changelog"), blocked
    _assert_mirrors_equal_sources(live, "after the pool test")
