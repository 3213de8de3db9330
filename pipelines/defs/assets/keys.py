"""Asset keys and names shared by the assets, the jobs and the sensor (no Dagster definitions here).

One destination has the plain names (``canal/changelog``, ``mirror/<schema>/<table>``, ``canal_window``); with
several in one code location (``destinations:``) each destination's keys start with its name and its jobs and
schedules are prefixed with it (``primary/mirror/shop/orders``, ``primary__canal_window``): ``keys_for(config)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dagster import AssetCheckKey, AssetKey

if TYPE_CHECKING:  # pragma: no cover
    from ...engine.config import PipelineConfig

RECONCILE_CHECK = "reconcile"
LAG_CHECK = "lag"


def split_table(name: str) -> tuple[str, str]:
    """'schema.table' -> (schema, table)."""
    schema, dot, table = name.partition(".")
    if not dot or not schema or not table:
        raise ValueError(f"table {name!r}: expected schema.table")
    return schema, table


@dataclass(frozen=True, slots=True)
class Keys:
    """The names of one destination's definitions; ``namespace`` "" for the plain ones."""

    namespace: str = ""

    def _key(self, *path: str) -> AssetKey:
        return AssetKey([self.namespace, *path] if self.namespace else list(path))

    def name(self, base: str) -> str:
        """A job, op or schedule name of this destination."""
        return f"{self.namespace}__{base}" if self.namespace else base

    @property
    def changelog(self) -> AssetKey:
        return self._key("canal", "changelog")

    def source(self, name: str) -> AssetKey:
        return self._key("mysql", *split_table(name))

    def mirror(self, name: str) -> AssetKey:
        return self._key("mirror", *split_table(name))

    def table_of(self, key: AssetKey) -> str:
        """[<namespace>/]mirror/<schema>/<table> -> 'schema.table'."""
        return ".".join(key.path[2 if self.namespace else 1:])

    def reconcile_check(self, name: str) -> AssetCheckKey:
        return AssetCheckKey(self.mirror(name), RECONCILE_CHECK)

    def lag_check(self, name: str) -> AssetCheckKey:
        return AssetCheckKey(self.mirror(name), LAG_CHECK)

    @property
    def window_job(self) -> str:
        return self.name("canal_window")

    @property
    def snapshot_job(self) -> str:
        return self.name("canal_snapshot")

    @property
    def reconcile_job(self) -> str:
        return self.name("canal_reconcile")

    @property
    def backfill_job(self) -> str:
        return self.name("canal_backfill")

    @property
    def maintenance_job(self) -> str:
        return self.name("canal_maintenance")

    @property
    def maintenance_schedule(self) -> str:
        return self.name("canal_maintenance_schedule")

    @property
    def backfill_op(self) -> str:
        return self.name("backfill_period")

    @property
    def maintenance_op(self) -> str:
        return self.name("optimize_and_vacuum")

    @property
    def group(self) -> str:
        """Asset group prefix: the UI lists each destination's groups together."""
        return f"{self.namespace}_" if self.namespace else ""


def keys_for(config: PipelineConfig) -> Keys:
    return Keys(config.namespace)


def sensor_name(config: PipelineConfig) -> str:
    """The destination's sensor: canal_<destination> (in Dagster's alphabet)."""
    from ...engine.config import dagster_name

    return f"canal_{dagster_name(config.destination)}"


# the plain names (one destination)
PLAIN = Keys()
CHANGELOG = PLAIN.changelog
WINDOW_JOB = PLAIN.window_job
SNAPSHOT_JOB = PLAIN.snapshot_job
RECONCILE_JOB = PLAIN.reconcile_job
BACKFILL_JOB = PLAIN.backfill_job
MAINTENANCE_JOB = PLAIN.maintenance_job
source_key = PLAIN.source
mirror_key = PLAIN.mirror
table_of = PLAIN.table_of
reconcile_check_key = PLAIN.reconcile_check
lag_check_key = PLAIN.lag_check
