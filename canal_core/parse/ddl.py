"""DDL statements from QUERY events -> schema operations and Canal's DDL classification.

The grammar is sqlglot's MySQL dialect, extended for MariaDB (user-defined type names such as INET6
and POINT, REAL = DOUBLE, FLOAT UNSIGNED, PERSISTENT generated columns). Around it sits only the
hand work sqlglot cannot do for us:

- executable comments (``/*!50100 ... */``, ``/*M!100301 ... */``) are unwrapped before tokenizing
  (sqlglot drops them as comments, but the server executed them);
- statements are recognised by their leading tokens; ALTER TABLE is split into its top-level
  comma-separated actions and each action is parsed by sqlglot on its own (so one action sqlglot
  does not know, e.g. ``ADD (a INT, b INT)`` or ``CONVERT TO CHARACTER SET``, does not lose the rest);
- RENAME TABLE, ALTER DATABASE and CONVERT TO CHARACTER SET are read from the tokens.

``parse_ddl(sql, default_schema)`` never raises: a statement that changes tables but that we cannot
understand comes back with ``parsed=False`` and ``error`` set, and the tables it names (when the
tokens show them), so the schema history can decide whether that is fatal.

Canal's classification (DruidDdlParser + LogEventConvert): the statement's type, schema and table
are those of its first "result": CREATE TABLE -> CREATE; ALTER TABLE per action: RENAME TO -> RENAME,
ADD INDEX/KEY/UNIQUE/PRIMARY KEY -> CINDEX, DROP INDEX/KEY/CONSTRAINT -> DINDEX, ADD FOREIGN KEY/CHECK
-> (no result), anything else -> ALTER; DROP TABLE -> ERASE (one result per table); TRUNCATE ->
TRUNCATE; RENAME TABLE -> RENAME (schema/table = the new name); CREATE INDEX -> CINDEX; DROP INDEX ->
DINDEX; CREATE/DROP DATABASE -> QUERY with the database as schema; INSERT/UPDATE/DELETE statements
(statement-based logging) -> INSERT/UPDATE/DELETE; everything else -> QUERY.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlglot import exp
from sqlglot.dialects.mysql import MySQL
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Token, TokenType

from .model import (
    EVENT_ALTER,
    EVENT_CINDEX,
    EVENT_CREATE,
    EVENT_DELETE,
    EVENT_DINDEX,
    EVENT_ERASE,
    EVENT_INSERT,
    EVENT_QUERY,
    EVENT_RENAME,
    EVENT_TRUNCATE,
    EVENT_UPDATE,
    DdlResult,
)

__all__ = [
    "AddColumn", "AddIndex", "AlterDatabase", "AlterTable", "ChangeColumn", "ColumnSpec", "ConvertCharset",
    "CreateDatabase", "CreateSequence", "CreateTable", "DdlParseError", "DropColumn", "DropDatabase",
    "DropIndex", "DropPrimaryKey", "DropTables", "IndexSpec", "ModifyColumn", "ParsedDdl", "RenameColumn",
    "RenameIndex", "RenameTables", "RenameTo", "SelectColumn", "SetDefault", "TableOptions", "TruncateTables",
    "parse_ddl", "unwrap_executable_comments",
]

# Version number the executable comments are compared with (MariaDB 10.11 = 101100).
DEFAULT_SERVER_VERSION = 101100


class DdlParseError(Exception):
    """Internal: a statement (or action) we do not understand."""


# ---- the dialect -----------------------------------------------------------------------------------


class CanalMariaDB(MySQL):
    """sqlglot's MySQL dialect with what MariaDB binlogs need on top."""

    SUPPORTS_USER_DEFINED_TYPES = True  # INET6, INET4, POINT, LINESTRING, ... parse as named types

    class Tokenizer(MySQL.Tokenizer):
        KEYWORDS = {
            **MySQL.Tokenizer.KEYWORDS,
            "REAL": TokenType.DOUBLE,  # MySQL: REAL = DOUBLE (unless sql_mode REAL_AS_FLOAT)
            "INT8": TokenType.BIGINT,
            "INT3": TokenType.MEDIUMINT,
            "INT4": TokenType.INT,
            "MIDDLEINT": TokenType.MEDIUMINT,
            "LONG": TokenType.MEDIUMTEXT,  # LONG / LONG VARCHAR = MEDIUMTEXT (LONG VARBINARY fixed below)
        }
        # RENAME TABLE must be tokenized, not swallowed as one opaque command string
        COMMANDS = MySQL.Tokenizer.COMMANDS - {TokenType.RENAME}

    class Parser(MySQL.Parser):
        # FLOAT UNSIGNED has no sqlglot type: carried as UINT128, which MySQL never has
        SIGNED_TO_UNSIGNED_TYPE_TOKEN = {**MySQL.Parser.SIGNED_TO_UNSIGNED_TYPE_TOKEN,
                                         TokenType.FLOAT: TokenType.UINT128}


_DIALECT = CanalMariaDB()


