"""n:1 group sink: executeTime merge over several source threads, no interleaved transactions, the silent-
source stall and its release by heartbeats, per-source resume positions across a simulated restart."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import pytest

from canal_core.entry.model import ENTRY_ROWDATA, ENTRY_TRANSACTIONBEGIN, ENTRY_TRANSACTIONEND, CanalEntry
from canal_core.protocol.position import EntryPosition, LogIdentity, LogPosition
from canal_core.sink import GroupSink, SinkClosedError, position_after
from tests.support.waiting import wait_until
from tests.unit.sink_streams import Stream, feed, kinds

FAR_FUTURE = 1 << 60


class Store:
    """A store whose put records what arrives, in order (thread-safe, as the ring store's put)."""

    def __init__(self) -> None:
        self.entries: list[CanalEntry] = []
        self.puts = 0
        self._lock = threading.Lock()

    def put(self, batch: list[CanalEntry]) -> None:
        with self._lock:
            self.entries.extend(batch)
            self.puts += 1


def check_no_interleaving(entries: list[CanalEntry]) -> list[tuple[int, int]]:
    """Assert that no two transactions interleave in the merged stream; return (server id, BEGIN offset) of
    each complete transaction in order."""
    current: int | None = None
    start = 0
    done = []
    for e in entries:
        src = e.position.server_id
        assert src is not None
        if e.entry_type == ENTRY_TRANSACTIONBEGIN:
            assert current is None, f"source {src} begins inside a transaction of source {current}"
            current, start = src, e.position.position
        elif e.entry_type == ENTRY_TRANSACTIONEND:
            assert current == src, f"END of source {src} inside a transaction of source {current}"
            done.append((src, start))
            current = None
        elif e.entry_type == ENTRY_ROWDATA and current is not None:
            assert current == src, f"row of source {src} inside a transaction of source {current}"
    return done


def wait_for(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    wait_until(cond, timeout, step=0.001)


def run_threads(targets: list[Callable[[], None]]) -> list[BaseException]:
    errors: list[BaseException] = []

    def wrap(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as e:
                errors.append(e)
        return run

    threads = [threading.Thread(target=wrap(t), daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
        assert not t.is_alive(), "a source thread is stuck"
    return errors


# ---- merge order --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_merge_by_execute_time_with_source_threads(seed: int) -> None:
    rnd = random.Random(seed)
    store = Store()
    names = ["s1", "s2", "s3"]
    group = GroupSink(store.put, names, transaction_size=4)  # small buffer: transactions are split
    streams = {n: Stream(server_id=i + 1) for i, n in enumerate(names)}
    plan: dict[str, list[list[CanalEntry]]] = {}
    expected: list[tuple[int, int, int]] = []  # (BEGIN time, source index, BEGIN offset)
    for i, n in enumerate(names):
        ts = 1_000_000 + i
        txs = []
        for _ in range(60):
            ts += 3 * rnd.randint(1, 40)  # distinct across sources (ts % 3 == source index)
            tx = streams[n].tx(ts, rows=rnd.randint(1, 9))
            txs.append(tx)
            expected.append((ts, i, tx[0].position.position))
        plan[n] = txs

    def source(n: str) -> Callable[[], None]:
        def run() -> None:
            sink = group.source(n)
            for tx in plan[n]:
                feed(sink, tx)
                if rnd.random() < 0.1:
                    time.sleep(0.001)
            sink.heartbeat(FAR_FUTURE)  # end of this source's stream: nothing older will come
        return run

    assert run_threads([source(n) for n in names]) == []
    done = check_no_interleaving(store.entries)
    expected.sort()
    assert done == [(i + 1, off) for _, i, off in expected]  # exactly the executeTime merge, every one whole
    times = [e.execute_time for e in store.entries if e.entry_type == ENTRY_TRANSACTIONBEGIN]
    assert times == sorted(times)
    assert group.waits > 0


def test_long_transaction_is_released_whole_before_another_source_starts() -> None:
    store = Store()
    group = GroupSink(store.put, ["a", "b"], transaction_size=8)
    a, b = Stream(1), Stream(2)
    big = [a.begin(1000), *(a.row(1000 + k * 10) for k in range(100)), a.end(2000)]  # rows span 1000..1990
    small = [b.tx(1500 + k, rows=1) for k in range(5)]  # begin inside the big one's time span

    def run_a() -> None:
        feed(group["a"], big)
        group["a"].heartbeat(FAR_FUTURE)

    def run_b() -> None:
        for tx in small:
            feed(group["b"], tx)
        group["b"].heartbeat(FAR_FUTURE)

    assert run_threads([run_a, run_b]) == []
    done = check_no_interleaving(store.entries)
    assert done[0] == (1, big[0].position.position) and len(done) == 6
    assert store.entries[: len(big)] == big
    assert store.puts > 10  # it was stored in slices, never held whole


def test_filter_transaction_entry_merges_per_batch() -> None:
    store = Store()
    group = GroupSink(store.put, ["a", "b"], transaction_size=4, filter_transaction_entry=True)
    a, b = Stream(1), Stream(2)

    def run(name: str, s: Stream, base: int) -> Callable[[], None]:
        def go() -> None:
            for k in range(30):
                feed(group[name], s.tx(base + 10 * k, rows=2))
            group[name].heartbeat(FAR_FUTURE)
        return go

    assert run_threads([run("a", a, 1000), run("b", b, 1005)]) == []
    assert all(e.entry_type == ENTRY_ROWDATA for e in store.entries) and len(store.entries) == 120
    times = [e.execute_time for e in store.entries]
    assert times == sorted(times)


# ---- stalls ------------------------------------------------------------------------------------------------


def test_silent_source_stalls_until_it_heartbeats() -> None:
    store = Store()
    clock = {"now": 0}
    # (empty transactions are all dropped here: no binlog time is 10**15 ms away from the last one let through)
    group = GroupSink(store.put, ["a", "b"], clock=lambda: clock["now"], empty_transaction_interval=10**15)
    a, b = Stream(1), Stream(2)
    errors: list[BaseException] = []

    def offer(name: str, entries: list[CanalEntry]) -> threading.Thread:
        def run() -> None:
            try:
                feed(group[name], entries)
            except BaseException as e:
                errors.append(e)
        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t

    # nothing passes before every source has offered a timestamp
    tb = offer("b", b.tx(1000))
    wait_for(lambda: group.waiting() == {"b": 1000})
    time.sleep(0.02)
    assert store.entries == [] and tb.is_alive()
    feed(group["a"], [a.heartbeat(1500)])  # a is alive and idle: its heartbeat is an offer
    tb.join(5)
    assert kinds(store.entries) == "BRE"

    # b is now silent at 1000: a's newer transaction waits for it ...
    ta = offer("a", a.tx(2000))
    wait_for(lambda: group.waiting() == {"a": 2000})
    time.sleep(0.02)
    assert len(store.entries) == 3 and ta.is_alive()
    feed(group["b"], [b.heartbeat(1999)])  # ... a heartbeat older than it is not enough ...
    time.sleep(0.02)
    assert ta.is_alive()
    feed(group["b"], [b.heartbeat(2500)])  # ... a newer one releases it
    ta.join(5)
    assert kinds(store.entries) == "BREBRE"

    # the server's HEARTBEAT_LOG_EVENT has no time: it offers the sink's clock
    ta = offer("a", a.tx(4000))
    wait_for(lambda: group.waiting() == {"a": 4000})
    clock["now"] = 5000
    feed(group["b"], [b.master_heartbeat()])
    ta.join(5)
    assert group.watermarks() == {"a": 4000, "b": 5000}

    # a dropped empty transaction tells the group how far its source is, too
    ta = offer("a", a.tx(6000))
    wait_for(lambda: group.waiting() == {"a": 6000})
    feed(group["b"], [b.begin(6001), b.end(6001)])  # dropped (empty), but 6001 > 6000
    ta.join(5)
    assert not ta.is_alive() and errors == [] and group["b"].empty_dropped == 1
    assert len(check_no_interleaving(store.entries)) == 4


def test_release_frees_the_permit_of_a_stopped_source() -> None:
    store = Store()
    group = GroupSink(store.put, ["a", "b"], transaction_size=2)
    a, b = Stream(1), Stream(2)
    feed(group["b"], [b.heartbeat(1050)])
    feed(group["a"], [a.begin(1000), a.row(1000), a.row(1000)])  # split: BEGIN + row stored, permit held
    assert group.owner == "a"
    done = threading.Event()

    def run_b() -> None:
        feed(group["b"], b.tx(1100))
        done.set()

    t = threading.Thread(target=run_b, daemon=True)
    t.start()
    wait_for(lambda: group.waiting() == {"b": 1100})
    assert not done.wait(0.02)
    group.release("a")  # a's parser stops (or switches): Canal's interrupt
    assert group.owner is None
    wait_for(lambda: group.waiting() == {"b": 1100})  # still waits: a has no watermark any more
    feed(group["a"], [a.heartbeat(2000)])
    assert done.wait(5)


def test_release_interrupts_a_waiting_source() -> None:
    store = Store()
    group = GroupSink(store.put, ["a", "b"])
    a, b = Stream(1), Stream(2)
    failed: list[BaseException] = []
    tx = b.tx(1000)

    def run_b() -> None:
        try:
            feed(group["b"], tx)
        except SinkClosedError as e:
            failed.append(e)

    t = threading.Thread(target=run_b, daemon=True)
    t.start()
    wait_for(lambda: group.waiting() == {"b": 1000})
    group.release("b")  # b's parser is stopping while b waits for a that never spoke
    t.join(5)
    assert not t.is_alive() and len(failed) == 1 and len(group["b"].buffer) == 0
    # b's parser restarts from its last boundary and sends the transaction again
    feed(group["a"], [a.heartbeat(5000)])
    feed(group["b"], tx)
    assert store.entries == tx


def test_close_wakes_waiting_sources() -> None:
    store = Store()
    group = GroupSink(store.put, ["a", "b"])
    b = Stream(2)
    errors: list[SinkClosedError] = []

    def run() -> None:
        try:
            feed(group["b"], b.tx(1000))
        except SinkClosedError as e:
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    wait_for(lambda: group.waiting() == {"b": 1000})
    group.close()
    t.join(5)
    assert len(errors) == 1 and store.entries == []


# ---- per-source resume positions -----------------------------------------------------------------------------


def test_per_source_positions_survive_a_restart() -> None:
    idents = {"a": LogIdentity("10.0.0.1", 3306), "b": LogIdentity("10.0.0.2", 3306)}
    a_src = Stream(1, journal="a-bin.000007")
    b_src = Stream(2, journal="b-bin.000003")
    a_txs = [a_src.tx(1000 + 20 * k, rows=4) for k in range(10)]  # 6 entries each: split by a size-4 buffer
    b_txs = [b_src.tx(1010 + 20 * k, rows=4) for k in range(10)]

    # ---- run 1: a stops inside its 7th transaction (part of it already stored), b is ahead
    store1 = Store()
    g1 = GroupSink(store1.put, idents, transaction_size=4)
    a_part = a_txs[6][:5]  # BEGIN + 4 rows: BEGIN + 3 rows reach the store, the 4th stays buffered

    def run_a1() -> None:
        for tx in a_txs[:6]:
            feed(g1["a"], tx)
        feed(g1["a"], a_part)

    def run_b1() -> None:
        for tx in b_txs[:8]:
            feed(g1["b"], tx)

    b_errors: list[BaseException] = []

    def guarded_b1() -> None:
        try:
            run_b1()
        except BaseException as e:
            b_errors.append(e)

    tb = threading.Thread(target=guarded_b1, daemon=True)
    tb.start()
    run_a1()
    # steady state: a holds the permit inside its 7th transaction, b's 7th waits behind it
    wait_for(lambda: g1.owner == "a" and g1.waiting() == {"b": b_txs[6][0].execute_time})
    persisted = {n: p.to_json() for n, p in g1.positions().items()}  # what the instance writes
    g1.close()  # crash
    tb.join(5)
    assert not tb.is_alive() and len(b_errors) == 1 and isinstance(b_errors[0], SinkClosedError)
    run1 = check_no_interleaving(store1.entries)
    assert run1 == [x for k in range(6) for x in ((1, a_txs[k][0].position.position),
                                                   (2, b_txs[k][0].position.position))]
    assert store1.entries[-4:] == a_part[:4]  # the partial transaction reached the store ...
    positions = {n: LogPosition.from_json(t) for n, t in persisted.items()}
    # ... but a's resume position is after its last complete transaction, b's after its own
    assert positions["a"] == LogPosition(idents["a"], position_after(a_txs[5][-1]))
    assert positions["b"] == LogPosition(idents["b"], position_after(b_txs[5][-1]))
    assert positions["a"].position.journal_name == "a-bin.000007"
    assert positions["a"].position.position == a_txs[6][0].position.position  # exactly where tx 7 begins

    # ---- run 2: each parser resumes from its own position
    store2 = Store()
    g2 = GroupSink(store2.put, idents, transaction_size=4, positions=positions)
    assert g2.positions() == positions  # known before anything new is stored

    def resume(name: str, txs: list[list[CanalEntry]]) -> Callable[[], None]:
        start = positions[name].position

        def run() -> None:
            for tx in txs:
                if tx[0].position.position >= start.position:  # the dump starts at the stored offset
                    feed(g2[name], tx)
            g2[name].heartbeat(FAR_FUTURE)
        return run

    assert run_threads([resume("a", a_txs), resume("b", b_txs)]) == []
    run2 = check_no_interleaving(store2.entries)
    assert run2[0] == (1, a_txs[6][0].position.position)  # a restarts with the transaction it was inside
    assert (2, b_txs[6][0].position.position) in run2 and (2, b_txs[5][0].position.position) not in run2
    every = {(1, tx[0].position.position) for tx in a_txs} | {(2, tx[0].position.position) for tx in b_txs}
    assert set(run1) | set(run2) == every  # nothing lost
    assert not set(run1) & set(run2)  # and no complete transaction delivered twice
    assert g2.positions() == {"a": LogPosition(idents["a"], position_after(a_txs[-1][-1])),
                              "b": LogPosition(idents["b"], position_after(b_txs[-1][-1]))}


def test_positions_accept_entry_positions_and_bare_names() -> None:
    pos = EntryPosition("mysql-bin.000001", 1234, 1, 99)
    g = GroupSink(Store().put, ["x", "y"], positions={"x": pos})
    assert g.positions() == {"x": LogPosition(LogIdentity(address="x"), pos)}
    with pytest.raises(ValueError):
        GroupSink(Store().put, [])
