"""Formats no fixture file and no local server produce (MySQL 8.4 GTID_TAGGED, PARTIAL_UPDATE_ROWS with
JSON diffs, HEARTBEAT_V2, MINIMAL row images), built byte by byte from the documented layouts:
- GTID_TAGGED: MySQL serialization library v2 (version byte, self-inclusive size, last non-ignorable
  field id, field ids 0..11; uuid as 16 varlen bytes; gno/last_committed/sequence_number zig-zag)
- PARTIAL_UPDATE_ROWS: after image = value_options (packed int), partial bits (one per JSON column
  of the table), null bits, values; a partial JSON value is a list of diffs
  (operation byte, packed path length, path, packed value length, binary JSON value)
"""

from __future__ import annotations

import struct
import zlib

import pytest

from canal_core.binlog import ABSENT, BinlogDecoder, MalformedEventError
from canal_core.binlog import events as E
from canal_core.binlog.constants import ColumnType, EventType
from canal_core.binlog.rows import PartialJson


def _event(type_code: int, body: bytes, log_pos: int = 0, server_id: int = 1) -> bytes:
    length = 19 + len(body) + 4
    head = struct.pack("<IBIIIH", 1700000000, type_code, server_id, length, log_pos, 0)
    data = head + body
    return data + struct.pack("<I", zlib.crc32(data))


def _fde(version: str = "8.4.0") -> bytes:
    post = bytearray(42)
    post[EventType.QUERY - 1] = 13
    post[EventType.ROTATE - 1] = 8
    post[EventType.TABLE_MAP - 1] = 8
    for t in (EventType.WRITE_ROWS_V2, EventType.UPDATE_ROWS_V2, EventType.DELETE_ROWS_V2,
              EventType.PARTIAL_UPDATE_ROWS):
        post[t - 1] = 10
    body = struct.pack("<H", 4) + version.encode().ljust(50, b"\0") + struct.pack("<I", 0) + b"\x13" \
        + bytes(post) + b"\x01"
    return _event(EventType.FORMAT_DESCRIPTION, body, log_pos=4 + 19 + len(body) + 4)


def _packed(n: int) -> bytes:
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little")
    return b"\xfd" + n.to_bytes(3, "little")


def _varlen(v: int) -> bytes:
    """Serialization-library varlen: n extra bytes are signalled by n trailing one bits."""
    for extra in range(8):
        if v < 1 << (7 * (extra + 1)):
            return ((v << (extra + 1)) | ((1 << extra) - 1)).to_bytes(extra + 1, "little")
    return b"\xff" + v.to_bytes(8, "little")


def _zz(v: int) -> int:
    return v << 1 if v >= 0 else ((-v - 1) << 1) | 1


def _decoder() -> BinlogDecoder:
    dec = BinlogDecoder()
    dec.decode(_fde(), 4)
    return dec


def test_varlen_encoding_matches_documented_byte_counts() -> None:
    from canal_core.binlog.decoder import _varlen as read

    for v, size in [(0, 1), (127, 1), (128, 2), (16383, 2), (16384, 3), (2**56 - 1, 8), (2**64 - 1, 9)]:
        enc = _varlen(v)
        assert len(enc) == size
        assert read(enc, 0, len(enc)) == (v, size)


def test_gtid_tagged_event() -> None:
    uuid = bytes.fromhex("3e11fa4771ca11e19e33c80aa9429562")
    fields = b"".join([
        _varlen(0) + _varlen(1),
        _varlen(1) + b"".join(_varlen(b) for b in uuid),
        _varlen(2) + _varlen(_zz(42)),
        _varlen(3) + _varlen(8) + b"domain_1",
        _varlen(4) + _varlen(_zz(10)),
        _varlen(5) + _varlen(_zz(11)),
        _varlen(6) + _varlen(1700000000123456),
        _varlen(8) + _varlen(512),
        _varlen(9) + _varlen(80400),
    ])
    lnif = _varlen(9)
    size = 1 + 1 + len(lnif) + len(fields)  # version byte, size (one byte here), lnif, fields
    body = b"\x02" + _varlen(size) + lnif + fields
    ev = _decoder().decode(_event(EventType.GTID_TAGGED, body, log_pos=1000), None)
    assert isinstance(ev, E.GtidEvent)
    assert ev.gtid == "3e11fa47-71ca-11e1-9e33-c80aa9429562:domain_1:42"
    assert (ev.last_committed, ev.sequence_number, ev.transaction_length) == (10, 11, 512)
    assert ev.immediate_commit_timestamp == ev.original_commit_timestamp == 1700000000123456
    assert ev.immediate_server_version == ev.original_server_version == 80400
    assert ev.commit_flag


