"""The canal sensor's state machine, driven with build_sensor_context on a real (temp-dir) DagsterInstance, a
fake CanalSource (in-memory entries) and a fake stage function: no MySQL, no Spark."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    AssetKey,
    DagsterEvent,
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    RunRequest,
    SensorResult,
    build_sensor_context,
    define_asset_job,
    instance_for_test,
)
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG, RUN_KEY_TAG
from dagster._core.utils import make_new_run_id

from pipelines.defs.sensor import CanalSensor, DestinationNotProgressing
from pipelines.engine.config import parse_config
from pipelines.engine.registry import registry_for
from pipelines.engine.sensor_state import SensorState
from pipelines.engine.source import CanalSource, FetchedWindow, SourceHealth
from pipelines.engine.window import Position, TableChanges, TablePart, WindowManifest, order_key, window_dir_name

TABLES = ["shop.orders", "shop.customers"]
DAY_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def entry(table: str | None, rows: int, offset: int, ts: int = DAY_MS) -> bytes:
    """A fake entry: a row change of ``rows`` rows (table None: a transaction marker)."""
    return json.dumps({"table": table, "rows": rows, "offset": offset, "ts": ts}).encode()


class FakeSource(CanalSource):
    """Canal's semantics in memory: batches outstanding until acked in order; rollback redelivers from the
    acked cursor; restart() is a new server epoch that forgot its outstanding batches."""

    def __init__(self) -> None:
        self.entries: list[bytes] = []
        self.acked_upto = 0        # entries before this index are acked
        self.delivered_upto = 0
        self.batches: list[tuple[int, int, int]] = []  # (batch id, start, end) outstanding
        self.next_id = 1
        self.acks: list[int] = []
        self.rollbacks = 0
        self._epoch = 1
        self.healthy = SourceHealth()

    @property
    def epoch(self) -> str:
        return f"e{self._epoch}"

    def restart(self) -> None:
        self._epoch += 1
        self.batches.clear()
        self.delivered_upto = self.acked_upto

    def get_window(self, max_rows: int, max_bytes: int, max_wait: float) -> FetchedWindow:
        out = FetchedWindow()
        while self.delivered_upto < len(self.entries) and out.rows < max_rows:
            start = self.delivered_upto
            end = min(start + 2, len(self.entries))  # batches of two entries: several per window
            self.batches.append((self.next_id, start, end))
            out.batch_ids.append(self.next_id)
            self.next_id += 1
            for e in self.entries[start:end]:
                out.entries.append(e)
                out.rows += json.loads(e)["rows"]
                out.bytes += len(e)
            self.delivered_upto = end
        return out

    def ack(self, batch_ids: Sequence[int]) -> None:
        for b in batch_ids:
            assert self.batches and self.batches[0][0] == b, f"batch {b} is not the first outstanding"
            _, _, end = self.batches.pop(0)
            self.acked_upto = end
            self.acks.append(b)

    def rollback(self) -> None:
        self.rollbacks += 1
        self.batches.clear()
        self.delivered_upto = self.acked_upto

    def outstanding(self) -> list[int] | None:
        return [b for b, _, _ in self.batches]

    def health(self) -> SourceHealth:
        return self.healthy


def fake_stage(entries: list[bytes], *, root: Path, destination: str, window: int, attempt: int,
               batch_ids: list[int], timezone: str = "UTC") -> WindowManifest:
    decoded = [json.loads(e) for e in entries]
    tables: dict[str, TableChanges] = {}
    for d in decoded:
        if d["table"] and d["rows"]:
            schema, table = d["table"].split(".")
            key = order_key("mysql-bin.000001", d["offset"])
            tables.setdefault(d["table"], TableChanges(schema, table)).parts.append(
                TablePart(file="x.parquet", rows=d["rows"], min_pos=key, max_pos=key))
    first, last = decoded[0], decoded[-1]
    m = WindowManifest(destination=destination, window=window, attempt=attempt, batch_ids=batch_ids,
                       start=Position("mysql-bin.000001", first["offset"], first["ts"]),
                       end=Position("mysql-bin.000001", last["offset"], last["ts"], gtid="0-1-42"),
                       rows=sum(d["rows"] for d in decoded), entries=len(entries), tables=list(tables.values()))
    path = root / destination / window_dir_name(window, attempt)
    path.mkdir(parents=True)
    (path / "manifest.json").write_text(m.to_json())
    return m


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def _instance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DagsterInstance]:
    # one SQLite-backed instance for the module (creating one takes seconds), wiped for every test
    with instance_for_test(temp_dir=str(tmp_path_factory.mktemp("dagster"))) as inst:
        yield inst


@pytest.fixture
def instance(_instance: DagsterInstance) -> DagsterInstance:
    _instance.wipe()
    return _instance


class Harness:
    def __init__(self, tmp_path: Path, instance: DagsterInstance, *, snapshotted: bool = True,
                 **sensor_overrides: Any) -> None:
        self.config = parse_config({
            "paths": {"staging": str(tmp_path / "staging"), "state": str(tmp_path / "state")},
            "sensor": {"max_failures": 3, "backoff_seconds": 10, "backoff_max_seconds": 60,
                       "reconcile_interval_seconds": 0, **sensor_overrides},
            "changelog": {"start_date": "2025-01-01"},
        }, base_dir=tmp_path)
        self.instance = instance
        self.source = FakeSource()
        self.clock = Clock()
        self.sensor = CanalSensor(self.config, TABLES, source_factory=lambda: self.source, stage=fake_stage,
                                  clock=self.clock)
        self.cursor: str | None = None
        if snapshotted:
            reg = registry_for(self.config)
            for t in TABLES:
                reg.record_snapshot(t, "mysql-bin.000001:4", order_key("mysql-bin.000001", 4))
            reg.mark_caught_up({t: "mysql-bin.000001:4" for t in TABLES})

    def tick(self) -> SensorResult:
        """One evaluation; a failed one (the destination cannot progress: nothing to persist) comes back as a
        SensorResult whose skip reason is the failure's message, marked FAILED."""
        ctx = build_sensor_context(instance=self.instance, cursor=self.cursor, sensor_name=self.sensor.name)
        try:
            result = self.sensor.evaluate(ctx)
        except DestinationNotProgressing as e:
            return SensorResult(skip_reason=f"FAILED {e}", cursor=self.cursor)
        self.cursor = result.cursor
        return result

    @property
    def state(self) -> SensorState:
        return SensorState.from_cursor(self.cursor)

    def finish(self, request: RunRequest, status: DagsterRunStatus, error: str = "") -> DagsterRun:
        """The run the daemon would have launched for ``request``, ended with ``status``."""
        failed = status == DagsterRunStatus.FAILURE
        run = self.instance.add_run(DagsterRun(
            job_name=request.job_name or "", run_id=make_new_run_id(),
            status=DagsterRunStatus.STARTED if failed else status,
            tags={**request.tags, RUN_KEY_TAG: request.run_key or ""}))
        if failed:
            self.instance.report_run_failed(run, message=error)
        return run


