"""Canal's memory event store (MemoryEventStoreWithBuffer): a bounded ring between the sink and consumers.

Sequences (put, get, ack) start at -1 and only grow; slot index = seq & (size - 1). Invariant:
ack <= get <= put and put - ack <= size.

Items are held pre-serialized (``StoredEvent``: the Entry bytes plus the few fields the store reads), so the
memory held is the bytes of the un-acked entries, never typed rows.

Besides the events, the ring keeps per slot the running totals (since the store was created) of bytes, rows,
ack points and DDLs after that event. Batch bounds then come from bisection instead of a Python loop over the
batch, and get/ack/rollback move the memory and row counters in O(1).

Deliberate differences from Canal, all documented where they apply:
- ``size`` of an event is the length of its serialized bytes (Canal counts the binlog event length): the bound
  is on what this process actually holds.
- A put stores what fits and waits for room for the rest, so a transaction larger than the free space (or than
  the whole store) is split at the store's bound: a put waits only while not even one event fits (Canal waits
  for room for the whole put, and forever for more events than slots).
- A waiting get also returns once the store is full (Canal waits for its timeout, or forever: a batch larger
  than the store can hold would deadlock). "Full" is the test that makes a put wait, so a parser waiting for
  room and a get waiting for more can never wait on each other.
- Acked slots are released in both batch modes (Canal only in MEMSIZE); the last acked position is kept for
  ``first_position``/``latest_position``.
"""

from __future__ import annotations

import enum
import threading
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate
from operator import attrgetter
from typing import cast

from ..entry.model import ENTRY_ROWDATA, ENTRY_TRANSACTIONEND, CanalEntry
from ..parse.model import (
    EVENT_ALTER,
    EVENT_CINDEX,
    EVENT_CREATE,
    EVENT_DELETE,
    EVENT_DINDEX,
    EVENT_ERASE,
    EVENT_INSERT,
    EVENT_RENAME,
    EVENT_TRUNCATE,
    EVENT_UPDATE,
)
from ..protocol.errors import CanalError
from ..protocol.position import EntryPosition

KEY_BUFFER_SIZE = "canal.instance.memory.buffer.size"
KEY_MEM_UNIT = "canal.instance.memory.buffer.memunit"
KEY_BATCH_MODE = "canal.instance.memory.batch.mode"
KEY_DDL_ISOLATION = "canal.instance.get.ddl.isolation"

DEFAULT_BUFFER_SIZE = 16384
DEFAULT_MEM_UNIT = 1024
CANCEL_POLL = 0.5  # s between two questions to a waiting get's ``cancelled``

# Canal's isDdl: statements that change a table's shape (QUERY, e.g. CREATE DATABASE, is not one)
DDL_EVENT_TYPES = frozenset(
    {EVENT_CREATE, EVENT_ALTER, EVENT_ERASE, EVENT_RENAME, EVENT_TRUNCATE, EVENT_CINDEX, EVENT_DINDEX}
)
_DML_EVENT_TYPES = frozenset({EVENT_INSERT, EVENT_UPDATE, EVENT_DELETE})


class BatchMode(enum.Enum):
    """canal.instance.memory.batch.mode: what a get's batch size counts."""

    MEMSIZE = "MEMSIZE"  # units of canal.instance.memory.buffer.memunit bytes
    ITEMSIZE = "ITEMSIZE"  # events


class StoreError(CanalError, RuntimeError):
    """A store operation that cannot be done (e.g. Canal's "no match ack position")."""


class StoreClosed(StoreError):
    """The store was closed; raised to callers that were blocked in or call put/get."""


