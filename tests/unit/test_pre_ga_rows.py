"""MySQL 5.1's pre-GA rows events (types 20-22: PRE_GA_WRITE/UPDATE/DELETE_ROWS_EVENT), from bytes built by
the layout MySQL's own reader of them uses (Old_rows_log_event in sql/log_event_old.cc):
- post-header: table id (6 bytes, or 4 when the FORMAT_DESCRIPTION_EVENT gives these events a 6-byte
  post-header), 2 flag bytes; the body starts at the post-header length the FORMAT_DESCRIPTION_EVENT gives;
- body: packed column count, ONE column bitmap (an update has no second one: both images use it), rows;
- no extra-data block (that is rows v2) and, before MySQL 5.6.1, no CRC32 trailer."""

from __future__ import annotations

import struct

import pytest

from canal_core.binlog import BinlogDecoder
from canal_core.binlog import events as E
from canal_core.binlog.constants import ColumnType, EventType


def _event(type_code: int, body: bytes, log_pos: int) -> bytes:
    return struct.pack("<IBIIIH", 1170000000, type_code, 1, 19 + len(body), log_pos, 0) + body


def _decoder(rows_post_header: int) -> BinlogDecoder:
    post = bytearray(22)  # a pre-GA 5.1 server knows event types 1..22
    post[EventType.QUERY - 1] = 13
    post[EventType.ROTATE - 1] = 8
    post[EventType.TABLE_MAP - 1] = 8
    for t in (EventType.PRE_GA_WRITE_ROWS, EventType.PRE_GA_UPDATE_ROWS, EventType.PRE_GA_DELETE_ROWS):
        post[t - 1] = rows_post_header
    body = struct.pack("<H", 4) + b"5.1.15-beta-log".ljust(50, b"\0") + struct.pack("<I", 0) + b"\x13" + bytes(post)
    dec = BinlogDecoder()
    fde = dec.decode(_event(EventType.FORMAT_DESCRIPTION, body, 4 + 19 + len(body)), 4)
    assert isinstance(fde, E.FormatDescriptionEvent) and not dec.checksum
    # t(id INT NOT NULL, name VARCHAR(20) NULL): metadata is VARCHAR's 2-byte max length, null bits 0b10
    tmap = (33).to_bytes(6, "little") + b"\x00\x00" + b"\x02db\x00" + b"\x01t\x00" + b"\x02" \
        + bytes([ColumnType.LONG, ColumnType.VARCHAR]) + b"\x02" + struct.pack("<H", 20) + b"\x02"
    dec.decode(_event(EventType.TABLE_MAP, tmap, 400))
    return dec


def _table_id(post_header: int) -> bytes:
    return (33).to_bytes(4 if post_header == 6 else 6, "little")


def _image(key: int, name: bytes | None) -> bytes:
    if name is None:
        return b"\x02" + struct.pack("<i", key)
    return b"\x00" + struct.pack("<i", key) + bytes([len(name)]) + name


@pytest.mark.parametrize("post_header", [8, 6])
def test_pre_ga_write_and_delete_rows(post_header: int) -> None:
    dec = _decoder(post_header)
    head = _table_id(post_header) + b"\x01\x00" + b"\x02" + b"\x03"
    ev = dec.decode(_event(EventType.PRE_GA_WRITE_ROWS, head + _image(1, b"ann") + _image(2, None), 500))
    assert isinstance(ev, E.RowsEvent)
    assert (ev.kind, ev.version, ev.table_id, ev.rows_flags) == ("write", 0, 33, 1)
    assert ev.rows == [(1, b"ann"), (2, None)]
    ev = dec.decode(_event(EventType.PRE_GA_DELETE_ROWS, head + _image(2, None), 600))
    assert (ev.kind, ev.rows) == ("delete", [(2, None)])


@pytest.mark.parametrize("post_header", [8, 6])
def test_pre_ga_update_rows_use_one_column_bitmap_for_both_images(post_header: int) -> None:
    dec = _decoder(post_header)
    head = _table_id(post_header) + b"\x01\x00" + b"\x02" + b"\x03"  # one bitmap, no after-image bitmap
    body = head + _image(1, b"ann") + _image(1, b"bob") + _image(2, None) + _image(2, b"cy")
    ev = dec.decode(_event(EventType.PRE_GA_UPDATE_ROWS, body, 700))
    assert isinstance(ev, E.RowsEvent)
    assert (ev.kind, ev.version) == ("update", 0)
    assert ev.columns_present == ev.columns_present_after == b"\x03"
    assert ev.rows == [((1, b"ann"), (1, b"bob")), ((2, None), (2, b"cy"))]
