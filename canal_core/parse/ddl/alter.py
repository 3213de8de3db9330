"""ALTER TABLE: the statement is split into its top-level comma-separated actions and each action is
parsed by sqlglot on its own (so one action sqlglot does not know, e.g. ``ADD (a INT, b INT)`` or
``CONVERT TO CHARACTER SET``, does not lose the rest); partition clauses and table options that change
no column become ``NoOp``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from .columns import (
    charset_name,
    column_position,
    column_spec,
    default_text,
    ident,
    index_spec,
    literal_text,
    table_name,
)
from .lexing import (
    DdlParseError,
    charset_options,
    matching_paren,
    name_at,
    parse_tokens,
    skip_words,
    split_top,
    synthetic,
    up,
)
from .operations import (
    AddColumn,
    AddIndex,
    AlterTable,
    ChangeColumn,
    ConvertCharset,
    DropColumn,
    DropIndex,
    DropPrimaryKey,
    ModifyColumn,
    NoOp,
    RenameColumn,
    RenameIndex,
    RenameTo,
    SetDefault,
    TableOptions,
)

_PARTITION_WORDS = {"PARTITION", "PARTITIONS", "COALESCE", "REORGANIZE", "EXCHANGE", "REBUILD", "REMOVE",
                    "DISCARD", "IMPORT"}
_OPTION_WORDS = {"ENGINE", "ALGORITHM", "LOCK", "FORCE", "ENABLE", "DISABLE", "ROW_FORMAT",
                     "AUTO_INCREMENT", "AVG_ROW_LENGTH", "CHECKSUM", "KEY_BLOCK_SIZE", "MAX_ROWS", "MIN_ROWS",
                     "PACK_KEYS", "STATS_AUTO_RECALC", "STATS_PERSISTENT", "STATS_SAMPLE_PAGES", "TABLESPACE",
                     "UNION", "INSERT_METHOD", "DATA", "INDEX", "PAGE_CHECKSUM", "PAGE_COMPRESSED",
                     "PAGE_COMPRESSION_LEVEL", "TRANSACTIONAL", "ENCRYPTED", "ENCRYPTION_KEY_ID",
                     "IETF_QUOTES", "SEQUENCE", "STORAGE", "DELAY_KEY_WRITE", "ORDER", "VALIDATION",
                     "WITHOUT", "WITH", "NOWAIT", "WAIT"}


def alter_table(tokens: list[Token], default_schema: str) -> AlterTable:
    i = 1
    while i < len(tokens) and up(tokens[i]) in ("ONLINE", "IGNORE", "OFFLINE"):
        i += 1
    if i >= len(tokens) or up(tokens[i]) != "TABLE":
        raise DdlParseError("not ALTER TABLE")
    i = skip_words(tokens, i + 1, "IF", "EXISTS")
    (schema, name), i = name_at(tokens, i, default_schema)
    body = tokens[i:]
    if body and up(body[0]) in ("WAIT", "NOWAIT"):
        body = body[2:] if up(body[0]) == "WAIT" else body[1:]
    prefix = synthetic("ALTER TABLE `_t`")
    actions: list[Any] = []
    for chunk in split_top(body):
        if not chunk:
            continue
        first = up(chunk[0])
        second = up(chunk[1]) if len(chunk) > 1 else ""
        if first in _PARTITION_WORDS or second in ("PARTITION", "PARTITIONING") \
                or (first in ("ANALYZE", "CHECK", "OPTIMIZE", "REPAIR", "TRUNCATE") and second == "PARTITION"):
            actions.append(NoOp("partitioning"))
            break  # partition clauses end the statement; their commas are not action separators
        actions.extend(_alter_chunk(chunk, prefix, default_schema))
    return AlterTable(schema=schema, name=name, actions=tuple(actions))


def _alter_chunk(chunk: list[Token], prefix: list[Token], default_schema: str) -> list[Any]:
    words = [up(t) for t in chunk]
    first = words[0]
    if first == "CONVERT":
        k = 1
        k = skip_words(chunk, k, "TO")
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
        k = skip_words(chunk, 1, "COLUMN")
        k2 = skip_words(chunk, k, "IF", "NOT", "EXISTS")
        if k2 < len(chunk) and chunk[k2].token_type == TokenType.L_PAREN and k2 + 1 < len(chunk) \
                and matching_paren(chunk, k2) == len(chunk) - 1:
            inner = chunk[k2 + 1:-1]
            # ADD [COLUMN] (col, col, ...): each part on its own (index definitions may be among them)
            actions: list[Any] = []
            head = synthetic("ADD COLUMN" + (" IF NOT EXISTS" if k2 != k else ""))
            for part in split_top(inner):
                if part and up(part[0]) in ("PRIMARY", "UNIQUE", "KEY", "INDEX", "CONSTRAINT", "FULLTEXT",
                                             "SPATIAL", "FOREIGN", "CHECK"):
                    actions.extend(_alter_chunk(synthetic("ADD") + part, prefix, default_schema))
                else:
                    actions.extend(_alter_chunk(head + part, prefix, default_schema))
            return actions
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
        (schema, name), k = name_at(chunk, k, default_schema)
        if k == len(chunk):
            return [RenameTo(schema=schema, name=name)]
    if first in ("DEFAULT", "CHARACTER", "CHARSET", "COLLATE", "COMMENT"):
        return [table_options(chunk)]
    if first == "WITH" and len(words) > 1 and words[1] == "SYSTEM":
        raise DdlParseError("WITH SYSTEM VERSIONING is not modelled")
    if first in _OPTION_WORDS:
        return [table_options(chunk)]
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
    tree = parse_tokens(prefix + chunk)
    if not isinstance(tree, exp.Alter):
        raise DdlParseError("not an ALTER TABLE action")
    out: list[Any] = []
    for a in tree.args.get("actions") or []:
        out.append(alter_action(a, default_schema))
    if tree.args.get("options"):
        out.append(_options_to_action(tree.args["options"]))
    if not out:
        raise DdlParseError("no ALTER TABLE action recognised")
    if flag is not None:
        out = [replace(a, **{flag: True}) if hasattr(a, flag) else a for a in out]
    return out


def table_options(chunk: list[Token]) -> Any:
    found = charset_options(chunk, strict=True)
    if not found:
        return NoOp(up(chunk[0]).lower() if chunk else "")
    cs, coll = found.get("charset"), found.get("collation")
    return TableOptions(charset=cs.lower() if cs is not None else None,
                        collation=coll.lower() if coll is not None else None, comment=found.get("comment"))


def _options_to_action(options: list[exp.Expr]) -> Any:
    cs = coll = comment = None
    for p in options:
        if isinstance(p, exp.CharacterSetProperty):
            cs = charset_name(p.this)
        elif isinstance(p, exp.CollateProperty):
            coll = charset_name(p.this)
        elif isinstance(p, exp.SchemaCommentProperty):
            comment = literal_text(p.this)
    if cs is None and coll is None and comment is None:
        return NoOp("options")
    return TableOptions(charset=cs, collation=coll, comment=comment)


def alter_action(a: exp.Expr, default_schema: str) -> Any:
    if isinstance(a, exp.ColumnDef):
        first, after = column_position(a)
        return AddColumn(spec=column_spec(a), first=first, after=after, if_not_exists=bool(a.args.get("exists")))
    if isinstance(a, exp.ModifyColumn):
        cd = a.this
        first, after = column_position(cd)
        old = a.args.get("rename_from")
        if old is not None:
            return ChangeColumn(old=ident(old), spec=column_spec(cd), first=first, after=after)
        return ModifyColumn(spec=column_spec(cd), first=first, after=after)
    if isinstance(a, exp.Drop):
        kind = str(a.args.get("kind") or "").upper()
        target = a.args.get("tables") or []
        nm = ident(target[0]) if target else ident(a.this)
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
        return RenameColumn(old=ident(a.this), new=ident(a.args.get("to")))
    if isinstance(a, exp.AlterRename):
        schema, name = table_name(a.this, default_schema)
        return RenameTo(schema=schema, name=name)
    if isinstance(a, exp.AddConstraint):
        specs = [index_spec(e) for e in a.expressions]
        if len(specs) != 1:
            raise DdlParseError("ADD of several constraints at once")
        if specs[0] is None:
            return NoOp("foreign key")
        return AddIndex(index=specs[0], if_not_exists=bool(a.args.get("exists")))
    if isinstance(a, exp.AlterColumn):
        col = ident(a.this)
        if a.args.get("drop"):
            return SetDefault(column=col, default=None)
        if a.args.get("default") is not None:
            return SetDefault(column=col, default=default_text(a.args["default"]))
        if a.args.get("visible") is not None:
            return NoOp("visibility")
        raise DdlParseError("ALTER COLUMN form not supported")
    if isinstance(a, exp.RenameIndex):
        return RenameIndex(old=ident(a.this), new=ident(a.args.get("to")))
    if isinstance(a, exp.ForceProperty):
        return NoOp("force")
    raise DdlParseError(f"ALTER TABLE action {type(a).__name__} not supported")

