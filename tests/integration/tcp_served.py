"""The TCP server tests' shared parts (test_tcp_server.py, test_tcp_server_failover.py): two MariaDB tables and
the rows written to them, what MariaDB itself returns for them, the server's configuration, a hook recorder, and a
raw client that speaks the wire protocol by hand (written from the format, not from our connector)."""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from canal_core.client import (
    ClusterConnector,
    SimpleConnector,
    TimeUnit,
)
from canal_core.protocol.auth import scramble
from canal_core.protocol.proto import CanalProtocol_pb2 as cp
from canal_core.protocol.proto import EntryProtocol_pb2 as ep
from canal_core.server.controller import CanalController
from canal_core.server.tcp import CanalTcpServer
from tests.support.conf import source, write_conf

USER = "canal"
PASSWORD = "tcp-secret"
TABLE_A = "tcpsrv_a"
TABLE_B = "tcpsrv_b"
COLUMNS = ("id", "name", "amount", "created", "note")


def write_rows(admin_conn: Any, table: str, first: int, n: int) -> None:
    """n single-row transactions, then an UPDATE and a DELETE (changes Canal must carry in order)."""
    with admin_conn.cursor() as cur:
        for i in range(first, first + n):
            created = f"2024-0{1 + i % 9}-1{i % 10} 10:2{i % 10}:0{i % 10}"
            cur.execute(f"INSERT INTO canal_test.{table} VALUES (%s, %s, %s, %s, %s)",
                        (i, f"név-{i} ✓", f"{i * 3}.{i % 100:02d}", created, None if i % 2 else f"n{i}"))
        cur.execute(f"UPDATE canal_test.{table} SET amount = amount + 1, note = 'upd' WHERE id = %s", (first,))
        if n > 1:
            cur.execute(f"DELETE FROM canal_test.{table} WHERE id = %s", (first + 1,))


def select_rows(admin_conn: Any, table: str) -> dict[str, dict[str, str | None]]:
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


def apply_entries(entries: list[ep.Entry], table: str, state: dict[str, dict[str, str | None]]) -> int:
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


def drain(conn: SimpleConnector | ClusterConnector, table: str, want: dict[str, Any],
           state: dict[str, dict[str, str | None]] | None = None, timeout: float = 30) -> dict[str, Any]:
    """get_without_ack + ack until the applied state equals ``want`` (or the time is up)."""
    state = {} if state is None else state
    deadline = time.monotonic() + timeout
    while state != want and time.monotonic() < deadline:
        msg = conn.get_without_ack(50, 300, TimeUnit.MILLISECONDS)
        apply_entries(msg.entries, table, state)
        conn.ack(msg.batch_id)
    return state


# ---- the server under test -------------------------------------------------------------------------


def server_conf(tmp: Path, mysql_port: int, start: tuple[str, int], *, canal_extra: str = "") -> Path:
    at = f"canal.instance.master.journal.name = {start[0]}\ncanal.instance.master.position = {start[1]}\n"
    return write_conf(tmp, "canal.destinations = d1,d2\n"
                      "canal.auto.scan = false\n"
                      f"canal.file.data.dir = {tmp / 'data'}\n"
                      "canal.file.flush.period = 100\n"
                      "canal.instance.memory.buffer.size = 1024\n"
                      "canal.instance.memory.batch.mode = ITEMSIZE\n" + canal_extra,
                      {dest: source(mysql_port, f"canal_test\\\\.{table}") + at
                       for dest, table in (("d1", TABLE_A), ("d2", TABLE_B))})


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

    @contextmanager
    def subscribed(self, dest: str = "d1") -> Iterator[SimpleConnector]:
        """A connector connected to ``dest`` and subscribed (the destination's filter); disconnected afterwards."""
        conn = self.connector(dest)
        conn.connect()
        try:
            conn.subscribe()
            yield conn
        finally:
            conn.disconnect()


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


def entries_of(msgs: cp.Messages) -> list[ep.Entry]:
    return [ep.Entry.FromString(b) for b in msgs.messages]


def ack_all(conn: SimpleConnector) -> None:
    """Take and ack whatever is stored (e.g. the empty transactions Canal lets through every 5 s for
    other tables' writes), so that the next blocking get waits for new entries only."""
    while not (msg := conn.get_without_ack(1000)).empty:
        conn.ack(msg.batch_id)


def controller_conf(tmp: Path, mysql_port: int, start: tuple[str, int], port: int, passwd: str) -> Path:
    return server_conf(tmp, mysql_port, start, canal_extra=(
        f"canal.ip = 127.0.0.1\ncanal.port = {port}\ncanal.user = {USER}\ncanal.passwd = {passwd}\n"))
