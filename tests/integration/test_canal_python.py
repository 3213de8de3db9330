"""The unmodified third-party client `canal-python` (PyPI 0.4, module `canal`) against a real `canal-server`
process: connect, auth (it sends the password unscrambled, so the server has none), subscribe (it sends
rollback(0) first and reads no reply), get_without_ack, rollback, ack. Entries are parsed with canal-python's
OWN protobuf classes; the rows are checked against SELECTs on MariaDB.

canal-python's _pb2 modules are old-style generated code that only imports with the pure-Python protobuf
runtime, so the client runs in a subprocess with PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.binlog_end import binlog_end
from tests.support.net import free_port
from tests.support.schema import scratch_table

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent / "canal-server"
TABLE = "tcppy_t"
COLUMNS = ("id", "name", "amount", "created", "note")

# Runs in the subprocess: only canal-python and the standard library.
CLIENT = r'''
import json, sys, time
from canal.client import Client
from canal.protocol import EntryProtocol_pb2 as EP

host, port, dest, table, want_changes, out = sys.argv[1:7]
port, want_changes = int(port), int(want_changes)

def changes(message):
    """Row changes of our table, decoded with canal-python's own classes."""
    got = []
    for entry in message["entries"]:
        if entry.entryType != EP.EntryType.ROWDATA or entry.header.tableName != table:
            continue
        rc = EP.RowChange()
        rc.MergeFromString(entry.storeValue)
        for rd in rc.rowDatas:
            got.append({
                "type": EP.EventType.Name(rc.eventType),
                "schema": entry.header.schemaName,
                "before": {c.name: (None if c.isNull else c.value) for c in rd.beforeColumns},
                "after": {c.name: (None if c.isNull else c.value) for c in rd.afterColumns},
            })
    return got

def batch(message):
    return {"id": message["id"], "raw": [e.SerializeToString().hex() for e in message["entries"]],
            "changes": changes(message)}

def connect():
    c = Client()
    c.connect(host=host, port=port)
    c.check_valid(username=b"", password=b"")
    c.subscribe(client_id=b"1001", destination=dest.encode(), filter=("canal_test\\." + table).encode())
    return c

result = {}
c = connect()
deadline = time.monotonic() + 60
m1 = c.get_without_ack(4, 3000, 2)               # wait up to 3000 ms for 4 entries
while not changes(m1) and time.monotonic() < deadline:
    c.ack(m1["id"])                              # e.g. an empty transaction of another table
    m1 = c.get_without_ack(4, 3000, 2)
result["m1"] = batch(m1)
c.rollback(m1["id"])                             # give it back: the same content must come again
m2 = c.get_without_ack(4, 3000, 2)
result["m2"] = batch(m2)
c.ack(m2["id"])
rest, seen = [], len(result["m2"]["changes"])
while seen < want_changes and time.monotonic() < deadline:
    m = c.get_without_ack(3, 1000, 2)
    b = batch(m)
    seen += len(b["changes"])
    rest.append(b)
    c.ack(m["id"])
result["rest"] = rest
m = c.get_without_ack(100, 1500, 2)              # everything acked: nothing of ours may come again
result["after_ack"] = batch(m)
c.ack(m["id"])
c.disconnect()

c = connect()                                    # a new session: rollback(0), subscribe; still nothing
m = c.get_without_ack(100, 1500, 2)
result["after_reconnect"] = batch(m)
c.disconnect()
with open(out, "w") as f:
    json.dump(result, f)