def one_request(result: SensorResult, job: str = "canal_window") -> RunRequest:
    reqs = [r for r in result.run_requests or [] if r.job_name == job]
    assert len(reqs) == 1, (result.run_requests, result.skip_reason)
    return reqs[0]


def skip_text(result: SensorResult) -> str:
    assert not result.run_requests, result.run_requests
    assert result.skip_reason is not None
    return result.skip_reason.skip_message or ""


# --- windows ---------------------------------------------------------------------------------------------------

def test_idle_takes_a_window_and_requests_a_run(tmp_path: Path, instance: DagsterInstance) -> None:
    h = Harness(tmp_path, instance)
    h.source.entries = [entry(None, 0, 100), entry("shop.orders", 3, 200), entry(None, 0, 300)]
    req = one_request(h.tick())
    assert req.run_key == "example:0:0"
    assert req.asset_selection == [AssetKey(["canal", "changelog"]), AssetKey(["mirror", "shop", "orders"])]
    assert req.asset_check_keys == []
    path = Path(req.run_config["resources"]["canal_window"]["config"]["path"])
    assert path == tmp_path / "staging" / "example" / "w000000000000-a0" and (path / "manifest.json").is_file()
    assert req.tags["canal/destination"] == "example" and req.tags["canal/window"] == "0"
    assert req.tags["canal/attempt"] == "0" and req.tags["canal/batch_ids"] == "1-2"
    assert req.tags["canal/start"] == "mysql-bin.000001:100" and req.tags["canal/end"] == "mysql-bin.000001:300"
    assert req.tags["canal/gtid"] == "0-1-42" and req.tags["canal/rows"] == "3"
    assert req.tags[ASSET_PARTITION_RANGE_START_TAG] == req.tags[ASSET_PARTITION_RANGE_END_TAG] == "2026-01-01"
    st = h.state
    assert st.inflight is not None and st.inflight.batch_ids == [1, 2] and st.inflight.tables == ["shop.orders"]
    assert h.source.acks == []

    # while the run has not appeared / is running: wait, take nothing more
    assert "not created yet" in skip_text(h.tick())
    h.instance.add_run(DagsterRun(job_name="canal_window", run_id=make_new_run_id(),
                                  status=DagsterRunStatus.STARTED, tags={RUN_KEY_TAG: req.run_key or ""}))
    assert "STARTED" in skip_text(h.tick())
    assert h.source.acks == [] and h.state.inflight is not None


