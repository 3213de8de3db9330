"""Canal's TCP server over real destinations on the private MariaDB, through our connectors and through a
raw socket speaking the wire protocol by hand: password auth, GET timeout rules, CLIENTACK without a
reply and ack errors read at the next request, 401/402/400 errors, rollback, two destinations and
concurrent clients, idle timeouts, cluster failover, and the controller serving canal.ip:canal.port.

Rows are checked against what MariaDB itself returns (SELECT ... CAST(col AS CHAR)), after applying the
received row changes in order."""

from __future__ import annotations

import select
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from canal_core.client import (
    CanalAuthError,
    CanalClientError,
    CanalConnectionError,
    ClusterConnector,
    SimpleConnector,
    TimeUnit,
)
from canal_core.entry.proto import CanalProtocol_pb2 as cp
from canal_core.entry.proto import EntryProtocol_pb2 as ep
from canal_core.instance.config import ConfigError
from canal_core.server.auth import scramble, stored_hash
from canal_core.server.controller import CanalController
from canal_core.server.embedded import CanalServerWithEmbedded
from canal_core.server.tcp import CanalTcpServer
from tests.integration.binlog_end import binlog_end

pytestmark = pytest.mark.integration

USER = "canal"
PASSWORD = "tcp-secret"
TABLE_A = "tcpsrv_a"
TABLE_B = "tcpsrv_b"
COLUMNS = ("id", "name", "amount", "created", "note")


# ---- MariaDB side ----------------------------------------------------------------------------------


def _master_status(settings: Any) -> tuple[str, int]:
    return binlog_end(settings.repl_kwargs())


@pytest.fixture
def tables(admin_conn: Any) -> Iterator[tuple[str, str]]:
    with admin_conn.cursor() as cur:
        for t in (TABLE_A, TABLE_B):
            cur.execute(f"DROP TABLE IF EXISTS canal_test.{t}")
            cur.execute(f"CREATE TABLE canal_test.{t} (id INT PRIMARY KEY, name VARCHAR(40), amount DECIMAL(10,2),"
                        " created DATETIME, note VARCHAR(20) NULL) DEFAULT CHARSET=utf8mb4")
    yield TABLE_A, TABLE_B
    with admin_conn.cursor() as cur:
        for t in (TABLE_A, TABLE_B):
            cur.execute(f"DROP TABLE IF EXISTS canal_test.{t}")


def _write(admin_conn: Any, table: str, first: int, n: int) -> None:
    """n single-row transactions, then an UPDATE and a DELETE (changes Canal must carry in order)."""
    with admin_conn.cursor() as cur:
        for i in range(first, first + n):
            created = f"2024-0{1 + i % 9}-1{i % 10} 10:2{i % 10}:0{i % 10}"
            cur.execute(f"INSERT INTO canal_test.{table} VALUES (%s, %s, %s, %s, %s)",
                        (i, f"név-{i} ✓", f"{i * 3}.{i % 100:02d}", created, None if i % 2 else f"n{i}"))
        cur.execute(f"UPDATE canal_test.{table} SET amount = amount + 1, note = 'upd' WHERE id = %s", (first,))
        if n > 1:
            cur.execute(f"DELETE FROM canal_test.{table} WHERE id = %s", (first + 1,))


def _select(admin_conn: Any, table: str) -> dict[str, dict[str, str | None]]:
    """The text Canal gives every row, keyed by id: MariaDB's own (CAST AS CHAR), but for the DECIMAL(10,2)
    amount, whose two fraction digits Canal leaves out when both are zero (300.00 is "300.0";
    docs/type-mapping.md)."""
    cols = ", ".join(f"CAST({c} AS CHAR)" for c in COLUMNS)
    with admin_conn.cursor() as cur:
        cur.execute(f"SELECT {cols} FROM canal_test.{table}")
        rows = {r[0]: dict(zip(COLUMNS, r, strict=True)) for r in cur.fetchall()}
    for row in rows.values():
        if row["amount"] is not None and row["amount"].endswith(".00"):
            row["amount"] = row["amount"][:-1]
    return rows


