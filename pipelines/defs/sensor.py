"""The canal sensor: the one driver of a destination, as a Dagster sensor.

This module is the edge of ``pipelines.engine.sensor_state``'s state machine: it observes (the runs it launched, the
Canal source's health, the snapshot registry), lets ``step`` decide, and carries out the actions (ack, rollback,
fetch, stage, launch, remove), feeding their results back until none is left. The machine's module doc gives
the phases; ``pipelines.defs.status`` what the sensor reports on the mirrors (the ``lag`` check, freshness).

What the UI shows: a tick that launches runs is a success; one that waits for a run or finds no new changes is
skipped with what it waits for; one where the destination cannot progress (the source unreadable, a failed
window backing off, stopped) FAILS with the reason and what to do, and clears by itself once resolved. A tick
fails only when it has nothing to persist, so failing never loses a state change.
"""

from __future__ import annotations

import datetime as dt
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dagster import (
    AssetKey,
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    sensor,
)

from ..engine import sensor_state as S
from ..engine.config import PipelineConfig
from ..engine.registry import registry_for, snapshot_data_dir, window_dir
from ..engine.source import CanalSource, FetchedWindow, SourceUnavailable
from ..engine.window import WindowManifest, format_position
from .assets.keys import keys_for, sensor_name
from .dagster_compat import RUN_KEY_TAG, user_error
from .launcher import max_runtime_tags

log = logging.getLogger(__name__)

STAGING_RESERVE_SECONDS = 15.0   # of the evaluation deadline, kept for staging and the run request
TAG_PREFIX = "canal/"
TAG_DESTINATION = "canal/destination"
TAG_KIND = "canal/kind"
TAG_WINDOW = "canal/window"
TAG_ATTEMPT = "canal/attempt"
TAG_SNAPSHOT = "canal/snapshot"
TAG_RECONCILE = "canal/reconcile"
_NUMBER_TAG = {"window": TAG_WINDOW, "snapshot": TAG_SNAPSHOT, "reconcile": TAG_RECONCILE}
_MAX_TAG = 2000

StageFn = Callable[..., WindowManifest]


class DestinationNotProgressing(Exception):
    """Raised by an evaluation that has nothing to persist while the destination cannot progress: Dagster then
    shows the tick as failed, with this message."""


# --- run lookups --------------------------------------------------------------------------------------------

def find_run(instance: DagsterInstance, run_key: str) -> DagsterRun | None:
    runs = instance.get_runs(filters=RunsFilter(tags={RUN_KEY_TAG: run_key}), limit=1)
    return runs[0] if runs else None


def run_error(instance: DagsterInstance, run: DagsterRun) -> str:
    """The first step failure's error (else the run failure message), one line."""
    records = instance.get_records_for_run(
        run.run_id, of_type={DagsterEventType.STEP_FAILURE, DagsterEventType.RUN_FAILURE}, limit=20).records
    for want in (DagsterEventType.STEP_FAILURE, DagsterEventType.RUN_FAILURE):
        for r in records:
            ev = r.event_log_entry.dagster_event
            if ev is None or ev.event_type != want:
                continue
            if want is DagsterEventType.STEP_FAILURE and ev.step_failure_data and ev.step_failure_data.error:
                err = user_error(ev.step_failure_data.error)
                return f"{ev.step_key}: {_one_line(err.message)}"
            if ev.message:
                return _one_line(ev.message)
    return f"run {run.status.value}"


def _run_seconds(instance: DagsterInstance, run: DagsterRun) -> float | None:
    """Requested (created) -> ended, from the run's record."""
    rec = instance.get_run_record_by_id(run.run_id)
    if rec is None or rec.end_time is None:
        return None
    return max(0.0, rec.end_time - rec.create_timestamp.timestamp())


def _one_line(text: str, limit: int = 500) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    out = lines[-1] if lines else ""
    for ln in lines:  # Dagster wraps user errors: prefer the line naming the exception
        if ":" in ln and ln.split(":", 1)[0].rsplit(".", 1)[-1].endswith(("Error", "Exception", "Failure")):
            out = ln
            break
    return out[:limit]


def _seen(instance: DagsterInstance, run_key: str | None) -> S.RunSeen | None:
    if run_key is None:
        return None
    run = find_run(instance, run_key)
    if run is None:
        return S.RunSeen(status=None)
    status = run.status.value
    if run.status in (DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED):
        return S.RunSeen(status, run.run_id, error=run_error(instance, run))
    if run.status == DagsterRunStatus.SUCCESS:
        return S.RunSeen(status, run.run_id, seconds=_run_seconds(instance, run))
    return S.RunSeen(status, run.run_id)


