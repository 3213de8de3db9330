"""The few private Dagster names the pipeline relies on, in one place.

Dagster's public API (``import dagster``) does not cover everything the pipeline does; each name below comes
from ``dagster._*``, which may change in any release. Nothing else in ``pipelines/`` imports ``dagster._``:
after a Dagster upgrade this module is the one to check (the pipeline tests exercise every name here).

- ``UnresolvedAssetJobDefinition``: the type ``define_asset_job`` returns, to type the jobs it builds
  (pipelines/jobs.py). Public replacement: a public name for that return type.
- ``RUN_KEY_TAG``: the tag Dagster stores a run's run key under, to find the run the sensor launched for a
  window by its key (pipelines/sensor.py). Public replacement: a run-key filter in ``RunsFilter``.
- ``GRPC_INFO_TAG``: the tag saying which code server launched a run, to tell a local run worker from one on
  another host (pipelines/launcher.py). Public replacement: the run worker's host on the run.
- ``CheckRunHealthResult``, ``WorkerStatus``: what a run launcher's ``check_run_worker_health`` returns
  (pipelines/launcher.py). Public replacement: exporting them with ``RunLauncher``.
- ``DagsterGrpcClient``, ``DagsterUserCodeUnreachableError``: ask a code server on a socket whether it
  serves (pipelines/deployment.py). Public replacement: a health probe in the ``dagster`` CLI or API.
- ``user_error``: Dagster wraps an op's exception in its own ``dagster._core.errors`` errors; the run's step
  failure names those first. Public replacement: the user's error on the step failure event.
"""

from __future__ import annotations

from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition
from dagster._core.errors import DagsterUserCodeUnreachableError
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus
from dagster._core.storage.tags import GRPC_INFO_TAG, RUN_KEY_TAG
from dagster._grpc.client import DagsterGrpcClient
from dagster_shared.error import SerializableErrorInfo

__all__ = [
    "GRPC_INFO_TAG",
    "RUN_KEY_TAG",
    "CheckRunHealthResult",
    "UnresolvedAssetJobDefinition",
    "WorkerStatus",
    "code_server_answers",
    "user_error",
]

# the module Dagster's own wrapper errors are raised from, as it appears in a serialized stack
_FRAMEWORK_ERRORS = "dagster._core.errors"


def code_server_answers(socket: str, timeout: int = 3) -> bool:
    """Whether a Dagster code server serves on this Unix socket (it answers its server id in time)."""
    try:
        DagsterGrpcClient(socket=socket).get_server_id(timeout=timeout)
        return True
    except DagsterUserCodeUnreachableError:
        return False


def user_error(err: SerializableErrorInfo) -> SerializableErrorInfo:
    """The innermost error of ``err`` that Dagster's own error wrappers did not raise: the op's exception."""
    while err.cause is not None and _FRAMEWORK_ERRORS in "".join(err.stack[:1]):
        err = err.cause
    return err
