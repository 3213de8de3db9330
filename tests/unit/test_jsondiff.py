"""PARTIAL_UPDATE_ROWS JSON diffs (canal_core.binlog.jsondiff): their layout, applying them, and fuzzing.

Expected texts come from MySQL's documented rules (Json_diff::write_binary, apply_json_diffs) and the
reference printer in jsonb_encoding.py, never from the code under test.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from jsonb_encoding import Opaque, diff_bytes, enc, json_values, only_json_errors, packed_datetime, ref_text

from canal_core.binlog.jsonb import JsonDecodeError, json_to_text
from canal_core.binlog.jsondiff import JsonDiff, JsonDiffOperation, apply_json_diffs, parse_json_diffs


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=64))
def test_fuzz_diffs(data: bytes) -> None:
    only_json_errors(parse_json_diffs, data)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["$.a", "$[0]", '$."x y"', "$.a[1].b"]),
                          json_values), max_size=4), st.data())
def test_fuzz_mutated_diffs(ops: list[tuple[int, str, Any]], data: st.DataObject) -> None:
    raw = bytearray(b"".join(diff_bytes(op, path, value) for op, path, value in ops))
    assume(raw)
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] = data.draw(st.integers(0, 255))
    try:
        diffs = parse_json_diffs(bytes(raw))
    except JsonDecodeError:
        return
    only_json_errors(lambda _: apply_json_diffs('{"a": [1, {"b": 2}], "x y": 3}', diffs), b"")



def test_parse_json_diffs_layout() -> None:
    raw = (diff_bytes(0, "$.a", "x") + diff_bytes(1, "$[3]", [1, 2]) + diff_bytes(2, '$."key with space"')
           + diff_bytes(0, "$.n", raw=b""))
    diffs = parse_json_diffs(raw)
    assert diffs == [
        JsonDiff(JsonDiffOperation.REPLACE, "$.a", enc("x"), '"x"'),
        JsonDiff(JsonDiffOperation.INSERT, "$[3]", enc([1, 2]), "[1, 2]"),
        JsonDiff(JsonDiffOperation.REMOVE, '$."key with space"'),
        JsonDiff(JsonDiffOperation.REPLACE, "$.n", b"", "null"),  # empty value = JSON null
    ]
    assert parse_json_diffs(memoryview(raw)) == diffs
    assert parse_json_diffs(b"") == []


def test_parse_json_diffs_long_path_uses_3_byte_length() -> None:
    path = "$." + "k" * 300
    (d,) = parse_json_diffs(diff_bytes(2, path))
    assert d.path == path


@pytest.mark.parametrize("raw", [
    b"\x03\x01$",                 # unknown operation
    b"\x00",                      # missing path length
    b"\x00\x05$.a",               # path past the end
    b"\x00\xfb",                  # NULL length
    b"\x00\x03$.a",               # missing value length
    b"\x00\x03$.a\x05\x04\x01",   # value past the end
    b"\x00\x03$.a\x02\x04\x07",   # malformed value
    b"\x02\x03a.b",               # path without '$'
    b"\x02\x03$.*",               # wildcard
    b"\x02\x04$[*]",              # wildcard
    b"\x02\x03$**",               # ellipsis
    b"\x02\x04$[1",               # unterminated
    b"\x02\x02$\xff",             # not UTF-8
])
def test_parse_json_diffs_malformed(raw: bytes) -> None:
    with pytest.raises(JsonDecodeError):
        parse_json_diffs(raw)


def _apply(before: str, *parts: bytes) -> str:
    return apply_json_diffs(before, parse_json_diffs(b"".join(parts)))


BEFORE = '{"a": 1, "b": [10, 20, 30], "c": {"d": "x"}, "key with space": true}'


@pytest.mark.parametrize(("diffs", "after"), [
    # REPLACE keeps the member's place
    ([diff_bytes(0, "$.a", "new")],
     '{"a": "new", "b": [10, 20, 30], "c": {"d": "x"}, "key with space": true}'),
    ([diff_bytes(0, "$.b[1]", {"z": None})],
     '{"a": 1, "b": [10, {"z": null}, 30], "c": {"d": "x"}, "key with space": true}'),
    ([diff_bytes(0, "$.c.d", 2.5)], '{"a": 1, "b": [10, 20, 30], "c": {"d": 2.5}, "key with space": true}'),
    ([diff_bytes(0, '$."key with space"', False)],
     '{"a": 1, "b": [10, 20, 30], "c": {"d": "x"}, "key with space": false}'),
    ([diff_bytes(0, "$.b[last]", 0)], '{"a": 1, "b": [10, 20, 0], "c": {"d": "x"}, "key with space": true}'),
    ([diff_bytes(0, "$.b[last-2]", 0)],
     '{"a": 1, "b": [0, 20, 30], "c": {"d": "x"}, "key with space": true}'),
    # INSERT of a member: the DOM keeps keys ordered by length, then bytes
    ([diff_bytes(1, "$.aa", 7)],
     '{"a": 1, "b": [10, 20, 30], "c": {"d": "x"}, "aa": 7, "key with space": true}'),
    ([diff_bytes(1, "$.B", 7)],
     '{"B": 7, "a": 1, "b": [10, 20, 30], "c": {"d": "x"}, "key with space": true}'),
    # INSERT into an array shifts the rest; an index past the end appends
    ([diff_bytes(1, "$.b[0]", 5)], '{"a": 1, "b": [5, 10, 20, 30], "c": {"d": "x"}, "key with space": true}'),
    ([diff_bytes(1, "$.b[99]", 5)],
     '{"a": 1, "b": [10, 20, 30, 5], "c": {"d": "x"}, "key with space": true}'),
    # REMOVE
    ([diff_bytes(2, "$.b[0]")], '{"a": 1, "b": [20, 30], "c": {"d": "x"}, "key with space": true}'),
    ([diff_bytes(2, "$.c.d")], '{"a": 1, "b": [10, 20, 30], "c": {}, "key with space": true}'),
    ([diff_bytes(2, '$."key with space"')], '{"a": 1, "b": [10, 20, 30], "c": {"d": "x"}}'),
    # several diffs apply in order
    ([diff_bytes(2, "$.b[0]"), diff_bytes(2, "$.b[0]"), diff_bytes(1, "$.b[0]", "y"),
      diff_bytes(0, "$.a", [])],
     '{"a": [], "b": ["y", 30], "c": {"d": "x"}, "key with space": true}'),
    # whitespace inside the path is allowed
    ([diff_bytes(0, " $ .c . d ", 1)], '{"a": 1, "b": [10, 20, 30], "c": {"d": 1}, "key with space": true}'),
])
def test_apply_json_diffs(diffs: list[bytes], after: str) -> None:
    assert _apply(BEFORE, *diffs) == after


def test_apply_keeps_number_and_string_text() -> None:
    before = ('{"d": 123456789.1234, "e": 1e20, "f": 1.0, "s": "a\\"b\\\\c\\n\\u0001é", '
              '"u": 18446744073709551615, "dt": "2015-01-15 23:24:25.000000"}')
    assert _apply(before, diff_bytes(0, "$.e", 2)) == before.replace("1e20", "2")
    assert _apply(before, diff_bytes(0, "$.f", Opaque(246, b"\x04\x02\x81\x02"))) == before.replace(
        '"f": 1.0', '"f": 1.02')


def test_apply_value_with_opaque_and_escapes() -> None:
    v = {"t": Opaque(12, packed_datetime(2020, 1, 2, 3, 4, 5, 0)), "q": 'x"\t'}
    assert _apply('{"a": 1}', diff_bytes(0, "$.a", v)) == (
        '{"a": {"q": "x\\"\\t", "t": "2020-01-02 03:04:05.000000"}}')


def test_apply_to_nested_array_path() -> None:
    assert _apply('{"a": [{"b": 1}]}', diff_bytes(0, "$.a[0].b", "z")) == '{"a": [{"b": "z"}]}'
    assert _apply("[1, [2, 3]]", diff_bytes(1, "$[1][1]", 9)) == "[1, [2, 9, 3]]"


@pytest.mark.parametrize("diff", [
    diff_bytes(0, "$.zz", 1),          # REPLACE of a missing member
    diff_bytes(0, "$.b[3]", 1),        # REPLACE past the end
    diff_bytes(0, "$.a.x", 1),         # path through a scalar (no auto-wrap)
    diff_bytes(0, "$.b.x", 1),         # member leg on an array
    diff_bytes(0, "$[0]", 1),          # cell leg on an object
    diff_bytes(1, "$.a", 1),           # INSERT of an existing member
    diff_bytes(1, "$.q.r", 1),         # INSERT under a missing parent
    diff_bytes(1, "$.a[0]", 1),        # INSERT into a scalar
    diff_bytes(2, "$.zz"),             # REMOVE of a missing member
    diff_bytes(2, "$.b[5]"),           # REMOVE past the end
    diff_bytes(2, "$.b[last-7]"),      # REMOVE before the start
    diff_bytes(0, "$", 1),             # the root can not be a diff target
])
def test_apply_rejected(diff: bytes) -> None:
    with pytest.raises(JsonDecodeError):
        _apply(BEFORE, diff)


def test_apply_needs_a_before_image() -> None:
    d = parse_json_diffs(diff_bytes(0, "$.a", 1))
    with pytest.raises(JsonDecodeError):
        apply_json_diffs(None, d)
    with pytest.raises(JsonDecodeError):
        apply_json_diffs("{not json", d)


def _leaf_paths(v: Any, prefix: str = "$") -> list[tuple[str, list[Any]]]:
    out: list[tuple[str, list[Any]]] = []
    if isinstance(v, dict):
        for k, x in v.items():
            out.append((f"{prefix}.{json.dumps(k)}", [k]))
            out += [(p, [k, *keys]) for p, keys in _leaf_paths(x, f"{prefix}.{json.dumps(k)}")]
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out.append((f"{prefix}[{i}]", [i]))
            out += [(p, [i, *keys]) for p, keys in _leaf_paths(x, f"{prefix}[{i}]")]
    return out


@settings(max_examples=300, deadline=None)
@given(json_values, json_values, st.data())
def test_replace_matches_model(doc: Any, new: Any, data: st.DataObject) -> None:
    paths = _leaf_paths(doc)
    assume(paths)
    path, keys = data.draw(st.sampled_from(paths))
    after = _apply(json_to_text(enc(doc)), diff_bytes(0, path, new))
    model = copy.deepcopy(doc)
    target = model
    for k in keys[:-1]:
        target = target[k]
    target[keys[-1]] = new
    assert after == ref_text(model)
