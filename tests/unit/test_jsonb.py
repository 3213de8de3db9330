"""MySQL binary JSON decoding (canal_core.binlog.jsonb); the diffs are tested in test_jsondiff.py.

Expected values come from the fixture vectors (what the originating projects assert) or, for the
hand-built documents, from MySQL's documented printing rules (Json_wrapper::to_string,
double_quote, my_gcvt, base64_encode, apply_json_diffs).
"""

from __future__ import annotations

import base64
import json
import re
import struct
from typing import Any

import pytest
from fixture_support import fixtures_root
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonb_encoding import (
    Opaque,
    U,
    enc,
    json_values,
    json_values_with_doubles,
    only_json_errors,
    packed_datetime,
    packed_time,
    ref_quote,
    ref_text,
    varlen,
)

from canal_core.binlog.jsonb import JsonDecodeError, json_to_text
from canal_core.binlog.jsondiff import apply_json_diffs, parse_json_diffs

FIXTURES = fixtures_root()  # $CANAL_FIXTURES, else ../shared/fixtures beside the repository
VITESS = FIXTURES / "vitess/vectors/jsonb_value_vectors.jsonl"
GOMYSQL = FIXTURES / "go-mysql/vectors"
CANAL_5127 = FIXTURES / "canal/vectors/jsonb_special_char_key_issue5127"


# ---------------------------------------------------------------------------------------------
# vitess value vectors


def _vitess_vectors() -> list[dict[str, str]]:
    return [json.loads(line) for line in VITESS.read_text().splitlines() if line.strip()]


def _vitess_expected(name: str) -> tuple[str, Any]:
    """(kind, expected) from a vector's name, which states the expected value."""
    if name in ("null", "true", "false"):
        return "json", json.loads(name)
    if re.fullmatch(r"-?\d+(\.\d+)?", name):
        return "number", name
    kind, _, rest = name.partition(" ")
    if kind in ("object", "array", "complex", "nested", "empty"):
        rest = rest.split(" ", 1)[1] if kind in ("nested", "empty") else rest
        return "json", json.loads(rest, object_pairs_hook=list)
    if kind in ("scalar", "datetime", "time", "date"):
        return "string", rest[1:]  # the name drops the closing quote
    if kind == "decimal":
        return "number", rest[1:]
    # "bit literal [2 202 254]", "opaque string [...]", "opaque blob [...]"
    return "opaque", bytes(int(x) for x in rest.rsplit("[", 1)[1].rstrip("]").split())


VITESS_VECTORS = _vitess_vectors()


def test_vitess_vector_count() -> None:
    assert len(VITESS_VECTORS) == 37


@pytest.mark.parametrize("vec", VITESS_VECTORS, ids=[v["name"][:40] for v in VITESS_VECTORS])
def test_vitess_value_vectors(vec: dict[str, str]) -> None:
    data = bytes.fromhex(vec["hex"])
    kind, expected = _vitess_expected(vec["name"])
    text = json_to_text(data)
    if kind == "json":
        assert json.loads(text, object_pairs_hook=list) == expected
    elif kind == "number":
        assert text == expected
    elif kind == "string":
        assert text == json.dumps(expected)
    else:
        # MySQL prints opaque values as "base64:type<N>:<base64 of the payload>". The vitess
        # vector names list the payload together with its 1-byte length prefix ([2 202 254] is
        # length 2 + ca fe); the decoded payload must be those bytes without the prefix.
        m = re.fullmatch(r'"base64:type(\d+):([A-Za-z0-9+/=]*)"', text)
        assert m is not None, text
        assert int(m.group(1)) == data[1]
        assert expected[0] == len(expected) - 1
        assert base64.b64decode(m.group(2)) == expected[1:]


def test_vitess_vectors_exact_text() -> None:
    # Same vectors, exact MySQL text for the containers (", " / ": " separators).
    by_name = {v["name"]: bytes.fromhex(v["hex"]) for v in VITESS_VECTORS}
    assert json_to_text(by_name['object {"a": "b"}']) == '{"a": "b"}'
    assert json_to_text(by_name['array ["here",["I","am"],"!!!"]']) == '["here", ["I", "am"], "!!!"]'
    assert json_to_text(by_name['complex {"a":"b","c":"d","ab":"abc","bc":["x","y"]}']) == (
        '{"a": "b", "c": "d", "ab": "abc", "bc": ["x", "y"]}')
    assert json_to_text(by_name["empty object {}"]) == "{}"
    assert json_to_text(by_name["empty array []"]) == "[]"


