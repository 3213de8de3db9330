"""canal.zookeeper.auth on the private ZooKeeper: the nodes canal-server makes are writable only with the
credentials (world-readable, so Canal's tooling and discovery still read them); without the key they stay open
as in Canal. Discovery refuses addresses that are not a sane ip:port, or outside an allow-list."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE, make_acl, make_digest_acl

from canal_core.client.zookeeper import ServerDiscovery
from canal_core.meta import PositionRange, ZooKeeperMetaManager
from canal_core.meta.zkacl import ZkAuth
from canal_core.meta.zkclient import ZkServers
from canal_core.protocol.identity import ClientIdentity
from canal_core.protocol.position import EntryPosition, LogIdentity, LogPosition
from canal_core.server.running import ServerRegistration, ServerRunningMonitor
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

SESSION_MS = 2000
AUTH = ZkAuth("canal", "zk-secret")
DEST = "/otter/canal/destinations/example"
RUNNING = f"{DEST}/running"


def wait_for(cond: Callable[[], bool], timeout: float) -> None:
    wait_until(cond, timeout)


@pytest.fixture
def clients(zk_chroot: str) -> Iterator[Callable[..., KazooClient]]:
    """Plain clients on the test's chroot: anonymous, or with the credentials. The protected nodes are removed
    with the credentials at the end (the chroot's anonymous clean-up could not)."""
    made: list[KazooClient] = []

    def make(auth: bool = False) -> KazooClient:
        c = KazooClient(hosts=zk_chroot, auth_data=AUTH.auth_data if auth else None)
        c.start(timeout=10)
        made.append(c)
        return c

    yield make
    admin = make(auth=True)
    if admin.exists("/otter"):
        admin.delete("/otter", recursive=True)
    for c in made:
        c.stop()
        c.close()


def pos(n: int) -> LogPosition:
    return LogPosition(LogIdentity("127.0.0.1", 3306, -1), EntryPosition("mysql-bin.000001", n, 1, 1_700_000_000_000))


def test_with_auth_an_anonymous_client_reads_but_cannot_redirect(zk_chroot: str,
                                                                  clients: Callable[..., KazooClient]) -> None:
    target = ZkServers(zk_chroot, AUTH)
    registration = ServerRegistration(target, "127.0.0.1:11111", session_timeout_ms=SESSION_MS)
    monitor = ServerRunningMonitor(target, "example", "127.0.0.1:11111", session_timeout_ms=SESSION_MS)
    meta = ZooKeeperMetaManager(target, session_timeout_ms=SESSION_MS)
    client = ClientIdentity("example", 1001, "")
    registration.start()
    monitor.start()
    meta.start()
    discovery = ServerDiscovery(zk_chroot, "example", session_timeout_ms=SESSION_MS)  # anonymous, as Canal's
    try:
        assert monitor.wait_for_active(5)
        meta.subscribe(client)
        meta.update_cursor(client, pos(4))
        meta.add_batch(client, PositionRange(pos(4), pos(10), pos(20), 4))
        anon, admin = clients(), clients(auth=True)  # ZooKeeper shows a digest's hash to ADMIN holders only
        acl = [make_digest_acl(AUTH.user, AUTH.password, all=True), make_acl("world", "anyone", read=True)]
        for path in ("/otter", "/otter/canal/cluster", "/otter/canal/cluster/127.0.0.1:11111", DEST, RUNNING,
                     f"{DEST}/fence", f"{DEST}/cluster/127.0.0.1:11111", f"{DEST}/1001", f"{DEST}/1001/cursor",
                     f"{DEST}/1001/mark/" + anon.get_children(f"{DEST}/1001/mark")[0]):
            assert sorted(admin.get_acls(path)[0], key=repr) == sorted(acl, key=repr), path

        assert json.loads(anon.get(RUNNING)[0])["address"] == "127.0.0.1:11111"  # Canal's tooling still reads
        bogus = json.dumps({"active": True, "address": "203.0.113.9:11111"}).encode()
        with pytest.raises(NoAuthError):
            anon.set(RUNNING, bogus)
        with pytest.raises(NoAuthError):
            anon.delete(RUNNING)
        with pytest.raises(NoAuthError):
            anon.create(f"{DEST}/cluster/203.0.113.9:11111", ephemeral=True)
        with pytest.raises(NoAuthError):
            anon.set(f"{DEST}/1001/cursor", b"{}")
        discovery.start()  # the cluster node exists: read-only discovery needs no credentials
        wait_for(lambda: discovery.addresses() == [("127.0.0.1", 11111)], 5)
        assert discovery.cluster() == [("127.0.0.1", 11111)]
    finally:
        discovery.stop()
        meta.stop()
        monitor.stop()
        registration.stop()


def test_with_auth_nodes_made_before_are_locked_at_registration(zk_chroot: str,
                                                                 clients: Callable[..., KazooClient]) -> None:
    anon = clients()
    anon.create(f"{DEST}/1001/cursor", b"{}", makepath=True)  # made while the key was unset: open
    assert anon.get_acls(f"{DEST}/1001/cursor")[0] == OPEN_ACL_UNSAFE
    registration = ServerRegistration(ZkServers(zk_chroot, AUTH), "127.0.0.1:11111", session_timeout_ms=SESSION_MS)
    registration.start()
    try:
        for path in (DEST, f"{DEST}/1001", f"{DEST}/1001/cursor"):
            with pytest.raises(NoAuthError):
                anon.set(path, b"x")
        with pytest.raises(NoAuthError):
            anon.create(f"{DEST}/running", b"{}")
    finally:
        registration.stop()


def test_without_auth_nodes_stay_open_as_in_canal(zk_chroot: str, clients: Callable[..., KazooClient]) -> None:
    monitor = ServerRunningMonitor(zk_chroot, "example", "127.0.0.1:11111", session_timeout_ms=SESSION_MS)
    monitor.start()
    try:
        assert monitor.wait_for_active(5)
        anon = clients()
        for path in ("/otter", DEST, RUNNING, f"{DEST}/fence"):
            assert anon.get_acls(path)[0] == OPEN_ACL_UNSAFE, path
    finally:
        monitor.stop()


@pytest.mark.parametrize(("address", "why"), [
    ("203.0.113.9:99999", "port 99999 is outside 1-65535"),
    ("203.0.113.9:0", "port 0 is outside 1-65535"),
    ("no-port-here", "not ip:port"),
    ("bad host!:11111", "neither an IP address nor a host name"),
    ("203.0.113.9:11111", "outside the allowed servers (127.0.0.0/8, canal-1.example)"),
])
def test_discovery_refuses_an_address_that_fails_the_check(zk_chroot: str, clients: Callable[..., KazooClient],
                                                           address: str, why: str) -> None:
    anon = clients()
    anon.create(f"{DEST}/cluster/127.0.0.1:11111", makepath=True)
    anon.create(RUNNING, json.dumps({"active": True, "address": address}).encode())
    discovery = ServerDiscovery(zk_chroot, "example", session_timeout_ms=SESSION_MS,
                                allowed=["127.0.0.0/8", "canal-1.example"])
    discovery.start()
    try:
        wait_for(lambda: discovery.refused is not None and discovery.cluster() != [], 5)
        assert why in discovery.refused and f"{RUNNING} names {address!r}" in discovery.refused  # type: ignore
        # the bogus active server is left out: clients try the registered ones
        assert discovery.running() is None and discovery.addresses() == [("127.0.0.1", 11111)]
        anon.set(RUNNING, json.dumps({"active": True, "address": "canal-1.example:11111"}).encode())
        wait_for(lambda: discovery.running() == ("canal-1.example", 11111), 5)
    finally:
        discovery.stop()


def test_canal_server_with_the_key_locks_its_nodes(zk_chroot: str, clients: Callable[..., KazooClient],
                                                   mariadb_settings: Any, tmp_path: Path) -> None:
    """canal.zookeeper.auth through canal-server: registration, election and the ZooKeeper meta all use it."""
    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))
        port, metrics_port = a.getsockname()[1], b.getsockname()[1]
    conf = tmp_path / "conf"
    (conf / "example").mkdir(parents=True)
    (conf / "canal.properties").write_text(
        f"canal.ip = 127.0.0.1\ncanal.port = {port}\ncanal.metrics.pull.port = {metrics_port}\n"
        "canal.destinations = example\n"
        f"canal.auto.scan = false\ncanal.zkServers = {zk_chroot}\ncanal.zookeeper.session.timeout = {SESSION_MS}\n"
        f"canal.zookeeper.auth = {AUTH.user}:{AUTH.password}\n"
        "canal.instance.global.spring.xml = classpath:spring/default-instance.xml\n"
        f"canal.file.data.dir = {tmp_path / 'data'}\n")
    (conf / "example" / "instance.properties").write_text(
        f"canal.instance.master.address = {mariadb_settings.host}:{mariadb_settings.port}\n"
        "canal.instance.dbUsername = canal\ncanal.instance.dbPassword = canal\n")
    out = open(tmp_path / "canal.out", "wb")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "canal-server"), "run", "--conf", str(conf),
                             "--run-dir", str(tmp_path / "run")], stdout=out, stderr=out)
    out.close()
    try:
        anon = clients()
        wait_for(lambda: proc.poll() is None and anon.exists(RUNNING) is not None, 30)
        assert json.loads(anon.get(RUNNING)[0])["address"] == f"127.0.0.1:{port}"
        for path in (RUNNING, DEST, f"/otter/canal/cluster/127.0.0.1:{port}"):
            assert [a.id.scheme for a in anon.get_acls(path)[0]] == ["digest", "world"], path
        with pytest.raises(NoAuthError):
            anon.set(RUNNING, json.dumps({"active": True, "address": "203.0.113.9:11111"}).encode())
    finally:
        proc.terminate()
        proc.wait(30)
    assert proc.returncode == 0, (tmp_path / "canal.out").read_text()[-2000:]
