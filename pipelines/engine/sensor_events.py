"""What the canal sensor's state machine (``pipelines.engine.sensor_state``) sees and what it asks for: observations in,
actions out. Plain frozen data, no behaviour: the edge (``pipelines.defs.sensor``) builds the observations from Dagster
and the Canal source, and carries out the actions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# --- observations -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunSeen:
    """A run looked up by its run key: ``status`` None when it does not exist (yet)."""

    status: str | None            # DagsterRunStatus value: QUEUED, STARTING, STARTED, SUCCESS, FAILURE, CANCELED, ...
    run_id: str = ""
    error: str = ""               # FAILURE/CANCELED: the first step failure (or the run failure message), one line
    seconds: float | None = None  # requested -> ended

    @property
    def done(self) -> bool:
        return self.status in ("SUCCESS", "FAILURE", "CANCELED")


@dataclass(frozen=True)
class LatestRun:
    """The newest run of this destination of one kind (for numbering after a cursor reset)."""

    number: int
    done: bool
    run_id: str
    run_key: str
    status: str


@dataclass(frozen=True)
class SourceSeen:
    """The Canal source as this evaluation found it."""

    epoch: str = ""                         # "" when the source could not be started / reached
    outstanding: tuple[int, ...] | None = None
    ok: bool = True                         # reading its database (or nothing known against it)
    problem: str = ""                       # when not ok: what is wrong and what to do, one line
    problem_kind: str = ""                  # e.g. access, unreachable, source-mismatch, stopped, config
    since: float = 0.0                      # when the problem began (epoch s), 0 unknown
    streaming: bool = True                  # reading the binlog (False while it connects: nothing known yet)


@dataclass(frozen=True)
class Tick:
    now: float
    source: SourceSeen
    code_version: str = ""
    window_run: RunSeen | None = None       # inflight.run_key looked up (None when nothing is in flight)
    snapshot_run: RunSeen | None = None
    reconcile_run: RunSeen | None = None
    pending: tuple[str, ...] = ()           # tables without a snapshot in the registry
    catch_up: Mapping[str, str] = field(default_factory=dict)  # snapshotted, not caught up -> position
    latest: Mapping[str, LatestRun] = field(default_factory=dict)  # run kind -> newest run (after a reset only)


@dataclass(frozen=True)
class Fetched:
    purpose: str                            # "take" or "ahead"
    batch_ids: tuple[int, ...]
    epoch: str
    rows: int = 0


@dataclass(frozen=True)
class Staged:
    """What the machine needs of a staged window (pipelines.engine.window.WindowManifest), or of one staged ahead and
    loaded again."""

    purpose: str                            # "take", "ahead" (just staged) or "launch_ahead" (loaded to launch)
    window: int
    attempt: int
    path: str
    batch_ids: tuple[int, ...]
    epoch: str
    rows: int
    entries: int
    start: str                              # "file:offset"
    end: str
    end_key: int
    end_ms: int = 0
    gtid: str = ""
    tables: tuple[str, ...] = ()            # tables with row changes
    ddl_tables: tuple[str, ...] = ()        # tables a DDL of the window names (RENAME: both names)
    partitions: tuple[str, str] | None = None  # changelog partition range (UTC dates) of the window's changes


@dataclass(frozen=True)
class StageFailed:
    purpose: str
    window: int
    error: str


# --- actions ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Ack:
    batch_ids: tuple[int, ...]


@dataclass(frozen=True)
class Rollback:
    pass


@dataclass(frozen=True)
class Fetch:
    purpose: str


@dataclass(frozen=True)
class Stage:
    purpose: str
    window: int
    attempt: int


@dataclass(frozen=True)
class LoadAhead:
    path: str
    window: int


@dataclass(frozen=True)
class Remove:
    """Delete staged directories: one path, or every attempt of ``window``."""

    path: str = ""
    window: int | None = None


@dataclass(frozen=True)
class MarkCaughtUp:
    positions: Mapping[str, str]


@dataclass(frozen=True)
class SnapshotDone:
    run_id: str
    tables: tuple[str, ...]


@dataclass(frozen=True)
class Launch:
    """A run to request: ``kind`` window / catch_up / snapshot / reconcile."""

    kind: str
    run_key: str
    tables: tuple[str, ...]                 # mirrors in the run
    changelog: bool = False                 # the changelog asset too
    checks: tuple[str, ...] = ()            # tables whose reconcile check runs in it (a reconcile run)
    path: str = ""
    catch_up: Mapping[str, str] = field(default_factory=dict)
    catch_up_end: str = ""
    tags: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Note:
    text: str
    level: str = "info"                     # info, or "error": the tick fails (shown red) unless it requests runs


Action = Ack | Rollback | Fetch | Stage | LoadAhead | Remove | MarkCaughtUp | SnapshotDone | Launch | Note
Observation = Tick | Fetched | Staged | StageFailed
