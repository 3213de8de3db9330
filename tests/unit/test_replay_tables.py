"""The table filter a replay builds from schema.table names: every name matches itself only, whatever its
characters (RE2 refuses an escaped non-ASCII character, so only ASCII punctuation is escaped)."""

from __future__ import annotations

from canal_core.parse.filter import TableFilter
from pipelines.engine.replay import _tables_regex


def test_names_with_punctuation_and_non_ascii_match_themselves_only() -> None:
    names = ["shop.orders", "shop.t-1$x", "crm.kunden€", "crm.客户、表", "a.b.c"]
    f = TableFilter(_tables_regex(names), empty_accepts=False)
    for name in names:
        schema, table = name.split(".", 1)
        assert f.matches(schema, table), name
    assert not f.matches("shop", "t-1$xy") and not f.matches("shop", "orders2") and not f.matches("crm", "kunden")
    assert not f.matches("a", "bxc")  # the dot of a table name is literal
