"""ReplicationConnection against the private MariaDB (fails, never skips, when it is unreachable).

Other suites share the server, so assertions only rely on what this file wrote or on invariants that
concurrent writers cannot break; every user and table created here is dropped again.
"""

from __future__ import annotations

import os
import struct
import threading
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from canal_core.binlog.gtid import MariaGtidPosition, MySQLGtidSet
from canal_core.mysql import (
    BinlogPositionError,
    ConnectionLostError,
    MissingPrivilegeError,
    ReplicationAuthError,
    ReplicationConnection,
    ReplicationTLSError,
)
from canal_core.mysql import protocol as proto
from tests.support.instances import instance_name

STOP, ROTATE, FDE, HEARTBEAT, MARIA_GTID = 3, 4, 15, 27, 162
ROWS_EVENTS = {23, 30}  # WRITE_ROWS v1 (MariaDB default) / v2
ARTIFICIAL = 0x20


def _sid() -> int:
    # Replicas with equal server ids kill each other's dump; other suites may dump concurrently.
    return 0x40000000 | (uuid.uuid4().int & 0x3FFFFFFF)


def _repl(settings: Any, **kw: Any) -> ReplicationConnection:
    kw.setdefault("server_id", _sid())
    user = kw.pop("user", settings.repl_user)
    password = kw.pop("password", settings.repl_password)
    return ReplicationConnection(settings.host, settings.port, user, password, **kw)


def _hdr(ev: bytes) -> tuple[int, int, int, int, int]:
    """(timestamp, type, server_id, length, log_pos) of an event header."""
    ts, typ, sid, length, log_pos = struct.unpack_from("<IBIII", ev)
    return ts, typ, sid, length, log_pos


def _crc_ok(ev: bytes) -> bool:
    return zlib.crc32(ev[:-4]) == struct.unpack_from("<I", ev, len(ev) - 4)[0]


def _scalar(conn: pymysql.connections.Connection, sql: str, args: Any = None) -> Any:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        row = cur.fetchone()
    return row[0] if row else None


def _exec(conn: pymysql.connections.Connection, *sqls: str) -> None:
    with conn.cursor() as cur:
        for sql in sqls:
            cur.execute(sql)


@pytest.fixture
def table(admin_conn: pymysql.connections.Connection) -> Iterator[str]:
    """A fresh table canal_test.<name>, dropped afterwards."""
    name = f"t_conn_{uuid.uuid4().hex[:10]}"
    _exec(admin_conn, f"CREATE TABLE canal_test.{name} (id INT PRIMARY KEY, v VARCHAR(64), b LONGBLOB)")
    try:
        yield f"canal_test.{name}"
    finally:
        _exec(admin_conn, f"DROP TABLE IF EXISTS canal_test.{name}")


@pytest.fixture
def temp_user(admin_conn: pymysql.connections.Connection) -> Iterator[Any]:
    """make(auth_sql, grants) -> user name; users are created/dropped outside the binlog."""
    made: list[str] = []

    def make(auth: str, grants: str | None) -> str:
        name = f"canal_t_{uuid.uuid4().hex[:8]}"
        _exec(admin_conn, "SET SESSION sql_log_bin=0",
              f"CREATE USER '{name}'@'127.0.0.1' {auth}")
        made.append(name)
        if grants:
            _exec(admin_conn, f"GRANT {grants} ON *.* TO '{name}'@'127.0.0.1'")
        return name

    try:
        yield make
    finally:
        for name in made:
            _exec(admin_conn, "SET SESSION sql_log_bin=0", f"DROP USER IF EXISTS '{name}'@'127.0.0.1'")


def test_server_info_and_check_ready(mariadb_settings: Any) -> None:
    with _repl(mariadb_settings).connect() as conn:
        info = conn.check_ready()
        assert info.flavor == "mariadb" and info.is_mariadb
        assert info.version >= (10, 11, 0) and info.version_string.startswith("10.11")
        assert info.server_id == 1
        assert info.log_bin is True
        assert (info.binlog_format, info.binlog_row_image, info.binlog_checksum) == ("ROW", "FULL", "CRC32")
        assert info.server_uuid is None and info.gtid_mode is None
        assert info.gtid_current_pos is not None
        MariaGtidPosition(info.gtid_binlog_pos or "")  # parses
        assert conn.account() == "'canal'@'127.0.0.1'"


def test_master_status_and_binary_logs(mariadb_settings: Any, admin_conn: Any, table: str) -> None:
    with _repl(mariadb_settings).connect() as conn:
        logs = conn.binary_logs()
        assert logs and all(name.startswith("mysql-bin.") and size >= 4 for name, size in logs)
        file, pos, _ = conn.master_status()
        _exec(admin_conn, f"INSERT INTO {table} (id, v) VALUES (1, 'x')")
        file2, pos2, gtid2 = conn.master_status()
        assert file in {n for n, _ in conn.binary_logs()}
        assert (file2, pos2) > (file, pos)
        # Our insert is in the binlog, so the position names at least one domain.
        assert MariaGtidPosition(gtid2).get(0) is not None


