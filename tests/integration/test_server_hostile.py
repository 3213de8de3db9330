"""A real canal-server process against clients that want to hurt it: many idle connections (also near the
open-files limit), large frames before authentication, silent connections, password guessing, forged log
lines and log floods. Each time the server must keep serving an honest client."""

from __future__ import annotations

import resource
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from canal_core.client import SimpleConnector
from tests.integration.server_process import (
    PASSWORD,
    USER,
    RawClient,
    ServerProcess,
    start_server,
    wait,
    write_conf,
)

pytestmark = pytest.mark.integration

FILTER = "canal.instance.filter.regex = canal_test\\\\.hs_none\n"


@pytest.fixture(autouse=True)
def _enough_files() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < min(4096, hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))


@contextmanager
def _serving(mariadb_settings: Any, tmp_path: Path, extra: str = "",
             **kw: Any) -> Iterator[tuple[ServerProcess, list[RawClient]]]:
    """A canal-server process (``extra`` canal.properties lines) and a list for the test's raw clients; the
    clients are closed and the server stopped afterwards."""
    conf = write_conf(tmp_path, mariadb_settings.port, {"example": FILTER}, canal_extra=extra)
    server = start_server(conf, tmp_path / "logs", **kw)
    clients: list[RawClient] = []
    try:
        yield server, clients
    finally:
        for c in clients:
            c.close()
        server.stop()


def _honest(server: ServerProcess) -> None:
    """An honest client connects, subscribes and gets (an empty batch is fine: nothing is written)."""
    with SimpleConnector(server.address, "example", USER, PASSWORD, so_timeout=10) as conn:
        conn.subscribe()
        msg = conn.get_without_ack(10)
        if not msg.empty:
            conn.ack(msg.batch_id)


def _open_idle(server: ServerProcess, n: int) -> list[RawClient]:
    return [RawClient(server.address, handshake=False) for _ in range(n)]


def test_idle_connections_beyond_the_cap_and_the_files_limit(mariadb_settings: Any, tmp_path: Path) -> None:
    # an open-files limit of 256 (canal.tcp.max.connections stays at its default, 1000): without a cap the
    # connections take every descriptor and the status writer's EMFILE ends the process
    with _serving(mariadb_settings, tmp_path, nofile=256) as (server, idle):
        idle.extend(_open_idle(server, 400))
        written = server.status().get("time", 0)
        wait(lambda: server.status().get("time", 0) > written, 10, "status.json written after the flood")
        assert server.alive()
        assert server.connections() is not None and server.connections() <= 224  # 256 less an eighth
        _honest(server)
        assert "canal.tcp.max.connections 1000 lowered to 224" in server.log()
        assert server.alive()


def test_connection_cap_closes_the_oldest_unauthenticated(mariadb_settings: Any, tmp_path: Path) -> None:
    with _serving(mariadb_settings, tmp_path, "canal.tcp.max.connections = 20\n") as (server, idle):
        idle.extend(_open_idle(server, 60))
        wait(lambda: sum(c.closed_by_server(0.01) for c in idle[:40]) == 40, 10, "the oldest 40 closed")
        assert not any(c.closed_by_server(0.01) for c in idle[40:])
        _honest(server)  # its connection made the oldest remaining idle one go
        assert idle[40].closed_by_server(5)
        # an authenticated client is never closed for a newcomer: with 20 of them, a 21st is refused
        clients = [SimpleConnector(server.address, "example", USER, PASSWORD, so_timeout=10) for _ in range(20)]
        try:
            for c in clients:
                c.connect()
            late = RawClient(server.address, handshake=False)
            assert late.closed_by_server(5)
            late.close()
            assert all(c.check_valid() for c in clients)
        finally:
            for c in clients:
                c.disconnect()
        gone = time.time() * 1000  # status.json is rewritten every 2 s: wait for one written after this
        wait(lambda: server.status().get("time", 0) > gone and server.connections() == 0, 10,
             "the authenticated clients gone")
        _honest(server)
        assert "refused: 20 connections (canal.tcp.max.connections)" in server.log()


