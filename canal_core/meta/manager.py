"""Meta managers: client subscriptions, cursors and outstanding batches (Canal's CanalMetaManager).

``MetaManager`` is the interface the embedded server and the parse-position adapter use; ZooKeeper and
period-mixed (memory + periodic ZooKeeper flush) managers will implement it too. ``MemoryMetaManager`` keeps
everything in memory and is the base of the mixed managers, as in Canal.

Rules kept from Canal:
- batch ids come from a per-client counter starting at 1 that never goes back while the manager lives
  (clearing or rolling back batches does not reuse ids); an explicit id moves the counter past it;
- ``remove_batch`` only removes the oldest outstanding batch ("batchId:x is not the firstly:y") and returns
  None for an unknown id, so the caller can word its own error;
- a client is (destination, client_id); subscribing again replaces the filter and keeps cursor and batches;
- unsubscribing removes the subscription only: the in-memory cursor and batches stay, so a client that
  comes back within the same process resumes where it was.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable

from ..protocol.identity import ClientIdentity
from ..protocol.position import LogPosition
from .compare import min_position
from .errors import BatchOrderError, MetaStoreError
from .model import PositionRange


class MetaManager(ABC):
    """Interface of every meta manager. All methods are thread-safe."""

    @abstractmethod
    def start(self) -> None:
        """Acquire resources (threads, sessions, files)."""

    @abstractmethod
    def stop(self) -> None:
        """Flush what must survive and release resources."""

    def __enter__(self) -> MetaManager:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- subscriptions ----
    @abstractmethod
    def subscribe(self, client: ClientIdentity) -> None: ...

    @abstractmethod
    def unsubscribe(self, client: ClientIdentity) -> None: ...

    @abstractmethod
    def has_subscribe(self, client: ClientIdentity) -> bool: ...

    @abstractmethod
    def list_all_subscribe(self, destination: str) -> list[ClientIdentity]:
        """Subscribed clients of ``destination``, in subscription order (with their current filters)."""

    # ---- cursors ----
    @abstractmethod
    def get_cursor(self, client: ClientIdentity) -> LogPosition | None: ...

    @abstractmethod
    def update_cursor(self, client: ClientIdentity, position: LogPosition) -> None: ...

    # ---- outstanding batches ----
    @abstractmethod
    def add_batch(self, client: ClientIdentity, position_range: PositionRange, batch_id: int | None = None) -> int:
        """Register an outstanding batch; returns its id (the next one of the client's counter, or
        ``batch_id`` when given: used to reload batches a persistent store kept)."""

    @abstractmethod
    def get_batch(self, client: ClientIdentity, batch_id: int) -> PositionRange | None: ...

    @abstractmethod
    def remove_batch(self, client: ClientIdentity, batch_id: int) -> PositionRange | None:
        """Remove and return the batch; None when it is not outstanding. Raises BatchOrderError when it is
        not the oldest outstanding batch."""

    @abstractmethod
    def get_first_batch(self, client: ClientIdentity) -> tuple[int, PositionRange] | None: ...

    @abstractmethod
    def get_last_batch(self, client: ClientIdentity) -> tuple[int, PositionRange] | None: ...

    @abstractmethod
    def list_all_batches(self, client: ClientIdentity) -> dict[int, PositionRange]:
        """Outstanding batches by id, ascending."""

    @abstractmethod
    def clear_all_batches(self, client: ClientIdentity) -> None: ...

    # ---- derived ----
    def min_cursor(self, destination: str) -> LogPosition | None:
        """The smallest cursor over the destination's subscribed clients (clients without a cursor are
        skipped, as in Canal's MetaLogPositionManager); None when no client has one. Feed it to
        ``canal_core.parse.position.MetaPositionManager``."""
        result: LogPosition | None = None
        for client in self.list_all_subscribe(destination):
            cursor = self.get_cursor(client)
            if cursor is not None:
                result = cursor if result is None else min_position(result, cursor)
        return result


class _ClientBatches:
    """One client's outstanding batches, ids ascending (dict order), and its id counter."""

    __slots__ = ("next_id", "ranges")

    def __init__(self) -> None:
        self.ranges: dict[int, PositionRange] = {}
        self.next_id = 1

    def add(self, position_range: PositionRange, batch_id: int | None) -> int:
        if batch_id is None:
            batch_id = self.next_id
            self.next_id += 1
            self.ranges[batch_id] = position_range  # the largest id so far: order kept
            return batch_id
        self.next_id = max(self.next_id, batch_id + 1)
        out_of_order = bool(self.ranges) and batch_id < next(reversed(self.ranges))
        self.ranges[batch_id] = position_range
        if out_of_order:
            self.ranges = dict(sorted(self.ranges.items()))
        return batch_id


