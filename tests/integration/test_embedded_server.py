"""The embedded Canal server over a real instance (parser -> sink -> ring store, file-mixed meta) on the
private MariaDB: getWithoutAck several batches ahead, ordered acks, Canal's ack errors, byte-identical
rollback, and a restart that resumes from the acked cursor (at-least-once, in commit order)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from canal_core.entry.model import CanalEntry
from canal_core.instance.config import CanalConfig
from canal_core.instance.instance import CanalInstance
from canal_core.meta import BatchNotExistError, BatchOrderError
from canal_core.protocol.identity import ClientIdentity
from canal_core.server.embedded import CanalServerWithEmbedded
from tests.support.conf import source, write_conf
from tests.support.schema import scratch_table

pytestmark = pytest.mark.integration

ROWDATA = 2


def _conf(tmp: Path, port: int) -> Path:
    return write_conf(tmp, "canal.destinations = example\n"
                      f"canal.file.data.dir = {tmp / 'data'}\n"
                      "canal.file.flush.period = 100\n"
                      "canal.instance.memory.buffer.size = 1024\n"
                      "canal.instance.memory.batch.mode = ITEMSIZE\n",
                      {"example": source(port, "canal_test\\\\.inst_.*")})


def _instance(conf: Path) -> CanalInstance:
    canal = CanalConfig.load(conf)
    return CanalInstance.from_config(canal, canal.instance("example"))


@pytest.fixture
def table(admin_conn: Any) -> Iterator[str]:
    with scratch_table(admin_conn, "canal_test.inst_t", "(id INT PRIMARY KEY, v VARCHAR(20))"):
        yield "inst_t"


def _ids(msg_entries: list[bytes]) -> list[int]:
    out = []
    for raw in msg_entries:
        e = CanalEntry.from_bytes(raw).entry
        if e.entryType == ROWDATA:
            from canal_core.protocol.proto import EntryProtocol_pb2 as pb

            rc = pb.RowChange.FromString(e.storeValue)
            for rd in rc.rowDatas:
                cols = rd.afterColumns or rd.beforeColumns
                out.append(int(cols[0].value))
    return out


def _drain(server: CanalServerWithEmbedded, client: ClientIdentity, want: int, *, ahead: int = 3,
           timeout: float = 20) -> tuple[list[int], list[int]]:
    """Take up to ``ahead`` batches without ack, then ack them in order; until ``want`` ids are seen."""
    seen: list[int] = []
    acked: list[int] = []
    deadline = time.monotonic() + timeout
    while len(seen) < want and time.monotonic() < deadline:
        pending = []
        for _ in range(ahead):
            msg = server.get_without_ack(client, 3, 0.2)
            if msg.empty:
                break
            pending.append(msg.batch_id)
            seen += _ids(msg.raw_entries)
        for bid in pending:
            server.ack(client, bid)
            acked.append(bid)
    return seen, acked


def test_get_ack_rollback_and_restart(mariadb_settings: Any, admin_conn: Any, table: str, tmp_path: Path) -> None:
    conf = _conf(tmp_path, mariadb_settings.port)
    server = CanalServerWithEmbedded()
    inst = _instance(conf)
    server.start(inst)
    client = ClientIdentity("example", 1001, "")
    server.subscribe(client)
    try:
        time.sleep(0.7)  # the parser has located the current end
        with admin_conn.cursor() as cur:
            for i in range(1, 21):
                cur.execute("INSERT INTO canal_test.inst_t VALUES (%s, 'x')", (i,))
        seen, acked = _drain(server, client, 10)
        assert seen[:10] == list(range(1, 11)) and acked == list(range(1, len(acked) + 1))

        # out-of-order ack and unknown batch: Canal's errors, nothing changes
        a = server.get_without_ack(client, 3, 2)
        b = server.get_without_ack(client, 3, 2)
        assert not a.empty and not b.empty
        with pytest.raises(BatchOrderError) as order:
            server.ack(client, b.batch_id)
        assert str(order.value) == f"batchId:{b.batch_id} is not the firstly:{a.batch_id}"
        with pytest.raises(BatchNotExistError) as missing:
            server.ack(client, 999)
        assert "clientId:1001 batchId:999 is not exist" in str(missing.value)

        # rollback: the same entries again, byte-identical, in the same order
        server.rollback(client)
        a2 = server.get_without_ack(client, 3, 2)
        b2 = server.get_without_ack(client, 3, 2)
        assert a2.raw_entries == a.raw_entries and b2.raw_entries == b.raw_entries
        server.ack(client, a2.batch_id)  # ack one, leave b2 outstanding across the restart
        got_before_restart = seen + _ids(a2.raw_entries)
        # the counters behind Canal's metrics, read through the API
        deadline = time.monotonic() + 15  # the parser may still be finishing the last transactions
        while server.metrics("example")["canal_instance_transactions"] < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        m = server.metrics("example")
        assert m["canal_instance_subscriptions"] == 1
        assert m["canal_instance_transactions"] >= 20  # the 20 inserts, each its own transaction
        assert m["canal_instance_put_rows"] >= 20 and m["canal_instance_ack_rows"] >= len(set(got_before_restart))
        assert m["canal_instance_received_binlog_bytes"] > 0
        assert m["canal_instance_store_produce_seq"] >= m["canal_instance_store_consume_seq"] >= 0
        assert 0 <= m["canal_instance_traffic_delay"] < 60_000
    finally:
        server.stop_all()

    # restart: a new instance from the same conf resumes from the acked cursor (meta.dat)
    with admin_conn.cursor() as cur:
        for i in range(21, 26):
            cur.execute("INSERT INTO canal_test.inst_t VALUES (%s, 'y')", (i,))
    server = CanalServerWithEmbedded()
    server.start(_instance(conf))
    try:
        server.subscribe(client)
        after, _ = _drain(server, client, 25 - max(got_before_restart), timeout=30)
    finally:
        server.stop_all()
    everything = got_before_restart + after
    assert set(everything) >= set(range(1, 26)), sorted(set(range(1, 26)) - set(everything))
    # in commit order across the restart; redelivery only of what was not acked
    assert after == sorted(after)
    # resumed right after the acked cursor: the unacked batch (b2) comes again, nothing acked does
    assert after[0] == max(_ids(a2.raw_entries)) + 1, (after[:5], _ids(a2.raw_entries), _ids(b2.raw_entries))


def test_a_restart_before_any_ack_reads_from_the_first_start(mariadb_settings: Any, admin_conn: Any, table: str,
                                                             tmp_path: Path) -> None:
    """No client acked anything yet: the restarted parser starts where the destination first started reading,
    not at the binlog's end (Canal's fallback), so rows written before and while it was down all arrive."""
    conf = _conf(tmp_path, mariadb_settings.port)
    client = ClientIdentity("example", 1001, "")
    server = CanalServerWithEmbedded()
    server.start(_instance(conf))
    server.subscribe(client)
    try:
        time.sleep(0.7)  # the parser has located the current end: the destination's first start
        with admin_conn.cursor() as cur:
            for i in range(1, 6):
                cur.execute("INSERT INTO canal_test.inst_t VALUES (%s, 'x')", (i,))
        seen: list[int] = []
        deadline = time.monotonic() + 20
        while len(seen) < 5 and time.monotonic() < deadline:  # taken, never acked
            seen += _ids(server.get_without_ack(client, 3, 0.2).raw_entries)
        assert seen == [1, 2, 3, 4, 5]
    finally:
        server.stop_all()
    with admin_conn.cursor() as cur:  # written while it is down
        for i in range(6, 9):
            cur.execute("INSERT INTO canal_test.inst_t VALUES (%s, 'y')", (i,))
    server = CanalServerWithEmbedded()
    server.start(_instance(conf))
    try:
        server.subscribe(client)
        got, _ = _drain(server, client, 8, timeout=30)
    finally:
        server.stop_all()
    assert got == list(range(1, 9)), got


def test_stop_while_the_parser_waits_for_room_is_prompt_and_quiet(mariadb_settings: Any, admin_conn: Any, table: str,
                                                                   tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """No client reads: the parser fills the store (4 events) and waits in its put. Stopping the instance wakes
    that put at once (not after the parser's join timeout) and logs no error: a shutdown is not a failure."""
    conf = write_conf(tmp_path, "canal.destinations = example\n"
                      f"canal.file.data.dir = {tmp_path / 'data'}\n"
                      "canal.instance.memory.buffer.size = 4\n"
                      "canal.instance.memory.batch.mode = ITEMSIZE\n",
                      {"example": source(mariadb_settings.port, "canal_test\\\\.inst_.*")})
    inst = _instance(conf)
    inst.start()
    try:
        time.sleep(0.7)  # the parser has located the current end
        with admin_conn.cursor() as cur:
            for i in range(1, 21):
                cur.execute("INSERT INTO canal_test.inst_t VALUES (%s, 'x')", (i,))
        deadline = time.monotonic() + 15
        while inst.store.put_seq < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        full = inst.store.put_seq
        time.sleep(1)   # 20 transactions to deliver, room for one or two: the parser waits in its put
        assert 3 <= inst.store.put_seq == full <= 4 and inst.parser.running, (full, inst.parser.health)
    finally:
        caplog.clear()
        t0 = time.monotonic()
        inst.stop()
        took = time.monotonic() - t0
    assert took < 3, f"stop took {took:.1f} s"
    assert not inst.parser.running
    errors = [r for r in caplog.records if r.levelno >= 40]
    assert errors == [], [r.getMessage() for r in errors]