def _apply(entries: list[ep.Entry], table: str, state: dict[str, dict[str, str | None]]) -> int:
    """Apply the row changes of ``table`` to ``state`` (id -> columns); returns how many rows changed."""
    n = 0
    for e in entries:
        if e.entryType != ep.ROWDATA or e.header.tableName != table:
            continue
        assert e.header.schemaName == "canal_test"
        rc = ep.RowChange.FromString(e.storeValue)
        for rd in rc.rowDatas:
            n += 1
            if rc.eventType == ep.DELETE:
                key = next(c.value for c in rd.beforeColumns if c.name == "id")
                del state[key]
            else:
                row = {c.name: None if c.isNull else c.value for c in rd.afterColumns}
                state[row["id"]] = row  # type: ignore[index]
    return n


def _drain(conn: SimpleConnector | ClusterConnector, table: str, want: dict[str, Any],
           state: dict[str, dict[str, str | None]] | None = None, timeout: float = 30) -> dict[str, Any]:
    """get_without_ack + ack until the applied state equals ``want`` (or the time is up)."""
    state = {} if state is None else state
    deadline = time.monotonic() + timeout
    while state != want and time.monotonic() < deadline:
        msg = conn.get_without_ack(50, 300, TimeUnit.MILLISECONDS)
        _apply(msg.entries, table, state)
        conn.ack(msg.batch_id)
    return state


# ---- the server under test -------------------------------------------------------------------------


def _conf(tmp: Path, mysql_port: int, start: tuple[str, int], *, canal_extra: str = "") -> Path:
    conf = tmp / "conf"
    conf.mkdir(parents=True)
    (conf / "canal.properties").write_text(
        "canal.destinations = d1,d2\n"
        "canal.auto.scan = false\n"
        f"canal.file.data.dir = {tmp / 'data'}\n"
        "canal.file.flush.period = 100\n"
        "canal.instance.memory.buffer.size = 1024\n"
        "canal.instance.memory.batch.mode = ITEMSIZE\n" + canal_extra
    )
    for dest, table in (("d1", TABLE_A), ("d2", TABLE_B)):
        (conf / dest).mkdir()
        (conf / dest / "instance.properties").write_text(
            f"canal.instance.master.address = 127.0.0.1:{mysql_port}\n"
            f"canal.instance.master.journal.name = {start[0]}\n"
            f"canal.instance.master.position = {start[1]}\n"
            "canal.instance.dbUsername = canal\ncanal.instance.dbPassword = canal\n"
            f"canal.instance.filter.regex = canal_test\\\\.{table}\n"
        )
    return conf


@dataclass
class Recorder:
    """ClientHooks that keep every call."""

    calls: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _add(self, name: str, *args: Any) -> None:
        with self.lock:
            self.calls.append((name, args))

    def packet_received(self, destination: str | None, packet_type: str) -> None:
        self._add("packet_received", destination, packet_type)

    def bytes_sent(self, destination: str | None, nbytes: int) -> None:
        self._add("bytes_sent", destination, nbytes)

    def empty_batch(self, destination: str) -> None:
        self._add("empty_batch", destination)

    def request_error(self, destination: str | None, error_code: int) -> None:
        self._add("request_error", destination, error_code)

    def request_latency(self, destination: str | None, packet_type: str, seconds: float) -> None:
        self._add("request_latency", destination, packet_type, seconds)

    def of(self, name: str) -> list[tuple[Any, ...]]:
        with self.lock:
            return [a for n, a in self.calls if n == name]


@dataclass
class Served:
    ctl: CanalController
    tcp: CanalTcpServer
    hooks: Recorder

    @property
    def addr(self) -> tuple[str, int]:
        return self.tcp.address

    def connector(self, dest: str = "d1", password: str = PASSWORD, **kw: Any) -> SimpleConnector:
        return SimpleConnector(self.addr, dest, USER, password, **kw)


@pytest.fixture
def served(mariadb_settings: Any, admin_conn: Any, tables: Any, tmp_path: Path) -> Iterator[Served]:
    conf = _conf(tmp_path, mariadb_settings.port, _master_status(mariadb_settings))
    ctl = CanalController(conf)
    ctl.start()
    hooks = Recorder()
    tcp = CanalTcpServer(ctl.server, host="127.0.0.1", port=0, user=USER, passwd=stored_hash(PASSWORD),
                         hooks=hooks, auth_timeout=1.5)
    tcp.start()
    try:
        yield Served(ctl, tcp, hooks)
    finally:
        tcp.stop(timeout=0)
        ctl.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- a raw protocol client, written from the wire format (not our connector) ---------------------


