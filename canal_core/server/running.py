"""HA of canal-server: which server runs a destination (Canal's ServerRunningMonitor), with split-brain safety.

The election and its rules (Canal's, and the fence beyond them): ``canal_core.meta.election``.

Wiring (canal-server with canal.zkServers set): one ``ServerRegistration`` per process; per destination a
``ServerRunningMonitor(zk, dest, "ip:port", on_start=..., on_stop=...)`` whose ``fence`` is passed to the
destination's ZooKeeper meta manager (``meta.set_fence(monitor.fence)``) before ``start()``.
"""

from __future__ import annotations

import logging
import threading

from kazoo.client import KazooClient
from kazoo.exceptions import (
    KazooException,
    NoAuthError,
    NoNodeError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState

from ..meta.election import DEFAULT_DELAY_S, Callback, RunningMonitor, ensure_ephemeral, op_timeout
from ..meta.errors import MetaStoreError
from ..meta.zkacl import AUTH_KEY, secure_tree
from ..meta.zkclient import DEFAULT_SESSION_TIMEOUT_MS, ClientHolder, ZkTarget
from ..meta.zkfence import Fence
from ..meta.zkpayload import encode_server_running, split_address
from ..protocol.zkpaths import (
    CLUSTER_ROOT,
    cluster_path,
    destination_cluster_path,
    destination_path,
    server_running_path,
)

log = logging.getLogger(__name__)

class ServerRunningMonitor(RunningMonitor):
    """Canal's ServerRunningMonitor for one destination, with a fence (see the module docstring).

    ``zk``: KazooClient or connect string (canal.zkServers); ``address``: "ip:port" this server serves on
    (canal.register.ip or canal.ip, and canal.port); ``on_start`` / ``on_stop``: start and stop the
    destination's instance; ``delay_s``: how long a standby waits (Canal: 5 s); ``cid``: optional cluster id
    written as Canal's "cid"; ``session_timeout_ms``: for a client created from a connect string."""

    def __init__(self, zk: ZkTarget, destination: str, address: str, *,
                 on_start: Callback | None = None, on_stop: Callback | None = None,
                 delay_s: float = DEFAULT_DELAY_S, cid: int | None = None,
                 session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS) -> None:
        super().__init__(zk, path=server_running_path(destination), data=encode_server_running(address, cid=cid),
                         address=address, parent=destination_path(destination), on_start=on_start,
                         on_stop=on_stop, delay_s=delay_s, fence=Fence(destination),
                         session_timeout_ms=session_timeout_ms, name=f"running-{destination}")
        self.destination = destination
        self.cluster_path = destination_cluster_path(destination, address)

    @property
    def fence(self) -> Fence:
        """Pass it to the destination's ZooKeeper meta manager: ``meta.set_fence(monitor.fence)``."""
        assert self._fence is not None
        return self._fence

    def _on_started(self) -> None:
        ensure_ephemeral(self.zk, self.cluster_path)

    def _on_reconnected(self) -> None:
        ensure_ephemeral(self.zk, self.cluster_path)

    def _on_stopping(self) -> None:
        try:
            stat = self.zk.exists_async(self.cluster_path).get(timeout=self._timeout)
            if stat is not None and stat.ephemeralOwner == self._session():
                self.zk.delete_async(self.cluster_path).get(timeout=self._timeout)
        except NoNodeError:
            pass


class ServerRegistration:
    """``/otter/canal/cluster/{ip:port}`` EPHEMERAL for as long as the server runs, re-created after a
    session expiry (Canal's CanalController registers it and re-registers on a new session)."""

    def __init__(self, zk: ZkTarget, address: str, *,
                 session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS) -> None:
        if split_address(address) is None:
            raise ValueError(f"address {address!r} is not ip:port")
        self._holder = ClientHolder(zk, session_timeout_ms)
        self.address = address
        self.path = cluster_path(address)
        self._zk: KazooClient | None = None
        self._started = False

    def start(self) -> None:
        if self._started:
            return
        self._zk = self._holder.acquire()
        if self._zk.default_acl:  # canal.zookeeper.auth: nodes made before it was set get its ACL too
            try:
                secure_tree(self._zk, self._zk.default_acl)
            except NoAuthError as e:
                self._holder.release()
                raise MetaStoreError(f"ZooKeeper refused to set {AUTH_KEY}'s ACL on an existing node under /otter "
                                     f"({e!r}): it is protected by other credentials; use those, or remove the "
                                     f"node with them") from e
        self._zk.ensure_path(CLUSTER_ROOT)
        ensure_ephemeral(self._zk, self.path)
        self._started = True
        self._zk.add_listener(self._on_state)

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED and self._started:
            threading.Thread(target=self._restore, name="cluster-registration", daemon=True).start()

    def _restore(self) -> None:
        try:
            if self._started and self._zk is not None:
                ensure_ephemeral(self._zk, self.path)
        except (KazooException, KazooTimeoutError) as e:
            log.warning("re-registering %s failed: %r", self.path, e)

    def stop(self) -> None:
        if not self._started or self._zk is None:
            return
        self._started = False
        self._zk.remove_listener(self._on_state)
        try:
            timeout = op_timeout(self._zk)
            stat = self._zk.exists_async(self.path).get(timeout=timeout)
            if stat is not None and stat.ephemeralOwner == self._zk.client_id[0]:
                self._zk.delete_async(self.path).get(timeout=timeout)
        except (KazooException, KazooTimeoutError) as e:
            log.warning("removing %s failed (the session expiry will): %r", self.path, e)
        self._holder.release()
        self._zk = None
