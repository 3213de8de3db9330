"""MySQL 9 VECTOR columns (type 242), from bytes built by the documented layouts:
- TABLE_MAP: one metadata byte per VECTOR column, the number of length bytes (4, as for a LONGBLOB);
  optional metadata field 13 (VECTOR_DIMENSIONALITY) lists a packed dimension per VECTOR column
  (MySQL's rows_event.h, Optional_metadata_field_type);
- rows: a 4-byte little-endian length, then that many bytes of little-endian float32 values. The example
  bytes are the MySQL 9.0 manual's: STRING_TO_VECTOR("[1.05, -17.8, 32]") = 0x6666863F66668EC100000042.
Entries carry a VECTOR as Java type OTHER (1111) with each element in Java's Float.toString text."""

from __future__ import annotations

import struct
import zlib

import pytest

from canal_core.binlog import BinlogDecoder, MalformedEventError
from canal_core.binlog import events as E
from canal_core.binlog.constants import ColumnType, EventType
from canal_core.entry import EntryConverter
from canal_core.protocol.proto import EntryProtocol_pb2 as pb

MANUAL_BYTES = bytes.fromhex("6666863F66668EC100000042")


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _event(type_code: int, body: bytes, log_pos: int) -> bytes:
    head = struct.pack("<IBIIIH", 1700000000, type_code, 1, 19 + len(body) + 4, log_pos, 0)
    return head + body + struct.pack("<I", zlib.crc32(head + body))


def _decoder() -> BinlogDecoder:
    post = bytearray(42)
    post[EventType.TABLE_MAP - 1] = 8
    post[EventType.WRITE_ROWS_V2 - 1] = 10
    body = struct.pack("<H", 4) + b"9.0.1".ljust(50, b"\0") + struct.pack("<I", 0) + b"\x13" + bytes(post) + b"\x01"
    dec = BinlogDecoder()
    dec.decode(_event(EventType.FORMAT_DESCRIPTION, body, 4 + 19 + len(body) + 4), 4)
    return dec


def _table_map(*, dimensionality: bytes | None) -> bytes:
    cols = bytes([ColumnType.LONG, ColumnType.VECTOR])
    meta = b"\x04"  # VECTOR: 4 length bytes
    names = b"\x02id" + b"\x09embedding"
    optional = b"\x04" + bytes([len(names)]) + names
    if dimensionality is not None:
        optional += b"\x0d" + bytes([len(dimensionality)]) + dimensionality
    body = (90).to_bytes(6, "little") + b"\x01\x00" + b"\x04test\x00" + b"\x01v\x00" + b"\x02" + cols \
        + b"\x01" + meta + b"\x02" + optional
    return _event(EventType.TABLE_MAP, body, 700)


def _write_rows(*images: bytes) -> bytes:
    body = (90).to_bytes(6, "little") + b"\x01\x00" + b"\x02\x00" + b"\x02" + b"\x03" + b"".join(images)
    return _event(EventType.WRITE_ROWS_V2, body, 900)


def _row(key: int, vector: bytes | None) -> bytes:
    if vector is None:
        return b"\x02" + struct.pack("<i", key)
    return b"\x00" + struct.pack("<i", key) + struct.pack("<I", len(vector)) + vector


def test_table_map_carries_the_vector_column_and_its_dimension() -> None:
    dec = _decoder()
    ev = dec.decode(_table_map(dimensionality=b"\x03"))
    assert isinstance(ev, E.TableMapEvent)
    key, vec = ev.table.columns
    assert (vec.type, vec.name, vec.length, vec.nullable, vec.dimensions) == (ColumnType.VECTOR, "embedding", 4,
                                                                             True, 3)
    assert key.dimensions is None


def test_table_map_without_dimensionality_leaves_it_unknown() -> None:
    ev = _decoder().decode(_table_map(dimensionality=None))
    assert ev.table.columns[1].dimensions is None


def test_vector_values_decode_as_float32_lists() -> None:
    dec = _decoder()
    dec.decode(_table_map(dimensionality=b"\x03"))
    ev = dec.decode(_write_rows(_row(1, MANUAL_BYTES), _row(2, None), _row(3, b"")))
    assert isinstance(ev, E.RowsEvent)
    assert ev.rows == [(1, [_f32(1.05), _f32(-17.8), 32.0]), (2, None), (3, [])]


def test_a_vector_of_partial_floats_is_a_typed_error() -> None:
    dec = _decoder()
    dec.decode(_table_map(dimensionality=b"\x03"))
    with pytest.raises(MalformedEventError) as ei:
        dec.decode(_write_rows(_row(1, MANUAL_BYTES[:6])), 1234)
    assert ei.value.position == 1234
    assert "test.v" in str(ei.value) and "VECTOR" in str(ei.value)


def test_entry_carries_a_vector_as_other_with_java_float_text() -> None:
    dec = _decoder()
    dec.decode(_table_map(dimensionality=b"\x03"))
    ev = dec.decode(_write_rows(_row(1, MANUAL_BYTES), _row(2, None)))
    assert isinstance(ev, E.RowsEvent)
    ev.file = "binlog.000001"
    rc = pb.RowChange.FromString(EntryConverter(timezone="UTC").rows(ev, None).entry.storeValue)
    first, second = ([(c.sqlType, c.isNull, c.value) for c in rd.afterColumns][1] for rd in rc.rowDatas)
    # java.sql.Types.OTHER; Float.toString(1.05f) = "1.05", (-17.8f) = "-17.8", (32f) = "32.0"
    assert first == (1111, False, "[1.05,-17.8,32.0]")
    assert second[:2] == (1111, True)
