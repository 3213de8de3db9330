"""Canal connectors: the client side of Canal's TCP protocol, with the shape of Canal's Java CanalConnector.

    conn = SimpleConnector(("127.0.0.1", 11111), "example", "canal", "canal")
    conn.connect()                       # handshake, scrambled password, rollback (Canal's connector does)
    conn.subscribe("canal_test\\\\..*")  # empty: the destination's own canal.instance.filter.regex
    msg = conn.get_without_ack(100, 500, TimeUnit.MILLISECONDS)
    for entry in msg.entries: ...        # parsed Entry objects; msg.raw_entries: the bytes as received
    conn.ack(msg.batch_id)               # or conn.rollback()

Timeouts follow the Java connector: ``timeout=None`` (or < 0) is a try-get that returns at once; 0 blocks
until batch_size entries are there; > 0 waits up to timeout x unit.

CLIENTACK and CLIENTROLLBACK have no reply on success; a refused ack is an error Ack the server sends
at once, which arrives as the reply to the NEXT request. The connector keeps count of such unanswered
packets: an error read while some are outstanding may belong to one of them, and the reply to the
current request may still be on its way, so the stream can no longer be trusted. It then raises the
error with ``stale=True`` and drops the connection (``connect()`` starts a fresh one, the
ClusterConnector does so by itself; its rollback makes the server deliver every unacked batch again).
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..protocol import codec
from ..protocol.auth import scramble
from ..protocol.codec import TimeUnit
from ..protocol.errors import CanalError
from ..protocol.message import Message
from ..protocol.proto import CanalProtocol_pb2 as cp

log = logging.getLogger(__name__)

DEFAULT_CLIENT_ID = "1001"
DEFAULT_BATCH_SIZE = 1000  # what Canal's connector asks for when batch_size <= 0
DEFAULT_SO_TIMEOUT = 60.0  # s to wait for a reply (Canal's soTimeout)
DEFAULT_IDLE_TIMEOUT = 3600.0  # s the server keeps an idle connection (sent as net_read/write_timeout)
# The largest reply frame accepted from a server: a batch of 1000 entries of large rows fits; a length beyond it
# (a broken or hostile server) is refused before anything is read. The buffer grows with the bytes that arrive,
# never to a length only announced.
DEFAULT_MAX_FRAME_SIZE = 256 << 20
_FIRST_READ = 1 << 20

Address = tuple[str, int]
T = TypeVar("T")


class CanalClientError(CanalError):
    """A request failed. ``code``: the server's error code (400, 401, 402), 0 when the failure is on this
    side; ``message``: the server's text. ``stale``: the error may answer an earlier ack/rollback (see the
    module doc); the connection has been dropped."""

    def __init__(self, message: str, code: int = 0, *, stale: bool = False) -> None:
        super().__init__(f"{code}: {message}" if code else message)
        self.code = code
        self.message = message
        self.stale = stale

    @property
    def destination_unavailable(self) -> bool:
        """The server does not run the destination (not started here, or being stopped): another server
        of a cluster may."""
        return self.code == 400 and ("should start first" in self.message or "store closed" in self.message
                                     or "store is closed" in self.message)


class CanalConnectionError(CanalClientError):
    """No usable connection: refused, reset, closed by the server, timed out, or not Canal's protocol."""


class CanalAuthError(CanalClientError):
    """The server refused the username/password ("auth failed for user:...")."""


def parse_address(address: Address | str) -> Address:
    if isinstance(address, str):
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"address {address!r}: expected host:port")
        return host.strip("[]"), int(port)
    return address[0], int(address[1])


class _AckingGet:
    """get() of both connectors: get_without_ack, then ack of that batch, under the connector's (reentrant) lock so
    no other request comes between the two."""

    _lock: threading.RLock

    def get_without_ack(self, batch_size: int = DEFAULT_BATCH_SIZE, timeout: int | None = None,
                        unit: TimeUnit | int = TimeUnit.MILLISECONDS) -> Message:
        raise NotImplementedError

    def ack(self, batch_id: int) -> None:
        raise NotImplementedError

    def get(self, batch_size: int = DEFAULT_BATCH_SIZE, timeout: int | None = None,
            unit: TimeUnit | int = TimeUnit.MILLISECONDS) -> Message:
        """get_without_ack, then ack of that batch."""
        with self._lock:
            msg = self.get_without_ack(batch_size, timeout, unit)
            if not msg.empty:
                self.ack(msg.batch_id)
            return msg


