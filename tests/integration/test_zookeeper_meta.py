"""ZooKeeper meta on the private ZooKeeper (scripts/zookeeper.sh): Canal's paths and JSON, marks whose
sequence numbers are the batch ids, recursive unsubscribe, period-mixed flushing and reload, the fence, and a
period-mixed instance over the private MariaDB that resumes from the cursor it keeps in ZooKeeper."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from canal_core.entry.model import CanalEntry
from canal_core.instance.config import CanalConfig
from canal_core.instance.instance import CanalInstance
from canal_core.meta import (
    BatchOrderError,
    Fence,
    FencedError,
    PeriodMixedMetaManager,
    PositionRange,
    ZooKeeperMetaManager,
    ZooKeeperPositionManager,
)
from canal_core.meta.zkpayload import decode_cursor
from canal_core.protocol.identity import ClientIdentity
from canal_core.protocol.position import EntryPosition, LogIdentity, LogPosition
from canal_core.protocol.zkpaths import mark_node
from canal_core.server.embedded import CanalServerWithEmbedded
from tests.support.conf import write_conf
from tests.support.schema import scratch_table
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

IDENT = LogIdentity("127.0.0.1", 3306, -1)


def pos(n: int, journal: str = "mysql-bin.000001") -> LogPosition:
    return LogPosition(IDENT, EntryPosition(journal, n, 1, 1_700_000_000_000 + n))


def rng(n: int) -> PositionRange:
    return PositionRange(pos(n), pos(n + 10), pos(n + 20), n)


@pytest.fixture
def direct(zk_chroot: str) -> Iterator[ZooKeeperMetaManager]:
    m = ZooKeeperMetaManager(zk_chroot)
    m.start()
    yield m
    m.stop()


def test_subscriptions_cursor_and_parse_position_as_canal_writes_them(direct: ZooKeeperMetaManager,
                                                                     zk: KazooClient, zk_chroot: str) -> None:
    a = ClientIdentity("example", 1002, "shop\\..*")
    b = ClientIdentity("example", 1001, "")
    direct.subscribe(a)
    direct.subscribe(b)
    assert sorted(zk.get_children("/otter/canal/destinations/example")) == ["1001", "1002"]
    assert zk.get("/otter/canal/destinations/example/1002/filter")[0] == b"shop\\..*"
    assert zk.exists("/otter/canal/destinations/example/1001/filter") is None  # only when non-empty
    assert zk.get("/otter/canal/destinations/example/1001")[0] == b""
    got = direct.list_all_subscribe("example")
    assert [(c.client_id, c.filter) for c in got] == [(1001, ""), (1002, "shop\\..*")]  # client id order
    assert direct.has_subscribe(a) and not direct.has_subscribe(ClientIdentity("example", 7))

    # subscribing again with another filter rewrites it; with none, removes it
    direct.subscribe(a.with_filter("shop\\.orders"))
    assert zk.get("/otter/canal/destinations/example/1002/filter")[0] == b"shop\\.orders"
    direct.subscribe(a.with_filter(""))
    assert zk.exists("/otter/canal/destinations/example/1002/filter") is None

    cursor = pos(4711, "mysql-bin.000004")
    assert direct.get_cursor(a) is None
    direct.update_cursor(a, cursor)
    raw = zk.get("/otter/canal/destinations/example/1002/cursor")[0]
    assert raw.startswith(b'{"@type":"com.alibaba.otter.canal.protocol.position.LogPosition","identity":{')
    d = json.loads(raw)
    assert list(d) == ["@type", "identity", "postion"]
    assert list(d["postion"]) == ["gtid", "included", "journalName", "position", "serverId", "timestamp"]
    assert d["postion"]["journalName"] == "mysql-bin.000004" and d["postion"]["position"] == 4711
    assert direct.get_cursor(a) == cursor
    assert direct.min_cursor("example") == cursor  # b has no cursor: skipped

    parse = ZooKeeperPositionManager(zk_chroot)
    with parse:
        assert parse.get_latest("example") is None
        parse.persist("example", pos(99))
        raw = zk.get("/otter/canal/destinations/example/parse")[0]
        assert b"@type" not in raw and json.loads(raw)["postion"]["position"] == 99
        parse.persist("example", pos(100))
        assert parse.get_latest("example") == pos(100)


def test_marks_are_persistent_sequential_and_their_sequence_is_the_batch_id(direct: ZooKeeperMetaManager,
                                                                           zk: KazooClient) -> None:
    c = ClientIdentity("example", 1001)
    direct.subscribe(c)
    ids = [direct.add_batch(c, rng(n)) for n in (10, 20, 30)]
    names = sorted(zk.get_children("/otter/canal/destinations/example/1001/mark"))
    assert [int(n) for n in names] == ids and all(len(n) == 10 for n in names)
    assert ids == sorted(ids) and ids[0] >= 1  # never 0: that is "roll back all" / error 402 on the wire
    raw = zk.get(f"/otter/canal/destinations/example/1001/mark/{names[0]}")[0]
    assert json.loads(raw)["@type"] == "com.alibaba.otter.canal.protocol.position.PositionRange"
    assert direct.get_batch(c, ids[1]) == rng(20)
    assert direct.get_first_batch(c) == (ids[0], rng(10)) and direct.get_last_batch(c) == (ids[2], rng(30))
    assert direct.list_all_batches(c) == {ids[0]: rng(10), ids[1]: rng(20), ids[2]: rng(30)}

    with pytest.raises(BatchOrderError, match=f"batchId:{ids[1]} is not the firstly:{ids[0]}"):
        direct.remove_batch(c, ids[1])
    assert direct.remove_batch(c, 999) is None
    assert direct.remove_batch(c, ids[0]) == rng(10)
    assert zk.exists(f"/otter/canal/destinations/example/1001/mark/{names[0]}") is None

    assert direct.add_batch(c, rng(40), batch_id=77) == 77  # an explicit id: mark/0000000077
    assert zk.exists("/otter/canal/destinations/example/1001/mark/0000000077") is not None
    direct.clear_all_batches(c)
    assert zk.get_children("/otter/canal/destinations/example/1001/mark") == []
    assert direct.add_batch(c, rng(50)) > ids[-1]  # ids are not reused after a clear

    # a mark node created by another writer (a Java Canal) would hand out 0 first: we skip it
    other = ClientIdentity("example", 1003)
    direct.subscribe(other)
    zk.create("/otter/canal/destinations/example/1003/mark")
    assert direct.add_batch(other, rng(1)) >= 1


def test_unsubscribe_deletes_the_client_recursively(direct: ZooKeeperMetaManager, zk: KazooClient) -> None:
    c = ClientIdentity("example", 1001, "a\\.b")
    keep = ClientIdentity("example", 1002)
    for x in (c, keep):
        direct.subscribe(x)
        direct.update_cursor(x, pos(5))
        direct.add_batch(x, rng(1))
        direct.add_batch(x, rng(2))
    zk.create("/otter/canal/destinations/example/1001/running", b"{}", ephemeral=True)  # a consumer's node
    direct.unsubscribe(c)
    assert zk.exists("/otter/canal/destinations/example/1001") is None
    assert not direct.has_subscribe(c) and direct.get_cursor(c) is None and direct.list_all_batches(c) == {}
    assert direct.get_cursor(keep) == pos(5) and len(direct.list_all_batches(keep)) == 2
    direct.unsubscribe(c)  # nothing left: no error


def _wait(cond: Any, timeout: float, step: float = 0.01) -> float:
    """Seconds until cond() is true; fails after timeout."""
    t0 = time.monotonic()
    wait_until(cond, timeout, step=step)
    return time.monotonic() - t0


def test_period_mixed_flushes_each_period_and_coalesces(zk_chroot: str, zk: KazooClient) -> None:
    period_ms = 400
    m = PeriodMixedMetaManager(zk_chroot, flush_period_ms=period_ms)
    m.start()
    try:
        c = ClientIdentity("example", 1001, "x\\..*")
        m.subscribe(c)  # written soon by the flusher, not at the next period
        assert _wait(lambda: zk.exists("/otter/canal/destinations/example/1001/filter") is not None, 2) < 0.3
        cursor_node = "/otter/canal/destinations/example/1001/cursor"
        for n in range(1, 31):  # 30 acks in a burst
            m.update_cursor(c, pos(n))
        t = _wait(lambda: zk.exists(cursor_node) is not None and decode_cursor(zk.get(cursor_node)[0],
                                                                               where="") == pos(30), 3)
        assert t <= period_ms / 1000 + 0.3, t
        stat = zk.exists(cursor_node)
        assert stat is not None and stat.version <= 1, stat  # created once, set at most once: not 30 writes
        # memory is ahead of ZooKeeper between flushes; the next period writes only what changed
        m.update_cursor(c, pos(31))
        assert m.get_cursor(c) == pos(31)
        _wait(lambda: decode_cursor(zk.get(cursor_node)[0], where="") == pos(31), period_ms / 1000 + 0.5)
        time.sleep(2.5 * period_ms / 1000)
        stat2 = zk.exists(cursor_node)
        assert stat2 is not None and stat2.version == stat.version + 1  # idle periods write nothing
    finally:
        m.stop()


def test_period_mixed_restart_reads_back_and_stop_flushes(zk_chroot: str, zk: KazooClient) -> None:
    c = ClientIdentity("example", 1001, "x\\..*")
    m1 = PeriodMixedMetaManager(zk_chroot, flush_period_ms=60_000)  # only stop() will flush the cursor
    m1.start()
    m1.subscribe(c)
    m1.update_cursor(c, pos(7))
    m1.add_batch(c, rng(1))  # batches stay in memory (Canal's period-mixed)
    t0 = time.monotonic()
    m1.stop()
    assert time.monotonic() - t0 < 2
    assert decode_cursor(zk.get("/otter/canal/destinations/example/1001/cursor")[0], where="") == pos(7)
    assert zk.exists("/otter/canal/destinations/example/1001/mark") is None

    # marks a direct manager left are loaded with the destination, under their ids
    direct = ZooKeeperMetaManager(zk_chroot)
    with direct:
        bid = direct.add_batch(c, rng(3))
    m2 = PeriodMixedMetaManager(zk_chroot, flush_period_ms=1000)
    m2.start()
    try:
        subs = m2.list_all_subscribe("example")
        assert [(s.client_id, s.filter) for s in subs] == [(1001, "x\\..*")]
        assert m2.get_cursor(c) == pos(7) and m2.list_all_batches(c) == {bid: rng(3)}
        assert m2.add_batch(c, rng(4)) == bid + 1  # the counter continues past what was loaded
        m2.unsubscribe(c)
        _wait(lambda: zk.exists("/otter/canal/destinations/example/1001") is None, 2)
    finally:
        m2.stop()


def test_fence_refuses_writes_of_a_stale_holder(zk_chroot: str, zk: KazooClient) -> None:
    fence_node = "/otter/canal/destinations/example/fence"
    zk.ensure_path(fence_node)
    held = zk.set(fence_node, b"a").version
    c = ClientIdentity("example", 1001)
    fence = Fence("example", held)
    m = ZooKeeperMetaManager(zk_chroot, fence=fence)
    m.start()
    try:
        m.subscribe(c)
        m.update_cursor(c, pos(1))
        bid = m.add_batch(c, rng(1))
        zk.set(fence_node, b"b")  # another server took over
        with pytest.raises(FencedError, match=rf"write refused.*version {held + 1}, this server holds {held}"):
            m.update_cursor(c, pos(2))
        with pytest.raises(FencedError):
            m.add_batch(c, rng(2))
        with pytest.raises(FencedError):
            m.remove_batch(c, bid)
        with pytest.raises(FencedError):
            m.unsubscribe(c)
        with pytest.raises(FencedError):
            m.subscribe(ClientIdentity("example", 1002))
        # nothing changed in ZooKeeper
        assert decode_cursor(zk.get("/otter/canal/destinations/example/1001/cursor")[0], where="") == pos(1)
        assert zk.get_children("/otter/canal/destinations/example/1001/mark") == [mark_node(bid)]
        assert not zk.exists("/otter/canal/destinations/example/1002")
        # the same manager with the current version writes again; a released fence refuses without asking
        fence.hold(held + 1)
        m.update_cursor(c, pos(3))
        assert m.get_cursor(c) == pos(3)
        fence.release()
        with pytest.raises(FencedError, match="not the active one"):
            m.update_cursor(c, pos(4))
        # other destinations are not fenced by this fence
        m.update_cursor(ClientIdentity("other", 1001), pos(5))
    finally:
        m.stop()

    # period-mixed: a refused flush drops the cursor (it belongs to the new active) and stop() still works
    pm = PeriodMixedMetaManager(zk_chroot, flush_period_ms=60_000, fence=Fence("example", held))
    pm.start()
    pm.update_cursor(c, pos(8))
    with pytest.raises(FencedError):
        pm.flush()
    pm.stop()
    assert decode_cursor(zk.get("/otter/canal/destinations/example/1001/cursor")[0], where="") == pos(3)


# ---- a period-mixed instance over the private MariaDB ----------------------------------------------------

ROWDATA = 2


def _ids(entries: list[bytes]) -> list[int]:
    from canal_core.protocol.proto import EntryProtocol_pb2 as pb

    out = []
    for raw in entries:
        e = CanalEntry.from_bytes(raw).entry
        if e.entryType == ROWDATA:
            for rd in pb.RowChange.FromString(e.storeValue).rowDatas:
                out.append(int((rd.afterColumns or rd.beforeColumns)[0].value))
    return out


def _drain(server: CanalServerWithEmbedded, client: ClientIdentity, want: set[int], timeout: float = 30) -> list[int]:
    seen: list[int] = []
    deadline = time.monotonic() + timeout
    while not want <= set(seen) and time.monotonic() < deadline:
        msg = server.get_without_ack(client, 5, 0.3)
        if not msg.empty:
            seen += _ids(msg.raw_entries)
            server.ack(client, msg.batch_id)
    return seen


@pytest.fixture
def zk_table(admin_conn: Any) -> Iterator[str]:
    with scratch_table(admin_conn, "canal_test.zk_meta_t", "(id INT PRIMARY KEY, v VARCHAR(20))"):
        yield "zk_meta_t"


def test_period_mixed_instance_resumes_from_its_zookeeper_cursor(mariadb_settings: Any, admin_conn: Any,
                                                                 zk_table: str, zk_chroot: str, zk: KazooClient,
                                                                 tmp_path: Path) -> None:
    conf = write_conf(tmp_path, "canal.destinations = example\n"
                      f"canal.file.data.dir = {tmp_path / 'data'}\n"
                      "canal.instance.global.spring.xml = classpath:spring/default-instance.xml\n"
                      f"canal.zkServers = {zk_chroot}\n"
                      "canal.zookeeper.flush.period = 200\n"
                      "canal.instance.memory.batch.mode = ITEMSIZE\n",
                      {"example": f"canal.instance.master.address = 127.0.0.1:{mariadb_settings.port}\n"
                                  "canal.instance.filter.regex = canal_test\\\\.zk_meta_t\n"})
    client = ClientIdentity("example", 1001, "")

    def run(ids: range) -> list[int]:
        canal = CanalConfig.load(conf)
        server = CanalServerWithEmbedded()
        server.start(CanalInstance.from_config(canal, canal.instance("example")))
        try:
            server.subscribe(client)
            time.sleep(0.7)  # the parser has found where to start
            with admin_conn.cursor() as cur:
                for i in ids:
                    cur.execute("INSERT INTO canal_test.zk_meta_t VALUES (%s, 'x')", (i,))
            return _drain(server, client, set(ids))
        finally:
            server.stop_all()  # flushes the last cursor to ZooKeeper

    first = run(range(1, 11))
    assert first == list(range(1, 11))
    raw = zk.get("/otter/canal/destinations/example/1001/cursor")[0]
    cursor = json.loads(raw)
    assert cursor["@type"] == "com.alibaba.otter.canal.protocol.position.LogPosition"
    assert cursor["postion"]["journalName"].startswith("mysql-bin.") and cursor["postion"]["position"] > 4
    assert cursor["identity"]["sourceAddress"]["port"] == mariadb_settings.port

    # a new instance (another server after a failover) resumes from that cursor: nothing acked comes again
    second = run(range(11, 16))
    assert second == list(range(11, 16))
