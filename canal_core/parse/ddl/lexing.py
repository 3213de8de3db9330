"""Tokens of a DDL statement: sqlglot's MySQL dialect extended for MariaDB (user-defined type names such
as INET6 and POINT, REAL = DOUBLE, FLOAT UNSIGNED, PERSISTENT generated columns), the token rewrites
sqlglot cannot do (NATIONAL CHAR, LONG VARBINARY, COMPRESSED), and the token functions the statement readers
walk tokens with."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlglot import exp
from sqlglot.dialects.mysql import MySQL
from sqlglot.errors import SqlglotError
from sqlglot.parsers.mysql import MySQLParser
from sqlglot.tokens import Token, TokenType


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

    # MySQL.Parser is MySQLParser, named here because a class attribute is not a type for mypy
    class Parser(MySQLParser):
        # FLOAT UNSIGNED has no sqlglot type: carried as UINT128, which MySQL never has
        SIGNED_TO_UNSIGNED_TYPE_TOKEN = {**MySQLParser.SIGNED_TO_UNSIGNED_TYPE_TOKEN,
                                         TokenType.FLOAT: TokenType.UINT128}


DIALECT = CanalMariaDB()


class _NoCommandFallbackWarnings(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Falling back to parsing as a 'Command'" not in record.getMessage()


logging.getLogger("sqlglot").addFilter(_NoCommandFallbackWarnings())

# ---- walking tokens ----------------------------------------------------------------------------------

_PUNCT = {TokenType.COMMA, TokenType.L_PAREN, TokenType.R_PAREN, TokenType.SEMICOLON, TokenType.DOT,
          TokenType.EQ}


def up(tok: Token) -> str:
    return tok.text.upper() if tok.token_type != TokenType.IDENTIFIER else ""


def tokenize(sql: str) -> list[Token]:
    tokens = DIALECT.tokenize(sql)
    out: list[Token] = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        u = up(t)
        nxt = up(tokens[i + 1]) if i + 1 < len(tokens) else ""
        if u == "NATIONAL" and nxt in ("CHAR", "CHARACTER", "VARCHAR"):
            nt = tokens[i + 1]
            kind = TokenType.NVARCHAR if nxt == "VARCHAR" else TokenType.NCHAR
            # NATIONAL CHAR VARYING / NATIONAL CHARACTER VARYING
            if i + 2 < len(tokens) and up(tokens[i + 2]) == "VARYING":
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


def parse_tokens(tokens: list[Token], sql: str = "") -> exp.Expr:
    try:
        trees = DIALECT.parser().parse(tokens, sql)
    except SqlglotError as e:
        raise DdlParseError(str(e).splitlines()[0]) from None
    except (ValueError, TypeError, AttributeError, IndexError, KeyError) as e:
        raise DdlParseError(f"{type(e).__name__}: {e}") from None
    found = [t for t in trees if t is not None]
    if len(found) != 1:
        raise DdlParseError(f"expected one statement, got {len(found)}")
    tree = found[0]
    if isinstance(tree, exp.Command):
        raise DdlParseError("unsupported syntax")
    return tree


def synthetic(sql: str) -> list[Token]:
    return DIALECT.tokenize(sql)


def split_top(tokens: Sequence[Token], sep: TokenType = TokenType.COMMA) -> list[list[Token]]:
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


def matching_paren(tokens: Sequence[Token], i: int) -> int:
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


def name_at(tokens: Sequence[Token], i: int, default_schema: str) -> tuple[tuple[str, str], int]:
    """A [schema.]name at tokens[i]; returns ((schema, name), next index)."""
    if i >= len(tokens) or tokens[i].token_type in _PUNCT:
        raise DdlParseError("expected a table name")
    first = tokens[i].text
    if i + 1 < len(tokens) and tokens[i + 1].token_type == TokenType.DOT:
        if i + 2 >= len(tokens) or tokens[i + 2].token_type in _PUNCT:
            raise DdlParseError("expected a table name after '.'")
        return (first, tokens[i + 2].text), i + 3
    return (default_schema, first), i + 1


def skip_words(tokens: Sequence[Token], i: int, *words: str) -> int:
    """Skip the optional word sequence at i if all of it is there."""
    if i + len(words) <= len(tokens) and all(up(tokens[i + k]) == w for k, w in enumerate(words)):
        return i + len(words)
    return i


_OPTION_NAMES = {"CHARSET": "charset", "CHARACTER": "charset", "COLLATE": "collation", "COMMENT": "comment"}


def charset_options(tokens: Sequence[Token], *, strict: bool) -> dict[str, str]:
    """The [DEFAULT] CHARACTER SET / CHARSET, COLLATE and COMMENT values among table or database options, as
    written (the last of each wins; other options are skipped). An option without its value raises when
    ``strict``, else ends the reading."""
    found: dict[str, str] = {}
    k = 0
    while k < len(tokens):
        w = up(tokens[k])
        if w in _OPTION_NAMES:
            k += 2 if w == "CHARACTER" else 1
            if k < len(tokens) and tokens[k].token_type == TokenType.EQ:
                k += 1
            if k >= len(tokens):
                if strict:
                    raise DdlParseError(f"{w} without a value")
                break
            found[_OPTION_NAMES[w]] = tokens[k].text
        k += 1
    return found
