"""Meta model, memory manager, Canal's batch rules and cursor ordering (canal_core.meta)."""

from __future__ import annotations

import json
import threading

import pytest

from canal_core.meta import (
    BatchLedger,
    BatchNotExistError,
    BatchOrderError,
    CanalMetaError,
    MemoryMetaManager,
    NotSubscribedError,
    PositionRange,
    compare_positions,
    decode_meta_file,
    encode_meta_file,
    meta_position_manager,
    min_position,
)
from canal_core.protocol.identity import ClientIdentity
from canal_core.protocol.position import EntryPosition, LogIdentity, LogPosition

# docs/canal-compat.md §2, verbatim
COMPAT_CURSOR = ('{"identity":{"slaveId":-1,"sourceAddress":{"address":"localhost","port":3306}},"postion":{"gtid":"",'
                 '"included":false,"journalName":"mysql-bin.000004","position":13885,"serverId":1,'
                 '"timestamp":1591600659000}}')
COMPAT_CLIENT = '{"clientId":1001,"destination":"example","filter":""}'
COMPAT_META = '{"clientDatas":[{"clientIdentity":' + COMPAT_CLIENT + ',"cursor":' + COMPAT_CURSOR + '}],' \
              '"destination":"example"}'

IDENT = LogIdentity("localhost", 3306, -1)


def pos(journal: str = "mysql-bin.000004", offset: int = 13885, ts: int | None = 1591600659000,
        ident: LogIdentity = IDENT, gtid: str = "", server_id: int | None = 1) -> LogPosition:
    return LogPosition(ident, EntryPosition(journal, offset, server_id, ts, gtid))


def rng(offset: int, ack: bool = True) -> PositionRange:
    return PositionRange(start=pos(offset=offset), ack=pos(offset=offset + 50) if ack else None,
                         end=pos(offset=offset + 60), end_seq=offset)


C1 = ClientIdentity("example", 1001, "")
C2 = ClientIdentity("example", 1002, "")


# ---- JSON ------------------------------------------------------------------------------------------------

def test_client_identity_json_and_identity() -> None:
    assert C1.to_json() == COMPAT_CLIENT
    assert ClientIdentity.from_json(COMPAT_CLIENT) == C1
    assert ClientIdentity("example").client_id == 1001
    # Canal: equality and hash ignore the filter
    other = ClientIdentity("example", 1001, "db\\..*")
    assert other == C1 and hash(other) == hash(C1) and other.filter == "db\\..*"
    assert ClientIdentity("example", 1001) != ClientIdentity("other", 1001)
    assert str(other) == "ClientIdentity[destination=example,clientId=1001,filter=db\\..*]"
    with pytest.raises(ValueError):
        ClientIdentity("example", 40000)
    # a Java client may write a null filter: fastjson omits it
    assert ClientIdentity.from_json('{"clientId":7,"destination":"d"}').filter == ""


def test_position_range_json() -> None:
    cursor = json.loads(COMPAT_CURSOR)
    r = PositionRange(start=pos(offset=100), ack=pos(), end=pos(offset=20000), end_seq=42)
    # fastjson order (sorted keys), all four fields
    assert r.to_json() == ('{"ack":' + COMPAT_CURSOR + ',"end":' + COMPAT_CURSOR.replace("13885", "20000")
                           + ',"endSeq":42,"start":' + COMPAT_CURSOR.replace("13885", "100") + "}")
    assert PositionRange.from_json(r.to_json()) == r
    # no ack position: the key is omitted (null), endSeq defaults to Canal's -1
    r2 = PositionRange(start=pos(), ack=None, end=pos())
    d = json.loads(r2.to_json())
    assert list(d) == ["end", "endSeq", "start"] and d["endSeq"] == -1 and d["end"] == cursor
    assert PositionRange.from_json(r2.to_json()) == r2
    # ZooKeeper marks carry fastjson's class names
    typed = json.loads(r.to_json(with_type=True))
    assert typed["@type"] == "com.alibaba.otter.canal.protocol.position.PositionRange"
    assert typed["start"]["@type"] == "com.alibaba.otter.canal.protocol.position.LogPosition"
    assert PositionRange.from_json(r.to_json(with_type=True)) == r


