"""MySQL binary JSON decoding and PARTIAL_UPDATE_ROWS JSON diffs (canal_core.binlog.jsonb).

Expected values come from the fixture vectors (what the originating projects assert) or, for the
hand-built documents, from MySQL's documented printing rules (Json_wrapper::to_string,
double_quote, my_gcvt, base64_encode, apply_json_diffs).
"""

from __future__ import annotations

import base64
import copy
import json
import re
import struct
from typing import Any

import pytest
from fixture_support import fixtures_root
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from canal_core.binlog.jsonb import JsonDecodeError, json_to_text
from canal_core.binlog.jsondiff import JsonDiff, JsonDiffOperation, apply_json_diffs, parse_json_diffs

FIXTURES = fixtures_root()  # $CANAL_FIXTURES, else ../shared/fixtures beside the repository
VITESS = FIXTURES / "vitess/vectors/jsonb_value_vectors.jsonl"
GOMYSQL = FIXTURES / "go-mysql/vectors"
CANAL_5127 = FIXTURES / "canal/vectors/jsonb_special_char_key_issue5127"


# ---------------------------------------------------------------------------------------------
# a tiny test-only encoder of MySQL binary JSON (json_binary.h layout)


class U:
    """An unsigned integer (MySQL keeps signedness in the type: uint16/uint32/uint64)."""

    def __init__(self, v: int) -> None:
        self.v = v


class Opaque:
    def __init__(self, field_type: int, data: bytes) -> None:
        self.field_type = field_type
        self.data = data


