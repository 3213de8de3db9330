"""Canal's filters: table white/black regexes, field filters and the query/DML kind switches.

Table regex rules (canal.instance.filter.regex / .black.regex, and a client's subscription filter, which
replaces the white one): the list is split on top-level commas (a comma inside (), [] or {} belongs to its
pattern, so `db\\.t{1,3}` stays whole), each pattern is anchored ^...$ and matched case-insensitively
against "schema.table". An empty white filter accepts everything; an empty black filter rejects nothing.

Every regex here, configured or sent by a client, runs on RE2 (google-re2): matching takes time linear in
the text whatever the pattern, so a pattern such as ``(?:[a-z_.0-9]+)+#`` cannot freeze the process as it
does a backtracking engine (Python's ``re``, Java's). Canal compiles its filters with Jakarta ORO's Perl 5
syntax, which RE2 shares except for the constructs that need backtracking: backreferences (``\\1``),
lookahead (``(?=``, ``(?!``), lookbehind, possessive quantifiers (``a*+``), atomic groups (``(?>``) and a
few others (``\\Z``, ``(?x)``). A filter using them is refused with a FilterConfigError naming the key or
the client (docs/tcp-server.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import re2

from ..protocol.errors import CanalError

# A filter is a list of table names or patterns; this bounds the work a client can ask for with one
# (RE2 bounds the compiled program by its max_mem on top of this).
MAX_FILTER_CHARS = 1 << 20
# Echoed specs are cut: an error must not copy a megabyte of client text into the log and the Ack.
_ECHO_CHARS = 200
# RE2's own default bound on a compiled program. It also bounds the time a compile takes (the GIL is held
# meanwhile): about a second at worst, and a pattern over the bound is refused at once. A list of 10,000 table
# names fits.
_MAX_MEM = 8 << 20
# Naming the pattern at fault compiles each pattern alone: only for lists up to this long, so that a refused
# list costs no more than an accepted one.
_NAME_FAULT_UP_TO = 256


class FilterConfigError(CanalError, ValueError):
    """A filter setting that cannot be compiled; names the config key (or the client that sent it)."""


def _options(*, case_sensitive: bool = False, dot_nl: bool = False) -> Any:
    opts = re2.Options()
    opts.case_sensitive = case_sensitive
    opts.dot_nl = dot_nl
    opts.log_errors = False  # a refused pattern is our error to report, not a line on stderr per attempt
    opts.max_mem = _MAX_MEM
    return opts


def _echo(spec: str) -> str:
    return repr(spec) if len(spec) <= _ECHO_CHARS else f"{spec[:_ECHO_CHARS]!r}... ({len(spec)} characters)"


def compile_linear(pattern: str, key: str, *, spec: str | None = None, case_sensitive: bool = False,
                   dot_nl: bool = False) -> Any:
    """``pattern`` compiled with RE2; FilterConfigError naming ``key`` (and echoing ``spec``, the text as
    given, cut) when RE2 cannot compile it."""
    try:
        return re2.compile(pattern, _options(case_sensitive=case_sensitive, dot_nl=dot_nl))
    except re2.error as e:
        reason = e.args[0].decode("utf-8", "replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise FilterConfigError(
            f"{key}={_echo(pattern if spec is None else spec)}: not a regular expression this server runs "
            f"({reason}); filters run on RE2 (linear time), which has no backreferences, lookaround, "
            "possessive quantifiers, atomic groups, \\Z or (?x)") from None


def split_top_level(text: str, sep: str = ",") -> list[str]:
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    escaped = False
    for ch in text:
        if escaped:
            cur.append(ch)
            escaped = False
            continue
        if ch == "\\":
            cur.append(ch)
            escaped = True
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}" and depth:
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


class TableFilter:
    """One regex list, Canal style. ``empty_accepts``: what an empty list answers."""

    def __init__(self, spec: str | None, *, empty_accepts: bool, key: str = "canal.instance.filter.regex") -> None:
        self.spec = (spec or "").strip()
        self.empty_accepts = empty_accepts
        if len(self.spec) > MAX_FILTER_CHARS:
            raise FilterConfigError(f"{key}={_echo(self.spec)}: longer than {MAX_FILTER_CHARS} characters")
        patterns = split_top_level(self.spec)
        self.patterns = tuple(patterns)
        self._regex: Any = None
        if patterns:
            # longest first, as Canal orders them; alternation of anchored patterns
            ordered = sorted(patterns, key=len, reverse=True)
            try:
                self._regex = compile_linear("|".join(f"^(?:{p})$" for p in ordered), key, spec=self.spec)
            except FilterConfigError:
                if len(patterns) <= _NAME_FAULT_UP_TO:
                    for p in patterns:  # the error names the pattern at fault, when one is
                        compile_linear(p, key, spec=p)
                raise
        self._match = lru_cache(maxsize=4096)(self._match_uncached)

    def _match_uncached(self, name: str) -> bool:
        assert self._regex is not None
        return self._regex.match(name) is not None

    def matches(self, schema: str, table: str) -> bool:
        if self._regex is None:
            return self.empty_accepts
        return self._match(f"{schema}.{table}")

    def __repr__(self) -> str:
        return f"TableFilter({self.spec!r})"


def parse_field_filter(spec: str | None, key: str) -> dict[str, frozenset[str]]:
    """"schema.table:col1/col2,schema2.t2:c" -> {"schema.table": {"col1", "col2"}, ...} (lower case)."""
    out: dict[str, frozenset[str]] = {}
    for item in split_top_level(spec or ""):
        if ":" not in item:
            raise FilterConfigError(f"{key}: {item!r} is not schema.table:col1/col2")
        table, cols = item.split(":", 1)
        names = frozenset(c.strip().lower() for c in cols.split("/") if c.strip())
        if not table.strip() or not names:
            raise FilterConfigError(f"{key}: {item!r} is not schema.table:col1/col2")
        out[table.strip().lower()] = names
    return out


@dataclass
class EventFilter:
    """Everything the parser asks before turning an event into entries (canal.instance.filter.*)."""

    white: TableFilter = field(default_factory=lambda: TableFilter(".*\\..*", empty_accepts=True))
    black: TableFilter = field(default_factory=lambda: TableFilter(
        "mysql\\.slave_.*", empty_accepts=False, key="canal.instance.filter.black.regex"))
    field_white: dict[str, frozenset[str]] = field(default_factory=dict)
    field_black: dict[str, frozenset[str]] = field(default_factory=dict)
    query_dml: bool = False  # filter.query.dml: drop DML logged as statements
    query_dcl: bool = False  # filter.query.dcl: drop GRANT/REVOKE/user statements
    query_ddl: bool = False  # filter.query.ddl: drop DDL entries (history still applies them)
    dml_insert: bool = False
    dml_update: bool = False
    dml_delete: bool = False
    table_error: bool = False  # filter.table.error: skip rows of unknown tables instead of failing
    rows: bool = False  # filter.rows: drop all row data (DDL only)
    transaction_entry: bool = False  # filter.transaction.entry: no BEGIN/END entries

    @classmethod
    def from_config(cls, get: dict[str, str] | None = None) -> EventFilter:
        """From canal.instance.filter.* keys (values as strings, as read from the properties)."""
        c = get or {}

        def flag(key: str) -> bool:
            v = c.get(key, "false").strip().lower()
            if v not in ("true", "false"):
                raise FilterConfigError(f"{key}={c.get(key)!r}: expected true or false")
            return v == "true"

        return cls(
            white=TableFilter(c.get("canal.instance.filter.regex", ".*\\..*"), empty_accepts=True,
                              key="canal.instance.filter.regex"),
            black=TableFilter(c.get("canal.instance.filter.black.regex", "mysql\\.slave_.*"), empty_accepts=False,
                              key="canal.instance.filter.black.regex"),
            field_white=parse_field_filter(c.get("canal.instance.filter.field"), "canal.instance.filter.field"),
            field_black=parse_field_filter(c.get("canal.instance.filter.black.field"),
                                           "canal.instance.filter.black.field"),
            query_dml=flag("canal.instance.filter.query.dml"),
            query_dcl=flag("canal.instance.filter.query.dcl"),
            query_ddl=flag("canal.instance.filter.query.ddl"),
            dml_insert=flag("canal.instance.filter.dml.insert"),
            dml_update=flag("canal.instance.filter.dml.update"),
            dml_delete=flag("canal.instance.filter.dml.delete"),
            table_error=flag("canal.instance.filter.table.error"),
            rows=flag("canal.instance.filter.rows"),
            transaction_entry=flag("canal.instance.filter.transaction.entry"),
        )

    def table(self, schema: str, table: str) -> bool:
        """Whether rows of schema.table are wanted."""
        return self.white.matches(schema, table) and not self.black.matches(schema, table)

    def dml_kind(self, kind: str) -> bool:
        """Whether rows events of this kind ("write" | "update" | "delete") are wanted."""
        if self.rows:
            return False
        return not ((kind == "write" and self.dml_insert) or (kind == "update" and self.dml_update)
                    or (kind == "delete" and self.dml_delete))

    def columns(self, schema: str, table: str, names: list[str]) -> list[bool] | None:
        """Which columns to keep, or None for all (field filters: keep-list wins over drop-list)."""
        key = f"{schema}.{table}".lower()
        keep = self.field_white.get(key)
        if keep is not None:
            return [n.lower() in keep for n in names]
        drop = self.field_black.get(key)
        if drop is not None:
            return [n.lower() not in drop for n in names]
        return None


# Statements come from the binlog, written by any user of the source: RE2 too (with Python's re the leading
# comment group backtracks exponentially over a run of comments before an unmatched statement).
_DCL = compile_linear(r"^\s*(?:/\*.*?\*/\s*)*(GRANT|REVOKE|CREATE\s+USER|DROP\s+USER|ALTER\s+USER|RENAME\s+USER|"
                      r"SET\s+PASSWORD|CREATE\s+ROLE|DROP\s+ROLE|SET\s+DEFAULT\s+ROLE|FLUSH\s+PRIVILEGES)\b",
                      "statement kind", dot_nl=True)
_DML = compile_linear(r"^\s*(?:/\*.*?\*/\s*)*(INSERT|UPDATE|DELETE|REPLACE|LOAD\s+DATA)\b", "statement kind",
                      dot_nl=True)


def dml_verb(sql: str) -> str | None:
    """INSERT | UPDATE | DELETE | REPLACE | LOAD DATA for statement-logged DML, else None."""
    m = _DML.match(sql)
    return " ".join(m.group(1).upper().split()) if m else None


def statement_kind(sql: str) -> str:
    """"dcl" | "dml" | "other" for a QUERY event's statement (the query.dcl / query.dml switches)."""
    if _DCL.match(sql):
        return "dcl"
    if _DML.match(sql):
        return "dml"
    return "other"
