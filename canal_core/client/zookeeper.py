"""Find the canal-server running a destination through ZooKeeper (Canal's ClusterNodeAccessStrategy).

``ServerDiscovery(zk, destination)`` watches ``{dest}/running`` (the active server) and ``{dest}/cluster``
(every server that can run it). Calling it returns what a cluster connector should try, as Canal's
``nextNode()`` decides: ``[running server]`` when one is active; otherwise the registered servers (one of
them may start the destination lazily), shuffled once per change as Canal does; ``[]`` when none is known.

    discovery = ServerDiscovery("127.0.0.1:2181", "example")
    discovery.start()
    connector = ClusterConnector(discovery, "example")           # asks discovery() before every round
    discovery.watch(lambda addrs: log.info("servers: %s", addrs))  # called on every change

An address read from ZooKeeper is checked before a connector may use it (``check_server_address``): an
``ip:port`` or ``hostname:port`` with a port 1-65535 and, with ``allowed`` given, a host inside one of those
networks or names. A refused address is logged as an error (``refused`` keeps the last message) and left out,
as if that server were not there: a node someone rewrote cannot send clients to an arbitrary place.
"""

from __future__ import annotations

import ipaddress
import logging
import random
import threading
from collections.abc import Callable, Iterable

from kazoo.exceptions import NoAuthError
from kazoo.protocol.states import ZnodeStat

from ..meta.zkclient import DEFAULT_SESSION_TIMEOUT_MS, ClientHolder, ZkTarget
from ..meta.zkpayload import decode_running, split_address
from ..protocol.errors import CanalError
from ..protocol.zkpaths import destination_cluster_root, server_running_path

log = logging.getLogger(__name__)

Address = tuple[str, int]


class ServerAddressError(CanalError, ValueError):
    """An address in ZooKeeper that a client must not connect to; the message names the node and why."""


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_allowed(entries: Iterable[str]) -> tuple[Network | str, ...]:
    """Allow-list entries: networks or addresses (10.0.0.0/8, 10.0.0.7, ::1) or host names (canal-1.example)."""
    out: list[Network | str] = []
    for entry in (e.strip() for e in entries):
        if not entry:
            continue
        try:
            out.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            if not _is_hostname(entry):
                raise ValueError(f"allowed server {entry!r} is neither a network, an address nor a host name") from None
            out.append(entry.lower())
    return tuple(out)


def check_server_address(text: str, node: str, allowed: tuple[Network | str, ...] = ()) -> Address:
    """``text`` (read from ``node``) as (host, port), or ServerAddressError."""
    address = split_address(text)
    if address is None:
        raise ServerAddressError(f"{node} names {text!r}, not ip:port: refused")
    host, port = address
    if not 0 < port < 65536:
        raise ServerAddressError(f"{node} names {text!r}: port {port} is outside 1-65535: refused")
    try:
        ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        ip = None
        if not _is_hostname(host):
            raise ServerAddressError(f"{node} names {text!r}: {host!r} is neither an IP address nor a host name: "
                                     f"refused") from None
    if allowed and not any(ip in a if ip is not None and not isinstance(a, str) else host.lower() == a
                           for a in allowed):
        raise ServerAddressError(f"{node} names {text!r}, outside the allowed servers "
                                 f"({', '.join(map(str, allowed))}): refused")
    return address


def _is_hostname(text: str) -> bool:
    labels = text.rstrip(".").split(".")
    return len(text) <= 253 and all(
        0 < len(label) <= 63 and label.replace("-", "").isalnum() and label.isascii()
        and label[0] != "-" and label[-1] != "-" for label in labels)


class ServerDiscovery:
    """Callable ``() -> list[(host, port)]`` over ZooKeeper; see the module docstring."""

    def __init__(self, zk: ZkTarget, destination: str, *,
                 session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS, allowed: Iterable[str] = ()) -> None:
        self._holder = ClientHolder(zk, session_timeout_ms)
        self.destination = destination
        self.allowed = parse_allowed(allowed)
        self.refused: str | None = None  # the last address refused, and why
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
        root = destination_cluster_root(self.destination)
        zk.DataWatch(server_running_path(self.destination), self._on_running)
        try:
            zk.ensure_path(root)
        except NoAuthError:
            # the tree is under canal.zookeeper.auth and this client reads only: watch for a server to make it
            zk.DataWatch(root, self._on_cluster_root)
            return
        zk.ChildrenWatch(root, self._on_cluster)

    def _on_cluster_root(self, data: bytes | None, stat: ZnodeStat | None) -> bool:
        if not self._started:
            return False
        if stat is None:
            return True
        self._holder.client.ChildrenWatch(destination_cluster_root(self.destination), self._on_cluster)
        return False

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
        address = self._checked(str(decode_running(data).get("address") or ""),
                                server_running_path(self.destination)) if data else None
        self._update(running=address, cluster=None)
        return True

    def _on_cluster(self, children: list[str]) -> bool:
        if not self._started:
            return False
        root = destination_cluster_root(self.destination)
        found = [a for a in (self._checked(c, f"{root}/{c}") for c in children) if a is not None]
        random.shuffle(found)
        self._update(running=None, cluster=found, running_known=False)
        return True

    def _checked(self, text: str, node: str) -> Address | None:
        try:
            return check_server_address(text, node, self.allowed)
        except ServerAddressError as e:
            if self.refused != str(e):
                log.error("destination %s: %s", self.destination, e)
            self.refused = str(e)
            return None

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