class _NoCommandFallbackWarnings(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Falling back to parsing as a 'Command'" not in record.getMessage()


logging.getLogger("sqlglot").addFilter(_NoCommandFallbackWarnings())


# ---- operations ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """A column definition as written (types normalised to MySQL's base names)."""

    name: str
    type: str  # "int", "varchar", "enum", "float", "bool", "serial", "nchar", "point", "inet6", ... "" = unknown
    params: tuple[int, ...] = ()  # (length,) / (precision, scale) / (fsp,)
    values: tuple[str, ...] | None = None  # ENUM / SET
    unsigned: bool = False
    zerofill: bool = False
    charset: str | None = None
    collation: str | None = None
    binary: bool = False  # the BINARY attribute of character types (= the charset's _bin collation)
    nullable: bool | None = None  # None: not said
    default: str | None = None  # the default as SQL text ("NULL", "'a'", "current_timestamp()")
    auto_increment: bool = False
    comment: str = ""
    generated: bool = False
    primary_key: bool = False  # inline PRIMARY KEY / KEY
    unique: bool = False  # inline UNIQUE [KEY]
    on_update: str | None = None


@dataclass(frozen=True, slots=True)
class IndexSpec:
    name: str | None
    kind: str  # "primary" | "unique" | "index" | "fulltext" | "spatial"
    columns: tuple[tuple[str, int | None], ...]  # (column, prefix length)


@dataclass(frozen=True, slots=True)
class SelectColumn:
    """A column of CREATE TABLE ... SELECT: copied from a source column when known."""

    name: str
    source: tuple[str, str, str] | None = None  # (schema, table, column); "*" column = all columns


@dataclass(frozen=True, slots=True)
class CreateTable:
    schema: str
    name: str
    columns: tuple[ColumnSpec, ...] = ()
    indexes: tuple[IndexSpec, ...] = ()
    charset: str | None = None
    collation: str | None = None
    comment: str | None = None
    if_not_exists: bool = False
    or_replace: bool = False
    temporary: bool = False
    like: tuple[str, str] | None = None
    select: tuple[SelectColumn, ...] | None = None


@dataclass(frozen=True, slots=True)
class CreateSequence:
    schema: str
    name: str
    if_not_exists: bool = False
    or_replace: bool = False


# ALTER TABLE actions
@dataclass(frozen=True, slots=True)
class AddColumn:
    spec: ColumnSpec
    first: bool = False
    after: str | None = None
    if_not_exists: bool = False


@dataclass(frozen=True, slots=True)
class DropColumn:
    name: str
    if_exists: bool = False


@dataclass(frozen=True, slots=True)
class ModifyColumn:
    spec: ColumnSpec
    first: bool = False
    after: str | None = None
    if_exists: bool = False


@dataclass(frozen=True, slots=True)
class ChangeColumn:
    old: str
    spec: ColumnSpec
    first: bool = False
    after: str | None = None
    if_exists: bool = False


@dataclass(frozen=True, slots=True)
class RenameColumn:
    old: str
    new: str


@dataclass(frozen=True, slots=True)
class RenameTo:
    schema: str
    name: str


@dataclass(frozen=True, slots=True)
class AddIndex:
    index: IndexSpec
    if_not_exists: bool = False


@dataclass(frozen=True, slots=True)
class DropIndex:
    name: str
    if_exists: bool = False
    constraint: bool = False  # DROP CONSTRAINT name: an index of that name if there is one


@dataclass(frozen=True, slots=True)
class DropPrimaryKey:
    pass


@dataclass(frozen=True, slots=True)
class RenameIndex:
    old: str
    new: str


@dataclass(frozen=True, slots=True)
class SetDefault:
    column: str
    default: str | None  # None = DROP DEFAULT


@dataclass(frozen=True, slots=True)
class ConvertCharset:
    charset: str
    collation: str | None = None


@dataclass(frozen=True, slots=True)
class TableOptions:
    charset: str | None = None
    collation: str | None = None
    comment: str | None = None


@dataclass(frozen=True, slots=True)
class NoOp:
    """An action that changes no column (ENGINE=, ALGORITHM=, FORCE, partitions, checks, foreign keys)."""

    what: str = ""


AlterAction = (AddColumn | DropColumn | ModifyColumn | ChangeColumn | RenameColumn | RenameTo | AddIndex
               | DropIndex | DropPrimaryKey | RenameIndex | SetDefault | ConvertCharset | TableOptions | NoOp)


@dataclass(frozen=True, slots=True)
class AlterTable:
    schema: str
    name: str
    actions: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class RenameTables:
    pairs: tuple[tuple[tuple[str, str], tuple[str, str]], ...]


@dataclass(frozen=True, slots=True)
class TruncateTables:
    tables: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class DropTables:
    tables: tuple[tuple[str, str], ...]
    if_exists: bool = False
    temporary: bool = False


@dataclass(frozen=True, slots=True)
class CreateDatabase:
    name: str
    charset: str | None = None
    collation: str | None = None
    if_not_exists: bool = False
    or_replace: bool = False


@dataclass(frozen=True, slots=True)
class DropDatabase:
    name: str
    if_exists: bool = False


@dataclass(frozen=True, slots=True)
class AlterDatabase:
    name: str
    charset: str | None = None
    collation: str | None = None


@dataclass(frozen=True, slots=True)
class ParsedDdl:
    """What one QUERY event's statement is and does."""

    sql: str
    default_schema: str
    event_type: int
    schema: str
    table: str
    tables: tuple[tuple[str, str], ...] = ()  # every (schema, table) named
    operations: tuple[Any, ...] = ()
    parsed: bool = True
    error: str | None = None
    changes_schema: bool = False  # a statement of a kind that changes tables or databases

    def result(self) -> DdlResult:
        return DdlResult(event_type=self.event_type, schema=self.schema, table=self.table,
                         ddl_schema=self.default_schema, tables=self.tables, parsed=self.parsed)


# ---- executable comments ---------------------------------------------------------------------------


def unwrap_executable_comments(sql: str, server_version: int = DEFAULT_SERVER_VERSION) -> str:
    """Replace ``/*!NNNNN text */`` and ``/*M!NNNNNN text */`` by ``text`` when the server would have
    executed it (no version, or a version <= server_version); drop them otherwise. Quotes and
    ordinary comments are respected."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"`":
            j = _skip_quoted(sql, i)
            out.append(sql[i:j])
            i = j
        elif sql.startswith("/*!", i) or sql.startswith("/*M!", i):
            start = i + (3 if sql[i + 2] == "!" else 4)
            end = _comment_end(sql, start)
            body = sql[start:end]
            digits = 0
            while digits < len(body) and digits < 6 and body[digits].isdigit():
                digits += 1
            if digits >= 5:
                version = int(body[:digits])
                body = body[digits:]
                keep = version <= server_version
            else:
                keep = True
            out.append(" " + (unwrap_executable_comments(body, server_version) if keep else "") + " ")
            i = end + 2
        elif sql.startswith("/*", i):
            end = _comment_end(sql, i + 2)
            out.append(sql[i:end + 2])
            i = end + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _skip_quoted(sql: str, i: int) -> int:
    q = sql[i]
    j = i + 1
    n = len(sql)
    while j < n:
        c = sql[j]
        if c == "\\" and q != "`":
            j += 2
            continue
        if c == q:
            if j + 1 < n and sql[j + 1] == q:
                j += 2
                continue
            return j + 1
        j += 1
    return n


def _comment_end(sql: str, i: int) -> int:
    end = sql.find("*/", i)
    return len(sql) if end < 0 else end


# ---- token helpers ---------------------------------------------------------------------------------

_PUNCT = {TokenType.COMMA, TokenType.L_PAREN, TokenType.R_PAREN, TokenType.SEMICOLON, TokenType.DOT,
          TokenType.EQ}
_STRINGS = {TokenType.STRING, TokenType.NATIONAL_STRING} if hasattr(TokenType, "NATIONAL_STRING") \
    else {TokenType.STRING}


def _up(tok: Token) -> str:
    return tok.text.upper() if tok.token_type != TokenType.IDENTIFIER else ""


def _tokenize(sql: str) -> list[Token]:
    tokens = _DIALECT.tokenize(sql)
    out: list[Token] = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        u = _up(t)
        nxt = _up(tokens[i + 1]) if i + 1 < len(tokens) else ""
        if u == "NATIONAL" and nxt in ("CHAR", "CHARACTER", "VARCHAR"):
            nt = tokens[i + 1]
            kind = TokenType.NVARCHAR if nxt == "VARCHAR" else TokenType.NCHAR
            # NATIONAL CHAR VARYING / NATIONAL CHARACTER VARYING
            if i + 2 < len(tokens) and _up(tokens[i + 2]) == "VARYING":
                kind = TokenType.NVARCHAR
                i += 1
            out.append(Token(kind, nt.text, nt.line, nt.col, nt.start, nt.end, nt.comments))
            i += 2
            continue
        if u == "NCHAR" and nxt == "VARCHAR":  # NCHAR VARCHAR
            out.append(Token(TokenType.NVARCHAR, t.text, t.line, t.col, t.start, t.end, t.comments))
            i += 2
            continue
        if u == "LONG" and t.token_type == TokenType.MEDIUMTEXT and nxt in ("VARCHAR", "VARBINARY"):
            kind = TokenType.MEDIUMTEXT if nxt == "VARCHAR" else TokenType.MEDIUMBLOB
            out.append(Token(kind, t.text, t.line, t.col, t.start, t.end, t.comments))
            i += 2
            continue
        if u == "PERSISTENT" and out and out[-1].token_type == TokenType.R_PAREN:
            out.append(Token(TokenType.VAR, "STORED", t.line, t.col, t.start, t.end, t.comments))
            i += 1
            continue
        if u == "COMPRESSED" and t.token_type == TokenType.VAR:
            # MariaDB column compression: storage only
            i += 1
            if i < len(tokens) and tokens[i].token_type == TokenType.EQ:
                i += 2
            continue
        out.append(t)
        i += 1
    while out and out[-1].token_type == TokenType.SEMICOLON:
        out.pop()
    return out


def _parse_tokens(tokens: list[Token], sql: str = "") -> exp.Expr:
    try:
        trees = _DIALECT.parser().parse(tokens, sql)
    except SqlglotError as e:
        raise DdlParseError(str(e).splitlines()[0]) from None
    except (ValueError, TypeError, AttributeError, IndexError, KeyError) as e:
        raise DdlParseError(f"{type(e).__name__}: {e}") from None
    trees = [t for t in trees if t is not None]
    if len(trees) != 1:
        raise DdlParseError(f"expected one statement, got {len(trees)}")
    tree = trees[0]
    if isinstance(tree, exp.Command):
        raise DdlParseError("unsupported syntax")
    return tree


def _synthetic(sql: str) -> list[Token]:
    return _DIALECT.tokenize(sql)


def _split_top(tokens: Sequence[Token], sep: TokenType = TokenType.COMMA) -> list[list[Token]]:
    parts: list[list[Token]] = [[]]
    depth = 0
    for t in tokens:
        if t.token_type == TokenType.L_PAREN:
            depth += 1
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
        if t.token_type == sep and depth == 0:
            parts.append([])
        else:
            parts[-1].append(t)
    return parts


def _matching_paren(tokens: Sequence[Token], i: int) -> int:
    depth = 0
    for j in range(i, len(tokens)):
        tt = tokens[j].token_type
        if tt == TokenType.L_PAREN:
            depth += 1
        elif tt == TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                return j
    raise DdlParseError("unbalanced parentheses")


def _name_at(tokens: Sequence[Token], i: int, default_schema: str) -> tuple[tuple[str, str], int]:
    """A [schema.]name at tokens[i]; returns ((schema, name), next index)."""
    if i >= len(tokens) or tokens[i].token_type in _PUNCT:
        raise DdlParseError("expected a table name")
    first = tokens[i].text
    if i + 1 < len(tokens) and tokens[i + 1].token_type == TokenType.DOT:
        if i + 2 >= len(tokens) or tokens[i + 2].token_type in _PUNCT:
            raise DdlParseError("expected a table name after '.'")
        return (first, tokens[i + 2].text), i + 3
    return (default_schema, first), i + 1


def _skip_words(tokens: Sequence[Token], i: int, *words: str) -> int:
    """Skip the optional word sequence at i if all of it is there."""
    if i + len(words) <= len(tokens) and all(_up(tokens[i + k]) == w for k, w in enumerate(words)):
        return i + len(words)
    return i


# ---- names and literals from the tree --------------------------------------------------------------


def _ident(e: Any) -> str:
    if e is None:
        return ""
    if isinstance(e, str):
        return e
    if isinstance(e, exp.Identifier):
        return e.this
    if isinstance(e, exp.Column | exp.Table):
        return _ident(e.this)
    if isinstance(e, exp.Literal | exp.Var):
        return str(e.this)
    if isinstance(e, exp.ColumnPrefix | exp.Ordered):
        return _ident(e.this)
    return e.name


def _table_name(t: exp.Table, default_schema: str) -> tuple[str, str]:
    db = t.args.get("db")
    return (_ident(db) if db is not None else default_schema), _ident(t.this)


def _literal_text(e: Any) -> str:
    if isinstance(e, exp.Literal):
        return str(e.this)  # the tokenizer has undone quote doubling and backslash escapes
    if isinstance(e, exp.Identifier | exp.Var | exp.Column):
        return _ident(e)
    if e is None:
        return ""
    return e.sql(dialect=_DIALECT)


def _charset_name(e: Any) -> str:
    return _literal_text(e).strip().lower()


def _default_text(e: Any) -> str:
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
        return f"current_timestamp({_literal_text(arg) if arg is not None else ''})"
    return e.sql(dialect=_DIALECT).lower() if not isinstance(e, exp.Paren) else e.sql(dialect=_DIALECT)


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
        raise DdlParseError(f"unsupported column type {kind.sql(dialect=_DIALECT)!r}")
    values: tuple[str, ...] | None = None
    params: list[int] = []
    if base in ("enum", "set"):
        values = tuple(_literal_text(v) for v in kind.expressions)
    else:
        for p in kind.expressions:
            v = p.this if isinstance(p, exp.DataTypeParam) else p
            txt = _literal_text(v)
            try:
                params.append(int(txt))
            except ValueError:
                raise DdlParseError(f"non-numeric type parameter {txt!r}") from None
    return base, unsigned, tuple(params), values


def _column_spec(cd: exp.ColumnDef) -> ColumnSpec:
    name = _ident(cd.this)
    kind = cd.args.get("kind")
    if not isinstance(kind, exp.DataType):
        raise DdlParseError(f"column {name!r} without a type")
    base, unsigned, params, values = _data_type(kind)
    kw: dict[str, Any] = {}
    for c in cd.constraints:
        k = c.args.get("kind") if isinstance(c, exp.ColumnConstraint) else c
        if isinstance(k, exp.NotNullColumnConstraint):
            kw["nullable"] = bool(k.args.get("allow_null"))
        elif isinstance(k, exp.DefaultColumnConstraint):
            kw["default"] = _default_text(k.this)
        elif isinstance(k, exp.AutoIncrementColumnConstraint):
            kw["auto_increment"] = True
        elif isinstance(k, exp.CommentColumnConstraint):
            kw["comment"] = _literal_text(k.this)
        elif isinstance(k, exp.CharacterSetColumnConstraint):
            kw["charset"] = _charset_name(k.this)
        elif isinstance(k, exp.CollateColumnConstraint):
            kw["collation"] = _charset_name(k.this)
        elif isinstance(k, exp.BinaryColumnConstraint):
            kw["binary"] = True
        elif isinstance(k, exp.PrimaryKeyColumnConstraint):
            kw["primary_key"] = True
        elif isinstance(k, exp.UniqueColumnConstraint):
            kw["unique"] = True
        elif isinstance(k, exp.ComputedColumnConstraint | exp.GeneratedAsIdentityColumnConstraint):
            kw["generated"] = True
        elif isinstance(k, exp.ZeroFillColumnConstraint):
            kw["zerofill"] = True
            unsigned = True
        elif isinstance(k, exp.OnUpdateColumnConstraint):
            kw["on_update"] = _default_text(k.this)
        # CHECK, REFERENCES, INVISIBLE, COLUMN_FORMAT, STORAGE ...: no effect on the row image
    if "charset" in kw and kw["charset"] == "binary" and base in ("char", "varchar", "tinytext", "text",
                                                                  "mediumtext", "longtext"):
        base = {"char": "binary", "varchar": "varbinary", "tinytext": "tinyblob", "text": "blob",
                "mediumtext": "mediumblob", "longtext": "longblob"}[base]
        kw.pop("charset")
    return ColumnSpec(name=name, type=base, params=params, values=values, unsigned=unsigned, **kw)


def _position(cd: exp.Expr) -> tuple[bool, str | None]:
    pos = cd.args.get("position")
    if not isinstance(pos, exp.ColumnPosition):
        return False, None
    where = str(pos.args.get("position") or "").upper()
    if where == "FIRST":
        return True, None
    return False, _ident(pos.this)


def _index_columns(parts: Iterable[Any]) -> tuple[tuple[str, int | None], ...]:
    cols = []
    for p in parts:
        e = p.this if isinstance(p, exp.Ordered) else p
        if isinstance(e, exp.ColumnPrefix):
            cols.append((_ident(e.this), int(_literal_text(e.expression))))
        elif isinstance(e, exp.Identifier | exp.Column):
            cols.append((_ident(e), None))
        elif isinstance(e, exp.Anonymous):
            # b(10) may come back as a function call
            args = e.expressions
            prefix = int(_literal_text(args[0])) if args and isinstance(args[0], exp.Literal) else None
            cols.append((e.name, prefix))
        elif isinstance(e, exp.Paren):
            raise DdlParseError("functional index parts are not supported")
        else:
            cols.append((_ident(e), None))
    return tuple(cols)


def _index_spec(e: exp.Expr) -> IndexSpec | None:
    """Index definitions among CREATE TABLE elements / ADD constraints; None for FK/CHECK."""
    name: str | None = None
    if isinstance(e, exp.Constraint):
        name = _ident(e.this) or None
        for inner in e.expressions:
            spec = _index_spec(inner)
            if spec is not None:
                return IndexSpec(name=spec.name or name if spec.kind != "primary" else "PRIMARY",
                                 kind=spec.kind, columns=spec.columns)
        return None
    if isinstance(e, exp.PrimaryKey):
        return IndexSpec(name="PRIMARY", kind="primary", columns=_index_columns(e.expressions))
    if isinstance(e, exp.UniqueColumnConstraint):
        sch = e.this
        if isinstance(sch, exp.Schema):
            nm = _ident(sch.this) or None
            return IndexSpec(name=nm, kind="unique", columns=_index_columns(sch.expressions))
        if sch is not None:
            return IndexSpec(name=_ident(sch) or None, kind="unique", columns=())
        return None
    if isinstance(e, exp.IndexColumnConstraint):
        kind = str(e.args.get("kind") or "").lower()
        kind = {"fulltext": "fulltext", "spatial": "spatial", "unique": "unique"}.get(kind, "index")
        return IndexSpec(name=_ident(e.this) or None, kind=kind, columns=_index_columns(e.expressions))
    return None


def _props(props: exp.Properties | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if props is None:
        return out
    for p in props.expressions:
        if isinstance(p, exp.CharacterSetProperty):
            out["charset"] = _charset_name(p.this)
        elif isinstance(p, exp.CollateProperty):
            out["collation"] = _charset_name(p.this)
        elif isinstance(p, exp.SchemaCommentProperty):
            out["comment"] = _literal_text(p.this)
        elif isinstance(p, exp.TemporaryProperty):
            out["temporary"] = True
        elif isinstance(p, exp.LikeProperty):
            out["like"] = p.this
    return out


# ---- statements ------------------------------------------------------------------------------------

_SYSTEM_VERSIONING = ("WITH", "SYSTEM", "VERSIONING")


def _create_table(tokens: list[Token], default_schema: str, sql: str) -> CreateTable:
    # cut a trailing PARTITION BY (partitioning changes no column)
    depth = 0
    for j, t in enumerate(tokens):
        if t.token_type == TokenType.L_PAREN:
            depth += 1
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and _up(t) == "PARTITION" and j + 1 < len(tokens) and _up(tokens[j + 1]) == "BY":
            tokens = tokens[:j]
            break
        elif depth == 0 and [_up(x) for x in tokens[j:j + 3]] == list(_SYSTEM_VERSIONING):
            raise DdlParseError("system-versioned tables (hidden row_start/row_end columns) are not modelled")
    try:
        tree = _parse_tokens(tokens, sql)
    except DdlParseError:
        tree = _create_table_retry(tokens, sql)
    if not isinstance(tree, exp.Create):
        raise DdlParseError("not a CREATE TABLE")
    target = tree.this
    props = _props(tree.args.get("properties"))
    columns: list[ColumnSpec] = []
    indexes: list[IndexSpec] = []
    like = None
    if isinstance(target, exp.Schema):
        table = target.this
        for el in target.expressions:
            if isinstance(el, exp.ColumnDef):
                columns.append(_column_spec(el))
            elif isinstance(el, exp.LikeProperty):
                like = el.this
            else:
                spec = _index_spec(el)
                if spec is not None:
                    indexes.append(spec)
    else:
        table = target
    if not isinstance(table, exp.Table):
        raise DdlParseError("CREATE TABLE without a table name")
    schema, name = _table_name(table, default_schema)
    like = like if like is not None else props.get("like")
    select = None
    q = tree.args.get("expression")
    if q is not None:
        select = _select_columns(q, default_schema)
    return CreateTable(schema=schema, name=name, columns=tuple(columns), indexes=tuple(indexes),
                       charset=props.get("charset"), collation=props.get("collation"),
                       comment=props.get("comment"), if_not_exists=bool(tree.args.get("exists")),
                       or_replace=bool(tree.args.get("replace")), temporary=bool(props.get("temporary")),
                       like=_table_name(like, default_schema) if isinstance(like, exp.Table) else None,
                       select=select)


def _create_table_retry(tokens: list[Token], sql: str) -> exp.Expr:
    """sqlglot did not take the table options: parse the definition alone and read the options that
    matter (charset, collation, comment) from the tokens."""
    i = next((k for k, t in enumerate(tokens) if t.token_type == TokenType.L_PAREN), None)
    if i is None:
        raise DdlParseError("CREATE TABLE without a column list")
    close = _matching_paren(tokens, i)
    rest = tokens[close + 1:]
    if any(_up(t) in ("SELECT", "AS", "LIKE") for t in rest):
        raise DdlParseError("unsupported CREATE TABLE options")
    tree = _parse_tokens(tokens[:close + 1], sql)
    opts: list[exp.Expr] = []
    k = 0
    while k < len(rest):
        u = _up(rest[k])
        if u == "DEFAULT":
            k += 1
            continue
        if u in ("CHARSET", "CHARACTER", "COLLATE", "COMMENT"):
            k += 2 if u == "CHARACTER" else 1
            if k < len(rest) and rest[k].token_type == TokenType.EQ:
                k += 1
            if k >= len(rest):
                break
            val = rest[k].text
            if u == "COLLATE":
                opts.append(exp.CollateProperty(this=exp.Var(this=val)))
            elif u == "COMMENT":
                opts.append(exp.SchemaCommentProperty(this=exp.Literal.string(val)))
            else:
                opts.append(exp.CharacterSetProperty(this=exp.Var(this=val), default=True))
        k += 1
    if opts:
        props = tree.args.get("properties")
        tree.set("properties", exp.Properties(expressions=[*(props.expressions if props else []), *opts]))
    return tree


def _select_columns(q: exp.Expr, default_schema: str) -> tuple[SelectColumn, ...]:
    if not isinstance(q, exp.Select):
        return ()
    from_ = q.args.get("from_") or q.args.get("from")
    sources: dict[str, tuple[str, str]] = {}
    order: list[tuple[str, str]] = []
    tables = []
    if from_ is not None:
        tables.append(from_.this)
    for j in q.args.get("joins") or []:
        tables.append(j.this)
    for t in tables:
        if isinstance(t, exp.Table):
            st = _table_name(t, default_schema)
            order.append(st)
            sources[st[1].lower()] = st
            alias = t.alias
            if alias:
                sources[alias.lower()] = st
    single = order[0] if len(order) == 1 else None
    out: list[SelectColumn] = []
    for e in q.expressions:
        alias = None
        if isinstance(e, exp.Alias):
            alias = _ident(e.args.get("alias"))
            e = e.this
        if isinstance(e, exp.Star):
            if single is None:
                out.append(SelectColumn(name="*", source=None))
            else:
                out.append(SelectColumn(name="*", source=(single[0], single[1], "*")))
            continue
        if isinstance(e, exp.Column):
            qual = _ident(e.args.get("table")) if e.args.get("table") is not None else ""
            src = sources.get(qual.lower()) if qual else single
            col = "*" if isinstance(e.this, exp.Star) else _ident(e.this)
            out.append(SelectColumn(name=alias or col, source=(src[0], src[1], col) if src else None))
            continue
        out.append(SelectColumn(name=alias or e.sql(dialect=_DIALECT), source=None))
    return tuple(out)


_PARTITION_WORDS = {"PARTITION", "PARTITIONS", "COALESCE", "REORGANIZE", "EXCHANGE", "REBUILD", "REMOVE",
                    "DISCARD", "IMPORT"}
_OPTION_WORDS = {"ENGINE", "ALGORITHM", "LOCK", "FORCE", "ENABLE", "DISABLE", "ROW_FORMAT",
                     "AUTO_INCREMENT", "AVG_ROW_LENGTH", "CHECKSUM", "KEY_BLOCK_SIZE", "MAX_ROWS", "MIN_ROWS",
                     "PACK_KEYS", "STATS_AUTO_RECALC", "STATS_PERSISTENT", "STATS_SAMPLE_PAGES", "TABLESPACE",
                     "UNION", "INSERT_METHOD", "DATA", "INDEX", "PAGE_CHECKSUM", "PAGE_COMPRESSED",
                     "PAGE_COMPRESSION_LEVEL", "TRANSACTIONAL", "ENCRYPTED", "ENCRYPTION_KEY_ID",
                     "IETF_QUOTES", "SEQUENCE", "STORAGE", "DELAY_KEY_WRITE", "ORDER", "VALIDATION",
                     "WITHOUT", "WITH", "NOWAIT", "WAIT"}


def _alter_table(tokens: list[Token], default_schema: str) -> AlterTable:
    i = 1
    while i < len(tokens) and _up(tokens[i]) in ("ONLINE", "IGNORE", "OFFLINE"):
        i += 1
    if i >= len(tokens) or _up(tokens[i]) != "TABLE":
        raise DdlParseError("not ALTER TABLE")
    i = _skip_words(tokens, i + 1, "IF", "EXISTS")
    (schema, name), i = _name_at(tokens, i, default_schema)
    body = tokens[i:]
    if body and _up(body[0]) in ("WAIT", "NOWAIT"):
        body = body[2:] if _up(body[0]) == "WAIT" else body[1:]
    prefix = _synthetic("ALTER TABLE `_t`")
    actions: list[Any] = []
    for chunk in _split_top(body):
        if not chunk:
            continue
        first = _up(chunk[0])
        second = _up(chunk[1]) if len(chunk) > 1 else ""
        if first in _PARTITION_WORDS or second in ("PARTITION", "PARTITIONING") \
                or (first in ("ANALYZE", "CHECK", "OPTIMIZE", "REPAIR", "TRUNCATE") and second == "PARTITION"):
            actions.append(NoOp("partitioning"))
            break  # partition clauses end the statement; their commas are not action separators
        actions.extend(_alter_chunk(chunk, prefix, default_schema))
    return AlterTable(schema=schema, name=name, actions=tuple(actions))


def _alter_chunk(chunk: list[Token], prefix: list[Token], default_schema: str) -> list[Any]:
    words = [_up(t) for t in chunk]
    first = words[0]
    if first == "CONVERT":
        k = 1
        k = _skip_words(chunk, k, "TO")
        if k < len(chunk) and words[k] == "CHARACTER":
            k += 2
        elif k < len(chunk) and words[k] == "CHARSET":
            k += 1
        else:
            raise DdlParseError("CONVERT without TO CHARACTER SET")
        if k < len(chunk) and chunk[k].token_type == TokenType.EQ:
            k += 1
        if k >= len(chunk):
            raise DdlParseError("CONVERT TO CHARACTER SET without a charset")
        cs = chunk[k].text.lower()
        coll = None
        k += 1
        if k < len(chunk) and words[k] == "COLLATE":
            k += 1
            if k < len(chunk) and chunk[k].token_type == TokenType.EQ:
                k += 1
            coll = chunk[k].text.lower() if k < len(chunk) else None
        return [ConvertCharset(charset=cs, collation=coll)]
    if first == "ADD":
        k = _skip_words(chunk, 1, "COLUMN")
        k2 = _skip_words(chunk, k, "IF", "NOT", "EXISTS")
        if k2 < len(chunk) and chunk[k2].token_type == TokenType.L_PAREN and k2 + 1 < len(chunk) \
                and _matching_paren(chunk, k2) == len(chunk) - 1:
            inner = chunk[k2 + 1:-1]
            # ADD [COLUMN] (col, col, ...): each part on its own (index definitions may be among them)
            out = []
            head = _synthetic("ADD COLUMN" + (" IF NOT EXISTS" if k2 != k else ""))
            for part in _split_top(inner):
                if part and _up(part[0]) in ("PRIMARY", "UNIQUE", "KEY", "INDEX", "CONSTRAINT", "FULLTEXT",
                                             "SPATIAL", "FOREIGN", "CHECK"):
                    out.extend(_alter_chunk(_synthetic("ADD") + part, prefix, default_schema))
                else:
                    out.extend(_alter_chunk(head + part, prefix, default_schema))
            return out
        if k < len(chunk) and words[k] in ("CHECK", "PERIOD", "SYSTEM"):
            if words[k] == "SYSTEM":
                raise DdlParseError("ADD SYSTEM VERSIONING is not modelled")
            return [NoOp("check")]
        if k < len(chunk) and words[k] == "CONSTRAINT":
            k3 = k + 1
            if k3 < len(chunk) and words[k3] not in ("CHECK", "PRIMARY", "UNIQUE", "FOREIGN"):
                k3 += 1
            if k3 < len(chunk) and words[k3] == "CHECK":
                return [NoOp("check")]
    if first == "DROP" and len(words) > 1:
        if words[1] in ("CHECK", "PERIOD"):
            return [NoOp("check")]
        if words[1] == "SYSTEM":
            raise DdlParseError("DROP SYSTEM VERSIONING is not modelled")
    if first == "RENAME" and len(words) > 1 and words[1] not in ("COLUMN", "INDEX", "KEY"):
        # RENAME [TO|AS] new_name (sqlglot does not take AS)
        k = 2 if words[1] in ("AS", "TO") else 1
        (schema, name), k = _name_at(chunk, k, default_schema)
        if k == len(chunk):
            return [RenameTo(schema=schema, name=name)]
    if first in ("DEFAULT", "CHARACTER", "CHARSET", "COLLATE", "COMMENT"):
        return [_table_options(chunk)]
    if first == "WITH" and len(words) > 1 and words[1] == "SYSTEM":
        raise DdlParseError("WITH SYSTEM VERSIONING is not modelled")
    if first in _OPTION_WORDS:
        return [_table_options(chunk)]
    # MariaDB's IF [NOT] EXISTS after MODIFY/CHANGE/DROP/ADD [COLUMN|INDEX|KEY|...]: taken out here
    flag: str | None = None
    k = 1
    if k < len(words) and words[k] in ("COLUMN", "INDEX", "KEY", "CONSTRAINT", "PARTITION", "FOREIGN", "UNIQUE"):
        k += 1
        if k < len(words) and words[k] == "KEY" and words[k - 1] in ("FOREIGN", "UNIQUE"):
            k += 1
    if first in ("MODIFY", "CHANGE", "DROP", "ADD", "RENAME") and words[k:k + 2] == ["IF", "EXISTS"]:
        chunk, flag = chunk[:k] + chunk[k + 2:], "if_exists"
    elif first == "ADD" and words[k:k + 3] == ["IF", "NOT", "EXISTS"]:
        chunk, flag = chunk[:k] + chunk[k + 3:], "if_not_exists"
    tree = _parse_tokens(prefix + chunk)
    if not isinstance(tree, exp.Alter):
        raise DdlParseError("not an ALTER TABLE action")
    out: list[Any] = []
    for a in tree.args.get("actions") or []:
        out.append(_alter_action(a, default_schema))
    if tree.args.get("options"):
        out.append(_options_to_action(tree.args["options"]))
    if not out:
        raise DdlParseError("no ALTER TABLE action recognised")
    if flag is not None:
        out = [replace(a, **{flag: True}) if hasattr(a, flag) else a for a in out]
    return out


def _table_options(chunk: list[Token]) -> Any:
    words = [_up(t) for t in chunk]
    cs = coll = comment = None
    k = 0
    while k < len(chunk):
        w = words[k]
        if w == "DEFAULT":
            k += 1
            continue
        if w in ("CHARSET", "CHARACTER", "COLLATE", "COMMENT"):
            k += 2 if w == "CHARACTER" else 1
            if k < len(chunk) and chunk[k].token_type == TokenType.EQ:
                k += 1
            if k >= len(chunk):
                raise DdlParseError(f"{w} without a value")
            val = chunk[k].text
            if w == "COLLATE":
                coll = val.lower()
            elif w == "COMMENT":
                comment = val
            else:
                cs = val.lower()
            k += 1
            continue
        k += 1
    if cs is None and coll is None and comment is None:
        return NoOp(words[0].lower() if words else "")
    return TableOptions(charset=cs, collation=coll, comment=comment)


def _options_to_action(options: list[exp.Expr]) -> Any:
    cs = coll = comment = None
    for p in options:
        if isinstance(p, exp.CharacterSetProperty):
            cs = _charset_name(p.this)
        elif isinstance(p, exp.CollateProperty):
            coll = _charset_name(p.this)
        elif isinstance(p, exp.SchemaCommentProperty):
            comment = _literal_text(p.this)
    if cs is None and coll is None and comment is None:
        return NoOp("options")
    return TableOptions(charset=cs, collation=coll, comment=comment)


def _alter_action(a: exp.Expr, default_schema: str) -> Any:
    if isinstance(a, exp.ColumnDef):
        first, after = _position(a)
        return AddColumn(spec=_column_spec(a), first=first, after=after, if_not_exists=bool(a.args.get("exists")))
    if isinstance(a, exp.ModifyColumn):
        cd = a.this
        first, after = _position(cd)
        old = a.args.get("rename_from")
        if old is not None:
            return ChangeColumn(old=_ident(old), spec=_column_spec(cd), first=first, after=after)
        return ModifyColumn(spec=_column_spec(cd), first=first, after=after)
    if isinstance(a, exp.Drop):
        kind = str(a.args.get("kind") or "").upper()
        target = a.args.get("tables") or []
        nm = _ident(target[0]) if target else _ident(a.this)
        if kind == "COLUMN":
            return DropColumn(name=nm, if_exists=bool(a.args.get("exists")))
        if kind in ("INDEX", "KEY"):
            if nm.upper() == "PRIMARY":
                return DropPrimaryKey()
            return DropIndex(name=nm, if_exists=bool(a.args.get("exists")))
        if kind == "CONSTRAINT":
            return DropIndex(name=nm, if_exists=True, constraint=True)
        if kind == "FOREIGN KEY":
            return NoOp("drop foreign key")
        raise DdlParseError(f"DROP {kind} in ALTER TABLE")
    if isinstance(a, exp.DropPrimaryKey):
        return DropPrimaryKey()
    if isinstance(a, exp.RenameColumn):
        return RenameColumn(old=_ident(a.this), new=_ident(a.args.get("to")))
    if isinstance(a, exp.AlterRename):
        schema, name = _table_name(a.this, default_schema)
        return RenameTo(schema=schema, name=name)
    if isinstance(a, exp.AddConstraint):
        specs = [_index_spec(e) for e in a.expressions]
        if len(specs) != 1:
            raise DdlParseError("ADD of several constraints at once")
        if specs[0] is None:
            return NoOp("foreign key")
        return AddIndex(index=specs[0], if_not_exists=bool(a.args.get("exists")))
    if isinstance(a, exp.AlterColumn):
        col = _ident(a.this)
        if a.args.get("drop"):
            return SetDefault(column=col, default=None)
        if a.args.get("default") is not None:
            return SetDefault(column=col, default=_default_text(a.args["default"]))
        if a.args.get("visible") is not None:
            return NoOp("visibility")
        raise DdlParseError("ALTER COLUMN form not supported")
    if isinstance(a, exp.RenameIndex):
        return RenameIndex(old=_ident(a.this), new=_ident(a.args.get("to")))
    if isinstance(a, exp.ForceProperty):
        return NoOp("force")
    raise DdlParseError(f"ALTER TABLE action {type(a).__name__} not supported")


def _rename_tables(tokens: list[Token], default_schema: str) -> RenameTables:
    i = 2  # RENAME TABLE|TABLES
    i = _skip_words(tokens, i, "IF", "EXISTS")
    pairs = []
    for part in _split_top(tokens[i:]):
        # WAIT n / NOWAIT may trail the first pair
        if not part:
            raise DdlParseError("empty RENAME TABLE item")
        old, k = _name_at(part, 0, default_schema)
        if k < len(part) and _up(part[k]) in ("WAIT", "NOWAIT"):
            k += 2 if _up(part[k]) == "WAIT" else 1
        if k >= len(part) or _up(part[k]) != "TO":
            raise DdlParseError("RENAME TABLE item without TO")
        new, k = _name_at(part, k + 1, default_schema)
        if k != len(part):
            raise DdlParseError("unexpected tokens in RENAME TABLE")
        pairs.append((old, new))
    return RenameTables(pairs=tuple(pairs))


def _index_stmt(tokens: list[Token], default_schema: str) -> AlterTable:
    """CREATE [OR REPLACE] [ONLINE|OFFLINE] [UNIQUE|FULLTEXT|SPATIAL] INDEX [IF NOT EXISTS] name
    [USING t] ON tbl (cols) [options] -> ALTER TABLE tbl ADD ... INDEX name (cols)."""
    words = [_up(t) for t in tokens]
    k = 1
    if words[k:k + 2] == ["OR", "REPLACE"]:
        k += 2
    while words[k] in ("ONLINE", "OFFLINE"):
        k += 1
    kind = "index"
    if words[k] in ("UNIQUE", "FULLTEXT", "SPATIAL"):
        kind = words[k].lower()
        k += 1
    if words[k] != "INDEX":
        raise DdlParseError("not CREATE INDEX")
    k += 1
    exists = words[k:k + 3] == ["IF", "NOT", "EXISTS"]
    if exists:
        k += 3
    iname = tokens[k].text
    k += 1
    while k < len(tokens) and words[k] != "ON":
        k += 1
    (schema, name), k = _name_at(tokens, k + 1, default_schema)
    if k >= len(tokens) or tokens[k].token_type != TokenType.L_PAREN:
        raise DdlParseError("CREATE INDEX without a column list")
    close = _matching_paren(tokens, k)
    kw = {"index": "INDEX", "unique": "UNIQUE INDEX", "fulltext": "FULLTEXT INDEX", "spatial": "SPATIAL INDEX"}
    synthetic = _synthetic(f"ALTER TABLE `_t` ADD {kw[kind]} `_i`") + tokens[k:close + 1]
    tree = _parse_tokens(synthetic)
    actions = [_alter_action(a, default_schema) for a in tree.args.get("actions") or []]
    if len(actions) != 1 or not isinstance(actions[0], AddIndex):
        raise DdlParseError("CREATE INDEX not understood")
    spec = actions[0].index
    return AlterTable(schema=schema, name=name, actions=(AddIndex(
        index=IndexSpec(name=iname, kind=kind, columns=spec.columns), if_not_exists=exists),))


def _drop_index_stmt(tokens: list[Token], default_schema: str) -> AlterTable:
    words = [_up(t) for t in tokens]
    k = 1
    while words[k] in ("ONLINE", "OFFLINE"):
        k += 1
    k += 1  # INDEX
    exists = words[k:k + 2] == ["IF", "EXISTS"]
    if exists:
        k += 2
    iname = tokens[k].text
    k += 1
    if k >= len(tokens) or words[k] != "ON":
        raise DdlParseError("DROP INDEX without ON")
    (schema, name), _ = _name_at(tokens, k + 1, default_schema)
    act: Any = DropPrimaryKey() if iname.upper() == "PRIMARY" else DropIndex(name=iname, if_exists=exists)
    return AlterTable(schema=schema, name=name, actions=(act,))


def _db_options(tokens: list[Token]) -> tuple[str | None, str | None]:
    opts = _table_options(tokens)
    if isinstance(opts, TableOptions):
        return opts.charset, opts.collation
    return None, None


def _database_stmt(tokens: list[Token], default_schema: str) -> Any:
    words = [_up(t) for t in tokens]
    verb = words[0]
    k = 1
    replace = False
    if verb == "CREATE" and words[1:3] == ["OR", "REPLACE"]:
        replace = True
        k = 3
    k += 1  # DATABASE | SCHEMA
    if verb == "CREATE":
        exists = words[k:k + 3] == ["IF", "NOT", "EXISTS"]
        k += 3 if exists else 0
        name = tokens[k].text
        cs, coll = _db_options(tokens[k + 1:])
        return CreateDatabase(name=name, charset=cs, collation=coll, if_not_exists=exists, or_replace=replace)
    if verb == "DROP":
        exists = words[k:k + 2] == ["IF", "EXISTS"]
        k += 2 if exists else 0
        return DropDatabase(name=tokens[k].text, if_exists=exists)
    # ALTER DATABASE [name] options | ALTER DATABASE name UPGRADE DATA DIRECTORY NAME
    if k < len(tokens) and words[k] not in ("DEFAULT", "CHARACTER", "CHARSET", "COLLATE", "COMMENT"):
        name = tokens[k].text
        k += 1
    else:
        name = default_schema
    cs, coll = _db_options(tokens[k:])
    return AlterDatabase(name=name, charset=cs, collation=coll)


def _drop_tables(tokens: list[Token], default_schema: str) -> DropTables:
    words = [_up(t) for t in tokens]
    k = 1
    temporary = False
    if words[k] == "TEMPORARY":
        temporary = True
        k += 1
    k += 1  # TABLE | TABLES
    exists = words[k:k + 2] == ["IF", "EXISTS"]
    k += 2 if exists else 0
    body = tokens[k:]
    # trailing WAIT n | NOWAIT | RESTRICT | CASCADE
    while body and _up(body[-1]) in ("NOWAIT", "RESTRICT", "CASCADE"):
        body = body[:-1]
    if len(body) >= 2 and _up(body[-2]) == "WAIT":
        body = body[:-2]
    tables = []
    for part in _split_top(body):
        t, j = _name_at(part, 0, default_schema)
        if j != len(part):
            raise DdlParseError("unexpected tokens in DROP TABLE")
        tables.append(t)
    return DropTables(tables=tuple(tables), if_exists=exists, temporary=temporary)


def _truncate(tokens: list[Token], default_schema: str) -> TruncateTables:
    k = _skip_words(tokens, 1, "TABLE")
    t, _ = _name_at(tokens, k, default_schema)
    return TruncateTables(tables=(t,))


def _sequence_stmt(tokens: list[Token], default_schema: str) -> Any:
    words = [_up(t) for t in tokens]
    if words[0] == "CREATE":
        k = 1
        replace = words[1:3] == ["OR", "REPLACE"]
        k += 2 if replace else 0
        if words[k] == "TEMPORARY":
            return None
        k += 1  # SEQUENCE
        exists = words[k:k + 3] == ["IF", "NOT", "EXISTS"]
        k += 3 if exists else 0
        (schema, name), _ = _name_at(tokens, k, default_schema)
        return CreateSequence(schema=schema, name=name, if_not_exists=exists, or_replace=replace)
    k = 2
    temporary = False
    if words[1] == "TEMPORARY":
        temporary = True
        k = 3
    exists = words[k:k + 2] == ["IF", "EXISTS"]
    k += 2 if exists else 0
    tables = tuple(_name_at(part, 0, default_schema)[0] for part in _split_top(tokens[k:]) if part)
    return DropTables(tables=tables, if_exists=exists, temporary=temporary)


def _guess_tables(tokens: list[Token], default_schema: str) -> tuple[tuple[str, str], ...]:
    """Best effort: the table names a statement we could not parse mentions."""
    words = [_up(t) for t in tokens]
    out: list[tuple[str, str]] = []
    try:
        if "TABLE" in words or "TABLES" in words:
            k = words.index("TABLE") if "TABLE" in words else words.index("TABLES")
            k += 1
            for seq in (("IF", "NOT", "EXISTS"), ("IF", "EXISTS")):
                k = _skip_words(tokens, k, *seq)
            t, k = _name_at(tokens, k, default_schema)
            out.append(t)
            if words[0] in ("RENAME", "DROP"):
                for part in _split_top(tokens[k:]):
                    for j in range(len(part)):
                        if j == 0 or _up(part[j - 1]) == "TO":
                            try:
                                out.append(_name_at(part, j, default_schema)[0])
                            except DdlParseError:
                                pass
        if "ON" in words and words[0] in ("CREATE", "DROP") and "INDEX" in words:
            out.append(_name_at(tokens, words.index("ON") + 1, default_schema)[0])
    except (DdlParseError, IndexError, ValueError):
        pass
    seen: list[tuple[str, str]] = []
    for t in out:
        if t not in seen and t[1] and _up_text_ok(t[1]):
            seen.append(t)
    return tuple(seen)


def _up_text_ok(name: str) -> bool:
    return name.upper() not in ("IF", "TO", "SELECT", "(", ")")


# ---- entry point -----------------------------------------------------------------------------------

_DML = {"INSERT": EVENT_INSERT, "UPDATE": EVENT_UPDATE, "DELETE": EVENT_DELETE}


def parse_ddl(sql: str, default_schema: str = "", *, server_version: int = DEFAULT_SERVER_VERSION) -> ParsedDdl:
    """Classify and parse one statement from a QUERY event (see the module docstring)."""
    default_schema = default_schema or ""
    try:
        clean = unwrap_executable_comments(sql, server_version)
        tokens = _tokenize(clean)
    except (SqlglotError, ValueError, IndexError) as e:
        return ParsedDdl(sql=sql, default_schema=default_schema, event_type=EVENT_QUERY, schema="", table="",
                         parsed=False, error=f"cannot tokenize: {e}", changes_schema=True)
    if not tokens:
        return ParsedDdl(sql=sql, default_schema=default_schema, event_type=EVENT_QUERY, schema="", table="")
    words = [_up(t) for t in tokens[:8]]
    kind = _statement_kind(words)
    if kind is None:
        if words[0] in _DML:
            return _dml(sql, default_schema, tokens, words[0])
        return ParsedDdl(sql=sql, default_schema=default_schema, event_type=EVENT_QUERY, schema="", table="")
    try:
        ops = _parse_kind(kind, tokens, default_schema, clean)
    except (DdlParseError, IndexError, ValueError, SqlglotError) as e:
        tables = _guess_tables(tokens, default_schema)
        etype = {"create_table": EVENT_CREATE, "alter_table": EVENT_ALTER, "rename": EVENT_RENAME,
                 "drop_table": EVENT_ERASE, "truncate": EVENT_TRUNCATE, "create_index": EVENT_CINDEX,
                 "drop_index": EVENT_DINDEX}.get(kind, EVENT_QUERY)
        schema, table = tables[-1] if kind == "rename" and tables else (tables[0] if tables else ("", ""))
        return ParsedDdl(sql=sql, default_schema=default_schema, event_type=etype, schema=schema, table=table,
                         tables=tables, parsed=False, error=str(e) or type(e).__name__, changes_schema=True)
    return _classify(sql, default_schema, ops)


def _statement_kind(w: list[str]) -> str | None:
    def at(i: int) -> str:
        return w[i] if i < len(w) else ""

    if w[0] == "CREATE":
        k = 1
        if at(1) == "OR" and at(2) == "REPLACE":
            k = 3
        if at(k) == "TEMPORARY":
            k += 1
        if at(k) == "TABLE":
            return "create_table"
        if at(k) in ("DATABASE", "SCHEMA"):
            return "database"
        if at(k) == "SEQUENCE":
            return "sequence"
        while at(k) in ("ONLINE", "OFFLINE"):
            k += 1
        if at(k) in ("UNIQUE", "FULLTEXT", "SPATIAL"):
            k += 1
        if at(k) == "INDEX":
            return "create_index"
        return None
    if w[0] == "ALTER":
        k = 1
        while at(k) in ("ONLINE", "IGNORE", "OFFLINE"):
            k += 1
        if at(k) == "TABLE":
            return "alter_table"
        if at(k) in ("DATABASE", "SCHEMA"):
            return "database"
        return None
    if w[0] == "DROP":
        k = 1
        if at(1) == "TEMPORARY":
            k = 2
        if at(k) in ("TABLE", "TABLES"):
            return "drop_table"
        if at(k) in ("DATABASE", "SCHEMA"):
            return "database"
        if at(k) == "SEQUENCE":
            return "sequence"
        while at(k) in ("ONLINE", "OFFLINE"):
            k += 1
        if at(k) == "INDEX":
            return "drop_index"
        return None
    if w[0] == "RENAME" and at(1) in ("TABLE", "TABLES"):
        return "rename"
    if w[0] == "TRUNCATE" and at(1) not in ("PARTITION",):
        return "truncate"
    return None


def _parse_kind(kind: str, tokens: list[Token], default_schema: str, sql: str) -> tuple[Any, ...]:
    if kind == "create_table":
        return (_create_table(tokens, default_schema, sql),)
    if kind == "alter_table":
        return (_alter_table(tokens, default_schema),)
    if kind == "rename":
        return (_rename_tables(tokens, default_schema),)
    if kind == "drop_table":
        return (_drop_tables(tokens, default_schema),)
    if kind == "truncate":
        return (_truncate(tokens, default_schema),)
    if kind == "create_index":
        return (_index_stmt(tokens, default_schema),)
    if kind == "drop_index":
        return (_drop_index_stmt(tokens, default_schema),)
    if kind == "database":
        return (_database_stmt(tokens, default_schema),)
    if kind == "sequence":
        op = _sequence_stmt(tokens, default_schema)
        return (op,) if op is not None else ()
    raise DdlParseError(f"unknown statement kind {kind}")


def _alter_type(action: Any) -> int | None:
    """Canal's type for one ALTER TABLE action; None = Druid makes no result for it."""
    if isinstance(action, RenameTo):
        return EVENT_RENAME
    if isinstance(action, AddIndex):
        return EVENT_CINDEX
    if isinstance(action, DropIndex):
        return EVENT_DINDEX
    if isinstance(action, NoOp) and action.what in ("foreign key", "check"):
        return None
    return EVENT_ALTER


def _classify(sql: str, default_schema: str, ops: tuple[Any, ...]) -> ParsedDdl:
    base = {"sql": sql, "default_schema": default_schema, "operations": ops, "changes_schema": True}
    if not ops:
        return ParsedDdl(event_type=EVENT_QUERY, schema="", table="", **base)
    op = ops[0]
    if isinstance(op, CreateTable):
        tables = ((op.schema, op.name),) + ((op.like,) if op.like else ())
        return ParsedDdl(event_type=EVENT_CREATE, schema=op.schema, table=op.name, tables=tables, **base)
    if isinstance(op, CreateSequence):
        return ParsedDdl(event_type=EVENT_QUERY, schema=op.schema, table=op.name, tables=((op.schema, op.name),),
                         **base)
    if isinstance(op, AlterTable):
        tables = [(op.schema, op.name)]
        etype, schema, table = EVENT_QUERY, "", ""
        for a in op.actions:
            if isinstance(a, RenameTo):
                tables.append((a.schema, a.name))
        for a in op.actions:
            t = _alter_type(a)
            if t is None or (isinstance(a, NoOp) and a.what in ("algorithm", "lock")):
                continue
            etype = t
            schema, table = (a.schema, a.name) if isinstance(a, RenameTo) else (op.schema, op.name)
            break
        else:
            if any(isinstance(a, NoOp) and a.what in ("algorithm", "lock") for a in op.actions):
                etype, schema, table = EVENT_ALTER, op.schema, op.name  # a bare rebuild
        return ParsedDdl(event_type=etype, schema=schema, table=table, tables=tuple(tables), **base)
    if isinstance(op, RenameTables):
        tables = tuple(t for pair in op.pairs for t in pair)
        new = op.pairs[0][1]
        return ParsedDdl(event_type=EVENT_RENAME, schema=new[0], table=new[1], tables=tables, **base)
    if isinstance(op, DropTables):
        first = op.tables[0] if op.tables else ("", "")
        return ParsedDdl(event_type=EVENT_ERASE, schema=first[0], table=first[1], tables=op.tables, **base)
    if isinstance(op, TruncateTables):
        first = op.tables[0]
        return ParsedDdl(event_type=EVENT_TRUNCATE, schema=first[0], table=first[1], tables=op.tables, **base)
    if isinstance(op, CreateDatabase | DropDatabase | AlterDatabase):
        return ParsedDdl(event_type=EVENT_QUERY, schema=op.name, table="", **base)
    raise AssertionError(f"unclassified operation {op!r}")


def _dml(sql: str, default_schema: str, tokens: list[Token], verb: str) -> ParsedDdl:
    schema, table = "", ""
    try:
        tree = _parse_tokens(tokens, sql)
        target = tree.this if isinstance(tree, exp.Insert | exp.Update | exp.Delete) else None
        if isinstance(target, exp.Schema):
            target = target.this
        if isinstance(target, exp.Table):
            schema, table = _table_name(target, default_schema)
    except (DdlParseError, SqlglotError):
        pass
    return ParsedDdl(sql=sql, default_schema=default_schema, event_type=_DML[verb], schema=schema, table=table,
                     tables=((schema, table),) if table else ())
