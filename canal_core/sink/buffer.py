"""Canal's transaction buffer (EventTransactionBuffer): entries are collected and handed downstream one
transaction at a time, and never more than ``size`` at a time.

Flush rules, per entry added (as Canal's ``add``):

- TRANSACTIONBEGIN: flush what is buffered, then buffer the BEGIN;
- TRANSACTIONEND: buffer it, then flush;
- ROWDATA: buffer it; an entry that is not a row change (event type other than INSERT/UPDATE/DELETE: DDL,
  QUERY, XA COMMIT/ROLLBACK ...) then flushes at once;
- HEARTBEAT: buffer it, then flush (the source is idle: nothing more is coming soon);
- anything else (GTIDLOG): dropped, as Canal's buffer drops it (counted in ``dropped``);
- a full buffer flushes before the next entry goes in, so a huge transaction reaches the downstream in
  slices of ``size`` entries and is never held whole.

The flush callback blocks (it ends in the store's blocking put); entries leave the buffer only once it has
returned, so an exception leaves them buffered (Canal moves its flush sequence only after success).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from ..entry.model import ENTRY_HEARTBEAT, ENTRY_ROWDATA, ENTRY_TRANSACTIONBEGIN, ENTRY_TRANSACTIONEND, CanalEntry
from ..parse.model import EVENT_DELETE, EVENT_INSERT, EVENT_UPDATE

DML_EVENT_TYPES = frozenset((EVENT_INSERT, EVENT_UPDATE, EVENT_DELETE))

FlushCallback = Callable[[list[CanalEntry]], None]


class TransactionBuffer:
    """``canal.instance.transaction.size`` entries at most (default 1024, a power of two).

    Thread-safe: ``add``/``flush``/``reset`` serialize on one lock, and the flush callback runs under it, so
    batches reach the downstream in the order their entries were added even with several producers (the
    parser's dump thread and a heartbeat timer).
    """

    def __init__(self, flush: FlushCallback, size: int = 1024) -> None:
        if size <= 0 or size & (size - 1):
            raise ValueError(f"canal.instance.transaction.size must be a power of 2, got {size}")
        self.size = size
        self._callback = flush
        self._buf: list[CanalEntry] = []
        self._lock = threading.RLock()
        self.peak = 0  # the most entries ever held at once (never above size)
        self.flushes = 0
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._buf)

    def add(self, entries: Iterable[CanalEntry]) -> None:
        size = self.size
        with self._lock:
            for e in entries:
                t = e.entry_type
                if t == ENTRY_ROWDATA:
                    if len(self._buf) >= size:
                        self._flush()
                    self._buf.append(e)
                    if e.event_type not in DML_EVENT_TYPES:
                        self._flush()
                elif t == ENTRY_TRANSACTIONBEGIN:
                    self._flush()
                    self._buf.append(e)
                elif t == ENTRY_TRANSACTIONEND or t == ENTRY_HEARTBEAT:
                    if len(self._buf) >= size:
                        self._flush()
                    self._buf.append(e)
                    self._flush()
                else:
                    self.dropped += 1
                    continue
                n = len(self._buf)
                if n > self.peak:
                    self.peak = n

    def flush(self) -> None:
        """Hand whatever is buffered downstream now."""
        with self._lock:
            self._flush()

    def reset(self) -> None:
        """Forget what is buffered (the parser restarts its dump from its last recorded boundary, which
        sends these entries again)."""
        with self._lock:
            self._buf = []

    def _flush(self) -> None:
        batch = self._buf
        if batch:
            self._callback(batch)  # blocks until stored; raises -> the entries stay buffered
            self._buf = []
            self.flushes += 1