class Raw:
    def __init__(self, addr: tuple[str, int]) -> None:
        self.sock = socket.create_connection(addr, timeout=10)
        hs = self.read()
        assert hs.type == cp.HANDSHAKE and hs.version == 1
        self.seed = cp.Handshake.FromString(hs.body).seeds
        assert len(self.seed) == 8

    def send(self, ptype: int, msg: Any = None, *, raw_body: bytes | None = None) -> None:
        body = raw_body if raw_body is not None else (msg.SerializeToString() if msg is not None else b"")
        data = cp.Packet(type=ptype, body=body).SerializeToString()
        self.sock.sendall(struct.pack(">i", len(data)) + data)

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("server closed the connection")
            buf += chunk
        return buf

    def read_bytes(self, timeout: float = 10) -> bytes:
        self.sock.settimeout(timeout)
        (n,) = struct.unpack(">i", self._exact(4))
        return self._exact(n)

    def read(self, timeout: float = 10) -> cp.Packet:
        return cp.Packet.FromString(self.read_bytes(timeout))

    def ack(self, timeout: float = 10) -> cp.Ack:
        p = self.read(timeout)
        assert p.type == cp.ACK, p
        return cp.Ack.FromString(p.body)

    def messages(self, timeout: float = 10) -> cp.Messages:
        p = self.read(timeout)
        assert p.type == cp.MESSAGES, cp.Ack.FromString(p.body) if p.type == cp.ACK else p
        return cp.Messages.FromString(p.body)

    def nothing_pending(self, wait: float = 0.5) -> bool:
        readable, _, _ = select.select([self.sock], [], [], wait)
        return not readable

    def auth(self, password: str = PASSWORD, **kw: Any) -> cp.Ack:
        token = scramble(password, self.seed).encode() if password else b""
        self.send(cp.CLIENTAUTHENTICATION, cp.ClientAuth(username=USER, password=token, **kw))
        return self.ack()

    def get(self, dest: str = "d1", client: str = "1001", fetch: int = 100, **kw: Any) -> None:
        self.send(cp.GET, cp.Get(destination=dest, client_id=client, fetch_size=fetch, **kw))

    def close(self) -> None:
        self.sock.close()


def _entries(msgs: cp.Messages) -> list[ep.Entry]:
    return [ep.Entry.FromString(b) for b in msgs.messages]


# ---- tests -----------------------------------------------------------------------------------------


def test_password_auth(served: Served, admin_conn: Any) -> None:
    # the right password, scrambled with the seed: rows come through and match MariaDB
    with served.connector() as conn:
        assert conn.check_valid()
        conn.subscribe()
        _write(admin_conn, TABLE_A, 1, 4)
        want = _select(admin_conn, TABLE_A)
        assert _drain(conn, TABLE_A, want) == want and len(want) == 3

    for user, password in ((USER, "wrong"), (USER, ""), ("bob", PASSWORD)):
        with pytest.raises(CanalAuthError) as err:
            SimpleConnector(served.addr, "d1", user, password).connect()
        assert err.value.code == 400 and err.value.message == f"auth failed for user:{user}"
    # the password sent unscrambled (what canal-python does) is refused, and the connection closed: one
    # attempt per connection; a new connection with a correct ClientAuth then passes
    raw = Raw(served.addr)
    try:
        raw.send(cp.CLIENTAUTHENTICATION, cp.ClientAuth(username=USER, password=PASSWORD.encode()))
        refused = raw.ack()
        assert (refused.error_code, refused.error_message) == (400, f"auth failed for user:{USER}")
        with pytest.raises(EOFError):
            raw.read(timeout=5)
    finally:
        raw.close()
    throttle = served.tcp.throttle  # four failures from this address: its next attempt waits 2 s
    assert throttle.failures("127.0.0.1") == 4
    time.sleep(throttle.backoff(4))  # (longer than this server's auth timeout, so wait before connecting)
    raw = Raw(served.addr)
    try:
        assert raw.auth().error_code == 0
    finally:
        raw.close()
    # a refused ClientAuth names no destination to the metrics hooks: a guesser creates no labelled series
    raw = Raw(served.addr)
    try:
        assert raw.auth("wrong", destination="guess-1", client_id="1001").error_code == 400
    finally:
        raw.close()
    deadline = time.monotonic() + 5  # a hook runs after the reply is written
    while len(served.hooks.of("request_error")) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [d for d, _ in served.hooks.of("request_error")] == [None] * 5
    assert "guess-1" not in {d for d, _ in served.hooks.of("packet_received")}