def test_memoryview_input() -> None:
    data = bytes.fromhex(VITESS_VECTORS[1]["hex"])
    assert json_to_text(memoryview(data)) == json_to_text(data) == '{"a": "b"}'
    assert json_to_text(bytearray(data)) == '{"a": "b"}'


# ---------------------------------------------------------------------------------------------
# canal issue 5127


def test_canal_issue_5127_special_char_key() -> None:
    txt = CANAL_5127.with_suffix(".txt").read_text()
    expected = re.search(r"renders (\{.*\})\s*$", txt, re.M).group(1)  # type: ignore[union-attr]
    body = CANAL_5127.with_suffix(".bin").read_bytes()
    assert len(body) == 74
    # the vector holds the small-object body; the type byte 0 was passed separately
    assert json_to_text(b"\x00" + body) == expected
    inner_key = re.search(r'element\(0\)\.key\(0\) == "(.*)"', txt).group(1)  # type: ignore[union-attr]
    assert json.loads(json_to_text(b"\x00" + body))["internal_uri_rewrite"] == {inner_key: "$1/mp4$2"}


# ---------------------------------------------------------------------------------------------
# go-mysql rows events holding JSON columns: walk the row images just far enough to cut out the
# JSON column bytes (the full rows decoder lives elsewhere)

# column layouts from the TABLE_MAP vectors / test comments: (kind, size)
T10 = [("json", 4), ("fixed", 5)]  # c1 json, c2 decimal(10,0)
HJ = [("fixed", 4), ("fixed", 8), ("fixed", 8), ("json", 4), ("fixed", 1), ("fixed", 4), ("fixed", 4)]
T11 = [("fixed", 4), ("var", 1), ("json", 4), ("fixed", 4)]


def rows_images(body: bytes, layout: list[tuple[str, int]], update: bool) -> list[list[Any]]:
    """Row images of a v2 rows event body (after the 19-byte header, 6-byte table id)."""
    p = 6 + 2
    extra = struct.unpack_from("<H", body, p)[0]
    p += extra
    ncols = body[p]
    p += 1
    nb = (ncols + 7) // 8
    p += nb * (2 if update else 1)
    images = []
    while p < len(body):
        nulls = int.from_bytes(body[p:p + nb], "little")
        p += nb
        row: list[Any] = []
        for i, (kind, size) in enumerate(layout):
            if nulls >> i & 1:
                row.append(None)
                continue
            if kind == "fixed":
                row.append(body[p:p + size])
                p += size
            else:
                n = int.from_bytes(body[p:p + size], "little")
                p += size
                row.append(body[p:p + n])
                p += n
        images.append(row)
    assert p == len(body)
    return images


def _gm(name: str) -> bytes:
    return next(GOMYSQL.glob(f"{name}_*.bin")).read_bytes()


def _gm_txt(name: str) -> str:
    return next(GOMYSQL.glob(f"{name}_*.txt")).read_text()


def _gm_stated_update(name: str) -> tuple[str, str]:
    """The before/after cfg_json values a JsonCompat vector's test asserts."""
    lit = r'"((?:[^"\\]|\\.)*)"'
    m = re.search(rf"rows\[1\]\[2\]=={lit}, rows\[2\]\[2\]=={lit}", _gm_txt(name))
    assert m is not None
    return m.group(1).replace('\\"', '"'), m.group(2).replace('\\"', '"')


def test_gomysql_006_null_json() -> None:
    (row,) = rows_images(_gm("006"), T10, update=False)
    assert row[0] is None  # c1=NULL: SQL NULL, not a JSON value


def test_gomysql_007_json_object() -> None:
    (row,) = rows_images(_gm("007"), T10, update=False)
    stated = re.search(r"c1=(\{.*\}), c2=", _gm_txt("007")).group(1)  # type: ignore[union-attr]
    text = json_to_text(row[0])
    assert json.loads(text, object_pairs_hook=list) == json.loads(stated, object_pairs_hook=list)
    assert text == '{"key1": "value1", "key2": "value2"}'  # MySQL's separators


