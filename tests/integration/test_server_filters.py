"""A canal-server process given a catastrophic-backtracking table regex, in instance.properties and from a
client over TCP: the rows wanted arrive, requests are answered at once, and a filter RE2 cannot run is
refused with an error Ack on a connection that keeps serving, and is not recorded in the meta."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from canal_core.client.connector import CanalClientError, SimpleConnector
from canal_core.protocol.proto import EntryProtocol_pb2 as ep
from tests.integration.server_process import destination_running
from tests.support.net import free_port

pytestmark = pytest.mark.integration

# nested quantifiers over the whole name and a '#' no table name has: a backtracking engine tries every way
# to split a name, 2^38 for these 39-character ones
CATASTROPHIC = "(?:[a-z_.0-9]+)+#"
TABLE_A = "rx_abcdefghijklmnopqrstuvwxy"
TABLE_Z = "rx_zyxwvutsrqponmlkjihgfedcb"


@pytest.fixture
def tables(admin_conn: Any) -> Iterator[None]:
    with admin_conn.cursor() as cur:
        for t in (TABLE_A, TABLE_Z):
            cur.execute(f"DROP TABLE IF EXISTS canal_test.{t}")
            cur.execute(f"CREATE TABLE canal_test.{t} (id INT PRIMARY KEY)")
    yield
    with admin_conn.cursor() as cur:
        for t in (TABLE_A, TABLE_Z):
            cur.execute(f"DROP TABLE IF EXISTS canal_test.{t}")


def _rows(c: SimpleConnector, want: int, timeout: float = 20) -> list[tuple[str, int]]:
    """(table, id) of the rows received until ``want`` arrived (or the time ran out)."""
    got: list[tuple[str, int]] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for e in c.get(100, timeout=300).entries:
            if e.entryType == ep.ROWDATA and e.header.tableName.startswith("rx_"):
                for rd in ep.RowChange.FromString(e.storeValue).rowDatas:
                    got += [(e.header.tableName, int(col.value)) for col in rd.afterColumns if col.name == "id"]
    return got


def test_catastrophic_filters_from_config_and_client(mariadb_settings: Any, admin_conn: Any, tables: None,
                                                     tmp_path: Path) -> None:
    tcp_port = free_port()
    conf = tmp_path / "conf"
    (conf / "example").mkdir(parents=True)
    (conf / "canal.properties").write_text(
        f"canal.port = {tcp_port}\ncanal.ip = 127.0.0.1\ncanal.metrics.pull.port = {free_port()}\n"
        f"canal.destinations = example\ncanal.file.data.dir = {tmp_path / 'data'}\ncanal.file.flush.period = 100\n")
    # the wanted pattern is the longer one, tried first: only names it refuses reach the catastrophic one
    (conf / "example" / "instance.properties").write_text(
        f"canal.instance.master.address = 127.0.0.1:{mariadb_settings.port}\n"
        "canal.instance.dbUsername = canal\ncanal.instance.dbPassword = canal\n"
        f"canal.instance.filter.regex = {CATASTROPHIC},canal_test\\\\.rx_abc.*\n")
    run = tmp_path / "logs"
    proc = subprocess.Popen([sys.executable, "-m", "canal_core.server.main", "run", "--conf", str(conf),
                             "--run-dir", str(run)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert destination_running(run)
        with SimpleConnector(("127.0.0.1", tcp_port), "example", so_timeout=10, connect_timeout=20) as c:
            c.subscribe()  # the destination's filter
            time.sleep(0.5)
            with admin_conn.cursor() as cur:
                cur.execute(f"INSERT INTO canal_test.{TABLE_Z} VALUES (1)")  # refused by the catastrophic pattern
                cur.execute(f"INSERT INTO canal_test.{TABLE_A} VALUES (1)")
            assert _rows(c, 1) == [(TABLE_A, 1)]

            client_filter = f"{CATASTROPHIC},canal_test\\.rx_zyx.*"
            start = time.monotonic()
            c.subscribe(client_filter)
            subscribed_in = time.monotonic() - start
            with admin_conn.cursor() as cur:
                cur.execute(f"INSERT INTO canal_test.{TABLE_A} VALUES (2)")
                cur.execute(f"INSERT INTO canal_test.{TABLE_Z} VALUES (2)")
            assert _rows(c, 1) == [(TABLE_Z, 2)]

        # a connection with no ack or rollback left unanswered (Canal answers neither): an error Ack after one
        # would be taken by the client for the refusal of that ack, and the connection dropped
        with SimpleConnector(("127.0.0.1", tcp_port), "example", so_timeout=10, rollback_on_connect=False) as c:
            start = time.monotonic()
            with pytest.raises(CanalClientError) as refused:
                c.subscribe("canal_test\\.(rx)_\\1")
            refused_in = time.monotonic() - start
            assert refused.value.code == 400
            assert "clientId:1001 destination:example" in str(refused.value) and "RE2" in str(refused.value)
            # the same connection keeps serving, with the filter the client had
            with admin_conn.cursor() as cur:
                cur.execute(f"INSERT INTO canal_test.{TABLE_A} VALUES (3)")
                cur.execute(f"INSERT INTO canal_test.{TABLE_Z} VALUES (3)")
            assert _rows(c, 1) == [(TABLE_Z, 3)]
        # milliseconds on an idle machine; the bound leaves room for a loaded one
        assert subscribed_in < 1 and refused_in < 1, (subscribed_in, refused_in)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:  # a frozen server does not answer SIGTERM
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert proc.returncode == 0, proc.stderr.read().decode() if proc.stderr else ""
    saved = json.loads((tmp_path / "data" / "example" / "meta.dat").read_text())
    assert [d["clientIdentity"]["filter"] for d in saved["clientDatas"]] == [client_filter]
