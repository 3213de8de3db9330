"""Column defaults for rows that existed before an ADD COLUMN.

MySQL/MariaDB give existing rows the new column's default (explicit, or the type's implicit default for a
NOT NULL column without one) and, with instant ADD COLUMN, write nothing to the binlog for them. The mirror
must do the same when it adds the column, or old rows would show NULL where the source shows the default.

The default is read from the source's information_schema when the mirror adds the column (the DDL may be
in an earlier window than the first row with the column). A default that is an expression
(CURRENT_TIMESTAMP, UUID(), NEXTVAL) cannot be reproduced: those rows keep NULL, with a warning, and the
reconciliation check shows the difference.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from . import types as T

log = logging.getLogger(__name__)

Defaults = Callable[[str, str, str, str], Any]  # (schema, table, column, mysql_type) -> staged value or None

_IMPLICIT = {"int": "0", "decimal": "0", "float": "0", "double": "0", "bit": "0", "year": "0", "string": "",
             "binary": "", "set": "0", "enum": "1"}  # Canal text: ENUM's first value is index 1, SET 0 = empty


def default_value(mysql_type: str, column_default: str | None, nullable: bool, column: str = "") -> Any:
    """The staged value MySQL gives existing rows, from information_schema.COLUMNS' COLUMN_DEFAULT text
    (MariaDB quotes string literals and writes NULL as 'NULL') and IS_NULLABLE."""
    t = T.parse_type(mysql_type, column)
    conv = T.text_converter(mysql_type, "UTC", column)
    if column_default is None or column_default.upper() == "NULL":
        if nullable:
            return None
        text = _IMPLICIT.get(t.kind)
        return None if text is None else conv(text)  # temporal NOT NULL: the zero date, staged as NULL
    d = column_default
    if len(d) >= 2 and d[0] == d[-1] == "'":
        text = d[1:-1].replace("''", "'").replace("\\\\", "\\")
        if t.kind == "enum":
            text = str(t.labels.index(text) + 1) if text in t.labels else "0"
        elif t.kind == "set":
            parts = [p for p in text.split(",") if p]
            text = str(sum(1 << t.labels.index(p) for p in parts if p in t.labels))
        return conv(text)
    if d.lower().startswith("b'") and d.endswith("'"):  # BIT literal
        return conv(str(int(d[2:-1] or "0", 2)))
    try:
        float(d)
    except ValueError:
        log.warning("%s: default %s is an expression: rows that predate the column keep NULL in the mirror",
                    column, d)
        return None
    return conv(d)


def source_defaults(conn_kwargs: dict[str, Any] | Callable[[], dict[str, Any]]) -> Defaults:
    """A Defaults provider reading the source's information_schema (one query per added column). ``conn_kwargs``
    may be a function: the connection settings are then read only when a column is added (a window run needs
    the source's conf only when it has to ask the source)."""

    def provide(schema: str, table: str, column: str, mysql_type: str) -> Any:
        import pymysql

        conn = pymysql.connect(**(conn_kwargs() if callable(conn_kwargs) else conn_kwargs))
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT COLUMN_DEFAULT, IS_NULLABLE FROM information_schema.COLUMNS "
                            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND COLUMN_NAME = %s",
                            (schema, table, column))
                row = cur.fetchone()
        finally:
            conn.close()
        if row is None:  # dropped or renamed since: nothing better than NULL
            log.warning("%s.%s.%s: not on the source any more; rows that predate it keep NULL", schema, table, column)
            return None
        default = row[0].decode() if isinstance(row[0], bytes) else row[0]
        return default_value(mysql_type, default, row[1] == "YES", f"{schema}.{table}.{column}")

    return provide