def test_meta_file_json_byte_for_byte() -> None:
    assert encode_meta_file("example", [(C1, pos())]) == COMPAT_META.encode()
    assert decode_meta_file(COMPAT_META, "example") == [(C1, pos())]
    # a client without a cursor has no "cursor" key; an empty destination has an empty list
    assert encode_meta_file("example", [(C2, None)]) == \
        b'{"clientDatas":[{"clientIdentity":{"clientId":1002,"destination":"example","filter":""}}],' \
        b'"destination":"example"}'
    assert encode_meta_file("example", []) == b'{"clientDatas":[],"destination":"example"}'
    # raw UTF-8 like fastjson, no \u escapes
    assert "库".encode() in encode_meta_file("example", [(ClientIdentity("example", 1, "库\\..*"), None)])


def test_meta_file_reads_java_output() -> None:
    java = ('{"clientDatas":[{"clientIdentity":{"clientId":1001,"destination":"example"},"cursor":{"@type":'
            '"com.alibaba.otter.canal.protocol.position.LogPosition","identity":{"slaveId":-1,"sourceAddress":'
            '{"address":"localhost","port":3306}},"postion":{"included":false,"journalName":"mysql-bin.000004",'
            '"position":13885,"serverId":1,"timestamp":1591600659000}}},{"clientIdentity":{"clientId":5,'
            '"destination":"other","filter":""}}],"destination":"example"}')
    assert decode_meta_file(java, "example") == [(C1, pos())]  # the other destination's entry is ignored
    assert decode_meta_file("", "example") == [] and decode_meta_file("null", "example") == []


# ---- memory manager --------------------------------------------------------------------------------------

def test_batch_ids_from_one_per_client() -> None:
    m = MemoryMetaManager()
    m.start()
    assert [m.add_batch(C1, rng(i)) for i in range(3)] == [1, 2, 3]
    assert m.add_batch(C2, rng(0)) == 1  # its own counter
    assert m.add_batch(ClientIdentity("other", 1001), rng(0)) == 1  # same id, other destination
    assert m.remove_batch(C1, 1) == rng(0)
    m.clear_all_batches(C1)
    assert m.list_all_batches(C1) == {}
    assert m.add_batch(C1, rng(9)) == 4  # ids are never reused
    assert m.add_batch(C1, rng(10), batch_id=10) == 10  # explicit id (reload) moves the counter past it
    assert m.add_batch(C1, rng(7), batch_id=7) == 7
    assert m.add_batch(C1, rng(11)) == 11
    assert list(m.list_all_batches(C1)) == [4, 7, 10, 11]
    assert m.get_first_batch(C1) == (4, rng(9)) and m.get_last_batch(C1) == (11, rng(11))
    assert m.get_batch(C1, 7) == rng(7) and m.get_batch(C1, 5) is None
    assert m.get_first_batch(C2) == m.get_last_batch(C2) == (1, rng(0))
    assert m.get_first_batch(ClientIdentity("x", 1)) is None
    with pytest.raises(BatchOrderError) as e:
        m.remove_batch(C1, 10)
    assert str(e.value) == "batchId:10 is not the firstly:4"
    assert m.remove_batch(C1, 5) is None  # unknown: the caller words the error
    with pytest.raises(ValueError):
        m.add_batch(C1, rng(1), batch_id=0)
    m.stop()
    assert m.list_all_batches(C1) == {}


def test_subscriptions() -> None:
    m = MemoryMetaManager()
    m.start()
    m.subscribe(C1)
    m.subscribe(C2)
    m.subscribe(ClientIdentity("other", 1001))
    assert m.list_all_subscribe("example") == [C1, C2]
    m.subscribe(C1.with_filter("a\\.b"))  # new filter replaces the old one, same client
    subs = m.list_all_subscribe("example")
    assert subs == [C2, C1] and subs[1].filter == "a\\.b"
    assert m.has_subscribe(ClientIdentity("example", 1001, "whatever"))
    m.update_cursor(C1, pos())
    m.unsubscribe(C1)
    assert not m.has_subscribe(C1) and m.list_all_subscribe("example") == [C2]
    assert m.get_cursor(C1) == pos()  # Canal keeps the in-memory cursor
    m.unsubscribe(C1)  # no-op
    assert m.list_all_subscribe("nothing") == []


