"""The schema model's tables (TableMeta whose ``extra["indexes"]`` holds ``ddl.IndexSpec``s): how DDL
edits their index lists, which columns the server shows as PRI, and the dict form snapshots keep."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from . import ddl as D
from .model import ColumnMeta, SchemaHistoryError, TableMeta


class SchemaApplyError(SchemaHistoryError):
    """A DDL statement does not fit the model (e.g. drops a column the model does not have): the
    history has drifted from the server."""

    def __init__(self, message: str, table: tuple[str, str] | None = None) -> None:
        super().__init__(message)
        self.table = table


_COLUMN_FIELDS = ("name", "data_type", "column_type", "nullable", "unsigned", "charset", "collation", "collation_id",
                  "enum_values", "set_values", "is_key", "default", "generated")


def table_to_dict(t: TableMeta) -> dict[str, Any]:
    extra = {k: v for k, v in t.extra.items() if k != "indexes"}
    return {
        "schema": t.schema, "name": t.name, "charset": t.charset, "collation": t.collation, "comment": t.comment,
        "columns": [{f: (list(v) if isinstance(v := getattr(c, f), tuple) else v) for f in _COLUMN_FIELDS
                     if getattr(c, f) not in (None, False, "") or f in ("name", "data_type", "column_type",
                                                                          "nullable")}
                    for c in t.columns],
        "indexes": [{"name": x.name, "kind": x.kind, "columns": [list(p) for p in x.columns]}
                    for x in t.extra.get("indexes", ())],
        "extra": extra,
    }


def table_from_dict(d: dict[str, Any]) -> TableMeta:
    cols = []
    for c in d["columns"]:
        kw = dict(c)
        for f in ("enum_values", "set_values"):
            if kw.get(f) is not None:
                kw[f] = tuple(kw[f])
        cols.append(ColumnMeta(**kw))
    indexes = tuple(D.IndexSpec(name=x["name"], kind=x["kind"], columns=tuple((p[0], p[1]) for p in x["columns"]))
                    for x in d.get("indexes") or [])
    return TableMeta(schema=d["schema"], name=d["name"], columns=tuple(cols), charset=d.get("charset"),
                     collation=d.get("collation"), comment=d.get("comment") or "",
                     extra={**(d.get("extra") or {}), "indexes": indexes})


def inline_indexes(spec: D.ColumnSpec) -> list[D.IndexSpec]:
    out = []
    if spec.primary_key:
        out.append(D.IndexSpec(name="PRIMARY", kind="primary", columns=((spec.name, None),)))
    if spec.unique or spec.type == "serial":
        out.append(D.IndexSpec(name=None, kind="unique", columns=((spec.name, None),)))
    return out


def add_index(indexes: list[D.IndexSpec], ix: D.IndexSpec, cols: list[ColumnMeta]) -> list[D.IndexSpec]:
    if ix.kind == "primary":
        if any(x.kind == "primary" for x in indexes):
            raise SchemaApplyError("a second PRIMARY KEY")
        return [replace(ix, name="PRIMARY"), *indexes]
    name = ix.name
    taken = {(x.name or "").lower() for x in indexes}
    if not name:
        base = ix.columns[0][0] if ix.columns else "key"
        name, n = base, 2
        while name.lower() in taken:
            name = f"{base}_{n}"
            n += 1
    elif name.lower() in taken:
        raise SchemaApplyError(f"duplicate index name {name}")
    return [*indexes, replace(ix, name=name)]


def drop_index_column(indexes: list[D.IndexSpec], column: str) -> list[D.IndexSpec]:
    out = []
    for x in indexes:
        cols = tuple(p for p in x.columns if p[0].lower() != column)
        if cols:
            out.append(replace(x, columns=cols))
    return out


def rename_index_column(indexes: list[D.IndexSpec], old: str, new: str) -> list[D.IndexSpec]:
    low = old.lower()
    return [replace(x, columns=tuple((new if p[0].lower() == low else p[0], p[1]) for p in x.columns))
            for x in indexes]


def pk_not_null(cols: list[ColumnMeta], indexes: list[D.IndexSpec]) -> list[ColumnMeta]:
    pk = next((x for x in indexes if x.kind == "primary"), None)
    if pk is None:
        return cols
    names = {p[0].lower() for p in pk.columns}
    return [replace(c, nullable=False) if c.name.lower() in names and c.nullable else c for c in cols]


def effective_primary_key(t: TableMeta) -> tuple[str, ...]:
    """The columns the server shows as PRI."""
    indexes = t.extra.get("indexes", ())
    byname = {c.name.lower(): c for c in t.columns}
    for x in indexes:
        if x.kind == "primary":
            return tuple(p[0] for p in x.columns)
    for x in indexes:
        if x.kind == "unique" and x.columns and all(
                p[1] is None and p[0].lower() in byname and not byname[p[0].lower()].nullable
                and byname[p[0].lower()].data_type not in ("tinytext", "text", "mediumtext", "longtext", "tinyblob",
                                                            "blob", "mediumblob", "longblob")
                for p in x.columns):
            return tuple(p[0] for p in x.columns)
    return ()


def with_keys(t: TableMeta) -> TableMeta:
    pk = {n.lower() for n in effective_primary_key(t)}
    cols = tuple(replace(c, is_key=c.name.lower() in pk) if c.is_key != (c.name.lower() in pk) else c
                 for c in t.columns)
    return replace(t, columns=cols, extra=dict(t.extra))