def _latest(instance: DagsterInstance, destination: str, kind: str) -> S.LatestRun | None:
    runs = instance.get_runs(filters=RunsFilter(tags={TAG_DESTINATION: destination, TAG_KIND: kind}), limit=1)
    if not runs:
        return None
    run = runs[0]
    number = int(run.tags.get(_NUMBER_TAG[kind], "-1"))
    return S.LatestRun(number=number, done=run.is_finished, run_id=run.run_id,
                       run_key=run.tags.get(RUN_KEY_TAG, ""), status=run.status.value)


# --- staged windows as the machine sees them ------------------------------------------------------------------

def _partition_range(config: PipelineConfig, window_path: Path, manifest: WindowManifest) -> tuple[str, str]:
    """The UTC dates of the window's row changes (changelog.parquet's event_date), within the partitions."""
    from .assets.partitions import first_partition_day

    dates: list[dt.date] = []
    if manifest.changelog:
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        col = pq.read_table(window_path / manifest.changelog, columns=["event_date"]).column("event_date")
        mm = pc.min_max(col).as_py()
        dates = [d for d in (mm["min"], mm["max"]) if d is not None]
    if not dates:
        ts = manifest.end.timestamp_ms or manifest.created_ms or int(time.time() * 1000)
        day = dt.datetime.fromtimestamp(ts / 1000, dt.UTC).date()
        dates = [day, day]
    first = first_partition_day(config)
    last = dt.datetime.now(dt.UTC).date()  # the partitions end today (end_offset=1)
    lo, hi = (min(max(d, first), last) for d in (min(dates), max(dates)))
    return lo.isoformat(), hi.isoformat()


def staged_view(config: PipelineConfig, purpose: str, path: Path, manifest: WindowManifest, epoch: str,
                batch_ids: Sequence[int]) -> S.Staged:
    from ..engine.lake.window_ddl import rename_statements  # no Spark: the DDL parser only

    ddl = [f"{d.schema}.{d.table}" for d in manifest.ddl if d.table]
    # a RENAME entry names the new table (Canal's header): the renamed one's mirror is in the run too
    ddl += [f"{s}.{t}" for _, pairs in rename_statements(manifest) for pair in pairs for s, t in pair]
    partitions = _partition_range(config, path, manifest) if manifest.rows else None
    return S.Staged(
        purpose=purpose, window=manifest.window, attempt=manifest.attempt, path=str(path), batch_ids=tuple(batch_ids),
        epoch=epoch, rows=manifest.rows, entries=manifest.entries, start=format_position(manifest.start),
        end=format_position(manifest.end), end_key=manifest.end.key, end_ms=manifest.end.timestamp_ms,
        gtid=(manifest.end.gtid or "")[:_MAX_TAG], tables=tuple(t.name for t in manifest.tables),
        ddl_tables=tuple(dict.fromkeys(ddl)), partitions=partitions)


# --- the sensor -------------------------------------------------------------------------------------------------

