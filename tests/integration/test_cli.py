"""canal-binlog end to end: the command run as a subprocess against the private MariaDB and real files.

Errors must be exactly one stderr line starting with "canal-binlog: error: " that names the key facts;
success paths must print one valid JSON object per event. Other suites share the server, so assertions
only rely on what this file wrote (its own tables, users and positions); everything created is dropped.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pymysql
import pytest

from tests.integration.binlog_end import master_status
from tests.support.net import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
PREFIX = "canal-binlog: error: "
NOBINLOG = "nobinlog"
NOBINLOG_PORT = 3409
FIXTURE_PAYLOAD = "apecloud-mysql-binlog-connector-rust/tests/parse_file_tests/mysql-bin.000057"

ROWS_NAMES = {"WRITE_ROWS_V1", "UPDATE_ROWS_V1", "DELETE_ROWS_V1", "WRITE_ROWS_V2", "UPDATE_ROWS_V2",
              "DELETE_ROWS_V2"}


# ---- helpers -------------------------------------------------------------------------------------------


def run_cli(*args: str, script: bool = False, env: dict[str, str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    cmd = [str(Path(sys.executable).parent / "canal-binlog")] if script else [sys.executable, "-m",
                                                                              "canal_core.binlog_cli"]
    full_env = {k: v for k, v in os.environ.items() if k != "CANAL_BINLOG_PASSWORD"}
    full_env.update(env or {})
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout, env=full_env,
                          cwd=REPO_ROOT)


def events_of(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert proc.returncode == 0, f"exit {proc.returncode}, stderr: {proc.stderr}"
    assert proc.stderr == "", proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def error_line(proc: subprocess.CompletedProcess[str], status: int = 1, *, output: bool = False) -> str:
    """The one stderr line of a failed run; ``output``: events before the error may have been printed."""
    assert proc.returncode == status, f"exit {proc.returncode}, stdout: {proc.stdout[:500]} stderr: {proc.stderr}"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, f"want exactly one stderr line, got {lines}"
    assert lines[0].startswith(PREFIX), lines[0]
    if not output:
        assert proc.stdout == ""
    return lines[0]


_OPTION_DIR: list[Path] = []  # where live_args writes option files, for this module's tests


@pytest.fixture(scope="module", autouse=True)
def option_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    _OPTION_DIR.append(tmp_path_factory.mktemp("options"))
    yield
    _OPTION_DIR.clear()


def live_args(settings: Any, *, user: str | None = None, password: str | None = None,
              port: int | None = None) -> list[str]:
    """The server flags, the password in an option file (the way that keeps it out of the process list)."""
    path = _OPTION_DIR[0] / f"{uuid.uuid4().hex}.cnf"
    path.write_text(f"[client]\npassword = '{settings.repl_password if password is None else password}'\n")
    path.chmod(0o600)
    return ["--host", settings.host, "--port", str(port or settings.port), "--user", user or settings.repl_user,
            "--defaults-file", str(path)]


def _exec(conn: pymysql.connections.Connection, *sqls: str, args: Any = None) -> None:
    with conn.cursor() as cur:
        for sql in sqls:
            cur.execute(sql, args)


def _one(conn: pymysql.connections.Connection, sql: str) -> tuple[Any, ...]:
    with conn.cursor() as cur:
        cur.execute(sql)
        row = cur.fetchone()
    assert row is not None, sql
    return row


def rows_of(events: list[dict[str, Any]], table: str) -> list[tuple[str, list[Any]]]:
    """(kind, rows) of every rows event of canal_test.<table>, in order."""
    return [(e["kind"], e["rows"]) for e in events
            if e["name"] in ROWS_NAMES and e["schema"] == "canal_test" and e["table"] == table]


# The rows this file writes, and how canal-binlog must print them (DECIMAL as text, JSON as its text).
ROWS = [
    (1, "Zoë", Decimal("12.50"), '{"k": [1, 2], "s": "x"}'),
    (2, "plain", Decimal("-0.01"), None),
    (3, "三", Decimal("99999999.99"), "[]"),
]


def printed(row: tuple[Any, ...]) -> dict[str, Any]:
    return {"id": row[0], "name": row[1], "amount": str(row[2]), "doc": row[3]}


@pytest.fixture
def table(admin_conn: pymysql.connections.Connection) -> Iterator[str]:
    """A fresh table canal_test.<name>, dropped afterwards."""
    name = f"t_cli_{uuid.uuid4().hex[:10]}"
    _exec(admin_conn, f"CREATE TABLE canal_test.{name} (id INT PRIMARY KEY, name VARCHAR(32), "
                      f"amount DECIMAL(10,2), doc JSON, ref UUID) DEFAULT CHARSET=utf8mb4")
    try:
        yield name
    finally:
        _exec(admin_conn, f"DROP TABLE IF EXISTS canal_test.{name}")


def insert_rows(conn: pymysql.connections.Connection, table: str, rows: list[tuple[Any, ...]]) -> None:
    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO canal_test.{table} (id, name, amount, doc) VALUES (%s, %s, %s, %s)", rows)


@pytest.fixture(scope="module")
def closed_binlog(mariadb_settings: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A binlog file the server has closed, holding one transaction of ROWS into a fresh table.

    FLUSH BINARY LOGS before (so the file is small) and after (so it is complete and stable); the file is
    copied out of the server's datadir (readable as root) and its SHOW BINLOG EVENTS positions recorded.
    """
    conn = pymysql.connect(**mariadb_settings.admin_kwargs())
    name = f"t_cli_{uuid.uuid4().hex[:10]}"
    try:
        _exec(conn, f"CREATE TABLE canal_test.{name} (id INT PRIMARY KEY, name VARCHAR(32), "
                    f"amount DECIMAL(10,2), doc JSON, ref UUID) DEFAULT CHARSET=utf8mb4")
        for _ in range(5):
            _exec(conn, "FLUSH BINARY LOGS")
            conn.begin()
            insert_rows(conn, name, ROWS)
            file, _ = master_status(mariadb_settings)
            conn.commit()
            after, _ = master_status(mariadb_settings)
            if after == file:  # no other suite rotated around the commit: the rows are in `file`
                break
            _exec(conn, f"DELETE FROM canal_test.{name}")
        else:
            pytest.fail("the binlog kept rotating around the commit (5 tries)", pytrace=False)
        _exec(conn, "FLUSH BINARY LOGS")
        basename = str(_one(conn, "SELECT @@global.log_bin_basename")[0])
        with conn.cursor() as cur:
            cur.execute(f"SHOW BINLOG EVENTS IN '{file}'")
            positions = [int(r[1]) for r in cur.fetchall()]
        _exec(conn, f"DROP TABLE IF EXISTS canal_test.{name}")
    finally:
        conn.close()
    src = Path(basename).parent / file
    dst = tmp_path_factory.mktemp("binlog") / file
    shutil.copyfile(src, dst)
    return {"path": dst, "source": src, "table": name, "positions": positions}


