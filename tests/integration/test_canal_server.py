"""canal-server as a user runs it: start/status/stop, logs, live auto-scan, and meta flushed on stop."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from canal_core.meta import ClientIdentity
from canal_core.server.controller import CanalController

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent / "canal-server"


def _conf(tmp: Path, port: int, *, flush_ms: int = 100) -> Path:
    conf = tmp / "conf"
    (conf / "example").mkdir(parents=True)
    with socket.socket() as sk:  # canal-server run serves TCP: not on a fixed port other tests may hold
        sk.bind(("127.0.0.1", 0))
        tcp_port = sk.getsockname()[1]
    (conf / "canal.properties").write_text(
        f"canal.port = {tcp_port}\ncanal.ip = 127.0.0.1\n"
        "canal.destinations = example\n"
        "canal.auto.scan = true\n"
        "canal.auto.scan.interval = 1\n"
        f"canal.file.data.dir = {tmp / 'data'}\n"
        f"canal.file.flush.period = {flush_ms}\n"
    )
    (conf / "example" / "instance.properties").write_text(
        f"canal.instance.master.address = 127.0.0.1:{port}\n"
        "canal.instance.dbUsername = canal\ncanal.instance.dbPassword = canal\n"
        "canal.instance.filter.regex = canal_test\\\\.srv_.*\n"
    )
    return conf


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=60)


def _status(run: Path) -> dict[str, Any]:
    try:
        return json.loads((run / "canal" / "status.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}


def _wait(pred: Any, timeout: float = 15) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


def test_start_status_autoscan_stop(mariadb_settings: Any, tmp_path: Path) -> None:
    conf = _conf(tmp_path, mariadb_settings.port)
    run = tmp_path / "logs"
    started = _cli("start", "--conf", str(conf), "--run-dir", str(run))
    assert started.returncode == 0, started.stderr
    try:
        pid = int((run / "canal.pid").read_text())
        assert _wait(lambda: _status(run).get("destinations", {}).get("example", {}).get("state") == "running")
        st = _cli("status", "--conf", str(conf), "--run-dir", str(run))
        assert st.returncode == 0 and f"pid {pid}" in st.stdout and "example=running" in st.stdout
        assert _cli("start", "--conf", str(conf), "--run-dir", str(run)).returncode == 1  # already running
        assert (run / "canal" / "canal.log").exists()
        assert _wait(lambda: (run / "example" / "example.log").exists())
        # auto scan: a new destination directory starts, removing it stops it
        shutil.copytree(conf / "example", conf / "example2")
        assert _wait(lambda: _status(run).get("destinations", {}).get("example2", {}).get("state") == "running")
        shutil.rmtree(conf / "example2")
        assert _wait(lambda: "example2" not in _status(run).get("destinations", {}))
    finally:
        stopped = _cli("stop", "--conf", str(conf), "--run-dir", str(run))
    assert stopped.returncode == 0, stopped.stderr
    assert not (run / "canal.pid").exists()
    assert _cli("status", "--conf", str(conf), "--run-dir", str(run)).returncode == 1
    log = (run / "canal" / "canal.log").read_text()
    assert "signal 15: stopping" in log and "canal-server stopped" in log


def test_stop_flushes_the_meta_cursor(mariadb_settings: Any, admin_conn: Any, tmp_path: Path) -> None:
    # a flush period far longer than the test: only the flush on stop can write the cursor
    conf = _conf(tmp_path, mariadb_settings.port, flush_ms=600_000)
    with admin_conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS canal_test.srv_t")
        cur.execute("CREATE TABLE canal_test.srv_t (id INT PRIMARY KEY)")
    ctl = CanalController(conf)
    ctl.start()
    client = ClientIdentity("example", 1001, "")
    try:
        ctl.server.subscribe(client)
        time.sleep(0.7)
        with admin_conn.cursor() as cur:
            cur.execute("INSERT INTO canal_test.srv_t VALUES (1)")
        acked = False
        deadline = time.monotonic() + 15
        while not acked and time.monotonic() < deadline:
            msg = ctl.server.get_without_ack(client, 10, 0.3)
            if not msg.empty:
                ctl.server.ack(client, msg.batch_id)
                acked = any(ev.ends_transaction for ev in msg.events)
        assert acked
        meta = tmp_path / "data" / "example" / "meta.dat"
        before = meta.read_text() if meta.exists() else ""
        assert '"postion"' not in before  # the periodic flush has not run
    finally:
        ctl.stop()
        with admin_conn.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS canal_test.srv_t")
    saved = json.loads(meta.read_text())
    assert saved["destination"] == "example"
    (data,) = saved["clientDatas"]
    assert data["clientIdentity"]["clientId"] == 1001
    assert data["cursor"]["postion"]["journalName"].startswith("mysql-bin.")
