"""A run that dies holding its pool's slot (its worker SIGKILLed with the main job mid-step, so no step ever frees
the slot) must not block the destination's writers forever: with the project's dagster_home/dagster.yaml the
monitoring daemon frees the slots of a finished run shortly after it ended, and the queued writer gets the slot."""

import datetime as dt
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from dagster import DagsterInstance, job, op
from dagster._daemon.monitoring import concurrency as slot_monitor

from pipelines.defs.pools import writer_pool

REPO_ROOT = Path(__file__).resolve().parents[2]
POOL = writer_pool("shop")


@op(pool=POOL)
def writer() -> None:
    pass


@job
def write() -> None:
    writer()


def _project_instance(tmp_path: Path) -> DagsterInstance:
    """The project's dagster.yaml with its storage under ``tmp_path``."""
    cfg: dict[str, Any] = yaml.safe_load((REPO_ROOT / "dagster_home" / "dagster.yaml").read_text())
    cfg["storage"] = {"sqlite": {"base_dir": str(tmp_path / "storage")}}
    cfg["local_artifact_storage"]["config"]["base_dir"] = str(tmp_path)
    cfg["compute_logs"]["config"]["base_dir"] = str(tmp_path / "compute_logs")
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(cfg))
    return DagsterInstance.from_config(str(tmp_path))


def _monitor_pass(instance: DagsterInstance, at: dt.datetime, monkeypatch: pytest.MonkeyPatch) -> None:
    """One pass of the monitoring daemon's slot check, as if run at ``at``."""
    monkeypatch.setattr(slot_monitor, "get_current_datetime", lambda: at)
    list(slot_monitor.execute_concurrency_slots_iteration(SimpleNamespace(instance=instance),
                                                          logging.getLogger("test")))


def test_the_slot_of_a_run_that_died_holding_it_is_freed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    instance = _project_instance(tmp_path)
    try:
        storage = instance.event_log_storage
        assert storage.initialize_concurrency_limit_to_default(POOL)  # one slot, as the first writer step does
        dead = instance.create_run_for_job(write)
        waiting = instance.create_run_for_job(write)
        assert storage.claim_concurrency_slot(POOL, dead.run_id, "writer").is_claimed
        assert not storage.claim_concurrency_slot(POOL, waiting.run_id, "writer").is_claimed
        # what run monitoring does when the run's worker is gone: the run FAILED, nothing freed its slot
        instance.report_run_failed(instance.get_run_by_id(dead.run_id))
        ended = instance.get_run_record_by_id(dead.run_id).end_time
        assert ended is not None

        _monitor_pass(instance, dt.datetime.fromtimestamp(ended + 1, dt.UTC), monkeypatch)
        assert [s.run_id for s in storage.get_concurrency_info(POOL).claimed_slots] == [dead.run_id]

        _monitor_pass(instance, dt.datetime.fromtimestamp(ended + 60, dt.UTC), monkeypatch)
        assert storage.claim_concurrency_slot(POOL, waiting.run_id, "writer").is_claimed
        assert [s.run_id for s in storage.get_concurrency_info(POOL).claimed_slots] == [waiting.run_id]
    finally:
        instance.dispose()
