"""The pipeline with ``canal.mode: cluster`` against two canal-server processes in HA.

The sensor finds the active server through ZooKeeper (pipelines.engine.source.RemoteCanalSource + ServerDiscovery);
the servers keep the meta in ZooKeeper (default-instance.xml). The random workload of test_pipeline_e2e runs
while the active server is SIGKILLed mid-stream: the standby takes over from the ZooKeeper cursor, the
window in flight comes again and is applied once, and Delta converges to MariaDB with each row change in the
changelog exactly once.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from canal_core.protocol.zkpaths import cursor_path
from pipelines.engine.lake import Lake
from pipelines.engine.source import make_source
from tests.integration.e2e_workload import SCHEMA, Workload, changelog_counts, converge
from tests.integration.pipeline_driver import Driver, make_config
from tests.integration.server_process import RestartableServer, running_address
from tests.support.net import free_port
from tests.support.waiting import wait_until as wait_for

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_spark_session")]

DEST = "cluster"
SESSION_MS = 4000  # Spark shares the 2 cores with the servers: a little slack before a session is suspended


def _server_conf(src: Path, root: Path, zk: str, slave_id: int) -> tuple[Path, int]:
    """A canal-server conf dir: the pipeline's Canal conf plus this server's port, replica id and HA keys."""
    conf = root / "conf"
    (conf / DEST).mkdir(parents=True)
    port = free_port()
    (conf / "canal.properties").write_text(
        (src / "canal.properties").read_text()
        + f"canal.ip = 127.0.0.1\ncanal.port = {port}\ncanal.metrics.pull.port = {free_port()}\n"
        f"canal.file.data.dir = {root / 'data'}\ncanal.auto.scan = false\n"
        f"canal.zkServers = {zk}\ncanal.zookeeper.session.timeout = {SESSION_MS}\n"
        "canal.zookeeper.flush.period = 200\n"
        "canal.instance.global.spring.xml = classpath:spring/default-instance.xml\n")
    lines = (src / DEST / "instance.properties").read_text().splitlines()
    (conf / DEST / "instance.properties").write_text("\n".join(
        f"canal.instance.mysql.slaveId = {slave_id}" if ln.startswith("canal.instance.mysql.slaveId") else ln
        for ln in lines) + "\n")
    return conf, port


@pytest.mark.timeout(1200)
def test_pipeline_on_a_canal_cluster_converges_across_a_failover(mariadb_settings: Any, db: Any,
                                                                 zk_chroot: str, tmp_path: Path, spark: Any) -> None:
    w = Workload(db, seed=11)
    for _ in range(10):
        w.tx()
    cfg = make_config(tmp_path, mariadb_settings, DEST, f"{SCHEMA}\\\\..*",
                      canal={"mode": "cluster", "zk_servers": zk_chroot})
    base = random.randint(1 << 20, (1 << 31) - 3)
    servers: dict[str, tuple[RestartableServer, int]] = {}
    for i, name in enumerate(("a", "b")):
        conf, port = _server_conf(cfg.canal.conf_dir, tmp_path / name, zk_chroot, base + i)
        servers[f"127.0.0.1:{port}"] = (RestartableServer(conf, tmp_path / name / "logs"), port)
    zk = KazooClient(hosts=zk_chroot)
    zk.start(timeout=10)
    try:
        for server, port in servers.values():
            server.start(port)
        active = wait_for(lambda: running_address(zk, DEST), 15, "an active server")
        driver = Driver(cfg, tmp_path / "home")
        driver.tick()  # snapshots every table
        assert all(ok for _, ok in driver.runs) and driver.runs
        w.changes = 0
        killed_at = 0.0
        for i in range(40):
            w.tx()
            if i % 10 == 0:
                driver.tick()
            if i == 20:
                # a window was taken and applied since the last flush: the kill leaves it un-acked
                wait_for(lambda: zk.exists(cursor_path(DEST, cfg.canal.client_id)), 30, "a cursor in ZooKeeper")
                proc = servers[active][0].proc
                assert proc is not None
                killed_at = time.monotonic()
                proc.kill()
                proc.wait(10)
        standby = next(a for a in servers if a != active)
        wait_for(lambda: running_address(zk, DEST) == standby, 20, "the standby active")
        print(f"\nfailover: {standby} active {time.monotonic() - killed_at:.1f} s after the SIGKILL of {active}")
        converge(driver, mariadb_settings, spark)
        total, distinct = changelog_counts(spark, Lake(cfg.lake_root))
        assert total == distinct == w.changes
        assert make_source(cfg).status() == f"connected to {standby}"
        cursor = json.loads(zk.get(cursor_path(DEST, cfg.canal.client_id))[0])
        assert cursor["@type"] == "com.alibaba.otter.canal.protocol.position.LogPosition"
        assert {"journalName", "position", "serverId", "timestamp"} <= set(cursor["postion"])
    finally:
        from pipelines.engine.source import RemoteCanalSource

        RemoteCanalSource.close_all()  # its ZooKeeper client's threads must not outlive the test
        for server, _ in servers.values():
            server.stop()
        zk.stop()
        zk.close()