def _ack_all(conn: SimpleConnector) -> None:
    """Take and ack whatever is stored (e.g. the empty transactions Canal lets through every 5 s for
    other tables' writes), so that the next blocking get waits for new entries only."""
    while not (msg := conn.get_without_ack(1000)).empty:
        conn.ack(msg.batch_id)


def test_get_timeout_rules(served: Served, admin_conn: Any) -> None:
    conn = served.connector()
    conn.connect()
    state: dict[str, Any] = {}
    try:
        conn.subscribe()
        t0 = time.monotonic()
        conn.get_without_ack(1000)  # timeout None -> -1 on the wire: try-get
        assert time.monotonic() - t0 < 1.0
        conn.rollback()
        t0 = time.monotonic()
        conn.get_without_ack(1000, 1500, TimeUnit.MILLISECONDS)  # waits the timeout: 1000 entries never come
        assert 1.4 <= time.monotonic() - t0 < 5.0
        conn.rollback()
        t0 = time.monotonic()
        conn.get_without_ack(1000, 1, TimeUnit.SECONDS)
        assert 0.9 <= time.monotonic() - t0 < 5.0
        conn.rollback()

        # blocking get (timeout 0): returns when the rows are there, not before. 6 entries = our first two
        # transactions; other tables' empty transactions (2 entries, at most one per 5 s) cannot fill it
        _ack_all(conn)
        timer = threading.Timer(1.0, _write, (admin_conn, TABLE_A, 1, 4))
        t0 = time.monotonic()
        timer.start()
        msg = conn.get_without_ack(6, 0)
        waited = time.monotonic() - t0
        timer.join()
        assert waited >= 0.9 and len(msg.raw_entries) >= 6
        assert _apply(msg.entries, TABLE_A, state) >= 1
        conn.ack(msg.batch_id)
        want = _select(admin_conn, TABLE_A)
        assert _drain(conn, TABLE_A, want, state) == want and len(want) == 3
        _ack_all(conn)
    finally:
        conn.disconnect()

    # a GET without the timeout field (proto3 reads it as 0) blocks too
    raw = Raw(served.addr)
    try:
        assert raw.auth(destination="d1", client_id="1001").error_code == 0
        raw.get(fetch=6)
        assert raw.nothing_pending(1.0)
        _write(admin_conn, TABLE_A, 10, 2)
        msgs = raw.messages(timeout=20)
        assert len(msgs.messages) >= 6
        want = _select(admin_conn, TABLE_A)
        while True:
            _apply(_entries(msgs), TABLE_A, state)
            raw.send(cp.CLIENTACK, cp.ClientAck(destination="d1", client_id="1001", batch_id=msgs.batch_id))
            if state == want:
                break
            raw.get(fetch=100, timeout=500, unit=2)
            msgs = raw.messages()
        assert state == want and len(want) == 4
    finally:
        raw.close()


