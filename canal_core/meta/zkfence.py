"""The fence against stale writers (beyond Canal; docs/zookeeper.md). The running node elects one active server
per destination, but an ephemeral node alone cannot stop a server that was active a moment ago from writing: a
write queued in its client, a flush thread, or a process paused through its own session expiry can land after
a standby took over and move the cursor backwards or forwards under the new active's feet. So each destination
has a persistent ``fence`` node, and every takeover bumps its data in the same ZooKeeper transaction that
creates ``running`` (``canal_core.server.running``). The version of a persistent node only grows (an ephemeral
node recreated by the next active starts again at version 0, so its version proves nothing). The active keeps
the version it produced in a ``Fence``; every meta write here is a ZooKeeper transaction that first checks the
fence node still has that version. A server that lost the election, or whose ZooKeeper connection dropped (the
monitor releases its ``Fence`` at once), gets ``FencedError`` and changes nothing. Managers without a fence
for a destination write unchecked, as Canal does (single server, no HA).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from kazoo.client import TransactionRequest, _prefix_root
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
from kazoo.security import OPEN_ACL_UNSAFE

from ..protocol.zkpaths import (
    fence_path,
)
from .errors import MetaStoreError
from .zkclient import ClientHolder


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


WriteOp = tuple[Any, ...]  # ("create", path, data, sequence) | ("set", path, data) | ("delete", path)


class FencedWriter:
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

    def commit(self, destination: str, ops: list[WriteOp]) -> list[Any]:
        """Run ``ops`` atomically after the fence check; returns their results. Raises FencedError when
        the fence moved, NodeExistsError / NoNodeError / NotEmptyError for the first op that failed
        otherwise (callers retry after re-reading), MetaStoreError on connection problems."""
        fence = self.fences.get(destination)
        zk = self.holder.client
        with zk_errors(f"writing the meta of {destination}"):
            t = zk.transaction()
            expected = None
            if fence is not None:
                expected = fence.require()
                t.check(fence.path, expected)
            for op in ops:
                kind = op[0]
                if kind == "create" and op[3]:
                    create_sequential(t, op[1], op[2])
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


def create_sequential(t: TransactionRequest, path: str, data: bytes) -> None:
    """A PERSISTENT_SEQUENTIAL create in a transaction. kazoo's ``TransactionRequest.create`` normalizes away
    the trailing "/" of ``.../mark/`` (KazooClient.create keeps it), which would create ``mark0000000001``
    beside ``mark``; Canal's node names are the bare 10-digit sequence, so the op is built here."""
    acl = t.client.default_acl or OPEN_ACL_UNSAFE  # canal.zookeeper.auth's ACL when set, as every other create
    t._add(Create(_prefix_root(t.client.chroot, path, trailing=True), data, acl, 2), None)


@contextmanager
def zk_errors(what: str) -> Iterator[None]:
    """kazoo's session and connection errors as MetaStoreError naming what was being done."""
    try:
        yield
    except (NoNodeError, NodeExistsError, NotEmptyError, BadVersionError):
        raise
    except (KazooException, KazooTimeoutError) as e:
        raise MetaStoreError(f"ZooKeeper: {what} failed: {type(e).__name__}{': ' + str(e) if str(e) else ''}") from e
