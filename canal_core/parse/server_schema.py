"""The schema of a live server as a SchemaModel (SHOW CREATE DATABASE / TABLE), the starting point of a
schema history."""

from __future__ import annotations

import logging
import time
from typing import Any

from ..protocol.position import EntryPosition
from . import ddl as D
from .model import SchemaHistoryError
from .schema import SchemaModel

log = logging.getLogger(__name__)


SYSTEM_SCHEMAS = frozenset({"information_schema", "performance_schema", "mysql", "sys"})


def _scalar(cur: Any, sql: str) -> Any:
    cur.execute(sql)
    row = cur.fetchone()
    return _text(row[0]) if row else None


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes | bytearray) else v


def read_server_schema(conn: Any, position: EntryPosition | None = None,
                       schemas: list[str] | tuple[str, ...] | None = None, *,
                       server_version: int = D.DEFAULT_SERVER_VERSION) -> tuple[SchemaModel, EntryPosition]:
    """The live server's schema as a SchemaModel (SHOW CREATE DATABASE / TABLE through a PyMySQL
    connection), and the position it is labelled with (SHOW MASTER STATUS when not given)."""
    with conn.cursor() as cur:
        version = str(_scalar(cur, "SELECT @@version") or "")
        flavor = "mariadb" if "mariadb" in version.lower() else "mysql"
        edt = _scalar(cur, "SELECT @@explicit_defaults_for_timestamp")
        model = SchemaModel(charset=str(_scalar(cur, "SELECT @@character_set_server")),
                            collation=str(_scalar(cur, "SELECT @@collation_server")),
                            explicit_defaults_for_timestamp=str(edt) in ("1", "ON", "on"),
                            lower_case_table_names=int(_scalar(cur, "SELECT @@lower_case_table_names") or 0),
                            flavor=flavor)
        if position is None:
            try:
                cur.execute("SHOW MASTER STATUS")
            except Exception:  # MySQL 8.4+
                cur.execute("SHOW BINARY LOG STATUS")
            row = cur.fetchone()
            if not row:
                raise SchemaHistoryError("the server has no binary log (SHOW MASTER STATUS is empty)")
            sid = int(_scalar(cur, "SELECT @@server_id") or 0)
            position = EntryPosition(journal_name=_text(row[0]), position=int(row[1]), server_id=sid,
                                     timestamp=int(time.time() * 1000))
        cur.execute("SHOW DATABASES")
        all_dbs = [_text(r[0]) for r in cur.fetchall()]
        dbs = [d for d in all_dbs if (d in schemas if schemas else d.lower() not in SYSTEM_SCHEMAS)]
        for db in dbs:
            q = "`" + db.replace("`", "``") + "`"
            cur.execute(f"SHOW CREATE DATABASE {q}")
            row = cur.fetchone()
            parsed = D.parse_ddl(_text(row[1]), db, server_version=server_version)
            model.apply(parsed)
            cur.execute(f"SHOW FULL TABLES FROM {q}")
            tables = [(_text(r[0]), _text(r[1])) for r in cur.fetchall()]
            for name, kind in tables:
                if kind not in ("BASE TABLE", "SEQUENCE", "SYSTEM VERSIONED"):
                    continue
                tq = "`" + name.replace("`", "``") + "`"
                try:
                    cur.execute(f"SHOW CREATE TABLE {q}.{tq}")
                except Exception as e:  # dropped meanwhile
                    log.warning("SHOW CREATE TABLE %s.%s failed: %s", db, name, e)
                    continue
                row = cur.fetchone()
                create = _text(row[1])
                if kind == "SEQUENCE":
                    model.apply(D.parse_ddl(f"CREATE SEQUENCE {q}.{tq}", db))
                    continue
                parsed = D.parse_ddl(create, db, server_version=server_version)
                if not parsed.parsed:
                    log.warning("schema history bootstrap: cannot parse SHOW CREATE TABLE %s.%s (%s); the "
                                "table is left out of the history", db, name, parsed.error)
                    continue
                model.apply(parsed)
    return model, position
