"""The metrics HTTP endpoint under clients that misbehave: slow or silent connections are cut at their
deadline, connections beyond the bound are refused at once, and scrapes close together share one render."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest

from canal_core.instance.destination import Destination
from canal_core.meta import MemoryMetaManager
from canal_core.server.embedded import CanalServerWithEmbedded
from canal_core.server.metrics import MetricsServer
from canal_core.store.ring import MemoryEventStore


@pytest.fixture
def metrics() -> Iterator[MetricsServer]:
    server = CanalServerWithEmbedded()
    server.start(Destination("d1", MemoryEventStore(8), MemoryMetaManager()))
    with MetricsServer(server, "127.0.0.1", 0, request_timeout=1.0, max_connections=2, cache_seconds=0.3) as m:
        yield m


def _scrape(port: int) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read()


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``sock`` (EOF or reset) within ``seconds``; what it sends is read and dropped."""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_silent_and_trickling_connections_are_cut_and_the_rest_refused(metrics: MetricsServer) -> None:
    silent = socket.create_connection(("127.0.0.1", metrics.port))
    trickling = socket.create_connection(("127.0.0.1", metrics.port))
    try:
        time.sleep(0.1)  # both accepted: the two slots are taken
        start = time.monotonic()
        with socket.create_connection(("127.0.0.1", metrics.port)) as third:
            third.settimeout(2)
            assert third.recv(100).startswith(b"HTTP/1.0 503")
        assert time.monotonic() - start < 0.8  # refused at once, not after a slot frees (1 s)
        for _ in range(15):  # a byte every 0.1 s: each read succeeds, the deadline still cuts the connection
            try:
                trickling.send(b"G")
            except OSError:
                break
            time.sleep(0.1)
        assert _closed_within(trickling, 2.0) and _closed_within(silent, 2.0)
        assert time.monotonic() - start < 2.5
        assert b"canal_instance_store" in _scrape(metrics.port)  # the slots are free again
    finally:
        silent.close()
        trickling.close()


def test_scrapes_close_together_share_one_render(metrics: MetricsServer) -> None:
    metrics.cache_seconds = 5.0
    pages: list[bytes] = []
    threads = [threading.Thread(target=lambda: pages.append(metrics.page())) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(pages) == 50 and len(set(pages)) == 1 and metrics.renders == 1
    metrics.page(gz=True)
    assert metrics.renders == 1
    metrics.client_metrics.packet_received("d1", "GET")
    assert metrics.page() == pages[0]  # still the cached page
    metrics.cache_seconds = 0.0
    assert b'packetType="GET"} 1.0' in metrics.page() and metrics.renders == 2