def test_ack_without_reply_and_errors(served: Served, admin_conn: Any) -> None:
    raw = Raw(served.addr)
    try:
        # destination + client id in ClientAuth: subscribed at auth, no SUBSCRIPTION needed
        assert raw.auth(destination="d1", client_id="1001").error_code == 0
        _write(admin_conn, TABLE_A, 1, 6)
        want = _select(admin_conn, TABLE_A)
        state: dict[str, Any] = {}

        def get_batch() -> cp.Messages:
            raw.get(fetch=3, timeout=3000, unit=2)
            m = raw.messages()
            assert m.batch_id > 0
            return m

        a = get_batch()
        b = get_batch()
        # the raw fast path: a Packet with only type and body
        raw.get(fetch=3, timeout=3000, unit=2)
        fast = cp.Packet.FromString(raw.read_bytes())
        assert [f.name for f, _ in fast.ListFields()] == ["type", "body"]
        c = cp.Messages.FromString(fast.body)
        assert c.batch_id > b.batch_id and len(c.messages) > 0

        # out-of-order ack: no reply now; the 400 is what the NEXT request reads first, then its own reply
        raw.send(cp.CLIENTACK, cp.ClientAck(destination="d1", client_id="1001", batch_id=b.batch_id))
        raw.get(fetch=3, timeout=-1)
        err = raw.ack()
        assert err.error_code == 400
        assert f"batchId:{b.batch_id} is not the firstly:{a.batch_id}" in err.error_message
        d = raw.messages()  # the GET's own reply follows: the connection was not closed

        # in-order acks: no reply at all; the next request's reply is its own
        for m in (a, b, c, d):
            if m.batch_id != -1:
                raw.send(cp.CLIENTACK, cp.ClientAck(destination="d1", client_id="1001", batch_id=m.batch_id))
            _apply(_entries(m), TABLE_A, state)
        assert raw.nothing_pending(0.5)
        raw.get(fetch=100, timeout=-1)
        e = raw.messages()
        _apply(_entries(e), TABLE_A, state)
        if e.batch_id != -1:
            raw.send(cp.CLIENTACK, cp.ClientAck(destination="d1", client_id="1001", batch_id=e.batch_id))
        assert raw.nothing_pending(0.5)
        while state != want:  # whatever the parser had not yet stored
            raw.get(fetch=100, timeout=500, unit=2)
            m = raw.messages()
            _apply(_entries(m), TABLE_A, state)
            raw.send(cp.CLIENTACK, cp.ClientAck(destination="d1", client_id="1001", batch_id=m.batch_id))
        assert state == want

        # batch id 0 -> 402; batch id -1 -> ignored; a batch that does not exist -> 400
        raw.send(cp.CLIENTACK, cp.ClientAck(destination="d1", client_id="1001", batch_id=0))
        raw.send(cp.CLIENTACK, cp.ClientAck(destination="d1", client_id="1001", batch_id=-1))
        raw.get(timeout=-1)
        zero = raw.ack()
        assert (zero.error_code, zero.error_message) == (402, "batchId should assign value")
        assert raw.messages().batch_id == -1 and raw.nothing_pending(0.3)
        raw.send(cp.CLIENTACK, cp.ClientAck(destination="d1", client_id="1001", batch_id=999))
        raw.get(timeout=-1)
        missing = raw.ack()
        assert missing.error_code == 400 and "clientId:1001 batchId:999 is not exist" in missing.error_message
        assert raw.messages().batch_id == -1

        # missing destination / client id -> 401, unknown destination -> 400 (Canal: "should start first")
        raw.get(client="")
        no_client = raw.ack()
        assert (no_client.error_code, no_client.error_message) == (401, "destination or clientId is null")
        raw.send(cp.SUBSCRIPTION, cp.Sub(client_id="1001"))
        no_dest = raw.ack()
        assert (no_dest.error_code, no_dest.error_message) == (401, "destination or clientId is null")
        raw.send(cp.CLIENTACK, cp.ClientAck(destination="d1", batch_id=5))
        assert raw.ack().error_code == 401
        raw.get(dest="nope", timeout=-1)
        unknown = raw.ack()
        assert unknown.error_code == 400 and "destination:nope should start first" in unknown.error_message

        # packet types the server does not serve
        for ptype, name in ((cp.SHUTDOWN, "SHUTDOWN"), (cp.DUMP, "DUMP"), (cp.HEARTBEAT, "HEARTBEAT")):
            raw.send(ptype, raw_body=b"")
            got = raw.ack()
            assert (got.error_code, got.error_message) == (400, f"packet type={name} is NOT supported!")

        # rollback: no reply, also for a client that never subscribed
        raw.send(cp.CLIENTROLLBACK, cp.ClientRollback(destination="d1", client_id="1001", batch_id=0))
        raw.send(cp.CLIENTROLLBACK, cp.ClientRollback(destination="d1", client_id="2000", batch_id=0))
        assert raw.nothing_pending(0.5)
        raw.get(timeout=-1)
        assert raw.messages().batch_id == -1  # still usable after all those errors
    finally:
        raw.close()

    h = served.hooks
    assert {code for _, code in h.of("request_error")} >= {400, 401, 402}
    types = {t for _, t in h.of("packet_received")}
    assert types >= {"CLIENTAUTHENTICATION", "GET", "CLIENTACK", "CLIENTROLLBACK", "SUBSCRIPTION", "SHUTDOWN"}
    assert ("d1",) in h.of("empty_batch")
    assert sum(n for d, n in h.of("bytes_sent") if d == "d1") > 0
    assert any(d == "d1" and t == "GET" and s >= 0 for d, t, s in h.of("request_latency"))