def _varlen(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key_order(k: str) -> tuple[int, bytes]:
    b = k.encode()
    return len(b), b


def _scalar(v: Any) -> tuple[int, bytes]:
    if v is None:
        return 0x04, b"\x00"
    if v is True:
        return 0x04, b"\x01"
    if v is False:
        return 0x04, b"\x02"
    if isinstance(v, U):
        if v.v <= 0xFFFF:
            return 0x06, struct.pack("<H", v.v)
        if v.v <= 0xFFFFFFFF:
            return 0x08, struct.pack("<I", v.v)
        return 0x0A, struct.pack("<Q", v.v)
    if isinstance(v, int):
        if -(1 << 15) <= v < (1 << 15):
            return 0x05, struct.pack("<h", v)
        if -(1 << 31) <= v < (1 << 31):
            return 0x07, struct.pack("<i", v)
        if -(1 << 63) <= v < (1 << 63):
            return 0x09, struct.pack("<q", v)
        return 0x0A, struct.pack("<Q", v)
    if isinstance(v, float):
        return 0x0B, struct.pack("<d", v)
    if isinstance(v, str):
        b = v.encode()
        return 0x0C, _varlen(len(b)) + b
    if isinstance(v, Opaque):
        return 0x0F, bytes([v.field_type]) + _varlen(len(v.data)) + v.data
    raise TypeError(type(v))


def _enc_inner(v: Any, large: bool) -> tuple[int, bytes]:
    if isinstance(v, dict):
        return (0x01 if large else 0x00), _container(sorted(v.items(), key=lambda kv: _key_order(kv[0])),
                                                     True, large)
    if isinstance(v, list):
        return (0x03 if large else 0x02), _container([(None, x) for x in v], False, large)
    return _scalar(v)


def _container(items: list[tuple[str | None, Any]], is_object: bool, large: bool) -> bytes:
    osz = 4 if large else 2
    fmt = "<I" if large else "<H"
    n = len(items)
    hsize = 2 * osz + n * ((osz + 2) if is_object else 0) + n * (1 + osz)
    key_entries = bytearray()
    value_entries = bytearray()
    body = bytearray()
    offset = hsize
    if is_object:
        for k, _ in items:
            kb = k.encode()  # type: ignore[union-attr]
            key_entries += struct.pack(fmt, offset) + struct.pack("<H", len(kb))
            body += kb
            offset += len(kb)
    for _, v in items:
        t, payload = _enc_inner(v, large)
        if t in (0x04, 0x05, 0x06) or (large and t in (0x07, 0x08)):
            value_entries += bytes([t]) + payload.ljust(osz, b"\0")
        else:
            value_entries += bytes([t]) + struct.pack(fmt, offset)
            body += payload
            offset += len(payload)
    header = struct.pack("<" + fmt[1] * 2, n, hsize + len(body))
    return header + bytes(key_entries) + bytes(value_entries) + bytes(body)


def enc(v: Any, large: bool = False) -> bytes:
    t, payload = _enc_inner(v, large)
    return bytes([t]) + payload


def _packed(n: int) -> bytes:
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + struct.pack("<H", n)
    if n < 1 << 24:
        return b"\xfd" + struct.pack("<I", n)[:3]
    return b"\xfe" + struct.pack("<Q", n)


def diff_bytes(op: int, path: str, value: Any = None, raw: bytes | None = None) -> bytes:
    pb = path.encode()
    out = bytes([op]) + _packed(len(pb)) + pb
    if op != 2:
        vb = raw if raw is not None else enc(value)
        out += _packed(len(vb)) + vb
    return out


# A reference printer for non-float values, written from MySQL's rules: ", " and ": "
# separators, double_quote() escaping (<= 0x1f, '"', '\\'), keys in stored (sorted) order.
_REF_ESC = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r", 0x22: '\\"', 0x5C: "\\\\"}


def ref_quote(s: str) -> str:
    out = []
    for ch in s:
        o = ord(ch)
        if o in _REF_ESC:
            out.append(_REF_ESC[o])
        elif o <= 0x1F:
            out.append(f"\\u{o:04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def ref_text(v: Any) -> str:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return ref_quote(v)
    if isinstance(v, list):
        return "[" + ", ".join(ref_text(x) for x in v) + "]"
    if isinstance(v, dict):
        items = sorted(v.items(), key=lambda kv: _key_order(kv[0]))
        return "{" + ", ".join(f"{ref_quote(k)}: {ref_text(x)}" for k, x in items) + "}"
    raise TypeError(type(v))


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
    doc = b"\x0f\xf6" + _varlen(len(payload)) + payload
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


def _packed_datetime(y: int, mo: int, d: int, h: int, mi: int, s: int, us: int) -> bytes:
    ymd = ((y * 13 + mo) << 5) | d
    hms = (h << 12) | (mi << 6) | s
    return struct.pack("<q", (((ymd << 17) | hms) << 24) + us)


def _packed_time(neg: bool, h: int, mi: int, s: int, us: int) -> bytes:
    v = ((((h << 12) | (mi << 6) | s)) << 24) + us
    return struct.pack("<q", -v if neg else v)


def test_temporal_opaque_values() -> None:
    dt = _packed_datetime(2015, 1, 15, 23, 24, 25, 123456)
    assert json_to_text(enc(Opaque(12, dt))) == '"2015-01-15 23:24:25.123456"'
    assert json_to_text(enc(Opaque(7, dt))) == '"2015-01-15 23:24:25.123456"'  # TIMESTAMP
    assert json_to_text(enc(Opaque(10, _packed_datetime(1999, 12, 31, 0, 0, 0, 0)))) == '"1999-12-31"'
    assert json_to_text(enc(Opaque(11, _packed_time(True, 838, 59, 59, 0)))) == '"-838:59:59.000000"'
    assert json_to_text(enc(Opaque(11, _packed_time(False, 0, 0, 1, 5)))) == '"00:00:01.000005"'
    assert json_to_text(enc([Opaque(10, _packed_datetime(2000, 2, 29, 0, 0, 0, 0))])) == '["2000-02-29"]'


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

_keys = st.text(st.characters(exclude_categories=("Cs",)), max_size=8)
_leaf = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
         | st.text(st.characters(exclude_categories=("Cs",)), max_size=20))
_json_nofloat = st.recursive(_leaf, lambda c: st.lists(c, max_size=5) | st.dictionaries(_keys, c, max_size=5),
                             max_leaves=30)
_json_any = st.recursive(_leaf | st.floats(allow_nan=False, allow_infinity=False),
                         lambda c: st.lists(c, max_size=5) | st.dictionaries(_keys, c, max_size=5),
                         max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(_json_nofloat, st.booleans())
def test_roundtrip_exact_text(v: Any, large: bool) -> None:
    assert json_to_text(enc(v, large)) == ref_text(v)


@settings(max_examples=300, deadline=None)
@given(_json_any, st.booleans())
def test_roundtrip_values(v: Any, large: bool) -> None:
    text = json_to_text(enc(v, large))
    assert json.loads(text) == v


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_double_roundtrip(d: float) -> None:
    text = json_to_text(enc(d))
    assert float(text) == d and ("." in text or "e" in text) and "+" not in text
    assert len(text) <= 34


def _only_json_errors(fn: Any, data: bytes) -> None:
    try:
        fn(data)
    except JsonDecodeError:
        pass


@settings(max_examples=1500, deadline=None)
@given(st.binary(max_size=64))
def test_fuzz_random_bytes(data: bytes) -> None:
    _only_json_errors(json_to_text, data)


@settings(max_examples=1500, deadline=None)
@given(st.integers(0, 16), st.binary(max_size=64))
def test_fuzz_random_typed(t: int, data: bytes) -> None:
    _only_json_errors(json_to_text, bytes([t]) + data)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_json_any, st.booleans(), st.data())
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
    _only_json_errors(json_to_text, bytes(doc))


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=64))
def test_fuzz_diffs(data: bytes) -> None:
    _only_json_errors(parse_json_diffs, data)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["$.a", "$[0]", '$."x y"', "$.a[1].b"]),
                          _json_nofloat), max_size=4), st.data())
def test_fuzz_mutated_diffs(ops: list[tuple[int, str, Any]], data: st.DataObject) -> None:
    raw = bytearray(b"".join(diff_bytes(op, path, value) for op, path, value in ops))
    assume(raw)
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] = data.draw(st.integers(0, 255))
    try:
        diffs = parse_json_diffs(bytes(raw))
    except JsonDecodeError:
        return
    _only_json_errors(lambda _: apply_json_diffs('{"a": [1, {"b": 2}], "x y": 3}', diffs), b"")


# ---------------------------------------------------------------------------------------------
# JSON diffs


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
    v = {"t": Opaque(12, _packed_datetime(2020, 1, 2, 3, 4, 5, 0)), "q": 'x"\t'}
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
@given(_json_nofloat, _json_nofloat, st.data())
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
