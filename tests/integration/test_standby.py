"""Heartbeat HA: a second private MariaDB replicates the first; the primary stops; the parser switches to
the standby within threshold x interval, rewinds by fallbackIntervalInSeconds and loses no committed
transaction (duplicates inside the fallback window are allowed and counted)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from canal_core.entry.convert import EntryConverter
from canal_core.parse.filter import EventFilter
from canal_core.parse.history import SchemaHistory
from canal_core.parse.locator import StartConfig
from canal_core.parse.model import EVENT_INSERT
from canal_core.parse.parser import EventParser, ParserConfig, SourceConfig
from canal_core.parse.position import FilePositionManager

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MARIADB = ROOT / "scripts" / "mariadb.sh"
INTERVAL, THRESHOLD, FALLBACK = 0.5, 2, 3


def _instance(name: str, port: int, server_id: int, domain: int) -> int:
    subprocess.run([str(MARIADB), "stop", name], capture_output=True)
    shutil.rmtree(ROOT / ".runtime" / "mariadb" / name, ignore_errors=True)  # a fresh server each run
    # the caller's environment goes through: with CI=true mariadb.sh moves to a free port if this one is taken
    env = {**os.environ, "MARIADB_PORT": str(port), "MARIADB_SERVER_ID": str(server_id),
           "MARIADB_GTID_DOMAIN_ID": str(domain)}
    out = subprocess.run([str(MARIADB), "start", name], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        pytest.fail(f"cannot start private MariaDB {name}: {out.stderr[-2000:]}")
    got = subprocess.run([str(MARIADB), "port", name], capture_output=True, text=True, check=True)
    return int(got.stdout.strip())


def _admin(port: int) -> pymysql.connections.Connection:
    return pymysql.connect(host="127.0.0.1", port=port, user="canal_admin", password="canal_admin", autocommit=True)


@pytest.fixture
def pair() -> Iterator[tuple[int, int]]:
    p = _instance("ha-primary", 3410, 10, 0)
    s = _instance("ha-standby", 3411, 11, 1)
    with _admin(p) as a, a.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        pos = cur.fetchone()[0]
    with _admin(s) as a, a.cursor() as cur:
        cur.execute(f"SET GLOBAL gtid_slave_pos = '{pos}'")
        cur.execute(f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={p}, MASTER_USER='canal', "
                    "MASTER_PASSWORD='canal', MASTER_USE_GTID=slave_pos")
        cur.execute("START SLAVE")
    yield p, s
    for name in ("ha-primary", "ha-standby"):
        subprocess.run([str(MARIADB), "stop", name], capture_output=True)


def _wait_replicated(standby: int, n: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with _admin(standby) as a, a.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM hat.t")
            if cur.fetchone()[0] >= n:
                return
        time.sleep(0.1)
    raise AssertionError(f"standby did not replicate {n} rows")


def test_switch_to_standby_loses_nothing(pair: tuple[int, int], tmp_path: Path) -> None:
    primary, standby = pair
    with _admin(primary) as a, a.cursor() as cur:
        cur.execute("CREATE DATABASE hat")
        cur.execute("CREATE TABLE hat.t (id INT PRIMARY KEY, note VARCHAR(20))")
    _wait_replicated(standby, 0)
    boot = pymysql.connect(host="127.0.0.1", port=primary, user="canal", password="canal")
    try:
        history = SchemaHistory.bootstrap_from_server(boot, schemas=["hat"], store=tmp_path / "history")
    finally:
        boot.close()
    # a real history is older than any fallback window; the rewind must not reach before its snapshot
    time.sleep(FALLBACK + 1.1)
    seen: list[int] = []
    lock = threading.Lock()

    def sink(entries: Any) -> None:
        with lock:
            seen.extend(r[0] for e in entries if e.event_type == EVENT_INSERT and e.rows for r in e.rows)

    cfg = ParserConfig(destination="ha", master=SourceConfig("127.0.0.1", primary),
                       standby=SourceConfig("127.0.0.1", standby), heartbeat_period=1.0,
                       detecting_enable=True, detecting_interval=INTERVAL, detecting_retry_threshold=THRESHOLD,
                       heartbeat_ha_enable=True, reconnect_min=0.2, reconnect_max=1.0,
                       master_start=StartConfig(fallback_interval=FALLBACK),
                       standby_start=StartConfig(fallback_interval=FALLBACK))
    parser = EventParser(cfg, sink=sink, history=history, positions=FilePositionManager(tmp_path / "meta"),
                         converter_factory=lambda ident: EntryConverter(ident, timezone="UTC"),
                         event_filter=EventFilter.from_config({"canal.instance.filter.regex": "hat\\..*"}))
    parser.start()
    try:
        time.sleep(0.5)
        with _admin(primary) as a, a.cursor() as cur:
            for i in range(1, 16):
                cur.execute("INSERT INTO hat.t VALUES (%s, 'primary')", (i,))
                time.sleep(0.15)
        _wait_replicated(standby, 15)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(set(seen)) < 15:
            time.sleep(0.05)
        stopped = time.monotonic()  # the server refuses connections from the start of its shutdown
        subprocess.run([str(MARIADB), "stop", "ha-primary"], capture_output=True, check=True)
        with _admin(standby) as a, a.cursor() as cur:
            cur.execute("STOP SLAVE")  # promote
            for i in range(16, 21):
                cur.execute("INSERT INTO hat.t VALUES (%s, 'standby')", (i,))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not set(range(1, 21)) <= set(seen):
            time.sleep(0.05)
    finally:
        parser.stop()
    assert parser.switches == 1, (parser.switches, parser.last_error)
    assert parser.switched_at is not None
    took = parser.switched_at - stopped
    # failure declared after more than THRESHOLD failed checks, one per INTERVAL (+ connect slack)
    assert took <= (THRESHOLD + 2) * INTERVAL + 2.0, f"switch took {took:.2f} s"
    missing = set(range(1, 21)) - set(seen)
    assert not missing, f"lost transactions: {sorted(missing)}"
    dups = {i: n for i, n in Counter(seen).items() if n > 1}
    # duplicates come only from the fallback rewind, never from the standby's own new rows
    assert all(i <= 15 for i in dups), dups
    print(f"switch after {took:.2f} s; {len(dups)} transactions delivered twice (fallback window): {sorted(dups)}")
