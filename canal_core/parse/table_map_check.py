"""A TABLE_MAP event against the schema history's definition of the table: what the binlog says that the
history contradicts (column count, names, binlog types, decimal precision, fractional seconds, bit widths,
signedness, ENUM / SET values)."""

from __future__ import annotations

import re

from ..binlog.constants import ColumnType as T
from ..binlog.tablemap import TableDef
from .model import TableMeta
from .schema import GEOMETRY_TYPES

_BLOB_PACK = {"tinytext": 1, "tinyblob": 1, "text": 2, "blob": 2, "mediumtext": 3, "mediumblob": 3,
              "longtext": 4, "longblob": 4}
_BINLOG_TYPES: dict[str, frozenset[int]] = {
    "tinyint": frozenset({T.TINY}), "smallint": frozenset({T.SHORT}), "mediumint": frozenset({T.INT24}),
    "int": frozenset({T.LONG}), "bigint": frozenset({T.LONGLONG}), "float": frozenset({T.FLOAT}),
    "double": frozenset({T.DOUBLE}), "decimal": frozenset({T.NEWDECIMAL, T.DECIMAL}),
    "year": frozenset({T.YEAR}), "date": frozenset({T.DATE, T.NEWDATE}), "time": frozenset({T.TIME, T.TIME2}),
    "datetime": frozenset({T.DATETIME, T.DATETIME2}), "timestamp": frozenset({T.TIMESTAMP, T.TIMESTAMP2}),
    "bit": frozenset({T.BIT}),
    "varchar": frozenset({T.VARCHAR, T.VAR_STRING, 140}), "varbinary": frozenset({T.VARCHAR, T.VAR_STRING, 140}),
    "char": frozenset({T.STRING}), "binary": frozenset({T.STRING}),
    "uuid": frozenset({T.STRING}), "inet6": frozenset({T.STRING}), "inet4": frozenset({T.STRING}),
    "enum": frozenset({T.ENUM, T.STRING}), "set": frozenset({T.SET, T.STRING}),
    "json": frozenset({T.JSON}),
}
_BLOBS = frozenset({T.BLOB, T.TINY_BLOB, T.MEDIUM_BLOB, T.LONG_BLOB, 141})
_INTEGER_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint"})
_NUM_RE = re.compile(r"\((\d+)(?:,(\d+))?\)")


def table_map_differences(meta: TableMeta, tdef: TableDef) -> list[str]:
    """What a TABLE_MAP says that the history's definition contradicts (empty: they agree)."""
    cols = tdef.columns
    if len(cols) != len(meta.columns):
        return [f"the binlog has {len(cols)} columns, the history {len(meta.columns)} "
                f"({', '.join(c.name for c in meta.columns)})"]
    out: list[str] = []
    for c, m in zip(cols, meta.columns, strict=True):
        label = f"column {c.index + 1} ({m.name})"
        dt = m.data_type
        if dt == "":
            continue  # CREATE ... SELECT column of unknown type: anything goes
        if c.name is not None and c.name.lower() != m.name.lower():
            out.append(f"{label}: the binlog names it {c.name!r}")
            continue
        if dt in _BLOB_PACK:
            if c.type not in _BLOBS:
                out.append(f"{label}: binlog type {c.type_name}, the history says {m.column_type}")
            elif c.type == T.BLOB and c.length and c.length != _BLOB_PACK[dt]:
                out.append(f"{label}: binlog BLOB with {c.length}-byte lengths, the history says {m.column_type}")
            continue
        if dt in GEOMETRY_TYPES:
            if c.type != T.GEOMETRY:
                out.append(f"{label}: binlog type {c.type_name}, the history says {m.column_type}")
            continue
        allowed = _BINLOG_TYPES.get(dt)
        if allowed is None:
            continue
        if c.type not in allowed:
            out.append(f"{label}: binlog type {c.type_name}, the history says {m.column_type}")
            continue
        if dt == "decimal" and c.precision:
            mm = _NUM_RE.search(m.column_type)
            if mm and (int(mm.group(1)), int(mm.group(2) or 0)) != (c.precision, c.scale):
                out.append(f"{label}: binlog decimal({c.precision},{c.scale}), the history says {m.column_type}")
        elif dt in ("time", "datetime", "timestamp") and c.type in (T.TIME2, T.DATETIME2, T.TIMESTAMP2):
            mm = _NUM_RE.search(m.column_type)
            fsp = int(mm.group(1)) if mm else 0
            if fsp != c.fsp:
                out.append(f"{label}: binlog fractional seconds {c.fsp}, the history says {m.column_type}")
        elif dt == "bit":
            mm = _NUM_RE.search(m.column_type)
            if mm and c.bits and int(mm.group(1)) != c.bits:
                out.append(f"{label}: binlog bit({c.bits}), the history says {m.column_type}")
        if tdef.has_optional_metadata and dt in _INTEGER_TYPES and c.unsigned != m.unsigned:
            out.append(f"{label}: the binlog says {'unsigned' if c.unsigned else 'signed'}, the history says "
                       f"{m.column_type}")
        if dt == "enum" and c.enum_values is not None and m.enum_values is not None \
                and tuple(c.enum_values) != tuple(m.enum_values):
            out.append(f"{label}: binlog ENUM values {list(c.enum_values)}, the history says {m.column_type}")
        if dt == "set" and c.set_values is not None and m.set_values is not None \
                and tuple(c.set_values) != tuple(m.set_values):
            out.append(f"{label}: binlog SET values {list(c.set_values)}, the history says {m.column_type}")
    return out
