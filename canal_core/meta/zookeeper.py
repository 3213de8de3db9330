"""Meta in ZooKeeper, as Canal keeps it (docs/canal-compat.md §2), plus a fence against stale writers.

Layout (Canal's ZookeeperPathUtils; a Java Canal and its tools read ours and we read theirs)::

    /otter/canal/destinations/{dest}                     persistent
        running                                          EPHEMERAL  {"active":true,"address":"ip:port"}
        cluster/{ip:port}                                EPHEMERAL
        parse                                            LogPosition JSON, no "@type"
        fence                                            ours (see below); Canal ignores non-numeric children
        {clientId}                                       persistent, no data
            filter                                       raw UTF-8 filter, only when non-empty
            cursor                                       LogPosition JSON with "@type" (fastjson WriteClassName)
            mark/{0000000001}                            PERSISTENT_SEQUENTIAL PositionRange; batch id = sequence
            running                                      EPHEMERAL  {"active":true,"address":...,"clientId":1001}

Managers:

- ``ZooKeeperMetaManager``: direct, every call reads or writes ZooKeeper (Canal's ZooKeeperMetaManager).
- ``PeriodMixedMetaManager``: memory, with cursors flushed to ZooKeeper every ``flush_period_ms``
  (canal.zookeeper.flush.period) and subscriptions written at once by the flusher thread; outstanding batches
  stay in memory (Canal's PeriodMixedMetaManager; spring/default-instance.xml). It loads a destination's
  subscriptions, cursors and any marks lazily, the first time the destination is used.
- ``ZooKeeperPositionManager``: the parser's position at ``{dest}/parse`` (Canal's
  ZooKeeperLogPositionManager), behind ``canal_core.parse.position.PositionManager``.

Where we differ from Canal, and why:

- Batch ids are never 0: the first child of a fresh ``mark`` node gets sequence 0, and batch id 0 means
  "roll back everything" / "error 402" on the wire. We create ``mark`` with a placeholder child deleted in the
  same transaction (the sequence moves past 0); a 0 under a ``mark`` made by someone else is deleted and the
  batch created again.
- Subscribing again with an empty filter deletes the ``filter`` node (Canal leaves the old one), and the
  filter is read back with the subscription (Canal forgets it), so a reload gives the filter the client set.
- ``stop()`` of the period-mixed manager flushes the last cursors (Canal drops up to one period of acks).

Fencing (beyond Canal; docs/zookeeper.md). The running node elects one active server per destination, but an
ephemeral node alone cannot stop a server that was active a moment ago from writing: a write queued in its
client, a flush thread, or a process paused through its own session expiry can land after a standby took
over and move the cursor backwards or forwards under the new active's feet. So each destination has a
persistent ``fence`` node, and every takeover bumps its data in the same ZooKeeper transaction that creates
``running`` (``canal_core.server.running``). The version of a persistent node only grows (an ephemeral node
recreated by the next active starts again at version 0, so its version proves nothing). The active keeps the
version it produced in a ``Fence``; every meta write here is a ZooKeeper transaction that first checks the
fence node still has that version. A server that lost the election, or whose ZooKeeper connection dropped
(the monitor releases its ``Fence`` at once), gets ``FencedError`` and changes nothing. Managers without a
fence for a destination write unchecked, as Canal does (single server, no HA).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient, TransactionRequest, _prefix_root
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.serialization import Create
from kazoo.protocol.states import ZnodeStat
from kazoo.security import OPEN_ACL_UNSAFE

from ..parse.model import LogPosition
from ..parse.position import PositionManager, PositionStoreError, decode_position, encode_position
from .errors import BatchOrderError, MetaStoreError
from .manager import FlushThread, MemoryMetaManager, MetaManager
from .model import ClientIdentity, PositionRange, dumps, log_position_dict, log_position_from_dict
from .zkacl import ZkAuth

log = logging.getLogger(__name__)

DEFAULT_SESSION_TIMEOUT_MS = 90_000  # Canal's ZkClientx default
DEFAULT_CONNECT_TIMEOUT_S = 15.0

# ---- paths (Canal's ZookeeperPathUtils) ----------------------------------------------------------------

CANAL_ROOT = "/otter/canal"
DESTINATIONS_ROOT = CANAL_ROOT + "/destinations"
CLUSTER_ROOT = CANAL_ROOT + "/cluster"
FENCE_NODE = "fence"


def _check_destination(destination: str) -> str:
    if not destination or "/" in destination or destination in (".", ".."):
        raise MetaStoreError(f"invalid destination name {destination!r} for ZooKeeper")
    return destination


def destination_path(destination: str) -> str:
    return f"{DESTINATIONS_ROOT}/{_check_destination(destination)}"


def client_path(destination: str, client_id: int) -> str:
    return f"{destination_path(destination)}/{client_id}"


def filter_path(destination: str, client_id: int) -> str:
    return client_path(destination, client_id) + "/filter"


def cursor_path(destination: str, client_id: int) -> str:
    return client_path(destination, client_id) + "/cursor"


def mark_root(destination: str, client_id: int) -> str:
    return client_path(destination, client_id) + "/mark"


def mark_node(batch_id: int) -> str:
    return f"{batch_id:010d}"


def mark_path(destination: str, client_id: int, batch_id: int) -> str:
    return f"{mark_root(destination, client_id)}/{mark_node(batch_id)}"


def parse_path(destination: str) -> str:
    return destination_path(destination) + "/parse"


def server_running_path(destination: str) -> str:
    return destination_path(destination) + "/running"


def client_running_path(destination: str, client_id: int) -> str:
    return client_path(destination, client_id) + "/running"


def destination_cluster_root(destination: str) -> str:
    return destination_path(destination) + "/cluster"


def destination_cluster_path(destination: str, address: str) -> str:
    return f"{destination_cluster_root(destination)}/{address}"


def cluster_path(address: str) -> str:
    return f"{CLUSTER_ROOT}/{address}"


def fence_path(destination: str) -> str:
    return f"{destination_path(destination)}/{FENCE_NODE}"


# ---- payloads -----------------------------------------------------------------------------------------


def encode_cursor(position: LogPosition) -> bytes:
    """The cursor node's payload: fastjson with WriteClassName (Java readers need "@type")."""
    return dumps(log_position_dict(position, with_type=True)).encode("utf-8")


