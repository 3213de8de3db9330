"""``parse_ddl``: a QUERY event's statement recognised by its leading tokens, parsed into operations and
classified as Canal does (see the package docstring)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Token

from ..model import (
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
)
from .alter import alter_table
from .columns import table_name
from .comments import DEFAULT_SERVER_VERSION, unwrap_executable_comments
from .create import create_table
from .lexing import DdlParseError, parse_tokens, tokenize, up
from .operations import (
    AddIndex,
    AlterDatabase,
    AlterTable,
    CreateDatabase,
    CreateSequence,
    CreateTable,
    DropDatabase,
    DropIndex,
    DropTables,
    NoOp,
    ParsedDdl,
    RenameTables,
    RenameTo,
    TruncateTables,
)
from .statements import (
    create_index,
    database_statement,
    drop_index,
    drop_tables,
    guess_tables,
    rename_tables,
    sequence_statement,
    truncate_tables,
)

# ---- entry point -----------------------------------------------------------------------------------

_DML = {"INSERT": EVENT_INSERT, "UPDATE": EVENT_UPDATE, "DELETE": EVENT_DELETE}


def parse_ddl(sql: str, default_schema: str = "", *, server_version: int = DEFAULT_SERVER_VERSION) -> ParsedDdl:
    """Classify and parse one statement from a QUERY event (see the module docstring)."""
    default_schema = default_schema or ""
    try:
        clean = unwrap_executable_comments(sql, server_version)
        tokens = tokenize(clean)
    except (SqlglotError, ValueError, IndexError) as e:
        return ParsedDdl(sql=sql, default_schema=default_schema, event_type=EVENT_QUERY, schema="", table="",
                         parsed=False, error=f"cannot tokenize: {e}", changes_schema=True)
    if not tokens:
        return ParsedDdl(sql=sql, default_schema=default_schema, event_type=EVENT_QUERY, schema="", table="")
    words = [up(t) for t in tokens[:8]]
    kind = _statement_kind(words)
    if kind is None:
        if words[0] in _DML:
            return _dml(sql, default_schema, tokens, words[0])
        return ParsedDdl(sql=sql, default_schema=default_schema, event_type=EVENT_QUERY, schema="", table="")
    try:
        ops = _parse_kind(kind, tokens, default_schema, clean)
    except (DdlParseError, IndexError, ValueError, SqlglotError) as e:
        tables = guess_tables(tokens, default_schema)
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
        k = 3 if at(1) == "OR" and at(2) == "REPLACE" else 1
        return _created_or_dropped("CREATE", at, k + 1 if at(k) == "TEMPORARY" else k)
    if w[0] == "DROP":
        return _created_or_dropped("DROP", at, 2 if at(1) == "TEMPORARY" else 1)
    if w[0] == "ALTER":
        k = 1
        while at(k) in ("ONLINE", "IGNORE", "OFFLINE"):
            k += 1
        if at(k) == "TABLE":
            return "alter_table"
        if at(k) in ("DATABASE", "SCHEMA"):
            return "database"
        return None
    if w[0] == "RENAME" and at(1) in ("TABLE", "TABLES"):
        return "rename"
    if w[0] == "TRUNCATE" and at(1) not in ("PARTITION",):
        return "truncate"
    return None


def _created_or_dropped(verb: str, at: Callable[[int], str], k: int) -> str | None:
    """The kind of CREATE / DROP statement by the object word at k: TABLE (DROP also TABLES), DATABASE, SEQUENCE
    or [ONLINE|OFFLINE] INDEX (CREATE also [UNIQUE|FULLTEXT|SPATIAL] INDEX)."""
    obj = at(k)
    if obj == "TABLE" or (obj == "TABLES" and verb == "DROP"):
        return verb.lower() + "_table"
    if obj in ("DATABASE", "SCHEMA"):
        return "database"
    if obj == "SEQUENCE":
        return "sequence"
    while at(k) in ("ONLINE", "OFFLINE"):
        k += 1
    if verb == "CREATE" and at(k) in ("UNIQUE", "FULLTEXT", "SPATIAL"):
        k += 1
    return verb.lower() + "_index" if at(k) == "INDEX" else None


# statement kind -> its reader (CREATE TABLE also gets the statement text, for sqlglot's error messages)
_READERS: dict[str, Callable[[list[Token], str], Any]] = {
    "alter_table": alter_table, "rename": rename_tables, "drop_table": drop_tables, "truncate": truncate_tables,
    "create_index": create_index, "drop_index": drop_index, "database": database_statement,
    "sequence": sequence_statement,
}


def _parse_kind(kind: str, tokens: list[Token], default_schema: str, sql: str) -> tuple[Any, ...]:
    if kind == "create_table":
        return (create_table(tokens, default_schema, sql),)
    reader = _READERS.get(kind)
    if reader is None:
        raise DdlParseError(f"unknown statement kind {kind}")
    op = reader(tokens, default_schema)
    return (op,) if op is not None else ()  # CREATE TEMPORARY SEQUENCE: nothing to apply


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
    def result(event_type: int, schema: str, table: str, tables: tuple[tuple[str, str], ...] = ()) -> ParsedDdl:
        return ParsedDdl(sql=sql, default_schema=default_schema, event_type=event_type, schema=schema, table=table,
                         tables=tables, operations=ops, changes_schema=True)

    if not ops:
        return result(EVENT_QUERY, "", "")
    op = ops[0]
    if isinstance(op, CreateTable):
        return result(EVENT_CREATE, op.schema, op.name, ((op.schema, op.name),) + ((op.like,) if op.like else ()))
    if isinstance(op, CreateSequence):
        return result(EVENT_QUERY, op.schema, op.name, ((op.schema, op.name),))
    if isinstance(op, AlterTable):
        named = [(op.schema, op.name)]
        etype, schema, table = EVENT_QUERY, "", ""
        for a in op.actions:
            if isinstance(a, RenameTo):
                named.append((a.schema, a.name))
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
        return result(etype, schema, table, tuple(named))
    if isinstance(op, RenameTables):
        new = op.pairs[0][1]
        return result(EVENT_RENAME, new[0], new[1], tuple(t for pair in op.pairs for t in pair))
    if isinstance(op, DropTables):
        first = op.tables[0] if op.tables else ("", "")
        return result(EVENT_ERASE, first[0], first[1], op.tables)
    if isinstance(op, TruncateTables):
        first = op.tables[0]
        return result(EVENT_TRUNCATE, first[0], first[1], op.tables)
    if isinstance(op, CreateDatabase | DropDatabase | AlterDatabase):
        return result(EVENT_QUERY, op.name, "")
    raise AssertionError(f"unclassified operation {op!r}")


def _dml(sql: str, default_schema: str, tokens: list[Token], verb: str) -> ParsedDdl:
    schema, table = "", ""
    try:
        tree = parse_tokens(tokens, sql)
        target = tree.this if isinstance(tree, exp.Insert | exp.Update | exp.Delete) else None
        if isinstance(target, exp.Schema):
            target = target.this
        if isinstance(target, exp.Table):
            schema, table = table_name(target, default_schema)
    except (DdlParseError, SqlglotError):
        pass
    return ParsedDdl(sql=sql, default_schema=default_schema, event_type=_DML[verb], schema=schema, table=table,
                     tables=((schema, table),) if table else ())