def test_success_acks_and_takes_the_next_window(tmp_path: Path, instance: DagsterInstance) -> None:
    h = Harness(tmp_path, instance)
    h.source.entries = [entry("shop.orders", 1, 100), entry(None, 0, 150)]
    req = one_request(h.tick())
    path = Path(req.run_config["resources"]["canal_window"]["config"]["path"])
    h.source.entries += [entry("shop.customers", 2, 400), entry(None, 0, 450)]
    h.finish(req, DagsterRunStatus.SUCCESS)
    nxt = one_request(h.tick())  # acked, and the next window in the same evaluation
    assert h.source.acks == [1]
    assert not path.exists()
    assert nxt.run_key == "example:1:0"
    assert nxt.asset_selection == [AssetKey(["canal", "changelog"]), AssetKey(["mirror", "shop", "customers"])]
    st = h.state
    assert st.applied_position == "mysql-bin.000001:150" and st.applied_through == order_key("mysql-bin.000001", 150)
    assert st.window == 1 and st.inflight is not None and st.inflight.batch_ids == [2]


def test_failure_rolls_back_backs_off_and_retries_with_a_new_run_key(tmp_path: Path,
                                                                     instance: DagsterInstance) -> None:
    h = Harness(tmp_path, instance)
    h.source.entries = [entry("shop.orders", 5, 100), entry(None, 0, 150)]
    req = one_request(h.tick())
    run = h.finish(req, DagsterRunStatus.FAILURE, "boom: MERGE failed")
    text = skip_text(h.tick())
    assert "retrying at" in text and "boom: MERGE failed" in text and run.run_id in text
    assert h.source.rollbacks >= 1 and h.source.acks == [] and h.source.batches == []
    st = h.state
    assert st.failures == 1 and st.attempt == 1 and st.backoff_until == h.clock.now + 10

    h.clock.now += 9
    assert "retrying at" in skip_text(h.tick())
    h.clock.now += 2
    retry = one_request(h.tick())
    assert retry.run_key == "example:0:1"  # same window, new attempt: a failed key is never reused
    assert retry.tags["canal/attempt"] == "1" and retry.tags["canal/rows"] == "5"
    assert Path(retry.run_config["resources"]["canal_window"]["config"]["path"]).name == "w000000000000-a1"

    h.finish(retry, DagsterRunStatus.SUCCESS)
    h.tick()
    assert h.source.acks == [2] and h.state.failures == 0 and h.state.window == 1
    # every attempt's staging is gone once the window is applied
    assert not list((tmp_path / "staging" / "example").glob("w000000000000-*"))


def test_canceled_run_counts_as_a_failure(tmp_path: Path, instance: DagsterInstance) -> None:
    h = Harness(tmp_path, instance)
    h.source.entries = [entry("shop.orders", 1, 100)]
    h.finish(one_request(h.tick()), DagsterRunStatus.CANCELED)
    assert "retrying at" in skip_text(h.tick())
    assert h.state.attempt == 1


def test_max_failures_stops_with_the_reason(tmp_path: Path, instance: DagsterInstance) -> None:
    h = Harness(tmp_path, instance)
    h.source.entries = [entry("shop.orders", 1, 100)]
    run = None
    for attempt in range(3):
        req = one_request(h.tick())
        assert req.run_key == f"example:0:{attempt}"
        run = h.finish(req, DagsterRunStatus.FAILURE, f"failure number {attempt}")
        h.tick()
        h.clock.now += 3600
    assert run is not None
    for _ in range(2):  # stays stopped, with the last run and its error
        text = skip_text(h.tick())
        assert "STOPPED" in text and run.run_id in text and "failure number 2" in text
        assert "reset this sensor's cursor" in text
    assert h.source.acks == [] and h.source.batches == []

    h.cursor = None  # the documented way out; numbering continues after the newest run
    req = one_request(h.tick())
    assert req.run_key == "example:1:0"


def test_epoch_change_skips_the_ack_and_moves_on(tmp_path: Path, instance: DagsterInstance) -> None:
    h = Harness(tmp_path, instance)
    h.source.entries = [entry("shop.orders", 1, 100), entry(None, 0, 150)]
    req = one_request(h.tick())
    h.source.restart()  # the code server restarted: outstanding batch ids are gone
    h.finish(req, DagsterRunStatus.SUCCESS)
    nxt = one_request(h.tick())
    assert h.source.acks == []  # nothing to ack in the new epoch ...
    assert nxt.run_key == "example:1:0" and nxt.tags["canal/start"] == "mysql-bin.000001:100"  # ... redelivered
    assert h.state.inflight is not None and h.state.inflight.epoch == "e2"


