"""The election on a running node that Canal's running monitors share: which server runs a destination
(``canal_core.server.running``), which consumer runs a client id (``canal_core.client.running``), with
split-brain safety.

Election, as Canal does it (docs/canal-compat.md §2):

- every server of a destination tries to create ``/otter/canal/destinations/{dest}/running`` EPHEMERAL with
  ``{"active":true,"address":"ip:port"}``; the one that succeeds is active and ``on_start()`` is called
  (the server starts the destination's instance and serves it); the others watch the node;
- when the node is deleted, the server that was active (by address) re-grabs it at once unless it released
  it voluntarily; the others wait ``delay_s`` (5 s, Canal's delayTime) before trying, so a network blip
  does not make the destination flap between servers;
- data rewritten to ``"active":false`` for this server's address is a voluntary release (Canal's rule);
- each server registers ``{dest}/cluster/{ip:port}`` EPHEMERAL while its monitor runs; ``ServerRegistration``
  keeps ``/otter/canal/cluster/{ip:port}`` for the whole server. Both come back after a session expiry.

Beyond Canal (its known split brain: an active that lost its session keeps dumping):

1. Stop on disconnect. When kazoo reports the connection SUSPENDED (or the session LOST), an active server
   releases its ``Fence`` in the kazoo callback itself and calls ``on_stop()`` from the monitor thread right
   away. kazoo suspends after 2/3 of the session timeout without a server reply, before the session can
   expire (at the full timeout), and a standby only starts ``delay_s`` after the expiry deleted the node:
   the old active has stopped at least ``timeout/3 + delay_s`` before a standby's ``on_start()``. It
   competes again only once reconnected: with the same session its node is still there, so it deletes it
   and re-grabs at once (a new fence epoch; standbys were waiting their delay); with a new session it
   follows the rules above (being the previous active, it re-grabs at once if the node is free).
2. Fenced writes. Creating ``running`` and bumping the persistent ``{dest}/fence`` node happen in ONE ZooKeeper
   transaction, so whoever wins the node also produces a new fence version, and only that server holds it
   (``monitor.fence``). The ZooKeeper meta managers check that version in the same transaction as every
   cursor, mark, subscription or parse-position write (canal_core.meta.zkfence). A stale active - a write
   queued in its client, a flush thread, a process paused through its own expiry - can therefore not
   overwrite what the new active wrote: ZooKeeper rejects it (BadVersion) and the meta raises FencedError.
   Persistent node versions only grow; an ephemeral ``running`` recreated by the next server restarts at
   version 0, which is why the fence is a separate persistent node.

All decisions run on one monitor thread, fed by kazoo's watch and connection callbacks, so they never race
each other; ``on_start`` / ``on_stop`` run on that thread and should return promptly (start or stop the
instance; do not wait for clients). ``on_stop`` is called exactly once for each ``on_start``.
"""


from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, WatchedEvent

from .zkclient import DEFAULT_SESSION_TIMEOUT_MS, ClientHolder, ZkTarget
from .zkfence import Fence
from .zkpayload import decode_running, encode_server_running, split_address

log = logging.getLogger(__name__)

DEFAULT_DELAY_S = 5.0  # Canal's delayTime: how long a standby waits after the running node disappeared

Callback = Callable[[], Any]


def op_timeout(zk: KazooClient) -> float:
    """How long one ZooKeeper call of a monitor may wait. kazoo queues calls made while disconnected until it
    reconnects (forever if it cannot); a monitor thread stuck there would not process the disconnection and
    call on_stop. At most 3 s (and a third of the session): even with Canal's 90 s sessions a cut active
    stops within 2/3 x session + 3 s, before the session expires and a standby's delay elapses."""
    session_s = getattr(zk, "_session_timeout", DEFAULT_SESSION_TIMEOUT_MS) / 1000.0
    return max(0.5, min(session_s / 3.0, 3.0))


