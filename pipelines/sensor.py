"""The one driver per destination: a Dagster sensor whose cursor is a small state machine.

Windows (``canal_window`` runs), one at a time:

    idle      -> getWithoutAck a bounded window, stage it under {staging}/{destination}/w{window}-a{attempt},
                 request a run (run key "{destination}:{window}:{attempt}") -> in flight
                 (empty window: skip; only transaction markers/heartbeats: ack at once, nothing to apply)
    in flight -> its run SUCCESS: ack the batches (unless the source restarted since: then they are gone and
                 the server redelivers from its acked cursor; writes are idempotent), window += 1, then
                 launch the window staged ahead if there is one, else idle
                 FAILURE/CANCELED: rollback (the window staged ahead too: it is dropped), attempt += 1 (a
                 failed run key is never reused), back off exponentially; after sensor.max_failures
                 failures in a row: stopped, with the run id and its error in every skip message, until
                 the cursor is reset
                 otherwise (the run is still going at this tick): if the previous window's run took
                 less than the interval (so this one likely ends before the next tick), stage the next
                 window now, once (window.stage_ahead; its batches stay outstanding behind the
                 in-flight ones), so the tick after the run succeeded launches it at once

A window staged ahead is never launched in the evaluation that stages it: a sensor's run requests are
submitted only when its evaluation returns, so staging in the evaluation that launches would delay that
launch by the staging time. When staging + run fit in one interval, no run is going at a tick, nothing is
staged ahead and every window holds the changes up to its own tick (the freshest). When they do not but
the run alone does, staging ahead halves the cycle (a launch every tick instead of every other). When
the run alone does not, the window would be staged a tick before its launch for nothing: it would hold
older changes than one taken at the launching tick, at the same cycle, so nothing is staged ahead then.

Initial snapshots (``canal_snapshot`` runs), concurrently with the windows: tables whose mirror has no
snapshot in the registry ({state}/{destination}/snapshots.json) are "pending". One snapshot run loads all
of them (run key "{destination}:snapshot:{n}:{attempt}") while windows keep going without their mirrors
(their changes still reach the changelog). The run records each table's snapshot position S in the
registry as "not caught up" (so does a snapshot launched by hand); the next window run gets
catch_up={table: S}, replays S..window start for it before the window's parts, and once that run succeeded
the table is caught up. So adding a table pauses nothing, and no change is lost or applied twice.

A reset cursor (empty) starts over from what the Dagster instance knows: window and snapshot numbers
continue after the newest runs of this destination (Dagster never reruns a run key a sensor used), and an
unfinished run of this destination is waited for first.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import logging
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckKey,
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
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG, RUN_KEY_TAG

from .assets.keys import CHANGELOG, SNAPSHOT_JOB, WINDOW_JOB, mirror_key, reconcile_check_key
from .config import PipelineConfig
from .source import CanalSource, FetchedWindow, SourceUnavailable
from .window import WindowManifest, order_key, window_dir_name

log = logging.getLogger(__name__)

CURSOR_VERSION = 1
STAGING_RESERVE_SECONDS = 15.0   # of the evaluation deadline, kept for staging and the run request
AHEAD_RUN_FRACTION = 0.9         # stage ahead only after a run shorter than this part of the interval
TAG_PREFIX = "canal/"
TAG_DESTINATION = "canal/destination"
TAG_KIND = "canal/kind"
TAG_WINDOW = "canal/window"
TAG_ATTEMPT = "canal/attempt"
TAG_SNAPSHOT = "canal/snapshot"
_MAX_TAG = 2000

_DONE = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}

StageFn = Callable[..., WindowManifest]


# --- cursor state ------------------------------------------------------------------------------------------

@dataclass
class InFlight:
    window: int
    attempt: int
    run_key: str
    batch_ids: list[int]
    epoch: str
    path: str
    end_key: int
    end: str
    launched_at: float
    tables: list[str] = field(default_factory=list)
    catch_up: dict[str, str] = field(default_factory=dict)  # table -> snapshot position "file:offset"


@dataclass
class Ahead:
    """The next window, staged while ``inflight``'s run was going; its batches are outstanding behind
    ``inflight``'s, so it is acked only after them."""

    window: int
    batch_ids: list[int]
    epoch: str
    path: str


