"""ServerRunningMonitor on the private ZooKeeper: one active per destination, Canal's failover timing
(standbys wait 5 s; the previous active re-grabs at once), and split-brain safety: a server cut off from
ZooKeeper by a TCP proxy stops before the standby starts, and its writes are refused by the fence.

Sessions are 2 s here (the server allows 1 s); Canal's 90 s default is canal.zookeeper.session.timeout."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient

from canal_core.meta import FencedError, ZooKeeperMetaManager
from canal_core.meta.zkpayload import encode_server_running
from canal_core.protocol.identity import ClientIdentity
from canal_core.protocol.position import EntryPosition, LogIdentity, LogPosition
from canal_core.protocol.zkpaths import cursor_path, destination_cluster_root, fence_path, server_running_path
from canal_core.server.running import ServerRegistration, ServerRunningMonitor
from tests.support.net import CutProxy
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration

SESSION_MS = 2000
DEST = "example"
A, B = "10.0.0.1:11111", "10.0.0.2:11111"


class Recorder:
    """on_start / on_stop callbacks that record (what, monotonic time)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, float]] = []
        self.lock = threading.Lock()

    def cb(self, what: str) -> Callable[[], None]:
        def f() -> None:
            with self.lock:
                self.events.append((what, time.monotonic()))
        return f

    def times(self, what: str) -> list[float]:
        with self.lock:
            return [t for w, t in self.events if w == what]

    def kinds(self) -> list[str]:
        with self.lock:
            return [w for w, _ in self.events]


def _hostport(connect: str) -> tuple[str, int]:
    host, _, port = connect.split("/", 1)[0].rpartition(":")
    return host, int(port)


def _chroot(connect: str) -> str:
    return "/" + connect.split("/", 1)[1]


@pytest.fixture
def clients(zk_chroot: str, zk_clients: Callable[[str, int], KazooClient]) -> Callable[..., KazooClient]:
    """Factory of started kazoo clients (2 s sessions) on the test's chroot, optionally via a proxy port."""
    host, real = _hostport(zk_chroot)
    return lambda port=None: zk_clients(f"{host}:{port or real}{_chroot(zk_chroot)}", SESSION_MS)


def _monitor(zk: KazooClient, address: str, rec: Recorder, delay_s: float = 5.0) -> ServerRunningMonitor:
    return ServerRunningMonitor(zk, DEST, address, on_start=rec.cb("start"), on_stop=rec.cb("stop"),
                                delay_s=delay_s)


def _a_then_b(clients: Callable[..., KazooClient], settle: float, delay_s: float = 5.0,
              ) -> tuple[KazooClient, tuple[ServerRunningMonitor, Recorder], tuple[ServerRunningMonitor, Recorder]]:
    """Monitors for A and B on clients of their own: A started and active, then B started and given ``settle`` s to
    look at the running node. A's client, then each monitor with its recorder."""
    ra, rb = Recorder(), Recorder()
    za = clients()
    a, b = _monitor(za, A, ra, delay_s), _monitor(clients(), B, rb, delay_s)
    a.start()
    assert a.wait_for_active(5)
    b.start()
    time.sleep(settle)
    return za, (a, ra), (b, rb)


def _running(zk: KazooClient) -> dict[str, Any] | None:
    got = zk.exists(server_running_path(DEST))
    return json.loads(zk.get(server_running_path(DEST))[0]) if got else None


def test_one_active_then_failover_after_the_delay(clients: Callable[..., KazooClient]) -> None:
    look = clients()
    za, (a, ra), (b, rb) = _a_then_b(clients, settle=0.5)
    try:
        assert a.is_active and not b.is_active and ra.kinds() == ["start"] and rb.kinds() == []
        assert look.get(server_running_path(DEST))[0] == b'{"active":true,"address":"10.0.0.1:11111"}'
        assert look.exists(server_running_path(DEST)).ephemeralOwner == za.client_id[0]
        assert sorted(look.get_children(destination_cluster_root(DEST))) == [A, B]
        assert b.active_address == A
        fence_a = a.fence.version
        assert fence_a is not None and look.exists(fence_path(DEST)).version == fence_a

        za.stop()  # the active's session ends (its ephemeral nodes go at once)
        t_gone = time.monotonic()
        t_b = wait_for(lambda: b.is_active, 12)
        assert 5.0 <= t_b - t_gone < 10.0, t_b - t_gone  # Canal's 5 s delay, then at once
        assert ra.kinds() == ["start", "stop"] and rb.kinds() == ["start"]
        assert ra.times("stop")[0] < rb.times("start")[0]
        assert _running(look) == {"active": True, "address": B}
        assert b.fence.version == fence_a + 1 and a.fence.version is None
        assert look.get_children(destination_cluster_root(DEST)) == [B]
    finally:
        b.stop()
        a.stop()
    assert rb.kinds() == ["start", "stop"]
    assert look.exists(server_running_path(DEST)) is None
    assert look.get_children(destination_cluster_root(DEST)) == []