def test_non_blocking_dump_equals_binlog_file(mariadb_settings: Any, admin_conn: Any) -> None:
    datadir = Path(_scalar(admin_conn, "SELECT @@datadir"))
    with _repl(mariadb_settings).connect() as conn:
        first = conn.binary_logs()[0][0]
        events: list[bytes] = []
        stream = conn.dump(first, 4, non_blocking=True)
        for ev in stream:
            events.append(ev)
            if len(events) > 1 and _hdr(ev)[1] in (ROTATE, STOP):
                break  # the end of the first file: ROTATE, or STOP after a clean server shutdown
            if len(events) >= 20000:
                break  # a huge first file: a prefix is proof enough
        stream.close()
    disk = (datadir / first).read_bytes()
    assert disk[:4] == b"\xfebin"
    # The stream opens with an artificial ROTATE naming the requested file and position.
    _, typ, _, _, log_pos = _hdr(events[0])
    assert typ == ROTATE and log_pos == 0 and struct.unpack_from("<H", events[0], 17)[0] & ARTIFICIAL
    assert proto.parse_rotate(events[0], 4) == (first, 4)
    assert _hdr(events[1])[1] == FDE
    offset = 4
    for ev in events[1:]:
        _, typ, _, length, log_pos = _hdr(ev)
        assert length == len(ev)
        on_disk = disk[offset:offset + length]
        if typ == FDE and on_disk[17] & 1:
            # The active file's FDE carries LOG_EVENT_BINLOG_IN_USE_F on disk; the server clears it
            # when sending (its CRC was computed without it).
            on_disk = on_disk[:17] + bytes((on_disk[17] & ~1,)) + on_disk[18:]
        assert ev == on_disk, f"event at {first}:{offset} differs from the file"
        assert _crc_ok(ev)
        offset += length
        assert log_pos == offset
    assert offset > 4


def test_twenty_megabyte_row_is_reassembled(mariadb_settings: Any, table: str) -> None:
    blob = os.urandom(20 * 1024 * 1024)
    big_admin = pymysql.connect(**mariadb_settings.admin_kwargs(max_allowed_packet=1 << 30))
    with _repl(mariadb_settings).connect() as conn:
        file, pos, _ = conn.master_status()
        try:
            with big_admin.cursor() as cur:
                cur.execute(f"INSERT INTO {table} (id, v, b) VALUES (7, 'big', %s)", (blob,))
        finally:
            big_admin.close()
        found = None
        for ev in conn.dump(file, pos, non_blocking=True):
            if _hdr(ev)[1] in ROWS_EVENTS and len(ev) > len(blob):
                found = ev
                break
    assert found is not None, "no rows event carrying the 20 MB value"
    assert len(found) > proto.MAX_PACKET_LEN
    assert _hdr(found)[3] == len(found)
    assert blob in found
    assert _crc_ok(found)


def test_unknown_binlog_file_raises_position_error(mariadb_settings: Any) -> None:
    with _repl(mariadb_settings).connect() as conn:
        oldest = conn.binary_logs()[0][0]
        with pytest.raises(BinlogPositionError) as ei:
            list(conn.dump("mysql-bin.999999", 4, non_blocking=True))
    err = ei.value
    assert err.code == 1236
    assert (err.file, err.position) == ("mysql-bin.999999", 4)
    assert err.oldest_file == oldest
    assert oldest in str(err) and "mysql-bin.999999:4" in str(err)
    assert "\n" not in str(err)


def test_missing_replication_slave_privilege(mariadb_settings: Any, temp_user: Any) -> None:
    name = temp_user("IDENTIFIED BY 'pw'", "SELECT, REPLICATION CLIENT")
    want = f"GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{name}'@'127.0.0.1'"
    with _repl(mariadb_settings, user=name, password="pw").connect() as conn:
        with pytest.raises(MissingPrivilegeError) as ei:
            conn.check_ready()
        assert ei.value.privilege == "REPLICATION SLAVE"
        assert ei.value.grant == want and want in str(ei.value)
        with pytest.raises(MissingPrivilegeError):
            conn.dump("", 4, non_blocking=True)


def test_missing_replication_client_privilege(mariadb_settings: Any, temp_user: Any) -> None:
    name = temp_user("IDENTIFIED BY 'pw'", "SELECT, REPLICATION SLAVE")
    with _repl(mariadb_settings, user=name, password="pw").connect() as conn:
        with pytest.raises(MissingPrivilegeError) as ei:
            conn.check_ready()
    assert ei.value.privilege == "REPLICATION CLIENT"
    assert f"TO '{name}'@'127.0.0.1'" in str(ei.value)