def _started(h: Harness, req: RunRequest) -> DagsterRun:
    return h.instance.add_run(DagsterRun(job_name="canal_window", run_id=make_new_run_id(),
                                         status=DagsterRunStatus.STARTED, tags={RUN_KEY_TAG: req.run_key or ""}))


def _set_status(h: Harness, run: DagsterRun, status: DagsterRunStatus, error: str = "") -> None:
    """End a STARTED run with ``status``."""
    if status == DagsterRunStatus.FAILURE:
        h.instance.report_run_failed(run, message=error)
        return
    kind = {DagsterRunStatus.SUCCESS: DagsterEventType.RUN_SUCCESS,
            DagsterRunStatus.CANCELED: DagsterEventType.RUN_CANCELED}[status]
    h.instance.report_dagster_event(DagsterEvent(event_type_value=kind.value, job_name=run.job_name), run.run_id)


def _last_run_took(h: Harness, seconds: float | None) -> None:
    """As if the previous window's run had taken ``seconds`` (requested -> succeeded)."""
    h.cursor = replace(h.state, last_run_seconds=seconds).to_json()


def _behind(tmp_path: Path, instance: DagsterInstance) -> tuple[Harness, DagsterRun]:
    """Window 0 (orders @100..150) in flight, its run going after a previous run of 10 s; window 1's entries
    (customers @400..450) waiting."""
    h = Harness(tmp_path, instance)
    h.source.entries = [entry("shop.orders", 2, 100), entry(None, 0, 150)]
    run = _started(h, one_request(h.tick()))
    _last_run_took(h, 10.0)
    h.source.entries += [entry("shop.customers", 3, 400), entry(None, 0, 450)]
    return h, run


def test_a_run_still_going_at_a_tick_gets_the_next_window_staged_ahead(tmp_path: Path,
                                                                         instance: DagsterInstance) -> None:
    h, run = _behind(tmp_path, instance)
    text = skip_text(h.tick())  # the run is going: the next window is staged, not launched
    assert "STARTED" in text and "window 1: 3 rows mysql-bin.000001:400..mysql-bin.000001:450 staged ahead" in text
    st = h.state
    assert st.ahead is not None and st.ahead.window == 1 and st.ahead.batch_ids == [2]
    assert Path(st.ahead.path).name == "w000000000001-a0" and (Path(st.ahead.path) / "manifest.json").is_file()
    assert h.source.outstanding() == [1, 2] and h.source.acks == []
    # once staged, later ticks while the run goes on take nothing more
    h.source.entries += [entry("shop.orders", 1, 500)]
    skip_text(h.tick())
    assert h.source.outstanding() == [1, 2] and h.state.ahead is not None and h.state.ahead.batch_ids == [2]

    _set_status(h, run, DagsterRunStatus.SUCCESS)
    nxt = one_request(h.tick())  # acks window 0 and launches the staged window, taking nothing new
    assert h.source.acks == [1] and h.source.outstanding() == [2]
    assert nxt.run_key == "example:1:0" and nxt.tags["canal/batch_ids"] == "2"
    assert nxt.tags["canal/start"] == "mysql-bin.000001:400" and nxt.tags["canal/rows"] == "3"
    assert nxt.asset_selection == [AssetKey(["canal", "changelog"]), AssetKey(["mirror", "shop", "customers"])]
    st = h.state
    assert st.ahead is None and st.window == 1 and st.inflight is not None and st.inflight.batch_ids == [2]
    assert st.applied_position == "mysql-bin.000001:150"

    h.finish(nxt, DagsterRunStatus.SUCCESS)
    last = one_request(h.tick())  # no run in flight at this tick: the window is taken afresh, as before
    assert h.source.acks == [1, 2] and last.run_key == "example:2:0"
    assert last.tags["canal/start"] == "mysql-bin.000001:500"


def test_a_failed_run_drops_the_window_staged_ahead(tmp_path: Path, instance: DagsterInstance) -> None:
    h, run = _behind(tmp_path, instance)
    skip_text(h.tick())
    ahead = Path(h.state.ahead.path)  # type: ignore[union-attr]
    assert ahead.is_dir()
    _set_status(h, run, DagsterRunStatus.FAILURE, "boom")
    text = skip_text(h.tick())
    assert "retrying at" in text and "boom" in text
    assert h.state.ahead is None and not ahead.exists()
    assert h.source.acks == [] and h.source.outstanding() == [] and h.source.rollbacks >= 1
    h.clock.now += 11
    retry = one_request(h.tick())  # the failed window again, now with everything after it: nothing skipped
    assert retry.run_key == "example:0:1" and retry.tags["canal/start"] == "mysql-bin.000001:100"
    assert retry.tags["canal/end"] == "mysql-bin.000001:450" and retry.tags["canal/rows"] == "5"


