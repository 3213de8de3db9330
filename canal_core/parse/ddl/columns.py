"""Column and index definitions, names and literals read from sqlglot's tree: column types normalised to
MySQL's base names, column attributes, index parts and CREATE TABLE options."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sqlglot import exp

from .lexing import DIALECT, DdlParseError
from .operations import ColumnSpec, IndexSpec

# ---- names and literals from the tree --------------------------------------------------------------


def ident(e: Any) -> str:
    if e is None:
        return ""
    if isinstance(e, str):
        return e
    if isinstance(e, exp.Identifier):
        return e.this
    if isinstance(e, exp.Column | exp.Table):
        return ident(e.this)
    if isinstance(e, exp.Literal | exp.Var):
        return str(e.this)
    if isinstance(e, exp.ColumnPrefix | exp.Ordered):
        return ident(e.this)
    return e.name


def table_name(t: exp.Table, default_schema: str) -> tuple[str, str]:
    db = t.args.get("db")
    return (ident(db) if db is not None else default_schema), ident(t.this)


def literal_text(e: Any) -> str:
    if isinstance(e, exp.Literal):
        return str(e.this)  # the tokenizer has undone quote doubling and backslash escapes
    if isinstance(e, exp.Identifier | exp.Var | exp.Column):
        return ident(e)
    if e is None:
        return ""
    return e.sql(dialect=DIALECT)


def charset_name(e: Any) -> str:
    return literal_text(e).strip().lower()


def default_text(e: Any) -> str:
    if isinstance(e, exp.Null):
        return "NULL"
    if isinstance(e, exp.Literal):
        if e.is_string:
            return "'" + str(e.this).replace("\\", "\\\\").replace("'", "''") + "'"
        return str(e.this)
    if isinstance(e, exp.Boolean):
        return "1" if e.this else "0"
    if isinstance(e, exp.CurrentTimestamp):
        arg = e.this
        return f"current_timestamp({literal_text(arg) if arg is not None else ''})"
    return e.sql(dialect=DIALECT).lower() if not isinstance(e, exp.Paren) else e.sql(dialect=DIALECT)


# ---- types -----------------------------------------------------------------------------------------

_DT = exp.DataType.Type
_TYPE_NAMES: dict[Any, tuple[str, bool]] = {
    _DT.TINYINT: ("tinyint", False), _DT.UTINYINT: ("tinyint", True),
    _DT.SMALLINT: ("smallint", False), _DT.USMALLINT: ("smallint", True),
    _DT.MEDIUMINT: ("mediumint", False), _DT.UMEDIUMINT: ("mediumint", True),
    _DT.INT: ("int", False), _DT.UINT: ("int", True),
    _DT.BIGINT: ("bigint", False), _DT.UBIGINT: ("bigint", True),
    _DT.DECIMAL: ("decimal", False), _DT.UDECIMAL: ("decimal", True),
    _DT.FLOAT: ("float", False), _DT.UINT128: ("float", True),
    _DT.DOUBLE: ("double", False), _DT.UDOUBLE: ("double", True),
    _DT.BOOLEAN: ("bool", False), _DT.BIT: ("bit", False),
    _DT.CHAR: ("char", False), _DT.NCHAR: ("nchar", False),
    _DT.VARCHAR: ("varchar", False), _DT.NVARCHAR: ("nvarchar", False),
    _DT.BINARY: ("binary", False), _DT.VARBINARY: ("varbinary", False),
    _DT.TINYTEXT: ("tinytext", False), _DT.TEXT: ("text", False),
    _DT.MEDIUMTEXT: ("mediumtext", False), _DT.LONGTEXT: ("longtext", False),
    _DT.TINYBLOB: ("tinyblob", False), _DT.BLOB: ("blob", False),
    _DT.MEDIUMBLOB: ("mediumblob", False), _DT.LONGBLOB: ("longblob", False),
    _DT.ENUM: ("enum", False), _DT.SET: ("set", False),
    _DT.DATE: ("date", False), _DT.TIME: ("time", False), _DT.DATETIME: ("datetime", False),
    _DT.TIMESTAMP: ("timestamp", False), _DT.TIMESTAMPTZ: ("timestamp", False),
    _DT.TIMESTAMPLTZ: ("timestamp", False), _DT.YEAR: ("year", False), _DT.JSON: ("json", False),
    _DT.UUID: ("uuid", False), _DT.GEOMETRY: ("geometry", False), _DT.SERIAL: ("serial", False),
}
for _name in ("ENUM8", "ENUM16"):
    if hasattr(_DT, _name):
        _TYPE_NAMES[getattr(_DT, _name)] = ("enum", False)
_NAMED_TYPES = {"inet6", "inet4", "uuid", "point", "linestring", "polygon", "multipoint", "multilinestring",
                "multipolygon", "geometrycollection", "geometry", "mediumint", "tinyint", "xmltype"}


def _data_type(kind: exp.DataType) -> tuple[str, bool, tuple[int, ...], tuple[str, ...] | None]:
    t = kind.this
    if t == _DT.USERDEFINED:
        name = str(kind.args.get("kind") or "").lower().strip("`")
        if name not in _NAMED_TYPES or name == "xmltype":
            raise DdlParseError(f"unknown column type {name!r}")
        base, unsigned = name, False
    elif t in _TYPE_NAMES:
        base, unsigned = _TYPE_NAMES[t]
    else:
        raise DdlParseError(f"unsupported column type {kind.sql(dialect=DIALECT)!r}")
    values: tuple[str, ...] | None = None
    params: list[int] = []
    if base in ("enum", "set"):
        values = tuple(literal_text(v) for v in kind.expressions)
    else:
        for p in kind.expressions:
            v = p.this if isinstance(p, exp.DataTypeParam) else p
            txt = literal_text(v)
            try:
                params.append(int(txt))
            except ValueError:
                raise DdlParseError(f"non-numeric type parameter {txt!r}") from None
    return base, unsigned, tuple(params), values


# (node class, keyword, how to read the node): the first class a node is decides; other nodes are skipped
_Readers = tuple[tuple[type[exp.Expr] | tuple[type[exp.Expr], ...], str, Callable[[Any], Any]], ...]


def _true(_: Any) -> bool:
    return True


def _read_into(out: dict[str, Any], node: Any, readers: _Readers) -> None:
    for cls, key, read in readers:
        if isinstance(node, cls):
            out[key] = read(node)
            return


_CONSTRAINT_READERS: _Readers = (
    (exp.NotNullColumnConstraint, "nullable", lambda e: bool(e.args.get("allow_null"))),
    (exp.DefaultColumnConstraint, "default", lambda e: default_text(e.this)),
    (exp.AutoIncrementColumnConstraint, "auto_increment", _true),
    (exp.CommentColumnConstraint, "comment", lambda e: literal_text(e.this)),
    (exp.CharacterSetColumnConstraint, "charset", lambda e: charset_name(e.this)),
    (exp.CollateColumnConstraint, "collation", lambda e: charset_name(e.this)),
    (exp.BinaryColumnConstraint, "binary", _true),
    (exp.PrimaryKeyColumnConstraint, "primary_key", _true),
    (exp.UniqueColumnConstraint, "unique", _true),
    ((exp.ComputedColumnConstraint, exp.GeneratedAsIdentityColumnConstraint), "generated", _true),
    (exp.ZeroFillColumnConstraint, "zerofill", _true),  # implies UNSIGNED
    (exp.OnUpdateColumnConstraint, "on_update", lambda e: default_text(e.this)),
)
_PROPERTY_READERS: _Readers = (
    (exp.CharacterSetProperty, "charset", lambda e: charset_name(e.this)),
    (exp.CollateProperty, "collation", lambda e: charset_name(e.this)),
    (exp.SchemaCommentProperty, "comment", lambda e: literal_text(e.this)),
    (exp.TemporaryProperty, "temporary", _true),
    (exp.LikeProperty, "like", lambda e: e.this),
)


def column_spec(cd: exp.ColumnDef) -> ColumnSpec:
    name = ident(cd.this)
    kind = cd.args.get("kind")
    if not isinstance(kind, exp.DataType):
        raise DdlParseError(f"column {name!r} without a type")
    base, unsigned, params, values = _data_type(kind)
    kw: dict[str, Any] = {}
    for c in cd.constraints:
        # CHECK, REFERENCES, INVISIBLE, COLUMN_FORMAT, STORAGE ...: no effect on the row image
        _read_into(kw, c.args.get("kind") if isinstance(c, exp.ColumnConstraint) else c, _CONSTRAINT_READERS)
    if kw.get("zerofill"):
        unsigned = True
    if "charset" in kw and kw["charset"] == "binary" and base in ("char", "varchar", "tinytext", "text",
                                                                  "mediumtext", "longtext"):
        base = {"char": "binary", "varchar": "varbinary", "tinytext": "tinyblob", "text": "blob",
                "mediumtext": "mediumblob", "longtext": "longblob"}[base]
        kw.pop("charset")
    return ColumnSpec(name=name, type=base, params=params, values=values, unsigned=unsigned, **kw)


def column_position(cd: exp.Expr) -> tuple[bool, str | None]:
    pos = cd.args.get("position")
    if not isinstance(pos, exp.ColumnPosition):
        return False, None
    where = str(pos.args.get("position") or "").upper()
    if where == "FIRST":
        return True, None
    return False, ident(pos.this)


def _index_columns(parts: Iterable[Any]) -> tuple[tuple[str, int | None], ...]:
    cols: list[tuple[str, int | None]] = []
    for p in parts:
        e = p.this if isinstance(p, exp.Ordered) else p
        if isinstance(e, exp.ColumnPrefix):
            cols.append((ident(e.this), int(literal_text(e.expression))))
        elif isinstance(e, exp.Identifier | exp.Column):
            cols.append((ident(e), None))
        elif isinstance(e, exp.Anonymous):
            # b(10) may come back as a function call
            args = e.expressions
            prefix = int(literal_text(args[0])) if args and isinstance(args[0], exp.Literal) else None
            cols.append((e.name, prefix))
        elif isinstance(e, exp.Paren):
            raise DdlParseError("functional index parts are not supported")
        else:
            cols.append((ident(e), None))
    return tuple(cols)


def index_spec(e: exp.Expr) -> IndexSpec | None:
    """Index definitions among CREATE TABLE elements / ADD constraints; None for FK/CHECK."""
    name: str | None = None
    if isinstance(e, exp.Constraint):
        name = ident(e.this) or None
        for inner in e.expressions:
            spec = index_spec(inner)
            if spec is not None:
                return IndexSpec(name=spec.name or name if spec.kind != "primary" else "PRIMARY",
                                 kind=spec.kind, columns=spec.columns)
        return None
    if isinstance(e, exp.PrimaryKey):
        return IndexSpec(name="PRIMARY", kind="primary", columns=_index_columns(e.expressions))
    if isinstance(e, exp.UniqueColumnConstraint):
        sch = e.this
        if isinstance(sch, exp.Schema):
            nm = ident(sch.this) or None
            return IndexSpec(name=nm, kind="unique", columns=_index_columns(sch.expressions))
        if sch is not None:
            return IndexSpec(name=ident(sch) or None, kind="unique", columns=())
        return None
    if isinstance(e, exp.IndexColumnConstraint):
        kind = str(e.args.get("kind") or "").lower()
        kind = {"fulltext": "fulltext", "spatial": "spatial", "unique": "unique"}.get(kind, "index")
        return IndexSpec(name=ident(e.this) or None, kind=kind, columns=_index_columns(e.expressions))
    return None


def table_properties(props: exp.Properties | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if props is None:
        return out
    for p in props.expressions:
        _read_into(out, p, _PROPERTY_READERS)
    return out

