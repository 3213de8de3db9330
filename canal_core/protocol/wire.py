"""Hand-rolled protobuf encoding of Canal's Entry messages (EntryProtocol.proto).

Building upb message objects for every column of every row costs more than writing the bytes, so the
converter writes the wire format directly. The output is what protobuf's canonical serializer (Java's
as well as upb's) writes for the same message: fields in field-number order; proto3 scalars and
strings left out when they hold the zero value; fields inside a ``oneof xxx_present`` written
whenever they are set, zero or not; negative int32/int64 as 10-byte two's complement varints.
The unit tests check this against the generated code and against an independent wire reader.
"""

from __future__ import annotations

from collections.abc import Iterable

VARINT = 0
LEN = 2

_SMALL = [bytes([i]) for i in range(128)]
_LOW = [bytes([i | 0x80]) for i in range(128)]  # a first byte with the continuation bit


def varint(n: int) -> bytes:
    """Unsigned LEB128; negative numbers as 64-bit two's complement (protobuf int32/int64)."""
    if 0 <= n < 128:
        return _SMALL[n]
    if 0 < n < 16384:  # lengths of most rows and entries: two table lookups instead of the loop
        return _LOW[n & 0x7F] + _SMALL[n >> 7]
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def key(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


def field_int(field: int, n: int) -> bytes:
    """A proto3 int32/int64/bool/enum field: nothing when zero."""
    if not n:
        return b""
    return key(field, VARINT) + varint(int(n))


def field_oneof_int(field: int, n: int) -> bytes:
    """An int/bool/enum field inside a oneof: present even when zero."""
    return key(field, VARINT) + varint(int(n))


def field_bytes(field: int, data: bytes) -> bytes:
    """A proto3 bytes/string/message field: nothing when empty."""
    if not data:
        return b""
    return key(field, LEN) + varint(len(data)) + data


def field_message(field: int, data: bytes) -> bytes:
    """An embedded message field: present even when the message is empty."""
    return key(field, LEN) + varint(len(data)) + data


def encode_str(s: str) -> bytes:
    # Java's protobuf writes unpaired surrogates as '?', as String.getBytes(UTF_8) does
    return s.encode("utf-8", "replace")


def field_str(field: int, s: str | None) -> bytes:
    if not s:
        return b""
    return field_bytes(field, encode_str(s))


def pair(k: str, v: str) -> bytes:
    """A serialized Pair{key, value}."""
    return field_str(1, k) + field_str(2, v)


def pairs(field: int, items: Iterable[tuple[str, str]]) -> bytes:
    return b"".join(field_message(field, pair(k, v)) for k, v in items)