def test_a_source_restart_drops_the_window_staged_ahead(tmp_path: Path, instance: DagsterInstance) -> None:
    h, run = _behind(tmp_path, instance)
    skip_text(h.tick())
    h.source.restart()
    _set_status(h, run, DagsterRunStatus.SUCCESS)
    nxt = one_request(h.tick())
    assert h.source.acks == [] and h.state.ahead is None
    # the redelivery starts at the acked cursor, so window 1 holds window 0's entries again (idempotent writes)
    assert nxt.run_key == "example:1:0" and nxt.tags["canal/start"] == "mysql-bin.000001:100"
    assert nxt.tags["canal/end"] == "mysql-bin.000001:450" and nxt.tags["canal/rows"] == "5"


def test_a_window_staged_ahead_that_vanished_is_taken_afresh(tmp_path: Path, instance: DagsterInstance) -> None:
    h, run = _behind(tmp_path, instance)
    skip_text(h.tick())
    shutil.rmtree(h.state.ahead.path)  # type: ignore[union-attr]  # e.g. someone cleaned the staging directory
    _set_status(h, run, DagsterRunStatus.SUCCESS)
    skip_text(h.tick())  # acked window 0, rolled the lost window's batches back, launched nothing
    assert h.source.acks == [1] and h.source.outstanding() == [] and h.state.ahead is None
    nxt = one_request(h.tick())
    assert nxt.run_key == "example:1:0" and nxt.tags["canal/start"] == "mysql-bin.000001:400"
    assert nxt.tags["canal/end"] == "mysql-bin.000001:450"


def test_no_staging_ahead_past_batches_an_evaluation_left_behind(tmp_path: Path,
                                                                  instance: DagsterInstance) -> None:
    h, run = _behind(tmp_path, instance)
    h.source.entries += [entry("shop.orders", 1, 500)]
    h.source.get_window(2, 1 << 20, 0)  # an evaluation that died after taking a batch, before its cursor
    text = skip_text(h.tick())
    assert "not staging ahead" in text and h.state.ahead is None and h.source.outstanding() == [1, 2]
    _set_status(h, run, DagsterRunStatus.SUCCESS)
    nxt = one_request(h.tick())  # no run in flight: the usual rollback brings the orphaned batch back
    assert h.source.acks == [1] and nxt.tags["canal/start"] == "mysql-bin.000001:400"
    assert nxt.tags["canal/end"] == "mysql-bin.000001:500"


def test_no_staging_ahead_after_a_run_longer_than_the_interval(tmp_path: Path,
                                                                instance: DagsterInstance) -> None:
    h, run = _behind(tmp_path, instance)
    _last_run_took(h, None)
    skip_text(h.tick())  # no run has finished yet: nothing known, nothing staged ahead
    assert h.state.ahead is None and h.source.outstanding() == [1]
    _last_run_took(h, 0.9 * 30 + 1)  # this run likely spans the next tick too: a window taken then is fresher
    skip_text(h.tick())
    assert h.state.ahead is None and h.source.outstanding() == [1]
    _set_status(h, run, DagsterRunStatus.SUCCESS)
    nxt = one_request(h.tick())  # taken afresh at the launching tick, with everything up to it
    assert nxt.tags["canal/start"] == "mysql-bin.000001:400" and nxt.tags["canal/end"] == "mysql-bin.000001:450"
    took = h.state.last_run_seconds  # measured from the run's record: requested -> succeeded
    assert took is not None and 0 <= took < 5


def test_stage_ahead_can_be_switched_off(tmp_path: Path, instance: DagsterInstance) -> None:
    h = Harness(tmp_path, instance)
    h.config = h.sensor.config = replace(h.config, window=replace(h.config.window, stage_ahead=False))
    h.source.entries = [entry("shop.orders", 2, 100), entry(None, 0, 150)]
    _started(h, one_request(h.tick()))
    _last_run_took(h, 10.0)
    h.source.entries += [entry("shop.customers", 3, 400)]
    skip_text(h.tick())
    assert h.state.ahead is None and h.source.outstanding() == [1]


