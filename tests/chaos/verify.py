"""The checks after a chaos run, each against a truth the pipeline did not produce:

1. every mirror against its source table, row for row, typed as the pipeline tests compare them
   (tests/integration/pipeline_driver.py ``source_multiset`` / ``mirror_multiset``): by primary key, a key held
   twice counting as a duplicate; the keyless table as a multiset;
2. the changelog against the binlog read independently (binlog_truth): each row change present once, at its
   (file, offset, row), with the table, operation and images the binlog holds;
3. the workload's log against the binlog: every committed transaction there with its rows, every transaction
   there one the workload committed (or whose COMMIT outcome is unknown), no trace of a rolled-back one;
4. the sensor never stopped: every tick's cursor and message in the Dagster instance.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .binlog_truth import Change
from .environment import SCHEMA, Source
from .workload import KEYLESS, ROLLBACK_MARK

EXAMPLES = 5  # differences quoted per check


# --- Spark ------------------------------------------------------------------------------------------------------

@contextmanager
def spark_session(log: Path) -> Iterator[Any]:
    """A local Spark session for reading the lake; the JVM's console lines go to ``log``."""
    from pipelines.engine.sparkenv import quiet_delta_scan_noise, spark_session_builder

    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:  # the JVM inherits fds 1 and 2 when it is launched: lend it the log for that moment
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        spark = spark_session_builder("canal-chaos-verify", master="local[1]").getOrCreate()
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)
    quiet_delta_scan_noise(spark)
    try:
        yield spark
    finally:
        spark.stop()


# --- 1. mirrors -------------------------------------------------------------------------------------------------

@dataclass
class TableResult:
    table: str
    source_rows: int
    mirror_rows: int
    missing: int = 0       # rows of the source the mirror lacks
    extra: int = 0         # rows of the mirror the source lacks (a second copy of a key included)
    differing: int = 0     # keys whose row differs
    examples: list[str] = field(default_factory=list)

    @property
    def mismatched(self) -> int:
        return self.missing + self.extra + self.differing


def compare_mirrors(spark: Any, source: Source, lake_root: str, tables: Sequence[str]) -> list[TableResult]:
    from pipelines.engine.lake import Lake
    from pipelines.engine.snapshot import table_columns
    from tests.integration.pipeline_driver import mirror_multiset, source_multiset

    lake = Lake(lake_root)
    out = []
    conn = source.connect()
    try:
        for table in tables:
            with conn.cursor() as cur:
                columns = table_columns(cur, SCHEMA, table)
            src = source_multiset(source, SCHEMA, table, columns)
            try:
                mir = mirror_multiset(spark, lake.mirror_path(SCHEMA, table), columns)
            except Exception as e:  # no mirror at all: every source row is missing
                res = TableResult(table, len(src), 0, missing=len(src))
                res.examples.append(f"mirror unreadable: {type(e).__name__}: {str(e)[:300]}")
                out.append(res)
                continue
            keys = None if table in KEYLESS else [i for i, c in enumerate(columns) if c.is_key]
            out.append(_compare_rows(table, src, mir, keys))
    finally:
        conn.close()
    return out


def _compare_rows(table: str, src: list[tuple[Any, ...]], mir: list[tuple[Any, ...]],
                  keys: list[int] | None) -> TableResult:
    res = TableResult(table, len(src), len(mir))
    if keys is None:  # a multiset
        s, m = Counter(src), Counter(mir)
        lost, more = s - m, m - s
        res.missing, res.extra = sum(lost.values()), sum(more.values())
        res.examples += [f"source only: {r}" for r in list(lost)[:EXAMPLES]]
        res.examples += [f"mirror only: {r}" for r in list(more)[:EXAMPLES]]
        return res
    by_key: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for r in mir:
        k = tuple(r[i] for i in keys)
        if k in by_key:
            res.extra += 1
            if len(res.examples) < EXAMPLES:
                res.examples.append(f"key {k} twice in the mirror")
        by_key[k] = r
    seen = set()
    for r in src:
        k = tuple(r[i] for i in keys)
        seen.add(k)
        got = by_key.get(k)
        if got is None:
            res.missing += 1
            if len(res.examples) < 3 * EXAMPLES:
                res.examples.append(f"missing in the mirror: {r}")
        elif got != r:
            res.differing += 1
            if len(res.examples) < 3 * EXAMPLES:
                res.examples.append(f"differs: source {r} mirror {got}")
    for k, r in by_key.items():
        if k not in seen:
            res.extra += 1
            if len(res.examples) < 3 * EXAMPLES:
                res.examples.append(f"not in the source: {r}")
    return res


