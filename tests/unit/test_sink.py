"""Transaction buffer and single-source sink: Canal's flush rules, empty-transaction and heartbeat
suppression, filter.transaction.entry, back-pressure and resume positions. Synthetic entries only."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from canal_core.entry.model import (
    ENTRY_GTIDLOG,
    ENTRY_HEARTBEAT,
    ENTRY_ROWDATA,
    ENTRY_TRANSACTIONEND,
    CanalEntry,
)
from canal_core.parse.model import EVENT_CREATE, EVENT_GTID, EVENT_INSERT, EVENT_QUERY, EVENT_UPDATE
from canal_core.protocol.position import EntryPosition
from canal_core.sink import EntrySink, TransactionBuffer, position_after
from tests.unit.sink_streams import Stream, feed, kinds

# ---- TransactionBuffer ---------------------------------------------------------------------------------------


def collecting_buffer(size: int = 1024) -> tuple[TransactionBuffer, list[list[CanalEntry]]]:
    batches: list[list[CanalEntry]] = []
    return TransactionBuffer(batches.append, size), batches


@pytest.mark.parametrize("size", [0, -4, 3, 1000, 1025])
def test_buffer_size_must_be_power_of_two(size: int) -> None:
    with pytest.raises(ValueError, match="power of 2"):
        TransactionBuffer(lambda b: None, size)


def test_end_flushes_the_transaction_whole() -> None:
    buf, batches = collecting_buffer()
    s = Stream()
    feed(buf.add, s.tx(1000, rows=3))
    assert [kinds(b) for b in batches] == ["BRRRE"]
    assert len(buf) == 0


def test_begin_flushes_what_came_before() -> None:
    buf, batches = collecting_buffer()
    s = Stream()
    buf.add([s.row(1000), s.row(1000)])  # rows without a BEGIN (e.g. a dump started inside a transaction)
    assert batches == []
    buf.add([s.begin(1001)])
    assert [kinds(b) for b in batches] == ["RR"]
    assert len(buf) == 1  # the BEGIN waits for its transaction


def test_ddl_and_query_flush() -> None:
    buf, batches = collecting_buffer()
    s = Stream()
    buf.add([s.row(1000)])
    buf.add([s.ddl(1001)])
    assert [kinds(b) for b in batches] == ["RD"]
    buf.add([s.ddl(1002, "CREATE TABLE t (id INT)", EVENT_CREATE)])
    buf.add([s.ddl(1003, "GRANT ALL ON *.* TO x", EVENT_QUERY)])
    assert [kinds(b) for b in batches] == ["RD", "D", "D"]
    # a statement-based DML entry carries sql but is a row change: it does not flush
    buf.add([s.ddl(1004, "UPDATE t SET a = 1", EVENT_UPDATE)])
    assert len(batches) == 3 and len(buf) == 1


def test_heartbeat_flushes() -> None:
    buf, batches = collecting_buffer()
    s = Stream()
    buf.add([s.begin(1000), s.row(1000)])
    buf.add([s.heartbeat(2000)])
    assert [kinds(b) for b in batches] == ["BRH"]


def test_other_entry_types_are_dropped_like_canal() -> None:
    buf, batches = collecting_buffer()
    s = Stream()
    gtid = CanalEntry(entry_type=ENTRY_GTIDLOG, event_type=EVENT_GTID, schema="", table="",
                      position=EntryPosition(journal_name=s.journal, position=4), _data=b"")
    feed(buf.add, [s.begin(1), gtid, s.row(1), s.end(1)])
    assert [kinds(b) for b in batches] == ["BRE"] and buf.dropped == 1


def test_full_buffer_flushes_early_and_splits() -> None:
    buf, batches = collecting_buffer(4)
    s = Stream()
    feed(buf.add, s.tx(1000, rows=10))
    assert [kinds(b) for b in batches] == ["BRRR", "RRRR", "RRRE"]
    batches.clear()
    feed(buf.add, s.tx(1001, rows=3))  # exactly full at the END: the END goes alone
    assert [kinds(b) for b in batches] == ["BRRR", "E"]
    assert buf.peak == 4


def test_million_row_transaction_streams_through_a_small_buffer() -> None:
    size = 1024
    seen = {"entries": 0, "batches": 0, "max_batch": 0, "max_held": 0}
    buf: TransactionBuffer

    def downstream(batch: list[CanalEntry]) -> None:
        seen["batches"] += 1
        seen["entries"] += len(batch)
        seen["max_batch"] = max(seen["max_batch"], len(batch))
        seen["max_held"] = max(seen["max_held"], len(buf))  # what the buffer holds while the store blocks

    buf = TransactionBuffer(downstream, size)
    s = Stream()
    n = 1_000_000
    pos = EntryPosition(journal_name=s.journal, position=4, server_id=1, timestamp=1000)

    def rows() -> Iterator[CanalEntry]:
        for _ in range(n):
            yield CanalEntry(ENTRY_ROWDATA, EVENT_INSERT, "shop", "orders", pos, _data=b"")

    buf.add([s.begin(1000)])
    buf.add(rows())  # produced lazily: neither the test nor the buffer ever holds the transaction
    buf.add([s.end(1000)])
    assert seen["entries"] == n + 2
    assert seen["batches"] == -(-(n + 2) // size)
    assert seen["max_batch"] <= size and seen["max_held"] <= size and buf.peak <= size
    assert len(buf) == 0


def test_failed_flush_keeps_the_entries() -> None:
    calls: list[list[CanalEntry]] = []

    def flaky(batch: list[CanalEntry]) -> None:
        calls.append(list(batch))
        if len(calls) == 1:
            raise RuntimeError("store closed")

    buf = TransactionBuffer(flaky, 8)
    s = Stream()
    tx = s.tx(1000, rows=2)
    with pytest.raises(RuntimeError):
        feed(buf.add, tx)
    assert len(buf) == 4
    buf.flush()
    assert calls[1] == tx and len(buf) == 0


def test_buffer_is_safe_for_concurrent_producers() -> None:
    got: list[CanalEntry] = []
    buf = TransactionBuffer(got.extend, 16)
    s1, s2 = Stream(1), Stream(2)
    txs = [e for k in range(500) for e in s1.tx(k, rows=3)]
    hbs = [s2.heartbeat(k) for k in range(2000)]

    def run(entries: list[CanalEntry]) -> None:
        for e in entries:
            buf.add([e])

    threads = [threading.Thread(target=run, args=(x,)) for x in (txs, hbs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    buf.flush()
    assert len(got) == len(txs) + len(hbs)
    assert [e for e in got if e.entry_type != ENTRY_HEARTBEAT] == txs
    assert [e for e in got if e.entry_type == ENTRY_HEARTBEAT] == hbs


# ---- EntrySink ---------------------------------------------------------------------------------------------------


def collecting_sink(**kw: object) -> tuple[EntrySink, list[list[CanalEntry]]]:
    puts: list[list[CanalEntry]] = []
    return EntrySink(puts.append, **kw), puts  # type: ignore[arg-type]


def test_sink_stores_transactions_and_never_heartbeats() -> None:
    sink, puts = collecting_sink()
    s = Stream()
    feed(sink, s.tx(1000, rows=2))
    feed(sink, [s.heartbeat(2000)])
    feed(sink, [s.master_heartbeat()])
    feed(sink, [s.begin(3000), s.row(3000), s.heartbeat(3500), s.row(3000), s.end(3000)])
    assert [kinds(b) for b in puts] == ["BRRE", "BR", "RE"]
    assert sink.heartbeats == 3 and sink.stored_entries == 8


def test_empty_transactions_pass_every_interval_of_binlog_time() -> None:
    sink, puts = collecting_sink()  # interval 5000 ms, threshold 8192
    s = Stream()
    t0 = 1_700_000_000_000
    times = [t0, t0 + 1000, t0 + 4000, t0 + 5000, t0 + 5001, t0 + 6000, t0 + 10_002]
    for ts in times:
        feed(sink, [s.begin(ts), s.end(ts)])
    passed = [b[0].execute_time for b in puts]
    # the first passes (|t0 - 0| > 5000), then one whenever more than 5000 ms since the last one passed
    assert passed == [t0, t0 + 5001, t0 + 10_002]
    assert all(kinds(b) == "BE" for b in puts)
    assert sink.empty_passed == 3 and sink.empty_dropped == 4


def test_empty_transactions_pass_after_threshold_count() -> None:
    sink, puts = collecting_sink(empty_transaction_threshold=3)
    s = Stream()
    t0 = 1_000_000
    for k in range(11):
        feed(sink, [s.begin(t0 + k), s.end(t0 + k)])
    # #0 passes on time (more than 5000 ms after "never"); then the 4th one in a row over 3 passes: #4, #8
    assert [b[0].execute_time - t0 for b in puts] == [0, 4, 8]


def test_empty_transactions_all_dropped_when_flag_is_off() -> None:
    sink, puts = collecting_sink(filter_empty_transaction_entry=False)
    s = Stream()
    for k in range(3):
        feed(sink, [s.begin(k * 10_000), s.end(k * 10_000)])
    assert puts == [] and sink.empty_dropped == 3


def test_position_moves_past_stored_and_dropped_transactions() -> None:
    sink, puts = collecting_sink(position=EntryPosition("mysql-bin.000001", 4))
    s = Stream()
    tx = s.tx(10_000, rows=1)
    feed(sink, tx)
    end = tx[-1]
    assert sink.position == EntryPosition("mysql-bin.000001", end.position.position + 31, 1, 10_000)
    feed(sink, [s.begin(10_001), s.end(10_001)])  # the first empty transaction passes
    empty = [s.begin(10_002), s.end(10_002)]
    feed(sink, empty)
    assert len(puts) == 2  # dropped ...
    assert sink.position == position_after(empty[-1])  # ... yet the position moved past it
    feed(sink, [s.begin(10_003), s.row(10_003)])
    assert sink.position == position_after(empty[-1])  # inside a transaction: no boundary yet
    ddl = s.ddl(10_004)  # (a dump restarted: a DDL after rows without END would not happen in a binlog)
    sink.reset()
    feed(sink, [ddl])
    assert sink.position == position_after(ddl) and kinds(puts[-1]) == "D"
    unknown_len = CanalEntry(ENTRY_TRANSACTIONEND, 0, "", "", EntryPosition("mysql-bin.000002", 99, 1, 5), _data=b"")
    assert position_after(unknown_len) == EntryPosition("mysql-bin.000002", 99, 1, 5, included=True)


def test_split_transaction_tail_is_never_dropped() -> None:
    # Canal would treat the lone END of a split transaction as an empty transaction and drop it
    sink, puts = collecting_sink(transaction_size=4, empty_transaction_threshold=1 << 30)
    s = Stream()
    feed(sink, [s.begin(100_000), s.end(100_000)])  # passes (first empty transaction)
    feed(sink, s.tx(100_001, rows=3))  # BRRR | E
    assert [kinds(b) for b in puts] == ["BE", "BRRR", "E"]
    feed(sink, [s.begin(100_002), s.end(100_002)])  # a genuinely empty one right after: dropped
    assert len(puts) == 3


def test_filter_transaction_entry_keeps_only_row_data() -> None:
    sink, puts = collecting_sink(filter_transaction_entry=True)
    s = Stream()
    feed(sink, s.tx(1000, rows=2))
    feed(sink, [s.begin(1001), s.end(1001)])
    feed(sink, [s.heartbeat(1002)])
    feed(sink, [s.ddl(1003)])
    assert [kinds(b) for b in puts] == ["RR", "D"]
    assert sink.position is not None and sink.position == position_after(puts[-1][-1])


def test_name_filter_empties_transactions() -> None:
    sink, puts = collecting_sink(name_filter=lambda schema, table: table != "audit")
    s = Stream()
    t0 = 100_000
    feed(sink, s.tx(t0, rows=2, table="audit"))  # everything filtered: an empty transaction, the first passes
    feed(sink, s.tx(t0 + 1, rows=2, table="audit"))  # dropped
    feed(sink, [s.begin(t0 + 2), s.row(t0 + 2, table="audit"), s.row(t0 + 2), s.end(t0 + 2)])
    assert [kinds(b) for b in puts] == ["BE", "BRE"]
    assert puts[1][1].table == "orders" and sink.filtered == 5


def test_sink_call_blocks_until_stored() -> None:
    gate = threading.Event()
    stored: list[CanalEntry] = []

    def slow_put(batch: list[CanalEntry]) -> None:
        gate.wait(10)
        stored.extend(batch)

    sink = EntrySink(slow_put)
    s = Stream()
    tx = s.tx(1000, rows=1)
    feed(sink, tx[:-1])  # buffered: returns at once
    t = threading.Thread(target=sink, args=([tx[-1]],))
    t.start()
    time.sleep(0.05)
    assert t.is_alive() and stored == []  # the END's call waits for the store
    gate.set()
    t.join(5)
    assert not t.is_alive() and stored == tx


def test_reset_forgets_buffered_entries() -> None:
    sink, puts = collecting_sink()
    s = Stream()
    feed(sink, [s.begin(1), s.row(1)])
    sink.reset()
    feed(sink, s.tx(2, rows=1))
    assert [kinds(b) for b in puts] == ["BRE"]