def test_wrong_password_is_auth_error(mariadb_settings: Any) -> None:
    with pytest.raises(ReplicationAuthError) as ei:
        _repl(mariadb_settings, password="not-the-password").connect()
    assert ei.value.code == 1045


def test_ed25519_user_authenticates_and_dumps(mariadb_settings: Any, temp_user: Any) -> None:
    name = temp_user("IDENTIFIED VIA ed25519 USING PASSWORD('x')",
                     "SELECT, REPLICATION SLAVE, REPLICATION CLIENT")
    with _repl(mariadb_settings, user=name, password="x").connect() as conn:
        conn.check_ready()
        file, pos, _ = conn.master_status()
        events = list(conn.dump(file, pos, non_blocking=True))
    assert _hdr(events[0])[1] == ROTATE and proto.parse_rotate(events[0], 4) == (file, pos)
    assert any(_hdr(ev)[1] == FDE for ev in events)


def test_mariadb_gtid_dump_starts_after_the_position(mariadb_settings: Any, admin_conn: Any,
                                                     table: str) -> None:
    tag = uuid.uuid4().hex[:12]
    _exec(admin_conn, f"INSERT INTO {table} (id, v) VALUES (1, 'before-{tag}')")
    start = MariaGtidPosition(_scalar(admin_conn, "SELECT @@gtid_binlog_pos"))
    domain = _scalar(admin_conn, "SELECT @@gtid_domain_id")
    _exec(admin_conn, f"INSERT INTO {table} (id, v) VALUES (2, 'after1-{tag}')",
          f"INSERT INTO {table} (id, v) VALUES (3, 'after2-{tag}')")
    with _repl(mariadb_settings).connect() as conn:
        events = list(conn.dump("", 4, gtid=str(start), non_blocking=True))
    blob = b"".join(events)
    assert f"before-{tag}".encode() not in blob
    assert f"after1-{tag}".encode() in blob and f"after2-{tag}".encode() in blob
    seqs = [struct.unpack_from("<QI", ev, 19) for ev in events if _hdr(ev)[1] == MARIA_GTID]
    in_domain = [seq for seq, dom in seqs if dom == domain]
    start_seq = start.get(domain)
    assert start_seq is not None
    assert in_domain and in_domain[0] == start_seq[1] + 1  # strictly after the requested GTID


