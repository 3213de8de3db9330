"""A blocking GET against a real canal-server process: with the default store an honest client that blocks
(Canal's get_without_ack(1000, 0)) gets every transaction however many are queued, and a blocked GET holds
nothing other clients of its destination need and ends when its connection goes away."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pymysql
import pytest

from canal_core.client import SimpleConnector
from canal_core.protocol.proto import CanalProtocol_pb2 as cp
from canal_core.protocol.proto import EntryProtocol_pb2 as ep
from tests.integration.server_process import PASSWORD, USER, RawClient, start_server, wait, write_conf
from tests.support.schema import scratch_table

pytestmark = pytest.mark.integration

# a short table name and one INT column: entries of ~60 bytes, so that the 16,384 slots of the default store
# hold less than the 1,000 x 1,024 bytes a get_without_ack(1000, 0) waits for
TABLE = "hs_q"
FILTER = "canal.instance.filter.regex = canal_test\\\\.hs_q\n"


@pytest.fixture
def table(admin_conn: Any) -> Any:
    with scratch_table(admin_conn, f"canal_test.{TABLE}", "(id INT PRIMARY KEY)"):
        yield TABLE


def row_ids(entries: list[ep.Entry]) -> list[int]:
    out = []
    for e in entries:
        if e.entryType == ep.ROWDATA and e.header.tableName == TABLE:
            for rd in ep.RowChange.FromString(e.storeValue).rowDatas:
                out.append(int(rd.afterColumns[0].value))
    return out


def test_blocking_get_with_the_default_store_gets_every_transaction(mariadb_settings: Any, table: str,
                                                                     tmp_path: Path) -> None:
    """Canal's streaming use: the client asks for the next batch before acking the one it holds (as Canal's
    examples and test_kill9's consumer do), every GET blocking. 5,461 single-row transactions fill all but one
    of the default store's 16,384 slots, and the parser then waits for room for a whole transaction (3
    entries) while the GET waits for 1,000 x 1,024 bytes (the store holds less: the client holds ~1 MB)."""
    n = 5_500  # 16,500 entries
    conf = write_conf(tmp_path, mariadb_settings.port, {"example": FILTER})  # the default store settings
    server = start_server(conf, tmp_path / "logs")
    got: list[int] = []
    failed: list[Exception] = []
    conn = SimpleConnector(server.address, "example", USER, PASSWORD)
    try:
        conn.connect()
        conn.subscribe()

        def consume() -> None:
            try:
                held = None
                while len(got) < n:
                    msg = conn.get_without_ack(1000, 0)  # blocking: 1,000 x memunit bytes, or a full store
                    got.extend(row_ids(msg.entries))
                    if held is not None:
                        conn.ack(held.batch_id)
                    held = msg
                conn.ack(held.batch_id)
            except Exception as e:  # e.g. the connection closed by the test after a failure
                failed.append(e)

        consumer = threading.Thread(target=consume, daemon=True)
        consumer.start()
        writer = pymysql.connect(**mariadb_settings.admin_kwargs())
        try:
            with writer.cursor() as cur:
                for i in range(1, n + 1):
                    cur.execute(f"INSERT INTO canal_test.{TABLE} VALUES (%s)", (i,))
                # the last rows wait for the next megabyte (Canal's rule for a blocking get): keep writing
                extra = n
                deadline = time.monotonic() + 120
                while consumer.is_alive() and time.monotonic() < deadline:
                    for _ in range(200):
                        extra += 1
                        cur.execute(f"INSERT INTO canal_test.{TABLE} VALUES (%s)", (extra,))
                    consumer.join(0.2)
        finally:
            writer.close()
        assert not consumer.is_alive(), f"the blocking client is stuck after {len(got)} of {n} rows"
        assert not failed
        assert got[:n] == list(range(1, n + 1))
    finally:
        conn.disconnect()
        server.stop()


def test_a_blocked_get_holds_nothing_and_ends_with_its_connection(mariadb_settings: Any, admin_conn: Any,
                                                                  table: str, tmp_path: Path) -> None:
    conf = write_conf(tmp_path, mariadb_settings.port, {"example": FILTER})
    server = start_server(conf, tmp_path / "logs")
    blocked = RawClient(server.address)
    try:
        assert blocked.auth(destination="example", client_id="1001").error_code == 0
        # no timeout field: blocks until 1,000 x 1,024 bytes are there, which this test never writes
        blocked.send_packet(cp.GET, cp.Get(destination="example", client_id="1001", fetch_size=1000)
                            .SerializeToString())
        time.sleep(0.5)
        # another client of the same destination: subscribe, try-get, a timed get, ack, rollback all answered
        with SimpleConnector(server.address, "example", USER, PASSWORD, so_timeout=5) as other:
            t0 = time.monotonic()
            other.subscribe()
            assert other.get_without_ack(10).empty
            with admin_conn.cursor() as cur:
                cur.execute(f"INSERT INTO canal_test.{TABLE} VALUES (1)")
            ids: list[int] = []
            while not ids and time.monotonic() - t0 < 20:
                msg = other.get_without_ack(100, 500)
                ids += row_ids(msg.entries)
                other.ack(msg.batch_id)
            other.rollback()
            assert ids == [1]
            assert time.monotonic() - t0 < 20
        assert server.connections() is not None
        wait(lambda: server.connections() == 1, 10, "the blocked connection alone")
        # the blocked client goes away: its GET stops waiting and its session ends
        blocked.close()
        wait(lambda: server.connections() == 0, 15, "the blocked GET's session to end")
        assert server.alive()
    finally:
        blocked.close()
        server.stop()