def test_connector_reads_ack_error_at_next_request(served: Served, admin_conn: Any) -> None:
    conn = served.connector()
    conn.connect()
    try:
        conn.subscribe()
        _write(admin_conn, TABLE_A, 1, 6)
        a = conn.get_without_ack(3, 3, TimeUnit.SECONDS)
        b = conn.get_without_ack(3, 3, TimeUnit.SECONDS)
        assert a.batch_id > 0 and b.batch_id > a.batch_id
        conn.ack(b.batch_id)  # out of order: no reply yet
        with pytest.raises(CanalClientError) as err:
            conn.get_without_ack(3, -1)
        assert err.value.code == 400 and err.value.stale
        assert f"batchId:{b.batch_id} is not the firstly:{a.batch_id}" in err.value.message
        assert not conn.connected  # the stream was out of step: dropped
        conn.connect()  # rolls back: the same entries come again, byte for byte
        a2 = conn.get_without_ack(3, 3, TimeUnit.SECONDS)
        assert a2.raw_entries == a.raw_entries and a2.batch_id > b.batch_id
        conn.rollback()
        want = _select(admin_conn, TABLE_A)
        assert _drain(conn, TABLE_A, want) == want
    finally:
        conn.disconnect()


def test_rollback_regets_the_same_entries(served: Served, admin_conn: Any) -> None:
    conn = served.connector()
    conn.connect()
    try:
        conn.subscribe()
        _write(admin_conn, TABLE_A, 10, 8)
        a = conn.get_without_ack(4, 3, TimeUnit.SECONDS)
        b = conn.get_without_ack(4, 3, TimeUnit.SECONDS)
        assert not a.empty and not b.empty
        conn.rollback()  # everything outstanding
        a2 = conn.get_without_ack(4, 3, TimeUnit.SECONDS)
        b2 = conn.get_without_ack(4, 3, TimeUnit.SECONDS)
        assert (a2.raw_entries, b2.raw_entries) == (a.raw_entries, b.raw_entries)
        assert [e.SerializeToString() for e in a2.entries] == a2.raw_entries
        conn.rollback(a2.batch_id)  # that batch and the later ones
        a3 = conn.get_without_ack(4, 3, TimeUnit.SECONDS)
        assert a3.raw_entries == a.raw_entries
        conn.ack(a3.batch_id)
        state: dict[str, Any] = {}
        _apply(a3.entries, TABLE_A, state)
        b3 = conn.get_without_ack(4, 3, TimeUnit.SECONDS)
        assert b3.raw_entries == b.raw_entries  # after an ack, what follows it
        conn.rollback()
        want = _select(admin_conn, TABLE_A)
        assert _drain(conn, TABLE_A, want, state) == want and len(want) == 7
    finally:
        conn.disconnect()


def test_another_client_connecting_does_not_rewind(served: Served, admin_conn: Any) -> None:
    """Connectors (ours, Canal's, canal-python) roll back on connect, before they subscribe: for a client
    that is not subscribed that must be a no-op, not a rewind of the destination's store under the
    clients that are (Canal ignores it)."""
    with served.connector() as conn:
        conn.subscribe()
        _write(admin_conn, TABLE_A, 1, 6)
        a = conn.get_without_ack(3, 3, TimeUnit.SECONDS)
        assert not a.empty
        with served.connector(client_id="1500"):  # connect = rollback of 1500, never subscribed
            pass
        raw = Raw(served.addr)
        try:
            assert raw.auth().error_code == 0
            raw.send(cp.CLIENTROLLBACK, cp.ClientRollback(destination="d1", client_id="1600", batch_id=0))
            raw.get(dest="d1", client="1600", timeout=-1)  # makes sure the rollback was handled
            assert "should subscribe first" in raw.ack().error_message
        finally:
            raw.close()
        b = conn.get_without_ack(3, 3, TimeUnit.SECONDS)
        assert b.raw_entries != a.raw_entries and not set(b.raw_entries) & set(a.raw_entries)
        conn.ack(a.batch_id)
        conn.ack(b.batch_id)
        state: dict[str, Any] = {}
        _apply(a.entries + b.entries, TABLE_A, state)
        want = _select(admin_conn, TABLE_A)
        assert _drain(conn, TABLE_A, want, state) == want


