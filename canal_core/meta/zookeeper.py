"""Meta in ZooKeeper, as Canal keeps it (docs/canal-compat.md §2), plus a fence against stale writers.

Paths: ``canal_core.protocol.zkpaths``; payloads: ``zkpayload``; connections: ``zkclient``; the fence:
``zkfence``.

Managers:

- ``ZooKeeperMetaManager``: direct, every call reads or writes ZooKeeper (Canal's ZooKeeperMetaManager).
- ``PeriodMixedMetaManager`` (``period_mixed.py``): memory, with cursors flushed to ZooKeeper every ``flush_period_ms``
  (canal.zookeeper.flush.period) and subscriptions written at once by the flusher thread; outstanding batches
  stay in memory (Canal's PeriodMixedMetaManager; spring/default-instance.xml). It loads a destination's
  subscriptions, cursors and any marks lazily, the first time the destination is used.
- ``ZooKeeperPositionManager`` (``zkposition.py``): the parser's position at ``{dest}/parse`` (Canal's
  ZooKeeperLogPositionManager), behind ``canal_core.parse.position.PositionManager``.

Where we differ from Canal, and why:

- Batch ids are never 0: the first child of a fresh ``mark`` node gets sequence 0, and batch id 0 means
  "roll back everything" / "error 402" on the wire. We create ``mark`` with a placeholder child deleted in the
  same transaction (the sequence moves past 0); a 0 under a ``mark`` made by someone else is deleted and the
  batch created again.
- Subscribing again with an empty filter deletes the ``filter`` node (Canal leaves the old one), and the
  filter is read back with the subscription (Canal forgets it), so a reload gives the filter the client set.
- ``stop()`` of the period-mixed manager flushes the last cursors (Canal drops up to one period of acks).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from kazoo.protocol.states import ZnodeStat

from ..parse.position import PositionStoreError, decode_position, encode_position
from ..protocol.identity import ClientIdentity
from ..protocol.position import LogPosition
from ..protocol.zkpaths import (
    client_path,
    cursor_path,
    destination_path,
    filter_path,
    mark_node,
    mark_path,
    mark_root,
    parse_path,
)
from .errors import BatchOrderError, MetaStoreError
from .manager import MetaManager
from .model import PositionRange
from .zkclient import DEFAULT_SESSION_TIMEOUT_MS, ClientHolder, ZkTarget
from .zkfence import Fence, FencedWriter, WriteOp, zk_errors
from .zkpayload import decode_cursor, encode_cursor

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
        self._writer = FencedWriter(self._holder, op_timeout_s)
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
        with zk_errors(f"reading {path}"):
            try:
                return self.client.get_async(path).get(timeout=self._timeout)
            except NoNodeError:
                return None

    def _children(self, path: str) -> list[str]:
        with zk_errors(f"listing {path}"):
            try:
                return self.client.get_children_async(path).get(timeout=self._timeout)
            except NoNodeError:
                return []

    def _exists(self, path: str) -> bool:
        with zk_errors(f"reading {path}"):
            return self.client.exists_async(path).get(timeout=self._timeout) is not None

    def _ensure_destination(self, destination: str) -> None:
        # the persistent parents are shared by every server and never carry data: created unfenced
        with zk_errors(f"creating {destination_path(destination)}"):
            self.client.ensure_path_async(destination_path(destination)).get(timeout=self._timeout)

    def _retry(self, destination: str, what: str, build: Callable[[], list[WriteOp] | None]) -> list[Any]:
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

        def build() -> list[WriteOp]:
            ops: list[WriteOp] = []
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

        def build() -> list[WriteOp] | None:
            if not self._exists(root):
                return None
            ops: list[WriteOp] = []

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

        def build() -> list[WriteOp]:
            if self._exists(path):
                return [("set", path, data)]
            self._ensure_destination(d)
            ops: list[WriteOp] = []
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

        def build() -> list[WriteOp]:
            ops: list[WriteOp] = []
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

        def build() -> list[WriteOp]:
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

        def build() -> list[WriteOp]:
            if self._exists(path):
                return [("set", path, data)]
            self._ensure_destination(destination)
            return [("create", path, data, False)]

        self._retry(destination, f"writing the parse position of {destination}", build)