@pytest.fixture(scope="session")
def nobinlog_port(mariadb_settings: Any) -> Iterator[int]:
    """A private MariaDB with the binary log OFF (scripts/mariadb.sh, MARIADB_LOG_BIN=0), stopped at the end."""
    mariadb_sh = str(REPO_ROOT / "scripts" / "mariadb.sh")
    cnf = REPO_ROOT / ".runtime" / "mariadb" / NOBINLOG / "my.cnf"
    running = subprocess.run([mariadb_sh, "status", NOBINLOG], capture_output=True).returncode == 0
    port = NOBINLOG_PORT
    if not running:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:  # 3409 taken by something else
                port = free_port()
    env = {**os.environ, "MARIADB_LOG_BIN": "0", "MARIADB_PORT": str(port), "MARIADB_SERVER_ID": "9"}
    started = subprocess.run([mariadb_sh, "start", NOBINLOG], capture_output=True, text=True, env=env, timeout=120)
    if started.returncode != 0:
        pytest.fail(f"scripts/mariadb.sh start {NOBINLOG} failed: {started.stderr}", pytrace=False)
    text = cnf.read_text()
    assert "# canal: log_bin=0" in text, f"{cnf} was created with the binlog on; remove {cnf.parent} and rerun"
    port = int(next(line.split("=")[1] for line in text.splitlines() if line.startswith("port")))
    try:
        yield port
    finally:
        subprocess.run([mariadb_sh, "stop", NOBINLOG], capture_output=True, timeout=120)


