"""Canal's TCP server beyond one healthy connection: idle timeouts, the cluster connector failing over to a
second server, the controller serving canal.ip:canal.port, and a start on a busy port."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from canal_core.client import (
    CanalAuthError,
    CanalConnectionError,
    ClusterConnector,
    SimpleConnector,
    TimeUnit,
)
from canal_core.instance.config import ConfigError
from canal_core.protocol.auth import stored_hash
from canal_core.server.controller import CanalController
from canal_core.server.embedded import CanalServerWithEmbedded
from canal_core.server.tcp import CanalTcpServer
from tests.integration.binlog_end import master_status
from tests.integration.tcp_served import (
    PASSWORD,
    TABLE_A,
    TABLE_B,
    USER,
    Raw,
    Served,
    apply_entries,
    controller_conf,
    drain,
    select_rows,
    write_rows,
)
from tests.support.net import free_port

pytestmark = pytest.mark.integration


def test_idle_timeout_closes(served: Served) -> None:
    quick = served.connector(idle_timeout=1.0)  # sent as net_read_timeout = 1000 ms
    slow = served.connector()
    quick.connect()
    slow.connect()
    try:
        assert quick.check_valid() and slow.check_valid()
        time.sleep(2.5)
        assert not quick.check_valid()
        assert slow.check_valid()
        with pytest.raises(CanalConnectionError):
            quick.get_without_ack(1)
    finally:
        quick.disconnect()
        slow.disconnect()
    # a connection that never authenticates is dropped after the server's auth timeout (1.5 s here)
    raw = Raw(served.addr)
    try:
        t0 = time.monotonic()
        with pytest.raises(EOFError):
            raw.read(timeout=10)
        assert 1.0 <= time.monotonic() - t0 < 8
    finally:
        raw.close()


def test_cluster_connector_fails_over(served: Served, admin_conn: Any) -> None:
    second = CanalTcpServer(served.ctl.server, host="127.0.0.1", port=0, user=USER, passwd=stored_hash(PASSWORD))
    second.start()
    dead = ("127.0.0.1", free_port())
    try:
        cluster = ClusterConnector([dead, served.addr, second.address], "d1", USER, PASSWORD, backoff=0.05)
        cluster.connect()
        assert cluster.address == served.addr  # the dead address was skipped
        cluster.subscribe()
        write_rows(admin_conn, TABLE_A, 1, 6)
        first = cluster.get_without_ack(3, 3, TimeUnit.SECONDS)
        assert not first.empty
        served.tcp.stop(timeout=2)  # the server goes away with a batch outstanding
        again = cluster.get_without_ack(3, 3, TimeUnit.SECONDS)
        assert cluster.address == second.address
        assert again.raw_entries == first.raw_entries  # rolled back on reconnect: nothing lost
        state: dict[str, Any] = {}
        apply_entries(again.entries, TABLE_A, state)
        cluster.ack(again.batch_id)
        want = select_rows(admin_conn, TABLE_A)
        assert drain(cluster, TABLE_A, want, state) == want
        cluster.disconnect()

        # an address source is asked afresh on every round
        asked: list[int] = []

        def source() -> list[tuple[str, int]]:
            asked.append(1)
            return [dead] if len(asked) < 2 else [second.address]

        sourced = ClusterConnector(source, "d1", USER, PASSWORD, backoff=0.05)
        sourced.connect()
        assert sourced.address == second.address and len(asked) == 2
        assert sourced.check_valid()
        sourced.disconnect()

        # a server that does not run the destination (e.g. an HA standby): the next one is used
        standby = CanalTcpServer(CanalServerWithEmbedded(), host="127.0.0.1", port=0)
        standby.start()
        try:
            moving = ClusterConnector([standby.address, second.address], "d1", USER, PASSWORD, backoff=0.05)
            moving.connect()
            assert moving.address == standby.address
            moving.subscribe()  # "destination:d1 should start first" there
            assert moving.address == second.address
            assert moving.get_without_ack(10).batch_id != 0
            moving.disconnect()
        finally:
            standby.stop(timeout=2)

        nowhere = ClusterConnector([dead], "d1", USER, PASSWORD, retries=2, backoff=0.05)
        with pytest.raises(CanalConnectionError, match="after 2 rounds"):
            nowhere.connect()
        with pytest.raises(CanalAuthError):
            ClusterConnector([second.address], "d1", USER, "nope", backoff=0.05).connect()
    finally:
        second.stop(timeout=2)


def test_controller_serves_canal_port(mariadb_settings: Any, admin_conn: Any, tcp_tables: Any, tmp_path: Path) -> None:
    start = master_status(mariadb_settings)
    port = free_port()
    conf = controller_conf(tmp_path / "ok", mariadb_settings.port, start, port, stored_hash(PASSWORD))
    ctl = CanalController(conf, tcp=True)
    ctl.start()
    try:
        assert ctl.tcp_address == ("127.0.0.1", port)
        with SimpleConnector(("127.0.0.1", port), "d2", USER, PASSWORD) as conn:
            conn.subscribe()
            write_rows(admin_conn, TABLE_B, 1, 3)
            want = select_rows(admin_conn, TABLE_B)
            assert drain(conn, TABLE_B, want) == want

        # a second server on the same canal.port: the start fails before any destination starts
        busy = CanalController(controller_conf(tmp_path / "busy", mariadb_settings.port, start, port,
                                                stored_hash(PASSWORD)), tcp=True)
        with pytest.raises(OSError):
            busy.start()
        assert list(busy.server.destinations()) == []
        busy.stop()
    finally:
        ctl.stop()
    with pytest.raises(CanalConnectionError):
        SimpleConnector(("127.0.0.1", port), "d2", USER, PASSWORD, connect_timeout=2).connect()

    # canal.user without canal.passwd: a startup error naming canal.properties
    bad = controller_conf(tmp_path / "bad", mariadb_settings.port, start, free_port(), "")
    with pytest.raises(ConfigError, match=r"canal\.properties.*canal\.user = canal needs canal\.passwd"):
        CanalController(bad, tcp=True)



def test_cli_start_fails_on_a_busy_port(mariadb_settings: Any, admin_conn: Any, tcp_tables: Any,
                                        tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        conf = controller_conf(tmp_path, mariadb_settings.port, master_status(mariadb_settings), port,
                                stored_hash(PASSWORD))
        run = tmp_path / "logs"
        cli = Path(sys.executable).parent / "canal-server"
        started = subprocess.run([str(cli), "start", "--conf", str(conf), "--run-dir", str(run)],
                                 capture_output=True, text=True, timeout=60)
    assert started.returncode == 1 and "exited during start (code 1)" in started.stderr
    out = (run / "canal.out").read_text()
    assert f"cannot listen on 127.0.0.1:{port} (canal.ip / canal.port)" in out and "in use" in out
    assert not (run / "canal.pid").exists()