def test_gomysql_008_long_json_string() -> None:
    (row,) = rows_images(_gm("008"), T10, update=False)
    assert len(row[0]) > 256  # a large value: 2-byte varint string length
    doc = json.loads(json_to_text(row[0]), object_pairs_hook=list)
    assert [k for k, _ in doc] == ["text"]
    assert doc[0][1].startswith("Lorem ipsum dolor sit amet,")
    assert len(doc[0][1]) >= 2750


def test_gomysql_016_empty_json_is_null() -> None:
    (row,) = rows_images(_gm("016"), HJ, update=False)
    assert row[3] == b""  # len(rows[0][3]) == 0
    assert json_to_text(row[3]) == "null"


def test_gomysql_018_empty_object() -> None:
    (row,) = rows_images(_gm("018"), T11, update=False)
    assert json_to_text(row[2]) == "{}"


# 022: the before value is wrong in the binlog but parses (test comment)
@pytest.mark.parametrize("name", ["019", "020", "022"])
def test_gomysql_json_compat_updates(name: str) -> None:
    before, after = _gm_stated_update(name)
    b, a = rows_images(_gm(name), T11, update=True)
    assert json.loads(json_to_text(b[2])) == json.loads(before)
    assert json.loads(json_to_text(a[2])) == json.loads(after)


def test_gomysql_021_bogus_pre_5722_value_is_an_error() -> None:
    # go-mysql only gets "null" here with ignoreJSONDecodeErr=true: the bytes are not valid JSON
    stated_before, stated_after = _gm_stated_update("021")
    assert stated_before == "null" and "ignoreJSONDecodeErr=true" in _gm_txt("021")
    b, a = rows_images(_gm("021"), T11, update=True)
    with pytest.raises(JsonDecodeError):
        json_to_text(b[2])
    assert json.loads(json_to_text(a[2])) == json.loads(stated_after)
    assert json_to_text(a[2]) == '{"a": 1234}'


def test_gomysql_083_partial_update_with_no_diffs() -> None:
    img = _gm("083")
    # value_options=1 (PARTIAL_JSON), partial bitmap 0x07, null bitmap, then the columns
    assert img[0] == 1 and img[1] == 0x07 and img[2] == 0
    p = 3 + 4 + 4  # two INT columns
    for _ in range(3):  # three JSON columns, each an empty diff vector
        n = struct.unpack_from("<I", img, p)[0]
        p += 4
        assert parse_json_diffs(img[p:p + n]) == []
        p += n
    assert apply_json_diffs('{"a": 1}', []) == '{"a": 1}'


# ---------------------------------------------------------------------------------------------
# DECIMAL: reuse go-mysql's NEWDECIMAL value vectors inside a JSON opaque value


def _decimal_vectors() -> list[dict[str, Any]]:
    out = []
    for line in (GOMYSQL / "value_vectors.jsonl").read_text().splitlines():
        d = json.loads(line)
        if d["type"] == "NEWDECIMAL":
            out.append(d)
    return out


DECIMALS = _decimal_vectors()


def _decimal_size(precision: int, scale: int) -> int:
    # my_decimal_get_binary_size(): 4 bytes per 9 digits, leftover digits in 0-4 bytes
    dig2bytes = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
    intg0, intg0x = divmod(precision - scale, 9)
    frac0, frac0x = divmod(scale, 9)
    return intg0 * 4 + dig2bytes[intg0x] + frac0 * 4 + dig2bytes[frac0x]


def test_decimal_vectors_present() -> None:
    assert len(DECIMALS) == 199


@pytest.mark.parametrize("vec", DECIMALS, ids=[f"{d['line']}:{d['expected']}" for d in DECIMALS])
def test_decimal_in_json(vec: dict[str, Any]) -> None:
    size = vec.get("expected_consumed_bytes") or _decimal_size(vec["precision"], vec["scale"])
    raw = bytes.fromhex(vec["hex"])[:size]
    payload = bytes([vec["precision"], vec["scale"]]) + raw
    doc = b"\x0f\xf6" + varlen(len(payload)) + payload
    assert json_to_text(doc) == vec["expected"]


# ---------------------------------------------------------------------------------------------
# hand-built documents: MySQL printing rules


def test_containers_small_and_large_formats() -> None:
    v = {"a": 1, "b": [1, "x", None, True, False], "c": None, "long key": {"n": -70000}, "u": U(70000)}
    expected = ('{"a": 1, "b": [1, "x", null, true, false], "c": null, "u": 70000, '
                '"long key": {"n": -70000}}')
    assert json_to_text(enc(v)) == expected
    assert json_to_text(enc(v, large=True)) == expected  # int32/uint32 inlined in large format


