"""Asset keys and names shared by the assets, the jobs and the sensor (no Dagster definitions here)."""

from __future__ import annotations

from dagster import AssetCheckKey, AssetKey

CHANGELOG = AssetKey(["canal", "changelog"])
RECONCILE_CHECK = "reconcile"
LAG_CHECK = "lag"

WINDOW_JOB = "canal_window"
SNAPSHOT_JOB = "canal_snapshot"
RECONCILE_JOB = "canal_reconcile"
BACKFILL_JOB = "canal_backfill"
MAINTENANCE_JOB = "canal_maintenance"


def split_table(name: str) -> tuple[str, str]:
    """'schema.table' -> (schema, table)."""
    schema, dot, table = name.partition(".")
    if not dot or not schema or not table:
        raise ValueError(f"table {name!r}: expected schema.table")
    return schema, table


def source_key(name: str) -> AssetKey:
    return AssetKey(["mysql", *split_table(name)])


def mirror_key(name: str) -> AssetKey:
    return AssetKey(["mirror", *split_table(name)])


def table_of(key: AssetKey) -> str:
    """mirror/<schema>/<table> -> 'schema.table'."""
    return ".".join(key.path[1:])


def reconcile_check_key(name: str) -> AssetCheckKey:
    return AssetCheckKey(mirror_key(name), RECONCILE_CHECK)


def lag_check_key(name: str) -> AssetCheckKey:
    return AssetCheckKey(mirror_key(name), LAG_CHECK)