def test_empty_window_skips(tmp_path: Path, instance: DagsterInstance) -> None:
    h = Harness(tmp_path, instance)
    assert "no new changes" in skip_text(h.tick())
    assert h.state.inflight is None and h.state.window == 0


def test_marker_only_window_is_acked_at_once(tmp_path: Path, instance: DagsterInstance) -> None:
    h = Harness(tmp_path, instance)
    h.source.entries = [entry(None, 0, 100), entry(None, 0, 200), entry(None, 0, 300)]
    text = skip_text(h.tick())
    assert "without row changes" in text
    assert h.source.acks == [1, 2] and h.source.batches == []
    st = h.state
    assert st.inflight is None and st.window == 1 and st.applied_position == "mysql-bin.000001:300"
    assert not list((tmp_path / "staging" / "example").glob("w*"))


def _checks(req: RunRequest) -> list[str]:
    return sorted(f"{'.'.join(k.asset_key.path[1:])} {k.name}" for k in req.asset_check_keys or [])


def test_reconcile_checks_run_beside_the_windows_by_interval(tmp_path: Path, instance: DagsterInstance) -> None:
    h = Harness(tmp_path, instance, reconcile_interval_seconds=600, reconcile_tables_per_run=1)
    h.source.entries = [entry("shop.orders", 1, 100)]
    result = h.tick()
    # never reconciled yet: one mirror per run, in name order, whether or not a window changes it; in a run of its
    # own (checks only: an empty asset selection), while the window's run carries no check
    rec = one_request(result, "canal_reconcile")
    assert _checks(rec) == ["shop.customers reconcile"] and rec.asset_selection == []
    assert rec.run_key == "example:reconcile:0" and rec.tags["canal/kind"] == "reconcile"
    win = one_request(result)
    assert _checks(win) == [] and win.asset_selection == [AssetKey(["canal", "changelog"]),
                                                          AssetKey(["mirror", "shop", "orders"])]
    # the window's run ends first: the next window does not wait for the check
    h.source.entries.append(entry("shop.orders", 1, 200))
    h.finish(win, DagsterRunStatus.SUCCESS)
    result = h.tick()
    win = one_request(result)
    assert not [r for r in result.run_requests or [] if r.job_name == "canal_reconcile"]
    h.finish(rec, DagsterRunStatus.SUCCESS)
    rec = one_request(h.tick(), "canal_reconcile")
    assert _checks(rec) == ["shop.orders reconcile"] and rec.run_key == "example:reconcile:1"
    h.finish(rec, DagsterRunStatus.SUCCESS)
    h.tick()
    assert h.state.reconciled_at == {"shop.customers": h.clock.now, "shop.orders": h.clock.now}
    assert h.state.reconcile.run_key is None  # both checked within the interval
    h.clock.now += 600
    assert _checks(one_request(h.tick(), "canal_reconcile")) == ["shop.customers reconcile"]


def test_a_failed_reconcile_run_counts_nothing_and_is_retried(tmp_path: Path, instance: DagsterInstance) -> None:
    h = Harness(tmp_path, instance, reconcile_interval_seconds=600, backoff_seconds=5, backoff_max_seconds=5)
    rec = one_request(h.tick(), "canal_reconcile")
    h.finish(rec, DagsterRunStatus.FAILURE, "boom")
    text = skip_text(h.tick())
    assert "reconcile run of shop.customers failed" in text and "boom" in text and h.state.reconciled_at == {}
    h.clock.now += 5
    retry = one_request(h.tick(), "canal_reconcile")
    assert _checks(retry) == ["shop.customers reconcile"] and retry.run_key == "example:reconcile:1"


def test_reset_cursor_waits_for_an_unfinished_run(tmp_path: Path, instance: DagsterInstance) -> None:
    h = Harness(tmp_path, instance)
    h.source.entries = [entry("shop.orders", 1, 100)]
    req = one_request(h.tick())
    run = h.instance.add_run(DagsterRun(job_name="canal_window", run_id=make_new_run_id(),
                                        status=DagsterRunStatus.STARTED,
                                        tags={**req.tags, RUN_KEY_TAG: req.run_key or ""}))
    h.cursor = None
    assert run.run_id in skip_text(h.tick())


# --- initial snapshots -------------------------------------------------------------------------------------------

