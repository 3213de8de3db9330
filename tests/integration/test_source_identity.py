"""Another server built alike takes over the source's address: refused, nothing delivered, and the right server
resumes where it left off.

Every private MariaDB has server_id 1 and binlogs named mysql-bin.000001, ...; a restart under CI can move one to
another port and leave a different one at the address a destination reads. Here instance B is written first
with the same statements as A will be (so the binlog offsets of A's stored positions exist on B, and hold B's
events of other seconds), then a destination reads A and its client acks A's rows. A stops, B starts on A's port:

- the running parser, reconnecting, refuses B with SourceMismatchError (health: retrying, source-mismatch),
- a destination restarted from the acked cursor refuses B as well,
- and neither delivers one entry from B. Then A (with rows written meanwhile on another port) is back on its
  port: the parser resumes and delivers exactly those rows.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pymysql
import pytest

from canal_core.entry.model import CanalEntry
from canal_core.instance.config import CanalConfig
from canal_core.instance.instance import CanalInstance
from canal_core.parse.health import ErrorKind, ParserState
from canal_core.parse.identity import SourceMismatchError
from canal_core.protocol.identity import ClientIdentity
from canal_core.protocol.proto import EntryProtocol_pb2 as pb
from canal_core.server.embedded import CanalServerWithEmbedded

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MARIADB = str(ROOT / "scripts" / "mariadb.sh")
A, B = "ident_a", "ident_b"
# the address both take in turn, where B is written first, where A takes rows while B holds the address
PORT, PREPARE_PORT, ASIDE_PORT = 3439, 3440, 3441
DEST = "ident"
ROWDATA = 2
CLIENT = ClientIdentity(DEST, 1001, "")


def _port(preferred: int) -> int:
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", preferred)) != 0:
            return preferred
    with socket.socket() as s:  # taken by something else: any free port
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _mariadb(command: str, name: str, port: int | None = None) -> None:
    env = {**os.environ, "MARIADB_SERVER_ID": "1"}
    if port is not None:
        env["MARIADB_PORT"] = str(port)
    out = subprocess.run([MARIADB, command, name], capture_output=True, text=True, env=env, timeout=180)
    if out.returncode != 0:
        pytest.fail(f"scripts/mariadb.sh {command} {name} failed: {out.stderr[-2000:]}", pytrace=False)


def _remove(name: str) -> None:
    subprocess.run([MARIADB, "stop", name], capture_output=True, timeout=180)
    shutil.rmtree(ROOT / ".runtime" / "mariadb" / name, ignore_errors=True)


@pytest.fixture
def ports() -> Iterator[tuple[int, int, int]]:
    """Fresh instances A and B (created here, removed at the end) and the three ports."""
    for name in (A, B):
        _remove(name)  # left by an interrupted run of this test
    port = _port(PORT)
    prepare = _port(PREPARE_PORT if PREPARE_PORT != port else port + 1)
    aside = _port(ASIDE_PORT if ASIDE_PORT not in (port, prepare) else prepare + 1)
    try:
        yield port, prepare, aside
    finally:
        for name in (A, B):
            _remove(name)


def _write(port: int, src: str, ids: range, *, ddl: bool = False) -> None:
    conn = pymysql.connect(host="127.0.0.1", port=port, user="canal_admin", password="canal_admin", autocommit=True)
    try:
        with conn.cursor() as cur:
            if ddl:
                cur.execute("CREATE DATABASE ident")
                cur.execute("CREATE TABLE ident.t (id INT PRIMARY KEY, src CHAR(1) NOT NULL, n INT NOT NULL)")
            for i in ids:  # the same statement lengths on A and B: the same binlog offsets
                cur.execute(f"INSERT INTO ident.t VALUES ({i}, '{src}', {i})")
    finally:
        conn.close()


def _instance(tmp: Path, port: int) -> CanalInstance:
    conf = tmp / "conf"
    if not conf.exists():
        (conf / DEST).mkdir(parents=True)
        (conf / "canal.properties").write_text(
            f"canal.destinations = {DEST}\n"
            f"canal.file.data.dir = {tmp / 'data'}\n"
            "canal.file.flush.period = 0\n")  # each ack is on disk before it returns
        (conf / DEST / "instance.properties").write_text(
            f"canal.instance.master.address = 127.0.0.1:{port}\n"
            "canal.instance.dbUsername = canal\n"
            "canal.instance.dbPassword = canal\n"
            "canal.instance.filter.regex = ident\\\\..*\n")
    canal = CanalConfig.load(conf)
    inst = CanalInstance.from_config(canal, canal.instance(DEST))
    assert isinstance(inst, CanalInstance)
    inst.parser.config.reconnect_min, inst.parser.config.reconnect_max = 0.2, 1.0  # a test's patience
    return inst


def _rows(entries: list[bytes]) -> list[tuple[int, str]]:
    out = []
    for raw in entries:
        e = CanalEntry.from_bytes(raw).entry
        if e.entryType == ROWDATA:
            for rd in pb.RowChange.FromString(e.storeValue).rowDatas:
                cols = {c.name: c.value for c in rd.afterColumns}
                out.append((int(cols["id"]), cols["src"]))
    return out


def _take(server: CanalServerWithEmbedded, want: int, timeout: float = 60) -> list[tuple[int, str]]:
    """get + ack until ``want`` rows came (then a little longer, to see that nothing more comes)."""
    rows: list[tuple[int, str]] = []
    deadline = time.monotonic() + timeout
    quiet_until = None
    while time.monotonic() < deadline:
        msg = server.get_without_ack(CLIENT, 100, 0.2)
        if not msg.empty:
            rows += _rows(msg.raw_entries)
            server.ack(CLIENT, msg.batch_id)
        if len(rows) >= want:
            quiet_until = quiet_until or time.monotonic() + 2.0
            if time.monotonic() >= quiet_until:
                return rows
    raise AssertionError(f"timed out with {rows}")


def _wait(what: str, cond: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _refused(inst: CanalInstance, server: CanalServerWithEmbedded, port: int, seconds: float) -> SourceMismatchError:
    """Wait for the refusal, then watch ``seconds`` more: still refused, nothing delivered."""
    parser = inst.parser

    def refused() -> bool:
        err = parser.health.error
        return err is not None and err.kind is ErrorKind.SOURCE_MISMATCH

    def nothing_delivered() -> None:
        msg = server.get_without_ack(CLIENT, 100, 0.2)
        assert msg.empty, f"delivered from the other server: {_rows(msg.raw_entries)}"

    deadline = time.monotonic() + 60
    while not refused():
        assert time.monotonic() < deadline, "timed out waiting for the parser to refuse the other server"
        nothing_delivered()
    entries = parser.entries
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        nothing_delivered()
    h = parser.health
    assert h.state is ParserState.RETRYING and refused() and parser.running
    assert parser.entries == entries
    assert h.error is not None and h.error.failures >= 2  # refused at every retry, not once
    err = h.error.error
    assert isinstance(err, SourceMismatchError) and err is parser.last_error
    assert err.server == f"127.0.0.1:{port}" and err.file == "mysql-bin.000001"
    assert "found server id 1," in str(err) and "by server 1" in err.expected
    return err


def test_another_server_at_the_address_is_refused_and_the_right_one_resumes(ports: tuple[int, int, int],
                                                                           tmp_path: Path) -> None:
    port, prepare, aside = ports
    # B first, on a port of its own: the statements A will get, and more (its binlog reaches past A's positions)
    _mariadb("start", B, prepare)
    _write(prepare, "b", range(1, 31), ddl=True)
    _mariadb("stop", B)
    time.sleep(1.1)  # A's events get other seconds than B's

    _mariadb("start", A, port)
    _write(port, "a", range(0), ddl=True)
    server = CanalServerWithEmbedded()
    inst = _instance(tmp_path, port)
    server.start(inst)
    try:
        server.subscribe(CLIENT)
        _wait("the first dump", lambda: inst.parser.health.state is ParserState.STREAMING)
        _write(port, "a", range(1, 11))
        assert _take(server, 10) == [(i, "a") for i in range(1, 11)]
        stored = inst.parser.positions.get_latest(DEST)
        assert stored is not None and stored.position.journal_name == "mysql-bin.000001"

        # the address changes hands: the running parser reconnects and is refused (it knows its last event)
        _mariadb("stop", A)
        _mariadb("start", B, port)
        err = _refused(inst, server, port, 3.0)
        assert err.position == stored.position.position
        assert "the event it was recorded from" in err.expected
    finally:
        server.stop_all()

    # a restart resumes from the acked cursor (the start of row 10's XID): refused as well
    server = CanalServerWithEmbedded()
    inst = _instance(tmp_path, port)
    server.start(inst)
    try:
        server.subscribe(CLIENT)
        err = _refused(inst, server, port, 3.0)
        assert err.position < stored.position.position  # the cursor: the XID's start, not its end
        assert "starting there a" in err.found and "XID event" in err.found

        # A takes rows elsewhere while B holds the address, then comes back to it
        _mariadb("stop", B)
        _mariadb("start", A, aside)
        _write(aside, "a", range(11, 16))
        _mariadb("stop", A)
        _mariadb("start", A, port)
        assert _take(server, 5) == [(i, "a") for i in range(11, 16)]  # exactly the rest: nothing of B's
        h = inst.parser.health
        assert h.state is ParserState.STREAMING and h.error is None and inst.parser.last_error is None
        assert h.last_error is not None and h.last_error.cleared_at is not None
    finally:
        server.stop_all()