class SimpleConnector(_AckingGet):
    """One server (Canal's SimpleCanalConnector). Not for concurrent use by several threads at once (a
    lock keeps each request and its reply together, so sharing is safe but serialised). ``max_frame_size``:
    the largest reply (bytes) accepted; a longer announced frame is a CanalConnectionError."""

    def __init__(self, address: Address | str, destination: str, username: str = "", password: str = "", *,
                 client_id: str | int = DEFAULT_CLIENT_ID, filter: str | None = None,
                 so_timeout: float = DEFAULT_SO_TIMEOUT, idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
                 connect_timeout: float = 10.0, rollback_on_connect: bool = True,
                 rollback_on_disconnect: bool = False, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.address = parse_address(address)
        self.destination = destination
        self.username = username
        self.password = password
        self.client_id = str(client_id)
        self.so_timeout = so_timeout
        self.idle_timeout = idle_timeout
        self.connect_timeout = connect_timeout
        self.rollback_on_connect = rollback_on_connect
        self.rollback_on_disconnect = rollback_on_disconnect
        self.max_frame_size = max_frame_size
        self._filter = filter  # re-subscribed on (re)connect once set, as Canal's connector does
        self._sock: socket.socket | None = None
        self._unanswered = 0  # CLIENTACK/CLIENTROLLBACK sent since the last reply read
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"SimpleConnector({self.address[0]}:{self.address[1]}, {self.destination!r})"

    # ---- connection ----------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def connect(self) -> None:
        """Connect and authenticate; then subscribe again if a filter was set, and roll back (Canal's
        connector does both, so a reconnect re-delivers whatever was not acked). Idempotent."""
        with self._lock:
            if self._sock is not None:
                return
            self._open()
            try:
                if self._filter is not None:
                    self.subscribe(self._filter)
                if self.rollback_on_connect:
                    self.rollback()
            except CanalClientError:
                self._drop()
                raise

    def _open(self) -> None:
        host, port = self.address
        try:
            sock = socket.create_connection((host, port), timeout=self.connect_timeout)
        except OSError as e:
            raise CanalConnectionError(f"cannot connect to {host}:{port}: {e}") from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        self._sock = sock
        self._unanswered = 0
        try:
            hs = self._read(self.so_timeout)
            if hs.type != codec.HANDSHAKE:
                raise CanalConnectionError(f"expected a handshake from {host}:{port}, got "
                                           f"{codec.packet_type_name(hs.type)}")
            if hs.version != codec.VERSION:
                raise CanalConnectionError(f"unsupported protocol version {hs.version} at {host}:{port}")
            seed = cp.Handshake.FromString(hs.body).seeds
            token = scramble(self.password, seed) if self.password else ""
            auth = cp.ClientAuth(username=self.username, password=token.encode("utf-8"),
                                 net_read_timeout=int(self.idle_timeout * 1000),
                                 net_write_timeout=int(self.idle_timeout * 1000))
            self._send(codec.CLIENTAUTHENTICATION, auth.SerializeToString())
            reply = self._read(self.so_timeout)
            ack = self._ack_of(reply)
            if ack.error_code:
                raise CanalAuthError(ack.error_message, ack.error_code)
        except BaseException:
            self._drop()
            raise

    def disconnect(self) -> None:
        with self._lock:
            if self._sock is None:
                return
            if self.rollback_on_disconnect:
                try:
                    self.rollback()
                except CanalClientError:
                    pass
            self._drop()

    def _drop(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def check_valid(self) -> bool:
        """Connected, and the server has not closed the connection."""
        with self._lock:
            sock = self._sock
            if sock is None:
                return False
            try:
                readable, _, _ = select.select([sock], [], [], 0)
                if readable and not sock.recv(1, socket.MSG_PEEK):
                    self._drop()
                    return False
            except OSError:
                self._drop()
                return False
            return True

    def __enter__(self) -> SimpleConnector:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.disconnect()

    # ---- io ------------------------------------------------------------------------------------

    def _require(self) -> socket.socket:
        if self._sock is None:
            raise CanalConnectionError(f"not connected to {self.address[0]}:{self.address[1]}")
        return self._sock

    def _send(self, ptype: int, body: bytes) -> None:
        sock = self._require()
        data = cp.Packet(type=ptype, body=body).SerializeToString()  # type: ignore[arg-type]
        try:
            sock.settimeout(self.so_timeout)
            sock.sendall(codec.frame(data))
        except OSError as e:
            self._drop()
            raise CanalConnectionError(f"write to {self.address[0]}:{self.address[1]} failed: {e}") from e

    def _read(self, timeout: float | None) -> cp.Packet:
        """The next packet; ``timeout`` None: no limit (a blocking get)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            (n,) = codec.HEADER.unpack(self._read_exact(codec.HEADER.size, deadline))
            if n < 0:
                raise codec.ProtocolError(f"negative frame length {n}")
            if n > self.max_frame_size:
                raise codec.ProtocolError(f"the server announced a frame of {n} bytes, more than max_frame_size "
                                          f"({self.max_frame_size}); a server this far out of step is broken or "
                                          f"not canal (raise max_frame_size only for batches really this large)")
            return codec.parse_packet(self._read_exact(n, deadline))
        except TimeoutError:
            self._drop()  # the reply may still come: the stream is out of step
            raise CanalConnectionError(f"no reply from {self.address[0]}:{self.address[1]} within "
                                       f"{timeout:g} s") from None
        except CanalConnectionError:
            self._drop()
            raise
        except (OSError, codec.ProtocolError) as e:
            self._drop()
            raise CanalConnectionError(f"read from {self.address[0]}:{self.address[1]} failed: {e}") from e

    def _read_exact(self, n: int, deadline: float | None) -> bytearray:
        # one buffer filled in place (a batch of many MB is not copied piecewise), doubled as the bytes arrive:
        # a frame length alone never takes its size in memory
        sock = self._require()
        buf = bytearray(min(n, _FIRST_READ))
        got = 0
        while got < n:
            if got == len(buf):
                buf.extend(bytes(min(len(buf), n - len(buf))))
            if deadline is None:
                sock.settimeout(None)
            else:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                sock.settimeout(left)
            k = sock.recv_into(memoryview(buf)[got:])
            if not k:
                raise CanalConnectionError(f"{self.address[0]}:{self.address[1]} closed the connection")
            got += k
        return buf

    @staticmethod
    def _ack_of(pkt: cp.Packet) -> cp.Ack:
        if pkt.type != codec.ACK:
            raise CanalConnectionError(f"expected an ACK, got {codec.packet_type_name(pkt.type)}")
        return cp.Ack.FromString(pkt.body)

    def _reply(self, timeout: float | None) -> cp.Packet:
        """The reply to the request just sent; an error Ack raises CanalClientError."""
        pkt = self._read(timeout)
        unanswered, self._unanswered = self._unanswered, 0
        if pkt.type == codec.ACK:
            ack = cp.Ack.FromString(pkt.body)
            if ack.error_code:
                if unanswered:
                    self._drop()
                raise CanalClientError(ack.error_message, ack.error_code, stale=bool(unanswered))
        return pkt

    def _request(self, ptype: int, body: bytes, timeout: float | None = None) -> cp.Packet:
        self._send(ptype, body)
        return self._reply(self.so_timeout if timeout is None else timeout)

    # ---- Canal's API ---------------------------------------------------------------------------

    def subscribe(self, filter: str = "") -> None:
        """Subscribe; a non-empty ``filter`` (Canal's table regex) replaces the destination's."""
        with self._lock:
            body = cp.Sub(destination=self.destination, client_id=self.client_id, filter=filter)
            self._ack_of(self._request(codec.SUBSCRIPTION, body.SerializeToString()))
            self._filter = filter

    def unsubscribe(self) -> None:
        with self._lock:
            body = cp.Unsub(destination=self.destination, client_id=self.client_id)
            self._ack_of(self._request(codec.UNSUBSCRIPTION, body.SerializeToString()))
            self._filter = None

    def get_without_ack(self, batch_size: int = DEFAULT_BATCH_SIZE, timeout: int | None = None,
                        unit: TimeUnit | int = TimeUnit.MILLISECONDS) -> Message:
        """The next batch, to be acked or rolled back. ``timeout`` None or < 0: return at once; 0: block
        until ``batch_size`` entries are there; > 0: wait up to ``timeout`` x ``unit``."""
        size = batch_size if batch_size > 0 else DEFAULT_BATCH_SIZE
        t = -1 if timeout is None or timeout < 0 else int(timeout)
        get = cp.Get(destination=self.destination, client_id=self.client_id, fetch_size=size, timeout=t,
                     unit=int(unit), auto_ack=False)
        if t == -1:
            wait: float | None = self.so_timeout
        elif t == 0:
            wait = None  # blocking get: as long as the data takes to come
        else:
            wait = t * codec.unit_seconds(int(unit)) + self.so_timeout
        with self._lock:
            pkt = self._request(codec.GET, get.SerializeToString(), wait)
            if pkt.type != codec.MESSAGES:
                self._drop()
                raise CanalConnectionError(f"expected MESSAGES, got {codec.packet_type_name(pkt.type)}")
            try:
                batch_id, entries = codec.parse_messages(pkt)
            except codec.ProtocolError as e:
                self._drop()
                raise CanalConnectionError(str(e)) from e
            return Message(batch_id, entries)

    def ack(self, batch_id: int) -> None:
        """Confirm a batch (the oldest outstanding one). No reply: a refusal surfaces at the next request."""
        if batch_id == -1:
            return  # an empty get: nothing to confirm (the server would ignore it too)
        with self._lock:
            body = cp.ClientAck(destination=self.destination, client_id=self.client_id, batch_id=batch_id)
            self._send(codec.CLIENTACK, body.SerializeToString())
            self._unanswered += 1

    def rollback(self, batch_id: int | None = None) -> None:
        """Give back every outstanding batch (None), or ``batch_id`` and the later ones: they come again."""
        if batch_id == -1:
            return  # an empty get handed nothing out
        with self._lock:
            body = cp.ClientRollback(destination=self.destination, client_id=self.client_id,
                                     batch_id=batch_id or 0)
            self._send(codec.CLIENTROLLBACK, body.SerializeToString())
            self._unanswered += 1


AddressSource = Callable[[], Sequence[Address]]


class ClusterConnector(_AckingGet):
    """Several servers (Canal's ClusterCanalConnector): connects to the first address that answers; when
    the connection fails or the server goes away, tries the next one, in rounds with exponential backoff.

    ``addresses``: a fixed list, or a callable asked afresh before every round (ZooKeeper discovery plugs
    in here: it returns the server currently running the destination). Every (re)connection re-subscribes
    with the last filter and rolls back, so the new server delivers everything not acked: nothing is lost,
    a batch may come twice. A get interrupted by a failover is retried on the new connection; an ack that
    could not be confirmed raises CanalConnectionError after reconnecting (its batch will come again).
    """

    def __init__(self, addresses: Sequence[Address | str] | AddressSource, destination: str,
                 username: str = "", password: str = "", *, client_id: str | int = DEFAULT_CLIENT_ID,
                 retries: int = 3, backoff: float = 1.0, max_backoff: float = 30.0,
                 so_timeout: float = DEFAULT_SO_TIMEOUT, idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
                 connect_timeout: float = 5.0, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if callable(addresses):
            self._source: AddressSource = addresses
        else:
            fixed = [parse_address(a) for a in addresses]
            if not fixed:
                raise ValueError("ClusterConnector needs at least one address")
            self._source = lambda: fixed
        self.destination = destination
        self.username = username
        self.password = password
        self.client_id = str(client_id)
        self.retries = max(1, retries)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.so_timeout = so_timeout
        self.idle_timeout = idle_timeout
        self.connect_timeout = connect_timeout
        self.max_frame_size = max_frame_size
        self.current: SimpleConnector | None = None
        self._filter: str | None = None
        self._last: Address | None = None
        self._lock = threading.RLock()

    @property
    def address(self) -> Address | None:
        """The server in use."""
        return self.current.address if self.current is not None else None

    def connect(self) -> None:
        with self._lock:
            if self.current is None or not self.current.connected:
                self._connect_any()

    def _connect_any(self) -> None:
        last_error: Exception | None = None
        tried: list[Address] = []
        for attempt in range(self.retries):
            if attempt:
                time.sleep(min(self.max_backoff, self.backoff * 2 ** (attempt - 1)))
            addrs = [parse_address(a) for a in self._source()]
            if self._last in addrs and len(addrs) > 1:  # after a failure, the next server first
                i = addrs.index(self._last)
                addrs = addrs[i + 1:] + addrs[:i + 1]
            for addr in addrs:
                tried.append(addr)
                conn = SimpleConnector(addr, self.destination, self.username, self.password,
                                       client_id=self.client_id, filter=self._filter, so_timeout=self.so_timeout,
                                       idle_timeout=self.idle_timeout, connect_timeout=self.connect_timeout,
                                       max_frame_size=self.max_frame_size)
                try:
                    conn.connect()
                except CanalAuthError:
                    raise  # the same credentials will not do better elsewhere
                except CanalClientError as e:
                    log.warning("canal server %s:%d unusable for %s: %s", addr[0], addr[1], self.destination, e)
                    last_error = e
                    continue
                self.current, self._last = conn, addr
                log.info("connected to canal server %s:%d for %s", addr[0], addr[1], self.destination)
                return
        seen = ", ".join(f"{h}:{p}" for h, p in dict.fromkeys(tried)) or "no address"
        raise CanalConnectionError(f"no canal server for {self.destination} after {self.retries} rounds "
                                   f"({seen}): {last_error}")

    def _failover(self) -> None:
        if self.current is not None:
            self.current._drop()
        self.current = None
        self._connect_any()

    def _call(self, op: Callable[[SimpleConnector], T], *, retry: bool = True) -> T:
        with self._lock:
            for attempt in range(self.retries + 1):
                if self.current is None or not self.current.connected:
                    self._connect_any()
                assert self.current is not None
                try:
                    return op(self.current)
                except CanalClientError as e:
                    if not (isinstance(e, CanalConnectionError) or e.destination_unavailable):
                        if e.stale:
                            self.current = None  # dropped: reconnect (and roll back) at the next call
                        raise
                    log.warning("canal server %s lost for %s: %s", self.address, self.destination, e)
                    self._failover()
                    if not retry or attempt == self.retries:
                        raise
            raise AssertionError("unreachable")

    def disconnect(self) -> None:
        with self._lock:
            if self.current is not None:
                self.current.disconnect()
            self.current = None

    def check_valid(self) -> bool:
        with self._lock:
            return self.current is not None and self.current.check_valid()

    def subscribe(self, filter: str = "") -> None:
        self._call(lambda c: c.subscribe(filter))
        self._filter = filter

    def unsubscribe(self) -> None:
        self._call(lambda c: c.unsubscribe())
        self._filter = None

    def get_without_ack(self, batch_size: int = DEFAULT_BATCH_SIZE, timeout: int | None = None,
                        unit: TimeUnit | int = TimeUnit.MILLISECONDS) -> Message:
        return self._call(lambda c: c.get_without_ack(batch_size, timeout, unit))

    def ack(self, batch_id: int) -> None:
        # not retried: after a failover the batch has been rolled back and will be delivered again
        self._call(lambda c: c.ack(batch_id), retry=False)

    def rollback(self, batch_id: int | None = None) -> None:
        # a failover rolls back everything on the new connection, which is what was asked for
        try:
            self._call(lambda c: c.rollback(batch_id), retry=False)
        except CanalConnectionError:
            if self.current is None or not self.current.connected:
                raise

    def __enter__(self) -> ClusterConnector:
        self.connect()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.disconnect()
