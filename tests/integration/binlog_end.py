"""The source's binlog end for tests, read the way canal_core reads it: ``ReplicationConnection.master_status``
(SHOW BINARY LOG STATUS on MySQL 8.4+, where SHOW MASTER STATUS is gone; SHOW MASTER STATUS before)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from canal_core.mysql import ReplicationConnection


def binlog_end(conn_kwargs: Mapping[str, Any]) -> tuple[str, int]:
    """(file, offset) where the next event will be written; ``conn_kwargs``: pymysql-style keyword arguments of an
    account with REPLICATION CLIENT (host, port, user, password, ssl; others are ignored)."""
    kw = {k: v for k, v in conn_kwargs.items() if k in ("host", "port", "user", "password", "ssl")}
    conn = ReplicationConnection(**kw)
    try:
        conn.connect()
        file, pos, _ = conn.master_status()
    finally:
        conn.close()
    return file, pos


def master_status(settings: Any) -> tuple[str, int]:
    """``binlog_end`` of a test MariaDB instance's settings (tests/support/instances.py)."""
    return binlog_end(settings.repl_kwargs())
