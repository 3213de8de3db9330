"""A canal-server process whose clients misbehave: failed logins naming made-up or configured destinations and
a login naming an unknown destination add no series to /metrics, and the page keeps its size."""

from __future__ import annotations

import os
import random
import select
import signal
import socket
import string
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from canal_core.client.connector import CanalClientError, SimpleConnector
from canal_core.protocol.proto import CanalProtocol_pb2 as cp
from tests.integration.server_process import destination_running
from tests.support.net import free_port

pytestmark = pytest.mark.integration

# canal.passwd of the password "canal"
PASSWD = "E3619321C1A937C46A0D8BD1DAC39F93B27D4458"


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def _series(text: str) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return {(s.name, tuple(sorted(s.labels.items()))) for f in text_string_to_metric_families(text) for s in f.samples}


def _frame(ptype: int, msg: Any) -> bytes:
    data = cp.Packet(type=ptype, body=msg.SerializeToString()).SerializeToString()
    return struct.pack(">i", len(data)) + data


def _read_frame(sock: socket.socket) -> bytes:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            raise EOFError
        head += chunk
    (n,) = struct.unpack(">i", head)
    body = b""
    while len(body) < n:
        chunk = sock.recv(n - len(body))
        if not chunk:
            raise EOFError
        body += chunk
    return body


def _failed_logins(port: int, destinations: list[str]) -> None:
    """One connection per destination, each sending a ClientAuth with a wrong password, all at once; then
    waits (10 s at most) for each reply or close."""
    socks = []
    for dest in destinations:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        _read_frame(s)  # handshake
        s.sendall(_frame(cp.CLIENTAUTHENTICATION, cp.ClientAuth(username="canal", password=b"wrong",
                                                                destination=dest, client_id="1001")))
        socks.append(s)
    deadline = time.monotonic() + 10
    pending = list(socks)
    while pending and time.monotonic() < deadline:
        readable, _, _ = select.select(pending, [], [], max(0.0, deadline - time.monotonic()))
        for s in readable:
            pending.remove(s)
    for s in socks:
        s.close()


def test_failed_logins_and_unknown_destinations_add_no_series(mariadb_settings: Any, tmp_path: Path) -> None:
    tcp_port, metrics_port = free_port(), free_port()
    conf = tmp_path / "conf"
    (conf / "example").mkdir(parents=True)
    (conf / "canal.properties").write_text(
        f"canal.port = {tcp_port}\ncanal.ip = 127.0.0.1\ncanal.metrics.pull.port = {metrics_port}\n"
        f"canal.user = canal\ncanal.passwd = {PASSWD}\n"
        f"canal.destinations = example\ncanal.file.data.dir = {tmp_path / 'data'}\n")
    (conf / "example" / "instance.properties").write_text(
        f"canal.instance.master.address = 127.0.0.1:{mariadb_settings.port}\n"
        "canal.instance.dbUsername = canal\ncanal.instance.dbPassword = canal\n"
        "canal.instance.filter.regex = canal_test\\\\.metrics_none\n")
    run = tmp_path / "logs"
    proc = subprocess.Popen([sys.executable, "-m", "canal_core.server.main", "run", "--conf", str(conf),
                             "--run-dir", str(run)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert destination_running(run)
        # a well-behaved client: its destination's client series exist before the flood
        with SimpleConnector(("127.0.0.1", tcp_port), "example", "canal", "canal", so_timeout=10) as c:
            c.subscribe()
            c.get_without_ack(10, timeout=-1)
        time.sleep(1.1)  # past the page cache
        before = _scrape(metrics_port)

        rnd = random.Random(7)
        names = ["".join(rnd.choices(string.ascii_letters, k=2000)) for _ in range(100)] + ["example"] * 20
        _failed_logins(tcp_port, names)
        # the right password, then requests naming a destination that does not exist: refused, no series either
        with SimpleConnector(("127.0.0.1", tcp_port), "no_such_destination", "canal", "canal", so_timeout=10,
                             rollback_on_connect=False) as c:
            for _ in range(2):
                with pytest.raises(CanalClientError, match="should start first"):
                    c.subscribe()
        time.sleep(1.1)
        after = _scrape(metrics_port)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert proc.returncode == 0, proc.stderr.read().decode() if proc.stderr else ""
    assert {dict(labels).get("destination") for _, labels in _series(after)} <= {"example", None}
    assert _series(after) == _series(before)
    # the values move (delays, request counts): the size may change by a few digits, not by a series
    assert abs(len(after) - len(before)) < 200, (len(before), len(after))
    assert len(after) < 100_000
    print(f"/metrics: {len(before)} bytes before, {len(after)} after 120 failed logins")