# ---- Canal's server rules --------------------------------------------------------------------------------

def _ledger() -> tuple[MemoryMetaManager, BatchLedger]:
    m = MemoryMetaManager()
    m.start()
    m.subscribe(C1)
    return m, BatchLedger(m)


def test_ack_order_and_errors() -> None:
    m, ledger = _ledger()
    ids = [ledger.register(C1, rng(i * 100)) for i in range(3)]
    assert ids == [1, 2, 3]
    with pytest.raises(BatchOrderError) as e:
        ledger.ack(C1, 2)
    assert str(e.value) == "batchId:2 is not the firstly:1"
    assert isinstance(e.value, CanalMetaError) and (e.value.batch_id, e.value.first_id) == (2, 1)
    assert m.get_cursor(C1) is None and list(m.list_all_batches(C1)) == [1, 2, 3]  # nothing changed
    with pytest.raises(BatchNotExistError) as e2:
        ledger.ack(C1, 99)
    assert str(e2.value) == "ack error , clientId:1001 batchId:99 is not exist , please check"
    assert ledger.ack(C1, 1) == rng(0)
    assert m.get_cursor(C1) == rng(0).ack
    with pytest.raises(BatchNotExistError) as e3:
        ledger.ack(C1, 1)  # a second ack of the same batch
    assert str(e3.value) == "ack error , clientId:1001 batchId:1 is not exist , please check"
    ledger.ack(C1, 2)
    assert m.get_cursor(C1) == rng(100).ack
    # a batch ending inside a transaction has no ack position: the cursor stays
    bid = ledger.register(C1, rng(500, ack=False))
    ledger.ack(C1, 3)
    ledger.ack(C1, bid)
    assert m.get_cursor(C1) == rng(200).ack


def test_not_subscribed() -> None:
    _, ledger = _ledger()
    stranger = ClientIdentity("example", 7)
    with pytest.raises(NotSubscribedError) as e:
        ledger.ack(stranger, 1)
    assert str(e.value) == ("ClientIdentity:ClientIdentity[destination=example,clientId=7,filter=] "
                            "should subscribe first")
    with pytest.raises(NotSubscribedError):
        ledger.register(stranger, rng(0))
    assert ledger.rollback(stranger) == [] and ledger.rollback(stranger, 5) == []  # ignored, as Canal


def test_rollback_all() -> None:
    m, ledger = _ledger()
    for i in range(3):
        ledger.register(C1, rng(i * 100))
    ledger.ack(C1, 1)
    assert [b for b, _ in ledger.rollback(C1)] == [2, 3]
    assert m.list_all_batches(C1) == {} and m.get_cursor(C1) == rng(0).ack
    assert ledger.rollback(C1) == []
    assert ledger.register(C1, rng(100)) == 4  # redelivered under a new id


def test_rollback_one_batch() -> None:
    m, ledger = _ledger()
    for i in range(4):
        ledger.register(C1, rng(i * 100))
    ledger.ack(C1, 1)
    with pytest.raises(BatchOrderError) as e:
        ledger.rollback(C1, 3)
    assert str(e.value) == "batchId:3 is not the firstly:2"
    with pytest.raises(BatchNotExistError) as e2:
        ledger.rollback(C1, 1)
    assert str(e2.value) == "rollback error, clientId:1001 batchId:1 is not exist , please check"
    assert list(m.list_all_batches(C1)) == [2, 3, 4]
    # the named batch and every later one go: the store redelivers all of them
    assert [b for b, _ in ledger.rollback(C1, 2)] == [2, 3, 4]
    assert m.list_all_batches(C1) == {} and m.get_cursor(C1) == rng(0).ack
    assert ledger.register(C1, rng(100)) == 5
    ledger.ack(C1, 5)  # acking after a rollback works
    assert m.get_cursor(C1) == rng(100).ack


def test_next_start() -> None:
    m, ledger = _ledger()
    assert ledger.next_start(C1) is None
    ledger.register(C1, rng(0))
    ledger.register(C1, rng(100))
    assert ledger.next_start(C1) == rng(100).end
    ledger.ack(C1, 1)
    ledger.ack(C1, 2)
    assert ledger.next_start(C1) == m.get_cursor(C1) == rng(100).ack


