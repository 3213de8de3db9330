"""Canal's EntryEventSink: what happens to the parser's entries between the transaction buffer and the
store.

``EntrySink`` is the parser's ``sink``: ``sink(entries)`` adds to a ``TransactionBuffer`` and returns once
whatever that flushed has been stored (the store's put blocks while the store is full: back-pressure).
Each flushed batch then goes through Canal's rules, in Canal's order:

1. ``filter_transaction_entry`` (canal.instance.filter.transaction.entry): keep only ROWDATA entries (this
   drops transaction begin/end and, as in Canal, heartbeats);
2. ``name_filter(schema, table)``, when given, drops ROWDATA entries it rejects (Canal's sink-side filter);
3. a batch holding a row change or a heartbeat is stored, without its heartbeats: heartbeats never reach
   the store (Canal's HeartBeatEntryEventHandler);
4. any other batch is an empty transaction (BEGIN + END with nothing kept in between). With
   ``filter_empty_transaction_entry`` (Canal's filterEmtryTransactionEntry, default true) one is let
   through when its first entry's executeTime is more than ``empty_transaction_interval`` ms (5000) away
   from that of the last one let through, or else when more than ``empty_transaction_threshold`` (8192)
   have been dropped since: the store (and through it the clients' cursors) keeps learning that the source
   progresses even when every transaction is filtered. The rest are dropped. With the flag false all of
   them are dropped, which is what Canal does with it false.

One deliberate difference: Canal applies rule 4 to any batch without rows, including the last slice of a
transaction that the buffer split (a lone END after exactly ``size`` entries), and may drop that END; the
store would then hold a transaction that never ends. Here a batch that closes a transaction of which
something was already stored is always stored.

``position``: the resume point after the last transaction boundary (a TRANSACTIONEND, or a DDL/QUERY entry
outside a transaction) whose batch was stored or deliberately dropped as empty: the boundary entry's
position moved past the event (start + event length), as the parser records boundaries; when the event
length is unknown, the entry's own position with ``included`` set (Canal's "already consumed" flag).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from ..entry.model import ENTRY_HEARTBEAT, ENTRY_ROWDATA, ENTRY_TRANSACTIONBEGIN, ENTRY_TRANSACTIONEND, CanalEntry
from ..protocol.position import EntryPosition
from .buffer import DML_EVENT_TYPES, TransactionBuffer

Put = Callable[[list[CanalEntry]], None]
NameFilter = Callable[[str, str], bool]


def position_after(entry: CanalEntry) -> EntryPosition:
    """Where to resume so that ``entry``'s event is not delivered again."""
    pos = entry.position
    if entry.event_length > 0:
        return replace(pos, position=pos.position + entry.event_length, included=False)
    return replace(pos, included=True)


class EntrySink:
    """The single-source sink: buffer + Canal's sink rules + a blocking ``put`` (e.g. ``store.put``)."""

    def __init__(self, put: Put, *, transaction_size: int = 1024, filter_transaction_entry: bool = False,
                 filter_empty_transaction_entry: bool = True, empty_transaction_interval: int = 5000,
                 empty_transaction_threshold: int = 8192, name_filter: NameFilter | None = None,
                 position: EntryPosition | None = None) -> None:
        self._put = put
        self.buffer = TransactionBuffer(self._on_flush, transaction_size)
        self.filter_transaction_entry = filter_transaction_entry
        self.filter_empty_transaction_entry = filter_empty_transaction_entry
        self.empty_transaction_interval = empty_transaction_interval
        self.empty_transaction_threshold = empty_transaction_threshold
        self.name_filter = name_filter
        self.position = position
        self._open = False  # inside a transaction (a BEGIN passed, its END not yet)
        self._partial = False  # part of the open transaction has been stored
        self._last_empty_ts = 0
        self._empty_count = 0
        # counters
        self.batches = 0
        self.stored_entries = 0
        self.empty_dropped = 0
        self.empty_passed = 0
        self.heartbeats = 0
        self.filtered = 0

    # ---- the parser's side -------------------------------------------------------------------------

    def __call__(self, entries: Iterable[CanalEntry]) -> None:
        self.buffer.add(entries)

    add = __call__

    def flush(self) -> None:
        self.buffer.flush()

    def reset(self) -> None:
        """The parser restarts its dump from its last boundary: drop the buffered, unsent entries."""
        with self.buffer._lock:
            self.buffer.reset()
            self._open = False
            self._partial = False

    # ---- one flushed batch ---------------------------------------------------------------------------

    def _on_flush(self, batch: list[CanalEntry]) -> None:
        self.batches += 1
        kept = batch
        if self.filter_transaction_entry:
            kept = [e for e in kept if e.entry_type == ENTRY_ROWDATA]
        nf = self.name_filter
        if nf is not None:
            kept = [e for e in kept if e.entry_type != ENTRY_ROWDATA or nf(e.schema, e.table)]
        self.filtered += len(batch) - len(kept)
        has_rows = False
        heartbeat: CanalEntry | None = None
        for e in batch:  # heartbeats count even where filter.transaction.entry removed them (group watermarks)
            if e.entry_type == ENTRY_HEARTBEAT:
                heartbeat = e
                self.heartbeats += 1
        for e in kept:
            if e.entry_type == ENTRY_ROWDATA:
                has_rows = True
                break
        open_after, began, boundary = self._scan(batch)
        delivered = False
        if has_rows or heartbeat is not None:
            out = kept if heartbeat is None else [e for e in kept if e.entry_type != ENTRY_HEARTBEAT]
            self._deliver(out, heartbeat, open_after)
            delivered = bool(out)
        elif kept:
            if (self._partial and not began) or self._let_empty_through(kept[0].execute_time):
                self._deliver(kept, None, open_after)
                delivered = True
            else:
                self.empty_dropped += 1
                self._skipped(kept)
        # the batch is stored (or dropped on purpose): commit the transaction state and the resume position
        self._open = open_after
        self._partial = open_after and (delivered or (self._partial and not began))
        if boundary is not None:
            self.position = position_after(boundary)

    def _let_empty_through(self, ts: int) -> bool:
        if not self.filter_empty_transaction_entry:
            return False
        # Canal: |ts - last| > interval || ++count > threshold (the count moves only when the time test fails)
        if abs(ts - self._last_empty_ts) <= self.empty_transaction_interval:
            self._empty_count += 1
            if self._empty_count <= self.empty_transaction_threshold:
                return False
        self._empty_count = 0
        self._last_empty_ts = ts
        self.empty_passed += 1
        return True

    def _scan(self, batch: list[CanalEntry]) -> tuple[bool, bool, CanalEntry | None]:
        """(inside a transaction after ``batch``, whether it began one, its last transaction boundary)."""
        open_ = self._open
        began = False
        boundary = None
        for e in batch:
            t = e.entry_type
            if t == ENTRY_TRANSACTIONBEGIN:
                open_ = began = True
            elif t == ENTRY_TRANSACTIONEND:
                open_ = False
                boundary = e
            elif t == ENTRY_ROWDATA and not open_ and e.event_type not in DML_EVENT_TYPES:
                boundary = e
        return open_, began, boundary

    # ---- downstream (GroupSink overrides these) --------------------------------------------------------

    def _deliver(self, entries: list[CanalEntry], heartbeat: CanalEntry | None, open_after: bool) -> None:
        """Store ``entries`` (blocking); ``open_after``: the source is inside a transaction after them."""
        if entries:
            self._put(entries)
            self.stored_entries += len(entries)

    def _skipped(self, entries: list[CanalEntry]) -> None:
        """An empty transaction was dropped (it still tells a group how far this source has come)."""