def decode_cursor(data: bytes, *, where: str) -> LogPosition | None:
    if not data or not data.strip():
        return None
    try:
        return log_position_from_dict(json.loads(data))
    except (ValueError, TypeError, AttributeError) as e:
        raise MetaStoreError(f"cannot parse the cursor in ZooKeeper {where}: {e}; fix or delete the node "
                             f"(the client then restarts from the configured position)") from e


def encode_server_running(address: str, *, active: bool = True, cid: int | None = None) -> bytes:
    """ServerRunningData as fastjson writes it: keys sorted, a null cid omitted."""
    d: dict[str, Any] = {"active": active, "address": address}
    if cid is not None:
        d["cid"] = cid
    return dumps(d).encode("utf-8")


def encode_client_running(address: str, client_id: int, *, active: bool = True) -> bytes:
    """ClientRunningData: {"active":true,"address":"ip:port","clientId":1001}."""
    return dumps({"active": active, "address": address, "clientId": client_id}).encode("utf-8")


def decode_running(data: bytes | None) -> dict[str, Any]:
    """A running node's JSON (server or client); {} when empty or unreadable (a foreign writer)."""
    if not data:
        return {}
    try:
        d = json.loads(data)
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


def split_address(address: str) -> tuple[str, int] | None:
    """"ip:port" -> (ip, port); None when it is not one."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


# ---- clients ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ZkServers:
    """canal.zkServers with the credentials of canal.zookeeper.auth: what ``zk`` may be besides a started
    client or a bare connect string (then nodes are created world-writable, as Canal does)."""

    servers: str
    auth: ZkAuth | None = None


ZkTarget = KazooClient | str | ZkServers


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


# ---- the fence ----------------------------------------------------------------------------------------


class FencedError(MetaStoreError):
    """A meta write refused because this server does not hold the destination's fence (another server
    became active, or this one lost its ZooKeeper connection)."""


class Fence:
    """The right to write one destination's meta: the version of ``{dest}/fence`` this server produced when
    it became active, or None when it is not active. ``ServerRunningMonitor`` sets and clears it; meta
    managers read it before every write."""

    def __init__(self, destination: str, version: int | None = None) -> None:
        self.destination = destination
        self.path = fence_path(destination)
        self._version = version
        self._lock = threading.Lock()

    @property
    def version(self) -> int | None:
        return self._version

    def hold(self, version: int) -> None:
        with self._lock:
            self._version = version

    def release(self) -> None:
        with self._lock:
            self._version = None

    def require(self) -> int:
        v = self._version
        if v is None:
            raise FencedError(f"destination {self.destination}: this server is not the active one (it lost the "
                              f"election or its ZooKeeper connection); meta writes are refused")
        return v

    def pinned(self) -> Fence:
        """A copy that keeps the current version whatever happens later (what a paused process holds)."""
        return Fence(self.destination, self._version)

    def __repr__(self) -> str:
        return f"Fence({self.destination!r}, version={self._version})"


_Op = tuple[Any, ...]  # ("create", path, data, sequence) | ("set", path, data) | ("delete", path)


class _Writer:
    """Fenced writes: each call is one ZooKeeper transaction, the fence check first."""

    def __init__(self, holder: ClientHolder, op_timeout_s: float) -> None:
        self.holder = holder
        self.op_timeout_s = op_timeout_s
        self.fences: dict[str, Fence] = {}

    def precheck(self, destination: str) -> None:
        """FencedError now, before any ZooKeeper call, when this server does not hold the fence: a server cut
        off from ZooKeeper must not even wait for a read to find out it may not write."""
        fence = self.fences.get(destination)
        if fence is not None:
            fence.require()

    def set_fence(self, fence: Fence | Iterable[Fence] | None) -> None:
        if fence is None:
            self.fences.clear()
        elif isinstance(fence, Fence):
            self.fences[fence.destination] = fence
        else:
            for f in fence:
                self.fences[f.destination] = f

    def commit(self, destination: str, ops: list[_Op]) -> list[Any]:
        """Run ``ops`` atomically after the fence check; returns their results. Raises FencedError when
        the fence moved, NodeExistsError / NoNodeError / NotEmptyError for the first op that failed
        otherwise (callers retry after re-reading), MetaStoreError on connection problems."""
        fence = self.fences.get(destination)
        zk = self.holder.client
        with _zk_errors(f"writing the meta of {destination}"):
            t = zk.transaction()
            expected = None
            if fence is not None:
                expected = fence.require()
                t.check(fence.path, expected)
            for op in ops:
                kind = op[0]
                if kind == "create" and op[3]:
                    _create_sequential(t, op[1], op[2])
                elif kind == "create":
                    t.create(op[1], op[2])
                elif kind == "set":
                    t.set_data(op[1], op[2])
                elif kind == "delete":
                    t.delete(op[1])
                else:  # pragma: no cover - programming error
                    raise ValueError(kind)
            results = t.commit_async().get(timeout=self.op_timeout_s)
        errors = [r for r in results if isinstance(r, Exception)]
        if not errors:
            return results[1:] if fence is not None else results
        if fence is not None and isinstance(results[0], (BadVersionError, NoNodeError)):
            actual = self._version_of(fence.path)
            raise FencedError(f"destination {destination}: write refused, another server became active "
                              f"(fence {fence.path} is at version {actual}, this server holds {expected})")
        raise next((e for e in errors if not isinstance(e, (RolledBackError, RuntimeInconsistency))), errors[0])

    def _version_of(self, path: str) -> int | None:
        try:
            stat = self.holder.client.exists_async(path).get(timeout=self.op_timeout_s)
        except (KazooException, KazooTimeoutError):
            return None
        return None if stat is None else stat.version


def _create_sequential(t: TransactionRequest, path: str, data: bytes) -> None:
    """A PERSISTENT_SEQUENTIAL create in a transaction. kazoo's ``TransactionRequest.create`` normalizes away
    the trailing "/" of ``.../mark/`` (KazooClient.create keeps it), which would create ``mark0000000001``
    beside ``mark``; Canal's node names are the bare 10-digit sequence, so the op is built here."""
    acl = t.client.default_acl or OPEN_ACL_UNSAFE  # canal.zookeeper.auth's ACL when set, as every other create
    t._add(Create(_prefix_root(t.client.chroot, path, trailing=True), data, acl, 2), None)


