"""Canal's TCP server (CanalServerWithNetty): Canal's client protocol over the embedded server.

Concurrency: one thread per connection, plus one accept thread. The embedded API is blocking by design
(a blocking GET waits on the ring store's condition variable, and ack/rollback take the destination's
lock), so an asyncio loop would hand every request to a thread pool anyway; a thread per connection keeps
each session a plain sequential loop, and a GET that blocks for minutes holds only its own thread: other
clients and destinations go on. Unlike Canal, a blocking GET waits without its destination's lock, so other
connections' requests for the same destination are served meanwhile, and it stops waiting once its peer
has closed the connection. The GIL is released while a thread waits on its socket or the store.

Session flow (docs/canal-compat.md §1.4): handshake with 8 random seed bytes;
CLIENTAUTHENTICATION (subscribes when destination and client id are set); then SUBSCRIPTION,
UNSUBSCRIPTION, GET -> MESSAGES, CLIENTACK and CLIENTROLLBACK (no reply on success), every other type ->
Ack 400. Error Acks never close the connection; an ack error is read by the client as the reply to its
next request. Texts are Canal's, so people searching for them find Canal's documentation.

What a client may cost (docs/tcp-server.md "Limits"): at most ``max_connections`` connections (lowered to
what the open-files limit allows); at the cap a new connection makes the oldest one that has not
authenticated close, or is itself closed at once when all have. Before authentication a request frame may
hold 64 KiB, after it ``max_request_bytes``; a connection has ``auth_timeout`` seconds from its accept to
authenticate and ONE attempt: a failed one is answered, then closed, and an address that keeps failing
waits ever longer before its next attempt is checked (``AuthThrottle``). Lines a client can cause at will
(connections, failed logins) are rate-limited per address.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import resource
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..meta import BatchOrderError
from ..protocol import codec
from ..protocol.identity import ClientIdentity
from ..protocol.proto import CanalProtocol_pb2 as cp
from .auth import Authenticator
from .embedded import CanalServerWithEmbedded, GetCancelled
from .logs import LogLimiter, peer_text
from .throttle import AuthThrottle, peer_key

log = logging.getLogger(__name__)

DEFAULT_IDLE_TIMEOUT = 3600.0  # s: Canal's server default when ClientAuth has no net_read_timeout
DEFAULT_AUTH_TIMEOUT = 30.0  # s from the accept: a connection that has not authenticated by then is dropped
DEFAULT_MAX_CONNECTIONS = 1000
DEFAULT_MAX_REQUEST = 1 << 20  # bytes: requests are a few strings; a filter may list many tables
PRE_AUTH_MAX_REQUEST = 64 << 10  # bytes a ClientAuth may take: an anonymous peer costs little memory
DEFAULT_FETCH_SIZE = 1  # fetch_size <= 0: at least one entry and no waiting for more (Canal's MEMSIZE store)

# Java class names in error texts, as Canal's server prints them (its stack trace's first line)
_JAVA_META_ERROR = "com.alibaba.otter.canal.meta.exception.CanalMetaManagerException"
_JAVA_SERVER_ERROR = "com.alibaba.otter.canal.server.exception.CanalServerException"


class ClientHooks(Protocol):
    """What the server reports about its clients (the metrics module implements it). Called from the
    connection threads; must be thread-safe and quick. ``packet_type``: the request's PacketType name."""

    def packet_received(self, destination: str | None, packet_type: str) -> None:
        """Every request packet (including CLIENTAUTHENTICATION)."""

    def bytes_sent(self, destination: str | None, nbytes: int) -> None:
        """Every reply or MESSAGES packet written; ``nbytes``: the Packet's size without the 4-byte length
        header (what Canal's canal_instance_client_bytes counts)."""

    def empty_batch(self, destination: str) -> None:
        """A GET answered with batch_id -1."""

    def request_error(self, destination: str | None, error_code: int) -> None:
        """Every error Ack sent (400, 401, 402)."""

    def request_latency(self, destination: str | None, packet_type: str, seconds: float) -> None:
        """Time from a request's arrival to its reply written (or handled, for ack/rollback)."""


class NullClientHooks:
    """The default: report nothing."""

    def packet_received(self, destination: str | None, packet_type: str) -> None:
        pass

    def bytes_sent(self, destination: str | None, nbytes: int) -> None:
        pass

    def empty_batch(self, destination: str) -> None:
        pass

    def request_error(self, destination: str | None, error_code: int) -> None:
        pass

    def request_latency(self, destination: str | None, packet_type: str, seconds: float) -> None:
        pass