# ---- success paths -------------------------------------------------------------------------------------


def test_local_file_prints_every_event_with_the_inserted_rows(closed_binlog: dict[str, Any]) -> None:
    # the console script, once; every other run goes through python -m canal_core.binlog_cli
    events = events_of(run_cli(str(closed_binlog["path"]), script=True))
    assert [e["position"] for e in events] == closed_binlog["positions"]  # one line per event, in order
    assert all(e["file"] == closed_binlog["path"].name for e in events)
    assert events[0]["name"] == "FORMAT_DESCRIPTION" and events[-1]["name"] == "ROTATE"
    for e in events:
        assert {"type", "name", "file", "position", "log_pos", "timestamp", "server_id"} <= e.keys()
    writes = rows_of(events, closed_binlog["table"])
    assert writes == [("write", [{**printed(r), "ref": None} for r in ROWS])]
    gtids = [e["gtid"] for e in events if e["name"] == "MARIA_GTID"]
    assert gtids and all(g.count("-") == 2 for g in gtids)


def test_live_non_blocking_read_from_a_position(admin_conn: pymysql.connections.Connection, table: str,
                                                mariadb_settings: Any) -> None:
    file, pos = master_status(mariadb_settings)
    insert_rows(admin_conn, table, ROWS)
    ref = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    _exec(admin_conn, f"UPDATE canal_test.{table} SET amount = 13.75, ref = '{ref}' WHERE id = 1",
          f"DELETE FROM canal_test.{table} WHERE id = 2")
    proc = run_cli(*live_args(mariadb_settings), "--start-file", file, "--start-position", str(pos),
                   "--schema-hints", "--server-id", str(0x40000000 | (uuid.uuid4().int & 0x3FFFFFFF)))
    events = events_of(proc)
    assert events[0]["name"] == "ROTATE" and events[0]["next_file"] == file
    got = rows_of(events, table)
    before = {**printed(ROWS[0]), "ref": None}
    assert got == [
        ("write", [{**printed(r), "ref": None} for r in ROWS]),
        ("update", [{"before": before, "after": {**before, "amount": "13.75", "ref": ref}}]),  # UUID as text
        ("delete", [{**printed(ROWS[1]), "ref": None}]),
    ]
    mine = [e for e in events if e["name"] in ROWS_NAMES and e["table"] == table]
    assert all(e["file"] and e["position"] >= 4 and e["log_pos"] > e["position"] for e in mine)


def test_tables_filter_leaves_other_tables_out(admin_conn: pymysql.connections.Connection,
                                               mariadb_settings: Any) -> None:
    keep, drop = (f"t_cli_{uuid.uuid4().hex[:10]}" for _ in range(2))
    try:
        for t in (keep, drop):
            _exec(admin_conn, f"CREATE TABLE canal_test.{t} (id INT PRIMARY KEY, name VARCHAR(32), "
                              f"amount DECIMAL(10,2), doc JSON)")
        file, pos = master_status(mariadb_settings)
        insert_rows(admin_conn, drop, ROWS[:1])
        insert_rows(admin_conn, keep, ROWS[1:])
        insert_rows(admin_conn, drop, ROWS[1:2])
        args = [*live_args(mariadb_settings), "--start-file", file, "--start-position", str(pos)]
        events = events_of(run_cli(*args, "--tables", rf"CANAL_TEST\.{keep}"))
        assert rows_of(events, keep) == [("write", [printed(r) for r in ROWS[1:]])]
        assert all(e["table"] == keep for e in events if e["name"] in ROWS_NAMES)
        assert [e["table"]["table"] for e in events if e["name"] == "TABLE_MAP"] == [keep]
        # the same stream unfiltered has both tables
        assert len(rows_of(events_of(run_cli(*args)), drop)) == 2
    finally:
        _exec(admin_conn, f"DROP TABLE IF EXISTS canal_test.{keep}", f"DROP TABLE IF EXISTS canal_test.{drop}")