def test_two_destinations_and_concurrent_clients(served: Served, admin_conn: Any) -> None:
    results: dict[str, Any] = {}
    want_b: dict[str, Any] = {}
    want_b_ready = threading.Event()

    def blocked_consumer() -> None:
        # d2: a blocking get while table B is still empty. 12 entries: only our writes can fill it (other
        # tables' empty transactions come as 2 entries at most every 5 s)
        with served.connector("d2") as c:
            c.subscribe()
            first = c.get_without_ack(12, 0)
            results["d2_returned_at"] = time.monotonic()
            state: dict[str, Any] = {}
            _apply(first.entries, TABLE_B, state)
            c.ack(first.batch_id)
            want_b_ready.wait(30)
            results["d2"] = _drain(c, TABLE_B, want_b, state)

    def churn(i: int) -> None:  # more clients at the same time: connect, get refused (not subscribed), go
        for _ in range(5):
            with served.connector("d1", client_id=str(3000 + i)) as c:
                with pytest.raises(CanalClientError, match="should subscribe first"):
                    c.get_without_ack(10)
        results[f"churn{i}"] = True

    own_conn = served.connector("d1")
    t2 = threading.Thread(target=blocked_consumer)
    t2.start()
    churners = [threading.Thread(target=churn, args=(i,)) for i in range(4)]
    for t in churners:
        t.start()
    try:
        own_conn.connect()
        own_conn.subscribe()
        _write(admin_conn, TABLE_A, 1, 5)
        want_a = _select(admin_conn, TABLE_A)
        assert _drain(own_conn, TABLE_A, want_a) == want_a and len(want_a) == 4
        for t in churners:
            t.join(30)
        assert all(results.get(f"churn{i}") for i in range(4))
        assert t2.is_alive() and "d2_returned_at" not in results  # still blocked, yet nobody else was
        written_at = time.monotonic()
        _write(admin_conn, TABLE_B, 100, 4)
        want_b.update(_select(admin_conn, TABLE_B))
        want_b_ready.set()
        t2.join(30)
        assert results["d2_returned_at"] >= written_at
        assert results["d2"] == want_b and len(want_b) == 3
    finally:
        want_b_ready.set()
        own_conn.disconnect()
        t2.join(1)


def test_idle_timeout_closes(served: Served) -> None:
    quick = served.connector(idle_timeout=1.0)  # sent as net_read_timeout = 1000 ms
    slow = served.connector()
    quick.connect()
    slow.connect()
    try:
        assert quick.check_valid() and slow.check_valid()
        time.sleep(2.5)
        assert not quick.check_valid()
        assert slow.check_valid()
        with pytest.raises(CanalConnectionError):
            quick.get_without_ack(1)
    finally:
        quick.disconnect()
        slow.disconnect()
    # a connection that never authenticates is dropped after the server's auth timeout (1.5 s here)
    raw = Raw(served.addr)
    try:
        t0 = time.monotonic()
        with pytest.raises(EOFError):
            raw.read(timeout=10)
        assert 1.0 <= time.monotonic() - t0 < 8
    finally:
        raw.close()