@dataclass
class SnapshotState:
    n: int = 0                     # snapshot run number (monotone per destination)
    attempt: int = 0
    tables: list[str] = field(default_factory=list)
    run_key: str | None = None     # the run in flight, None between attempts
    launched_at: float = 0.0
    failures: int = 0
    backoff_until: float = 0.0
    stopped: str | None = None
    last_error: str | None = None


@dataclass
class SensorState:
    version: int = CURSOR_VERSION
    window: int = 0                # the window being (or next to be) applied
    attempt: int = 0
    failures: int = 0              # consecutive failed attempts of this window
    backoff_until: float = 0.0     # epoch seconds
    inflight: InFlight | None = None
    ahead: Ahead | None = None
    last_run_seconds: float | None = None  # the last applied window's run, requested -> succeeded
    applied_through: int | None = None  # order key of the last applied (acked) window end
    applied_position: str = ""
    stopped: str | None = None
    last_error: str | None = None
    snapshot: SnapshotState = field(default_factory=SnapshotState)
    adopted: bool = False          # numbering taken over from the instance's runs (after a reset)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_cursor(cls, cursor: str | None) -> SensorState:
        if not cursor:
            return cls()
        d = json.loads(cursor)
        if d.get("version") != CURSOR_VERSION:
            raise ValueError(f"sensor cursor version {d.get('version')!r}, expected {CURSOR_VERSION}: reset the cursor")
        infl = d.pop("inflight", None)
        ahead = d.pop("ahead", None)
        snap = d.pop("snapshot", None) or {}
        return cls(**d, inflight=InFlight(**infl) if infl else None, ahead=Ahead(**ahead) if ahead else None,
                   snapshot=SnapshotState(**snap))


# --- snapshot registry --------------------------------------------------------------------------------------

