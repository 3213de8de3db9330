"""Find the canal-server running a destination through ZooKeeper (Canal's ClusterNodeAccessStrategy).

``ServerDiscovery(zk, destination)`` watches ``{dest}/running`` (the active server) and ``{dest}/cluster``
(every server that can run it). Calling it returns what a cluster connector should try, as Canal's
``nextNode()`` decides: ``[running server]`` when one is active; otherwise the registered servers (one of
them may start the destination lazily), shuffled once per change as Canal does; ``[]`` when none is known.

    discovery = ServerDiscovery("127.0.0.1:2181", "example")
    discovery.start()
    connector = ClusterConnector(discovery, "example")           # asks discovery() before every round
    discovery.watch(lambda addrs: log.info("servers: %s", addrs))  # called on every change
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.protocol.states import ZnodeStat

from ..meta.zookeeper import (
    DEFAULT_SESSION_TIMEOUT_MS,
    ClientHolder,
    decode_running,
    destination_cluster_root,
    server_running_path,
    split_address,
)

log = logging.getLogger(__name__)

Address = tuple[str, int]


class ServerDiscovery:
    """Callable ``() -> list[(host, port)]`` over ZooKeeper; see the module docstring."""

    def __init__(self, zk: KazooClient | str, destination: str, *,
                 session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS) -> None:
        self._holder = ClientHolder(zk, session_timeout_ms)
        self.destination = destination
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._running: Address | None = None
        self._cluster: list[Address] = []
        self._callbacks: list[Callable[[list[Address]], None]] = []
        self._started = False

    def start(self) -> None:
        if self._started:
            return
        zk = self._holder.acquire()
        self._started = True
        # kazoo's recipes re-arm their watches after reconnections; the cluster node must exist for a
        # children watch (a destination no server registered yet)
        zk.ensure_path(destination_cluster_root(self.destination))
        zk.DataWatch(server_running_path(self.destination), self._on_running)
        zk.ChildrenWatch(destination_cluster_root(self.destination), self._on_cluster)

    def stop(self) -> None:
        if not self._started:
            return
        self._started = False  # the recipes' callbacks return False from now on, which ends their watches
        self._holder.release()

    def __enter__(self) -> ServerDiscovery:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- what connectors ask ----
    def __call__(self) -> list[Address]:
        return self.addresses()

    def addresses(self) -> list[Address]:
        with self._lock:
            return self._addresses()

    def running(self) -> Address | None:
        """The active server, or None."""
        with self._lock:
            return self._running

    def cluster(self) -> list[Address]:
        """Every server registered for the destination (shuffled)."""
        with self._lock:
            return list(self._cluster)

    def wait_for_running(self, timeout: float | None = None,
                         predicate: Callable[[Address | None], bool] = lambda a: a is not None) -> Address | None:
        """Wait until the active server satisfies ``predicate`` (default: there is one); returns it."""
        with self._changed:
            self._changed.wait_for(lambda: predicate(self._running), timeout)
            return self._running

    def watch(self, callback: Callable[[list[Address]], None]) -> None:
        """Call ``callback(addresses())`` now and whenever the running server or the cluster changes
        (from kazoo's event thread: keep it short)."""
        with self._lock:
            self._callbacks.append(callback)
            now = self._addresses()
        callback(now)

    # ---- kazoo callbacks ----
    def _addresses(self) -> list[Address]:
        if self._running is not None:
            return [self._running]
        return list(self._cluster)

    def _on_running(self, data: bytes | None, stat: ZnodeStat | None) -> bool:
        if not self._started:
            return False
        address = split_address(str(decode_running(data).get("address") or "")) if data else None
        self._update(running=address, cluster=None)
        return True

    def _on_cluster(self, children: list[str]) -> bool:
        if not self._started:
            return False
        found = [a for a in (split_address(c) for c in children) if a is not None]
        random.shuffle(found)
        self._update(running=None, cluster=found, running_known=False)
        return True

    def _update(self, *, running: Address | None, cluster: list[Address] | None,
                running_known: bool = True) -> None:
        with self._changed:
            before = (self._running, sorted(self._cluster))
            if running_known:
                self._running = running
            if cluster is not None:
                self._cluster = cluster
            after = self._addresses()
            changed = (self._running, sorted(self._cluster)) != before  # a reshuffle alone is no change
            callbacks = list(self._callbacks) if changed else []
            self._changed.notify_all()
        for cb in callbacks:
            try:
                cb(after)
            except Exception:
                log.exception("discovery callback failed")
