"""bench/store: events per second through the memory event store (canal_core.store), put + get + ack.

    .venv/bin/python bench/store.py [--events 200000] [--singles 50000]

Two figures: a producer thread putting batches of 100 events against a consumer taking batches of 64 and
acking each (buffer of 4096 events); and single-event put + get + ack cycles in one thread (ITEMSIZE mode,
buffer of 1024). Figures only: the store's behaviour is tested in tests/unit/test_store.py.
"""

from __future__ import annotations

import argparse
import threading
import time

from canal_core.entry.model import ENTRY_ROWDATA
from canal_core.parse.model import EVENT_INSERT
from canal_core.protocol.position import EntryPosition
from canal_core.store import MemoryEventStore, StoredEvent


def _event(offset: int) -> StoredEvent:
    pos = EntryPosition("mysql-bin.000001", offset, timestamp=1_700_000_000_000 + offset)
    return StoredEvent(b"e%d" % offset, pos, ENTRY_ROWDATA, EVENT_INSERT, 1, size=40)


def threaded(n: int) -> float:
    st = MemoryEventStore(buffer_size=4096)
    src = [_event(i) for i in range(100)]
    rounds = n // len(src)
    producer = threading.Thread(target=lambda: [st.put(src) for _ in range(rounds)], daemon=True)
    got = 0
    t0 = time.perf_counter()
    producer.start()
    while got < rounds * len(src):
        b = st.get(64, 0.1)
        if b.events:
            st.ack(seq=b.end_seq)
            got += len(b)
    producer.join()
    return got / (time.perf_counter() - t0)


def singles(m: int) -> float:
    st = MemoryEventStore(buffer_size=1024, batch_mode="ITEMSIZE")
    one = [_event(0)]
    t0 = time.perf_counter()
    for _ in range(m):
        st.put(one)
        st.ack(seq=st.try_get(1).end_seq)
    return m / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--singles", type=int, default=50_000)
    ns = ap.parse_args()
    print(f"store: {threaded(ns.events):,.0f} events/s put+get+ack, 2 threads, batches of 100/64")
    print(f"store: {singles(ns.singles):,.0f} single-event put+get+ack cycles/s")


if __name__ == "__main__":
    main()
