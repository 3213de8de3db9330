"""The replication stream's packet lengths are checked against the maximum event size before memory is taken
for them (ReplicationConnection's dump loop, against a socket pair playing the server)."""

from __future__ import annotations

import socket
import struct
import threading
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

from canal_core.mysql import ConnectionLostError, PacketTooLargeError, ReplicationConnection

FULL = 0xFFFFFF  # a full MySQL packet: more of the same payload follows


class _Conn:
    """The parts of a PyMySQL connection the dump loop uses."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._current_timeout: float | None = None

    def _force_close(self) -> None:
        self._sock.close()


def _packet(length: int, seq: int, payload: bytes = b"") -> bytes:
    return struct.pack("<I", length | seq << 24) + payload


def _event(size: int) -> bytes:
    """A QUERY event header claiming ``size`` bytes, then filler up to that size."""
    head = struct.pack("<IBIIIH", 1700000000, 2, 1, size, 4 + size, 0)
    return head + bytes(size - len(head))


def _send_later(sock: socket.socket, data: bytes) -> threading.Thread:
    t = threading.Thread(target=lambda: _sendall_quietly(sock, data), daemon=True)
    t.start()
    return t


def _sendall_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:
        pass  # the reader gave up on purpose


def _stream(sock: socket.socket, limit: int) -> Iterator[bytes]:
    rc = ReplicationConnection(read_timeout=3.0, heartbeat_period=0, max_event_size=limit)
    rc._file, rc._pos = "mysql-bin.000007", 1234
    return rc._stream(_Conn(sock), False, "mysql-bin.000007", 1234, None)  # type: ignore[arg-type]


def test_replication_packet_over_the_limit_is_refused_before_it_is_read(pair: Any) -> None:
    """A 16 MiB packet header against a 1 MiB limit: refused at once, naming the position (it used to read the
    16 MiB, here waiting on a server that never sends them)."""
    server, client = pair
    server.sendall(_packet(FULL, 1, b"\x00"))
    started = time.monotonic()
    with pytest.raises(PacketTooLargeError) as info:
        next(_stream(client, 1 << 20))
    assert time.monotonic() - started < 1.0
    assert "mysql-bin.000007:1234" in str(info.value) and f"{1 << 20} bytes" in str(info.value)
    assert info.value.size == FULL - 1 and info.value.limit == 1 << 20


def test_replication_multi_packet_event_over_the_limit_is_refused_at_the_next_packet(pair: Any) -> None:
    """Continuation packets are summed before each is read: a second full packet takes the event past 20 MiB."""
    server, client = pair
    first = _event(FULL - 1)
    _send_later(server, _packet(FULL, 1, b"\x00" + first) + _packet(FULL, 2))
    tracemalloc.start()
    try:
        with pytest.raises(PacketTooLargeError) as info:
            next(_stream(client, 20 << 20))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.size == (FULL - 1) + FULL
    assert peak < 24 << 20, f"{peak} bytes traced: the continuation was read"


def test_replication_multi_packet_event_under_the_limit_is_joined(pair: Any) -> None:
    server, client = pair
    whole = _event((FULL - 1) + 5000)
    first, rest = whole[:FULL - 1], whole[FULL - 1:]
    _send_later(server, _packet(FULL, 1, b"\x00" + first) + _packet(len(rest), 2, rest))
    assert next(_stream(client, 20 << 20)) == whole


def test_replication_packet_within_the_limit_still_waits_for_its_bytes(pair: Any) -> None:
    """Control: a length under the limit is read as before (here the server goes quiet: connection lost)."""
    server, client = pair
    server.sendall(_packet(100, 1, b"\x00"))
    with pytest.raises(ConnectionLostError):
        next(_stream(client, 1 << 20))