def test_integer_types() -> None:
    assert json_to_text(enc([-32768, 32767, U(65535), -(2**31), U(2**32 - 1), -(2**63), U(2**64 - 1)])) == (
        "[-32768, 32767, 65535, -2147483648, 4294967295, -9223372036854775808, 18446744073709551615]")


@pytest.mark.parametrize(("value", "text"), [
    # my_gcvt(d, MY_GCVT_ARG_DOUBLE, 34): shortest round-trip digits; 'f' format for
    # 1e-15 <= |x| < 1e15 (and 17-digit values below 1e16), 'e' format otherwise without '+'
    # or zero padding; MySQL 8 appends ".0" when there is neither '.' nor 'e'.
    (1.0, "1.0"),
    (100.0, "100.0"),
    (0.1, "0.1"),
    (0.5, "0.5"),
    (-2.5, "-2.5"),
    (3.14159, "3.14159"),
    (-0.0, "-0.0"),
    (0.0, "0.0"),
    (1e20, "1e20"),
    (1e15, "1e15"),
    (1e16, "1e16"),
    (123456789012345.0, "123456789012345.0"),
    (1234567890123456.7, "1234567890123456.8"),
    (12345678901234567890.0, "1.2345678901234567e19"),
    (2.5e-5, "0.000025"),
    (-1.5e-7, "-0.00000015"),
    (1e-15, "0.000000000000001"),
    (1e-16, "1e-16"),
    (1.5e300, "1.5e300"),
    (-1.2345e-100, "-1.2345e-100"),
    (5e-324, "5e-324"),
    (1.7976931348623157e308, "1.7976931348623157e308"),
])
def test_double_text(value: float, text: str) -> None:
    assert json_to_text(enc(value)) == text
    assert json_to_text(enc([value])) == f"[{text}]"


def test_string_escaping() -> None:
    s = 'q"b\\s/\b\f\n\r\t\x00\x01\x1f\x7f é 中 😀'
    assert json_to_text(enc(s)) == '"q\\"b\\\\s/\\b\\f\\n\\r\\t\\u0000\\u0001\\u001f\x7f é 中 😀"'
    assert json_to_text(enc({s: s})) == "{" + ref_quote(s) + ": " + ref_quote(s) + "}"


def test_long_string_multi_byte_length() -> None:
    s = "x" * 20000
    assert json_to_text(enc(s)) == f'"{s}"'
    assert json_to_text(enc({"k": s}, large=True)) == f'{{"k": "{s}"}}'


def test_temporal_opaque_values() -> None:
    dt = packed_datetime(2015, 1, 15, 23, 24, 25, 123456)
    assert json_to_text(enc(Opaque(12, dt))) == '"2015-01-15 23:24:25.123456"'
    assert json_to_text(enc(Opaque(7, dt))) == '"2015-01-15 23:24:25.123456"'  # TIMESTAMP
    assert json_to_text(enc(Opaque(10, packed_datetime(1999, 12, 31, 0, 0, 0, 0)))) == '"1999-12-31"'
    assert json_to_text(enc(Opaque(11, packed_time(True, 838, 59, 59, 0)))) == '"-838:59:59.000000"'
    assert json_to_text(enc(Opaque(11, packed_time(False, 0, 0, 1, 5)))) == '"00:00:01.000005"'
    assert json_to_text(enc([Opaque(10, packed_datetime(2000, 2, 29, 0, 0, 0, 0))])) == '["2000-02-29"]'


def test_other_opaque_values() -> None:
    blob = bytes(range(100))
    b64 = base64.b64encode(blob).decode()
    # base64_encode() puts a newline every 76 characters; double_quote() escapes it
    assert json_to_text(enc(Opaque(252, blob))) == f'"base64:type252:{b64[:76]}\\n{b64[76:]}"'
    assert json_to_text(enc(Opaque(15, b""))) == '"base64:type15:"'
    assert json_to_text(enc(Opaque(16, b"\x01"))) == '"base64:type16:AQ=="'
    # VAR_STRING opaque values print as plain strings
    assert json_to_text(enc(Opaque(253, b'a"b'))) == '"a\\"b"'


