"""The chaos run's report: what was done to the pipeline, what the checks found, and the verdict."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from .faults import FaultRecord
from .verify import ChangelogResult, SensorResult, TableResult, WorkloadResult


@dataclass
class Report:
    command: str
    started: str                                  # UTC, ISO
    seed: int
    faults: list[FaultRecord] = field(default_factory=list)
    main_job_starts: int = 0
    unexpected_exits: list[str] = field(default_factory=list)  # the main job exiting without a fault
    interventions: int = 0                        # cursor resets, code location reloads, state edits: none
    workload: WorkloadResult | None = None
    changelog: ChangelogResult | None = None
    tables: list[TableResult] = field(default_factory=list)
    sensor: SensorResult | None = None
    converge_bound: float = 0.0
    converged_after_fault: float | None = None    # seconds from the last fault to every check holding
    converged_after_workload: float | None = None
    wall_seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    # --- figures ------------------------------------------------------------------------------------------------

    @property
    def injected(self) -> list[FaultRecord]:
        return [f for f in self.faults if f.injected]

    @property
    def by_kind(self) -> dict[str, int]:
        return dict(sorted(Counter(f.kind for f in self.injected).items()))

    @property
    def lost(self) -> int:
        return (self.changelog.missing if self.changelog else 0) + sum(t.missing for t in self.tables)

    @property
    def duplicated(self) -> int:
        return self.changelog.duplicated if self.changelog else 0

    @property
    def mismatched(self) -> int:
        corrupt = (self.changelog.corrupted + self.changelog.phantom) if self.changelog else 0
        return corrupt + sum(t.extra + t.differing for t in self.tables)

    @property
    def passed(self) -> bool:
        return not self.verdicts()

    def verdicts(self) -> list[str]:
        """Every check that does not hold (empty: the run passed)."""
        out = list(self.problems)
        if self.changelog is None or not self.tables:
            out.append("the lake was not verified")
        if self.lost:
            out.append(f"{self.lost} row changes or rows lost")
        if self.duplicated:
            out.append(f"{self.duplicated} row changes stored twice")
        if self.mismatched:
            out.append(f"{self.mismatched} rows or row changes that differ from the source")
        if self.workload is not None and not self.workload.ok:
            out.append("the workload's log and the binlog disagree")
        if self.sensor is None or not self.sensor.ok:
            out.append("the sensor stopped (a person would have to reset it)" if self.sensor else
                       "the sensor was not checked")
        if self.interventions:
            out.append(f"{self.interventions} manual interventions")
        if self.unexpected_exits:
            out.append(f"the main job exited {len(self.unexpected_exits)} time(s) without a fault")
        if self.converged_after_fault is None:
            out.append(f"did not converge within {self.converge_bound:.0f} s after the last fault")
        return out

    # --- output -------------------------------------------------------------------------------------------------

    def text(self) -> str:
        lines = [f"chaos run {self.started} seed {self.seed}: {self.command}", ""]
        lines.append(f"faults injected: {len(self.injected)} of {len(self.faults)} planned, "
                     f"{len(self.by_kind)} kinds: " + ", ".join(f"{k} {n}" for k, n in self.by_kind.items()))
        for i, f in enumerate(self.faults, 1):
            lines.append(f"  {i:2d}. +{f.offset:6.1f} s  {f.kind:<15} {f.target}"
                         + (f" (waited {f.waited:.0f} s)" if f.waited >= 1 else "")
                         + (f" (took {f.took:.0f} s)" if f.took >= 1 else ""))
        lines.append(f"main job started {self.main_job_starts} time(s) (again after each {'main_job_tree'} fault, "
                     "as a service manager would)")
        for e in self.unexpected_exits:
            lines.append(f"  UNEXPECTED: {e}")
        if self.workload is not None:
            w = self.workload
            lines.append(f"workload: {w.transactions} transactions ("
                         + ", ".join(f"{k} {v}" for k, v in sorted(w.outcomes.items()))
                         + f"), {w.committed_rows} rows changed by committed ones; of unknown outcome, "
                         f"{w.unknown_committed} committed")
        if self.changelog is not None:
            c = self.changelog
            lines.append(f"row changes: {c.expected} in the binlog range, {c.stored} in the changelog")
        for t in self.tables:
            lines.append(f"  mirror {t.table:<10} source {t.source_rows:>6} rows, mirror {t.mirror_rows:>6}: "
                         + ("equal" if not t.mismatched else
                            f"missing {t.missing}, extra {t.extra}, differing {t.differing}"))
        lines.append(f"lost: {self.lost}   duplicated: {self.duplicated}   mismatched: {self.mismatched}   "
                     f"manual interventions: {self.interventions}")
        if self.sensor is not None:
            s = self.sensor
            lines.append(f"sensor: {s.ticks} ticks ({s.failed_ticks} failed, each cleared by itself), "
                         f"stopped {len(s.stopped)} times; now {s.phase or '?'} at {s.applied_position or '?'}")
        if self.converged_after_fault is not None:
            lines.append(f"converged {self.converged_after_fault:.0f} s after the last fault "
                         f"({self.converged_after_workload:.0f} s after the workload stopped; bound "
                         f"{self.converge_bound:.0f} s)")
        lines.append(f"wall time: {self.wall_seconds:.0f} s")
        examples = [*(self.changelog.examples if self.changelog else []),
                    *(e for t in self.tables for e in t.examples),
                    *(self.workload.examples if self.workload else []),
                    *(self.sensor.stopped if self.sensor else [])]
        if examples:
            lines += ["", "details:"] + [f"  {e}" for e in examples[:40]]
        bad = self.verdicts()
        lines += ["", "RESULT: PASS" if not bad else "RESULT: FAIL: " + "; ".join(bad)]
        return "\n".join(lines)

    def to_json(self) -> str:
        d: dict[str, Any] = asdict(self)
        d.update(by_kind=self.by_kind, lost=self.lost, duplicated=self.duplicated, mismatched=self.mismatched,
                 passed=self.passed, verdicts=self.verdicts())
        return json.dumps(d, indent=1, default=str)
