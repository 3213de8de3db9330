"""The pipeline's Canal sources keep track of the batches they took and did not ack (``outstanding()``), which
the sensor checks before staging a window ahead of the one in flight: an embedded instance and a real
canal-server process over TCP, both reading the private MariaDB."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from pipelines.engine.source import CanalSource, EmbeddedCanalSource, RemoteCanalSource, make_source
from tests.integration.pipeline_driver import make_config
from tests.integration.server_process import RestartableServer
from tests.support.net import free_port
from tests.support.schema import scratch_schema

pytestmark = pytest.mark.integration

SCHEMA = "canal_sources_it"


@pytest.fixture
def db(mariadb_settings: Any) -> Iterator[pymysql.connections.Connection]:
    with scratch_schema(mariadb_settings, SCHEMA, "t (id INT PRIMARY KEY, v VARCHAR(64) NOT NULL)") as conn:
        yield conn


_ids = itertools.count()


def _write(conn: pymysql.connections.Connection, txs: int, rows: int) -> None:
    with conn.cursor() as cur:
        for t in range(txs):
            cur.execute("BEGIN")
            cur.executemany(f"INSERT INTO {SCHEMA}.t VALUES (%s, %s)",
                            [(next(_ids), f"row {t}/{i} " + "x" * 40) for i in range(rows)])
            cur.execute("COMMIT")


def _exercise(source: CanalSource, conn: pymysql.connections.Connection) -> None:
    _write(conn, 4, 5)
    first = source.get_window(1, 1 << 20, 5.0)
    assert first.rows >= 1 and first.batch_ids
    rest = source.get_window(1000, 1 << 20, 3.0)
    assert first.rows + rest.rows == 20 and rest.batch_ids
    assert source.outstanding() == first.batch_ids + rest.batch_ids
    source.ack(first.batch_ids)
    assert source.outstanding() == rest.batch_ids
    source.rollback()
    assert source.outstanding() == []
    again = source.get_window(1000, 1 << 20, 3.0)  # the rolled-back batches come again, with new ids
    assert again.rows == rest.rows and again.entries == rest.entries
    assert source.outstanding() == again.batch_ids and not set(again.batch_ids) & set(rest.batch_ids)
    source.ack(again.batch_ids)
    assert source.outstanding() == []


@pytest.mark.timeout(300)
def test_embedded_source_reports_its_outstanding_batches(mariadb_settings: Any, db: Any, tmp_path: Path) -> None:
    # 1 KiB gets: a window spans several batches
    cfg = make_config(tmp_path, mariadb_settings, "sources", f"{SCHEMA}\\\\..*", canal={"batch_bytes": 1024})
    source = make_source(cfg)
    assert isinstance(source, EmbeddedCanalSource)
    try:
        assert source.get_window(1, 1 << 20, 0.5).empty  # started at the server's current position
        _exercise(source, db)
    finally:
        EmbeddedCanalSource.close_all()


@pytest.mark.timeout(300)
def test_remote_source_reports_its_outstanding_batches(mariadb_settings: Any, db: Any, tmp_path: Path) -> None:
    port = free_port()
    cfg = make_config(tmp_path, mariadb_settings, "sources", f"{SCHEMA}\\\\..*",
                      canal={"mode": "remote", "address": f"127.0.0.1:{port}", "batch_entries": 2})
    props = cfg.canal.conf_dir / "canal.properties"
    props.write_text(props.read_text() + f"canal.ip = 127.0.0.1\ncanal.port = {port}\n"
                     f"canal.metrics.pull.port = {free_port()}\ncanal.file.data.dir = {tmp_path / 'data'}\n")
    server = RestartableServer(cfg.canal.conf_dir, tmp_path / "logs")
    server.start(port)
    source = make_source(cfg)
    assert isinstance(source, RemoteCanalSource)
    try:
        assert source.get_window(1, 1 << 20, 0.5).empty
        assert source.outstanding() == []
        _exercise(source, db)
        # a new connection is a new epoch: what the old one had outstanding is gone with it
        source.get_window(1, 1 << 20, 0.5)
        _write(db, 1, 3)
        taken = source.get_window(1000, 1 << 20, 3.0)
        assert taken.batch_ids and source.outstanding() == taken.batch_ids
        epoch = source.epoch
        server.stop()
        server.start(port)
        _write(db, 1, 2)
        after = source.get_window(1000, 1 << 20, 5.0)
        assert source.epoch != epoch and source.outstanding() == after.batch_ids
        assert after.rows == 3 + 2  # the un-acked transaction again, then the new one
    finally:
        RemoteCanalSource.close_all()
        server.stop()
