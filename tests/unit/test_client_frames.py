"""Reply frame lengths a server announces are checked before memory is taken for them (SimpleConnector, against
a socket pair playing a broken or hostile canal-server)."""

from __future__ import annotations

import socket
import struct
import threading
import time
import tracemalloc
from typing import Any

import pytest

from canal_core.client.connector import CanalConnectionError, SimpleConnector


def _send_later(sock: socket.socket, data: bytes) -> threading.Thread:
    t = threading.Thread(target=sock.sendall, args=(data,), daemon=True)
    t.start()
    return t


def _connector_on(sock: socket.socket, **kw: Any) -> SimpleConnector:
    conn = SimpleConnector(("127.0.0.1", 1), "example", so_timeout=3.0, **kw)
    conn._sock = sock
    return conn


def test_client_refuses_a_frame_length_over_its_maximum_before_allocating(pair: Any) -> None:
    """A server announcing a 2 GiB frame: the connector used to pre-allocate the 2 GiB, then wait for them."""
    server, client = pair
    server.sendall(struct.pack(">i", 0x7FFFFFFF))
    conn = _connector_on(client)
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(CanalConnectionError, match=r"frame of 2147483647 bytes, more than max_frame_size "
                                                       r"\(268435456\)"):
            conn._read(3.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 1.0
    assert peak < 1 << 20, f"{peak} bytes traced"
    assert not conn.connected  # the stream is out of step: dropped


def test_client_buffer_grows_with_the_bytes_that_arrive(pair: Any) -> None:
    """100 MiB announced (under the maximum), 10 bytes sent, then the server closes: the error comes without a
    100 MiB buffer."""
    server, client = pair
    server.sendall(struct.pack(">i", 100 << 20) + b"0123456789")
    server.shutdown(socket.SHUT_WR)
    conn = _connector_on(client)
    tracemalloc.start()
    try:
        with pytest.raises(CanalConnectionError, match="closed the connection"):
            conn._read(3.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"{peak} bytes traced"


def test_client_reads_a_large_frame_whole(pair: Any) -> None:
    server, client = pair
    body = bytes(range(256)) * ((3 << 20) // 256) + b"tail"
    _send_later(server, body)
    conn = _connector_on(client)
    assert bytes(conn._read_exact(len(body), time.monotonic() + 5)) == body


def test_client_maximum_is_configurable(pair: Any) -> None:
    server, client = pair
    server.sendall(struct.pack(">i", 5000))
    with pytest.raises(CanalConnectionError, match=r"more than max_frame_size \(4096\)"):
        _connector_on(client, max_frame_size=4096)._read(3.0)
