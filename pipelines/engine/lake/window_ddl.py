"""The DDL of a window that a mirror must follow (TRUNCATE, DROP TABLE, column renames, table renames), read with
the DDL parser only (no Spark)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from canal_core.parse.ddl import (
    AlterTable,
    ChangeColumn,
    DropTables,
    RenameColumn,
    RenameTables,
    RenameTo,
    TruncateTables,
    parse_ddl,
)

from ..window import TableChanges, WindowManifest

if TYPE_CHECKING:  # pragma: no cover
    pass


@dataclass(frozen=True, slots=True)
class _Ddl:
    pos: int
    kind: str                 # "truncate" | "erase" | "rename_column"
    old: str = ""
    new: str = ""


def _table_ddl(manifest: WindowManifest, schema: str, table: str) -> list[_Ddl]:
    """TRUNCATE / DROP TABLE / column renames of schema.table in the window, by position."""
    out: list[_Ddl] = []
    for rec in manifest.ddl:
        parsed = parse_ddl(rec.sql, rec.schema)
        for op in parsed.operations:
            if isinstance(op, TruncateTables) and (schema, table) in op.tables:
                out.append(_Ddl(rec.pos, "truncate"))
            elif isinstance(op, DropTables) and (schema, table) in op.tables:
                out.append(_Ddl(rec.pos, "erase"))
            elif isinstance(op, AlterTable) and (op.schema, op.name) == (schema, table):
                for a in op.actions:
                    if isinstance(a, RenameColumn) and a.old != a.new:
                        out.append(_Ddl(rec.pos, "rename_column", a.old, a.new))
                    elif isinstance(a, ChangeColumn) and a.old != a.spec.name:
                        out.append(_Ddl(rec.pos, "rename_column", a.old, a.spec.name))
    return sorted(set(out), key=lambda d: d.pos)


def mirror_tables(manifest: WindowManifest) -> list[TableChanges]:
    """The tables apply_mirror must see for this window: those with changes plus those the window truncates,
    drops or renames a column of (as TableChanges without parts)."""
    out = list(manifest.tables)
    have = {(t.schema, t.table) for t in out}
    for rec in manifest.ddl:
        for op in parse_ddl(rec.sql, rec.schema).operations:
            names: tuple[tuple[str, str], ...] = ()
            if isinstance(op, TruncateTables | DropTables):
                names = op.tables
            elif isinstance(op, AlterTable) and any(isinstance(a, RenameColumn | ChangeColumn) for a in op.actions):
                names = ((op.schema, op.name),)
            for s, t in names:
                if (s, t) not in have:
                    have.add((s, t))
                    out.append(TableChanges(s, t, []))
    return out


def rename_statements(manifest: WindowManifest) -> list[tuple[int, list[tuple[tuple[str, str], tuple[str, str]]]]]:
    """The window's RENAME TABLE / ALTER TABLE ... RENAME TO statements: (position, pairs in statement order)."""
    out = []
    for rec in manifest.ddl:
        pairs: list[tuple[tuple[str, str], tuple[str, str]]] = []
        for op in parse_ddl(rec.sql, rec.schema).operations:
            if isinstance(op, RenameTables):
                pairs.extend(op.pairs)
            elif isinstance(op, AlterTable):
                pairs.extend(((op.schema, op.name), (a.schema, a.name)) for a in op.actions if isinstance(a, RenameTo))
        if pairs:
            out.append((rec.pos, pairs))
    return sorted(out, key=lambda r: r[0])