class FlushThread:
    """The flush thread of a mixed meta manager (memory + a periodic write to a file or ZooKeeper): ``flush``
    every ``period_ms`` (sooner after ``wake()``) between ``start()`` and ``stop()``; the owner does the final
    flush after ``stop()``. A failed flush is logged and tried again next period: the cursors stay in memory
    meanwhile. ``period_ms`` 0 runs no thread (the owner writes synchronously)."""

    def __init__(self, flush: Callable[[], None], period_ms: float, name: str) -> None:
        self._flush = flush
        self.period_ms = period_ms
        self.name = name
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None and self.period_ms > 0:
            self._stopping.clear()
            self._wake.clear()
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _loop(self) -> None:
        period = self.period_ms / 1000.0
        while not self._stopping.is_set():
            self._wake.wait(period)
            self._wake.clear()
            if self._stopping.is_set():
                return
            try:
                self._flush()
            except MetaStoreError as e:
                logging.getLogger(__name__).error("%s", e)


class MemoryMetaManager(MetaManager):
    """Everything in memory (Canal's MemoryMetaManager); lost on restart."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._subscriptions: dict[str, list[ClientIdentity]] = {}
        self._cursors: dict[ClientIdentity, LogPosition] = {}
        self._batches: dict[ClientIdentity, _ClientBatches] = {}
        self._started = False

    @property
    def is_started(self) -> bool:
        return self._started

    def start(self) -> None:
        self._started = True

    def stop(self) -> None:
        # Canal forgets everything on stop; a restarted instance builds a new state
        with self._lock:
            self._started = False
            self._subscriptions.clear()
            self._cursors.clear()
            self._batches.clear()

    # Subclasses hook in here: loading a destination lazily, and noting what must be persisted.
    def _touch(self, destination: str) -> None:
        """Called (under the lock) before a destination's state is read or changed."""

    def _changed(self, destination: str, *, subscription: bool) -> None:
        """Called (under the lock) after a subscription or cursor of ``destination`` changed."""

    # ---- subscriptions ----
    def subscribe(self, client: ClientIdentity) -> None:
        with self._lock:
            self._touch(client.destination)
            clients = self._subscriptions.setdefault(client.destination, [])
            if client in clients:
                clients.remove(client)  # re-subscribing replaces the filter (and moves it last, as Canal)
            clients.append(client)
            self._changed(client.destination, subscription=True)

    def unsubscribe(self, client: ClientIdentity) -> None:
        with self._lock:
            self._touch(client.destination)
            clients = self._subscriptions.get(client.destination)
            if clients and client in clients:
                clients.remove(client)
                self._changed(client.destination, subscription=True)

    def has_subscribe(self, client: ClientIdentity) -> bool:
        with self._lock:
            self._touch(client.destination)
            return client in self._subscriptions.get(client.destination, ())

    def list_all_subscribe(self, destination: str) -> list[ClientIdentity]:
        with self._lock:
            self._touch(destination)
            return list(self._subscriptions.get(destination, ()))

    # ---- cursors ----
    def get_cursor(self, client: ClientIdentity) -> LogPosition | None:
        with self._lock:
            self._touch(client.destination)
            return self._cursors.get(client)

    def update_cursor(self, client: ClientIdentity, position: LogPosition) -> None:
        with self._lock:
            self._touch(client.destination)
            self._cursors[client] = position
            self._changed(client.destination, subscription=False)

    # ---- batches ----
    def _client_batches(self, client: ClientIdentity) -> _ClientBatches:
        b = self._batches.get(client)
        if b is None:
            b = self._batches[client] = _ClientBatches()
        return b

    def add_batch(self, client: ClientIdentity, position_range: PositionRange, batch_id: int | None = None) -> int:
        if batch_id is not None and batch_id < 1:
            raise ValueError(f"batch id {batch_id} is not positive")
        with self._lock:
            return self._client_batches(client).add(position_range, batch_id)

    def get_batch(self, client: ClientIdentity, batch_id: int) -> PositionRange | None:
        with self._lock:
            b = self._batches.get(client)
            return b.ranges.get(batch_id) if b else None

    def remove_batch(self, client: ClientIdentity, batch_id: int) -> PositionRange | None:
        with self._lock:
            b = self._batches.get(client)
            if b is None or batch_id not in b.ranges:
                return None
            first = next(iter(b.ranges))
            if batch_id != first:
                raise BatchOrderError(batch_id, first)
            return b.ranges.pop(batch_id)

    def get_first_batch(self, client: ClientIdentity) -> tuple[int, PositionRange] | None:
        with self._lock:
            b = self._batches.get(client)
            if not b or not b.ranges:
                return None
            first = next(iter(b.ranges))
            return first, b.ranges[first]

    def get_last_batch(self, client: ClientIdentity) -> tuple[int, PositionRange] | None:
        with self._lock:
            b = self._batches.get(client)
            if not b or not b.ranges:
                return None
            last = next(reversed(b.ranges))
            return last, b.ranges[last]

    def list_all_batches(self, client: ClientIdentity) -> dict[int, PositionRange]:
        with self._lock:
            b = self._batches.get(client)
            return dict(b.ranges) if b else {}

    def clear_all_batches(self, client: ClientIdentity) -> None:
        with self._lock:
            b = self._batches.get(client)
            if b:
                b.ranges.clear()  # the counter stays: ids are never reused