class CanalSensor:
    """The edge around the state machine; ``definition()`` wraps it as a Dagster sensor. ``source_factory`` and
    ``stage`` are injectable for tests; the defaults are the configured source and
    pipelines.engine.staging.stage_window."""

    def __init__(self, config: PipelineConfig, tables: Sequence[str], *,
                 source_factory: Callable[[], CanalSource] | None = None, stage: StageFn | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.tables = list(tables)
        self.registry = registry_for(config)
        self._source_factory = source_factory
        self._stage = stage
        self.clock = clock

    @property
    def name(self) -> str:
        return sensor_name(self.config)

    @property
    def rules(self) -> S.Rules:
        c, s = self.config, self.config.sensor
        return S.Rules(
            destination=c.destination, tables=tuple(self.tables), interval_seconds=s.interval_seconds,
            max_failures=s.max_failures, backoff_seconds=s.backoff_seconds, backoff_max_seconds=s.backoff_max_seconds,
            launch_timeout_seconds=s.launch_timeout_seconds, stage_ahead=c.window.stage_ahead,
            reconcile_interval_seconds=s.reconcile_interval_seconds,
            reconcile_tables_per_run=s.reconcile_tables_per_run)

    def source(self) -> CanalSource:
        if self._source_factory is not None:
            return self._source_factory()
        from ..engine.source import make_source

        return make_source(self.config)

    def stage(self, entries: list[bytes], **kw: Any) -> WindowManifest:
        if self._stage is not None:
            return self._stage(entries, **kw)
        from ..engine.staging import stage_window

        return stage_window(entries, **kw)

    # --- evaluation ------------------------------------------------------------------------------------------

    def evaluate(self, context: SensorEvaluationContext) -> SensorResult:
        from .status import report

        deadline = time.monotonic() + self.config.sensor.deadline_seconds
        state = S.SensorState.from_cursor(context.cursor)
        before = state.to_json()
        tick = self._observe(context.instance, state)
        state, actions = S.step(state, tick, self.rules)
        run = _Evaluation(self, context.instance, deadline)
        state = run.carry_out(state, actions)
        cursor = state.to_json()
        report(context.instance, self.config, self.tables, state, tick)
        notes = [n.text for n in run.notes]
        if run.requests:
            for n in notes:
                context.log.info(n)
            return SensorResult(run_requests=run.requests, cursor=cursor)
        message = " ".join(notes) or "nothing to do"
        if any(n.level == "error" for n in run.notes) and cursor == before:
            raise DestinationNotProgressing(message)
        return SensorResult(skip_reason=message, cursor=cursor)

    def _observe(self, instance: DagsterInstance, state: S.SensorState) -> S.Tick:
        from .status import code_version

        pending = tuple(self.registry.pending(self.tables))
        latest: dict[str, S.LatestRun] = {}
        if not state.adopted:
            for kind in _NUMBER_TAG:
                seen = _latest(instance, self.config.destination, kind)
                if seen is not None:
                    latest[kind] = seen
        return S.Tick(
            now=self.clock(), source=self._source_seen(), code_version=code_version(self.config),
            window_run=_seen(instance, state.inflight.run_key if state.inflight else None),
            snapshot_run=_seen(instance, state.snapshot.run_key),
            reconcile_run=_seen(instance, state.reconcile.run_key), pending=pending,
            catch_up=self.registry.catch_up(), latest=latest)

    def _source_seen(self) -> S.SourceSeen:
        try:
            source = self.source()
            epoch = source.epoch  # starts an embedded instance on first use
            outstanding = source.outstanding()
            health = source.health()
        except SourceUnavailable as e:
            return S.SourceSeen(ok=False, problem=str(e), problem_kind="unavailable", since=0.0)
        return S.SourceSeen(epoch=epoch, outstanding=tuple(outstanding) if outstanding is not None else None,
                            ok=health.ok, problem=health.problem, problem_kind=health.kind, since=health.since,
                            streaming=health.streaming)

    # --- Dagster ---------------------------------------------------------------------------------------------

    def definition(self, jobs: Sequence[Any]) -> SensorDefinition:
        @sensor(name=self.name, jobs=list(jobs), minimum_interval_seconds=self.config.sensor.interval_seconds,
                default_status=DefaultSensorStatus.RUNNING,
                description=f"Drives Canal destination {self.config.destination!r}: takes a bounded binlog window, "
                            "stages it, runs canal_window, acks after success; launches initial snapshots and the "
                            "mirrors' reconcile checks (canal_reconcile) beside the windows. A failed "
                            "tick means the destination cannot progress: its message says why and what to do.")
        def canal_sensor(context: SensorEvaluationContext) -> SensorResult:
            return self.evaluate(context)

        return canal_sensor


class _Evaluation:
    """One evaluation's side of the machine: carries out actions, feeds their results back."""

    def __init__(self, sensor: CanalSensor, instance: DagsterInstance, deadline: float) -> None:
        self.sensor = sensor
        self.config = sensor.config
        self.instance = instance
        self.deadline = deadline
        self.requests: list[RunRequest] = []
        self.notes: list[S.Note] = []
        self._fetched: dict[str, tuple[FetchedWindow, str]] = {}  # purpose -> (window, its source epoch)

    def carry_out(self, state: S.SensorState, actions: list[S.Action]) -> S.SensorState:
        queue = list(actions)
        while queue:
            action = queue.pop(0)
            obs = self._do(action)
            if obs is not None:
                state, more = S.step(state, obs, self.sensor.rules)
                queue[:0] = more  # an action's consequences come before the actions after it
        return state

    def _do(self, a: S.Action) -> S.Observation | None:
        if isinstance(a, S.Note):
            self.notes.append(a)
        elif isinstance(a, S.Ack):
            self._ack(a.batch_ids)
        elif isinstance(a, S.Rollback):
            self._rollback()
        elif isinstance(a, S.Fetch):
            return self._fetch(a.purpose)
        elif isinstance(a, S.Stage):
            return self._stage(a)
        elif isinstance(a, S.LoadAhead):
            return self._load_ahead(a)
        elif isinstance(a, S.Remove):
            self._remove(a)
        elif isinstance(a, S.MarkCaughtUp):
            self.sensor.registry.mark_caught_up(a.positions)
        elif isinstance(a, S.SnapshotDone):
            missing = self.sensor.registry.pending(a.tables)
            if missing:  # the run recorded no snapshot for these: they stay pending, the next run takes them
                log.warning("snapshot run %s recorded nothing for %s", a.run_id, missing)
            shutil.rmtree(snapshot_data_dir(self.config, a.run_id), ignore_errors=True)
        elif isinstance(a, S.Launch):
            self.requests.append(self._request(a))
        return None

    def _ack(self, batch_ids: Sequence[int]) -> None:
        try:
            self.sensor.source().ack(batch_ids)
        except Exception as e:  # e.g. a batch already gone: the next window rolls back and redelivers
            log.warning("ack of batches %s failed: %s", S.fmt_ids(batch_ids), e)

    def _rollback(self) -> None:
        try:
            self.sensor.source().rollback()
        except SourceUnavailable as e:  # a new connection rolls back anyway
            log.warning("rollback: %s", e)

    def _fetch(self, purpose: str) -> S.Observation:
        cfg = self.config
        max_wait = min(cfg.window.max_wait_seconds,
                       max(0.0, self.deadline - time.monotonic() - STAGING_RESERVE_SECONDS))
        source = self.sensor.source()
        try:
            epoch = source.epoch
            fetched = source.get_window(cfg.window.max_rows, cfg.window.max_bytes, max_wait)
        except SourceUnavailable as e:
            log.warning("fetch: %s", e)
            return S.Fetched(purpose, (), "")
        self._fetched[purpose] = (fetched, epoch)
        return S.Fetched(purpose, tuple(fetched.batch_ids), epoch, fetched.rows)

    def _stage(self, a: S.Stage) -> S.Observation:
        cfg = self.config
        fetched, epoch = self._fetched.pop(a.purpose)
        path = window_dir(cfg, a.window, a.attempt)
        try:
            if path.exists():
                shutil.rmtree(path)  # a partial staging of an interrupted evaluation
            manifest = self.sensor.stage(fetched.entries, root=cfg.staging_root, destination=cfg.destination,
                                         window=a.window, attempt=a.attempt, batch_ids=fetched.batch_ids,
                                         timezone=cfg.timezone)
        except Exception as e:
            log.exception("staging window %d failed", a.window)
            shutil.rmtree(path, ignore_errors=True)
            return S.StageFailed(a.purpose, a.window, f"{type(e).__name__}: {_one_line(str(e), 300)}")
        return staged_view(cfg, a.purpose, path, manifest, epoch, fetched.batch_ids)

    def _load_ahead(self, a: S.LoadAhead) -> S.Observation:
        from ..engine.staging import IncompleteWindowError, load_window

        state_ahead = Path(a.path)
        try:
            manifest = load_window(state_ahead)
        except (IncompleteWindowError, OSError, ValueError) as e:  # removed or damaged since: take it afresh
            log.warning("window %d staged ahead at %s is unusable (%s): taking it again", a.window, a.path, e)
            return S.StageFailed("launch_ahead", a.window, f"{type(e).__name__}: {e}")
        return staged_view(self.config, "launch_ahead", state_ahead, manifest, self.sensor.source().epoch,
                           manifest.batch_ids)

    def _remove(self, a: S.Remove) -> None:
        if a.path:
            shutil.rmtree(a.path, ignore_errors=True)
        if a.window is not None:
            root = self.config.staging_root / self.config.destination
            for d in root.glob(f"w{a.window:012d}-a*"):
                shutil.rmtree(d, ignore_errors=True)

    def _request(self, a: S.Launch) -> RunRequest:
        cfg = self.config
        keys = keys_for(cfg)
        window, attempt = a.run_key.rsplit(":", 2)[-2:]
        tags = {TAG_DESTINATION: cfg.destination, TAG_KIND: a.kind if a.kind in _NUMBER_TAG else "window",
                **max_runtime_tags(cfg.sensor.max_run_seconds),
                **{k: v[:_MAX_TAG] for k, v in a.tags.items()}}
        if a.kind == "reconcile":  # checks only, no asset: an empty selection, not None (that is the whole job)
            return RunRequest(run_key=a.run_key, job_name=keys.reconcile_job, asset_selection=[],
                              asset_check_keys=[keys.reconcile_check(t) for t in a.checks], tags=tags)
        if a.kind == "snapshot":
            tags[TAG_ATTEMPT] = attempt
            return RunRequest(run_key=a.run_key, job_name=keys.snapshot_job,
                              asset_selection=[keys.mirror(t) for t in a.tables], asset_check_keys=[], tags=tags)
        tags[TAG_WINDOW], tags[TAG_ATTEMPT] = window, attempt
        assets: list[AssetKey] = ([keys.changelog] if a.changelog else []) + [keys.mirror(t) for t in a.tables]
        conf: dict[str, Any] = {"path": a.path, "catch_up": dict(a.catch_up)}
        if a.catch_up_end:
            conf["catch_up_end"] = a.catch_up_end
        # no check: the reconcile checks run in canal_reconcile runs of their own
        return RunRequest(run_key=a.run_key, job_name=keys.window_job, asset_selection=assets, asset_check_keys=[],
                          run_config={"resources": {"canal_window": {"config": conf}}}, tags=tags)
