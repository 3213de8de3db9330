"""ZooKeeper connections: the servers string with its digest auth, clients shared per process."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TypeAlias

from kazoo.client import KazooClient
from kazoo.exceptions import (
    KazooException,
)
from kazoo.handlers.threading import KazooTimeoutError

from .errors import MetaStoreError
from .zkacl import ZkAuth

DEFAULT_SESSION_TIMEOUT_MS = 90_000  # Canal's ZkClientx default
DEFAULT_CONNECT_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class ZkServers:
    """canal.zkServers with the credentials of canal.zookeeper.auth: what ``zk`` may be besides a started
    client or a bare connect string (then nodes are created world-writable, as Canal does)."""

    servers: str
    auth: ZkAuth | None = None


ZkTarget: TypeAlias = "KazooClient | str | ZkServers"


def zk_servers(servers: str, auth: str = "") -> ZkServers:
    """canal.zkServers and canal.zookeeper.auth ("" or user:password) as one target."""
    return ZkServers(servers, ZkAuth.parse(auth) if auth else None)


def new_client(servers: str, *, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
               auth: ZkAuth | None = None) -> KazooClient:
    """A KazooClient for canal.zkServers (``host:port[,host:port...][/chroot]``), not started. With ``auth`` it
    authenticates (digest) and every node it creates gets ``auth.acl`` (kazoo's default_acl).

    Reconnection backs off to at most 2 s (kazoo's default grows to an hour): a server whose connection
    dropped should learn quickly whether its session survived."""
    if not servers:
        raise MetaStoreError("canal.zkServers is empty: set it to host:port[,host:port...][/chroot]")
    return KazooClient(hosts=servers, timeout=session_timeout_ms / 1000.0,
                       connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 2.0},
                       auth_data=auth.auth_data if auth else None, default_acl=auth.acl if auth else None)


def connect(servers: str, *, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
            timeout: float = DEFAULT_CONNECT_TIMEOUT_S, auth: ZkAuth | None = None) -> KazooClient:
    """A started client (``new_client`` + start); MetaStoreError naming canal.zkServers when it cannot connect
    (or canal.zookeeper.auth when ZooKeeper refuses the credentials)."""
    client = new_client(servers, session_timeout_ms=session_timeout_ms, auth=auth)
    try:
        client.start(timeout=timeout)
    except (KazooTimeoutError, KazooException, OSError) as e:
        client.stop()
        client.close()
        raise MetaStoreError(f"cannot connect to ZooKeeper {servers} (canal.zkServers) within {timeout:g} s: "
                             f"{e or type(e).__name__}") from e
    return client


class _SharedClients:
    """One started client per (canal.zkServers, session timeout) in the process, shared by every meta
    manager, monitor and discovery that names the same servers (Canal's ZkClientx.getZkClient cache), and
    closed when the last user releases it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[tuple[str, int, ZkAuth | None], tuple[KazooClient, int]] = {}

    def acquire(self, servers: str, session_timeout_ms: int, auth: ZkAuth | None = None) -> KazooClient:
        key = (servers, int(session_timeout_ms), auth)
        with self._lock:
            got = self._clients.get(key)
            if got is not None:
                self._clients[key] = (got[0], got[1] + 1)
                return got[0]
            client = connect(servers, session_timeout_ms=session_timeout_ms, auth=auth)
            self._clients[key] = (client, 1)
            return client

    def release(self, client: KazooClient) -> None:
        with self._lock:
            for key, (c, n) in list(self._clients.items()):
                if c is client:
                    if n > 1:
                        self._clients[key] = (c, n - 1)
                        return
                    del self._clients[key]
                    break
            else:
                return
        client.stop()
        client.close()


shared_clients = _SharedClients()


class ClientHolder:
    """A KazooClient given by the caller (used as is, never stopped here) or a connect string (a shared
    client acquired at ``acquire()`` and released at ``release()``)."""

    def __init__(self, zk: ZkTarget, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS) -> None:
        self._given = zk if isinstance(zk, KazooClient) else None
        self._servers = zk.servers if isinstance(zk, ZkServers) else zk if isinstance(zk, str) else ""
        self._auth = zk.auth if isinstance(zk, ZkServers) else None
        self._session_timeout_ms = session_timeout_ms
        self._client: KazooClient | None = self._given
        self._lock = threading.Lock()
        if self._given is None and not self._servers:
            raise MetaStoreError("canal.zkServers is empty: set it to host:port[,host:port...][/chroot]")

    @property
    def client(self) -> KazooClient:
        c = self._client
        if c is None:
            raise MetaStoreError(f"the ZooKeeper client for {self._servers} is not started")
        return c

    def acquire(self) -> KazooClient:
        with self._lock:
            if self._client is None:
                self._client = shared_clients.acquire(self._servers, self._session_timeout_ms, self._auth)
            return self._client

    def release(self) -> None:
        with self._lock:
            if self._given is None and self._client is not None:
                shared_clients.release(self._client)
                self._client = None
