"""Canal's LocalBinlog mode: the private server's binlog directory read in index order, across
rotations, gives the same events as the replication stream; follow mode sees new writes."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from canal_core.binlog import BinlogDecoder, LocalBinlogReader
from canal_core.binlog import events as E
from canal_core.mysql import ReplicationConnection
from tests.integration.binlog_end import binlog_end
from tests.support.schema import scratch_table

pytestmark = pytest.mark.integration


def _scalar(conn: Any, sql: str) -> Any:
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchone()[0]


@pytest.fixture
def table(admin_conn: Any) -> Iterator[str]:
    with scratch_table(admin_conn, "canal_test.local_binlog",
                       "(id INT PRIMARY KEY, v VARCHAR(20), d DECIMAL(8,3))") as name:
        yield name


def _key(ev: E.Event) -> tuple[Any, ...]:
    rows = ev.rows if isinstance(ev, E.RowsEvent) else None
    return (ev.file, ev.position, ev.type_code, rows)


def test_directory_reader_equals_replication_stream(mariadb_settings: Any, admin_conn: Any, table: str) -> None:
    s = mariadb_settings
    datadir = Path(_scalar(admin_conn, "SELECT @@datadir"))
    with admin_conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        with ReplicationConnection(s.host, s.port, s.repl_user, s.repl_password) as rc:
            first, _, _ = rc.master_status()
        cur.execute(f"INSERT INTO {table} VALUES (1, 'a', 1.5), (2, 'b', -2.25)")
        cur.execute("FLUSH BINARY LOGS")
        cur.execute(f"UPDATE {table} SET v = 'c' WHERE id = 1")
        cur.execute("FLUSH BINARY LOGS")
        cur.execute(f"DELETE FROM {table} WHERE id = 2")
    with ReplicationConnection(s.host, s.port, s.repl_user, s.repl_password) as rc:
        dec = BinlogDecoder()
        stream = [dec.decode(raw) for raw in rc.dump(first, 4, non_blocking=True)]
    local = list(LocalBinlogReader(datadir, start_file=first))
    # artificial stream events (the fake ROTATE, a replayed FDE) have no position; compare the rest
    want = [_key(e) for e in stream if e.position is not None]
    got = [_key(e) for e in local if e.position is not None and e.file in {w[0] for w in want}]
    assert got == want
    files = [e.file for e in local if isinstance(e, E.RotateEvent)]
    assert len(files) >= 2  # crossed the two rotations we made
    rows = [r for e in local if isinstance(e, E.RowsEvent) and e.table.table == "local_binlog" for r in e.rows]
    assert rows[0][:2] == (1, "a") and rows[-1][:2] == (2, "b")


def test_follow_mode_sees_new_writes(mariadb_settings: Any, admin_conn: Any, table: str) -> None:
    datadir = Path(_scalar(admin_conn, "SELECT @@datadir"))
    with admin_conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
    file, pos = binlog_end(mariadb_settings.repl_kwargs())
    out: queue.Queue[E.Event] = queue.Queue()
    reader = LocalBinlogReader(datadir, start_file=file, start_position=pos, follow=True, poll_interval=0.05)

    def run() -> None:
        for ev in reader:
            out.put(ev)

    threading.Thread(target=run, daemon=True).start()
    time.sleep(0.2)
    with admin_conn.cursor() as cur:
        cur.execute(f"INSERT INTO {table} VALUES (42, 'tail', 0.001)")
        cur.execute("FLUSH BINARY LOGS")  # rotation while following
        cur.execute(f"INSERT INTO {table} VALUES (43, 'next file', 1)")
    seen: list[tuple[Any, ...]] = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and len(seen) < 2:
        try:
            ev = out.get(timeout=0.5)
        except queue.Empty:
            continue
        if isinstance(ev, E.RowsEvent) and ev.table.table == "local_binlog":
            seen += [r[:2] for r in ev.rows]
    assert seen == [(42, "tail"), (43, "next file")]