# --- 2. the changelog -------------------------------------------------------------------------------------------

@dataclass
class ChangelogResult:
    expected: int          # row changes in the binlog range
    stored: int            # changelog rows of the schema
    missing: int = 0
    duplicated: int = 0    # stored more than once (each extra copy counts)
    phantom: int = 0       # stored, but no such change in the binlog range
    corrupted: int = 0     # stored once, with another table, operation or image than the binlog's
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.duplicated or self.phantom or self.corrupted)


def read_changelog(spark: Any, lake_root: str) -> list[dict[str, Any]]:
    """The changelog's rows of the chaos schema ([] when the pipeline has not created it yet)."""
    from pipelines.engine.lake import Lake

    path = Lake(lake_root).changelog_path()
    if not (Path(path) / "_delta_log").is_dir():
        return []
    df = spark.read.format("delta").load(path).where(f"schema_name = '{SCHEMA}'")
    rows = df.select("binlog_file", "binlog_offset", "row", "table_name", "op", "before", "after").toArrow()
    out = rows.to_pylist()
    for r in out:  # Arrow gives a map as a list of (key, value) pairs
        for side in ("before", "after"):
            r[side] = dict(r[side]) if r[side] is not None else None
    return out


def compare_changelog(stored: list[dict[str, Any]], truth: list[Change]) -> ChangelogResult:
    res = ChangelogResult(expected=len(truth), stored=len(stored))
    want = {c.key: c for c in truth}
    counts = Counter((r["binlog_file"], r["binlog_offset"], r["row"]) for r in stored)
    for key, n in counts.items():
        if n > 1:
            res.duplicated += n - 1
            if len(res.examples) < EXAMPLES:
                res.examples.append(f"stored {n} times: {key[0]}:{key[1]} row {key[2]}")
    for key in want.keys() - counts.keys():
        res.missing += 1
        if len(res.examples) < 2 * EXAMPLES:
            c = want[key]
            res.examples.append(f"missing: {c.file}:{c.offset} row {c.row} {c.op} {c.table} {c.after or c.before}")
    checked = set()
    for r in stored:
        key = (r["binlog_file"], r["binlog_offset"], r["row"])
        c = want.get(key)
        if c is None:
            res.phantom += 1
            if len(res.examples) < 3 * EXAMPLES:
                res.examples.append(f"not in the binlog range: {key[0]}:{key[1]} row {key[2]} {r['op']} "
                                    f"{r['table_name']}")
            continue
        if key in checked:
            continue
        checked.add(key)
        before = r["before"] if c.before is not None else None
        after = r["after"] if c.after is not None else None
        if (r["table_name"], r["op"], before, after) != (c.table, c.op, c.before, c.after):
            res.corrupted += 1
            if len(res.examples) < 4 * EXAMPLES:
                res.examples.append(f"differs at {c.file}:{c.offset} row {c.row}: changelog {r['table_name']} "
                                    f"{r['op']} {r['before']} -> {r['after']}, binlog {c.table} {c.op} {c.before} "
                                    f"-> {c.after}")
    return res


# --- 3. the workload's log --------------------------------------------------------------------------------------

@dataclass
class WorkloadResult:
    transactions: int
    outcomes: dict[str, int]
    committed_rows: int
    committed_missing: int = 0     # committed (rows > 0), no such transaction in the binlog
    row_count_differs: int = 0     # committed, in the binlog with another number of rows
    unexplained: int = 0           # in the binlog, neither committed nor of unknown outcome in the log
    unknown_committed: int = 0     # unknown outcome, found committed in the binlog
    rollback_traces_binlog: int = 0
    rollback_traces_changelog: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.committed_missing or self.row_count_differs or self.unexplained
                    or self.rollback_traces_binlog or self.rollback_traces_changelog)


def _traces(images: Sequence[dict[str, Any] | None]) -> int:
    return sum(1 for im in images if im and (ROLLBACK_MARK in im.values() or im.get("action") == "rollback"))