def ensure_ephemeral(zk: KazooClient, path: str, data: bytes = b"") -> None:
    """Create ``path`` EPHEMERAL for this session; a node left by another session (a previous process with
    the same address whose session has not expired yet) is replaced, or it would vanish with that session."""
    session = zk.client_id[0] if zk.client_id else None
    timeout = op_timeout(zk)
    for _ in range(5):
        try:
            zk.create_async(path, data, ephemeral=True, makepath=True).get(timeout=timeout)
            return
        except NodeExistsError:
            try:
                stat = zk.exists_async(path).get(timeout=timeout)
                if stat is None:
                    continue
                if stat.ephemeralOwner == session:
                    return
                zk.delete_async(path, version=stat.version).get(timeout=timeout)
            except NoNodeError:
                continue
            except KazooException as e:  # BadVersion: it changed again; try once more
                log.debug("replacing %s: %r", path, e)


class RunningMonitor:
    """The election of Canal's running monitors, on ``path`` with ``data``; see the module docstring.

    ``zk``: a KazooClient (yours) or a connect string (a shared client acquired at start, released at stop).
    ``fence``: bumped in the transaction that wins the node, held while active (None: no fencing)."""

    def __init__(self, zk: ZkTarget, *, path: str, data: bytes, address: str, parent: str,
                 on_start: Callback | None = None, on_stop: Callback | None = None,
                 delay_s: float = DEFAULT_DELAY_S, fence: Fence | None = None,
                 session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS, name: str = "running") -> None:
        if split_address(address) is None:
            raise ValueError(f"address {address!r} is not ip:port")
        if delay_s < 0:
            raise ValueError(f"delay must be >= 0 s, got {delay_s}")
        self._holder = ClientHolder(zk, session_timeout_ms)
        self.path = path
        self.data = data
        self.address = address
        self._parent = parent
        self.on_start = on_start
        self.on_stop = on_stop
        self.delay_s = delay_s
        self._fence = fence
        self._name = name
        self._events: queue.Queue[tuple[str, threading.Event | None]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._state_lock = threading.Lock()
        self._conn_gen = 0  # bumped by every disconnect: a grab committed across one is not trusted
        self._started = False
        self._active = False
        self._released = False
        self._last_address: str | None = None  # address in the running node last seen (Canal's activeData)
        self._grab_at: float | None = None
        self._active_event = threading.Event()
        self._zk: KazooClient | None = None
        self._timeout = 3.0
        self._recheck_at: float | None = None  # after a call timed out: look again

    # ---- public API ----
    @property
    def fence(self) -> Fence | None:
        """The fence this monitor bumps when it wins and holds while active (None: no fencing)."""
        return self._fence

    @property
    def zk(self) -> KazooClient:
        assert self._zk is not None, "monitor not started"
        return self._zk

    @property
    def is_active(self) -> bool:
        """True from the return of on_start() until on_stop() is called: not while the instance is still starting,
        so a status page never shows active what cannot serve yet."""
        return self._active_event.is_set()

    @property
    def active_address(self) -> str | None:
        """The address in the running node as last seen (this server's while active)."""
        return self._last_address

    def wait_for_active(self, timeout: float | None = None) -> bool:
        """Block until this server is active (Canal's waitForActive); False on timeout."""
        return self._active_event.wait(timeout)

    def start(self) -> None:
        if self._started:
            return
        self._zk = self._holder.acquire()
        self._timeout = op_timeout(self._zk)
        self._started = True
        self._released = False
        self.zk.add_listener(self._on_state)
        self._thread = threading.Thread(target=self._loop, name=f"{self._name}-monitor", daemon=True)
        self._thread.start()
        self._submit("start", wait=False)

    def stop(self) -> None:
        """Stop being active (on_stop, then the node is deleted so a standby can take over after its delay),
        leave the cluster and stop watching."""
        if not self._started:
            return
        self._submit("stop", wait=True)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None
        self.zk.remove_listener(self._on_state)
        self._holder.release()
        self._zk = None

    def release(self) -> None:
        """Give the destination up voluntarily (Canal's release): on_stop, then delete the node. This server
        then competes again like any standby (after the delay)."""
        if self._started:
            self._submit("release", wait=True)

    # ---- plumbing: everything below runs on the monitor thread unless noted ----
    def _submit(self, kind: str, *, wait: bool) -> None:
        if wait and self._thread is threading.current_thread():
            getattr(self, f"_do_{kind}")()  # called from on_start/on_stop: we are the monitor thread already
            if kind == "stop":
                self._events.put(("quit", None))
            return
        done = threading.Event() if wait else None
        self._events.put((kind, done))
        if done is not None:
            done.wait()

    def _on_state(self, state: str) -> None:
        # kazoo's connection thread: no ZooKeeper calls here, only what must happen at once
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            with self._state_lock:
                self._conn_gen += 1
                if self._fence is not None:
                    self._fence.release()  # our writes are refused from now on, before on_stop even runs
            self._events.put(("disconnected", None))
        else:
            self._events.put(("connected", None))

    def _on_watch(self, event: WatchedEvent) -> None:
        self._events.put(("check", None))

    def _loop(self) -> None:
        while True:
            due = [t for t in (self._grab_at, self._recheck_at) if t is not None]
            timeout = max(0.0, min(due) - time.monotonic()) if due else None
            try:
                kind, done = self._events.get(timeout=timeout)
            except queue.Empty:
                now = time.monotonic()
                if self._recheck_at is not None and self._recheck_at <= now:
                    kind, done = "check", None
                    self._recheck_at = None
                elif self._grab_at is not None and self._grab_at <= now:
                    kind, done = "grab", None
                else:
                    continue
            try:
                if kind == "stop":
                    self._do_stop()
                    return
                if kind == "quit":
                    return
                if self._started:
                    getattr(self, f"_do_{kind}")()
            except (ConnectionLoss, SessionExpiredError, ConnectionClosedError) as e:
                # the connection callback follows; it re-evaluates once connected again
                log.info("%s: %s interrupted by the ZooKeeper connection: %r", self.path, kind, e)
            except KazooTimeoutError:
                log.warning("%s: %s: ZooKeeper did not answer within %.1f s; looking again", self.path, kind,
                            self._timeout)
                self._recheck_at = time.monotonic() + 1.0
            except Exception:
                log.exception("%s: handling %s failed", self.path, kind)
            finally:
                if done is not None:
                    done.set()

    def _do_start(self) -> None:
        self._on_started()
        self._try_grab()  # Canal's start(): try at once; a held node is watched (_evaluate)

    def _do_connected(self) -> None:
        self._on_reconnected()
        self._evaluate()

    def _do_disconnected(self) -> None:
        if self._active:
            log.warning("%s: ZooKeeper connection lost: stopping at once (re-elects once reconnected)", self.path)
            self._deactivate()
        # _last_address stays ours: being the previous active that did not release, we re-grab at once

    def _do_check(self) -> None:
        self._evaluate()

    def _do_grab(self) -> None:
        self._grab_at = None
        self._try_grab()

    def _do_release(self) -> None:
        self._released = True
        self._grab_at = None
        if self._active:
            self._deactivate(keep_fence=True)  # on_stop while the fence is held: its last flush may go through
            self._delete_own_node()
            if self._fence is not None:
                self._fence.release()

    def _do_stop(self) -> None:
        self._grab_at = None
        try:
            if self._active:
                self._deactivate(keep_fence=True)
                self._delete_own_node()
                if self._fence is not None:
                    self._fence.release()
            self._on_stopping()
        except (KazooException, KazooTimeoutError) as e:
            log.warning("%s: leaving ZooKeeper cleanly failed (the session expiry will): %r", self.path, e)
        finally:
            self._started = False

    # ---- decisions ----
    def _session(self) -> int | None:
        cid = self.zk.client_id
        return cid[0] if cid else None

    def _previous_was_me(self) -> bool:
        return self._last_address == self.address and not self._released

    def _evaluate(self) -> None:
        """Look at the running node (and watch it) and act on what it says."""
        if not self.zk.connected:
            return
        stat = self.zk.exists_async(self.path, watch=self._on_watch).get(timeout=self._timeout)
        if stat is None:
            if self._active:  # our node vanished (deleted by hand): stop, then re-grab as the previous active
                log.warning("%s: the running node disappeared while active", self.path)
                self._deactivate()
            if self._previous_was_me():
                self._try_grab()
            elif self._grab_at is None:
                self._grab_at = time.monotonic() + self.delay_s
            return
        try:
            raw, stat = self.zk.get_async(self.path).get(timeout=self._timeout)
        except NoNodeError:
            self._events.put(("check", None))
            return
        data = decode_running(raw)
        mine = stat.ephemeralOwner == self._session()
        if mine:
            self._last_address = self.address
            if data.get("active") is False:  # Canal: "active":false written for us = a voluntary release
                self._do_release()
            elif not self._active:
                # still ours after a reconnect with the same session, but we stopped on the disconnect:
                # give the node up and take it again at once, which starts a new fence epoch
                self.zk.delete_async(self.path, version=stat.version).get(timeout=self._timeout)
                self._try_grab()
            return
        self._last_address = str(data.get("address") or "") or None
        self._grab_at = None  # someone holds it: nothing to wait for
        if self._active:
            log.warning("%s: %s holds the running node: stopping", self.path, self._last_address)
            self._deactivate()

    def _try_grab(self) -> None:
        if not self._started or self._active or not self.zk.connected:
            return
        self._grab_at = None
        with self._state_lock:
            gen = self._conn_gen
        self.zk.ensure_path_async(self._parent).get(timeout=self._timeout)
        t = self.zk.transaction()
        t.create(self.path, self.data, ephemeral=True)
        if self._fence is not None:
            self.zk.ensure_path_async(self._fence.path).get(timeout=self._timeout)
            t.set_data(self._fence.path, encode_server_running(self.address))
        results = t.commit_async().get(timeout=self._timeout)
        err = results[0]
        if isinstance(err, NodeExistsError):
            self._evaluate()
            return
        if isinstance(err, Exception):
            raise err
        with self._state_lock:
            if gen != self._conn_gen:
                # the connection dropped around the commit: do not trust it; on reconnect _evaluate finds
                # the node (ours if the session survived) and takes it again properly
                self._last_address = self.address
                return
            if self._fence is not None:
                self._fence.hold(results[1].version)
        self._active = True
        self._released = False
        self._last_address = self.address
        self.zk.exists_async(self.path, watch=self._on_watch)  # to notice a deletion by hand (no need to wait)
        log.info("%s: active (%s%s)", self.path, self.address,
                 f", fence version {self._fence.version}" if self._fence is not None else "")
        self._call(self.on_start, "on_start")
        if self._active:  # after on_start, as Canal sets its mutex after processActiveEnter
            self._active_event.set()

    def _deactivate(self, *, keep_fence: bool = False) -> None:
        self._active = False
        self._active_event.clear()
        if self._fence is not None and not keep_fence:
            self._fence.release()
        self._call(self.on_stop, "on_stop")

    def _delete_own_node(self) -> None:
        try:
            stat = self.zk.exists_async(self.path).get(timeout=self._timeout)
            if stat is not None and stat.ephemeralOwner == self._session():
                self.zk.delete_async(self.path, version=stat.version).get(timeout=self._timeout)
        except NoNodeError:
            pass

    def _call(self, fn: Callback | None, what: str) -> None:
        if fn is None:
            return
        try:
            fn()
        except Exception:
            log.exception("%s: %s failed", self.path, what)

    # ---- hooks for subclasses ----
    def _on_started(self) -> None:
        """Called on the monitor thread at start, before the first election."""

    def _on_reconnected(self) -> None:
        """Called on the monitor thread after every reconnection, before re-evaluating."""

    def _on_stopping(self) -> None:
        """Called on the monitor thread at stop, after the node was released."""