def test_is_active_only_once_on_start_has_returned(clients: Callable[..., KazooClient]) -> None:
    """is_active is what a status page shows: not while the instance is still starting (on_start running)."""
    started, release = threading.Event(), threading.Event()
    seen: list[bool] = []

    def slow_start() -> None:
        started.set()
        release.wait(10)

    m = ServerRunningMonitor(clients(), DEST, A, on_start=slow_start, delay_s=0.0)
    m.start()
    try:
        assert started.wait(10)
        seen.append(m.is_active)
        release.set()
        assert m.wait_for_active(10) and m.is_active
    finally:
        release.set()
        m.stop()
    assert seen == [False] and not m.is_active


def test_previous_active_regrabs_at_once_after_its_session_expired(clients: Callable[..., KazooClient],
                                                                  zk_chroot: str) -> None:
    look = clients()
    za, (a, ra), (b, rb) = _a_then_b(clients, settle=0.3)
    fence0 = a.fence.version
    try:
        # expire A's session from outside (a second connection with its id closes it): A did not release
        thief = KazooClient(hosts=zk_chroot, client_id=za.client_id)
        thief.start(timeout=10)
        thief.stop()
        thief.close()
        t0 = time.monotonic()
        wait_for(lambda: len(ra.times("start")) == 2, 4)
        assert ra.times("start")[1] - t0 < 3.0  # at once, not after the 5 s delay
        assert ra.kinds() == ["start", "stop", "start"]
        assert a.fence.version is not None and a.fence.version > fence0  # a new epoch
        time.sleep(max(0.0, t0 + 5.0 + 1.5 - time.monotonic()))  # past B's delay: B tried and lost
        assert rb.kinds() == [] and not b.is_active and a.is_active
        assert _running(look) == {"active": True, "address": A}
        assert look.exists(server_running_path(DEST)).ephemeralOwner == za.client_id[0]
    finally:
        a.stop()
        b.stop()


DELAY = 3.0


def test_stop_releases_and_a_standby_takes_over_after_its_delay(clients: Callable[..., KazooClient]) -> None:
    look = clients()
    # a delay long enough that B cannot compete again before the released node is looked at on a loaded machine
    _, (a, ra), (b, rb) = _a_then_b(clients, settle=0.3, delay_s=DELAY)
    a.stop()
    t_b = wait_for(lambda: b.is_active, DELAY + 10)  # upper bounds with room for a loaded machine
    try:
        assert ra.kinds() == ["start", "stop"]
        assert t_b - ra.times("stop")[0] >= DELAY  # B waited its delay
        assert _running(look) == {"active": True, "address": B}
        assert look.get_children(destination_cluster_root(DEST)) == [B]
        # a running node rewritten to "active":false for B is a voluntary release (Canal's rule)
        look.set(server_running_path(DEST), encode_server_running(B, active=False))
        wait_for(lambda: not b.is_active, 8)
        assert rb.kinds() == ["start", "stop"] and look.exists(server_running_path(DEST)) is None
        wait_for(lambda: b.is_active, DELAY + 8)  # nobody else: B competes again after its delay
    finally:
        b.stop()


