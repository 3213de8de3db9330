"""The memory event store (canal_core.store): Canal's MemoryEventStoreWithBuffer semantics."""

from __future__ import annotations

import threading
import time

import pytest

from canal_core.entry.model import (
    ENTRY_HEARTBEAT,
    ENTRY_ROWDATA,
    ENTRY_TRANSACTIONBEGIN,
    ENTRY_TRANSACTIONEND,
    CanalEntry,
)
from canal_core.parse.model import EVENT_ALTER, EVENT_INSERT, EVENT_QUERY, EVENT_UPDATE
from canal_core.protocol.position import EntryPosition
from canal_core.protocol.proto import EntryProtocol_pb2 as pb
from canal_core.store import (
    CANCEL_POLL,
    KEY_BATCH_MODE,
    KEY_BUFFER_SIZE,
    KEY_DDL_ISOLATION,
    KEY_MEM_UNIT,
    BatchMode,
    MemoryEventStore,
    StoreClosed,
    StoredEvent,
    StoreError,
)

WAIT = 5.0  # upper bound for anything a test waits on; the happy paths finish in milliseconds


def ev(offset: int, entry_type: int = ENTRY_ROWDATA, event_type: int = EVENT_INSERT, size: int = 10,
       rows: int = 1, ts: int | None = None) -> StoredEvent:
    pos = EntryPosition("mysql-bin.000001", offset, timestamp=1_700_000_000_000 + offset if ts is None else ts)
    return StoredEvent(b"e%d" % offset, pos, entry_type, event_type, rows, size=size)


def txn(start: int, n_rows: int, size: int = 10) -> list[StoredEvent]:
    """BEGIN, n row entries, END at offsets start, start+1, ..."""
    out = [ev(start, ENTRY_TRANSACTIONBEGIN, 0, size, 0)]
    out += [ev(start + 1 + i, size=size) for i in range(n_rows)]
    out.append(ev(start + 1 + n_rows, ENTRY_TRANSACTIONEND, 0, size, 0))
    return out


def offsets(batch) -> list[int]:
    return [e.position.position for e in batch.events]