def test_snapshot_of_pending_tables_runs_beside_the_windows(tmp_path: Path, instance: DagsterInstance) -> None:
    h = Harness(tmp_path, instance, snapshotted=False)
    reg = registry_for(h.config)
    reg.record_snapshot("shop.customers", "mysql-bin.000001:4", order_key("mysql-bin.000001", 4))
    reg.mark_caught_up({"shop.customers": "mysql-bin.000001:4"})
    h.source.entries = [entry("shop.orders", 2, 100), entry("shop.customers", 1, 150)]

    result = h.tick()
    snap = one_request(result, "canal_snapshot")
    assert snap.run_key == "example:snapshot:0:0"
    assert snap.asset_selection == [AssetKey(["mirror", "shop", "orders"])]
    win = one_request(result)  # the window goes on without the pending mirror
    assert win.asset_selection == [AssetKey(["canal", "changelog"]), AssetKey(["mirror", "shop", "customers"])]

    assert "snapshot of shop.orders requested" in (h.tick().skip_reason.skip_message or "")  # type: ignore[union-attr]
    # the snapshot run records its position, then succeeds
    reg.record_snapshot("shop.orders", "mysql-bin.000001:120", order_key("mysql-bin.000001", 120), rows=7)
    h.finish(snap, DagsterRunStatus.SUCCESS)
    h.finish(win, DagsterRunStatus.SUCCESS)
    h.source.entries += [entry("shop.customers", 1, 300)]
    nxt = h.tick()
    assert not [r for r in nxt.run_requests or [] if r.job_name == "canal_snapshot"]
    req = one_request(nxt)
    # the table whose snapshot landed rides along with its catch-up position, even without changes here
    assert AssetKey(["mirror", "shop", "orders"]) in (req.asset_selection or [])
    assert req.run_config["resources"]["canal_window"]["config"]["catch_up"] == {
        "shop.orders": "mysql-bin.000001:120"}
    assert reg.load()["shop.orders"]["caught_up"] is False

    h.finish(req, DagsterRunStatus.SUCCESS)
    h.tick()
    assert reg.load()["shop.orders"]["caught_up"] is True
    assert reg.catch_up() == {}


def test_snapshot_failures_back_off_then_stop(tmp_path: Path, instance: DagsterInstance) -> None:
    h = Harness(tmp_path, instance, snapshotted=False)
    for attempt in range(3):
        snap = one_request(h.tick(), "canal_snapshot")
        assert snap.run_key == f"example:snapshot:0:{attempt}"
        h.finish(snap, DagsterRunStatus.FAILURE, "no such table")
        h.tick()
        h.clock.now += 3600
    text = skip_text(h.tick())
    assert "SNAPSHOT STOPPED" in text and "no such table" in text


def test_sensor_definition_runs_by_default(tmp_path: Path, instance: DagsterInstance) -> None:
    from dagster import DefaultSensorStatus

    h = Harness(tmp_path, instance)
    jobs = [define_asset_job("canal_window"), define_asset_job("canal_snapshot")]
    sd = h.sensor.definition(jobs)
    assert sd.name == "canal_example"
    assert sd.default_status == DefaultSensorStatus.RUNNING
    assert sd.minimum_interval_seconds == 30


def test_catch_up_without_a_window_to_carry_it(tmp_path: Path, instance: DagsterInstance) -> None:
    """A quiet source: the snapshotted mirror is caught up to the applied position by a run of its own."""
    h = Harness(tmp_path, instance, snapshotted=False)
    reg = registry_for(h.config)
    reg.record_snapshot("shop.customers", "mysql-bin.000001:4", order_key("mysql-bin.000001", 4))
    reg.mark_caught_up({"shop.customers": "mysql-bin.000001:4"})
    h.source.entries = [entry("shop.orders", 2, 100), entry(None, 0, 150)]
    result = h.tick()
    snap, win = one_request(result, "canal_snapshot"), one_request(result)
    assert win.asset_selection == [AssetKey(["canal", "changelog"])]  # shop.orders is pending
    reg.record_snapshot("shop.orders", "mysql-bin.000001:120", order_key("mysql-bin.000001", 120))
    h.finish(snap, DagsterRunStatus.SUCCESS)
    h.finish(win, DagsterRunStatus.SUCCESS)

    req = one_request(h.tick())  # window 0 acked, no new changes: a catch-up run alone
    assert req.run_key == "example:1:0"
    assert req.asset_selection == [AssetKey(["mirror", "shop", "orders"])] and req.asset_check_keys == []
    assert req.run_config["resources"]["canal_window"]["config"] == {
        "path": "", "catch_up": {"shop.orders": "mysql-bin.000001:120"}, "catch_up_end": "mysql-bin.000001:150"}
    assert ASSET_PARTITION_RANGE_START_TAG not in req.tags
    h.finish(req, DagsterRunStatus.SUCCESS)
    assert "no new changes" in skip_text(h.tick())
    assert reg.catch_up() == {} and h.source.acks == [1]