def test_gtid_start_skips_what_came_before(admin_conn: pymysql.connections.Connection, table: str,
                                           mariadb_settings: Any) -> None:
    insert_rows(admin_conn, table, ROWS[:1])
    gtid = str(_one(admin_conn, "SELECT @@global.gtid_binlog_pos")[0])
    insert_rows(admin_conn, table, ROWS[1:2])
    events = events_of(run_cli(*live_args(mariadb_settings), "--gtid", gtid))
    assert rows_of(events, table) == [("write", [{**printed(ROWS[1]), "ref": None}])]
    start = {int(d): int(n) for d, _, n in (g.split("-") for g in gtid.split(","))}
    seen = [tuple(map(int, e["gtid"].split("-"))) for e in events if e["name"] == "MARIA_GTID"]
    assert seen and all(n > start[d] for d, _, n in seen if d in start)  # nothing up to the start comes back


def test_transaction_payload_inner_events_get_their_own_lines() -> None:
    root = Path(os.environ.get("CANAL_FIXTURES") or REPO_ROOT.parent / "shared" / "fixtures")
    path = root / FIXTURE_PAYLOAD
    if not path.is_file():
        pytest.fail(f"binlog fixture {path} not found (set CANAL_FIXTURES to the fixture root)", pytrace=False)
    events = events_of(run_cli(str(path)))
    payloads = [e for e in events if e["name"] == "TRANSACTION_PAYLOAD"]
    inner = [e for e in events if e.get("inner")]
    # MANIFEST.md: 8 events, 2 payloads holding 16(2) 19(3) 2(2) 29(3) 30(2) 31(1)
    assert len(events) - len(inner) == 8 and len(payloads) == 2
    assert sorted(e["type"] for e in inner) == sorted([16] * 2 + [19] * 3 + [2] * 2 + [29] * 3 + [30] * 2 + [31])
    assert sum(p["events"] for p in payloads) == len(inner)
    assert {e["position"] for e in inner} == {p["position"] for p in payloads}


