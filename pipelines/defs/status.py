"""What the sensor tells the UI about a destination beyond its tick: the ``lag`` check of every mirror, the
mirrors' freshness, and ``{state}/status.json`` (the same facts for people and for the check run on demand).

* ``lag`` (an asset check of each mirror, non-blocking): passes while the source is read and the mirrors hold every
  change up to ``freshness.warn_seconds`` ago; WARN when the source cannot be read, a window is failing and being
  retried, or the lag passed warn_seconds; ERROR when the destination stopped or the lag passed fail_seconds. The
  sensor reports it when its verdict changes (so a failure shows within one tick and clears within one tick of its
  cause) and every few minutes with the current lag.
* Freshness: a mirror's freshness policy counts from its last materialization. A quiet table has no window to
  materialize it, so when a tick finds the source fully applied the sensor records a materialization "no changes
  up to <position>" for mirrors not materialized for half the warn window: a mirror stays fresh while it is
  current, and turns stale when the destination stops keeping it current (source unreadable, runs failing).
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dagster import AssetCheckEvaluation, AssetCheckSeverity, AssetMaterialization, DagsterInstance, MetadataValue

from ..engine.config import PipelineConfig, conf_stamp
from ..engine.sensor_state import Phase, SensorState, Tick
from .assets.keys import LAG_CHECK, keys_for, sensor_name

log = logging.getLogger(__name__)

REPORT_EVERY_SECONDS = 300.0      # re-report an unchanged lag verdict this often (its lag figures move)
FRESHNESS_CHECK_SECONDS = 60.0    # how often a caught-up tick looks for mirrors to mark current


# --- code version ------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    """The pipeline's and the engine's source files as loaded by this process (a code change = a new digest)."""
    h = hashlib.sha256()
    for pkg in ("pipelines", "canal_core"):
        root = Path(__file__).resolve().parents[2] / pkg
        for p in sorted(root.rglob("*.py")):
            st = p.stat()
            h.update(f"{p.relative_to(root.parent)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def code_version(config: PipelineConfig) -> str:
    """Changes when the code is reloaded from changed files, or the pipeline's or the Canal conf is edited."""
    h = hashlib.sha256(_code_digest().encode())
    if config.file is not None:
        try:
            h.update(Path(config.file).read_bytes())
        except OSError:
            pass
    h.update(conf_stamp(config.canal.conf_dir, config.destination).encode())
    return h.hexdigest()[:16]


# --- the verdict -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    passed: bool
    severity: str                 # "WARN" or "ERROR" (meaningful when not passed)
    description: str
    lag_seconds: float | None     # None: never caught up yet
    current_through: str          # the binlog position every change up to which is applied ("" unknown)
    problem: str                  # source / window / stop problem, "" when none

    @property
    def key(self) -> str:
        """What makes two verdicts different enough to report again at once."""
        return f"{self.passed}:{self.severity if not self.passed else ''}:{self.problem[:200]}"


def verdict(state: SensorState, tick: Tick, warn_seconds: float, fail_seconds: float) -> Verdict:
    """The destination's lag verdict after a tick (a pure function of the sensor's state and what it saw)."""
    since = max(state.applied_ms / 1000.0, state.caught_up_at)
    lag = max(0.0, tick.now - since) if since else None
    through = state.applied_position + (f" (GTID {state.applied_gtid})" if state.applied_gtid else "")
    lag_text = "never caught up yet" if lag is None else f"{lag:.0f} s behind"
    if state.phase == Phase.STOPPED:
        return Verdict(False, "ERROR", f"STOPPED: {state.stopped}", lag, through, state.stopped or "stopped")
    if not tick.source.ok:
        began = (f" since {dt.datetime.fromtimestamp(tick.source.since, dt.UTC):%Y-%m-%d %H:%M:%S} UTC"
                 if tick.source.since else "")
        sev = "ERROR" if lag is not None and lag >= fail_seconds else "WARN"
        return Verdict(False, sev, f"cannot read the source{began} ({lag_text}): {tick.source.problem}", lag, through,
                       tick.source.problem)
    if state.phase == Phase.BACKING_OFF and state.last_error is not None:
        sev = "ERROR" if lag is not None and lag >= fail_seconds else "WARN"
        err = state.last_error
        return Verdict(False, sev, f"window {state.window} failed {state.failures} time(s) ({err.kind}), being "
                       f"retried ({lag_text}): {err.message}", lag, through, err.message)
    if lag is None:
        return Verdict(False, "WARN", "the destination has not caught up with its source yet", lag, through, "")
    if lag >= fail_seconds:
        return Verdict(False, "ERROR", f"{lag_text} (freshness.fail_seconds {fail_seconds:.0f})", lag, through, "")
    if lag >= warn_seconds:
        return Verdict(False, "WARN", f"{lag_text} (freshness.warn_seconds {warn_seconds:.0f})", lag, through, "")
    return Verdict(True, "", f"{lag_text}; every change up to {through or 'the start'} is applied", lag, through, "")