class _Closed(Exception):
    """The peer went away, timed out, or broke the protocol: end the session."""


class CanalTcpServer:
    """Serve ``embedded``'s destinations on ``host:port`` ("" = every interface; port 0 = any free port,
    see ``address``). ``user``/``passwd``: canal.user / canal.passwd (the stored hash)."""

    def __init__(self, embedded: CanalServerWithEmbedded, *, host: str = "", port: int = 11111,
                 user: str = "", passwd: str = "", hooks: ClientHooks | None = None,
                 auth_timeout: float = DEFAULT_AUTH_TIMEOUT, backlog: int = 128,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS, max_request_bytes: int = DEFAULT_MAX_REQUEST,
                 throttle: AuthThrottle | None = None) -> None:
        self.embedded = embedded
        self.host = host
        self.port = port
        self.authenticator = Authenticator(user, passwd)  # AuthConfigError: canal.user without canal.passwd
        self.hooks: ClientHooks = hooks or NullClientHooks()
        self.auth_timeout = auth_timeout
        self.backlog = backlog
        self.max_connections = fd_bounded(max_connections)
        self.max_request_bytes = max_request_bytes
        self.throttle = throttle if throttle is not None else AuthThrottle()
        self.limiter = LogLimiter()  # lines any peer can cause: connections, failed logins
        self.refusals = LogLimiter(per_key=1, total=1)  # one line a minute, with the count of the others
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._sessions: set[_Session] = set()
        self._unauthenticated: dict[_Session, None] = {}  # oldest first
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids = itertools.count(1)

    # ---- lifecycle -----------------------------------------------------------------------------

    def bind(self) -> tuple[str, int]:
        """Listen (raises OSError, e.g. the port is taken) without accepting yet: the controller binds
        first so that a busy port fails the start before any destination is started."""
        if self._listener is None:
            self._listener = self._listen()
        return self.address

    def _listen(self) -> socket.socket:
        if not self.host and socket.has_dualstack_ipv6():
            try:  # "" = all interfaces, IPv4 and IPv6 alike (Java's wildcard bind)
                return socket.create_server(("", self.port), family=socket.AF_INET6, backlog=self.backlog,
                                            dualstack_ipv6=True)
            except OSError as e:
                if e.errno not in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):  # no IPv6 here: IPv4 only
                    raise
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        return socket.create_server((self.host or "0.0.0.0", self.port), family=family, backlog=self.backlog)

    def start(self) -> None:
        self.bind()
        self._stopping.clear()
        self._acceptor = threading.Thread(target=self._accept_loop, name="canal-tcp-accept", daemon=True)
        self._acceptor.start()
        host, port = self.address
        log.info("canal tcp server listening on %s:%d%s, at most %d connections", host, port,
                 " (authentication on)" if self.authenticator.enabled else "", self.max_connections)

    @property
    def address(self) -> tuple[str, int]:
        if self._listener is None:
            return self.host, self.port
        name = self._listener.getsockname()
        return name[0], name[1]

    @property
    def running(self) -> bool:
        return self._acceptor is not None and self._acceptor.is_alive()

    def session_count(self) -> int:
        with self._lock:
            return len(self._sessions)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting and close every connection, then wait up to ``timeout`` s for the sessions. A
        session blocked in a blocking GET sees its connection closed within CANCEL_POLL seconds (or ends
        when its destination's store closes)."""
        self._stopping.set()
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
            except OSError:
                pass
            self._listener.close()
        if self._acceptor is not None:
            self._acceptor.join(5.0)
        with self._lock:
            sessions = list(self._sessions)
        for s in sessions:
            s.close()
        self._listener = None
        self._acceptor = None
        self.join(timeout)
        log.info("canal tcp server stopped")

    def join(self, timeout: float = 5.0) -> bool:
        """Wait for the connection threads to end; False if some are still running (they are daemons)."""
        with self._lock:
            sessions = list(self._sessions)
        deadline = time.monotonic() + timeout
        for s in sessions:
            s.thread.join(max(0.0, deadline - time.monotonic()))
        return not any(s.thread.is_alive() for s in sessions)

    def _accept_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        while not self._stopping.is_set():
            try:
                sock, peer = listener.accept()
            except OSError as e:
                if self._stopping.is_set():
                    return
                self.limiter.log(log, logging.WARNING, "accept", "accept failed: %s", e)
                time.sleep(0.1)  # e.g. EMFILE: do not spin
                continue
            with self._lock:
                if self._stopping.is_set():
                    sock.close()
                    return
                if len(self._sessions) >= self.max_connections and not self._evict_one():
                    refused = True
                else:
                    refused = False
                    session = _Session(self, sock, peer, next(self._ids))
                    self._sessions.add(session)
                    self._unauthenticated[session] = None
            if refused:  # cheap: no thread, no handshake
                sock.close()
                self.refusals.log(log, logging.WARNING, "refused",
                                  "connection from %s refused: %d connections (canal.tcp.max.connections)",
                                  peer[0], self.max_connections)
                continue
            try:
                session.thread.start()
            except RuntimeError as e:  # no more threads
                self.limiter.log(log, logging.WARNING, "threads", "connection from %s closed: %s", peer[0], e)
                session.close()
                self._forget(session)

    def _evict_one(self) -> bool:
        """Close the oldest connection that has not authenticated (under ``_lock``); False if there is none."""
        for victim in self._unauthenticated:
            del self._unauthenticated[victim]
            self._sessions.discard(victim)
            victim.close()
            return True
        return False

    def _authenticated(self, session: _Session) -> None:
        with self._lock:
            self._unauthenticated.pop(session, None)

    def _forget(self, session: _Session) -> None:
        with self._lock:
            self._sessions.discard(session)
            self._unauthenticated.pop(session, None)


def fd_bounded(max_connections: int) -> int:
    """``max_connections``, lowered so that the connections leave this process file descriptors for its logs,
    meta files, MySQL and ZooKeeper connections and metrics (an eighth of the limit, at least 32): a server at
    its open-files limit could not accept or write anything. Raises the soft limit toward the hard one
    first when that is what it takes."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max_connections + max(32, max_connections // 8)
    if soft != resource.RLIM_INFINITY and soft < want:
        target = want if hard == resource.RLIM_INFINITY else min(want, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return max_connections
    bound = max(1, soft - max(32, soft // 8))
    if bound < max_connections:
        log.warning("canal.tcp.max.connections %d lowered to %d: the open-files limit is %d", max_connections,
                    bound, soft)
    return min(max_connections, bound)


def _configure(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)


def _java_error(e: Exception) -> str:
    """The first line of the Java stack trace Canal's server would print for the same failure."""
    if isinstance(e, BatchOrderError):
        cls = _JAVA_META_ERROR
    elif isinstance(e, ValueError):  # a client id that is not a 16-bit number (Short.valueOf)
        cls = "java.lang.NumberFormatException"
    else:
        cls = _JAVA_SERVER_ERROR
    return f"{cls}: {e}"


class _Session:
    """One client connection: handshake, authentication, then requests until the peer goes away."""

    def __init__(self, server: CanalTcpServer, sock: socket.socket, peer: tuple, cid: int) -> None:
        self.server = server
        self.sock = sock
        self.peer = peer
        self.hooks = server.hooks
        self.decoder = codec.FrameDecoder(min(server.max_request_bytes, PRE_AUTH_MAX_REQUEST))
        self.accepted = time.monotonic()
        self.key = peer_key(str(peer[0]))
        self.pending: list[bytes] = []
        self.idle_timeout = DEFAULT_IDLE_TIMEOUT
        self.write_timeout = DEFAULT_IDLE_TIMEOUT
        self.seed = os.urandom(8)
        try:
            local = sock.getsockname()
            self.channel = f"[id: 0x{cid:08x}, /{peer[0]}:{peer[1]} => /{local[0]}:{local[1]}]"
        except OSError:
            self.channel = f"[id: 0x{cid:08x}]"
        self.thread = threading.Thread(target=self.run, name=f"canal-tcp-{peer[0]}:{peer[1]}", daemon=True)
        self._closed = False

    # ---- io ------------------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def peer_gone(self) -> bool:
        """Whether the peer closed or reset the connection (or the server closed it), without reading any
        request the peer already sent. Quick: asked by a waiting GET under its store's lock."""
        if self._closed:
            return True
        try:
            self.sock.setblocking(False)  # with a timeout set, recv would first wait for data
            return self.sock.recv(1, socket.MSG_PEEK) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True

    def read_packet(self, timeout: float) -> bytes:
        """The next request; _Closed on EOF, error or ``timeout`` seconds without a whole packet."""
        deadline = time.monotonic() + timeout
        while not self.pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Closed(f"idle for {timeout:g} s")
            try:
                self.sock.settimeout(left)
                data = self.sock.recv(65536)
            except TimeoutError:
                raise _Closed(f"idle for {timeout:g} s") from None
            except OSError as e:
                raise _Closed(str(e)) from None
            if not data:
                raise _Closed("closed by peer")
            try:
                self.pending.extend(self.decoder.feed(data))
            except codec.ProtocolError as e:
                raise _Closed(str(e)) from None
        return self.pending.pop(0)

    def send(self, packet: bytes) -> None:
        try:
            self.sock.settimeout(self.write_timeout)
            self.sock.sendall(codec.HEADER.pack(len(packet)) + packet)
        except OSError as e:
            raise _Closed(f"write failed: {e}") from None

    def write(self, destination: str | None, packet: bytes) -> None:
        """A reply: sent and counted."""
        self.send(packet)
        self._hook("bytes_sent", destination, len(packet))

    def error(self, destination: str | None, code: int, message: str) -> None:
        self.write(destination, codec.error_packet(code, message))
        self._hook("request_error", destination, code)

    def _hook(self, name: str, *args: object) -> None:
        try:
            getattr(self.hooks, name)(*args)
        except Exception:  # metrics must never break a client session
            log.exception("client hook %s failed", name)

    # ---- session -------------------------------------------------------------------------------

    def run(self) -> None:
        limiter = self.server.limiter
        limiter.log(log, logging.INFO, self.key, "client connected: %s", self.channel)
        authenticated = False
        try:
            try:
                _configure(self.sock)
            except OSError as e:  # the peer is already gone
                raise _Closed(str(e)) from None
            self.send(codec.handshake_packet(self.seed))  # not a reply: not counted
            self.authenticate()
            authenticated = True
            while True:
                self.request(self.read_packet(self.idle_timeout))
        except _Closed as e:
            if authenticated:
                log.info("client %s: session ended: %s", self.channel, e)
            else:
                limiter.log(log, logging.INFO, self.key, "client %s: session ended: %s", self.channel, e)
        except Exception:
            log.exception("client %s: session failed", self.channel)
        finally:
            self.close()
            self.server._forget(self)

    def _wait_or_gone(self, seconds: float) -> bool:
        """Sleep up to ``seconds`` (the auth backoff); True if the peer went away meanwhile."""
        time.sleep(min(seconds, 0.5))
        return self.peer_gone()

    def authenticate(self) -> None:
        """One ClientAuth within auth_timeout of the accept; a failed one is answered and ends the session."""
        emb = self.server.embedded
        deadline = self.accepted + self.server.auth_timeout
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Closed(f"not authenticated within {self.server.auth_timeout:g} s")
        pkt = self._parse(self.read_packet(left))
        start = time.monotonic()
        ptype = codec.packet_type_name(pkt.type)
        # Canal reads whatever comes first as a ClientAuth, whatever its type says
        try:
            auth = cp.ClientAuth.FromString(pkt.body)
        except Exception as e:
            raise _Closed(f"bad ClientAuth: {e}") from None
        dest = None  # the authentication exchange is not counted (as Canal): no series from a login attempt
        authenticator, throttle = self.server.authenticator, self.server.throttle
        if authenticator.enabled:
            if not throttle.admit(self.key, deadline, self._wait_or_gone):
                self._hook("packet_received", None, ptype)
                self.error(None, 400, f"auth failed for user:{auth.username}: too many failed attempts from "
                                      f"{self.key}, retry in {throttle.backoff(throttle.failures(self.key)):g} s")
                raise _Closed("auth backoff outlasts the auth timeout")
            password = auth.password.decode("utf-8", "replace")
            if not authenticator.authenticate(auth.username, password, self.seed):
                failures = throttle.failed(self.key)
                self.server.limiter.log(log, logging.WARNING, self.key,
                                        "client %s: auth failed for user:%s (%d in a row from %s)", self.channel,
                                        peer_text(auth.username), failures, self.key)
                self._hook("packet_received", None, ptype)
                self.error(None, 400, f"auth failed for user:{auth.username}")
                self._hook("request_latency", None, ptype, time.monotonic() - start)
                raise _Closed("auth failed")
            throttle.succeeded(self.key)
        self._hook("packet_received", None, ptype)
        if auth.destination and auth.client_id:
            try:
                emb.subscribe(ClientIdentity(auth.destination, int(auth.client_id), auth.filter))
            except Exception as e:
                self.error(dest, 400, self._wrong(e))
                raise _Closed(f"subscribe at auth failed: {e}") from None
        if auth.net_read_timeout > 0:
            self.idle_timeout = auth.net_read_timeout / 1000
        if auth.net_write_timeout > 0:
            self.write_timeout = auth.net_write_timeout / 1000
        # before the reply: a client that has its Ack is never closed to make room for a newcomer
        self.server._authenticated(self)
        self.decoder.max_frame = self.server.max_request_bytes
        self.write(dest, codec.ack_packet())
        self._hook("request_latency", dest, ptype, time.monotonic() - start)
        log.info("client %s authenticated as %s", self.channel, peer_text(auth.username))

    def _parse(self, data: bytes) -> cp.Packet:
        try:
            return codec.parse_packet(data)
        except codec.ProtocolError as e:
            raise _Closed(str(e)) from None

    def _wrong(self, e: Exception) -> str:
        return f"something goes wrong with channel:{self.channel}, exception={_java_error(e)}"

    def request(self, data: bytes) -> None:
        start = time.monotonic()
        pkt = self._parse(data)
        ptype = codec.packet_type_name(pkt.type)
        handler = _HANDLERS.get(pkt.type)
        if handler is None:
            self._hook("packet_received", None, ptype)
            self.error(None, 400, f"packet type={ptype} is NOT supported!")
            self._hook("request_latency", None, ptype, time.monotonic() - start)
            return
        parse_body, method = handler
        try:
            body = parse_body(pkt.body)
        except Exception as e:
            raise _Closed(f"bad {ptype} body: {e}") from None
        dest = body.destination or None
        if pkt.type != codec.GET:  # a GET counts once its answer is known (Canal: empty ones only as empty)
            self._hook("packet_received", dest, ptype)
        try:
            if not body.destination or not body.client_id:
                self.error(dest, 401, "destination or clientId is null")
            else:
                method(self, body, body.destination)
        except _Closed:
            raise
        except Exception as e:  # Canal's catch-all: Ack 400 with the exception, connection kept
            log.warning("client %s: %s failed: %s", self.channel, ptype, e)
            self.error(dest, 400, self._wrong(e))
        self._hook("request_latency", dest, ptype, time.monotonic() - start)

    # ---- requests (destination and client id are there) ---------------------------------------

    def on_subscribe(self, sub: cp.Sub, dest: str) -> None:
        self.server.embedded.subscribe(ClientIdentity(sub.destination, int(sub.client_id), sub.filter))
        self.write(dest, codec.ack_packet())

    def on_unsubscribe(self, unsub: cp.Unsub, dest: str) -> None:
        self.server.embedded.unsubscribe(ClientIdentity(unsub.destination, int(unsub.client_id), unsub.filter))
        self.write(dest, codec.ack_packet())

    def on_get(self, get: cp.Get, dest: str) -> None:
        client = ClientIdentity(get.destination, int(get.client_id))
        size = get.fetch_size if get.fetch_size > 0 else DEFAULT_FETCH_SIZE
        # auto_ack is ignored, as by Canal's server: a GET is always a getWithoutAck
        try:
            msg = self.server.embedded.get_without_ack(client, size, codec.get_wait(get), self.peer_gone)
        except GetCancelled:
            raise _Closed("closed by peer during a blocking GET") from None
        if msg.batch_id == -1:
            self._hook("empty_batch", dest)
        else:
            self._hook("packet_received", dest, "GET")
        self.write(dest, codec.messages_packet(msg.batch_id, msg.raw_entries))

    def on_ack(self, ack: cp.ClientAck, dest: str) -> None:
        if ack.batch_id == 0:
            self.error(dest, 402, "batchId should assign value")
        elif ack.batch_id != -1:  # -1: the client's last get was empty, nothing to ack
            self.server.embedded.ack(ClientIdentity(ack.destination, int(ack.client_id)), ack.batch_id)

    def on_rollback(self, rb: cp.ClientRollback, dest: str) -> None:
        client = ClientIdentity(rb.destination, int(rb.client_id))
        self.server.embedded.rollback(client, None if rb.batch_id == 0 else rb.batch_id)


# packet type -> (parser of its body, the session's handler of that body)
_HANDLERS: dict[int, tuple[Callable[[bytes], Any], Callable[[_Session, Any, str], None]]] = {
    codec.SUBSCRIPTION: (cp.Sub.FromString, _Session.on_subscribe),
    codec.UNSUBSCRIPTION: (cp.Unsub.FromString, _Session.on_unsubscribe),
    codec.GET: (cp.Get.FromString, _Session.on_get),
    codec.CLIENTACK: (cp.ClientAck.FromString, _Session.on_ack),
    codec.CLIENTROLLBACK: (cp.ClientRollback.FromString, _Session.on_rollback),
}
