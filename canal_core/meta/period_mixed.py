"""Canal's PeriodMixedMetaManager: memory meta with cursors flushed to ZooKeeper every period."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from ..protocol.identity import ClientIdentity
from ..protocol.position import LogPosition
from .errors import MetaStoreError
from .manager import FlushThread, MemoryMetaManager
from .zkclient import (
    DEFAULT_SESSION_TIMEOUT_MS,
    ZkTarget,
)
from .zkfence import Fence, FencedError
from .zookeeper import ZooKeeperMetaManager

log = logging.getLogger(__name__)


class PeriodMixedMetaManager(MemoryMetaManager):
    """Canal's PeriodMixedMetaManager (spring/default-instance.xml): memory, with ZooKeeper behind it.

    - subscribe / unsubscribe: memory at once, ZooKeeper soon after (the flusher thread is woken);
    - update_cursor: memory; the flusher writes each changed cursor once per ``flush_period_ms``
      (canal.zookeeper.flush.period), however many acks the period saw;
    - batches: memory only (a failover redelivers what was not acked); marks a direct manager left in
      ZooKeeper are loaded with the destination;
    - a destination is loaded from ZooKeeper the first time it is used; ``stop()`` flushes, then forgets.
    A write the fence refuses is logged and dropped (another server owns the destination now)."""

    def __init__(self, zk: ZkTarget, *, flush_period_ms: float = 1000,
                 fence: Fence | Iterable[Fence] | None = None,
                 session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS) -> None:
        super().__init__()
        if flush_period_ms <= 0:
            raise ValueError(f"canal.zookeeper.flush.period must be > 0, got {flush_period_ms}")
        self.zookeeper = ZooKeeperMetaManager(zk, fence=fence, session_timeout_ms=session_timeout_ms)
        self.flush_period_ms = flush_period_ms
        self._loaded: set[str] = set()
        self._dirty: set[ClientIdentity] = set()
        self._sub_ops: list[tuple[str, ClientIdentity]] = []  # ("subscribe" | "unsubscribe", client), in order
        self._io_lock = threading.Lock()  # one flush at a time: an older snapshot never overwrites a newer one
        self._flusher = FlushThread(self.flush, flush_period_ms, "meta-zk-flush")

    def set_fence(self, fence: Fence | Iterable[Fence] | None) -> None:
        self.zookeeper.set_fence(fence)

    # ---- lifecycle ----
    def start(self) -> None:
        self.zookeeper.start()
        super().start()
        self._flusher.start()

    def stop(self) -> None:
        self._flusher.stop()
        try:
            self.flush()
        except FencedError as e:
            log.error("%s; the last cursors of this server are dropped", e)
        # other failures raise with the state kept in memory, so stop() can be retried
        with self._lock:
            super().stop()
            self._loaded.clear()
            self._dirty.clear()
            self._sub_ops.clear()
        self.zookeeper.stop()

    # ---- persistence hooks ----
    def _touch(self, destination: str) -> None:
        if destination in self._loaded:
            return
        zk = self.zookeeper
        clients = zk.list_all_subscribe(destination)
        loaded = [(c, zk.get_cursor(c), zk.list_all_batches(c)) for c in clients]
        self._loaded.add(destination)
        subs = self._subscriptions.setdefault(destination, [])
        for client, cursor, batches in loaded:
            if client not in subs:
                subs.append(client)
            if cursor is not None and client not in self._cursors:
                self._cursors[client] = cursor
            if batches and client not in self._batches:
                b = self._client_batches(client)
                for bid, rng in batches.items():
                    b.add(rng, bid)

    def subscribe(self, client: ClientIdentity) -> None:
        with self._lock:
            super().subscribe(client)
            self._sub_ops.append(("subscribe", client))
        self._flusher.wake()  # rare: write soon rather than at the next period

    def unsubscribe(self, client: ClientIdentity) -> None:
        with self._lock:
            super().unsubscribe(client)
            self._sub_ops.append(("unsubscribe", client))
            self._dirty.discard(client)
        self._flusher.wake()

    def update_cursor(self, client: ClientIdentity, position: LogPosition) -> None:
        with self._lock:
            super().update_cursor(client, position)
            self._dirty.add(client)

    # ---- flushing ----
    def flush(self) -> None:
        """Write pending subscription changes, then every cursor changed since the last flush."""
        with self._io_lock:
            with self._lock:
                ops = list(self._sub_ops)
                self._sub_ops.clear()
                subscribed = {c for d in self._loaded for c in self._subscriptions.get(d, ())}
                cursors = [(c, self._cursors[c]) for c in sorted(self._dirty, key=str)
                           if c in self._cursors and c in subscribed]
                self._dirty.clear()
            done_ops = 0
            done_cursors = 0
            try:
                for kind, client in ops:
                    if kind == "subscribe":
                        self.zookeeper.subscribe(client)
                    else:
                        self.zookeeper.unsubscribe(client)
                    done_ops += 1
                for client, cursor in cursors:
                    self.zookeeper.update_cursor(client, cursor)
                    done_cursors += 1
            except FencedError:
                raise  # not ours any more: nothing is kept for a retry
            except MetaStoreError:
                with self._lock:  # keep what is not written for the next flush, in order
                    self._sub_ops[:0] = ops[done_ops:]
                    self._dirty.update(c for c, _ in cursors[done_cursors:])
                raise
