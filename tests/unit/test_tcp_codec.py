"""The sans-IO wire format of Canal's TCP protocol: framing, the MESSAGES fast path (checked against the
generated protobuf classes), replies, and the GET timeout rules."""

from __future__ import annotations

import struct

import pytest

from canal_core.protocol import codec
from canal_core.protocol.proto import CanalProtocol_pb2 as cp
from canal_core.protocol.proto import EntryProtocol_pb2 as ep


def test_frames_split_anywhere() -> None:
    packets = [b"", b"a", bytes(range(256)) * 3, b"xyz"]
    stream = b"".join(codec.frame(p) for p in packets)
    assert stream[:4] == struct.pack(">i", 0) and stream[4:8] == b"\x00\x00\x00\x01"
    for step in (1, 2, 3, 7, 64, len(stream)):
        dec = codec.FrameDecoder()
        out: list[bytes] = []
        for i in range(0, len(stream), step):
            out += dec.feed(stream[i:i + step])
        assert out == packets and dec.pending == 0


def test_bad_frame_lengths() -> None:
    with pytest.raises(codec.ProtocolError):
        codec.FrameDecoder().feed(struct.pack(">i", -1))
    with pytest.raises(codec.ProtocolError):
        codec.FrameDecoder(max_frame=100).feed(struct.pack(">i", 101))
    assert codec.FrameDecoder(max_frame=100).feed(struct.pack(">i", 100) + b"x") == []


def _entries() -> list[bytes]:
    out = []
    for i in range(3):
        e = ep.Entry(header=ep.Header(logfileName="mysql-bin.000001", logfileOffset=4 + i * 1000, schemaName="s",
                                      tableName="t" * (i * 200)), entryType=ep.ROWDATA,
                     storeValue=ep.RowChange(sql="x" * (i * 70000)).SerializeToString())
        out.append(e.SerializeToString())
    return out


def test_messages_fast_path() -> None:
    entries = _entries()
    for batch_id in (1, 127, 128, 2**40):
        data = codec.messages_packet(batch_id, entries)
        # what protobuf's own serializer writes for Packet{type, body=Messages{batch_id, messages}}
        body = cp.Messages(batch_id=batch_id, messages=entries).SerializeToString()
        assert data == cp.Packet(type=cp.MESSAGES, body=body).SerializeToString()
        pkt = cp.Packet.FromString(data)
        assert [f.name for f, _ in pkt.ListFields()] == ["type", "body"]  # only fields 3 and 5
        assert not pkt.HasField("version") and not pkt.HasField("compression")
        assert codec.parse_messages(pkt) == (batch_id, entries)


def test_empty_batch_and_acks() -> None:
    pkt = cp.Packet.FromString(codec.messages_packet(-1, []))
    assert pkt.version == 1 and pkt.type == cp.MESSAGES
    assert codec.parse_messages(pkt) == (-1, [])
    ack = cp.Packet.FromString(codec.ack_packet())
    assert (ack.version, ack.type, ack.body) == (1, cp.ACK, b"")
    assert cp.Ack.FromString(ack.body).error_code == 0
    err = cp.Packet.FromString(codec.error_packet(402, "batchId should assign value"))
    a = cp.Ack.FromString(err.body)
    assert (err.type, a.error_code, a.error_message) == (cp.ACK, 402, "batchId should assign value")
    hs = cp.Packet.FromString(codec.handshake_packet(b"12345678"))
    assert (hs.version, hs.type, cp.Handshake.FromString(hs.body).seeds) == (1, cp.HANDSHAKE, b"12345678")


def test_compression_refused() -> None:
    body = cp.Messages(batch_id=3, messages=[b"x"]).SerializeToString()
    for ok in (cp.NONE, cp.COMPRESSIONCOMPATIBLEPROTO2):
        assert codec.parse_messages(cp.Packet(type=cp.MESSAGES, compression=ok, body=body)) == (3, [b"x"])
    with pytest.raises(codec.ProtocolError, match="ZLIB"):
        codec.parse_messages(cp.Packet(type=cp.MESSAGES, compression=cp.ZLIB, body=body))
    with pytest.raises(codec.ProtocolError):
        codec.parse_packet(b"\xff\xff\xff")


def test_packet_type_names() -> None:
    assert codec.packet_type_name(cp.GET) == "GET"
    assert codec.packet_type_name(cp.CLIENTROLLBACK) == "CLIENTROLLBACK"
    assert codec.packet_type_name(99) == "UNRECOGNIZED"


def _wait(**kw: int) -> float | None:
    # through the wire: a field left out must read as absent
    return codec.get_wait(cp.Get.FromString(cp.Get(destination="d", client_id="1", **kw).SerializeToString()))


def test_get_timeout_rules() -> None:
    assert _wait(timeout=-1) == 0.0  # try-get
    assert _wait() is None  # absent timeout reads 0: blocking
    assert _wait(timeout=0, unit=2) is None
    assert _wait(timeout=-5, unit=3) is None
    assert _wait(timeout=1500, unit=2) == pytest.approx(1.5)
    assert _wait(timeout=2, unit=3) == 2.0
    assert _wait(timeout=1, unit=4) == 60.0
    assert _wait(timeout=1, unit=6) == 86400.0
    assert _wait(timeout=3000, unit=1) == pytest.approx(0.003)
    assert _wait(timeout=500) == pytest.approx(500e-9)  # absent unit reads 0: nanoseconds, as in Java
    assert _wait(timeout=250, unit=-1) == pytest.approx(0.25)  # unknown unit: milliseconds
