"""Column facts from the live server's information_schema, as decoder schema hints.

This reads the table as it is now, which is right for tailing from the present; decoding history
across DDL needs the schema history of the parser (canal_core/parse), which produces the same hints.
"""

from __future__ import annotations

import re
from typing import Any

from ..binlog.tablemap import ColumnHint

_LOGICAL = {"uuid": "uuid", "inet6": "inet6", "inet4": "inet4"}


def parse_enum_values(column_type: str) -> tuple[str, ...]:
    """Values of "enum('a','b''c')" / "set(...)" as MySQL prints COLUMN_TYPE."""
    inner = column_type[column_type.index("(") + 1:column_type.rindex(")")]
    return tuple(m.group(1).replace("''", "'").replace("\\\\", "\\")
                 for m in re.finditer(r"'((?:[^']|'')*)'", inner))


def column_hints(conn: Any, schema: str, table: str) -> list[ColumnHint]:
    """Hints for schema.table through a PyMySQL connection (any user that can see the table)."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT c.COLUMN_NAME, c.DATA_TYPE, c.COLUMN_TYPE, co.ID FROM information_schema.COLUMNS c "
            "LEFT JOIN information_schema.COLLATIONS co ON co.COLLATION_NAME = c.COLLATION_NAME "
            "WHERE c.TABLE_SCHEMA = %s AND c.TABLE_NAME = %s ORDER BY c.ORDINAL_POSITION",
            (schema, table))
        rows = cur.fetchall()
    hints = []
    for name, data_type, column_type, coll_id in rows:
        name, data_type, column_type = (_s(name), _s(data_type).lower(), _s(column_type))
        binary_type = data_type in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")
        hints.append(ColumnHint(
            name=name,
            unsigned="unsigned" in column_type.lower(),
            collation=63 if binary_type else (int(coll_id) if coll_id is not None else None),
            enum_values=parse_enum_values(column_type) if data_type == "enum" else None,
            set_values=parse_enum_values(column_type) if data_type == "set" else None,
            logical=_LOGICAL.get(data_type),
        ))
    return hints


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes | bytearray) else str(v)
