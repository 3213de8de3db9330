"""Canal's filter rules (docs/canal-compat.md §4): top-level comma split, anchored, case-insensitive on schema.table."""

from __future__ import annotations

import time

import pytest

from canal_core.parse.filter import EventFilter, FilterConfigError, TableFilter, split_top_level, statement_kind


@pytest.mark.parametrize(("spec", "name", "expected"), [
    (".*\\..*", "any.thing", True),
    ("canal\\..*", "canal.t1", True),
    ("canal\\..*", "CANAL.T1", True),  # case-insensitive
    ("canal\\..*", "canal2.t1", False),  # anchored at both ends
    ("canal\\.t1", "canal.t10", False),
    ("canal\\.t1", "xcanal.t1", False),
    ("canal\\.t1,canal\\.t2", "canal.t2", True),
    ("canal\\.t1 , canal\\.t2", "canal.t2", True),  # whitespace around items
    ("db\\.t_\\d{1,3}", "db.t_12", True),  # the comma in {1,3} is not a separator
    ("db\\.t_\\d{1,3}", "db.t_1234", False),
    ("db\\.(a|b),db2\\.c", "db.b", True),
    ("db\\.(a|b),db2\\.c", "db2.c", True),
    ("db\\.[a,b]x", "db.,x", True),  # comma inside a character class
    ("", "x.y", True),  # empty white filter accepts all
])
def test_white_regex(spec: str, name: str, expected: bool) -> None:
    schema, table = name.split(".", 1)
    assert TableFilter(spec, empty_accepts=True).matches(schema, table) is expected


def test_black_regex_default_and_empty() -> None:
    black = TableFilter("mysql\\.slave_.*", empty_accepts=False)
    assert black.matches("mysql", "slave_master_info")
    assert not black.matches("mysql", "user")
    assert not TableFilter("", empty_accepts=False).matches("a", "b")  # empty black rejects nothing


def test_split_top_level_keeps_escapes_and_groups() -> None:
    assert split_top_level(r"a\.b,c\,d,e{1,2},(f,g)") == [r"a\.b", r"c\,d", "e{1,2}", "(f,g)"]


def test_event_filter_from_config() -> None:
    f = EventFilter.from_config({
        "canal.instance.filter.regex": "shop\\..*,crm\\.customer",
        "canal.instance.filter.black.regex": "shop\\.tmp_.*",
        "canal.instance.filter.field": "shop.orders:id/amount",
        "canal.instance.filter.black.field": "crm.customer:ssn",
        "canal.instance.filter.dml.delete": "true",
        "canal.instance.filter.query.dcl": "true",
    })
    assert f.table("shop", "orders") and f.table("crm", "customer")
    assert not f.table("shop", "tmp_1") and not f.table("crm", "other")
    assert f.dml_kind("write") and f.dml_kind("update") and not f.dml_kind("delete")
    assert f.columns("shop", "orders", ["id", "note", "AMOUNT"]) == [True, False, True]
    assert f.columns("crm", "customer", ["id", "ssn"]) == [True, False]
    assert f.columns("shop", "other", ["id"]) is None
    assert f.query_dcl and not f.query_dml


def test_defaults_match_canal() -> None:
    f = EventFilter.from_config({})
    assert f.table("any", "table")
    assert not f.table("mysql", "slave_relay_log_info")
    assert all(f.dml_kind(k) for k in ("write", "update", "delete"))


@pytest.mark.parametrize(("key", "value"), [
    ("canal.instance.filter.regex", "db\\.(unclosed"),
    ("canal.instance.filter.field", "no_colon_here"),
    ("canal.instance.filter.rows", "yes"),
])
def test_invalid_settings_name_the_key(key: str, value: str) -> None:
    with pytest.raises(FilterConfigError, match=key.replace(".", "\\.")):
        EventFilter.from_config({key: value})


@pytest.mark.parametrize(("sql", "kind"), [
    ("GRANT SELECT ON *.* TO 'a'@'%'", "dcl"),
    ("/* c */ create user x", "dcl"),
    ("INSERT INTO t VALUES (1)", "dml"),
    ("replace into t values (1)", "dml"),
    ("CREATE TABLE t (id int)", "other"),
    ("BEGIN", "other"),
])
def test_statement_kind(sql: str, kind: str) -> None:
    assert statement_kind(sql) == kind


# With a backtracking engine the first never finished on a 40-character name and the second doubles its time
# with each leading comment; the timeouts turn such a regression into a failure rather than a hang.
@pytest.mark.timeout(20)
def test_catastrophic_table_pattern_matches_in_linear_time() -> None:
    f = TableFilter("(?:[a-z_.0-9]+)+#", empty_accepts=True)
    start = time.perf_counter()
    assert not f.matches("canal_test", "rx_abcdefghijklmnopqrstuvwxy")  # 39 characters, no '#'
    assert f.matches("db", "t#")
    assert time.perf_counter() - start < 0.1


@pytest.mark.timeout(20)
def test_statement_kind_after_many_comments_in_linear_time() -> None:
    comments = "/* x */ " * 40
    start = time.perf_counter()
    assert statement_kind(comments + "SELECT 1") == "other"
    assert statement_kind(comments + "GRANT ALL ON *.* TO u") == "dcl"
    assert time.perf_counter() - start < 0.1


@pytest.mark.parametrize("key", ["canal.instance.filter.regex", "canal.instance.filter.black.regex"])
@pytest.mark.parametrize("pattern", [
    "db\\.(t)\\1",  # backreference
    "db\\.(?=t)t",  # lookahead
    "db\\.(?!x)t",
    "db\\.(?<=\\.)t",  # lookbehind
    "db\\.t*+",  # possessive quantifier
    "db\\.(?>t)",  # atomic group
    "db\\.t\\Z",
])
def test_constructs_without_a_linear_time_match_are_refused_naming_the_key(key: str, pattern: str) -> None:
    with pytest.raises(FilterConfigError, match=key.replace(".", "\\.") + ".*RE2"):
        EventFilter.from_config({key: "db\\.ok," + pattern})


def test_error_names_the_pattern_at_fault_and_cuts_long_text() -> None:
    with pytest.raises(FilterConfigError) as e:
        TableFilter("a\\.b,(x)\\1" + "y" * 10_000, empty_accepts=True, key="k")
    assert str(e.value).startswith("k='(x)\\\\1yyy") and "(10005 characters)" in str(e.value)
    assert len(str(e.value)) < 600


@pytest.mark.timeout(20)
def test_compiling_is_bounded() -> None:
    # a short pattern whose program is huge is refused at once, not compiled for seconds with the GIL held
    start = time.perf_counter()
    with pytest.raises(FilterConfigError, match=r"canal\.instance\.filter\.regex.*too large"):
        TableFilter(".{1000}" * 100, empty_accepts=True)
    # a long list with one bad pattern costs one compile, not one per pattern
    names = [f"db\\.t_{i:05d}" for i in range(20_000)]
    with pytest.raises(FilterConfigError, match="RE2"):
        TableFilter(",".join([*names, "db\\.(t)\\1"]), empty_accepts=True)
    assert time.perf_counter() - start < 3
    # and such a list of table names is accepted
    f = TableFilter(",".join(names[:10_000]), empty_accepts=True)
    assert f.matches("DB", "t_09999") and not f.matches("db", "t_10000")