def test_concurrent_acks_keep_order() -> None:
    m, ledger = _ledger()
    n = 2000
    for i in range(n):
        ledger.register(C1, rng(i * 100))
    done: list[int] = []
    errors: list[Exception] = []

    def worker() -> None:
        while True:
            first = m.get_first_batch(C1)
            if first is None:
                return
            try:
                ledger.ack(C1, first[0])
                done.append(first[0])
            except CanalMetaError as e:  # another thread took it first
                errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(done) == list(range(1, n + 1))
    assert m.get_cursor(C1) == rng((n - 1) * 100).ack  # never moved backwards by a late writer


# ---- cursor ordering and the parser's restart position ---------------------------------------------------

def test_compare_positions() -> None:
    assert compare_positions(pos("mysql-bin.000009", 999), pos("mysql-bin.000010", 4)) == -1
    assert compare_positions(pos("mysql-bin.999999", 4), pos("mysql-bin.1000000", 4)) == -1  # numeric, not text
    assert compare_positions(pos(offset=10), pos(offset=9)) == 1
    assert compare_positions(pos(), pos(ts=1)) == 0  # same source: the timestamp does not matter
    a, b = pos(ts=5), pos(offset=1, ts=5)
    assert min_position(a, b) is b and min_position(b, a) is b
    same = pos()
    twin = pos()
    assert min_position(same, twin) is same  # tie: the first one, as Canal
    # another source: offsets are unrelated, the timestamp decides
    other = LogIdentity("10.0.0.2", 3306, -1)
    assert compare_positions(pos(offset=1, ts=2000), pos(offset=999, ts=1000, ident=other)) == 1
    assert compare_positions(pos(ts=None), pos(ts=1000, ident=other)) == -1  # no timestamp = earliest


def test_compare_gtid_cursors() -> None:
    u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    other = LogIdentity("10.0.0.2", 3306, -1)
    small = pos(offset=900, gtid=f"{u}:1-5", ts=3000)
    big = pos(offset=100, ident=other, gtid=f"{u}:1-9", ts=1000)
    assert compare_positions(small, big) == -1 and compare_positions(big, small) == 1  # containment, not time
    # only GTIDs (no journal), same source
    assert compare_positions(pos("", 0, gtid=f"{u}:1-9"), pos("", 0, gtid=f"{u}:1-5")) == 1
    assert compare_positions(pos("", 0, gtid=f"{u}:1-5"), pos("", 0, gtid=f"{u}:1-5")) == 0
    # MariaDB positions: domain by domain
    assert compare_positions(pos("", 0, gtid="0-1-100,1-2-5"), pos("", 0, gtid="0-1-101,1-2-5")) == -1
    # incomparable sets: the timestamp decides
    assert compare_positions(pos("", 0, gtid="0-1-100,1-2-9", ts=1), pos("", 0, gtid="0-1-101,1-2-5", ts=2)) == -1
    assert compare_positions(pos("", 0, gtid="garbage", ts=3), pos("", 0, gtid="0-1-1", ts=2)) == 1
    # same source with journals: journal/offset win over GTIDs
    assert compare_positions(pos(offset=5, gtid="0-1-100"), pos(offset=6, gtid="0-1-1")) == -1


def test_min_cursor_and_position_manager_adapter() -> None:
    m = MemoryMetaManager()
    m.start()
    pm = meta_position_manager(m)
    assert m.min_cursor("example") is None and pm.get_latest("example") is None
    c3 = ClientIdentity("example", 1003)
    for c in (C1, C2, c3):
        m.subscribe(c)
    m.update_cursor(C1, pos(offset=500))
    m.update_cursor(C2, pos("mysql-bin.000003", 9000))
    assert m.min_cursor("example") == pos("mysql-bin.000003", 9000)  # c3 has no cursor: skipped
    m.update_cursor(ClientIdentity("example", 1004), pos("mysql-bin.000001", 4))  # not subscribed: ignored
    m.unsubscribe(C2)
    assert m.min_cursor("example") == pos(offset=500) == pm.get_latest("example")
    assert BatchLedger(m).min_cursor("example") == pos(offset=500)
    assert m.min_cursor("other") is None