def in_thread(fn, *args):
    """Run fn in a daemon thread; returns (thread, result dict with 'value' or 'error')."""
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = fn(*args)
        except BaseException as exc:  # handed back to the test
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def wait_until(cond, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


# ---------------------------------------------------------------- configuration


@pytest.mark.parametrize("size", [0, -4, 3, 100, 16383, 1.5, True, "16"])
def test_buffer_size_must_be_power_of_two(size):
    with pytest.raises(ValueError, match=KEY_BUFFER_SIZE):
        MemoryEventStore(buffer_size=size)


@pytest.mark.parametrize("size", [1, 2, 1024, 16384, 1 << 20])
def test_power_of_two_sizes_accepted(size):
    assert MemoryEventStore(buffer_size=size).buffer_size == size


def test_defaults_and_other_validation():
    st = MemoryEventStore()
    assert (st.buffer_size, st.mem_unit, st.batch_mode, st.ddl_isolation) == (16384, 1024, BatchMode.MEMSIZE, False)
    assert (st.put_seq, st.get_seq, st.ack_seq) == (-1, -1, -1)
    with pytest.raises(ValueError, match=KEY_MEM_UNIT):
        MemoryEventStore(mem_unit=0)
    with pytest.raises(ValueError, match=KEY_BATCH_MODE):
        MemoryEventStore(batch_mode="BYTES")
    assert MemoryEventStore(batch_mode="itemsize").batch_mode is BatchMode.ITEMSIZE


def test_from_properties():
    st = MemoryEventStore.from_properties({KEY_BUFFER_SIZE: "64", KEY_MEM_UNIT: "16", KEY_BATCH_MODE: "ITEMSIZE",
                                           KEY_DDL_ISOLATION: "true"})
    assert (st.buffer_size, st.mem_unit, st.batch_mode, st.ddl_isolation) == (64, 16, BatchMode.ITEMSIZE, True)
    with pytest.raises(ValueError, match=KEY_BUFFER_SIZE):
        MemoryEventStore.from_properties({KEY_BUFFER_SIZE: "1000"})
    with pytest.raises(ValueError, match=KEY_MEM_UNIT):
        MemoryEventStore.from_properties({KEY_MEM_UNIT: "1k"})
    with pytest.raises(ValueError, match=KEY_DDL_ISOLATION):
        MemoryEventStore.from_properties({KEY_DDL_ISOLATION: "yes"})


# ---------------------------------------------------------------- StoredEvent


def _pb_entry(entry_type: int, event_type: int, offset: int, rows_count: int | None = None) -> bytes:
    msg = pb.Entry(entryType=entry_type)
    h = msg.header
    h.logfileName, h.logfileOffset, h.executeTime = "mysql-bin.000003", offset, 1234
    h.schemaName, h.tableName = "s", "t"
    if event_type:
        h.eventType = event_type
    if rows_count is not None:
        h.props.add(key="rowsCount", value=str(rows_count))
    msg.storeValue = pb.RowChange(sql=f"-- {offset}").SerializeToString()
    return msg.SerializeToString()


def test_stored_event_from_entry_keeps_bytes_not_rows():
    data = _pb_entry(ENTRY_ROWDATA, EVENT_UPDATE, 120)
    pos = EntryPosition("mysql-bin.000003", 120, timestamp=1234)
    entry = CanalEntry(ENTRY_ROWDATA, EVENT_UPDATE, "s", "t", pos, rows=[((1,), (2,)), ((3,), (4,))],
                       _encode=lambda: data)
    se = StoredEvent.from_entry(entry)
    assert se.data == data and se.size == len(data) and se.position is pos
    assert (se.entry_type, se.rows, se.is_ddl, se.ends_transaction, se.ack_point) == (ENTRY_ROWDATA, 2, False,
                                                                                      False, False)
    assert not hasattr(se, "__dict__")  # slots: nothing else can hang off it
    ddl = StoredEvent.from_entry(CanalEntry.from_bytes(_pb_entry(ENTRY_ROWDATA, EVENT_ALTER, 200)))
    assert (ddl.is_ddl, ddl.ack_point, ddl.rows) == (True, True, 0)
    query = StoredEvent.from_entry(CanalEntry.from_bytes(_pb_entry(ENTRY_ROWDATA, EVENT_QUERY, 210)))
    assert (query.is_ddl, query.ack_point) == (False, False)  # Canal's isDdl leaves plain QUERY out
    end = StoredEvent.from_entry(CanalEntry.from_bytes(_pb_entry(ENTRY_TRANSACTIONEND, 0, 300)))
    assert (end.ends_transaction, end.ack_point, end.rows) == (True, True, 0)
    # rows read back from the header's rowsCount when the entry came from bytes
    assert StoredEvent.from_entry(CanalEntry.from_bytes(_pb_entry(ENTRY_ROWDATA, EVENT_INSERT, 1, 7))).rows == 7
    assert StoredEvent.from_entry(CanalEntry.from_bytes(_pb_entry(ENTRY_ROWDATA, EVENT_INSERT, 1))).rows == 1


# ---------------------------------------------------------------- batching


def test_itemsize_batches():
    st = MemoryEventStore(buffer_size=16, batch_mode="ITEMSIZE")
    assert st.put([ev(i) for i in range(10)]) == 10
    b = st.try_get(4)
    assert offsets(b) == [0, 1, 2, 3] and (b.first_seq, b.end_seq) == (0, 3)
    assert offsets(st.try_get(4)) == [4, 5, 6, 7]
    assert offsets(st.try_get(4)) == [8, 9]  # what is there
    assert len(st.try_get(4)) == 0
    assert st.get_seq == 9


def test_memsize_batches_overshoot_by_one_and_at_least_one():
    st = MemoryEventStore(buffer_size=64, mem_unit=10)  # budget per batch unit = 10 bytes
    st.put([ev(i, size=4) for i in range(20)])
    # batch_size 1 -> 10 bytes: take while bytes taken so far <= 10: 0,4,8 -> take, 12 -> stop: 3 events (12 B)
    b = st.try_get(1)
    assert offsets(b) == [0, 1, 2] and sum(e.size for e in b.events) == 12
    # 20 bytes: bytes taken before each event 0, 4, ..., 20 are <= 20 -> 6 events (24 B)
    assert offsets(st.try_get(2)) == [3, 4, 5, 6, 7, 8]
    big = MemoryEventStore(buffer_size=8, mem_unit=10)
    big.put([ev(0, size=500), ev(1, size=1)])
    assert offsets(big.try_get(1)) == [0]  # larger than the whole budget: still returned, alone
    assert offsets(big.try_get(1)) == [1]


def test_memsize_get_waits_for_enough_bytes_then_times_out_with_what_is_there():
    st = MemoryEventStore(buffer_size=64, mem_unit=10)
    st.put([ev(0, size=5)])
    t0 = time.monotonic()
    b = st.get(1, timeout=0.05)  # wants 10 bytes, has 5: waits the timeout, then returns what is there
    assert time.monotonic() - t0 >= 0.045 and offsets(b) == [0]
    t, out = in_thread(st.get, 2, WAIT)  # wants 20 bytes
    st.put([ev(1, size=5)])
    time.sleep(0.01)
    assert t.is_alive()
    st.put([ev(2, size=15)])  # now 20 un-got bytes: the get returns at once
    t.join(WAIT)
    assert offsets(out["value"]) == [1, 2]


def test_itemsize_get_waits_for_batch_size_items():
    st = MemoryEventStore(buffer_size=16, batch_mode="ITEMSIZE")
    t, out = in_thread(st.get, 3)  # no timeout: waits for 3 items
    st.put([ev(0)])
    st.put([ev(1)])
    time.sleep(0.01)
    assert t.is_alive()
    st.put([ev(2), ev(3)])
    t.join(WAIT)
    assert offsets(out["value"]) == [0, 1, 2]


def test_get_wait_ends_when_store_is_full():
    # a batch bigger than the store could ever hold must not wait forever (Canal would)
    st = MemoryEventStore(buffer_size=4, batch_mode="ITEMSIZE")
    t, out = in_thread(st.get, 100)
    st.put([ev(i) for i in range(4)])
    t.join(WAIT)
    assert offsets(out["value"]) == [0, 1, 2, 3]


def test_wait_for_takes_nothing_and_ends_when_cancelled():
    st = MemoryEventStore(buffer_size=16, batch_mode="ITEMSIZE")
    st.put([ev(0)])
    gone = threading.Event()
    t, out = in_thread(st.wait_for, 3, None, gone.is_set)
    time.sleep(0.05)
    assert t.is_alive()
    t0 = time.monotonic()
    gone.set()  # e.g. the client's connection closed
    t.join(WAIT)
    assert out["value"] is False and time.monotonic() - t0 < 2 * CANCEL_POLL
    assert st.wait_for(3, 0.01) is False and st.get_if_enough(3) is None
    st.put([ev(1), ev(2)])
    assert st.wait_for(3) is True and st.get_seq == -1  # nothing taken
    assert offsets(st.get_if_enough(3)) == [0, 1, 2]
    t, out = in_thread(st.get, 1, None, gone.is_set)  # a cancelled get returns what is there: nothing
    t.join(WAIT)
    assert out["value"].events == []


@pytest.mark.parametrize("mode", ["ITEMSIZE", "MEMSIZE"])
def test_transaction_put_and_blocking_get_never_wait_on_each_other(mode):
    # 2 free slots, transactions of 3 events: the parser's put has room for 2 of them. It stores those
    # and waits for one slot; the store is then full by the same test a waiting get uses, so a get that wants
    # more than the store holds returns, its ack frees room and the parser goes on
    st = MemoryEventStore(buffer_size=8, mem_unit=1024, batch_mode=mode)
    st.put(txn(0, 1) + txn(3, 1))  # two transactions: 6 of 8 slots
    parser, put_out = in_thread(lambda: [st.put(txn(100 + 3 * i, 1)) for i in range(3)])
    wait_until(lambda: st._put_waiters == 1)
    getter, get_out = in_thread(st.get, 1000)  # a blocking get far bigger than anything stored
    getter.join(WAIT)
    assert not getter.is_alive(), "blocking get and waiting put deadlocked"
    batch = get_out["value"]
    assert len(batch) == 8 and offsets(batch)[-2:] == [100, 101]  # the split transaction's first part came too
    st.ack(seq=batch.end_seq)
    parser.join(WAIT)
    assert put_out["value"] == [3, 3, 3]
    rest = st.try_get(1000)
    assert offsets(rest) == [102, 103, 104, 105, 106, 107, 108]


@pytest.mark.parametrize("mode", ["ITEMSIZE", "MEMSIZE"])
def test_ddl_isolation(mode):
    st = MemoryEventStore(buffer_size=32, mem_unit=1000, batch_mode=mode, ddl_isolation=True)
    st.put([*txn(0, 2), ev(4, event_type=EVENT_ALTER), ev(5, event_type=EVENT_ALTER), *txn(6, 1)])
    b = st.try_get(100)
    assert offsets(b) == [0, 1, 2, 3]  # stops before the DDL
    b = st.try_get(100)
    assert offsets(b) == [4] and b.ack == b.events[0].position  # the DDL alone, and an ack point
    assert offsets(st.try_get(100)) == [5]
    assert offsets(st.try_get(100)) == [6, 7, 8]
    plain = MemoryEventStore(buffer_size=32, batch_mode=mode)
    plain.put([*txn(0, 2), ev(4, event_type=EVENT_ALTER), *txn(5, 1)])
    assert offsets(plain.try_get(100)) == list(range(8))


def test_batch_ack_position_rule():
    st = MemoryEventStore(buffer_size=32, batch_mode="ITEMSIZE")
    st.put(txn(0, 3) + txn(5, 3) + [ev(10, event_type=EVENT_ALTER)] + [ev(11, ENTRY_HEARTBEAT, 0)])
    b = st.try_get(3)  # BEGIN, row, row: no transaction end in it
    assert b.ack is None and (b.start.position, b.end.position) == (0, 2)
    b = st.try_get(4)  # row, END(4), BEGIN(5), row: the END
    assert b.ack.position == 4
    b = st.try_get(4)  # rows, END(9), DDL(10): the DDL, the last ack point
    assert offsets(b) == [7, 8, 9, 10] and b.ack.position == 10
    b = st.try_get(4)  # heartbeat only
    assert b.ack is None


# ---------------------------------------------------------------- ack / rollback


def test_ack_by_seq_and_position_frees_slots():
    st = MemoryEventStore(buffer_size=8, batch_mode="ITEMSIZE")
    st.put([ev(i) for i in range(8)])
    assert st.try_put([ev(8)]) == 0  # full
    b = st.try_get(3)
    with pytest.raises(StoreError, match="no match ack position"):
        st.ack(seq=5)  # not got yet
    assert st.ack(seq=b.end_seq) == 3
    with pytest.raises(StoreError, match="no match ack position"):
        st.ack(seq=b.end_seq)  # already acked
    assert st.try_put([ev(8), ev(9), ev(10)]) == 3
    st.try_get(3)
    assert st.ack(position=EntryPosition("mysql-bin.000001", 4)) == 2  # by position: frees 3, 4
    with pytest.raises(StoreError, match="no match ack position"):
        st.ack(position=EntryPosition("mysql-bin.000001", 99))
    with pytest.raises(StoreError):
        st.ack(position=EntryPosition("mysql-bin.000001", 4), seq=5)  # seq 5 is not at offset 4
    assert (st.put_seq, st.get_seq, st.ack_seq) == (10, 5, 4)


def test_rollback_redelivers_byte_identical_entries_in_order():
    entries = []
    for i in range(12):
        et = ENTRY_TRANSACTIONBEGIN if i % 4 == 0 else ENTRY_TRANSACTIONEND if i % 4 == 3 else ENTRY_ROWDATA
        data = _pb_entry(et, EVENT_INSERT if et == ENTRY_ROWDATA else 0, 100 + i)
        entries.append(CanalEntry(et, EVENT_INSERT if et == ENTRY_ROWDATA else 0, "s", "t",
                                  EntryPosition("mysql-bin.000003", 100 + i, timestamp=1234), rows=[(i,)],
                                  _encode=lambda d=data: d))
    expected = [e.data for e in entries]
    st = MemoryEventStore(buffer_size=16, mem_unit=16)
    st.put([StoredEvent.from_entry(e) for e in entries])
    first = st.get(2, 0.01)  # three batches ahead, then one acked
    second = st.get(2, 0.01)
    st.ack(seq=first.end_seq)
    st.get(2, 0.01)
    st.rollback()
    again = []
    while b := st.try_get(2):
        again.extend(b.data)
    n_acked = len(first)
    assert again == expected[n_acked:]  # same bytes, same order, acked ones not again
    assert [CanalEntry.from_bytes(d).position.position for d in again] == [100 + i for i in range(n_acked, 12)]
    assert second.data == expected[n_acked:n_acked + len(second)]


def test_positions_and_counters():
    st = MemoryEventStore(buffer_size=8, mem_unit=100)
    assert st.first_position() is None and st.latest_position() is None
    st.put(txn(0, 2, size=10))  # 4 events, 40 bytes, 2 rows
    first, latest = st.first_position(), st.latest_position()
    assert (first.position, first.included, latest.position, latest.included) == (0, False, 3, True)
    b = st.try_get(1)
    st.ack(seq=b.end_seq)
    assert st.first_position().position == 3 and not st.latest_position().included  # all acked
    s = st.stats()
    assert (s.put_seq, s.get_seq, s.ack_seq, s.put_mem, s.get_mem, s.ack_mem) == (3, 3, 3, 40, 40, 40)
    assert (s.put_rows, s.get_rows, s.ack_rows) == (2, 2, 2)
    assert s.put_exec_time == 1_700_000_000_003 and s.ack_delay == s.snapshot_time - 1_700_000_000_003
    st.put([ev(4, size=5, rows=3)])
    st.try_get(1)
    st.rollback()
    s = st.stats()
    assert (s.put_mem, s.get_mem, s.ack_mem, s.put_rows, s.get_rows) == (45, 40, 40, 5, 2)


# ---------------------------------------------------------------- blocking put


def test_put_blocks_when_full_by_items_and_resumes_after_ack():
    st = MemoryEventStore(buffer_size=4, batch_mode="ITEMSIZE")
    assert st.put([ev(i) for i in range(4)]) == 4
    assert st.put([ev(4)], timeout=0.02) == 0  # timed put gives up
    t, out = in_thread(st.put, [ev(4), ev(5)])
    b = st.try_get(1)
    st.ack(seq=b.end_seq)  # one slot free: not enough for two
    time.sleep(0.01)
    assert t.is_alive()
    st.ack(seq=st.try_get(1).end_seq)
    t.join(WAIT)
    assert out["value"] == 2 and st.put_seq == 5
    assert st.stats().blocking_time > 0


def test_put_blocks_when_full_by_memory_and_resumes_after_ack():
    st = MemoryEventStore(buffer_size=16, mem_unit=10)  # 160 bytes
    st.put([ev(0, size=100)])
    st.put([ev(1, size=100)])  # 100 < 160 before the put: admitted, now 200 held (Canal's check-before rule)
    assert st.try_put([ev(2, size=1)]) == 0  # 200 >= 160: no room though slots are free
    t, out = in_thread(st.put, [ev(2, size=1)])
    b = st.try_get(1)  # 10 bytes: the first event already overshoots, so it comes alone
    assert offsets(b) == [0]
    time.sleep(0.01)
    assert t.is_alive()  # a get frees nothing
    st.ack(seq=b.end_seq)  # 100 held: below 160
    t.join(WAIT)
    assert out["value"] == 1
    # a single event larger than the whole budget goes in once the store has drained
    st.ack(seq=st.try_get(100).end_seq)
    assert st.try_put([ev(3, size=10_000)]) == 1
    # the boundary: blocked at exactly buffer_size x memunit held, admitted one byte below
    edge = MemoryEventStore(buffer_size=16, mem_unit=10)
    edge.put([ev(0, size=159)])
    assert edge.try_put([ev(1, size=1)]) == 1
    assert edge.try_put([ev(2, size=1)]) == 0
    items = MemoryEventStore(buffer_size=2, mem_unit=10, batch_mode="ITEMSIZE")  # ITEMSIZE: bytes are no bound
    assert items.try_put([ev(0, size=1000), ev(1, size=1000)]) == 2


def test_put_larger_than_buffer_is_split():
    st = MemoryEventStore(buffer_size=4, batch_mode="ITEMSIZE")
    events = [ev(i) for i in range(10)]
    t, out = in_thread(st.put, events)
    got = []
    while len(got) < 10:
        b = st.get(4, 0.05)
        got += offsets(b)
        st.ack(seq=b.end_seq)
    t.join(WAIT)
    assert out["value"] == 10 and got == list(range(10))
    assert st.put([ev(i) for i in range(6)], timeout=0.01) == 4  # one chunk in, the next timed out


def test_close_wakes_blocked_callers():
    st = MemoryEventStore(buffer_size=2, batch_mode="ITEMSIZE")
    st.put([ev(0), ev(1)])
    putter, put_out = in_thread(st.put, [ev(2)])
    empty = MemoryEventStore(buffer_size=2)
    getter, get_out = in_thread(empty.get, 1)
    wait_until(lambda: st._put_waiters == 1 and empty._get_waiters == 1)
    st.close()
    empty.close()
    putter.join(WAIT)
    getter.join(WAIT)
    assert isinstance(put_out["error"], StoreClosed) and isinstance(get_out["error"], StoreClosed)
    with pytest.raises(StoreClosed):
        st.put([ev(3)])
    with pytest.raises(StoreClosed):
        st.try_get(1)
    assert st.first_position() is None and st.stats().put_seq == 1


# ---------------------------------------------------------------- concurrency (figures: bench/store.py)


def test_producer_and_consumer_threads_pass_every_event_in_order():
    st = MemoryEventStore(buffer_size=256)
    src = [ev(i, size=40) for i in range(100)]
    rounds = 200

    def produce() -> None:
        for _ in range(rounds):
            st.put(src)

    seen: list[int] = []
    t, out = in_thread(produce)
    deadline = time.monotonic() + 60
    while len(seen) < rounds * len(src) and time.monotonic() < deadline:
        b = st.get(64, 0.1)
        if b.events:
            seen += offsets(b)
            st.ack(seq=b.end_seq)
    t.join(WAIT)
    assert "error" not in out
    assert seen == list(range(100)) * rounds  # none lost, none repeated, in put order
    stats = st.stats()
    assert stats.put_seq == stats.ack_seq == rounds * len(src) - 1  # sequences count from 0
    assert stats.put_rows == stats.ack_rows == rounds * len(src)