def test_unauthenticated_connections_cost_little_and_time_out(mariadb_settings: Any, tmp_path: Path) -> None:
    with _serving(mariadb_settings, tmp_path, "canal.tcp.auth.timeout = 2\n") as (server, clients):
        rss0 = server.rss_mb()
        # 40 connections each announce a 16 MiB ClientAuth and send 2 MiB of it
        chunk = b"\0" * (1 << 20)
        for _ in range(40):
            c = RawClient(server.address)
            clients.append(c)
            c.sock.sendall(struct.pack(">i", 16 << 20))
            try:
                c.sock.sendall(chunk)
                c.sock.sendall(chunk)
            except OSError:
                pass  # closed by the server as soon as it read the length: what is wanted
        assert all(c.closed_by_server(5) for c in clients)
        grown = server.peak_rss_mb() - rss0
        assert grown < 40, f"40 unauthenticated connections took {grown:.0f} MB"
        # a connection that sends nothing is closed after canal.tcp.auth.timeout
        silent = RawClient(server.address)
        clients.append(silent)
        t0 = time.monotonic()
        assert silent.closed_by_server(10)
        assert 1.5 < time.monotonic() - t0 < 6
        _honest(server)


def test_failed_auth_closes_and_backs_off(mariadb_settings: Any, tmp_path: Path) -> None:
    with _serving(mariadb_settings, tmp_path,
                  "canal.tcp.auth.backoff = 100\ncanal.tcp.auth.backoff.max = 800\n") as (server, _):
        guesser = RawClient(server.address, source="127.0.0.7")
        assert guesser.auth(password="guess-0").error_code == 400
        assert guesser.closed_by_server(5), "a connection may try one password"
        guesser.close()
        # the same address, one guess per connection: waits of 0.1, 0.2, 0.4, 0.8, 0.8 s before the checks
        t0 = time.monotonic()
        for i in range(1, 6):
            c = RawClient(server.address, source="127.0.0.7")
            ack = c.auth(password=f"guess-{i}")
            assert ack.error_code == 400 and ack.error_message == f"auth failed for user:{USER}"
            c.close()
        assert time.monotonic() - t0 >= 2.0
        # another address is not held back; the right password from the guesser's clears its failures
        t0 = time.monotonic()
        _honest(server)
        assert time.monotonic() - t0 < 2
        ok = RawClient(server.address, source="127.0.0.7")
        assert ok.auth().error_code == 0
        ok.close()
        t0 = time.monotonic()
        again = RawClient(server.address, source="127.0.0.7")
        assert again.auth(password="guess-6").error_code == 400
        assert time.monotonic() - t0 < 0.5
        again.close()


def test_log_lines_cannot_be_forged_flooded_or_grow_forever(mariadb_settings: Any, tmp_path: Path) -> None:
    with _serving(mariadb_settings, tmp_path,
                  "canal.log.file.max.bytes = 10000\ncanal.log.file.backups = 2\n") as (server, _):
        forged = "x\n2026-01-01 00:00:00,000 WARNING [main] canal_core.server - FORGED\r\u2028"
        c = RawClient(server.address, source="127.0.2.1")
        assert c.auth(user=forged, password="nope").error_code == 400
        c.close()
        text = server.log()
        assert not any(line.startswith("2026-01-01") for line in text.splitlines()), "a forged log line"
        assert "\\x0a2026-01-01" in text and "\\u2028" in text
        # 300 failed logins from 300 addresses, with 2 KB destination names
        for i in range(300):
            c = RawClient(server.address, source=f"127.0.{3 + i // 250}.{i % 250 + 1}")
            ack = c.auth(password="nope", destination="d" * 2000 + str(i), client_id="1001")
            assert ack.error_code == 400
            c.close()
        for _ in range(60):  # authenticated sessions are logged in full: enough lines to rotate a few times
            _honest(server)
        logs = sorted((server.run / "canal").glob("canal.log*"))
        text = "".join(p.read_text(errors="replace") for p in logs)
        assert text.count("auth failed for user") <= 50, "failed logins are logged at most 50 a minute"
        assert [p.name for p in logs] == ["canal.log", "canal.log.1", "canal.log.2"]
        assert all(p.stat().st_size <= 10000 for p in logs)
        assert server.alive()