def test_split_brain_cut_active_stops_first_and_is_fenced(clients: Callable[..., KazooClient],
                                                         zk_chroot: str) -> None:
    proxy = CutProxy(_hostport(zk_chroot), hold_new=True)
    look = clients()
    ra, rb = Recorder(), Recorder()
    za = clients(proxy.port)  # A reaches ZooKeeper only through the proxy
    zb = clients()
    a, b = _monitor(za, A, ra), _monitor(zb, B, rb)
    client = ClientIdentity(DEST, 1001)
    ident = LogIdentity("127.0.0.1", 3306, -1)
    try:
        a.start()
        assert a.wait_for_active(5)
        b.start()
        time.sleep(0.3)
        meta_a = ZooKeeperMetaManager(za, fence=a.fence)
        meta_a.start()
        meta_a.subscribe(client)
        meta_a.update_cursor(client, LogPosition(ident, EntryPosition("mysql-bin.000001", 100)))
        stale = a.fence.pinned()  # what A would still hold if it had been paused through the failover

        proxy.cut()
        t_cut = time.monotonic()
        t_b = wait_for(lambda: b.is_active, 15)
        t_a_stop = ra.times("stop")[0]
        t_b_start = rb.times("start")[0]
        # A stopped on its own, from the silence alone, before its session could expire ...
        assert t_a_stop - t_cut < SESSION_MS / 1000, t_a_stop - t_cut
        # ... and so well before B started (the session expiry plus B's 5 s delay later)
        assert t_a_stop < t_b_start and t_b_start - t_a_stop > 5.0, (t_a_stop - t_cut, t_b_start - t_cut)
        assert t_b - t_cut < SESSION_MS / 1000 + 5.0 + 3.0
        assert not a.is_active and a.fence.version is None and b.fence.version == stale.version + 1

        # A's own manager refuses at once, without asking ZooKeeper (its fence was released on the cut)
        t0 = time.monotonic()
        with pytest.raises(FencedError, match="not the active one"):
            meta_a.update_cursor(client, LogPosition(ident, EntryPosition("mysql-bin.000001", 999)))
        assert time.monotonic() - t0 < 0.5
        # a stale holder that still believes in its old version is refused by ZooKeeper itself
        with ZooKeeperMetaManager(look, fence=stale) as meta_stale:
            with pytest.raises(FencedError, match=r"write refused, another server became active"):
                meta_stale.update_cursor(client, LogPosition(ident, EntryPosition("mysql-bin.000001", 999)))
            with pytest.raises(FencedError):
                meta_stale.unsubscribe(client)
        # the new active writes
        with ZooKeeperMetaManager(zb, fence=b.fence) as meta_b:
            meta_b.update_cursor(client, LogPosition(ident, EntryPosition("mysql-bin.000001", 200)))
            assert meta_b.get_cursor(client) == LogPosition(ident, EntryPosition("mysql-bin.000001", 200))

        # the network comes back: A's session is gone, B holds the node, A stays a standby
        proxy.restore()
        wait_for(lambda: za.connected, 10)
        time.sleep(0.5)
        assert not a.is_active and b.is_active and ra.kinds() == ["start", "stop"] and rb.kinds() == ["start"]
        assert _running(look) == {"active": True, "address": B}
        with ZooKeeperMetaManager(za, fence=stale) as meta_stale2:
            with pytest.raises(FencedError):
                meta_stale2.update_cursor(client, LogPosition(ident, EntryPosition("mysql-bin.000001", 999)))
        cursor = json.loads(look.get(cursor_path(DEST, 1001))[0])
        assert cursor["postion"]["position"] == 200
        meta_a.stop()
    finally:
        a.stop()
        b.stop()
        proxy.close()


def test_server_registration_survives_a_session_expiry(clients: Callable[..., KazooClient], zk_chroot: str) -> None:
    look = clients()
    zs = clients()
    reg = ServerRegistration(zs, A)
    reg.start()
    try:
        assert look.get_children("/otter/canal/cluster") == [A]
        assert look.exists(f"/otter/canal/cluster/{A}").ephemeralOwner == zs.client_id[0]
        old = zs.client_id[0]
        thief = KazooClient(hosts=zk_chroot, client_id=zs.client_id)
        thief.start(timeout=10)
        thief.stop()
        thief.close()
        wait_for(lambda: zs.connected and zs.client_id[0] != old
                 and (st := look.exists(f"/otter/canal/cluster/{A}")) is not None
                 and st.ephemeralOwner == zs.client_id[0], 8)
    finally:
        reg.stop()
    assert look.get_children("/otter/canal/cluster") == []
