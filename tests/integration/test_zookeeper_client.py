"""Client side of ZooKeeper on the private ZooKeeper: one active consumer per (destination, client id)
(ClientRunningMonitor) and discovery of the server running a destination (ServerDiscovery)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from canal_core.client.running import ClientRunningMonitor
from canal_core.client.zookeeper import ServerDiscovery
from canal_core.protocol.zkpaths import destination_cluster_path
from canal_core.server.running import ServerRunningMonitor
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration

SESSION_MS = 2000


@pytest.fixture
def clients(zk_chroot: str, zk_clients: Callable[[str, int], KazooClient]) -> Callable[[], KazooClient]:
    return lambda: zk_clients(zk_chroot, SESSION_MS)


def test_one_active_consumer_per_client_id(clients: Callable[[], KazooClient]) -> None:
    look = clients()
    events: list[str] = []
    lock = threading.Lock()

    def rec(what: str, result: str | None = None) -> Callable[[], str | None]:
        def f() -> str | None:
            with lock:
                events.append(what)
            return result
        return f

    za, zb = clients(), clients()
    # A publishes the local address of its server connection, as Canal's client does
    a = ClientRunningMonitor(za, "example", 1001, "10.0.0.7:0", on_start=rec("a+", "10.0.0.7:40001"),
                             on_stop=rec("a-"), delay_s=1.0)
    b = ClientRunningMonitor(zb, "example", 1001, "10.0.0.8:0", on_start=rec("b+"), on_stop=rec("b-"),
                             delay_s=1.0)
    other = ClientRunningMonitor(clients(), "example", 1002, "10.0.0.8:0", on_start=rec("o+"), delay_s=1.0)
    a.start()
    assert a.wait_for_active(5)
    b.start()
    other.start()
    try:
        assert other.wait_for_active(5)  # another client id is another election
        time.sleep(0.3)
        assert a.is_active and not b.is_active
        node = "/otter/canal/destinations/example/1001/running"
        assert json.loads(look.get(node)[0]) == {"active": True, "address": "10.0.0.7:40001", "clientId": 1001}
        assert list(json.loads(look.get(node)[0])) == ["active", "address", "clientId"]
        za.stop()  # the active consumer dies
        t0 = time.monotonic()
        t_b = wait_for(lambda: b.is_active, 5)
        assert 1.0 <= t_b - t0 < 3.0
        assert events == ["a+", "o+", "a-", "b+"]
        assert json.loads(look.get(node)[0]) == {"active": True, "address": "10.0.0.8:0", "clientId": 1001}
    finally:
        for m in (a, b, other):
            m.stop()
    assert look.exists("/otter/canal/destinations/example/1001/running") is None


def test_discovery_follows_the_running_server(clients: Callable[[], KazooClient], zk_chroot: str) -> None:
    seen: list[list[tuple[str, int]]] = []
    disc = ServerDiscovery(zk_chroot, "example")
    disc.start()
    try:
        disc.watch(lambda addrs: seen.append(addrs))
        assert disc() == [] and seen == [[]]  # nothing registered: nothing to try
        # a registered server without a running instance is offered (Canal: it may start lazily)
        look = clients()
        look.create(destination_cluster_path("example", "10.0.0.9:11111"), ephemeral=True, makepath=True)
        wait_for(lambda: disc() == [("10.0.0.9", 11111)], 5)
        look.delete(destination_cluster_path("example", "10.0.0.9:11111"))

        a = ServerRunningMonitor(clients(), "example", "127.0.0.1:21111", delay_s=0.5)
        b = ServerRunningMonitor(clients(), "example", "127.0.0.1:21112", delay_s=0.5)
        try:
            a.start()
            assert a.wait_for_active(5)
            b.start()
            assert disc.wait_for_running(5) == ("127.0.0.1", 21111)
            wait_for(lambda: disc() == [("127.0.0.1", 21111)], 5)
            wait_for(lambda: sorted(disc.cluster()) == [("127.0.0.1", 21111), ("127.0.0.1", 21112)], 5)
            a.stop()
            assert disc.wait_for_running(5, lambda addr: addr == ("127.0.0.1", 21112)) == ("127.0.0.1", 21112)
            assert disc() == [("127.0.0.1", 21112)]
            assert [("127.0.0.1", 21112)] in seen and [("127.0.0.1", 21111)] in seen
            b.stop()
            wait_for(lambda: disc() == [], 5)
        finally:
            a.stop()
            b.stop()
    finally:
        disc.stop()
