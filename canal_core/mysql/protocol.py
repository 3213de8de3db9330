"""Replication command payloads and small packet parsers (sans-IO).

Layouts follow the MySQL/MariaDB client/server protocol docs. Payloads here exclude the 4-byte packet
header and include the command byte.
"""

from __future__ import annotations

import struct

COM_BINLOG_DUMP = 0x12
COM_REGISTER_SLAVE = 0x15
COM_BINLOG_DUMP_GTID = 0x1E

# COM_BINLOG_DUMP flags
BINLOG_DUMP_NON_BLOCK = 0x01
BINLOG_SEND_ANNOTATE_ROWS_EVENT = 0x02  # MariaDB
# COM_BINLOG_DUMP_GTID flags
BINLOG_THROUGH_POSITION = 0x02
BINLOG_THROUGH_GTID = 0x04

MAX_PACKET_LEN = 0xFFFFFF
SEMI_SYNC_INDICATOR = 0xEF
SEMI_SYNC_ACK_REQ = 0x01

EVENT_HEADER_LEN = 19
ROTATE_EVENT = 4


def _lenbyte_str(value: bytes, what: str) -> bytes:
    if len(value) > 255:
        raise ValueError(f"{what} is {len(value)} bytes; COM_REGISTER_SLAVE allows at most 255")
    return bytes((len(value),)) + value


def register_slave(server_id: int, host: bytes = b"", user: bytes = b"", password: bytes = b"",
                   port: int = 0) -> bytes:
    """COM_REGISTER_SLAVE: server id, report host/user/password (1-byte lengths), port, rank, master id."""
    return (struct.pack("<BI", COM_REGISTER_SLAVE, server_id)
            + _lenbyte_str(host, "report host") + _lenbyte_str(user, "report user")
            + _lenbyte_str(password, "report password")
            + struct.pack("<HII", port & 0xFFFF, 0, 0))


def binlog_dump(file: str, position: int, flags: int, server_id: int) -> bytes:
    """COM_BINLOG_DUMP: u32 position, u16 flags, u32 server id, file name to the end of the packet."""
    if not 0 <= position <= 0xFFFFFFFF:
        raise ValueError(f"binlog position {position} does not fit COM_BINLOG_DUMP's 4 bytes")
    return struct.pack("<BIHI", COM_BINLOG_DUMP, position, flags, server_id) + file.encode()


def binlog_dump_gtid(file: str, position: int, flags: int, server_id: int, gtid_data: bytes) -> bytes:
    """COM_BINLOG_DUMP_GTID: u16 flags, u32 server id, u32 name length, name, u64 position,
    then (with BINLOG_THROUGH_GTID) u32 data length and the encoded GTID set."""
    name = file.encode()
    out = struct.pack("<BHII", COM_BINLOG_DUMP_GTID, flags, server_id, len(name)) + name
    out += struct.pack("<Q", position)
    if flags & BINLOG_THROUGH_GTID:
        out += struct.pack("<I", len(gtid_data)) + gtid_data
    return out


def semi_sync_ack(file: str, position: int) -> bytes:
    """Semi-sync ACK payload: 0xef, u64 position of the end of the acknowledged event, file name."""
    return struct.pack("<BQ", SEMI_SYNC_INDICATOR, position) + file.encode()


def with_header(payload: bytes, seq: int) -> bytes:
    """Frame a payload shorter than 16 MB as one packet."""
    return struct.pack("<I", len(payload) | (seq << 24)) + payload


def parse_err_payload(payload: bytes) -> tuple[int, str]:
    """(code, message) of an ERR packet payload starting with 0xff."""
    if len(payload) < 3:
        return 0, "malformed ERR packet"
    code = payload[1] | (payload[2] << 8)
    msg = payload[3:]
    if msg[:1] == b"#":
        msg = msg[6:]  # '#' + 5-byte SQLSTATE
    return code, msg.decode("utf-8", "replace")


def parse_rotate(event: bytes, checksum_len: int) -> tuple[str, int]:
    """(next file, position) from a whole ROTATE event (header + body + optional CRC32)."""
    end = len(event) - checksum_len
    pos = struct.unpack_from("<Q", event, EVENT_HEADER_LEN)[0]
    name = event[EVENT_HEADER_LEN + 8:end].decode("utf-8", "replace")
    return name, pos
