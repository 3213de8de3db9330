"""pipelines.defs.pools: a lake-writing step runs only while it holds the one slot of its destination's pool, on real
(temporary, SQLite) Dagster instances with and without the pool settings."""

from pathlib import Path

import pytest
from dagster import DagsterEventType, DagsterInstance, OpExecutionContext, job, op

from pipelines.defs.pools import INSTANCE_SETTINGS, UnserializedWriterError, check_writer_slot, writer_pool

POOL = writer_pool("shop")


@op(pool=POOL)
def writer(context: OpExecutionContext) -> None:
    check_writer_slot(context)
    info = context.instance.event_log_storage.get_concurrency_info(POOL)
    assert [(s.run_id, s.step_key) for s in info.claimed_slots] == [(context.run_id, "writer")]


@job
def write() -> None:
    writer()


def _failure(result: object) -> str:
    events = [e for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE]  # type: ignore[attr-defined]
    assert len(events) == 1
    return str(events[0].step_failure_data.error.message)


def test_pool_name() -> None:
    assert writer_pool("example") == "canal/example"


def test_a_writer_holds_the_slot_of_a_one_slot_pool(tmp_path: Path) -> None:
    with DagsterInstance.local_temp(tempdir=str(tmp_path), overrides=INSTANCE_SETTINGS) as instance:
        assert write.execute_in_process(instance=instance).success
        info = instance.event_log_storage.get_concurrency_info(POOL)
        assert info.limit == 1 and not info.claimed_slots   # freed after the step


def test_a_writer_refuses_an_instance_without_the_pool_limit(tmp_path: Path) -> None:
    with DagsterInstance.local_temp(tempdir=str(tmp_path)) as instance:
        result = write.execute_in_process(instance=instance, raise_on_error=False)
    assert not result.success
    message = _failure(result)
    assert "holds no slot" in message and "canal/shop" in message and "no limit" in message
    assert "default_limit: 1" in message and "dagster instance concurrency set canal/shop 1" in message


@pytest.mark.parametrize("limit", [2, 5])
def test_a_writer_refuses_a_pool_of_several_slots(tmp_path: Path, limit: int) -> None:
    with DagsterInstance.local_temp(tempdir=str(tmp_path), overrides=INSTANCE_SETTINGS) as instance:
        instance.event_log_storage.set_concurrency_slots(POOL, limit)
        result = write.execute_in_process(instance=instance, raise_on_error=False)
    assert not result.success
    assert f"limit {limit}" in _failure(result)


def test_unserialized_writer_error_is_a_dagster_failure() -> None:
    from dagster import Failure

    assert issubclass(UnserializedWriterError, Failure)