def check_workload(log: list[dict[str, Any]], truth: list[Change], changelog: list[dict[str, Any]]) -> WorkloadResult:
    outcomes = Counter(e["outcome"] for e in log)
    res = WorkloadResult(transactions=len(log), outcomes=dict(outcomes),
                         committed_rows=sum(e.get("rows", 0) for e in log if e["outcome"] == "committed"))
    per_gtid = Counter(c.gtid for c in truth)
    committed = {e["gtid"]: e for e in log if e["outcome"] == "committed" and e.get("gtid") and e.get("rows")}
    for gtid, e in committed.items():
        got = per_gtid.get(gtid, 0)
        if got == 0:
            res.committed_missing += 1
            if len(res.examples) < EXAMPLES:
                res.examples.append(f"transaction {e['n']} ({e['kind']}, {gtid}) committed, not in the binlog")
        elif got != e["rows"]:
            res.row_count_differs += 1
            if len(res.examples) < 2 * EXAMPLES:
                res.examples.append(f"transaction {e['n']} ({e['kind']}, {gtid}): {e['rows']} rows, {got} in the "
                                    "binlog")
    # a committed transaction whose GTID is not known, or of unknown outcome, may explain one binlog transaction
    explainable = outcomes.get("unknown", 0) + sum(1 for e in log if e["outcome"] == "committed" and not e.get("gtid")
                                                   and e.get("rows"))
    others = [g for g in per_gtid if g not in committed]
    res.unknown_committed = min(len(others), outcomes.get("unknown", 0))
    if len(others) > explainable:
        res.unexplained = len(others) - explainable
        res.examples.append(f"{len(others)} transactions in the binlog the workload did not commit, at most "
                            f"{explainable} explained: {others[:EXAMPLES]}")
    res.rollback_traces_binlog = _traces([c.before for c in truth] + [c.after for c in truth])
    res.rollback_traces_changelog = _traces([r["before"] for r in changelog] + [r["after"] for r in changelog])
    return res


# --- 4. the sensor ----------------------------------------------------------------------------------------------

@dataclass
class SensorResult:
    ticks: int
    failed_ticks: int
    stopped: list[str] = field(default_factory=list)  # what a stopped tick said
    phase: str = ""
    applied_position: str = ""

    @property
    def ok(self) -> bool:
        return not self.stopped


def _instance(home: Path) -> Any:
    from dagster import DagsterInstance

    return DagsterInstance.from_config(str(home))


def _sensor_state(instance: Any, name: str) -> Any:
    from dagster._core.definitions.run_request import InstigatorType

    for st in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
        if st.instigator_name == name:
            return st
    return None


def sensor_cursor(home: Path, name: str) -> Any:
    """The sensor's state machine as its cursor in the Dagster instance says now (None before its first tick)."""
    from pipelines.engine.sensor_state import SensorState

    instance = _instance(home)
    try:
        st = _sensor_state(instance, name)
        data = st.instigator_data if st is not None else None
        return SensorState.from_cursor(data.cursor) if data is not None and data.cursor else None
    finally:
        instance.dispose()


def _stopped(state: Any) -> str | None:
    """Why the windows or the snapshots stopped, None when they did not."""
    if state.phase == "stopped" or state.snapshot.stopped:
        return str(state.stopped or state.snapshot.stopped)
    return None


def sensor_history(home: Path, name: str) -> SensorResult:
    """Every tick the instance recorded: its cursor never in the stopped phase, its message never STOPPED."""
    from dagster._core.scheduler.instigation import TickStatus

    from pipelines.engine.sensor_state import Phase, SensorState

    instance = _instance(home)
    try:
        st = _sensor_state(instance, name)
        if st is None:
            return SensorResult(0, 0, [f"no sensor {name} in the Dagster instance {home}"])
        ticks = instance.get_ticks(st.instigator_origin_id, st.selector_id)
        res = SensorResult(ticks=len(ticks), failed_ticks=sum(t.status == TickStatus.FAILURE for t in ticks))
        for t in ticks:
            said = (t.error.message if t.error else "") + " " + (t.skip_reason or "")
            state = SensorState.from_cursor(t.cursor) if t.cursor else None
            why = _stopped(state) if state is not None else None
            if why or "STOPPED:" in said:
                res.stopped.append(f"tick at {t.timestamp:.0f}: {why or said.strip()[:300]}")
        final = SensorState.from_cursor(st.instigator_data.cursor) if st.instigator_data.cursor else None
        if final is not None:
            res.phase, res.applied_position = str(final.phase), final.applied_position
            if final.phase == Phase.STOPPED or final.snapshot.stopped:
                res.stopped.append(f"the cursor now: {_stopped(final)}")
        return res
    finally:
        instance.dispose()