def _evaluation(config: PipelineConfig, table: str, v: Verdict, pending: bool) -> AssetCheckEvaluation:
    desc = v.description
    passed = v.passed
    if pending:
        desc, passed = f"waiting for its initial snapshot; the destination: {desc}", False
    meta: dict[str, Any] = {"lag_seconds": MetadataValue.float(round(v.lag_seconds, 1))
                            if v.lag_seconds is not None else MetadataValue.text("unknown"),
                            "current_through": MetadataValue.text(v.current_through or "-")}
    if v.problem:
        meta["problem"] = MetadataValue.text(v.problem)
    return AssetCheckEvaluation(
        asset_key=keys_for(config).mirror(table), check_name=LAG_CHECK, passed=passed,
        severity=AssetCheckSeverity.ERROR if v.severity == "ERROR" else AssetCheckSeverity.WARN,
        description=f"{table}: {desc}", metadata=meta)


# --- the status file ------------------------------------------------------------------------------------------------

def status_path(config: PipelineConfig) -> Path:
    return config.state_dir / "status.json"


def read_status(config: PipelineConfig) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(status_path(config).read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return data


def _write_status(config: PipelineConfig, data: dict[str, Any]) -> None:
    from canal_core.parse.position import write_atomically

    path = status_path(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(data, indent=1, sort_keys=True).encode())


def report(instance: DagsterInstance, config: PipelineConfig, tables: list[str], state: SensorState,
           tick: Tick) -> Verdict:
    """After a tick: the status file, the lag checks when due, freshness of quiet mirrors when caught up. Never
    raises: reporting must not stop the destination."""
    from .assets.partitions import record_first_day

    v = verdict(state, tick, config.freshness.warn_seconds, config.freshness.fail_seconds)
    try:
        record_first_day(config)
        old = read_status(config)
        now = tick.now
        pending = set(tick.pending)
        reported: dict[str, list[Any]] = dict(old.get("reported") or {})  # table -> [key, time]
        data: dict[str, Any] = {"destination": config.destination, "at": now, "phase": str(state.phase),
                                "window": state.window, "verdict": asdict(v), "source": asdict(tick.source),
                                "pending": sorted(pending),
                                "freshness_checked_at": old.get("freshness_checked_at", 0.0)}
        for t in tables:
            key = f"{v.key}:{t in pending}"
            last_key, last_at = (reported.get(t) or ["", 0.0])[:2]
            if key != last_key or now - float(last_at) >= REPORT_EVERY_SECONDS:
                instance.report_runless_asset_event(_evaluation(config, t, v, t in pending))
                reported[t] = [key, now]
        data["reported"] = {t: reported[t] for t in tables if t in reported}
        if (state.caught_up_at == now and tick.source.ok and state.phase == Phase.IDLE
                and now - float(data["freshness_checked_at"]) >= FRESHNESS_CHECK_SECONDS):
            _mark_current(instance, config, [t for t in tables if t not in pending and t not in tick.catch_up],
                          state, now)
            data["freshness_checked_at"] = now
        _write_status(config, data)
    except Exception:  # the sensor's decisions are already made; reporting is best effort
        log.exception("reporting the status of %s failed", config.destination)
    return v


def _mark_current(instance: DagsterInstance, config: PipelineConfig, tables: list[str], state: SensorState,
                  now: float) -> None:
    """Mirrors whose last materialization is older than half the warn window, while every change is applied:
    current as of the applied position, recorded as a materialization without a run."""
    if not state.applied_position:
        return
    for t in tables:
        key = keys_for(config).mirror(t)
        last = instance.get_latest_materialization_event(key)
        if last is None:
            continue  # never written (no snapshot yet): nothing to call current
        if now - last.timestamp < config.freshness.warn_seconds / 2:
            continue
        instance.report_runless_asset_event(AssetMaterialization(
            asset_key=key, description=f"no changes to {t} since its last window: current through "
                                       f"{state.applied_position}",
            metadata={"binlog_position": MetadataValue.text(state.applied_position),
                      "gtid": MetadataValue.text(state.applied_gtid or "-"),
                      "rows_inserted": 0, "rows_updated": 0, "rows_deleted": 0,
                      "confirmed_at": MetadataValue.timestamp(now)}))


def lag_check_result(config: PipelineConfig, table: str, now: float | None = None) -> AssetCheckEvaluation:
    """The lag check executed on demand: the sensor's last verdict (and how old it is)."""
    data = read_status(config)
    now = time.time() if now is None else now
    if not data:
        return AssetCheckEvaluation(
            asset_key=keys_for(config).mirror(table), check_name=LAG_CHECK, passed=False,
            severity=AssetCheckSeverity.WARN,
            description=f"{table}: the {sensor_name(config)} sensor has not evaluated yet (is it running?)",
            metadata={})
    v = Verdict(**data["verdict"])
    age = now - float(data.get("at", 0.0))
    if age > max(300.0, 10 * config.sensor.interval_seconds):
        v = Verdict(False, "ERROR", f"the {sensor_name(config)} sensor last evaluated {age:.0f} s ago (is the "
                    f"daemon running, the sensor on?); then: {v.description}", v.lag_seconds, v.current_through,
                    "sensor not evaluating")
    return _evaluation(config, table, v, table in set(data.get("pending", [])))