'''


@pytest.fixture
def table(admin_conn: Any) -> Iterator[str]:
    with scratch_table(admin_conn, f"canal_test.{TABLE}", "(id INT PRIMARY KEY, name VARCHAR(40), amount "
                       "DECIMAL(10,2), created DATETIME, note VARCHAR(20) NULL) DEFAULT CHARSET=utf8mb4"):
        yield TABLE


def _select(admin_conn: Any) -> dict[str, dict[str, str | None]]:
    cols = ", ".join(f"CAST({c} AS CHAR)" for c in COLUMNS)
    with admin_conn.cursor() as cur:
        cur.execute(f"SELECT {cols} FROM canal_test.{TABLE}")
        return {r[0]: dict(zip(COLUMNS, r, strict=True)) for r in cur.fetchall()}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=60)


def _listening(port: int, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def test_canal_python_client(mariadb_settings: Any, admin_conn: Any, table: str, tmp_path: Path) -> None:
    with admin_conn.cursor() as cur:
        journal, position = binlog_end(mariadb_settings.repl_kwargs())
        # 6 inserts, an update, a delete: 8 row changes, each its own transaction
        for i in range(1, 7):
            cur.execute(f"INSERT INTO canal_test.{TABLE} VALUES (%s, %s, %s, %s, %s)",
                        (i, f"py-{i} ✓ ü", f"{i}.{i}5", f"2025-0{i}-0{i} 0{i}:1{i}:2{i}", None if i % 3 else "n"))
        cur.execute(f"UPDATE canal_test.{TABLE} SET amount = 99.99, note = 'u' WHERE id = 2")
        cur.execute(f"DELETE FROM canal_test.{TABLE} WHERE id = 5")
    want = _select(admin_conn)

    port = free_port()
    conf = tmp_path / "conf"
    (conf / "pydest").mkdir(parents=True)
    (conf / "canal.properties").write_text(
        "canal.destinations = pydest\n"
        f"canal.ip = 127.0.0.1\ncanal.port = {port}\n"
        "canal.user =\ncanal.passwd =\n"  # canal-python cannot scramble: no password
        f"canal.file.data.dir = {tmp_path / 'data'}\n"
        "canal.file.flush.period = 100\n"
        "canal.instance.memory.batch.mode = ITEMSIZE\n"
    )
    (conf / "pydest" / "instance.properties").write_text(
        f"canal.instance.master.address = 127.0.0.1:{mariadb_settings.port}\n"
        f"canal.instance.master.journal.name = {journal}\ncanal.instance.master.position = {position}\n"
        "canal.instance.dbUsername = canal\ncanal.instance.dbPassword = canal\n"
        f"canal.instance.filter.regex = canal_test\\\\.{TABLE}\n"
    )
    run = tmp_path / "logs"
    started = _cli("start", "--conf", str(conf), "--run-dir", str(run))
    assert started.returncode == 0, started.stderr + (run / "canal.out").read_text()
    try:
        assert _listening(port), (run / "canal" / "canal.log").read_text()
        out = tmp_path / "result.json"
        script = tmp_path / "client.py"
        script.write_text(CLIENT)
        env = dict(os.environ, PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION="python")
        proc = subprocess.run([sys.executable, str(script), "127.0.0.1", str(port), "pydest", TABLE, "8", str(out)],
                              env=env, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "Auth succed" in proc.stdout and "Subscribe succed" in proc.stdout
        res = json.loads(out.read_text())
        deadline = time.monotonic() + 10  # status.json is refreshed every 2 s
        while f"tcp 127.0.0.1:{port}" not in (st := _cli("status", "--conf", str(conf), "--run-dir", str(run))).stdout \
                and time.monotonic() < deadline:
            time.sleep(0.5)
        assert "pydest=running" in st.stdout and f"tcp 127.0.0.1:{port}" in st.stdout, st.stdout
    finally:
        stopped = _cli("stop", "--conf", str(conf), "--run-dir", str(run))
    assert stopped.returncode == 0, stopped.stderr

    m1, m2 = res["m1"], res["m2"]
    assert m1["id"] > 0 and m1["changes"]
    # after rollback the same batch content comes again (a new batch id, byte-identical entries)
    assert m2["raw"] == m1["raw"] and m2["changes"] == m1["changes"] and m2["id"] > m1["id"]
    # after ack it does not: every change exactly once over the acked batches, and nothing after
    acked = [m2, *res["rest"]]
    for b in res["rest"]:
        assert not set(b["raw"]) & set(m2["raw"])
    changes = [c for b in acked for c in b["changes"]]
    assert [c["type"] for c in changes] == ["INSERT"] * 6 + ["UPDATE", "DELETE"]
    assert all(c["schema"] == "canal_test" for c in changes)
    assert res["after_ack"]["changes"] == [] and res["after_reconnect"]["changes"] == []

    # applied in order, the changes give what MariaDB returns
    state: dict[str, dict[str, str | None]] = {}
    for c in changes:
        if c["type"] == "DELETE":
            del state[c["before"]["id"]]
        else:
            state[c["after"]["id"]] = c["after"]
    assert state == want and len(want) == 5
    # the UPDATE carried its before image too
    upd = changes[6]
    assert upd["before"]["amount"] == "2.25" and upd["after"]["amount"] == "99.99" == want["2"]["amount"]
