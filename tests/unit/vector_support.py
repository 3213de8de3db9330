"""Shared by the byte-vector tests (test_vectors.py, test_vectors_events.py): where the vectors are, and a
decoder primed with a real FORMAT_DESCRIPTION_EVENT of the vector's server family that synthetic events
(fixture_support.make_event) are fed to."""

from __future__ import annotations

import json
import struct
from typing import Any

from fixture_support import make_event, require_fixtures, walk_headers

from canal_core.binlog import BinlogDecoder
from canal_core.binlog import events as E
from canal_core.binlog.constants import ColumnType as CT
from canal_core.binlog.tablemap import TableDef, parse_table_map_body

GO = "go-mysql/vectors"
OSH = "osheroff-mysql-binlog-connector-java/vectors"
VT = "vitess/vectors"


def vec(rel: str) -> bytes:
    return (require_fixtures() / rel).read_bytes()


def fde_from(rel: str) -> bytes:
    data = (require_fixtures() / rel).read_bytes()
    h = walk_headers(data)[0]
    assert h.type_code == 15
    return data[h.offset:h.offset + h.length]


FDE_57 = "mysql-cdc-rs/tests/events/5.7/02_query/log.bin"  # 5.7.30-log, CRC32
FDE_80 = "osheroff-mysql-binlog-connector-java/src/test/resources/mysql-bin.compressed"  # 8.0.28, CRC32
FDE_MARIA = "mariadb-poc/mariadb-binlog/binlogs/domain_id_0/mariadb-repl-bin.000001"  # 11.8.5, CRC32


def decoder_after(fde_rel: str) -> BinlogDecoder:
    dec = BinlogDecoder(file="vector")
    ev = dec.decode(fde_from(fde_rel), 4)
    assert isinstance(ev, E.FormatDescriptionEvent) and ev.checksum_alg == 1
    return dec


def feed(dec: BinlogDecoder, type_code: int, body: bytes, **kw: Any) -> E.Event:
    return dec.decode(make_event(type_code, body, checksum=True, **kw), 1000)


def flavor_of(name: str) -> str:
    return "mariadb" if "MariaDB" in name else "mysql"


def tablemap(rel: str) -> TableDef:
    # MariaDB's charset lists count GEOMETRY columns, MySQL's do not: the flavor comes from the FDE
    return parse_table_map_body(vec(rel), 8, flavor_of(rel))


def rows_of(tm_rel: str, rows_rel: str, type_code: int, fde: str = FDE_57) -> E.RowsEvent:
    dec = decoder_after(fde)
    tm = feed(dec, 19, vec(tm_rel))
    assert isinstance(tm, E.TableMapEvent)
    ev = feed(dec, type_code, vec(rows_rel))
    assert isinstance(ev, E.RowsEvent)
    assert ev.table_id == tm.table_id
    return ev


def flat(ev: E.RowsEvent) -> list[tuple]:
    """go-mysql's Rows layout: updates as before, after, before, after ..."""
    assert ev.rows is not None
    if ev.kind != "update":
        return list(ev.rows)
    return [img for pair in ev.rows for img in pair]


def jload(text: Any) -> Any:
    return json.loads(text)


def table_map_body(table_id: int, schema: str, table: str, types: list[int], metas: list[int],
                    nullable: list[bool]) -> bytes:
    """A TABLE_MAP body (6-byte table id) for a table the vector's test gives as a struct literal."""
    meta = b""
    for t, m in zip(types, metas, strict=True):
        if t in (CT.VARCHAR, CT.VAR_STRING, CT.BIT):
            meta += struct.pack("<H", m)
        elif t in (CT.NEWDECIMAL, CT.STRING, CT.ENUM, CT.SET):
            meta += bytes([m >> 8, m & 0xFF])
        elif t in (CT.BLOB, CT.JSON, CT.FLOAT, CT.DOUBLE, CT.GEOMETRY, CT.TIMESTAMP2, CT.DATETIME2, CT.TIME2):
            meta += bytes([m])
    nb = bytearray((len(types) + 7) // 8)
    for i, n in enumerate(nullable):
        if n:
            nb[i >> 3] |= 1 << (i & 7)
    assert len(types) < 251 and len(meta) < 251
    return (table_id.to_bytes(6, "little") + b"\x01\x00" + bytes([len(schema)]) + schema.encode() + b"\0"
            + bytes([len(table)]) + table.encode() + b"\0" + bytes([len(types)]) + bytes(types)
            + bytes([len(meta)]) + meta + bytes(nb))