def test_gtid_tagged_unknown_required_field_is_an_error() -> None:
    fields = _varlen(0) + _varlen(0) + _varlen(99) + _varlen(0)
    lnif = _varlen(100)
    body = b"\x02" + _varlen(2 + len(lnif) + len(fields)) + lnif + fields
    with pytest.raises(MalformedEventError, match="unknown required field 99"):
        _decoder().decode(_event(EventType.GTID_TAGGED, body, log_pos=500), None)


def _json_obj_a(v: int) -> bytes:
    # small object {"a": v}: count, size, key entry (offset, length), value entry (int16 inline), key
    return b"\x00" + struct.pack("<HH", 1, 12) + struct.pack("<HH", 11, 1) + b"\x05" + struct.pack("<h", v) + b"a"


def _table_map(table_id: int) -> bytes:
    cols = bytes([ColumnType.LONG, ColumnType.JSON])
    meta = b"\x04"  # JSON: 4 length bytes
    body = table_id.to_bytes(6, "little") + b"\x01\x00" + b"\x04test\x00" + b"\x01t\x00" + _packed(2) + cols \
        + _packed(len(meta)) + meta + b"\x02"
    return _event(EventType.TABLE_MAP, body, log_pos=600)


def test_partial_update_rows_applies_json_diffs() -> None:
    dec = _decoder()
    dec.decode(_table_map(77))
    before = b"\x00" + struct.pack("<i", 1) + struct.pack("<I", len(_json_obj_a(1))) + _json_obj_a(1)
    # diff: REPLACE $.a with 2 (binary JSON int16 scalar)
    value = b"\x05" + struct.pack("<h", 2)
    diff = b"\x00" + _packed(3) + b"$.a" + _packed(len(value)) + value
    after_partial = _packed(1) + b"\x01" + b"\x00" + struct.pack("<i", 1) + struct.pack("<I", len(diff)) + diff
    # second row: value_options 0, the full JSON value
    before2 = b"\x00" + struct.pack("<i", 2) + struct.pack("<I", len(_json_obj_a(5))) + _json_obj_a(5)
    after_full = _packed(0) + b"\x00" + struct.pack("<i", 2) + struct.pack("<I", len(_json_obj_a(6))) \
        + _json_obj_a(6)
    body = (77).to_bytes(6, "little") + b"\x01\x00" + b"\x02\x00" + _packed(2) + b"\x03" + b"\x03" \
        + before + after_partial + before2 + after_full
    ev = dec.decode(_event(EventType.PARTIAL_UPDATE_ROWS, body, log_pos=900))
    assert isinstance(ev, E.RowsEvent) and ev.partial and ev.kind == "update"
    assert ev.rows == [((1, '{"a": 1}'), (1, '{"a": 2}')), ((2, '{"a": 5}'), (2, '{"a": 6}'))]


def test_partial_update_without_before_value_keeps_the_diffs() -> None:
    dec = _decoder()
    dec.decode(_table_map(78))
    value = b"\x05" + struct.pack("<h", 9)
    diff = b"\x00" + _packed(3) + b"$.a" + _packed(len(value)) + value
    before = b"\x00" + struct.pack("<i", 1)  # MINIMAL before image: the key only
    after = _packed(1) + b"\x01" + b"\x00" + struct.pack("<i", 1) + struct.pack("<I", len(diff)) + diff
    body = (78).to_bytes(6, "little") + b"\x01\x00" + b"\x02\x00" + _packed(2) + b"\x01" + b"\x03" + before + after
    ev = dec.decode(_event(EventType.PARTIAL_UPDATE_ROWS, body, log_pos=900))
    (b, a), = ev.rows
    assert b == (1, ABSENT)
    assert a[0] == 1 and isinstance(a[1], PartialJson) and a[1][0].path == "$.a"


def test_minimal_image_marks_absent_columns() -> None:
    dec = _decoder()
    dec.decode(_table_map(79))
    before = b"\x00" + struct.pack("<i", 7)
    after = b"\x00" + struct.pack("<I", len(_json_obj_a(3))) + _json_obj_a(3)
    body = (79).to_bytes(6, "little") + b"\x01\x00" + b"\x02\x00" + _packed(2) + b"\x01" + b"\x02" + before + after
    ev = dec.decode(_event(EventType.UPDATE_ROWS_V2, body, log_pos=900))
    assert ev.rows == [((7, ABSENT), (ABSENT, '{"a": 3}'))]


def test_heartbeat_v2() -> None:
    # position field: a packed integer 0x002710 = 10000, itself length-prefixed
    body = _packed(1) + _packed(13) + b"binlog.000042" + _packed(2) + _packed(4) + b"\xfd\x10\x27\x00" + _packed(0)
    ev = _decoder().decode(_event(EventType.HEARTBEAT_V2, body, log_pos=0))
    assert isinstance(ev, E.HeartbeatEvent)
    assert (ev.log_file, ev.log_position) == ("binlog.000042", 10000)
    assert ev.position is None
