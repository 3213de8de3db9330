"""A test-only encoder of MySQL binary JSON (json_binary.h layout), a reference printer of MySQL's JSON text,
and hypothesis strategies of JSON values: what the jsonb.py and jsondiff.py tests build their inputs and
expected texts from, independently of the decoder under test."""

from __future__ import annotations

import struct
from typing import Any

from hypothesis import strategies as st

from canal_core.binlog.jsonb import JsonDecodeError


class U:
    """An unsigned integer (MySQL keeps signedness in the type: uint16/uint32/uint64)."""

    def __init__(self, v: int) -> None:
        self.v = v


class Opaque:
    def __init__(self, field_type: int, data: bytes) -> None:
        self.field_type = field_type
        self.data = data


def varlen(n: int) -> bytes:
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
        return 0x0C, varlen(len(b)) + b
    if isinstance(v, Opaque):
        return 0x0F, bytes([v.field_type]) + varlen(len(v.data)) + v.data
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


json_keys = st.text(st.characters(exclude_categories=("Cs",)), max_size=8)
json_leaves = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
         | st.text(st.characters(exclude_categories=("Cs",)), max_size=20))
json_values = st.recursive(json_leaves, lambda c: st.lists(c, max_size=5) | st.dictionaries(json_keys, c, max_size=5),
                             max_leaves=30)
json_values_with_doubles = st.recursive(json_leaves | st.floats(allow_nan=False, allow_infinity=False),
                         lambda c: st.lists(c, max_size=5) | st.dictionaries(json_keys, c, max_size=5),
                         max_leaves=30)


def only_json_errors(fn: Any, data: bytes) -> None:
    try:
        fn(data)
    except JsonDecodeError:
        pass


def packed_datetime(y: int, mo: int, d: int, h: int, mi: int, s: int, us: int) -> bytes:
    ymd = ((y * 13 + mo) << 5) | d
    hms = (h << 12) | (mi << 6) | s
    return struct.pack("<q", (((ymd << 17) | hms) << 24) + us)


def packed_time(neg: bool, h: int, mi: int, s: int, us: int) -> bytes:
    v = ((((h << 12) | (mi << 6) | s)) << 24) + us
    return struct.pack("<q", -v if neg else v)
