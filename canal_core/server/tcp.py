"""Canal's TCP server (CanalServerWithNetty): Canal's client protocol over the embedded server.

Concurrency: one thread per connection, plus one accept thread. The embedded API is blocking by design
(a blocking GET waits on the ring store's condition variable, and ack/rollback take the destination's
lock), so an asyncio loop would hand every request to a thread pool anyway; a thread per connection keeps
each session a plain sequential loop, and a GET that blocks for minutes holds only its own thread: other
clients and destinations go on. Unlike Canal, a blocking GET waits without its destination's lock, so other
connections' requests for the same destination are served meanwhile, and it stops waiting once its peer
has closed the connection. The GIL is released while a thread waits on its socket or the store.

Session flow (shared/reference/canal-compat.md section 1): handshake with 8 random seed bytes;
CLIENTAUTHENTICATION (subscribes when destination and client id are set); then SUBSCRIPTION,
UNSUBSCRIPTION, GET -> MESSAGES, CLIENTACK and CLIENTROLLBACK (no reply on success), every other type ->
Ack 400. Error Acks never close the connection; an ack error is read by the client as the reply to its
next request. Texts are Canal's, so people searching for them find Canal's documentation.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import socket
import threading
import time
from typing import Protocol

from ..entry.proto import CanalProtocol_pb2 as cp
from ..meta import BatchOrderError, ClientIdentity
from . import codec
from .auth import Authenticator
from .embedded import CanalServerWithEmbedded, GetCancelled

log = logging.getLogger(__name__)

DEFAULT_IDLE_TIMEOUT = 3600.0  # s: Canal's server default when ClientAuth has no net_read_timeout
DEFAULT_AUTH_TIMEOUT = 60.0  # s: a connection that has not authenticated by then is dropped
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
                 auth_timeout: float = DEFAULT_AUTH_TIMEOUT, backlog: int = 128) -> None:
        self.embedded = embedded
        self.host = host
        self.port = port
        self.authenticator = Authenticator(user, passwd)  # AuthConfigError: canal.user without canal.passwd
        self.hooks: ClientHooks = hooks or NullClientHooks()
        self.auth_timeout = auth_timeout
        self.backlog = backlog
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._sessions: set[_Session] = set()
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
        log.info("canal tcp server listening on %s:%d%s", host, port,
                 " (authentication on)" if self.authenticator.enabled else "")

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
            except OSError:
                if self._stopping.is_set():
                    return
                log.exception("accept failed")
                time.sleep(0.1)  # e.g. EMFILE: do not spin
                continue
            session = _Session(self, sock, peer, next(self._ids))
            with self._lock:
                if self._stopping.is_set():
                    session.close()
                    return
                self._sessions.add(session)
            session.thread.start()

    def _forget(self, session: _Session) -> None:
        with self._lock:
            self._sessions.discard(session)


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
        self.decoder = codec.FrameDecoder()
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
        log.info("client connected: %s", self.channel)
        try:
            try:
                _configure(self.sock)
            except OSError as e:  # the peer is already gone
                raise _Closed(str(e)) from None
            self.send(codec.handshake_packet(self.seed))  # not a reply: not counted
            self.authenticate()
            while True:
                self.request(self.read_packet(self.idle_timeout))
        except _Closed as e:
            log.info("client %s: session ended: %s", self.channel, e)
        except Exception:
            log.exception("client %s: session failed", self.channel)
        finally:
            self.close()
            self.server._forget(self)

    def authenticate(self) -> None:
        """Until a ClientAuth passes (Canal keeps the connection in this stage after a failed one)."""
        emb = self.server.embedded
        while True:
            start = time.monotonic()
            pkt = self._parse(self.read_packet(self.server.auth_timeout))
            ptype = codec.packet_type_name(pkt.type)
            # Canal reads whatever comes first as a ClientAuth, whatever its type says
            try:
                auth = cp.ClientAuth.FromString(pkt.body)
            except Exception as e:
                raise _Closed(f"bad ClientAuth: {e}") from None
            dest = auth.destination or None
            self._hook("packet_received", dest, ptype)
            password = auth.password.decode("utf-8", "replace")
            if not self.server.authenticator.authenticate(auth.username, password, self.seed):
                log.warning("client %s: auth failed for user:%s", self.channel, auth.username)
                self.error(dest, 400, f"auth failed for user:{auth.username}")
                self._hook("request_latency", dest, ptype, time.monotonic() - start)
                continue
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
            self.write(dest, codec.ack_packet())
            self._hook("request_latency", dest, ptype, time.monotonic() - start)
            log.info("client %s authenticated as %r", self.channel, auth.username)
            return

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
        message_cls, method = handler
        try:
            body = message_cls.FromString(pkt.body)
        except Exception as e:
            raise _Closed(f"bad {ptype} body: {e}") from None
        dest = body.destination or None
        if pkt.type != codec.GET:  # a GET counts once its answer is known (Canal: empty ones only as empty)
            self._hook("packet_received", dest, ptype)
        try:
            if not body.destination or not body.client_id:
                self.error(dest, 401, "destination or clientId is null")
            else:
                method(self, body, dest)
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
        self.write(dest, codec.messages_packet(msg.batch_id, msg.entries))

    def on_ack(self, ack: cp.ClientAck, dest: str) -> None:
        if ack.batch_id == 0:
            self.error(dest, 402, "batchId should assign value")
        elif ack.batch_id != -1:  # -1: the client's last get was empty, nothing to ack
            self.server.embedded.ack(ClientIdentity(ack.destination, int(ack.client_id)), ack.batch_id)

    def on_rollback(self, rb: cp.ClientRollback, dest: str) -> None:
        client = ClientIdentity(rb.destination, int(rb.client_id))
        self.server.embedded.rollback(client, None if rb.batch_id == 0 else rb.batch_id)


_HANDLERS = {
    codec.SUBSCRIPTION: (cp.Sub, _Session.on_subscribe),
    codec.UNSUBSCRIPTION: (cp.Unsub, _Session.on_unsubscribe),
    codec.GET: (cp.Get, _Session.on_get),
    codec.CLIENTACK: (cp.ClientAck, _Session.on_ack),
    codec.CLIENTROLLBACK: (cp.ClientRollback, _Session.on_rollback),
}
