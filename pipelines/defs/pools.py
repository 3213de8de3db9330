"""One writer at a time per destination: a Dagster concurrency pool serializes the steps that write its lake tables.

Every step that writes ``canal/changelog`` or a mirror of a destination (the changelog asset, the mirror assets in
window, snapshot and backfill modes, the ``canal_backfill`` op, the maintenance op) declares the pool
``canal/<destination>``. With one slot in that pool (``concurrency: pools: default_limit: 1``, granularity ``op``,
in the project's ``dagster_home/dagster.yaml``) Dagster runs those steps one after the other across every run of
the instance: a step waits for the slot before it starts (its run's event log shows "Step blocked by limit for
pool canal/<destination>" and the run stays STARTED, or QUEUED until the run coordinator sees a free slot).

An instance without that limit would run them side by side without a word, so a writer step checks first that it
holds a slot of a one-slot pool and otherwise fails with what to configure (``check_writer_slot``). Delta's
optimistic concurrency alone does not make concurrent writers safe here: a backfill's re-merge plans against the
mirror before its MERGE (pipelines.engine.remerge verifies that plan at commit time as a second line of defence).
"""

from __future__ import annotations

from typing import Any

from dagster import Failure

POOL_LIMIT = 1
POOL_PREFIX = "canal/"
# the dagster.yaml settings that give every pool one slot (as dagster_home/dagster.yaml has them), for instances
# built in code (DagsterInstance.local_temp(overrides=...))
INSTANCE_SETTINGS = {"concurrency": {"pools": {"default_limit": POOL_LIMIT, "granularity": "op"}}}


def writer_pool(destination: str) -> str:
    """The Dagster concurrency pool of the steps that write ``destination``'s lake tables."""
    return f"{POOL_PREFIX}{destination}"


class UnserializedWriterError(Failure):
    """A lake-writing step runs without holding the one slot of its destination's pool."""


def check_writer_slot(context: Any) -> str:
    """Raise UnserializedWriterError unless the running step holds a slot of its pool and the pool has exactly
    POOL_LIMIT slots on this instance; returns the pool. ``context``: an op or asset execution context."""
    step = context.get_step_execution_context().step
    pool = step.pool
    if not pool:
        raise UnserializedWriterError(description=f"step {step.key} writes the lake but declares no pool")
    storage = context.instance.event_log_storage
    fix = (f"set `concurrency: {{pools: {{default_limit: {POOL_LIMIT}, granularity: op}}}}` in "
           f"$DAGSTER_HOME/dagster.yaml (the project's dagster_home/dagster.yaml has it) or run "
           f"`dagster instance concurrency set {pool} {POOL_LIMIT}`, then launch the run again")
    if not storage.supports_global_concurrency_limits:
        raise UnserializedWriterError(description=(
            f"step {step.key}: this Dagster instance's storage has no concurrency pools, so writers of {pool} "
            "could run at the same time and regress the mirrors; use a persistent instance (SQLite or Postgres "
            "storage) with the pool configured: " + fix))
    info = storage.get_concurrency_info(pool)
    run_id = context.run.run_id
    mine = any(s.run_id == run_id and s.step_key == step.key for s in info.claimed_slots)
    if info.limit != POOL_LIMIT or not mine:
        have = "no limit" if info.limit is None else f"limit {info.limit}"
        why = "holds no slot of it" if not mine else "the pool lets other writers in beside it"
        raise UnserializedWriterError(description=(
            f"step {step.key} writes the lake tables of pool {pool} but {why} ({have} on this Dagster instance, "
            f"granularity {_granularity(context.instance)}): writers of one destination must run one at a time "
            "or a backfill can regress a mirror; " + fix))
    return pool


def _granularity(instance: Any) -> str:
    g = instance.get_concurrency_config().pool_config.pool_granularity
    return g.value if g is not None else "op (default)"
