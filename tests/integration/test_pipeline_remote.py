"""The pipeline with ``canal.mode: remote``: the sensor takes its windows from a real canal-server process over
Canal's TCP protocol (pipelines.engine.source.RemoteCanalSource) instead of an embedded instance, and the random
workload of test_pipeline_e2e converges to Delta == MariaDB; the changelog holds each change once, also after the
server was restarted mid-stream (its un-acked batches come again and are applied once)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipelines.engine.config import PipelineConfig
from pipelines.engine.lake import Lake
from tests.integration.e2e_workload import SCHEMA, Workload, changelog_counts, converge
from tests.integration.pipeline_driver import Driver, make_config
from tests.integration.server_process import RestartableServer
from tests.support.net import free_port

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_spark_session")]



def _remote_config(tmp_path: Path, settings: Any) -> tuple[PipelineConfig, int]:
    """The pipeline in remote mode, and the canal-server's keys added to the same Canal conf."""
    port = free_port()
    cfg = make_config(tmp_path, settings, "remote", f"{SCHEMA}\\\\..*",
                      canal={"mode": "remote", "address": f"127.0.0.1:{port}"})
    props = cfg.canal.conf_dir / "canal.properties"
    props.write_text(props.read_text() + f"canal.ip = 127.0.0.1\ncanal.port = {port}\n"
                     f"canal.metrics.pull.port = {free_port()}\ncanal.file.data.dir = {tmp_path / 'data'}\n")
    return cfg, port


@pytest.mark.timeout(1200)
def test_pipeline_on_a_remote_canal_server_converges(mariadb_settings: Any, db: Any, tmp_path: Path,
                                                     spark: Any) -> None:
    w = Workload(db, seed=7)
    for _ in range(10):
        w.tx()
    cfg, port = _remote_config(tmp_path, mariadb_settings)
    server = RestartableServer(cfg.canal.conf_dir, tmp_path / "logs")
    server.start(port)
    try:
        driver = Driver(cfg, tmp_path / "home")
        driver.tick()  # snapshots every table
        assert all(ok for _, ok in driver.runs) and driver.runs
        w.changes = 0
        for i in range(40):
            w.tx()
            if i % 10 == 0:
                driver.tick()
            if i == 20:  # the server goes away mid-stream: un-acked batches come again from its cursor
                server.stop()
                server.start(port)
        converge(driver, mariadb_settings, spark)
        total, distinct = changelog_counts(spark, Lake(cfg.lake_root))
        assert total == distinct == w.changes
        from pipelines.engine.source import RemoteCanalSource, make_source

        assert isinstance(make_source(cfg), RemoteCanalSource)
    finally:
        from pipelines.engine.source import RemoteCanalSource

        RemoteCanalSource.close_all()  # no connector thread outlives the test
        server.stop()