def test_broken_pipe_exits_quietly(closed_binlog: dict[str, Any], tmp_path: Path) -> None:
    # a file with thousands of events: the magic and FORMAT_DESCRIPTION, then the body repeated
    data = closed_binlog["path"].read_bytes()
    fde_end = 4 + struct.unpack_from("<I", data, 4 + 9)[0]
    rotate = closed_binlog["positions"][-1]
    big = tmp_path / "big-bin.000001"
    big.write_bytes(data[:fde_end] + data[fde_end:rotate] * 3000)
    proc = subprocess.Popen([sys.executable, "-m", "canal_core.binlog_cli", str(big)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=REPO_ROOT)
    assert proc.stdout is not None and proc.stderr is not None
    json.loads(proc.stdout.readline())
    proc.stdout.close()  # like `| head -1`
    assert proc.wait(timeout=60) == 0
    assert proc.stderr.read() == b""
    proc.stderr.close()


# ---- errors: exactly one line, with the facts and what to do -------------------------------------------


def test_bad_credentials(mariadb_settings: Any) -> None:
    line = error_line(run_cli(*live_args(mariadb_settings, password="wrong-password")))
    assert f"{mariadb_settings.repl_user}@{mariadb_settings.host}" in line
    assert "check --user and the password (--defaults-file" in line and "refused login" in line


def test_password_from_url_and_environment(mariadb_settings: Any) -> None:
    s = mariadb_settings
    proc = run_cli("--url", f"mysql://{s.repl_user}:nope@{s.host}:{s.port}", "--limit", "1")
    warning, error = proc.stderr.splitlines()
    assert warning.startswith("canal-binlog: warning: a password in --url can be read by every user"), warning
    assert proc.returncode == 1 and error.startswith(PREFIX) and "refused login" in error, error
    events = events_of(run_cli("--url", f"mysql://{s.repl_user}@{s.host}:{s.port}", "--limit", "2",
                               env={"CANAL_BINLOG_PASSWORD": s.repl_password}))
    assert [e["name"] for e in events] == ["ROTATE", "FORMAT_DESCRIPTION"]


def test_missing_privilege_names_the_grant(admin_conn: pymysql.connections.Connection,
                                           mariadb_settings: Any) -> None:
    user = f"cli_sel_{uuid.uuid4().hex[:8]}"
    _exec(admin_conn, f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw'", f"GRANT SELECT ON *.* TO '{user}'@'%'")
    try:
        line = error_line(run_cli(*live_args(mariadb_settings, user=user, password="pw")))
        assert f"GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{user}'@'%'" in line
        assert "lacks REPLICATION CLIENT" in line
        # from a given file the dump itself needs REPLICATION SLAVE
        line = error_line(run_cli(*live_args(mariadb_settings, user=user, password="pw"),
                                  "--start-file", "mysql-bin.000001"))
        assert "lacks REPLICATION SLAVE" in line and f"TO '{user}'@'%'" in line
    finally:
        _exec(admin_conn, f"DROP USER IF EXISTS '{user}'@'%'")


def test_binlog_off(mariadb_settings: Any, nobinlog_port: int) -> None:
    line = error_line(run_cli(*live_args(mariadb_settings, port=nobinlog_port)))
    assert f"binary logging is not enabled on {mariadb_settings.host}:{nobinlog_port}" in line
    assert "log_bin=mysql-bin" in line and "binlog_format=ROW" in line and "my.cnf" in line


def test_nonexistent_start_file_names_the_oldest_binlog(admin_conn: pymysql.connections.Connection,
                                                        mariadb_settings: Any) -> None:
    with admin_conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        oldest = str(cur.fetchone()[0])
    line = error_line(run_cli(*live_args(mariadb_settings), "--start-file", "mysql-bin.999999"))
    assert "mysql-bin.999999:4" in line and f"oldest binlog on the server is {oldest}" in line
    assert f"restart from {oldest}:4" in line


def test_server_unreachable() -> None:
    port = free_port()
    line = error_line(run_cli("--host", "127.0.0.1", "--port", str(port), "--user", "canal",
                              env={"CANAL_BINLOG_PASSWORD": "x"}))
    assert f"cannot connect to 127.0.0.1:{port}" in line and "--host/--port" in line


def test_corrupt_local_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad-bin.000001"
    bad.write_bytes(b"this is not a binlog at all" * 10)
    line = error_line(run_cli(str(bad)))
    assert "bad-bin.000001:0" in line and "not a binlog file" in line


def test_truncated_local_file(closed_binlog: dict[str, Any], tmp_path: Path) -> None:
    data = closed_binlog["path"].read_bytes()
    fde_end = 4 + struct.unpack_from("<I", data, 4 + 9)[0]
    cut = tmp_path / "cut-bin.000001"
    cut.write_bytes(data[:fde_end + 30])  # the event after the FORMAT_DESCRIPTION is cut short
    proc = run_cli(str(cut))
    line = error_line(proc, output=True)
    assert f"cut-bin.000001:{fde_end}" in line and "file ends inside an event" in line
    assert [json.loads(x)["name"] for x in proc.stdout.splitlines()] == ["FORMAT_DESCRIPTION"]  # all before it


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert "nothing to read" in error_line(run_cli(), status=2)
    assert "--start-position needs --start-file" in error_line(
        run_cli("--host", "127.0.0.1", "--start-position", "4"), status=2)
    assert "--gtid" in error_line(run_cli("--host", "127.0.0.1", "--gtid", "not-a-gtid"), status=2)
    assert "cannot read" in error_line(run_cli(str(tmp_path / "missing-bin.000001")))