def test_snapshot_ahead_of_the_stream_needs_no_catch_up(tmp_path: Path, instance: DagsterInstance) -> None:
    h = Harness(tmp_path, instance)
    h.source.entries = [entry("shop.orders", 1, 100)]
    h.finish(one_request(h.tick()), DagsterRunStatus.SUCCESS)
    reg = registry_for(h.config)
    reg.record_snapshot("shop.orders", "mysql-bin.000001:500", order_key("mysql-bin.000001", 500))
    assert "no new changes" in skip_text(h.tick())  # applied through 100 < 500: nothing to replay
    assert reg.catch_up() == {}


# --- failures shown where users look ------------------------------------------------------------------------------

def failed_text(result: SensorResult) -> str:
    assert not result.run_requests, result.run_requests
    text = (result.skip_reason.skip_message if result.skip_reason else "") or ""
    assert text.startswith("FAILED "), f"the tick did not fail: {text}"
    return text


def _lag_checks(instance: DagsterInstance) -> dict[str, tuple[bool, str, str]]:
    """The newest lag check evaluation of each mirror: (passed, severity, description)."""
    from dagster import AssetCheckKey

    out = {}
    for t in TABLES:
        rec = instance.get_latest_asset_check_evaluation_record(AssetCheckKey(AssetKey(["mirror", *t.split(".")]),
                                                                              "lag"))
        if rec is not None:
            ev = rec.event.dagster_event.event_specific_data  # type: ignore[union-attr]
            out[t] = (ev.passed, ev.severity.value, ev.description or "")
    return out


def test_an_unreadable_source_fails_the_tick_and_the_lag_checks_until_it_is_back(
        tmp_path: Path, instance: DagsterInstance) -> None:
    h = Harness(tmp_path, instance)
    assert "no new changes" in skip_text(h.tick())
    assert all(v[0] for v in _lag_checks(instance).values()) and len(_lag_checks(instance)) == 2

    h.source.healthy = SourceHealth(False, "Access denied for user 'canal'@'localhost': check canal.instance."
                                           "dbPassword in conf/example/instance.properties", "auth", h.clock.now)
    text = failed_text(h.tick())
    assert "CANNOT READ THE SOURCE since" in text and "dbPassword" in text and "no new changes" not in text
    checks = _lag_checks(instance)
    assert {t: (p, sev) for t, (p, sev, _) in checks.items()} == {t: (False, "WARN") for t in TABLES}
    assert all("Access denied" in d for _, _, d in checks.values())
    status = json.loads((tmp_path / "state" / "example" / "status.json").read_text())
    assert status["verdict"]["passed"] is False and status["source"]["problem_kind"] == "auth"

    # changes the store still holds are applied meanwhile: that tick launches a run and does not fail
    h.source.entries = [entry("shop.orders", 1, 100)]
    req = one_request(h.tick())
    h.finish(req, DagsterRunStatus.SUCCESS)
    assert "CANNOT READ THE SOURCE" in skip_text(h.tick())  # acked: the cursor moved, so not a failed tick ...
    h.clock.now += 30
    assert "CANNOT READ THE SOURCE" in failed_text(h.tick())

    h.source.healthy = SourceHealth()  # the source answers again: cleared at the next tick
    h.clock.now += 30
    assert "no new changes" in skip_text(h.tick())
    assert all(v[0] for v in _lag_checks(instance).values())


def test_a_failing_window_fails_the_ticks_while_it_backs_off(tmp_path: Path, instance: DagsterInstance) -> None:
    h = Harness(tmp_path, instance)
    h.source.entries = [entry("shop.orders", 1, 100)]
    h.finish(one_request(h.tick()), DagsterRunStatus.FAILURE, "MirrorSchemaError: bad column")
    first = h.tick()  # records the failure (the cursor changes): a skipped tick that says so
    assert "retrying at" in skip_text(first) and "MirrorSchemaError" in skip_text(first)
    h.clock.now += 1
    assert "MirrorSchemaError" in failed_text(h.tick())  # nothing to persist while it waits: the tick fails
    checks = _lag_checks(instance)
    assert all(not p and "being retried" in d for p, _, d in checks.values())


def test_window_and_snapshot_runs_are_bounded_in_time(tmp_path: Path, instance: DagsterInstance) -> None:
    """Run monitoring terminates (and fails) a run past its dagster/max_runtime: the sensor then retries it."""
    h = Harness(tmp_path, instance, snapshotted=False, max_run_seconds=1234)
    h.source.entries = [entry("shop.orders", 1, 100)]
    result = h.tick()
    for job in ("canal_snapshot", "canal_window"):
        assert one_request(result, job).tags["dagster/max_runtime"] == "1234"
