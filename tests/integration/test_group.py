"""A group destination over two private MariaDB servers orders transactions by
time without splitting any, and after a restart resumes each source from its own position."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from canal_core.entry.model import CanalEntry
from canal_core.instance.config import CanalConfig
from canal_core.instance.instance import CanalInstance, GroupCanalInstance
from canal_core.protocol.identity import ClientIdentity
from canal_core.protocol.proto import EntryProtocol_pb2 as pb
from canal_core.server.embedded import CanalServerWithEmbedded
from tests.support.conf import write_conf
from tests.support.instances import ensure_instance

pytestmark = pytest.mark.integration

BEGIN, ROWDATA, END = 1, 2, 3


@pytest.fixture
def second_port() -> int:
    return ensure_instance("secondary")  # this worker's secondary private MariaDB, started when not running


def _admin(port: int) -> pymysql.connections.Connection:
    return pymysql.connect(host="127.0.0.1", port=port, user="canal_admin", password="canal_admin", autocommit=True)


@pytest.fixture
def tables(mariadb_settings: Any, second_port: int) -> Iterator[tuple[int, int]]:
    ports = (mariadb_settings.port, second_port)
    for port in ports:
        with _admin(port) as a, a.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS canal_test.grp_t")
            cur.execute("CREATE TABLE canal_test.grp_t (id INT PRIMARY KEY, src VARCHAR(4))")
    yield ports
    for port in ports:
        with _admin(port) as a, a.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS canal_test.grp_t")


def _conf(tmp: Path, a: int, b: int) -> Path:
    return write_conf(tmp, "canal.destinations = example\ncanal.auto.scan = false\n"
                      f"canal.file.data.dir = {tmp / 'data'}\ncanal.file.flush.period = 0\n"
                      "canal.instance.example.spring.xml = classpath:spring/group-instance.xml\n",
                      {"example": f"canal.instance.master1.address = 127.0.0.1:{a}\n"
                                  f"canal.instance.master2.address = 127.0.0.1:{b}\n"
                                  "canal.instance.dbUsername = canal\ncanal.instance.dbPassword = canal\n"
                                  "canal.instance.filter.regex = canal_test\\\\.grp_.*\n"})


def _start(conf: Path) -> tuple[CanalServerWithEmbedded, Any]:
    canal = CanalConfig.load(conf)
    inst = CanalInstance.from_config(canal, canal.instance("example"))
    assert isinstance(inst, GroupCanalInstance)
    server = CanalServerWithEmbedded()
    server.start(inst)
    return server, inst


def _consume(server: CanalServerWithEmbedded, client: ClientIdentity, want: int, timeout: float = 40) -> list[Any]:
    """Entries as (type, server id, execute time, ids) until ``want`` rows; each batch acked."""
    out: list[Any] = []
    rows = 0
    deadline = time.monotonic() + timeout
    while rows < want and time.monotonic() < deadline:
        msg = server.get_without_ack(client, 16, 0.3)
        if msg.empty:
            continue
        for raw in msg.raw_entries:
            e = CanalEntry.from_bytes(raw).entry
            ids = []
            if e.entryType == ROWDATA:
                ids = [int(rd.afterColumns[0].value) for rd in pb.RowChange.FromString(e.storeValue).rowDatas]
                rows += len(ids)
            out.append((e.entryType, e.header.serverId, e.header.executeTime, ids))
        server.ack(client, msg.batch_id)
    return out


def _write(port: int, ids: list[int], src: str) -> None:
    with _admin(port) as a, a.cursor() as cur:
        cur.execute("BEGIN")
        for i in ids:
            cur.execute("INSERT INTO canal_test.grp_t VALUES (%s, %s)", (i, src))
        cur.execute("COMMIT")


def test_group_merges_by_time_and_resumes_each_source(tables: tuple[int, int], tmp_path: Path) -> None:
    a, b = tables
    conf = _conf(tmp_path, a, b)
    client = ClientIdentity("example", 1001, "")
    server, _inst = _start(conf)
    try:
        server.subscribe(client)
        time.sleep(1.0)
        # alternate transactions between the two servers, a second apart (executeTime has ms = s x 1000)
        plan = [(a, [1, 2], "a"), (b, [101, 102, 103], "b"), (a, [3], "a"), (b, [104, 105], "b"), (a, [4, 5, 6], "a")]
        for port, ids, src in plan:
            _write(port, ids, src)
            time.sleep(1.05)
        got = _consume(server, client, 11)
    finally:
        server.stop_all()
    txns = []  # (server id, execute time, ids) per BEGIN..END, checking nothing interleaves
    open_txn: list[Any] | None = None
    for etype, sid, ts, ids in got:
        if etype == BEGIN:
            assert open_txn is None, "a transaction began inside another one"
            open_txn = [sid, ts, []]
        elif etype == ROWDATA:
            assert open_txn is not None and open_txn[0] == sid, "rows of another source inside a transaction"
            open_txn[2] += ids
        elif etype == END:
            assert open_txn is not None and open_txn[0] == sid
            txns.append(tuple(open_txn))
            open_txn = None
    assert [t[2] for t in txns] == [ids for _, ids, _ in plan]  # by time, each whole
    assert [t[1] for t in txns] == sorted(t[1] for t in txns)
    positions = (tmp_path / "data" / "example" / "group-positions.json").read_text()
    assert '"1"' in positions and '"2"' in positions

    # restart: each source resumes from its own acked position (nothing again, the new rows only)
    _write(b, [106], "b")
    time.sleep(1.05)
    _write(a, [7], "a")
    server, _inst = _start(conf)
    try:
        server.subscribe(client)
        again = _consume(server, client, 2)
    finally:
        server.stop_all()
    ids = [i for _, _, _, row_ids in again for i in row_ids]
    assert ids == [106, 7], ids
