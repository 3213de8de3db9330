"""The mirrored tables: the destination's filter applied to the source's information_schema, resolved when
the definitions load and cached in ``{state}/{destination}/tables.json`` for when the source is unreachable.

A table created later enters on the next code-location reload (its changes reach the changelog meanwhile);
then the sensor snapshots it.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from ...engine.config import PipelineConfig

log = logging.getLogger(__name__)

SYSTEM_SCHEMAS = ("information_schema", "performance_schema", "mysql", "sys")


class TableListUnavailable(RuntimeError):
    """Neither the source nor the cache could say which tables to mirror."""


def cache_path(config: PipelineConfig) -> Path:
    return config.state_dir / "tables.json"


def list_source_tables(config: PipelineConfig) -> list[str]:
    """schema.table of every base table the destination's filter (white and black regex) accepts."""
    import pymysql

    event_filter = config.instance_config().event_filter()
    conn = pymysql.connect(**config.conn_kwargs())
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' "
                f"AND TABLE_SCHEMA NOT IN ({', '.join(['%s'] * len(SYSTEM_SCHEMAS))}) "
                "ORDER BY TABLE_SCHEMA, TABLE_NAME", SYSTEM_SCHEMAS)
            rows = cur.fetchall()
    finally:
        conn.close()
    return [f"{s}.{t}" for s, t in rows if event_filter.table(s, t)]


def resolve_tables(config: PipelineConfig) -> list[str]:
    """From the source (refreshing the cache), else from the cache, else TableListUnavailable."""
    from canal_core.parse.position import write_atomically

    cache = cache_path(config)
    try:
        tables = list_source_tables(config)
    except Exception as e:  # unreachable, bad credentials, ...: fall back to the last known list
        try:
            data = json.loads(cache.read_text())
        except FileNotFoundError:
            inst = config.instance_config()
            raise TableListUnavailable(
                f"cannot list the tables of destination {config.destination!r}: the source "
                f"{inst.master_address} ({inst.db_username}) failed with {type(e).__name__}: {e}, and there is no "
                f"cached list at {cache}. Start the database (scripts/setup.sh starts the private MariaDB) or "
                "fix conf/" + f"{config.destination}/instance.properties.") from e
        log.warning("source unreachable (%s): using the table list cached at %s (%s)", e, cache,
                    time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(data.get("resolved_at", 0))))
        return list(data["tables"])
    payload = {"tables": tables, "resolved_at": int(time.time()), "destination": config.destination}
    try:
        if not cache.is_file() or json.loads(cache.read_text()).get("tables") != tables:
            cache.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(cache, json.dumps(payload, indent=1).encode())
    except OSError as e:  # a read-only state dir must not stop the definitions from loading
        log.warning("cannot write the table list cache %s: %s", cache, e)
    return tables
