"""Fixtures shared by integration test modules: the pipeline end-to-end tests (test_pipeline_e2e, _remote,
_cluster, _keyless), the TCP server tests (test_tcp_server, _failover) and ZooKeeper clients on the test's chroot."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from kazoo.client import KazooClient

from canal_core.meta.zkclient import new_client
from canal_core.protocol.auth import stored_hash
from canal_core.server.controller import CanalController
from canal_core.server.tcp import CanalTcpServer
from tests.integration.binlog_end import master_status
from tests.integration.tcp_served import PASSWORD, TABLE_A, TABLE_B, USER, Recorder, Served, server_conf


@pytest.fixture(scope="module", autouse=True)
def no_canal_source_outlives_its_module() -> Iterator[None]:
    """Sensors evaluated in this process start Canal sources (one per destination, kept for the process's life,
    as a code server keeps them); a module's sources must not go on dumping from its sources for the rest of
    the worker's session."""
    yield
    source = sys.modules.get("pipelines.engine.source")
    if source is not None:
        source.EmbeddedCanalSource.close_all()
        source.RemoteCanalSource.close_all()


@pytest.fixture
def one_spark_session(monkeypatch: pytest.MonkeyPatch) -> None:
    # the daemon runs each run in its own process, whose SparkSession ends with it; in this process the
    # runs share the test session instead of stopping and restarting it after every run
    from pipelines.defs.resources import SparkResource  # here: the pipeline extra stays optional for other tests

    monkeypatch.setattr(SparkResource, "teardown_after_execution", lambda self, context: None)


@pytest.fixture
def db(mariadb_settings: Any) -> Iterator[pymysql.connections.Connection]:
    """An admin connection (UTC session) to a fresh canal_e2e schema, dropped afterwards."""
    from tests.integration.e2e_workload import create_schema, drop_schema  # imports the pipeline package

    conn = pymysql.connect(**mariadb_settings.admin_kwargs(init_command="SET time_zone = '+00:00'"))
    create_schema(conn)
    yield conn
    drop_schema(conn)
    conn.close()


@pytest.fixture
def tcp_tables(admin_conn: Any) -> Iterator[tuple[str, str]]:
    with admin_conn.cursor() as cur:
        for t in (TABLE_A, TABLE_B):
            cur.execute(f"DROP TABLE IF EXISTS canal_test.{t}")
            cur.execute(f"CREATE TABLE canal_test.{t} (id INT PRIMARY KEY, name VARCHAR(40), amount DECIMAL(10,2),"
                        " created DATETIME, note VARCHAR(20) NULL) DEFAULT CHARSET=utf8mb4")
    yield TABLE_A, TABLE_B
    with admin_conn.cursor() as cur:
        for t in (TABLE_A, TABLE_B):
            cur.execute(f"DROP TABLE IF EXISTS canal_test.{t}")


@pytest.fixture
def served(mariadb_settings: Any, admin_conn: Any, tcp_tables: Any, tmp_path: Path) -> Iterator[Served]:
    conf = server_conf(tmp_path, mariadb_settings.port, master_status(mariadb_settings))
    ctl = CanalController(conf)
    ctl.start()
    hooks = Recorder()
    tcp = CanalTcpServer(ctl.server, host="127.0.0.1", port=0, user=USER, passwd=stored_hash(PASSWORD),
                         hooks=hooks, auth_timeout=1.5)
    tcp.start()
    try:
        yield Served(ctl, tcp, hooks)
    finally:
        tcp.stop(timeout=0)
        ctl.stop()


@pytest.fixture
def zk(zk_chroot: str) -> Iterator[KazooClient]:
    """A plain client on the test's chroot, to look at what the servers and managers wrote."""
    c = KazooClient(hosts=zk_chroot)
    c.start(timeout=10)
    yield c
    c.stop()
    c.close()


@pytest.fixture
def zk_clients() -> Iterator[Callable[[str, int], KazooClient]]:
    """Factory of started clients as Canal makes them (``new_client(connect, session_timeout_ms=...)``), stopped
    and closed after the test."""
    made: list[KazooClient] = []

    def make(connect: str, session_ms: int) -> KazooClient:
        c = new_client(connect, session_timeout_ms=session_ms)
        c.start(timeout=10)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()
        c.close()