@contextmanager
def _zk_errors(what: str) -> Iterator[None]:
    """kazoo's session and connection errors as MetaStoreError naming what was being done."""
    try:
        yield
    except (NoNodeError, NodeExistsError, NotEmptyError, BadVersionError):
        raise
    except (KazooException, KazooTimeoutError) as e:
        raise MetaStoreError(f"ZooKeeper: {what} failed: {type(e).__name__}{': ' + str(e) if str(e) else ''}") from e


# ---- ZooKeeperMetaManager -----------------------------------------------------------------------------

_RETRIES = 5  # a node that appears or vanishes between our read and our transaction: read again


class ZooKeeperMetaManager(MetaManager):
    """Canal's ZooKeeperMetaManager: nothing in memory, every call goes to ZooKeeper.

    ``zk``: a KazooClient (yours, started and stopped by you) or a connect string (a shared client, acquired
    at ``start()``, released at ``stop()``). ``fence``: the ``Fence`` (or several, one per destination) the
    running monitor holds; ``set_fence`` wires it later. ``op_timeout_s``: how long one ZooKeeper call may
    wait (kazoo would wait for a reconnection forever); then MetaStoreError."""

    def __init__(self, zk: ZkTarget, *, fence: Fence | Iterable[Fence] | None = None,
                 session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS, op_timeout_s: float = 10.0) -> None:
        self._holder = ClientHolder(zk, session_timeout_ms)
        self._writer = _Writer(self._holder, op_timeout_s)
        self._timeout = op_timeout_s
        self._writer.set_fence(fence)
        self._lock = threading.RLock()  # read-check-write sequences (remove_batch) are not interleaved
        self._started = False

    @property
    def client(self) -> KazooClient:
        return self._holder.client

    def set_fence(self, fence: Fence | Iterable[Fence] | None) -> None:
        self._writer.set_fence(fence)

    @property
    def is_started(self) -> bool:
        return self._started

    def start(self) -> None:
        if not self._started:
            self._holder.acquire()
            self._started = True

    def stop(self) -> None:
        if self._started:
            self._started = False
            self._holder.release()

    # ---- helpers ----
    def _get(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        with _zk_errors(f"reading {path}"):
            try:
                return self.client.get_async(path).get(timeout=self._timeout)
            except NoNodeError:
                return None

    def _children(self, path: str) -> list[str]:
        with _zk_errors(f"listing {path}"):
            try:
                return self.client.get_children_async(path).get(timeout=self._timeout)
            except NoNodeError:
                return []

    def _exists(self, path: str) -> bool:
        with _zk_errors(f"reading {path}"):
            return self.client.exists_async(path).get(timeout=self._timeout) is not None

    def _ensure_destination(self, destination: str) -> None:
        # the persistent parents are shared by every server and never carry data: created unfenced
        with _zk_errors(f"creating {destination_path(destination)}"):
            self.client.ensure_path_async(destination_path(destination)).get(timeout=self._timeout)

    def _retry(self, destination: str, what: str, build: Callable[[], list[_Op] | None]) -> list[Any]:
        """Build ops from a fresh read and commit them; again when a concurrent change made them stale."""
        self._writer.precheck(destination)
        last: Exception | None = None
        for _ in range(_RETRIES):
            ops = build()
            if not ops:
                return []
            try:
                return self._writer.commit(destination, ops)
            except (NodeExistsError, NoNodeError, NotEmptyError) as e:
                last = e
        raise MetaStoreError(f"ZooKeeper: {what} kept conflicting with concurrent changes: {last!r}")

    # ---- subscriptions ----
    def subscribe(self, client: ClientIdentity) -> None:
        d, cid = client.destination, client.client_id
        self._writer.precheck(d)  # a server that lost its fence fails here, not after ZooKeeper timeouts
        self._ensure_destination(d)

        def build() -> list[_Op]:
            ops: list[_Op] = []
            if not self._exists(client_path(d, cid)):
                ops.append(("create", client_path(d, cid), b"", False))
                has_filter = False
            else:
                has_filter = self._exists(filter_path(d, cid))
            if client.filter:
                data = client.filter.encode("utf-8")
                ops.append(("set", filter_path(d, cid), data) if has_filter
                           else ("create", filter_path(d, cid), data, False))
            elif has_filter:
                ops.append(("delete", filter_path(d, cid)))
            return ops

        with self._lock:
            self._retry(d, f"subscribing {client}", build)

    def unsubscribe(self, client: ClientIdentity) -> None:
        d, cid = client.destination, client.client_id
        root = client_path(d, cid)

        def build() -> list[_Op] | None:
            if not self._exists(root):
                return None
            ops: list[_Op] = []

            def walk(path: str) -> None:  # children first: a transaction deletes in order
                for child in sorted(self._children(path)):
                    walk(f"{path}/{child}")
                ops.append(("delete", path))

            walk(root)
            return ops

        with self._lock:
            self._retry(d, f"unsubscribing {client}", build)

    def has_subscribe(self, client: ClientIdentity) -> bool:
        return self._exists(client_path(client.destination, client.client_id))

    def list_all_subscribe(self, destination: str) -> list[ClientIdentity]:
        """Clients in client id order (Canal sorts them), each with the filter stored with it."""
        ids = sorted(int(c) for c in self._children(destination_path(destination))
                     if c.lstrip("-").isdigit())
        out = []
        for cid in ids:
            got = self._get(filter_path(destination, cid))
            flt = got[0].decode("utf-8") if got and got[0] else ""
            out.append(ClientIdentity(destination, cid, flt))
        return out

    # ---- cursors ----
    def get_cursor(self, client: ClientIdentity) -> LogPosition | None:
        path = cursor_path(client.destination, client.client_id)
        got = self._get(path)
        return decode_cursor(got[0], where=path) if got else None

    def update_cursor(self, client: ClientIdentity, position: LogPosition) -> None:
        d, cid = client.destination, client.client_id
        path = cursor_path(d, cid)
        data = encode_cursor(position)

        def build() -> list[_Op]:
            if self._exists(path):
                return [("set", path, data)]
            self._ensure_destination(d)
            ops: list[_Op] = []
            if not self._exists(client_path(d, cid)):  # Canal creates the parents too
                ops.append(("create", client_path(d, cid), b"", False))
            ops.append(("create", path, data, False))
            return ops

        self._retry(d, f"updating the cursor of {client}", build)

    # ---- batches ----
    def _batch_ids(self, client: ClientIdentity) -> list[int]:
        names = self._children(mark_root(client.destination, client.client_id))
        return sorted(int(n) for n in names if n.isdigit())

    def add_batch(self, client: ClientIdentity, position_range: PositionRange, batch_id: int | None = None) -> int:
        if batch_id is not None and batch_id < 1:
            raise ValueError(f"batch id {batch_id} is not positive")
        d, cid = client.destination, client.client_id
        root = mark_root(d, cid)
        data = position_range.to_json(with_type=True).encode("utf-8")

        def build() -> list[_Op]:
            ops: list[_Op] = []
            if not self._exists(root):
                self._ensure_destination(d)
                if not self._exists(client_path(d, cid)):
                    ops.append(("create", client_path(d, cid), b"", False))
                ops.append(("create", root, b"", False))
                # a child created and deleted at once moves the fresh node's sequence past 0 (not a batch id)
                ops.append(("create", root + "/" + mark_node(0), b"", False))
                ops.append(("delete", root + "/" + mark_node(0)))
            if batch_id is None:
                ops.append(("create", root + "/", data, True))
            else:
                ops.append(("create", mark_path(d, cid, batch_id), data, False))
            return ops

        with self._lock:
            for _ in range(_RETRIES):
                created = self._retry(d, f"adding a batch of {client}", build)[-1]
                got = int(created.rsplit("/", 1)[1])
                if got != 0:
                    return got
                # sequence 0 under a mark node another writer created: not a batch id on the wire; take the next
                self._writer.commit(d, [("delete", created)])
            raise MetaStoreError(f"ZooKeeper: could not add a batch of {client} under {root}")

    def get_batch(self, client: ClientIdentity, batch_id: int) -> PositionRange | None:
        path = mark_path(client.destination, client.client_id, batch_id)
        got = self._get(path)
        if got is None:
            return None
        try:
            return PositionRange.from_json(got[0])
        except (ValueError, TypeError, AttributeError) as e:
            raise MetaStoreError(f"cannot parse the batch mark in ZooKeeper {path}: {e}") from e

    def remove_batch(self, client: ClientIdentity, batch_id: int) -> PositionRange | None:
        self._writer.precheck(client.destination)
        with self._lock:
            ids = self._batch_ids(client)
            if batch_id not in ids:
                return None
            if ids[0] != batch_id:
                raise BatchOrderError(batch_id, ids[0])
            rng = self.get_batch(client, batch_id)
            if rng is None:
                return None
            try:
                self._writer.commit(client.destination,
                                    [("delete", mark_path(client.destination, client.client_id, batch_id))])
            except NoNodeError:
                return None  # removed concurrently: not ours to return
            return rng

    def _batch_at(self, client: ClientIdentity, pick: Callable[[list[int]], int]) -> tuple[int, PositionRange] | None:
        for _ in range(_RETRIES):
            ids = self._batch_ids(client)
            if not ids:
                return None
            bid = pick(ids)
            rng = self.get_batch(client, bid)
            if rng is not None:
                return bid, rng
        return None

    def get_first_batch(self, client: ClientIdentity) -> tuple[int, PositionRange] | None:
        return self._batch_at(client, lambda ids: ids[0])

    def get_last_batch(self, client: ClientIdentity) -> tuple[int, PositionRange] | None:
        return self._batch_at(client, lambda ids: ids[-1])

    def list_all_batches(self, client: ClientIdentity) -> dict[int, PositionRange]:
        out: dict[int, PositionRange] = {}
        for bid in self._batch_ids(client):
            rng = self.get_batch(client, bid)
            if rng is not None:  # acked meanwhile
                out[bid] = rng
        return out

    def clear_all_batches(self, client: ClientIdentity) -> None:
        d, cid = client.destination, client.client_id

        def build() -> list[_Op]:
            return [("delete", mark_path(d, cid, bid)) for bid in self._batch_ids(client)[:1000]]

        self._writer.precheck(d)
        with self._lock:
            while self._batch_ids(client):
                self._retry(d, f"clearing the batches of {client}", build)

    # ---- parse position ----
    def get_parse_position(self, destination: str) -> LogPosition | None:
        path = parse_path(destination)
        got = self._get(path)
        if got is None or not got[0].strip():
            return None
        try:
            return decode_position(got[0], where=f"ZooKeeper {path}")
        except PositionStoreError as e:
            raise MetaStoreError(str(e)) from e

    def set_parse_position(self, destination: str, position: LogPosition) -> None:
        path = parse_path(destination)
        data = encode_position(position)

        def build() -> list[_Op]:
            if self._exists(path):
                return [("set", path, data)]
            self._ensure_destination(destination)
            return [("create", path, data, False)]

        self._retry(destination, f"writing the parse position of {destination}", build)


# ---- PeriodMixedMetaManager ---------------------------------------------------------------------------


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


# ---- parse position -----------------------------------------------------------------------------------


class ZooKeeperPositionManager(PositionManager):
    """The parser's position at ``/otter/canal/destinations/{dest}/parse`` (Canal's
    ZooKeeperLogPositionManager): LogPosition JSON without "@type", written on every ``persist`` (fenced
    like the cursors), read from ZooKeeper by ``get_latest``."""

    def __init__(self, zk: ZkTarget, *, fence: Fence | Iterable[Fence] | None = None,
                 session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS) -> None:
        self.zookeeper = ZooKeeperMetaManager(zk, fence=fence, session_timeout_ms=session_timeout_ms)

    def set_fence(self, fence: Fence | Iterable[Fence] | None) -> None:
        self.zookeeper.set_fence(fence)

    def start(self) -> None:
        self.zookeeper.start()

    def stop(self) -> None:
        self.zookeeper.stop()

    def get_latest(self, destination: str) -> LogPosition | None:
        return self.zookeeper.get_parse_position(destination)

    def persist(self, destination: str, position: LogPosition) -> None:
        self.zookeeper.set_parse_position(destination, position)
