"""The sensor's state machine on its own: observations in, state and actions out, no Dagster, no source, no I/O."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pipelines.defs.status import verdict
from pipelines.engine import sensor_state as S
from pipelines.engine.sensor_cursor import CURSOR_VERSION
from pipelines.engine.sensor_state import FailureKind, Phase, SensorState

RULES = S.Rules(destination="d", tables=("s.a", "s.b"), max_failures=3, backoff_seconds=10, backoff_max_seconds=60,
                launch_timeout_seconds=100)
OK = S.SourceSeen(epoch="e1", outstanding=())
T0_DOWN = 1_799_999_990.0
DOWN = S.SourceSeen(epoch="e1", outstanding=(), ok=False, problem="Access denied for user 'canal'",
                    problem_kind="auth", since=T0_DOWN)
T0 = 1_800_000_000.0


def tick(now: float = T0, source: S.SourceSeen = OK, **kw: Any) -> S.Tick:
    return S.Tick(now=now, source=source, code_version=kw.pop("code_version", "v1"), **kw)


def kinds(actions: list[S.Action]) -> list[str]:
    return [type(a).__name__ for a in actions]


def notes(actions: list[S.Action], level: str | None = None) -> str:
    return " | ".join(a.text for a in actions if isinstance(a, S.Note) and (level is None or a.level == level))


def staged(window: int, attempt: int = 0, rows: int = 3, purpose: str = "take", **kw: Any) -> S.Staged:
    base: dict[str, Any] = dict(
        purpose=purpose, window=window, attempt=attempt, path=f"/stage/w{window}-a{attempt}", batch_ids=(window + 1,),
        epoch="e1", rows=rows, entries=rows, start="mysql-bin.000001:4", end=f"mysql-bin.000001:{100 + window}",
        end_key=(1 << 32) | (100 + window), end_ms=int(T0 * 1000) - 5000, gtid="0-1-7",
        tables=("s.a",) if rows else ())
    base.update(kw)
    return S.Staged(**base)


def launched(state: SensorState, now: float = T0) -> tuple[SensorState, S.Launch]:
    """From idle: a tick, a fetched window, its staging -> the state with the window in flight, and its Launch."""
    st, acts = S.step(state, tick(now), RULES)
    assert kinds(acts) == ["Rollback", "Fetch"], acts
    st, acts = S.step(st, S.Fetched("take", (st.window + 1,), "e1", 3), RULES)
    assert acts == [S.Stage("take", st.window, st.attempt)]
    st, acts = S.step(st, staged(st.window, st.attempt), RULES)
    launch = [a for a in acts if isinstance(a, S.Launch)]
    assert len(launch) == 1 and st.phase == Phase.IN_FLIGHT
    return st, launch[0]


def finish(state: SensorState, status: str, error: str = "", now: float = T0,
           source: S.SourceSeen = OK, **kw: Any) -> tuple[SensorState, list[S.Action]]:
    run = S.RunSeen(status, "run-" + status.lower(), error=error, seconds=5.0)
    return S.step(state, tick(now, source, window_run=run, **kw), RULES)


# --- classification -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("message", "kind"), [
    ("Run worker for run 0f3c is not running (process 4242 gone)", FailureKind.INFRA),
    ("run d:4:0 never appeared within 600 s", FailureKind.INFRA),
    ("changelog: py4j.protocol.Py4JNetworkError: Answer from Java side is empty", FailureKind.INFRA),
    ("mirror_s_a: SparkConnectGrpcException: <_MultiThreadedRendezvous StatusCode.UNAVAILABLE>", FailureKind.INFRA),
    ("Can't connect to MySQL server on '127.0.0.1' ([Errno 111] Connection refused)", FailureKind.INFRA),
    ("DagsterExecutionInterruptedError: Execution was interrupted", FailureKind.INFRA),
    ("run CANCELED", FailureKind.INFRA),
    ("mirror_s_a: MirrorSchemaError: s.a column c: STRING -> INT at position 2:120 (order key 8589934712)",
     FailureKind.DATA),
    ("changelog: DecodeError: invalid UTF-8 in s.a.name at mysql-bin.000002:77", FailureKind.DATA),
    ("", FailureKind.DATA),
])
def test_classify(message: str, kind: FailureKind) -> None:
    assert S.classify(message) == kind


def test_signature_ignores_ids_and_positions() -> None:
    a = S.signature("run 0f3c9b2e-1d2a-4c55-9a7e-0123456789ab: MirrorSchemaError at mysql-bin.000002:120")
    b = S.signature("run 7a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d: MirrorSchemaError at mysql-bin.000003:99")
    assert a == b
    assert S.signature("MirrorSchemaError at 1") != S.signature("DecodeError at 1")


# --- windows -------------------------------------------------------------------------------------------------------

def test_a_window_from_tick_to_launch() -> None:
    st, launch = launched(SensorState(adopted=True))
    assert launch.kind == "window" and launch.run_key == "d:0:0" and launch.changelog
    assert launch.tables == ("s.a",) and launch.path == "/stage/w0-a0"
    assert launch.tags["canal/start"] == "mysql-bin.000001:4" and launch.tags["canal/rows"] == "3"
    assert st.inflight is not None and st.inflight.batch_ids == [1] and st.inflight.epoch == "e1"

    st2, acts = finish(st, "SUCCESS", now=T0 + 30)
    assert S.Ack((1,)) in acts and S.Remove(window=0) in acts
    assert st2.phase == Phase.IDLE and st2.window == 1 and st2.applied_position == "mysql-bin.000001:100"
    assert st2.applied_gtid == "0-1-7" and st2.last_run_seconds == 5.0
    assert kinds(acts)[-2:] == ["Rollback", "Fetch"]  # the next window in the same evaluation
    assert SensorState.from_cursor(st2.to_json()).to_json() == st2.to_json()  # the cursor round-trips


def test_the_input_state_is_not_modified() -> None:
    st, _ = launched(SensorState(adopted=True))
    before = st.to_json()
    finish(st, "FAILURE", "boom")
    assert st.to_json() == before


@pytest.mark.parametrize(("errors", "stopped_after"), [
    # infrastructure faults never stop the destination, however many
    (["Run worker for run {n} is not running"] * 12, None),
    (["changelog: Py4JNetworkError: Error while sending or receiving (attempt {n})"] * 12, None),
    # the same data error max_failures (3) times in a row stops it ...
    (["mirror_s_a: MirrorSchemaError: column c STRING -> INT at mysql-bin.000002:{n}"] * 3, 3),
    # ... different errors do not add up, nor does an infrastructure fault in between
    (["MirrorSchemaError at {n}", "DecodeError at {n}"] * 6, None),
    (["MirrorSchemaError at {n}", "MirrorSchemaError at {n}", "Run worker {n} gone", "MirrorSchemaError at {n}",
      "MirrorSchemaError at {n}", "MirrorSchemaError at {n}"], 6),
])
def test_only_a_repeated_data_error_stops(errors: list[str], stopped_after: int | None) -> None:
    st = SensorState(adopted=True)
    now = T0
    for n, err in enumerate(errors, 1):
        st, _ = launched(st, now)
        assert st.inflight is not None and st.inflight.attempt == n - 1 and st.inflight.run_key == f"d:0:{n - 1}"
        st, acts = finish(st, "FAILURE", err.format(n=n * 7), now=now)
        assert S.Rollback() in acts  # nothing of a failed window is ever acked
        assert not any(isinstance(a, S.Ack) for a in acts)
        if stopped_after is not None and n == stopped_after:
            assert st.phase == Phase.STOPPED, (n, st)
            assert "reset this sensor's cursor" in (st.stopped or "") and "resumes by itself" in (st.stopped or "")
            return
        assert st.phase == Phase.BACKING_OFF, (n, st)
        assert st.backoff_until - now == min(60, 10 * 2 ** (n - 1))
        now = st.backoff_until
    assert stopped_after is None


def test_a_data_error_while_the_source_is_down_is_an_infrastructure_fault() -> None:
    st = SensorState(adopted=True)
    for n in range(6):
        st, _ = launched(st, T0 + 100 * n)
        st, _ = finish(st, "FAILURE", "mirror_s_a: SomeError: x", now=T0 + 100 * n, source=DOWN)
        assert st.phase == Phase.BACKING_OFF and st.last_error is not None
        assert st.last_error.kind == FailureKind.INFRA


def test_backing_off_and_stopped_ticks_are_errors_that_change_nothing() -> None:
    st, _ = launched(SensorState(adopted=True))
    st, acts = finish(st, "FAILURE", "MirrorSchemaError at 1")
    assert "retrying at" in notes(acts, "error")
    again, acts = S.step(st, tick(T0 + 5), RULES)
    assert kinds(acts) == ["Note"] and acts[0].level == "error" and "MirrorSchemaError" in notes(acts)
    assert again.to_json() == st.to_json()
    later, acts = S.step(st, tick(T0 + 10), RULES)  # backoff over: the same window, a new attempt
    assert kinds(acts) == ["Rollback", "Fetch"] and later.phase == Phase.IDLE and later.attempt == 1


def test_a_stop_resumes_when_the_code_version_changes() -> None:
    st = SensorState(adopted=True)
    for n in range(3):
        st, _ = launched(st, T0 + 1000 * n)
        st, _ = finish(st, "FAILURE", "MirrorSchemaError at 1", now=T0 + 1000 * n)
    assert st.phase == Phase.STOPPED and st.stopped_version == "v1"
    same, acts = S.step(st, tick(T0 + 9999), RULES)
    assert same.phase == Phase.STOPPED and "STOPPED" in notes(acts, "error")
    resumed, acts = S.step(st, tick(T0 + 9999, code_version="v2"), RULES)
    assert resumed.phase == Phase.IDLE and resumed.failures == 0 and "resuming window 0" in notes(acts)
    assert kinds(acts)[-2:] == ["Rollback", "Fetch"] and resumed.attempt == 3  # run keys are never reused


def test_a_run_that_never_appears_fails_after_the_launch_timeout() -> None:
    st, _ = launched(SensorState(adopted=True))
    waiting, acts = S.step(st, tick(T0 + 99, window_run=S.RunSeen(None)), RULES)
    assert waiting.phase == Phase.IN_FLIGHT and "not created yet" in notes(acts)
    gone, acts = S.step(st, tick(T0 + 100, window_run=S.RunSeen(None)), RULES)
    assert gone.phase == Phase.BACKING_OFF and gone.last_error is not None
    assert gone.last_error.kind == FailureKind.INFRA and "never appeared" in gone.last_error.message


def test_a_source_restart_skips_the_ack() -> None:
    st, _ = launched(SensorState(adopted=True))
    st2, acts = finish(st, "SUCCESS", source=S.SourceSeen(epoch="e2", outstanding=()))
    assert not any(isinstance(a, S.Ack) for a in acts) and "source restart" in notes(acts)
    assert st2.window == 1


# --- the source ----------------------------------------------------------------------------------------------------

def test_an_unreadable_source_is_an_error_not_no_new_changes() -> None:
    st = SensorState(adopted=True, caught_up_at=500.0)
    st, acts = S.step(st, tick(T0, DOWN), RULES)
    assert kinds(acts) == ["Rollback", "Fetch"]  # what the store still holds is applied first
    st2, acts = S.step(st, S.Fetched("take", (), "e1"), RULES)
    assert notes(acts, "error").startswith("CANNOT READ THE SOURCE since ") and "Access denied" in notes(acts)
    assert st2.caught_up_at == 500.0
    # entries buffered before the outage still make a window
    _, acts = S.step(st, S.Fetched("take", (4,), "e1", 2), RULES)
    assert acts == [S.Stage("take", 0, 0)]
    # back: "no new changes", and the destination is caught up as of now
    ok, _ = S.step(SensorState(adopted=True), tick(T0 + 30), RULES)
    ok, acts = S.step(ok, S.Fetched("take", (), "e1"), RULES)
    assert notes(acts) == "no new changes" and not notes(acts, "error") and ok.caught_up_at == T0 + 30


# --- the lag verdict ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("state", "source", "passed", "severity", "text"), [
    (SensorState(caught_up_at=T0 - 10, applied_position="mysql-bin.000002:6039762", applied_gtid="0-1-9"), OK,
     True, "", "every change up to mysql-bin.000002:6039762 (GTID 0-1-9) is applied"),
    (SensorState(caught_up_at=T0 - 400), OK, False, "WARN", "400 s behind"),
    (SensorState(caught_up_at=T0 - 1000), OK, False, "ERROR", "1000 s behind"),
    (SensorState(applied_ms=int((T0 - 20) * 1000)), OK, True, "", "20 s behind"),
    (SensorState(caught_up_at=T0 - 10), DOWN, False, "WARN", "cannot read the source since"),
    (SensorState(caught_up_at=T0 - 2000), DOWN, False, "ERROR", "Access denied"),
    (SensorState(caught_up_at=T0 - 10, phase=Phase.STOPPED, stopped="window 3 failed"), OK, False, "ERROR",
     "STOPPED: window 3 failed"),
    (SensorState(), OK, False, "WARN", "not caught up"),
])
def test_lag_verdict(state: SensorState, source: S.SourceSeen, passed: bool, severity: str, text: str) -> None:
    v = verdict(state, tick(T0, source), warn_seconds=300, fail_seconds=900)
    assert (v.passed, v.severity, text in v.description) == (passed, severity, True), v


def test_lag_verdict_of_a_failing_window() -> None:
    st, _ = launched(SensorState(adopted=True, caught_up_at=T0 - 5))
    st, _ = finish(st, "FAILURE", "Run worker for run x is not running")
    v = verdict(st, tick(T0), 300, 900)
    assert not v.passed and v.severity == "WARN" and "being retried" in v.description and "Run worker" in v.description


# --- cursors -------------------------------------------------------------------------------------------------------

def test_a_cursor_written_before_the_explicit_phase_is_read() -> None:
    v1 = {"version": 1, "window": 7, "attempt": 2, "failures": 5, "backoff_until": 0.0, "inflight": None,
          "ahead": None, "last_run_seconds": None, "applied_through": 42, "applied_position": "mysql-bin.000001:42",
          "stopped": "window 7 failed 5 times", "last_error": "run x: boom",
          "snapshot": {"n": 1, "attempt": 0, "tables": [], "run_key": None, "launched_at": 0.0, "failures": 0,
                       "backoff_until": 0.0, "stopped": None, "last_error": None}, "adopted": True}
    st = SensorState.from_cursor(json.dumps(v1))
    assert st.phase == Phase.STOPPED and st.window == 7 and st.last_error is not None
    assert st.last_error.message == "run x: boom" and st.version == CURSOR_VERSION
    assert SensorState.from_cursor(st.to_json()).to_json() == st.to_json()
    with pytest.raises(ValueError, match="reset the cursor"):
        SensorState.from_cursor(json.dumps({"version": 99}))


REC = S.Rules(destination="d", tables=("s.a", "s.b"), reconcile_interval_seconds=60, backoff_seconds=10,
              backoff_max_seconds=60, launch_timeout_seconds=100)


def reconcile_launches(actions: list[S.Action]) -> list[S.Launch]:
    return [a for a in actions if isinstance(a, S.Launch) and a.kind == "reconcile"]


def test_reconcile_checks_skip_mirrors_still_catching_up() -> None:
    st, acts = S.step(SensorState(adopted=True), tick(catch_up={"s.a": "mysql-bin.000001:4"}), REC)
    (rec,) = reconcile_launches(acts)
    assert rec.checks == ("s.b",) and rec.tables == () and rec.run_key == "d:reconcile:0"
    # the window of the same tick carries the catch-up, and no check
    st, _ = S.step(st, S.Fetched("take", (1,), "e1", 3), REC)
    st, acts = S.step(st, staged(0), REC)
    (win,) = [a for a in acts if isinstance(a, S.Launch)]
    assert win.kind == "window" and win.catch_up == {"s.a": "mysql-bin.000001:4"} and win.checks == ()


def test_reconcile_runs_beside_the_windows_and_never_holds_one_back() -> None:
    st, acts = S.step(SensorState(adopted=True), tick(T0), REC)
    (rec,) = reconcile_launches(acts)
    assert rec.checks == ("s.a",) and st.reconcile.run_key == "d:reconcile:0"  # one table per run, longest ago
    assert kinds(acts)[-2:] == ["Rollback", "Fetch"]  # the window is taken in the same tick
    st, _ = S.step(st, S.Fetched("take", (1,), "e1", 3), REC)
    st, _ = S.step(st, staged(0), REC)
    assert st.phase == Phase.IN_FLIGHT
    # the window's run succeeds while the reconcile run is still going: the next window goes on
    going = S.RunSeen("STARTED", "run-rec")
    st, acts = S.step(st, tick(T0 + 30, window_run=S.RunSeen("SUCCESS", "run-w", seconds=5.0),
                                reconcile_run=going), REC)
    assert S.Ack((1,)) in acts and "Fetch" in kinds(acts) and not reconcile_launches(acts)
    assert st.reconcile.run_key == "d:reconcile:0" and st.reconciled_at == {}
    # it succeeds: s.a counts as checked, s.b is next at once; s.a again only after the interval
    st.phase, st.inflight = Phase.IDLE, None
    st, acts = S.step(st, tick(T0 + 40, reconcile_run=S.RunSeen("SUCCESS", "run-rec", seconds=40.0)), REC)
    assert st.reconciled_at == {"s.a": T0 + 40}
    (rec,) = reconcile_launches(acts)
    assert rec.checks == ("s.b",) and rec.run_key == "d:reconcile:1"
    st, acts = S.step(st, tick(T0 + 50, reconcile_run=S.RunSeen("SUCCESS", "run-rec-1", seconds=5.0)), REC)
    assert st.reconciled_at == {"s.a": T0 + 40, "s.b": T0 + 50} and not reconcile_launches(acts)
    assert st.reconcile.run_key is None
    st, acts = S.step(st, tick(T0 + 100), REC)
    assert [r.checks for r in reconcile_launches(acts)] == [("s.a",)]
    assert SensorState.from_cursor(st.to_json()).reconcile == st.reconcile


def test_a_failed_reconcile_run_is_retried_after_a_backoff_and_counts_nothing() -> None:
    st, acts = S.step(SensorState(adopted=True), tick(T0), REC)
    st, acts = S.step(st, tick(T0 + 1, reconcile_run=S.RunSeen("FAILURE", "run-rec", error="Run worker gone")), REC)
    assert st.reconciled_at == {} and not reconcile_launches(acts)
    assert "reconcile run of s.a failed; retrying at" in notes(acts) and "Run worker gone" in notes(acts)
    assert not notes(acts, "error")  # the windows are not concerned: the tick does not fail for it
    assert st.reconcile.failures == 1 and st.reconcile.backoff_until == T0 + 11
    st, acts = S.step(st, tick(T0 + 5), REC)
    assert not reconcile_launches(acts)
    st, acts = S.step(st, tick(T0 + 11), REC)
    (rec,) = reconcile_launches(acts)
    assert rec.checks == ("s.a",) and rec.run_key == "d:reconcile:1"  # a run key is never reused
    # a request whose run never appears counts as a failure after the launch timeout
    st, acts = S.step(st, tick(T0 + 50), REC)
    assert not reconcile_launches(acts) and st.reconcile.run_key == "d:reconcile:1"
    st, acts = S.step(st, tick(T0 + 112), REC)
    assert "never appeared" in notes(acts) and st.reconcile.failures == 2 and st.reconcile.run_key is None


def test_no_reconcile_run_while_the_source_cannot_be_read_nor_when_switched_off() -> None:
    _, acts = S.step(SensorState(adopted=True), tick(T0, DOWN), REC)
    assert not reconcile_launches(acts)
    _, acts = S.step(SensorState(adopted=True), tick(T0), RULES)  # reconcile_interval_seconds 0: on demand only
    assert not reconcile_launches(acts)


def test_a_reset_cursor_numbers_reconcile_runs_after_the_last_one() -> None:
    latest = {"reconcile": S.LatestRun(number=6, done=False, run_id="r6", run_key="d:reconcile:6", status="STARTED")}
    st, acts = S.step(SensorState(), tick(T0, latest=latest), REC)
    (rec,) = reconcile_launches(acts)
    assert rec.run_key == "d:reconcile:7" and st.adopted  # a reconcile run in flight does not hold the reset