def test_cluster_connector_fails_over(served: Served, admin_conn: Any) -> None:
    second = CanalTcpServer(served.ctl.server, host="127.0.0.1", port=0, user=USER, passwd=stored_hash(PASSWORD))
    second.start()
    dead = ("127.0.0.1", _free_port())
    try:
        cluster = ClusterConnector([dead, served.addr, second.address], "d1", USER, PASSWORD, backoff=0.05)
        cluster.connect()
        assert cluster.address == served.addr  # the dead address was skipped
        cluster.subscribe()
        _write(admin_conn, TABLE_A, 1, 6)
        first = cluster.get_without_ack(3, 3, TimeUnit.SECONDS)
        assert not first.empty
        served.tcp.stop(timeout=2)  # the server goes away with a batch outstanding
        again = cluster.get_without_ack(3, 3, TimeUnit.SECONDS)
        assert cluster.address == second.address
        assert again.raw_entries == first.raw_entries  # rolled back on reconnect: nothing lost
        state: dict[str, Any] = {}
        _apply(again.entries, TABLE_A, state)
        cluster.ack(again.batch_id)
        want = _select(admin_conn, TABLE_A)
        assert _drain(cluster, TABLE_A, want, state) == want
        cluster.disconnect()

        # an address source is asked afresh on every round
        asked: list[int] = []

        def source() -> list[tuple[str, int]]:
            asked.append(1)
            return [dead] if len(asked) < 2 else [second.address]

        sourced = ClusterConnector(source, "d1", USER, PASSWORD, backoff=0.05)
        sourced.connect()
        assert sourced.address == second.address and len(asked) == 2
        assert sourced.check_valid()
        sourced.disconnect()

        # a server that does not run the destination (e.g. an HA standby): the next one is used
        standby = CanalTcpServer(CanalServerWithEmbedded(), host="127.0.0.1", port=0)
        standby.start()
        try:
            moving = ClusterConnector([standby.address, second.address], "d1", USER, PASSWORD, backoff=0.05)
            moving.connect()
            assert moving.address == standby.address
            moving.subscribe()  # "destination:d1 should start first" there
            assert moving.address == second.address
            assert moving.get_without_ack(10).batch_id != 0
            moving.disconnect()
        finally:
            standby.stop(timeout=2)

        nowhere = ClusterConnector([dead], "d1", USER, PASSWORD, retries=2, backoff=0.05)
        with pytest.raises(CanalConnectionError, match="after 2 rounds"):
            nowhere.connect()
        with pytest.raises(CanalAuthError):
            ClusterConnector([second.address], "d1", USER, "nope", backoff=0.05).connect()
    finally:
        second.stop(timeout=2)


def _controller_conf(tmp: Path, mysql_port: int, start: tuple[str, int], port: int, passwd: str) -> Path:
    return _conf(tmp, mysql_port, start, canal_extra=(
        f"canal.ip = 127.0.0.1\ncanal.port = {port}\ncanal.user = {USER}\ncanal.passwd = {passwd}\n"))


def test_controller_serves_canal_port(mariadb_settings: Any, admin_conn: Any, tables: Any, tmp_path: Path) -> None:
    start = _master_status(mariadb_settings)
    port = _free_port()
    conf = _controller_conf(tmp_path / "ok", mariadb_settings.port, start, port, stored_hash(PASSWORD))
    ctl = CanalController(conf, tcp=True)
    ctl.start()
    try:
        assert ctl.tcp_address == ("127.0.0.1", port)
        with SimpleConnector(("127.0.0.1", port), "d2", USER, PASSWORD) as conn:
            conn.subscribe()
            _write(admin_conn, TABLE_B, 1, 3)
            want = _select(admin_conn, TABLE_B)
            assert _drain(conn, TABLE_B, want) == want

        # a second server on the same canal.port: the start fails before any destination starts
        busy = CanalController(_controller_conf(tmp_path / "busy", mariadb_settings.port, start, port,
                                                stored_hash(PASSWORD)), tcp=True)
        with pytest.raises(OSError):
            busy.start()
        assert list(busy.server.destinations()) == []
        busy.stop()
    finally:
        ctl.stop()
    with pytest.raises(CanalConnectionError):
        SimpleConnector(("127.0.0.1", port), "d2", USER, PASSWORD, connect_timeout=2).connect()

    # canal.user without canal.passwd: a startup error naming canal.properties
    bad = _controller_conf(tmp_path / "bad", mariadb_settings.port, start, _free_port(), "")
    with pytest.raises(ConfigError, match=r"canal\.properties.*canal\.user = canal needs canal\.passwd"):
        CanalController(bad, tcp=True)



def test_cli_start_fails_on_a_busy_port(mariadb_settings: Any, admin_conn: Any, tables: Any,
                                        tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        conf = _controller_conf(tmp_path, mariadb_settings.port, _master_status(mariadb_settings), port,
                                stored_hash(PASSWORD))
        run = tmp_path / "logs"
        cli = Path(sys.executable).parent / "canal-server"
        started = subprocess.run([str(cli), "start", "--conf", str(conf), "--run-dir", str(run)],
                                 capture_output=True, text=True, timeout=60)
    assert started.returncode == 1 and "exited during start (code 1)" in started.stderr
    out = (run / "canal.out").read_text()
    assert f"cannot listen on 127.0.0.1:{port} (canal.ip / canal.port)" in out and "in use" in out
    assert not (run / "canal.pid").exists()
