"""canal-server as a user runs it: start/status/stop, logs, live auto-scan, and meta flushed on stop."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from canal_core.protocol.identity import ClientIdentity
from canal_core.server.controller import CanalController
from tests.support.conf import source, write_conf
from tests.support.net import free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent / "canal-server"


def _conf(tmp: Path, port: int, *, flush_ms: int = 100, metrics_port: int | None = None) -> Path:
    # canal-server run serves TCP and metrics: not on fixed ports other tests may hold
    return write_conf(tmp, f"canal.port = {free_port()}\ncanal.ip = 127.0.0.1\n"
                      f"canal.metrics.pull.port = {metrics_port or free_port()}\n"
                      "canal.destinations = example\n"
                      "canal.auto.scan = true\n"
                      "canal.auto.scan.interval = 1\n"
                      f"canal.file.data.dir = {tmp / 'data'}\n"
                      f"canal.file.flush.period = {flush_ms}\n",
                      {"example": source(port, "canal_test\\\\.srv_.*")})


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=60)


def _status(run: Path) -> dict[str, Any]:
    try:
        return json.loads((run / "canal" / "status.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}


def _wait(pred: Any, timeout: float = 15) -> bool:
    return bool(wait_until(pred, timeout, step=0.1))


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


def test_the_server_process_exports_canal_metrics(mariadb_settings: Any, admin_conn: Any, tmp_path: Path) -> None:
    """canal-server serves Prometheus text on canal.metrics.pull.port: parsed with prometheus_client's own
    parser, the destination's put/get/ack rows match what was written and consumed, and its delays are there."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    from canal_core.client.connector import SimpleConnector

    with admin_conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS canal_test.srv_m")
        cur.execute("CREATE TABLE canal_test.srv_m (id INT PRIMARY KEY, v VARCHAR(10))")
    mport = free_port()
    conf = _conf(tmp_path, mariadb_settings.port, metrics_port=mport)
    props = (conf / "canal.properties").read_text()
    tcp_port = int(props.split("canal.port = ")[1].split("\n")[0])
    run = tmp_path / "logs"
    assert _cli("start", "--conf", str(conf), "--run-dir", str(run)).returncode == 0
    try:
        assert _wait(lambda: _status(run).get("destinations", {}).get("example", {}).get("state") == "running")
        with admin_conn.cursor() as cur:
            for i in range(3):  # 3 transactions of 4 rows
                cur.execute("INSERT INTO canal_test.srv_m VALUES " + ",".join(f"({i * 4 + k}, 'x')" for k in range(4)))
        rows, gets, empty = 0, 0, 0
        with SimpleConnector(("127.0.0.1", tcp_port), "example") as c:
            c.subscribe()
            deadline = time.monotonic() + 20
            while rows < 12 and time.monotonic() < deadline:
                msg = c.get(100, timeout=500)
                gets, empty = gets + (not msg.empty), empty + msg.empty
                rows += sum(len(ep_rows(e)) for e in msg.entries)
            assert c.get_without_ack(100, timeout=-1).empty  # one more, empty for sure
            empty += 1
        assert rows == 12
        with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10) as r:
            text = r.read().decode()
    finally:
        assert _cli("stop", "--conf", str(conf), "--run-dir", str(run)).returncode == 0
        with admin_conn.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS canal_test.srv_m")
    # keyed by family: the parser reports a counter's sample as <family>_total whatever the text said
    samples = {(fam.name, s.labels.get("destination")): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    for name in ("canal_instance_put_rows", "canal_instance_get_rows", "canal_instance_ack_rows"):
        assert samples[(name, "example")] == 12, (name, samples.get((name, "example")))
    for name in ("canal_instance_put_delay", "canal_instance_get_delay", "canal_instance_ack_delay",
                 "canal_instance_traffic_delay"):
        assert 0 <= samples[(name, "example")] < 60_000, (name, samples.get((name, "example")))
    assert samples[("canal_instance_subscriptions", "example")] >= 1
    # as Canal: a GET answered empty counts as an empty batch, not as a GET packet
    families = {fam.name: fam for fam in text_string_to_metric_families(text)}
    by_type = {s.labels["packetType"]: s.value for s in families["canal_instance_client_packets"].samples
               if s.labels.get("destination") == "example"}
    assert by_type.get("GET") == gets and by_type.get("CLIENTACK") == gets
    assert samples[("canal_instance_client_empty_batches", "example")] == empty


def ep_rows(entry: Any) -> list[Any]:
    """The row images of a ROWDATA entry (none for transaction markers)."""
    from canal_core.protocol.proto import EntryProtocol_pb2 as ep

    if entry.entryType != ep.ROWDATA:
        return []
    return list(ep.RowChange.FromString(entry.storeValue).rowDatas)
