"""The canal sensor's state machine, without I/O: ``step(state, observation, rules) -> (state, actions)``.

The sensor (``pipelines.defs.sensor``) is the edge: it observes (the Dagster runs it launched, the Canal source's
health, the snapshot registry), feeds what it saw to ``step``, and carries out the actions (ack, rollback, fetch,
stage, launch, remove) — some of which produce a new observation (a fetched or staged window) that it feeds back,
until no action is left. Everything that decides lives here and is tested table-driven without Dagster.

Windows (``canal_window`` runs), one at a time. The phase is explicit:

    idle        -> Fetch a bounded window; empty: "no new changes" (or the source's problem); not empty: Stage
                   it, then Launch its run (run key "{destination}:{window}:{attempt}")  -> in_flight
                   (a window without row changes of mirrored tables is acked at once: nothing to apply)
    in_flight   -> the run SUCCEEDED: Ack its batches (unless the source restarted since: its batches are gone and
                   come again from the acked cursor; writes are idempotent), then launch the window staged ahead,
                   or take the next one                                                    -> in_flight / idle
                   FAILED/CANCELED (or never appeared): Rollback, attempt += 1 (a run key is never reused)
                                                                                           -> backing_off
                   still going: stage the next window ahead once, when the last run was shorter than the interval
    backing_off -> after backoff_seconds * 2^(n-1) (at most backoff_max_seconds)            -> idle
    stopped     -> only a deterministic failure gets here: the same error (not an infrastructure fault) on the same
                   window ``max_failures`` times in a row. Resumes by itself when the configuration or code changes
                   (a new code version), or when the cursor is reset.

Infrastructure faults (a run worker or Spark JVM killed, the code server gone, the source or Spark unreachable)
never stop the destination: they back off and retry. Initial snapshots (``canal_snapshot`` runs) follow the same
rules beside the windows (see ``SnapshotState``).

Reconcile checks (``canal_reconcile`` runs, see ``ReconcileState``) run beside the windows too, one run at a time,
for the mirrors checked longest ago (``reconcile_tables_per_run``, none more often than
``reconcile_interval_seconds``). They only read, so they never hold a window back: a check of a large mirror takes
as long as hashing the table on both sides, and a window waiting for it would carry that as lag.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence

from .sensor_cursor import Ahead, InFlight, Phase, ReconcileState, Rules, SensorState, SnapshotState
from .sensor_events import (
    Ack,
    Action,
    Fetch,
    Fetched,
    LatestRun,
    Launch,
    LoadAhead,
    MarkCaughtUp,
    Note,
    Observation,
    Remove,
    Rollback,
    RunSeen,
    SnapshotDone,
    SourceSeen,
    Stage,
    Staged,
    StageFailed,
    Tick,
)
from .sensor_failures import Failure, FailureKind, _fail, classify, signature

__all__ = [
    "Ack",
    "Action",
    "Ahead",
    "Failure",
    "FailureKind",
    "Fetch",
    "Fetched",
    "InFlight",
    "LatestRun",
    "Launch",
    "LoadAhead",
    "MarkCaughtUp",
    "Note",
    "Observation",
    "Phase",
    "ReconcileState",
    "Remove",
    "Rollback",
    "Rules",
    "RunSeen",
    "SensorState",
    "SnapshotDone",
    "SnapshotState",
    "SourceSeen",
    "Stage",
    "StageFailed",
    "Staged",
    "Tick",
    "classify",
    "fmt_ids",
    "position_key",
    "signature",
    "step",
]

AHEAD_RUN_FRACTION = 0.9         # stage ahead only after a run shorter than this part of the interval


def step(state: SensorState, obs: Observation, rules: Rules) -> tuple[SensorState, list[Action]]:
    """The new state and what to do, for one observation. ``state`` is not modified."""
    st = copy.deepcopy(state)
    out: list[Action] = []
    if isinstance(obs, Tick):
        _on_tick(st, obs, rules, out)
    elif isinstance(obs, Fetched):
        _on_fetched(st, obs, rules, out)
    elif isinstance(obs, Staged):
        _on_staged(st, obs, rules, out)
    elif isinstance(obs, StageFailed):
        _on_stage_failed(st, obs, rules, out)
    else:  # pragma: no cover - the union is closed
        raise TypeError(f"not an observation: {obs!r}")
    return st, out


def _seen(st: SensorState) -> Tick:
    if st.seen is None:
        raise AssertionError("a Fetched/Staged/StageFailed observation without the tick it follows")
    return st.seen


def _clock(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%H:%M:%S UTC")


def _on_tick(st: SensorState, t: Tick, r: Rules, out: list[Action]) -> None:
    st.seen = t
    if not st.adopted:
        busy = _adopt(st, t)
        if busy:
            out.append(Note(busy))
            return
    _resume_after_change(st, t, out)
    _drive_snapshot(st, t, r, out)
    _drive_reconcile(st, t, r, out)
    _drive_window(st, t, r, out)


def _adopt(st: SensorState, t: Tick) -> str:
    """A fresh cursor continues the numbering of this destination's runs (Dagster drops a request whose run key
    was used before); "" or why to wait for a writer."""
    run = t.latest.get("reconcile")
    if run is not None:  # it only reads: nothing to wait for
        st.reconcile.n = max(st.reconcile.n, run.number + 1)
    for kind in ("window", "snapshot"):
        run = t.latest.get(kind)
        if run is None:
            continue
        if not run.done:
            return (f"cursor was reset while {kind} run {run.run_id} ({run.run_key}) is {run.status}: waiting for it "
                    "to finish")
        if kind == "window":
            st.window = max(st.window, run.number + 1)
        else:
            st.snapshot.n = max(st.snapshot.n, run.number + 1)
    st.adopted = True
    return ""


def _resume_after_change(st: SensorState, t: Tick, out: list[Action]) -> None:
    """A stop waits for a fix: a new code version (configuration or code reloaded) is one."""
    if st.phase == Phase.STOPPED and t.code_version and st.stopped_version != t.code_version:
        out.append(Note(f"resuming window {st.window}: the configuration or code changed since it stopped "
                        f"({st.stopped})"))
        st.phase, st.stopped, st.failures, st.last_error, st.backoff_until = Phase.IDLE, None, 0, None, 0.0
    snap = st.snapshot
    if snap.stopped and t.code_version and snap.stopped_version != t.code_version:
        out.append(Note("resuming initial snapshots: the configuration or code changed since they stopped"))
        snap.stopped, snap.failures, snap.last_error, snap.backoff_until = None, 0, None, 0.0


def _drive_window(st: SensorState, t: Tick, r: Rules, out: list[Action]) -> None:
    if st.phase == Phase.IN_FLIGHT:
        infl = st.inflight
        assert infl is not None
        run = t.window_run
        if run is None or run.status is None:
            if t.now - infl.launched_at < r.launch_timeout_seconds:
                out.append(Note(f"window {infl.window} attempt {infl.attempt}: run {infl.run_key} requested, not "
                                "created yet"))
                return
            _window_failed(st, t, r, out, infl.run_key,
                           f"run {infl.run_key} never appeared within {r.launch_timeout_seconds:.0f} s")
        elif run.status == "SUCCESS":
            st.last_run_seconds = run.seconds
            _window_succeeded(st, t, out)
        elif run.done:
            _window_failed(st, t, r, out, run.run_id, run.error or f"run {run.status}")
        else:
            out.append(Note(f"window {infl.window} attempt {infl.attempt}: run {run.run_id} is {run.status}"))
            _maybe_stage_ahead(st, t, r, out)
            return
        if st.phase == Phase.STOPPED or (st.phase == Phase.BACKING_OFF and t.now < st.backoff_until):
            return  # the failure was just recorded, with its note
    if st.phase == Phase.STOPPED:
        out.append(Note(f"STOPPED: {st.stopped}", "error"))
        return
    if st.phase == Phase.BACKING_OFF:
        if t.now < st.backoff_until:
            err = st.last_error
            out.append(Note(f"window {st.window} failed {st.failures} time(s) in a row; retrying at "
                            f"{_clock(st.backoff_until)}. Last error ({err.kind if err else '?'}): "
                            f"{err.message if err else '?'}", "error"))
            return
        st.phase = Phase.IDLE
    if st.ahead is not None:
        out.append(LoadAhead(st.ahead.path, st.ahead.window))
        return
    _take(st, out)


def _take(st: SensorState, out: list[Action]) -> None:
    out.append(Rollback())  # batches left by an interrupted evaluation come again
    out.append(Fetch("take"))


def _window_succeeded(st: SensorState, t: Tick, out: list[Action]) -> None:
    infl = st.inflight
    assert infl is not None
    epoch = t.source.epoch
    if infl.batch_ids:
        if epoch and epoch == infl.epoch:
            out.append(Ack(tuple(infl.batch_ids)))
        else:
            out.append(Note(f"window {infl.window} applied after a source restart: its batches are gone and come "
                            "again from the acked cursor (writes are idempotent)"))
    if st.ahead is not None and st.ahead.epoch != epoch:
        out.append(Remove(path=st.ahead.path))  # its batches went with the restart: they come again
        st.ahead = None
    if infl.catch_up:
        _mark_caught_up(st, infl.catch_up, out)
    for table in infl.checks:  # a run launched with its checks by an older version
        st.reconciled_at[table] = t.now
    st.applied_through, st.applied_position = infl.end_key, infl.end
    if infl.end_ms:
        st.applied_ms = infl.end_ms
    if infl.gtid:
        st.applied_gtid = infl.gtid
    out.append(Remove(window=infl.window))
    st.window, st.attempt, st.failures = infl.window + 1, 0, 0
    st.backoff_until, st.inflight, st.last_error, st.phase = 0.0, None, None, Phase.IDLE


def _window_failed(st: SensorState, t: Tick, r: Rules, out: list[Action], run_id: str, error: str) -> None:
    infl = st.inflight
    assert infl is not None
    if t.source.epoch and t.source.epoch == infl.epoch:
        out.append(Rollback())  # the batches staged ahead too
    if st.ahead is not None:
        out.append(Remove(path=st.ahead.path))
        st.ahead = None
    message = f"run {run_id}: {error}"
    kind = classify(error)
    if kind == FailureKind.DATA and not t.source.ok:
        kind = FailureKind.INFRA  # the source is down: this failure says nothing about the window's data
    st.inflight = None
    _record_failure(st, t, r, out, infl.window, infl.attempt, kind, message)


def _record_failure(st: SensorState, t: Tick, r: Rules, out: list[Action], window: int, attempt: int,
                    kind: FailureKind, message: str) -> None:
    st.failures += 1
    st.attempt = attempt + 1
    st.last_error = err = _fail(st.last_error, kind, message, t.now)
    if kind == FailureKind.DATA and err.count >= r.max_failures:
        st.phase = Phase.STOPPED
        st.stopped_version = t.code_version
        st.stopped = (f"window {window} failed {err.count} times in a row with the same error (sensor.max_failures="
                      f"{r.max_failures}); last: {message}. Nothing after it was acked: the window is rolled back. "
                      "Fix the cause; the destination resumes by itself once the configuration or code changes "
                      "(code location reloaded), or reset this sensor's cursor to retry as is.")
        out.append(Note(f"STOPPED: {st.stopped}", "error"))
        return
    st.phase = Phase.BACKING_OFF
    st.backoff_until = t.now + r.backoff(st.failures)
    what = "retried until it works" if kind == FailureKind.INFRA else (
        f"{err.count} of {r.max_failures} identical failures before it stops")
    out.append(Note(f"window {window} attempt {attempt} failed ({kind}: {what}); retrying at "
                    f"{_clock(st.backoff_until)}. {message}", "error"))


def _maybe_stage_ahead(st: SensorState, t: Tick, r: Rules, out: list[Action]) -> None:
    """Stage the window after the in-flight one while its run is going. Not when the last run took most of the
    interval (this one likely spans the next tick too: a window taken then is fresher, at the same cycle), nor
    past batches an interrupted evaluation left outstanding (only a rollback brings their entries back)."""
    infl = st.inflight
    assert infl is not None
    if not r.stage_ahead or st.ahead is not None:
        return
    last = st.last_run_seconds
    if last is None or last > AHEAD_RUN_FRACTION * r.interval_seconds:
        return
    src = t.source
    if not src.epoch or src.epoch != infl.epoch:
        return  # the in-flight window's batches are gone: after its run the next window is taken afresh
    if src.outstanding is not None and list(src.outstanding) != infl.batch_ids:
        out.append(Note(f"not staging ahead: the source has batches {fmt_ids(src.outstanding)} outstanding, the "
                        f"in-flight window {fmt_ids(infl.batch_ids)}"))
        return
    out.append(Fetch("ahead"))


def _on_fetched(st: SensorState, f: Fetched, r: Rules, out: list[Action]) -> None:
    ctx = _seen(st)
    if f.purpose == "ahead":
        if f.batch_ids and st.inflight is not None:
            out.append(Stage("ahead", st.inflight.window + 1, 0))
        return
    if f.batch_ids:
        out.append(Stage("take", st.window, st.attempt))
        return
    if ctx.source.ok and ctx.source.streaming:
        st.caught_up_at = ctx.now
        out.append(Note("no new changes"))
    elif ctx.source.ok:
        out.append(Note("no new changes yet: the source is connecting"))
    else:
        since = f" since {_clock(ctx.source.since)}" if ctx.source.since else ""
        out.append(Note(f"CANNOT READ THE SOURCE{since}: {ctx.source.problem}", "error"))
    _catch_up_run(st, r, out)


def _on_stage_failed(st: SensorState, f: StageFailed, r: Rules, out: list[Action]) -> None:
    if f.purpose == "ahead":
        # its batches stay outstanding, so nothing is staged ahead past them; once the in-flight run is done they
        # are rolled back and the error comes again from the usual staging
        out.append(Note(f"staging window {f.window} ahead failed ({f.error}); it is taken again after the in-flight "
                        "run"))
        return
    out.append(Rollback())
    if f.purpose == "launch_ahead":  # the window staged ahead vanished or is damaged: taken afresh next tick
        if st.ahead is not None:
            out.append(Remove(path=st.ahead.path))
        st.ahead = None
        out.append(Note(f"window {f.window} staged ahead is unusable ({f.error}): it is taken again"))
        return
    _record_failure(st, _seen(st), r, out, f.window, st.attempt, classify(f.error), f"staging: {f.error}")


def _on_staged(st: SensorState, s: Staged, r: Rules, out: list[Action]) -> None:
    ctx = _seen(st)
    if s.purpose == "ahead":
        st.ahead = Ahead(window=s.window, batch_ids=list(s.batch_ids), epoch=s.epoch, path=s.path)
        out.append(Note(f"window {s.window}: {s.rows} rows {s.start}..{s.end} staged ahead, launched once window "
                        f"{s.window - 1} succeeded"))
        return
    if s.purpose == "launch_ahead":
        st.ahead = None
        if s.window != st.window:  # cannot happen: ahead is always the window after the applied one
            raise AssertionError(f"window staged ahead is {s.window}, next to apply is {st.window}")
    known = set(r.tables)
    if s.rows == 0 and not (set(s.ddl_tables) & known):
        # DDL of tables without a mirror (CREATE DATABASE, other schemas' tables), transaction markers, heartbeats
        out.append(Ack(s.batch_ids))
        out.append(Remove(path=s.path))
        st.applied_through, st.applied_position = s.end_key, s.end
        if s.end_ms:
            st.applied_ms = s.end_ms
        out.append(Note(f"window {st.window}: {s.entries} entries without row changes of mirrored tables "
                        f"(transaction markers, heartbeats, other DDL), acked through {s.end}"))
        st.window, st.attempt = st.window + 1, 0
        _catch_up_run(st, r, out)
        return
    pending = set(ctx.pending)
    catch_up = {t: p for t, p in ctx.catch_up.items() if t in known}
    mirrors = sorted((set(s.tables) | set(s.ddl_tables) | set(catch_up)) & (known - pending))
    unmapped = sorted(set(s.tables) - known)
    if unmapped:
        out.append(Note(f"window {st.window}: no mirror for {', '.join(unmapped)} (not in the table list loaded with "
                        "the definitions: reload the code location); changelog only"))
    run_catch_up = {t: catch_up[t] for t in mirrors if t in catch_up}
    run_key = f"{r.destination}:{st.window}:{st.attempt}"
    st.inflight = InFlight(
        window=st.window, attempt=st.attempt, run_key=run_key, batch_ids=list(s.batch_ids), epoch=s.epoch,
        path=s.path, end_key=s.end_key, end=s.end, launched_at=ctx.now, tables=mirrors, catch_up=run_catch_up,
        end_ms=s.end_ms, gtid=s.gtid)
    st.phase = Phase.IN_FLIGHT
    tags = {
        "canal/batch_ids": fmt_ids(s.batch_ids),
        "canal/start": s.start,
        "canal/end": s.end,
        "canal/gtid": s.gtid,
        "canal/rows": str(s.rows),
    }
    if run_catch_up:
        tags["canal/catch_up"] = ",".join(sorted(run_catch_up))
    out.append(Note(f"window {st.window} attempt {st.attempt}: {s.rows} rows {s.start}..{s.end}"))
    out.append(Launch(kind="window", run_key=run_key, tables=tuple(mirrors), changelog=True, path=s.path,
                      catch_up=run_catch_up, tags={**tags, **_partition_tags(s.partitions)}))


def _partition_tags(partitions: tuple[str, str] | None) -> dict[str, str]:
    if partitions is None:
        return {}
    return {"dagster/asset_partition_range_start": partitions[0], "dagster/asset_partition_range_end": partitions[1]}


def _drive_reconcile(st: SensorState, t: Tick, r: Rules, out: list[Action]) -> None:
    rec = st.reconcile
    if rec.run_key is not None:
        run = t.reconcile_run
        if run is None or run.status is None:
            if t.now - rec.launched_at < r.launch_timeout_seconds:
                return
            _reconcile_failed(st, t, r, out, f"run {rec.run_key} never appeared within "
                                             f"{r.launch_timeout_seconds:.0f} s")
        elif run.status == "SUCCESS":  # whatever the checks found: they reported it on the mirrors
            for table in rec.tables:
                st.reconciled_at[table] = t.now
            st.reconcile = ReconcileState(n=rec.n + 1)
        elif run.done:
            _reconcile_failed(st, t, r, out, f"run {run.run_id}: {run.error or run.status}")
        else:
            return
        rec = st.reconcile
    if t.now < rec.backoff_until or not t.source.ok:
        return  # the check reads the source: a source that cannot be read fails it for that reason only
    # a mirror still catching up from its snapshot is reconciled once it has (its replay starts at the snapshot)
    due = _due_checks(st, r, t.now, set(r.tables) - set(t.pending) - set(t.catch_up))
    if not due:
        return
    rec.tables, rec.launched_at = list(due), t.now
    rec.run_key = f"{r.destination}:reconcile:{rec.n}"
    out.append(Launch(kind="reconcile", run_key=rec.run_key, tables=(), checks=due,
                      tags={"canal/reconcile": str(rec.n), "canal/tables": ",".join(due)}))


def _reconcile_failed(st: SensorState, t: Tick, r: Rules, out: list[Action], error: str) -> None:
    """A run that did not finish (its checks report on the mirrors when they ran): retried after a backoff."""
    rec = st.reconcile
    failures = rec.failures + 1
    st.reconcile = ReconcileState(n=rec.n + 1, failures=failures, backoff_until=t.now + r.backoff(failures))
    out.append(Note(f"reconcile run of {', '.join(rec.tables)} failed; retrying at "
                    f"{_clock(st.reconcile.backoff_until)}. {error}"))


def _due_checks(st: SensorState, r: Rules, now: float, mirrored: set[str]) -> tuple[str, ...]:
    """The reconcile checks of the next reconcile run: the mirrors checked longest ago, at most
    reconcile_tables_per_run, none more often than reconcile_interval_seconds."""
    if r.reconcile_interval_seconds <= 0 or r.reconcile_tables_per_run <= 0:
        return ()
    due = [t for t in sorted(mirrored) if now - st.reconciled_at.get(t, 0.0) >= r.reconcile_interval_seconds]
    due.sort(key=lambda t: (st.reconciled_at.get(t, 0.0), t))
    return tuple(sorted(due[: r.reconcile_tables_per_run]))


def _mark_caught_up(st: SensorState, positions: Mapping[str, str], out: list[Action]) -> None:
    """The registry is told; the rest of this evaluation sees the tables as caught up already."""
    out.append(MarkCaughtUp(dict(positions)))
    if st.seen is not None:
        left = {t: p for t, p in st.seen.catch_up.items() if positions.get(t) != p}
        st.seen = dataclasses.replace(st.seen, catch_up=left)


def _catch_up_run(st: SensorState, r: Rules, out: list[Action]) -> None:
    """No window to carry them: catch the snapshotted mirrors up to the applied position on their own (a quiet
    source must not leave a new mirror behind the changelog)."""
    ctx = _seen(st)
    if st.applied_through is None or st.phase != Phase.IDLE:
        return  # nothing applied since the cursor began: the next window carries the catch-up
    known, pending = set(r.tables), set(ctx.pending)
    todo = {t: p for t, p in ctx.catch_up.items() if t in known and t not in pending}
    ahead = {t: p for t, p in todo.items() if position_key(p) > st.applied_through}
    if ahead:  # the snapshot is past everything applied: later changes below it are skipped by position
        _mark_caught_up(st, ahead, out)
    todo = {t: p for t, p in todo.items() if t not in ahead}
    if not todo:
        return
    run_key = f"{r.destination}:{st.window}:{st.attempt}"
    st.inflight = InFlight(
        window=st.window, attempt=st.attempt, run_key=run_key, batch_ids=[], epoch=ctx.source.epoch, path="",
        end_key=st.applied_through, end=st.applied_position, launched_at=ctx.now, tables=sorted(todo),
        catch_up=todo, end_ms=st.applied_ms, gtid=st.applied_gtid)
    st.phase = Phase.IN_FLIGHT
    out.append(Note(f"catch-up {st.window} attempt {st.attempt} of {', '.join(sorted(todo))} up to "
                    f"{st.applied_position}"))
    out.append(Launch(kind="catch_up", run_key=run_key, tables=tuple(sorted(todo)), catch_up=todo,
                      catch_up_end=st.applied_position,
                      tags={"canal/end": st.applied_position, "canal/rows": "0",
                            "canal/catch_up": ",".join(sorted(todo))}))


def _drive_snapshot(st: SensorState, t: Tick, r: Rules, out: list[Action]) -> None:
    snap = st.snapshot
    if snap.run_key is not None:
        run = t.snapshot_run
        if run is None or run.status is None:
            if t.now - snap.launched_at < r.launch_timeout_seconds:
                out.append(Note(f"snapshot of {', '.join(snap.tables)} requested, not created yet"))
                return
            _snapshot_failed(st, t, r, out, snap.run_key, "the run never appeared")
        elif run.status == "SUCCESS":
            out.append(SnapshotDone(run.run_id, tuple(snap.tables)))
            st.snapshot = snap = SnapshotState(n=snap.n + 1)
        elif run.done:
            _snapshot_failed(st, t, r, out, run.run_id, run.error or f"run {run.status}")
        else:
            out.append(Note(f"snapshot of {', '.join(snap.tables)} is {run.status} (run {run.run_id})"))
            return
    pending = [p for p in t.pending if p in r.tables]
    if not pending:
        return
    if snap.stopped:
        out.append(Note(f"SNAPSHOT STOPPED: {snap.stopped}", "error"))
        return
    if t.now < snap.backoff_until:
        err = snap.last_error
        out.append(Note(f"snapshot of {', '.join(pending)} retrying at {_clock(snap.backoff_until)}; last error: "
                        f"{err.message if err else '?'}", "error"))
        return
    snap.tables = pending
    snap.run_key = f"{r.destination}:snapshot:{snap.n}:{snap.attempt}"
    snap.launched_at = t.now
    out.append(Note(f"snapshot {snap.n} attempt {snap.attempt} of {', '.join(pending)}"))
    out.append(Launch(kind="snapshot", run_key=snap.run_key, tables=tuple(pending),
                      tags={"canal/snapshot": str(snap.n), "canal/tables": ",".join(pending)}))


def _snapshot_failed(st: SensorState, t: Tick, r: Rules, out: list[Action], run_id: str, error: str) -> None:
    snap = st.snapshot
    kind = classify(error)
    if kind == FailureKind.DATA and not t.source.ok:
        kind = FailureKind.INFRA
    snap.failures += 1
    snap.attempt += 1
    snap.run_key = None
    message = f"run {run_id}: {error}"
    snap.last_error = err = _fail(snap.last_error, kind, message, t.now)
    snap.backoff_until = t.now + r.backoff(snap.failures)
    if kind == FailureKind.DATA and err.count >= r.max_failures:
        snap.stopped_version = t.code_version
        snap.stopped = (f"snapshot of {', '.join(snap.tables)} failed {err.count} times in a row with the same error; "
                        f"last: {message}. Windows go on without these mirrors; fix the cause (the snapshots resume "
                        "once the configuration or code changes), or reset this sensor's cursor.")
    else:
        out.append(Note(f"snapshot of {', '.join(snap.tables)} failed ({kind}); retrying at "
                        f"{_clock(snap.backoff_until)}. {message}", "error"))


def fmt_ids(ids: Sequence[int]) -> str:
    """Batch ids as compact ranges ("3-7,9"): they are consecutive in practice."""
    out: list[str] = []
    i = 0
    ids = list(ids)
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(out)


def position_key(text: str) -> int:
    from .window import parse_position

    return parse_position(text).key
