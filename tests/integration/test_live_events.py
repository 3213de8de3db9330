"""MariaDB-specific events from the private server, each checked against what the server itself says:
GTID and GTID_LIST (against @@gtid_binlog_pos), ANNOTATE_ROWS (the statement we ran), compressed
query and rows events (log_bin_compress=ON), Q_HRNOW (against the NOW(6) value stored), and one
transaction larger than 16 MB (against the stored bytes)."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest

from canal_core.binlog import BinlogDecoder
from canal_core.binlog import events as E
from canal_core.binlog.constants import EventType
from canal_core.mysql import ReplicationConnection
from tests.support.schema import scratch_table

pytestmark = pytest.mark.integration


def _scalar(conn: Any, sql: str, args: Any = None) -> Any:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchone()[0]


def _events(s: Any, file: str, pos: int, **dec_kw: Any) -> Iterator[E.Event]:
    with ReplicationConnection(s.host, s.port, s.repl_user, s.repl_password) as rc:
        dec = BinlogDecoder(**dec_kw)
        for raw in rc.dump(file, pos, non_blocking=True):
            yield from dec.iter_events(dec.decode(raw))


def _position(s: Any) -> tuple[str, int]:
    with ReplicationConnection(s.host, s.port, s.repl_user, s.repl_password) as rc:
        f, p, _ = rc.master_status()
    return f, p


@pytest.fixture
def table(admin_conn: Any) -> Iterator[str]:
    with scratch_table(admin_conn, "canal_test.live_events", "(id INT PRIMARY KEY, note VARCHAR(2000), big LONGBLOB, "
                       "at DATETIME(6)) DEFAULT CHARSET=utf8mb4") as name:
        yield name


def test_gtid_list_and_gtid_events_match_the_server(mariadb_settings: Any, admin_conn: Any, table: str) -> None:
    before = _scalar(admin_conn, "SELECT @@gtid_binlog_pos")
    with admin_conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
    file, _ = _position(mariadb_settings)
    with admin_conn.cursor() as cur:
        cur.execute(f"INSERT INTO {table} (id, note) VALUES (1, 'gtid')")
    after = _scalar(admin_conn, "SELECT @@gtid_binlog_pos")
    evs = list(_events(mariadb_settings, file, 4))
    glist = [e for e in evs if isinstance(e, E.GtidListEvent)]
    assert glist and glist[0].file == file
    # the new file's GTID_LIST is the binlog state at the rotation; domain order is the server's
    assert sorted(glist[0].gtid_position.split(",")) == sorted(before.split(","))
    gtids = [e for e in evs if isinstance(e, E.MariaGtidEvent)]
    assert gtids[-1].gtid in after.split(",")
    assert not gtids[-1].standalone  # a DML transaction has BEGIN ... COMMIT/XID
    assert any(isinstance(e, E.BinlogCheckpointEvent) for e in evs)


def test_annotate_rows_carries_the_statement(mariadb_settings: Any, admin_conn: Any, table: str) -> None:
    file, pos = _position(mariadb_settings)
    stmt = f"INSERT INTO {table} (id, note) VALUES (2, 'annotated'), (3, 'rows')"
    with admin_conn.cursor() as cur:
        cur.execute(stmt)
    evs = list(_events(mariadb_settings, file, pos))
    ann = [e for e in evs if isinstance(e, E.AnnotateRowsEvent)]
    assert [a.query for a in ann] == [stmt]
    rows = [e for e in evs if isinstance(e, E.RowsEvent)]
    assert [r[:2] for r in rows[0].rows] == [(2, "annotated"), (3, "rows")]


@pytest.fixture
def compress(admin_conn: Any) -> Iterator[None]:
    old = _scalar(admin_conn, "SELECT @@global.log_bin_compress"), _scalar(
        admin_conn, "SELECT @@global.log_bin_compress_min_len")
    with admin_conn.cursor() as cur:
        cur.execute("SET GLOBAL log_bin_compress = ON, log_bin_compress_min_len = 10")
    try:
        yield
    finally:
        with admin_conn.cursor() as cur:
            cur.execute(f"SET GLOBAL log_bin_compress = {int(old[0])}, log_bin_compress_min_len = {int(old[1])}")


def test_compressed_query_and_rows_events(mariadb_settings: Any, admin_conn: Any, table: str,
                                          compress: None) -> None:
    # the session must be new for the global setting to apply
    conn = pymysql.connect(**mariadb_settings.admin_kwargs(autocommit=True))
    file, pos = _position(mariadb_settings)
    note = "compressible " * 100
    ddl = f"ALTER TABLE {table} COMMENT = '{'a long comment to compress ' * 10}'"
    try:
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO {table} (id, note) VALUES (%s, %s), (%s, %s)", (10, note, 11, note[::-1]))
            cur.execute(f"UPDATE {table} SET note = CONCAT(note, 'x') WHERE id IN (10, 11)")
            cur.execute(f"DELETE FROM {table} WHERE id = 11")
            cur.execute(ddl)
            cur.execute(f"SELECT id, note FROM {table} WHERE id = 10")
            stored = cur.fetchone()
    finally:
        conn.close()
    evs = list(_events(mariadb_settings, file, pos))
    codes = {e.type_code for e in evs}
    assert {EventType.WRITE_ROWS_COMPRESSED_V1, EventType.UPDATE_ROWS_COMPRESSED_V1,
            EventType.DELETE_ROWS_COMPRESSED_V1, EventType.QUERY_COMPRESSED} <= codes, sorted(codes)
    rows = {e.kind: e.rows for e in evs if isinstance(e, E.RowsEvent)}
    assert all(e.compressed for e in evs if isinstance(e, E.RowsEvent))
    assert [r[:2] for r in rows["write"]] == [(10, note), (11, note[::-1])]
    assert [(b[:2], a[:2]) for b, a in rows["update"]] == [((10, note), (10, note + "x")),
                                                           ((11, note[::-1]), (11, note[::-1] + "x"))]
    assert [r[:2] for r in rows["delete"]] == [(11, note[::-1] + "x")]
    assert rows["update"][0][1][:2] == stored
    queries = [e.query for e in evs if isinstance(e, E.QueryEvent) and e.compressed]
    assert ddl in queries


def test_q_hrnow_gives_the_statement_microseconds(mariadb_settings: Any, admin_conn: Any, table: str) -> None:
    file, pos = _position(mariadb_settings)
    with admin_conn.cursor() as cur:
        # statement logging keeps NOW(6) in the query, so its microseconds travel in Q_HRNOW
        cur.execute("SET SESSION binlog_format = 'STATEMENT', time_zone = '+00:00'")
        try:
            cur.execute(f"INSERT INTO {table} (id, at) VALUES (20, NOW(6))")
        finally:
            cur.execute("SET SESSION binlog_format = 'ROW'")
        cur.execute(f"SELECT at FROM {table} WHERE id = 20")
        stored: dt.datetime = cur.fetchone()[0]
    evs = [e for e in _events(mariadb_settings, file, pos)
           if isinstance(e, E.QueryEvent) and "NOW(6)" in e.query]
    assert len(evs) == 1
    ev = evs[0]
    assert "hrnow" in ev.status
    when = dt.datetime.fromtimestamp(ev.timestamp, dt.UTC).replace(tzinfo=None, microsecond=ev.status["hrnow"])
    assert when == stored


def test_transaction_larger_than_16_mb(mariadb_settings: Any, table: str) -> None:
    blobs = [os.urandom(9 * 1024 * 1024), os.urandom(12 * 1024 * 1024)]
    conn = pymysql.connect(**mariadb_settings.admin_kwargs(max_allowed_packet=1 << 30))
    file, pos = _position(mariadb_settings)
    try:
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            for i, b in enumerate(blobs):
                cur.execute(f"INSERT INTO {table} (id, big) VALUES (%s, %s)", (30 + i, b))
            cur.execute("COMMIT")
            cur.execute(f"SELECT id, MD5(big), LENGTH(big) FROM {table} WHERE id >= 30 ORDER BY id")
            server = cur.fetchall()
    finally:
        conn.close()
    evs = list(_events(mariadb_settings, file, pos))
    rows = [r for e in evs if isinstance(e, E.RowsEvent) for r in e.rows]
    got = tuple((r[0], hashlib.md5(r[2]).hexdigest(), len(r[2])) for r in rows)
    assert got == tuple(server)
    assert sum(len(b) for b in blobs) > 16 * 1024 * 1024
    # one transaction: one GTID, and the two rows events between it and the XID
    kinds = [type(e).__name__ for e in evs if not isinstance(e, E.TableMapEvent | E.AnnotateRowsEvent)]
    assert kinds.count("MariaGtidEvent") == 1 and kinds.count("XidEvent") == 1
