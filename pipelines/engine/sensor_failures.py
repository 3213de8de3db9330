"""How the canal sensor tells a failure of the machinery (retried forever) from one of the data (may stop the
destination), when two failures are the same error, and the failure it records."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class FailureKind(StrEnum):
    INFRA = "infrastructure"     # the machinery failed, not the data: retried forever
    DATA = "error"               # may be deterministic: stops after max_failures identical ones in a row


@dataclass
class Failure:
    """The last failure of the current window (or snapshot) attempt series."""

    kind: str                     # FailureKind
    message: str                  # one line, with the run id
    signature: str                # the message without ids and numbers: equal signatures = the same error
    at: float
    count: int = 1                # consecutive failures with this signature


# Errors that say the machinery failed, not the window's data: a run worker or the code server gone, Spark's JVM
# or Spark Connect server gone, the source or Dagster storage unreachable, an interrupted run.
_INFRA = re.compile("|".join([
    r"run worker", r"worker (?:process|for run)", r"process for run \S+ (?:exited|was terminated)",
    r"never appeared", r"not created", r"code (?:server|location)", r"DagsterUserCodeUnreachableError",
    r"DagsterExecutionInterruptedError", r"KeyboardInterrupt", r"SIGTERM", r"SIGKILL", r"signal \d+",
    r"Py4J(?:Network)?Error", r"Java gateway process exited", r"SparkContext (?:was|has been) shut down",
    r"Cannot call methods on a stopped SparkContext", r"SparkConnectGrpcException", r"StatusCode\.UNAVAILABLE",
    r"no Spark Connect server answers", r"Connection (?:refused|reset|aborted)", r"Broken pipe",
    r"Can't connect to (?:MySQL|MariaDB) server", r"Lost connection to (?:MySQL|MariaDB) server",
    r"server has gone away", r"OperationalError: \((?:2003|2006|2013)", r"timed? ?out", r"No space left on device",
    r"database is locked", r"run (?:was )?canceled", r"CANCELED",
]), re.IGNORECASE)
_IDS = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b|\b[0-9a-f]{16,}\b|\d+")


def classify(message: str) -> FailureKind:
    """INFRA when the error names a machinery fault (retried forever), else DATA."""
    return FailureKind.INFRA if _INFRA.search(message or "") else FailureKind.DATA


def signature(message: str) -> str:
    """The error with run ids, positions and counts blanked: two failures with one signature are the same error."""
    return _IDS.sub("#", message or "")[:300]


def _fail(prev: Failure | None, kind: FailureKind, message: str, now: float) -> Failure:
    sig = signature(message)
    count = prev.count + 1 if prev is not None and prev.signature == sig and prev.kind == kind else 1
    return Failure(kind=kind, message=message, signature=sig, at=now, count=count)