class SnapshotRegistry:
    """{table: {"position_key", "position", "rows", "run_id", "caught_up"}}: which mirrors have their initial
    snapshot and whether the stream has caught up from it. A file, not the cursor: snapshot runs write it
    (also ones launched by hand) and it outlives cursor resets. Updates hold a lock: the sensor and runs
    both write it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, dict[str, Any]]:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}

    @contextlib.contextmanager
    def _update(self) -> Iterator[dict[str, dict[str, Any]]]:
        from canal_core.parse.position import write_atomically

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = self.load()
            before = json.dumps(data, sort_keys=True)
            yield data
            if json.dumps(data, sort_keys=True) != before:
                write_atomically(self.path, json.dumps(data, sort_keys=True, indent=1).encode())

    def pending(self, tables: Iterable[str]) -> list[str]:
        have = self.load()
        return [t for t in tables if t not in have]

    def catch_up(self) -> dict[str, str]:
        """Tables snapshotted but not yet caught up -> their snapshot position "file:offset"."""
        return {t: v["position"] for t, v in self.load().items() if not v.get("caught_up")}

    def record_snapshot(self, table: str, position: str, position_key: int, rows: int = 0, run_id: str = "") -> None:
        with self._update() as data:
            data[table] = {"position_key": position_key, "position": position, "rows": rows, "run_id": run_id,
                           "caught_up": False}

    def mark_caught_up(self, positions: Mapping[str, str]) -> None:
        """Tables caught up from the snapshot at that position (a newer snapshot since then stays pending)."""
        with self._update() as data:
            for t, pos in positions.items():
                if t in data and data[t].get("position") == pos:
                    data[t]["caught_up"] = True


def registry_for(config: PipelineConfig) -> SnapshotRegistry:
    return SnapshotRegistry(config.state_dir / "snapshots.json")


def window_dir(config: PipelineConfig, window: int, attempt: int) -> Path:
    return config.staging_root / config.destination / window_dir_name(window, attempt)


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
                err = ev.step_failure_data.error
                while err.cause is not None and "dagster._core.errors" in "".join(err.stack[:1]):
                    err = err.cause
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


def _latest_runs(instance: DagsterInstance, destination: str, kind: str, limit: int = 1) -> Sequence[DagsterRun]:
    return instance.get_runs(filters=RunsFilter(tags={TAG_DESTINATION: destination, TAG_KIND: kind}), limit=limit)


# --- the driver ------------------------------------------------------------------------------------------------

def _fmt_ids(ids: Sequence[int]) -> str:
    """Batch ids as compact ranges ("3-7,9"): they are consecutive in practice."""
    out: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(out)


def _pos_text(p: Any) -> str:
    return f"{p.journal}:{p.offset}"


def _position_key(text: str) -> int:
    journal, _, offset = text.rpartition(":")
    return order_key(journal, int(offset))


def _partition_range(config: PipelineConfig, window_path: Path, manifest: WindowManifest) -> tuple[str, str]:
    """The UTC dates of the window's row changes (changelog.parquet's event_date), within the partitions."""
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
    first = dt.date.fromisoformat(config.changelog.start_date)
    last = dt.datetime.now(dt.UTC).date()  # the partitions end today (end_offset=1)
    lo, hi = (min(max(d, first), last) for d in (min(dates), max(dates)))
    return lo.isoformat(), hi.isoformat()


class CanalSensor:
    """The state machine; ``definition()`` wraps it as a Dagster sensor. ``source_factory`` and ``stage``
    are injectable for tests; the defaults are the configured source and pipelines.staging.stage_window."""

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
        return f"canal_{self.config.destination}"

    def source(self) -> CanalSource:
        if self._source_factory is not None:
            return self._source_factory()
        from .source import make_source

        return make_source(self.config)

    def stage(self, entries: list[bytes], **kw: Any) -> WindowManifest:
        if self._stage is not None:
            return self._stage(entries, **kw)
        from .staging import stage_window

        return stage_window(entries, **kw)

    # --- evaluation ------------------------------------------------------------------------------------------

    def evaluate(self, context: SensorEvaluationContext) -> SensorResult:
        deadline = time.monotonic() + self.config.sensor.deadline_seconds
        state = SensorState.from_cursor(context.cursor)
        instance = context.instance
        notes: list[str] = []
        requests: list[RunRequest] = []
        if not state.adopted:
            busy = self._adopt(instance, state)
            if busy is not None:
                return SensorResult(skip_reason=busy, cursor=state.to_json())
        try:
            snap = self._drive_snapshot(instance, state, notes)
            if snap is not None:
                requests.append(snap)
            win = self._drive_window(instance, state, notes, deadline)
            if win is not None:
                requests.append(win)
        except SourceUnavailable as e:
            notes.append(f"Canal source unavailable: {e}")
        cursor = state.to_json()
        if requests:
            for n in notes:
                context.log.info(n)
            return SensorResult(run_requests=requests, cursor=cursor)
        return SensorResult(skip_reason=" ".join(notes) or "nothing to do", cursor=cursor)

    def _adopt(self, instance: DagsterInstance, state: SensorState) -> str | None:
        """A fresh cursor continues the numbering of this destination's runs; None, or why to wait."""
        dest = self.config.destination
        for kind in ("window", "snapshot"):
            runs = _latest_runs(instance, dest, kind)
            if not runs:
                continue
            run = runs[0]
            if run.status not in _DONE:
                return (f"cursor was reset while {kind} run {run.run_id} ({run.tags.get(RUN_KEY_TAG)}) is "
                        f"{run.status.value}: waiting for it to finish")
            if kind == "window":
                state.window = max(state.window, int(run.tags.get(TAG_WINDOW, "-1")) + 1)
            else:
                state.snapshot.n = max(state.snapshot.n, int(run.tags.get(TAG_SNAPSHOT, "-1")) + 1)
        state.adopted = True
        return None

    # --- windows -------------------------------------------------------------------------------------------

    def _drive_window(self, instance: DagsterInstance, state: SensorState, notes: list[str],
                      deadline: float) -> RunRequest | None:
        cfg = self.config
        now = self.clock()
        if state.inflight is not None:
            infl = state.inflight
            run = find_run(instance, infl.run_key)
            if run is None:
                if now - infl.launched_at < cfg.sensor.launch_timeout_seconds:
                    notes.append(f"window {infl.window} attempt {infl.attempt}: run {infl.run_key} requested, "
                                 "not created yet")
                    return None
                self._window_failed(state, None, f"run {infl.run_key} never appeared within "
                                    f"{cfg.sensor.launch_timeout_seconds:.0f} s")
            elif run.status == DagsterRunStatus.SUCCESS:
                state.last_run_seconds = _run_seconds(instance, run)
                self._window_succeeded(state)
            elif run.status in (DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED):
                self._window_failed(state, run, run_error(instance, run))
            else:
                notes.append(f"window {infl.window} attempt {infl.attempt}: run {run.run_id} is "
                             f"{run.status.value}")
                self._stage_ahead(state, notes, deadline)
                return None
        if state.stopped:
            notes.append(f"STOPPED: {state.stopped}")
            return None
        if now < state.backoff_until:
            notes.append(f"backing off after {state.failures} failed attempt(s) of window {state.window} until "
                         f"{dt.datetime.fromtimestamp(state.backoff_until, dt.UTC):%H:%M:%S} UTC; last error: "
                         f"{state.last_error}")
            return None
        if state.ahead is not None:
            return self._launch_ahead(state, notes)
        return self._take_window(state, notes, deadline)

    def _window_succeeded(self, state: SensorState) -> None:
        infl = state.inflight
        assert infl is not None
        source = self.source()
        if source.epoch == infl.epoch:
            try:
                source.ack(infl.batch_ids)
            except Exception as e:  # e.g. a batch already gone: the next window rolls back and redelivers
                log.warning("ack of window %d batches %s failed: %s", infl.window, infl.batch_ids, e)
        else:
            log.info("window %d applied after a source restart (epoch %s -> %s): its batches are gone and come "
                     "again from the acked cursor", infl.window, infl.epoch, source.epoch)
        if state.ahead is not None and state.ahead.epoch != source.epoch:
            self._drop_ahead(state)  # its batches went with the restart: they come again from the cursor
        if infl.catch_up:
            self.registry.mark_caught_up(infl.catch_up)
        state.applied_through, state.applied_position = infl.end_key, infl.end
        root = self.config.staging_root / self.config.destination
        for d in root.glob(f"w{infl.window:012d}-a*"):
            shutil.rmtree(d, ignore_errors=True)
        state.window, state.attempt, state.failures = infl.window + 1, 0, 0
        state.backoff_until, state.inflight, state.last_error = 0.0, None, None

    def _window_failed(self, state: SensorState, run: DagsterRun | None, error: str) -> None:
        infl = state.inflight
        assert infl is not None
        source = self.source()
        if source.epoch == infl.epoch:
            source.rollback()  # the batches staged ahead too
        self._drop_ahead(state)
        s = self.config.sensor
        state.failures += 1
        state.attempt = infl.attempt + 1
        state.backoff_until = self.clock() + min(s.backoff_max_seconds, s.backoff_seconds * 2 ** (state.failures - 1))
        run_id = run.run_id if run is not None else infl.run_key
        state.last_error = f"run {run_id}: {error}"
        state.inflight = None
        if state.failures >= s.max_failures:
            state.stopped = (f"window {infl.window} failed {state.failures} times in a row (sensor.max_failures="
                             f"{s.max_failures}); last run {run_id}: {error}. The window is rolled back, not acked. "
                             "Fix the cause, then reset this sensor's cursor to resume.")

    def _take_window(self, state: SensorState, notes: list[str], deadline: float) -> RunRequest | None:
        source = self.source()
        epoch = source.epoch
        source.rollback()  # batches left by an interrupted evaluation come again
        fetched = self._fetch(source, deadline)
        if fetched.empty:
            status = source.status()
            notes.append("no new changes" + (f" (source: {status})" if status else ""))
            return self._catch_up_run(state, notes, epoch)
        manifest, path = self._stage_window(fetched, state.window, state.attempt)
        return self._launch(state, notes, manifest, path, list(fetched.batch_ids), epoch)

    def _fetch(self, source: CanalSource, deadline: float) -> FetchedWindow:
        cfg = self.config
        max_wait = min(cfg.window.max_wait_seconds, max(0.0, deadline - time.monotonic() - STAGING_RESERVE_SECONDS))
        return source.get_window(cfg.window.max_rows, cfg.window.max_bytes, max_wait)

    def _stage_window(self, fetched: FetchedWindow, window: int, attempt: int) -> tuple[WindowManifest, Path]:
        cfg = self.config
        path = window_dir(cfg, window, attempt)
        if path.exists():
            shutil.rmtree(path)  # a partial staging of an interrupted evaluation
        manifest = self.stage(fetched.entries, root=cfg.staging_root, destination=cfg.destination, window=window,
                              attempt=attempt, batch_ids=fetched.batch_ids, timezone=cfg.timezone)
        return manifest, path

    def _stage_ahead(self, state: SensorState, notes: list[str], deadline: float) -> None:
        """Stage the window after the in-flight one while its run is going (see the module doc)."""
        cfg = self.config
        infl = state.inflight
        if not cfg.window.stage_ahead or infl is None or state.ahead is not None:
            return
        last = state.last_run_seconds
        if last is None or last > AHEAD_RUN_FRACTION * cfg.sensor.interval_seconds:
            return  # this run likely spans the next tick too: a window taken then is fresher, at the same cycle
        source = self.source()
        epoch = source.epoch
        if epoch != infl.epoch:
            return  # the in-flight window's batches are gone: after its run the next window is taken afresh
        outstanding = source.outstanding()
        if outstanding is not None and outstanding != infl.batch_ids:
            # batches taken by an evaluation that did not finish: only a rollback (when no run is in flight)
            # brings their entries back, so a window taken now would skip them
            notes.append(f"not staging ahead: the source has batches {_fmt_ids(outstanding)} outstanding, the "
                         f"in-flight window {_fmt_ids(infl.batch_ids)}")
            return
        fetched = self._fetch(source, deadline)
        if fetched.empty:
            return
        window = infl.window + 1
        try:
            manifest, path = self._stage_window(fetched, window, 0)
        except Exception as e:
            # its batches stay outstanding, so no later window is staged ahead past them (see above); once the
            # in-flight run is done they are rolled back and the error comes again from the usual staging
            log.exception("staging window %d ahead failed", window)
            shutil.rmtree(window_dir(cfg, window, 0), ignore_errors=True)
            notes.append(f"staging window {window} ahead failed ({type(e).__name__}: {_one_line(str(e), 300)}); "
                         "it is taken again after the in-flight run")
            return
        state.ahead = Ahead(window=window, batch_ids=list(fetched.batch_ids), epoch=epoch, path=str(path))
        notes.append(f"window {window}: {manifest.rows} rows {_pos_text(manifest.start)}..{_pos_text(manifest.end)} "
                     f"staged ahead, launched once window {infl.window} succeeded")

    def _drop_ahead(self, state: SensorState) -> None:
        if state.ahead is not None:
            shutil.rmtree(state.ahead.path, ignore_errors=True)
            state.ahead = None

    def _launch_ahead(self, state: SensorState, notes: list[str]) -> RunRequest | None:
        ahead = state.ahead
        assert ahead is not None
        state.ahead = None
        from .staging import IncompleteWindowError, load_window

        try:
            manifest = load_window(ahead.path)
        except (IncompleteWindowError, OSError, ValueError) as e:  # removed or damaged since: take it afresh
            log.warning("window %d staged ahead at %s is unusable (%s): taking it again", ahead.window, ahead.path, e)
            shutil.rmtree(ahead.path, ignore_errors=True)
            self.source().rollback()
            return None
        if ahead.window != state.window:  # cannot happen: ahead is always the window after the applied one
            raise AssertionError(f"window staged ahead is {ahead.window}, next to apply is {state.window}")
        return self._launch(state, notes, manifest, Path(ahead.path), ahead.batch_ids, ahead.epoch)

    def _launch(self, state: SensorState, notes: list[str], manifest: WindowManifest, path: Path,
                batch_ids: list[int], epoch: str) -> RunRequest | None:
        """The run request of the staged window ``state.window`` / ``state.attempt`` (in flight from now)."""
        from .lake import rename_statements  # no Spark: the DDL parser only

        cfg = self.config
        source = self.source()
        known = set(self.tables)
        # DDL of tables without a mirror (CREATE DATABASE, other schemas' tables) has nothing to apply
        if manifest.rows == 0 and not any(f"{d.schema}.{d.table}" in known for d in manifest.ddl):
            source.ack(batch_ids)
            shutil.rmtree(path, ignore_errors=True)
            state.applied_through, state.applied_position = manifest.end.key, _pos_text(manifest.end)
            notes.append(f"window {state.window}: {manifest.entries} entries without row changes of mirrored tables "
                         f"(transaction markers, heartbeats, other DDL), acked through {_pos_text(manifest.end)}")
            state.window, state.attempt = state.window + 1, 0
            return self._catch_up_run(state, notes, epoch)

        pending = set(self.registry.pending(self.tables))
        catch_up = {t: k for t, k in self.registry.catch_up().items() if t in known}
        # a table's DDL alone (ALTER, RENAME, DROP) also concerns its mirror
        in_window = [t.name for t in manifest.tables] + [f"{d.schema}.{d.table}" for d in manifest.ddl if d.table]
        # a RENAME entry names the new table (Canal's header): the renamed one's mirror is in the run too
        in_window += [f"{s}.{t}" for _, pairs in rename_statements(manifest) for pair in pairs for s, t in pair]
        mirrors = sorted((set(in_window) | set(catch_up)) & (known - pending))
        unmapped = sorted({t.name for t in manifest.tables} - known)
        if unmapped:
            notes.append(f"window {state.window}: no mirror for {', '.join(unmapped)} (not in the table list "
                         "loaded with the definitions: reload the code location); changelog only")
        run_catch_up = {t: catch_up[t] for t in mirrors if t in catch_up}
        run_key = f"{cfg.destination}:{state.window}:{state.attempt}"
        lo, hi = _partition_range(cfg, path, manifest)
        tags = {
            TAG_DESTINATION: cfg.destination,
            TAG_KIND: "window",
            TAG_WINDOW: str(state.window),
            TAG_ATTEMPT: str(state.attempt),
            "canal/batch_ids": _fmt_ids(batch_ids)[:_MAX_TAG],
            "canal/start": _pos_text(manifest.start),
            "canal/end": _pos_text(manifest.end),
            "canal/gtid": (manifest.end.gtid or "")[:_MAX_TAG],
            "canal/rows": str(manifest.rows),
            ASSET_PARTITION_RANGE_START_TAG: lo,
            ASSET_PARTITION_RANGE_END_TAG: hi,
        }
        if run_catch_up:
            tags["canal/catch_up"] = ",".join(sorted(run_catch_up))[:_MAX_TAG]
        checks: list[AssetCheckKey] = []
        every = cfg.sensor.reconcile_every
        if every and state.window % every == 0:
            checks = [reconcile_check_key(t) for t in mirrors]
        state.inflight = InFlight(
            window=state.window, attempt=state.attempt, run_key=run_key, batch_ids=list(batch_ids),
            epoch=epoch, path=str(path), end_key=manifest.end.key, end=_pos_text(manifest.end),
            launched_at=self.clock(), tables=mirrors, catch_up=run_catch_up)
        notes.append(f"window {state.window} attempt {state.attempt}: {manifest.rows} rows "
                     f"{_pos_text(manifest.start)}..{_pos_text(manifest.end)}")
        asset_selection: list[AssetKey] = [CHANGELOG, *(mirror_key(t) for t in mirrors)]
        return RunRequest(
            run_key=run_key, job_name=WINDOW_JOB, asset_selection=asset_selection, asset_check_keys=checks,
            run_config={"resources": {"canal_window": {"config": {"path": str(path), "catch_up": run_catch_up}}}},
            tags=tags)

    def _catch_up_run(self, state: SensorState, notes: list[str], epoch: str) -> RunRequest | None:
        """No window to carry them: catch the snapshotted mirrors up to the applied position on their own
        (a quiet source must not leave a new mirror behind the changelog)."""
        if state.applied_through is None:
            return None  # nothing applied since the cursor began: the next window carries the catch-up
        known, pending = set(self.tables), set(self.registry.pending(self.tables))
        todo = {t: p for t, p in self.registry.catch_up().items() if t in known and t not in pending}
        ahead = {t: p for t, p in todo.items() if _position_key(p) > state.applied_through}
        if ahead:  # the snapshot is past everything applied: later changes below it are skipped by position
            self.registry.mark_caught_up(ahead)
        todo = {t: p for t, p in todo.items() if t not in ahead}
        if not todo:
            return None
        cfg = self.config
        run_key = f"{cfg.destination}:{state.window}:{state.attempt}"
        state.inflight = InFlight(
            window=state.window, attempt=state.attempt, run_key=run_key, batch_ids=[], epoch=epoch, path="",
            end_key=state.applied_through, end=state.applied_position, launched_at=self.clock(),
            tables=sorted(todo), catch_up=todo)
        notes.append(f"catch-up {state.window} attempt {state.attempt} of {', '.join(sorted(todo))} up to "
                     f"{state.applied_position}")
        return RunRequest(
            run_key=run_key, job_name=WINDOW_JOB, asset_selection=[mirror_key(t) for t in sorted(todo)],
            asset_check_keys=[],
            run_config={"resources": {"canal_window": {"config": {
                "path": "", "catch_up": todo, "catch_up_end": state.applied_position}}}},
            tags={TAG_DESTINATION: cfg.destination, TAG_KIND: "window", TAG_WINDOW: str(state.window),
                  TAG_ATTEMPT: str(state.attempt), "canal/end": state.applied_position, "canal/rows": "0",
                  "canal/catch_up": ",".join(sorted(todo))[:_MAX_TAG]})

    # --- initial snapshots ------------------------------------------------------------------------------------

    def _drive_snapshot(self, instance: DagsterInstance, state: SensorState, notes: list[str]) -> RunRequest | None:
        cfg = self.config
        snap = state.snapshot
        now = self.clock()
        if snap.run_key is not None:
            run = find_run(instance, snap.run_key)
            if run is None:
                if now - snap.launched_at < cfg.sensor.launch_timeout_seconds:
                    notes.append(f"snapshot of {', '.join(snap.tables)} requested, not created yet.")
                    return None
                self._snapshot_failed(snap, snap.run_key, "the run never appeared")
            elif run.status == DagsterRunStatus.SUCCESS:
                self._snapshot_succeeded(snap, run)
                snap = state.snapshot = SnapshotState(n=snap.n + 1)
            elif run.status in (DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED):
                self._snapshot_failed(snap, run.run_id, run_error(instance, run))
            else:
                notes.append(f"snapshot of {', '.join(snap.tables)} is {run.status.value} (run {run.run_id}).")
                return None
        pending = self.registry.pending(self.tables)
        if not pending:
            return None
        if snap.stopped:
            notes.append(f"SNAPSHOT STOPPED: {snap.stopped}")
            return None
        if now < snap.backoff_until:
            notes.append(f"snapshot of {', '.join(pending)} backing off; last error: {snap.last_error}.")
            return None
        snap.tables = pending
        snap.run_key = f"{cfg.destination}:snapshot:{snap.n}:{snap.attempt}"
        snap.launched_at = now
        notes.append(f"snapshot {snap.n} attempt {snap.attempt} of {', '.join(pending)}.")
        return RunRequest(
            run_key=snap.run_key, job_name=SNAPSHOT_JOB, asset_selection=[mirror_key(t) for t in pending],
            asset_check_keys=[],
            tags={TAG_DESTINATION: cfg.destination, TAG_KIND: "snapshot", TAG_SNAPSHOT: str(snap.n),
                  TAG_ATTEMPT: str(snap.attempt), "canal/tables": ",".join(pending)[:_MAX_TAG]})

    def _snapshot_succeeded(self, snap: SnapshotState, run: DagsterRun) -> None:
        missing = self.registry.pending(snap.tables)
        if missing:  # the run recorded no snapshot for these: they stay pending, the next run takes them
            log.warning("snapshot run %s recorded nothing for %s", run.run_id, missing)
        shutil.rmtree(snapshot_data_dir(self.config, run.run_id), ignore_errors=True)

    def _snapshot_failed(self, snap: SnapshotState, run_id: str, error: str) -> None:
        s = self.config.sensor
        snap.failures += 1
        snap.attempt += 1
        snap.run_key = None
        snap.backoff_until = self.clock() + min(s.backoff_max_seconds, s.backoff_seconds * 2 ** (snap.failures - 1))
        snap.last_error = f"run {run_id}: {error}"
        if snap.failures >= s.max_failures:
            snap.stopped = (f"snapshot of {', '.join(snap.tables)} failed {snap.failures} times in a row; last run "
                            f"{run_id}: {error}. Windows go on without these mirrors; fix the cause, then reset "
                            "this sensor's cursor.")

    # --- Dagster ---------------------------------------------------------------------------------------------

    def definition(self, jobs: Sequence[Any]) -> SensorDefinition:
        @sensor(name=self.name, jobs=list(jobs), minimum_interval_seconds=self.config.sensor.interval_seconds,
                default_status=DefaultSensorStatus.RUNNING,
                description=f"Drives Canal destination {self.config.destination!r}: takes a bounded binlog window, "
                            "stages it, runs canal_window, acks after success; launches initial snapshots.")
        def canal_sensor(context: SensorEvaluationContext) -> SensorResult:
            return self.evaluate(context)

        return canal_sensor


def snapshot_data_dir(config: PipelineConfig, run_id: str) -> Path:
    """Where a snapshot run puts the Parquet it reads from MySQL before writing the mirror."""
    return config.staging_root / config.destination / "snapshot-data" / run_id
