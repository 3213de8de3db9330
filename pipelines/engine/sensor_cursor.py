"""What the canal sensor keeps between ticks (its Dagster cursor, as versioned JSON): the phase, the window in
flight and the one staged ahead, the last failure, the initial snapshots; and the rules the machine decides by."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from .sensor_events import Tick
from .sensor_failures import Failure, FailureKind, signature

CURSOR_VERSION = 2


class Phase(StrEnum):
    IDLE = "idle"
    IN_FLIGHT = "in_flight"
    BACKING_OFF = "backing_off"
    STOPPED = "stopped"


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
    end_ms: int = 0                                          # execute time of the window's last change
    gtid: str = ""
    checks: list[str] = field(default_factory=list)          # reconcile checks in the run (cursors of old versions)


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
    stopped_version: str = ""
    last_error: Failure | None = None


@dataclass
class ReconcileState:
    """The reconcile checks' own runs (``canal_reconcile``), beside the windows: one at a time."""

    n: int = 0                     # reconcile run number (monotone per destination)
    tables: list[str] = field(default_factory=list)
    run_key: str | None = None     # the run in flight
    launched_at: float = 0.0
    failures: int = 0              # consecutive failed runs: the next one waits Rules.backoff(failures)
    backoff_until: float = 0.0


@dataclass
class SensorState:
    version: int = CURSOR_VERSION
    phase: str = Phase.IDLE
    window: int = 0                # the window being (or next to be) applied
    attempt: int = 0
    failures: int = 0              # consecutive failed attempts of this window
    backoff_until: float = 0.0     # epoch seconds
    inflight: InFlight | None = None
    ahead: Ahead | None = None
    last_run_seconds: float | None = None  # the last applied window's run, requested -> succeeded
    applied_through: int | None = None  # order key of the last applied (acked) window end
    applied_position: str = ""
    applied_gtid: str = ""
    applied_ms: int = 0            # execute time of the last applied change
    caught_up_at: float = 0.0      # when a tick last found everything the source had applied
    stopped: str | None = None
    stopped_version: str = ""      # the code version the stop happened under
    last_error: Failure | None = None
    snapshot: SnapshotState = field(default_factory=SnapshotState)
    reconciled_at: dict[str, float] = field(default_factory=dict)
    reconcile: ReconcileState = field(default_factory=ReconcileState)
    adopted: bool = False          # numbering taken over from the instance's runs (after a reset)
    # the tick being handled, for the observations that follow it in the same evaluation (never in the cursor)
    seen: Tick | None = None

    def to_json(self) -> str:
        d = asdict(self)
        d.pop("seen")
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_cursor(cls, cursor: str | None) -> SensorState:
        if not cursor:
            return cls()
        d = json.loads(cursor)
        version = d.get("version")
        if version == 1:
            d = _from_v1(d)
        elif version != CURSOR_VERSION:
            raise ValueError(f"sensor cursor version {version!r}, expected {CURSOR_VERSION}: reset the cursor")
        d.pop("seen", None)
        infl = d.pop("inflight", None)
        ahead = d.pop("ahead", None)
        snap = dict(d.pop("snapshot", None) or {})
        rec = dict(d.pop("reconcile", None) or {})  # absent from cursors written before reconcile runs
        err = d.pop("last_error", None)
        snap_err = snap.pop("last_error", None)
        return cls(**d, inflight=InFlight(**infl) if infl else None, ahead=Ahead(**ahead) if ahead else None,
                   last_error=Failure(**err) if err else None,
                   snapshot=SnapshotState(**snap, last_error=Failure(**snap_err) if snap_err else None),
                   reconcile=ReconcileState(**rec))


def _from_v1(d: dict[str, Any]) -> dict[str, Any]:
    """A cursor written before the phase was explicit: same meaning, errors as plain text."""
    d = dict(d)
    d["version"] = CURSOR_VERSION
    d["phase"] = (Phase.STOPPED if d.get("stopped") else Phase.IN_FLIGHT if d.get("inflight")
                  else Phase.BACKING_OFF if d.get("backoff_until") else Phase.IDLE)
    err = d.pop("last_error", None)
    d["last_error"] = asdict(Failure(FailureKind.DATA, err, signature(err), 0.0)) if err else None
    snap = dict(d.get("snapshot") or {})
    serr = snap.pop("last_error", None)
    snap["last_error"] = asdict(Failure(FailureKind.DATA, serr, signature(serr), 0.0)) if serr else None
    d["snapshot"] = snap
    return d


@dataclass(frozen=True)
class Rules:
    """The configuration the machine decides by (pipelines.engine.config's sensor and window sections)."""

    destination: str
    tables: tuple[str, ...]
    interval_seconds: float = 30
    max_failures: int = 5
    backoff_seconds: float = 30
    backoff_max_seconds: float = 900
    launch_timeout_seconds: float = 600
    stage_ahead: bool = True
    reconcile_interval_seconds: float = 0    # 0: the reconcile checks run only on demand
    reconcile_tables_per_run: int = 1

    def backoff(self, failures: int) -> float:
        return min(self.backoff_max_seconds, self.backoff_seconds * 2 ** max(0, failures - 1))