class StoredEvent:
    """One Entry as the store keeps it: its serialized bytes and what the store needs to batch and ack it."""

    __slots__ = ("ack_point", "data", "ends_transaction", "entry_type", "event_type", "is_ddl", "position", "rows",
                 "size", "source")

    def __init__(self, data: bytes, position: EntryPosition, entry_type: int, event_type: int = 0, rows: int = 0,
                 size: int | None = None, source: str = "") -> None:
        self.data = data
        self.source = source  # which source of a group destination it came from ("" for a single source)
        self.size = len(data) if size is None else size
        self.position = position
        self.entry_type = entry_type
        self.event_type = event_type
        self.rows = rows  # Canal's rowsCount: table rows, for the put/get/ack row counters
        self.is_ddl = event_type in DDL_EVENT_TYPES
        self.ends_transaction = entry_type == ENTRY_TRANSACTIONEND
        # where a consumer may safely resume (Canal's batch ack position)
        self.ack_point = self.ends_transaction or self.is_ddl

    @classmethod
    def from_entry(cls, entry: CanalEntry, source: str = "") -> StoredEvent:
        """Serialize (if not yet) and keep only the bytes and metadata: the typed rows are not referenced."""
        return cls(entry.data, entry.position, entry.entry_type, entry.event_type, _rows_count(entry), source=source)

    def __repr__(self) -> str:
        return (f"StoredEvent(entry_type={self.entry_type}, event_type={self.event_type}, size={self.size}, "
                f"position={self.position.journal_name}:{self.position.position})")


def _rows_count(entry: CanalEntry) -> int:
    if entry.entry_type != ENTRY_ROWDATA:
        return 0
    if entry.rows is not None:
        return len(entry.rows)
    msg = entry._entry  # an entry read back from bytes: its header props carry rowsCount
    if msg is not None:
        for p in msg.header.props:
            if p.key == "rowsCount":
                return int(p.value)
    return 1 if entry.event_type in _DML_EVENT_TYPES else 0


@dataclass(slots=True)
class Batch:
    """What one get returned: the events (seqs first_seq..end_seq) and Canal's PositionRange.

    ``ack`` is the position of the last event that ends a transaction or is a DDL (None if the batch has
    none): where a client cursor may move once the batch is acked. ``end_seq`` is what to pass to
    ``MemoryEventStore.ack`` to free the batch's slots.
    """

    events: list[StoredEvent]
    first_seq: int = -1
    end_seq: int = -1
    start: EntryPosition | None = None
    end: EntryPosition | None = None
    ack: EntryPosition | None = None

    def __len__(self) -> int:
        return len(self.events)

    @property
    def data(self) -> list[bytes]:
        return [e.data for e in self.events]


@dataclass(frozen=True, slots=True)
class StoreStats:
    """A snapshot of the counters behind Canal's store metrics (times in ms since the epoch)."""

    put_seq: int
    get_seq: int
    ack_seq: int
    put_mem: int
    get_mem: int
    ack_mem: int
    put_rows: int
    get_rows: int
    ack_rows: int
    put_exec_time: int
    get_exec_time: int
    ack_exec_time: int
    blocking_time: float  # seconds puts spent waiting for room
    snapshot_time: int

    @property
    def put_delay(self) -> int:
        return self.snapshot_time - self.put_exec_time

    @property
    def get_delay(self) -> int:
        return self.snapshot_time - self.get_exec_time

    @property
    def ack_delay(self) -> int:
        return self.snapshot_time - self.ack_exec_time


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


_size_of = attrgetter("size")
_rows_of = attrgetter("rows")
_ack_point_of = attrgetter("ack_point")
_is_ddl_of = attrgetter("is_ddl")


