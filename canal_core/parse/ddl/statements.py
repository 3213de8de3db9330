"""The other statements that change tables or databases, read from their tokens: RENAME TABLE, CREATE /
DROP INDEX, CREATE / ALTER / DROP DATABASE, DROP TABLE, TRUNCATE, CREATE / DROP SEQUENCE; and the
table names a statement we cannot parse mentions."""

from __future__ import annotations

from typing import Any

from sqlglot.tokens import Token, TokenType

from .alter import alter_action, table_options
from .lexing import DdlParseError, matching_paren, name_at, parse_tokens, skip_words, split_top, synthetic, up
from .operations import (
    AddIndex,
    AlterDatabase,
    AlterTable,
    CreateDatabase,
    CreateSequence,
    DropDatabase,
    DropIndex,
    DropPrimaryKey,
    DropTables,
    IndexSpec,
    RenameTables,
    TableOptions,
    TruncateTables,
)


def rename_tables(tokens: list[Token], default_schema: str) -> RenameTables:
    i = 2  # RENAME TABLE|TABLES
    i = skip_words(tokens, i, "IF", "EXISTS")
    pairs = []
    for part in split_top(tokens[i:]):
        # WAIT n / NOWAIT may trail the first pair
        if not part:
            raise DdlParseError("empty RENAME TABLE item")
        old, k = name_at(part, 0, default_schema)
        if k < len(part) and up(part[k]) in ("WAIT", "NOWAIT"):
            k += 2 if up(part[k]) == "WAIT" else 1
        if k >= len(part) or up(part[k]) != "TO":
            raise DdlParseError("RENAME TABLE item without TO")
        new, k = name_at(part, k + 1, default_schema)
        if k != len(part):
            raise DdlParseError("unexpected tokens in RENAME TABLE")
        pairs.append((old, new))
    return RenameTables(pairs=tuple(pairs))


def create_index(tokens: list[Token], default_schema: str) -> AlterTable:
    """CREATE [OR REPLACE] [ONLINE|OFFLINE] [UNIQUE|FULLTEXT|SPATIAL] INDEX [IF NOT EXISTS] name
    [USING t] ON tbl (cols) [options] -> ALTER TABLE tbl ADD ... INDEX name (cols)."""
    words = [up(t) for t in tokens]
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
    (schema, name), k = name_at(tokens, k + 1, default_schema)
    if k >= len(tokens) or tokens[k].token_type != TokenType.L_PAREN:
        raise DdlParseError("CREATE INDEX without a column list")
    close = matching_paren(tokens, k)
    kw = {"index": "INDEX", "unique": "UNIQUE INDEX", "fulltext": "FULLTEXT INDEX", "spatial": "SPATIAL INDEX"}
    alter_tokens = synthetic(f"ALTER TABLE `_t` ADD {kw[kind]} `_i`") + tokens[k:close + 1]
    tree = parse_tokens(alter_tokens)
    actions = [alter_action(a, default_schema) for a in tree.args.get("actions") or []]
    if len(actions) != 1 or not isinstance(actions[0], AddIndex):
        raise DdlParseError("CREATE INDEX not understood")
    spec = actions[0].index
    return AlterTable(schema=schema, name=name, actions=(AddIndex(
        index=IndexSpec(name=iname, kind=kind, columns=spec.columns), if_not_exists=exists),))


def drop_index(tokens: list[Token], default_schema: str) -> AlterTable:
    words = [up(t) for t in tokens]
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
    (schema, name), _ = name_at(tokens, k + 1, default_schema)
    act: Any = DropPrimaryKey() if iname.upper() == "PRIMARY" else DropIndex(name=iname, if_exists=exists)
    return AlterTable(schema=schema, name=name, actions=(act,))


def _db_options(tokens: list[Token]) -> tuple[str | None, str | None]:
    opts = table_options(tokens)
    if isinstance(opts, TableOptions):
        return opts.charset, opts.collation
    return None, None


def database_statement(tokens: list[Token], default_schema: str) -> Any:
    words = [up(t) for t in tokens]
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


def drop_tables(tokens: list[Token], default_schema: str) -> DropTables:
    words = [up(t) for t in tokens]
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
    while body and up(body[-1]) in ("NOWAIT", "RESTRICT", "CASCADE"):
        body = body[:-1]
    if len(body) >= 2 and up(body[-2]) == "WAIT":
        body = body[:-2]
    tables = []
    for part in split_top(body):
        t, j = name_at(part, 0, default_schema)
        if j != len(part):
            raise DdlParseError("unexpected tokens in DROP TABLE")
        tables.append(t)
    return DropTables(tables=tuple(tables), if_exists=exists, temporary=temporary)


def truncate_tables(tokens: list[Token], default_schema: str) -> TruncateTables:
    k = skip_words(tokens, 1, "TABLE")
    t, _ = name_at(tokens, k, default_schema)
    return TruncateTables(tables=(t,))


def sequence_statement(tokens: list[Token], default_schema: str) -> Any:
    words = [up(t) for t in tokens]
    if words[0] == "CREATE":
        k = 1
        replace = words[1:3] == ["OR", "REPLACE"]
        k += 2 if replace else 0
        if words[k] == "TEMPORARY":
            return None
        k += 1  # SEQUENCE
        exists = words[k:k + 3] == ["IF", "NOT", "EXISTS"]
        k += 3 if exists else 0
        (schema, name), _ = name_at(tokens, k, default_schema)
        return CreateSequence(schema=schema, name=name, if_not_exists=exists, or_replace=replace)
    k = 2
    temporary = False
    if words[1] == "TEMPORARY":
        temporary = True
        k = 3
    exists = words[k:k + 2] == ["IF", "EXISTS"]
    k += 2 if exists else 0
    tables = tuple(name_at(part, 0, default_schema)[0] for part in split_top(tokens[k:]) if part)
    return DropTables(tables=tables, if_exists=exists, temporary=temporary)


def guess_tables(tokens: list[Token], default_schema: str) -> tuple[tuple[str, str], ...]:
    """Best effort: the table names a statement we could not parse mentions."""
    words = [up(t) for t in tokens]
    out: list[tuple[str, str]] = []
    try:
        if "TABLE" in words or "TABLES" in words:
            k = words.index("TABLE") if "TABLE" in words else words.index("TABLES")
            k += 1
            for seq in (("IF", "NOT", "EXISTS"), ("IF", "EXISTS")):
                k = skip_words(tokens, k, *seq)
            t, k = name_at(tokens, k, default_schema)
            out.append(t)
            if words[0] in ("RENAME", "DROP"):
                for part in split_top(tokens[k:]):
                    for j in range(len(part)):
                        if j == 0 or up(part[j - 1]) == "TO":
                            try:
                                out.append(name_at(part, j, default_schema)[0])
                            except DdlParseError:
                                pass
        if "ON" in words and words[0] in ("CREATE", "DROP") and "INDEX" in words:
            out.append(name_at(tokens, words.index("ON") + 1, default_schema)[0])
    except (DdlParseError, IndexError, ValueError):
        pass
    seen: list[tuple[str, str]] = []
    for t in out:
        if t not in seen and t[1] and _up_text_ok(t[1]):
            seen.append(t)
    return tuple(seen)


def _up_text_ok(name: str) -> bool:
    return name.upper() not in ("IF", "TO", "SELECT", "(", ")")

