"""CREATE TABLE: column and index definitions, LIKE, ... SELECT columns and the table options that
matter (charset, collation, comment)."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from .columns import column_spec, ident, index_spec, table_name, table_properties
from .lexing import DIALECT, DdlParseError, charset_options, matching_paren, parse_tokens, up
from .operations import ColumnSpec, CreateTable, IndexSpec, SelectColumn

# ---- statements ------------------------------------------------------------------------------------

_SYSTEM_VERSIONING = ("WITH", "SYSTEM", "VERSIONING")


def create_table(tokens: list[Token], default_schema: str, sql: str) -> CreateTable:
    # cut a trailing PARTITION BY (partitioning changes no column)
    depth = 0
    for j, t in enumerate(tokens):
        if t.token_type == TokenType.L_PAREN:
            depth += 1
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and up(t) == "PARTITION" and j + 1 < len(tokens) and up(tokens[j + 1]) == "BY":
            tokens = tokens[:j]
            break
        elif depth == 0 and [up(x) for x in tokens[j:j + 3]] == list(_SYSTEM_VERSIONING):
            raise DdlParseError("system-versioned tables (hidden row_start/row_end columns) are not modelled")
    try:
        tree = parse_tokens(tokens, sql)
    except DdlParseError:
        tree = _create_table_retry(tokens, sql)
    if not isinstance(tree, exp.Create):
        raise DdlParseError("not a CREATE TABLE")
    target = tree.this
    props = table_properties(tree.args.get("properties"))
    columns: list[ColumnSpec] = []
    indexes: list[IndexSpec] = []
    like = None
    if isinstance(target, exp.Schema):
        table = target.this
        for el in target.expressions:
            if isinstance(el, exp.ColumnDef):
                columns.append(column_spec(el))
            elif isinstance(el, exp.LikeProperty):
                like = el.this
            else:
                spec = index_spec(el)
                if spec is not None:
                    indexes.append(spec)
    else:
        table = target
    if not isinstance(table, exp.Table):
        raise DdlParseError("CREATE TABLE without a table name")
    schema, name = table_name(table, default_schema)
    like = like if like is not None else props.get("like")
    select = None
    q = tree.args.get("expression")
    if q is not None:
        select = _select_columns(q, default_schema)
    return CreateTable(schema=schema, name=name, columns=tuple(columns), indexes=tuple(indexes),
                       charset=props.get("charset"), collation=props.get("collation"),
                       comment=props.get("comment"), if_not_exists=bool(tree.args.get("exists")),
                       or_replace=bool(tree.args.get("replace")), temporary=bool(props.get("temporary")),
                       like=table_name(like, default_schema) if isinstance(like, exp.Table) else None,
                       select=select)


def _create_table_retry(tokens: list[Token], sql: str) -> exp.Expr:
    """sqlglot did not take the table options: parse the definition alone and read the options that
    matter (charset, collation, comment) from the tokens."""
    i = next((k for k, t in enumerate(tokens) if t.token_type == TokenType.L_PAREN), None)
    if i is None:
        raise DdlParseError("CREATE TABLE without a column list")
    close = matching_paren(tokens, i)
    rest = tokens[close + 1:]
    if any(up(t) in ("SELECT", "AS", "LIKE") for t in rest):
        raise DdlParseError("unsupported CREATE TABLE options")
    tree = parse_tokens(tokens[:close + 1], sql)
    found = charset_options(rest, strict=False)
    opts: list[exp.Expr] = []
    if "charset" in found:
        opts.append(exp.CharacterSetProperty(this=exp.Var(this=found["charset"]), default=True))
    if "collation" in found:
        opts.append(exp.CollateProperty(this=exp.Var(this=found["collation"])))
    if "comment" in found:
        opts.append(exp.SchemaCommentProperty(this=exp.Literal.string(found["comment"])))
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
            st = table_name(t, default_schema)
            order.append(st)
            sources[st[1].lower()] = st
            if t.alias:
                sources[t.alias.lower()] = st
    single = order[0] if len(order) == 1 else None
    out: list[SelectColumn] = []
    for e in q.expressions:
        alias = None
        if isinstance(e, exp.Alias):
            alias = ident(e.args.get("alias"))
            e = e.this
        if isinstance(e, exp.Star):
            if single is None:
                out.append(SelectColumn(name="*", source=None))
            else:
                out.append(SelectColumn(name="*", source=(single[0], single[1], "*")))
            continue
        if isinstance(e, exp.Column):
            qual = ident(e.args.get("table")) if e.args.get("table") is not None else ""
            src = sources.get(qual.lower()) if qual else single
            col = "*" if isinstance(e.this, exp.Star) else ident(e.this)
            out.append(SelectColumn(name=alias or col, source=(src[0], src[1], col) if src else None))
            continue
        out.append(SelectColumn(name=alias or e.sql(dialect=DIALECT), source=None))
    return tuple(out)