class MemoryEventStore:
    """Canal's MemoryEventStoreWithBuffer. Thread-safe: one lock, a condition for puts and one for gets."""

    def __init__(self, buffer_size: int = DEFAULT_BUFFER_SIZE, mem_unit: int = DEFAULT_MEM_UNIT,
                 batch_mode: BatchMode | str = BatchMode.MEMSIZE, ddl_isolation: bool = False) -> None:
        if isinstance(buffer_size, bool) or not isinstance(buffer_size, int) or buffer_size <= 0 \
                or buffer_size & (buffer_size - 1):
            raise ValueError(f"{KEY_BUFFER_SIZE} must be a power of two, got {buffer_size!r}")
        if isinstance(mem_unit, bool) or not isinstance(mem_unit, int) or mem_unit <= 0:
            raise ValueError(f"{KEY_MEM_UNIT} must be a positive integer, got {mem_unit!r}")
        if isinstance(batch_mode, str):
            try:
                batch_mode = BatchMode(batch_mode.strip().upper())
            except ValueError:
                raise ValueError(f"{KEY_BATCH_MODE} must be ITEMSIZE or MEMSIZE, got {batch_mode!r}") from None
        self._size = buffer_size
        self._mask = buffer_size - 1
        self._mem_unit = mem_unit
        self._mode = batch_mode
        self._memsize = batch_mode is BatchMode.MEMSIZE
        self._mem_limit = buffer_size * mem_unit
        self._ddl_isolation = ddl_isolation

        self._events: list[StoredEvent | None] = [None] * buffer_size
        # running totals after each slot's event (see the module docstring)
        self._cum_mem = [0] * buffer_size
        self._cum_rows = [0] * buffer_size
        self._cum_acks = [0] * buffer_size
        self._cum_ddls = [0] * buffer_size if ddl_isolation else None

        self._put = self._get = self._ack = -1
        self._put_mem = self._get_mem = self._ack_mem = 0
        self._put_rows = self._get_rows = self._ack_rows = 0
        self._put_acks = self._put_ddls = 0
        now = _now_ms()  # as Canal: delays start at 0, not at "since 1970"
        self._put_exec = self._get_exec = self._ack_exec = now
        self._blocking = 0.0
        self._last_acked: EntryPosition | None = None

        self._lock = threading.Lock()
        self._not_full = threading.Condition(self._lock)
        self._not_empty = threading.Condition(self._lock)
        self._put_waiters = 0  # notify only when someone waits: Condition.notify costs even with no waiter
        self._get_waiters = 0
        self._closed = False

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> MemoryEventStore:
        """Build from Canal's instance properties (already merged with the global ones)."""

        def integer(key: str, default: int) -> int:
            raw = props.get(key)
            if raw is None or not str(raw).strip():
                return default
            try:
                return int(str(raw).strip())
            except ValueError:
                raise ValueError(f"{key} must be an integer, got {raw!r}") from None

        ddl = str(props.get(KEY_DDL_ISOLATION, "false")).strip().lower()
        if ddl not in ("true", "false", ""):
            raise ValueError(f"{KEY_DDL_ISOLATION} must be true or false, got {props.get(KEY_DDL_ISOLATION)!r}")
        return cls(buffer_size=integer(KEY_BUFFER_SIZE, DEFAULT_BUFFER_SIZE),
                   mem_unit=integer(KEY_MEM_UNIT, DEFAULT_MEM_UNIT),
                   batch_mode=str(props.get(KEY_BATCH_MODE) or "MEMSIZE"), ddl_isolation=ddl == "true")

    # ------------------------------------------------------------------ properties

    @property
    def buffer_size(self) -> int:
        return self._size

    @property
    def mem_unit(self) -> int:
        return self._mem_unit

    @property
    def batch_mode(self) -> BatchMode:
        return self._mode

    @property
    def ddl_isolation(self) -> bool:
        return self._ddl_isolation

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def put_seq(self) -> int:
        return self._put

    @property
    def get_seq(self) -> int:
        return self._get

    @property
    def ack_seq(self) -> int:
        return self._ack

    # ------------------------------------------------------------------ put

    def put(self, events: Sequence[StoredEvent], timeout: float | None = None) -> int:
        """Store ``events`` in order, waiting for room (this is what back-pressures the parser).

        Stores as many as fit now, each visible to gets at once, then waits for room for the rest. Room: a
        free slot and, in MEMSIZE mode, un-acked bytes below buffer_size x mem_unit (checked before storing,
        as Canal: one put may overshoot, so an event larger than the whole budget still goes in once the store
        has drained). ``timeout`` None waits as long as needed; otherwise gives up after that many seconds.
        Returns how many events were stored: len(events), or fewer on timeout.
        Raises StoreClosed if the store is or gets closed.
        """
        n = len(events)
        if n == 0:
            return 0
        deadline = None if timeout is None else time.monotonic() + timeout
        done = 0
        with self._lock:
            if self._closed:
                raise StoreClosed("store is closed")
            while done < n:
                room = self._room()
                if room == 0:
                    if not self._wait_room(deadline):
                        break
                    continue
                k = min(room, n - done)
                self._do_put(events[done:done + k] if k < n else events)
                done += k
        return done

    def try_put(self, events: Sequence[StoredEvent]) -> int:
        """put without waiting: stores what fits now."""
        return self.put(events, 0.0)

    def _room(self) -> int:
        """How many events a put may store now (the memory budget is checked before, not per event)."""
        if self._memsize and self._put_mem - self._ack_mem >= self._mem_limit:
            return 0
        return self._size - (self._put - self._ack)

    def _wait_room(self, deadline: float | None) -> bool:
        """Wait until at least one event fits; False on the deadline."""
        if deadline is not None and deadline <= time.monotonic():
            return False
        start = time.monotonic()
        self._put_waiters += 1
        try:
            while True:
                if deadline is None:
                    self._not_full.wait()
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._not_full.wait(left)
                if self._closed:
                    raise StoreClosed("store closed while a put was waiting")
                if self._room():
                    return True
        finally:
            self._put_waiters -= 1
            self._blocking += time.monotonic() - start

    def _do_put(self, events: Sequence[StoredEvent]) -> None:
        n = len(events)
        first = self._put + 1
        i = first & self._mask
        if n == 1:  # the common put of one entry: skip the list building below (~3x faster)
            e = events[0]
            self._events[i] = e
            self._cum_mem[i] = self._put_mem = self._put_mem + e.size
            self._cum_rows[i] = self._put_rows = self._put_rows + e.rows
            self._cum_acks[i] = self._put_acks = self._put_acks + e.ack_point
            if self._cum_ddls is not None:
                self._cum_ddls[i] = self._put_ddls = self._put_ddls + e.is_ddl
            self._put = first
            ts = e.position.timestamp
            if ts:
                self._put_exec = ts
            if self._get_waiters:
                self._not_empty.notify_all()
            return
        mem = list(accumulate(map(_size_of, events), initial=self._put_mem))
        rows = list(accumulate(map(_rows_of, events), initial=self._put_rows))
        acks = list(accumulate(map(_ack_point_of, events), initial=self._put_acks))
        self._write(self._events, i, events)
        self._write(self._cum_mem, i, mem[1:])
        self._write(self._cum_rows, i, rows[1:])
        self._write(self._cum_acks, i, acks[1:])
        if self._cum_ddls is not None:
            ddls = list(accumulate(map(_is_ddl_of, events), initial=self._put_ddls))
            self._write(self._cum_ddls, i, ddls[1:])
            self._put_ddls = ddls[-1]
        self._put_mem = mem[-1]
        self._put_rows = rows[-1]
        self._put_acks = acks[-1]
        self._put = first + n - 1
        ts = _exec_time(events)
        if ts:
            self._put_exec = ts
        if self._get_waiters:
            self._not_empty.notify_all()

    def _write(self, ring: list, i: int, values: Sequence) -> None:
        n = len(values)
        if i + n <= self._size:
            ring[i:i + n] = values
        else:  # wraps around the end of the ring
            k = self._size - i
            ring[i:] = values[:k]
            ring[:n - k] = values[k:]

    # ------------------------------------------------------------------ get

    def get(self, batch_size: int, timeout: float | None = None,
            cancelled: Callable[[], bool] | None = None) -> Batch:
        """Canal's get: the next batch after the get cursor.

        Waits until "enough" is available: batch_size events (ITEMSIZE) or batch_size x mem_unit un-got bytes
        (MEMSIZE), or the store is full; ``timeout`` None waits as long as that takes, otherwise at most that
        many seconds, then returns what is there (possibly nothing). timeout 0 is ``try_get``. ``cancelled``:
        asked every CANCEL_POLL seconds while waiting; True ends the wait early (see ``wait_for``).
        The batch: ITEMSIZE up to batch_size events; MEMSIZE events while the bytes taken before each are
        <= batch_size x mem_unit (so at least one, and it may overshoot by one); with DDL isolation a DDL
        comes alone in its own batch. Raises StoreClosed if the store is or gets closed.
        """
        if batch_size <= 0:
            raise ValueError(f"batch size must be positive, got {batch_size}")
        with self._lock:
            if self._closed:
                raise StoreClosed("store is closed")
            if (timeout is None or timeout > 0) and not self._enough(batch_size):
                self._wait_enough(batch_size, timeout, cancelled)
            return self._do_get(batch_size)

    def try_get(self, batch_size: int) -> Batch:
        """Canal's tryGet: whatever is available now, without waiting."""
        return self.get(batch_size, 0.0)

    def get_if_enough(self, batch_size: int) -> Batch | None:
        """The batch a get would return without waiting, or None when it would wait."""
        if batch_size <= 0:
            raise ValueError(f"batch size must be positive, got {batch_size}")
        with self._lock:
            if self._closed:
                raise StoreClosed("store is closed")
            return self._do_get(batch_size) if self._enough(batch_size) else None

    def wait_for(self, batch_size: int, timeout: float | None = None,
                 cancelled: Callable[[], bool] | None = None) -> bool:
        """Wait, taking nothing, until a get of ``batch_size`` would not wait; at most ``timeout`` seconds
        (None: no limit). ``cancelled`` is asked every CANCEL_POLL seconds (under the store's lock: it must be
        quick) and ends the wait when it says True. Returns whether enough is there. A caller that must not
        hold its own locks while waiting (the embedded server) waits here, then takes the batch with
        ``get_if_enough`` or ``try_get``. Raises StoreClosed if the store is or gets closed."""
        with self._lock:
            if self._closed:
                raise StoreClosed("store is closed")
            if self._enough(batch_size):
                return True
            if timeout is not None and timeout <= 0:
                return False
            return self._wait_enough(batch_size, timeout, cancelled)

    def _enough(self, batch_size: int) -> bool:
        if self._memsize:
            if self._put_mem - self._get_mem >= batch_size * self._mem_unit:
                return True
        elif self._put - self._get >= batch_size:
            return True
        # full: nothing more can come without an ack (the very test that makes a put wait)
        return self._get < self._put and self._room() == 0

    def _wait_enough(self, batch_size: int, timeout: float | None,
                     cancelled: Callable[[], bool] | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        self._get_waiters += 1
        try:
            while True:
                if deadline is None:
                    self._not_empty.wait(CANCEL_POLL if cancelled is not None else None)
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._not_empty.wait(min(left, CANCEL_POLL) if cancelled is not None else left)
                if self._closed:
                    raise StoreClosed("store closed while a get was waiting")
                if self._enough(batch_size):
                    return True
                if cancelled is not None and cancelled():
                    return False
        finally:
            self._get_waiters -= 1

    def _do_get(self, batch_size: int) -> Batch:
        get, put = self._get, self._put
        if get >= put:
            return Batch([])
        first = get + 1
        mask = self._mask
        if self._memsize:
            # last event = the first whose running byte total passes the budget (the overshoot), or put
            limit = self._get_mem + batch_size * self._mem_unit
            cum_mem = self._cum_mem
            end = bisect_right(range(first, put + 1), limit, key=lambda s: cum_mem[s & mask]) + first
            if end > put:
                end = put
        else:
            end = min(get + batch_size, put)
        if self._cum_ddls is not None:
            cum = self._cum_ddls
            base = cum[first & mask] - self._events[first & mask].is_ddl  # type: ignore[union-attr]
            if cum[end & mask] > base:  # a DDL in the range: it goes alone, or ends the batch before it
                ddl = bisect_right(range(first, end + 1), base, key=lambda s: cum[s & mask]) + first
                end = ddl if ddl == first else ddl - 1
        events = self._slice(first, end)
        # Canal's ack position: the last event of the batch that ends a transaction or is a DDL
        ack_pos = None
        cum_acks = self._cum_acks
        top = cum_acks[end & mask]
        if events[-1].ack_point:  # the usual case when batches end on transaction boundaries
            ack_pos = events[-1].position
        elif top > cum_acks[first & mask] - events[0].ack_point:
            at = bisect_left(range(first, end + 1), top, key=lambda s: cum_acks[s & mask])
            ack_pos = events[at].position
        self._get = end
        self._get_mem = self._cum_mem[end & mask]
        self._get_rows = self._cum_rows[end & mask]
        ts = _exec_time(events)
        if ts:
            self._get_exec = ts
        return Batch(events, first, end, events[0].position, events[-1].position, ack_pos)

    def _slice(self, first: int, last: int) -> list[StoredEvent]:
        i, j = first & self._mask, (last & self._mask) + 1
        # slots first..last hold events: put filled them and ack has not freed them yet
        if i < j:
            return cast(list[StoredEvent], self._events[i:j])
        return cast(list[StoredEvent], self._events[i:] + self._events[:j])

    # ------------------------------------------------------------------ ack / rollback

    def ack(self, position: EntryPosition | None = None, seq: int | None = None) -> int:
        """Free the slots up to and including an event already returned by a get (Canal's cleanUntil).

        ``seq`` (a batch's end_seq) names the event exactly; ``position`` alone finds the first un-acked got
        event at that journal name and offset (and timestamp when given); with both, the event at ``seq``
        must be at ``position``. Returns how many events were freed. Raises StoreError ("no match ack
        position") when nothing matches, e.g. a seq already acked or not yet got; StoreClosed after close.
        """
        if position is None and seq is None:
            raise ValueError("ack needs a position or a seq")
        with self._lock:
            if self._closed:
                raise StoreClosed("store is closed")
            ack, get = self._ack, self._get
            if seq is not None:
                if not ack < seq <= get or (position is not None and not _matches(self._event(seq), position)):
                    raise StoreError(f"no match ack position {position} seq {seq} (ack seq {ack}, get seq {get})")
                target = seq
            else:
                assert position is not None
                for s in range(ack + 1, get + 1):
                    if _matches(self._event(s), position):
                        target = s
                        break
                else:
                    raise StoreError(f"no match ack position {position}")
            mask = self._mask
            last = self._event(target)
            self._last_acked = last.position
            ts = last.position.timestamp
            # release the bytes now (not when the slot is reused): MEMSIZE's bound is on what we hold
            i, j = (ack + 1) & mask, (target & mask) + 1
            if i < j:
                self._events[i:j] = [None] * (j - i)
            else:
                self._events[i:] = [None] * (self._size - i)
                self._events[:j] = [None] * j
            self._ack = target
            self._ack_mem = self._cum_mem[target & mask]
            self._ack_rows = self._cum_rows[target & mask]
            if ts:
                self._ack_exec = ts
            if self._put_waiters:
                self._not_full.notify_all()
            return target - ack

    def rollback(self) -> None:
        """Forget what was got but not acked: the next gets return those same events again, in order."""
        with self._lock:
            self._get = self._ack
            self._get_mem = self._ack_mem
            self._get_rows = self._ack_rows
            if self._get_waiters:
                self._not_empty.notify_all()

    def _event(self, seq: int) -> StoredEvent:
        return self._events[seq & self._mask]  # type: ignore[return-value]

    # ------------------------------------------------------------------ positions, counters, close

    def first_position(self) -> EntryPosition | None:
        """Canal's getFirstPosition: the first un-acked event if nothing was acked yet, else the last acked
        one; included=False. None when the store never held anything."""
        with self._lock:
            if self._closed:
                return None
            if self._ack == -1:
                return replace(self._event(0).position, included=False) if self._put > -1 else None
            assert self._last_acked is not None  # set by every ack
            return replace(self._last_acked, included=False)

    def latest_position(self) -> EntryPosition | None:
        """Canal's getLatestPosition: the last put event; included=True unless it was already acked."""
        with self._lock:
            if self._closed or self._put == -1:
                return None
            if self._put == self._ack:
                assert self._last_acked is not None  # put == ack > -1: something was acked
                return replace(self._last_acked, included=False)
            return replace(self._event(self._put).position, included=True)

    def stats(self) -> StoreStats:
        with self._lock:
            return StoreStats(self._put, self._get, self._ack, self._put_mem, self._get_mem, self._ack_mem,
                              self._put_rows, self._get_rows, self._ack_rows, self._put_exec, self._get_exec,
                              self._ack_exec, self._blocking, _now_ms())

    def close(self) -> None:
        """Stop the store: wake every blocked put and get (they raise StoreClosed) and drop the events.

        Counters stay readable; positions become None (Canal's cleanAll)."""
        with self._lock:
            self._closed = True
            self._events = [None] * self._size
            self._not_full.notify_all()
            self._not_empty.notify_all()

    def __enter__(self) -> MemoryEventStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _exec_time(events: Sequence[StoredEvent]) -> int:
    """The latest execute time in a batch (0 if none has one): the store delays compare it with now."""
    for e in reversed(events):
        ts = e.position.timestamp
        if ts:
            return ts
    return 0


def _matches(event: StoredEvent, position: EntryPosition) -> bool:
    # Canal's checkPosition: offset and journal (when named), and the execute time when given
    p = event.position
    if position.timestamp is not None and position.timestamp != p.timestamp:
        return False
    return p.position == position.position and (not position.journal_name or p.journal_name == position.journal_name)