def test_killed_dump_raises_connection_lost_with_position(mariadb_settings: Any, admin_conn: Any) -> None:
    conn = _repl(mariadb_settings).connect()
    file, pos, _ = conn.master_status()
    tid = conn.thread_id
    stream = conn.dump(file, pos)  # blocking
    assert _hdr(next(stream))[1] == ROTATE
    assert _hdr(next(stream))[1] == FDE
    deadline = time.monotonic() + 10
    while _scalar(admin_conn, "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                              "WHERE ID = %s AND COMMAND = 'Binlog Dump'", (tid,)) == 0:
        assert time.monotonic() < deadline, "dump thread never showed up in the processlist"
        time.sleep(0.05)
    _exec(admin_conn, f"KILL {int(tid)}")
    with pytest.raises(ConnectionLostError) as ei:
        for _ in stream:  # events other suites write meanwhile may still arrive
            pass
    err = ei.value
    assert err.retryable is True
    assert err.file == file and err.position >= pos
    assert (err.file, err.position) == conn.position
    assert conn.thread_id is None  # the connection is closed


def test_heartbeats_on_idle_stream(mariadb_settings: Any) -> None:
    with _repl(mariadb_settings, heartbeat_period=0.5).connect() as conn:
        file, pos, _ = conn.master_status()
        beats = 0
        t0 = time.monotonic()
        stream = conn.dump(file, pos)
        for ev in stream:
            if _hdr(ev)[1] == HEARTBEAT:
                beats += 1
                if beats == 3:
                    break
            assert time.monotonic() - t0 < 20, "no heartbeats within 20 s"
        stream.close()
    assert beats == 3


def test_semi_sync_ack(mariadb_settings: Any, admin_conn: Any, table: str) -> None:
    """With semi-sync on, the primary's commit returns only after our ACK (Rpl_semi_sync_master_yes_tx)."""

    def status(name: str) -> int:
        with admin_conn.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS LIKE %s", (name,))
            return int(cur.fetchone()[1])

    old_timeout = _scalar(admin_conn, "SELECT @@global.rpl_semi_sync_master_timeout")
    _exec(admin_conn, "SET GLOBAL rpl_semi_sync_master_timeout = 3000",
          "SET GLOBAL rpl_semi_sync_master_enabled = ON")
    writer_conn = pymysql.connect(**mariadb_settings.admin_kwargs())
    try:
        with _repl(mariadb_settings, semi_sync="auto", heartbeat_period=0.2).connect() as conn:
            file, pos, _ = conn.master_status()
            stream = conn.dump(file, pos)
            next(stream)
            assert conn.semi_sync_active
            yes_before = status("Rpl_semi_sync_master_yes_tx")
            took: list[float] = []

            def write() -> None:
                t = time.monotonic()
                _exec(writer_conn, f"INSERT INTO {table} (id, v) VALUES (42, 'semi')")
                took.append(time.monotonic() - t)

            th = threading.Thread(target=write)
            th.start()
            # Keep reading (the ACK goes out with the transaction's last event) until the commit
            # returned; heartbeats wake the loop up when the stream is idle.
            deadline = time.monotonic() + 10
            for _ in stream:
                if not th.is_alive() or time.monotonic() > deadline:
                    break
            th.join(5)
            stream.close()
            assert took and took[0] < 2.5, f"commit waited {took} s: no ACK before the 3 s timeout"
            assert status("Rpl_semi_sync_master_yes_tx") > yes_before
    finally:
        writer_conn.close()
        _exec(admin_conn, "SET GLOBAL rpl_semi_sync_master_enabled = OFF",
              f"SET GLOBAL rpl_semi_sync_master_timeout = {int(old_timeout)}")


def test_command_payload_layouts() -> None:
    # Layouts from the protocol docs; MySQL's GTID dump cannot be exercised against MariaDB.
    assert proto.binlog_dump("mysql-bin.000034", 0x634, 2, 10101) == (
        bytes.fromhex("12 34 06 00 00 02 00 75 27 00 00") + b"mysql-bin.000034")
    gs = MySQLGtidSet("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5")
    p = proto.binlog_dump_gtid("", 4, proto.BINLOG_THROUGH_GTID, 7, gs.encode())
    assert p[0] == 0x1E and struct.unpack_from("<HII", p, 1) == (4, 7, 0)
    assert struct.unpack_from("<QI", p, 11) == (4, len(gs.encode())) and p[23:] == gs.encode()
    assert proto.semi_sync_ack("f.000001", 300) == b"\xef" + struct.pack("<Q", 300) + b"f.000001"
    reg = proto.register_slave(5, b"h", port=3306)
    assert reg == bytes.fromhex("15 05000000 01") + b"h" + bytes.fromhex("00 00 ea0c 00000000 00000000")
    assert proto.parse_err_payload(b"\xff\xd4\x04#HY000boom") == (1236, "boom")


def _tls_dir() -> Path:
    return Path(__file__).resolve().parents[2] / ".runtime" / "mariadb" / instance_name("primary") / "tls"


def test_dump_over_verified_tls(mariadb_settings: Any, admin_conn: pymysql.connections.Connection,
                                table: str) -> None:
    ca = _tls_dir() / "ca.pem"
    assert ca.exists(), f"{ca} missing: scripts/mariadb.sh makes it when the instance starts"
    ssl = {"ca": str(ca), "check_hostname": True}
    with _repl(mariadb_settings, ssl=ssl).connect() as conn:
        # the session really is encrypted, with the server certificate verified against our CA
        cipher = conn._query("SHOW SESSION STATUS LIKE 'Ssl_cipher'")[0][1]
        assert cipher and cipher != b"" and cipher != ""
        file, pos, _ = conn.master_status()
        _exec(admin_conn, f"INSERT INTO {table} (id, v) VALUES (1, 'over tls')")
        tls_events = list(conn.dump(file, pos, non_blocking=True))
    with _repl(mariadb_settings).connect() as conn:
        plain_events = list(conn.dump(file, pos, non_blocking=True))
    assert tls_events == plain_events
    assert any(b"over tls" in ev for ev in tls_events)


def test_tls_with_a_foreign_ca_is_a_typed_error(mariadb_settings: Any, tmp_path: Path) -> None:
    import subprocess

    other = tmp_path / "other-ca.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=someone else", "-keyout", str(tmp_path / "k.pem"), "-out", str(other)],
                   check=True, capture_output=True)
    with pytest.raises(ReplicationTLSError, match=r"TLS handshake with .* failed"):
        _repl(mariadb_settings, ssl={"ca": str(other), "check_hostname": True}).connect()


def test_no_ssl_settings_means_plaintext(mariadb_settings: Any) -> None:
    # Canal's default sslMode=DISABLED: the server offers TLS, but we only use it when configured
    with _repl(mariadb_settings).connect() as conn:
        cipher = conn._query("SHOW SESSION STATUS LIKE 'Ssl_cipher'")[0][1]
    assert cipher in ("", b"")