def test_nesting_depth_limit() -> None:
    v: Any = 1
    for _ in range(100):
        v = [v]
    assert json_to_text(enc(v)) == "[" * 100 + "1" + "]" * 100
    with pytest.raises(JsonDecodeError, match="deeper"):
        json_to_text(enc([v]))


def test_aliased_offsets_do_not_explode() -> None:
    # Every level has two entries pointing at the same child: 2**60 values if followed blindly.
    inner = struct.pack("<HH", 0, 4)
    for _ in range(60):
        inner = struct.pack("<HH", 2, 10 + len(inner)) + b"\x02\x0a\x00\x02\x0a\x00" + inner
    with pytest.raises(JsonDecodeError, match="overlap"):
        json_to_text(b"\x02" + inner)


@pytest.mark.parametrize("data", [
    b"\x04\x03",                        # unknown literal
    b"\x0d\x00",                        # unknown type
    b"\x05\x01",                        # truncated int16
    b"\x0b" + b"\0" * 7,                # truncated double
    b"\x0c\x05abc",                     # string past the end
    b"\x0c\xff\xff\xff\xff\xff\x01",    # varint longer than 5 bytes
    b"\x0c\xff\xff\xff\xff\x7f",        # varint above 32 bits
    b"\x0c\x02\xff\xfe",                # invalid UTF-8
    b"\x00\x01",                        # truncated header
    b"\x00\x01\x00\x0c\x00",            # entries do not fit
    b"\x00\x01\x00\x0c\x00\x0b\x00\x05\x00\x05\x02\x00a",  # key past the end
    b"\x02\x01\x00\x08\x00\x0c\x40\x00",  # value offset past the end
    b"\x02\x01\x00\x08\x00\x0c\x02\x00",  # value offset inside the header
    b"\x0f\xf6\x03\x0a\x00\x80",        # DECIMAL(10,0) with a 1-byte body
    b"\x0f\xf6\x06\x0a\x00\x80\x00\x00\x00",  # DECIMAL(10,0) needs 5 bytes, has 4
    b"\x0f\xf6\x07\x01\x00\xff\xff\xff\xff\xff",  # DECIMAL(1,0) with too many digits
    b"\x0f\x0c\x04\x00\x00\x00\x00",    # DATETIME with 4 bytes
    b"\x0f",                            # opaque without its type
])
def test_malformed_raise(data: bytes) -> None:
    with pytest.raises(JsonDecodeError):
        json_to_text(data)


def test_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown literal"):
        json_to_text(b"\x04\x09")


# ---------------------------------------------------------------------------------------------
# property tests

@settings(max_examples=300, deadline=None)
@given(json_values, st.booleans())
def test_roundtrip_exact_text(v: Any, large: bool) -> None:
    assert json_to_text(enc(v, large)) == ref_text(v)


@settings(max_examples=300, deadline=None)
@given(json_values_with_doubles, st.booleans())
def test_roundtrip_values(v: Any, large: bool) -> None:
    text = json_to_text(enc(v, large))
    assert json.loads(text) == v


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_double_roundtrip(d: float) -> None:
    text = json_to_text(enc(d))
    assert float(text) == d and ("." in text or "e" in text) and "+" not in text
    assert len(text) <= 34


@settings(max_examples=1500, deadline=None)
@given(st.binary(max_size=64))
def test_fuzz_random_bytes(data: bytes) -> None:
    only_json_errors(json_to_text, data)


@settings(max_examples=1500, deadline=None)
@given(st.integers(0, 16), st.binary(max_size=64))
def test_fuzz_random_typed(t: int, data: bytes) -> None:
    only_json_errors(json_to_text, bytes([t]) + data)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values_with_doubles, st.booleans(), st.data())
def test_fuzz_mutated_documents(v: Any, large: bool, data: st.DataObject) -> None:
    doc = bytearray(enc(v, large))
    for _ in range(data.draw(st.integers(1, 4))):
        if not doc:
            break
        kind = data.draw(st.integers(0, 2))
        i = data.draw(st.integers(0, len(doc) - 1))
        if kind == 0:
            doc[i] = data.draw(st.integers(0, 255))
        elif kind == 1:
            doc[i] ^= 1 << data.draw(st.integers(0, 7))
        elif len(doc) > 1:
            del doc[i:]
    only_json_errors(json_to_text, bytes(doc))
