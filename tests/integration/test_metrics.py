"""Prometheus metrics of a real instance on the private MariaDB, scraped over HTTP: every Canal metric family
with its destination label, row counters equal to the rows our own SQL wrote / the test consumed and
acked, plausible delays, the store's labels from the config, the client metrics, and counters that start
again (not double-count) when the destination restarts."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from canal_core.entry.model import CanalEntry
from canal_core.instance.config import CanalConfig
from canal_core.instance.instance import CanalInstance
from canal_core.protocol.identity import ClientIdentity
from canal_core.protocol.proto import EntryProtocol_pb2 as pb
from canal_core.server.embedded import CanalServerWithEmbedded
from canal_core.server.metrics import MetricsServer
from tests.support.conf import source, write_conf
from tests.support.schema import scratch_table

pytestmark = pytest.mark.integration

ROWDATA, TRANSACTIONEND = 2, 3
TABLE = "canal_test.metrics_t"

# docs/canal-compat.md §7: family -> labels besides destination
FAMILIES = {
    "canal_instance": {"mode"},
    "canal_instance_subscriptions": set(),
    "canal_instance_traffic_delay": set(),
    "canal_instance_transactions": set(),
    "canal_instance_parser_mode": {"parallel"},
    "canal_instance_received_binlog_bytes": {"parser"},
    "canal_instance_publish_blocking_time": {"parser"},
    "canal_instance_sink_blocking_time": set(),
    "canal_instance_store": {"batchMode", "size"},
    "canal_instance_store_produce_seq": set(),
    "canal_instance_store_consume_seq": set(),
    "canal_instance_store_produce_mem": set(),
    "canal_instance_store_consume_mem": set(),
    "canal_instance_put_delay": set(),
    "canal_instance_get_delay": set(),
    "canal_instance_ack_delay": set(),
    "canal_instance_put_rows": set(),
    "canal_instance_get_rows": set(),
    "canal_instance_ack_rows": set(),
    "canal_instance_client_packets": {"packetType"},
    "canal_instance_client_bytes": set(),
    "canal_instance_client_empty_batches": set(),
    "canal_instance_client_request_error": {"errorCode"},
    "canal_instance_client_request_latency": set(),  # (and le on its _bucket samples)
}


def _conf(tmp: Path, port: int) -> Path:
    return write_conf(tmp, "canal.destinations = example\n"
                      f"canal.file.data.dir = {tmp / 'data'}\n"
                      "canal.file.flush.period = 100\n"
                      "canal.instance.memory.buffer.size = 1024\n"  # not the defaults: the store labels show these
                      "canal.instance.memory.batch.mode = ITEMSIZE\n",
                      {"example": source(port, "canal_test\\\\.metrics_t")})


def _start(server: CanalServerWithEmbedded, conf: Path) -> CanalInstance:
    canal = CanalConfig.load(conf)
    inst = CanalInstance.from_config(canal, canal.instance("example"))
    assert isinstance(inst, CanalInstance)
    server.start(inst)
    # the dump has begun (its first events arrived): the start position is fixed, later writes are seen
    deadline = time.monotonic() + 20
    while inst.parser.received_bytes == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert inst.parser.received_bytes > 0, inst.parser.last_error
    return inst


@pytest.fixture
def table(admin_conn: Any) -> Iterator[str]:
    with scratch_table(admin_conn, TABLE, "(id INT PRIMARY KEY, v VARCHAR(20))") as name:
        yield name


def _scrape(port: int) -> tuple[str, dict[str, list[tuple[str, dict[str, str], float]]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    fams = {f.name: [(s.name, s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)}
    return text, fams


def _value(fams: dict, family: str, **labels: str) -> float:
    hits = [v for _, lab, v in fams[family] if all(lab.get(k) == x for k, x in labels.items())]
    assert len(hits) == 1, (family, labels, fams.get(family))
    return hits[0]


def _wait_value(port: int, family: str, want: float, timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        _, fams = _scrape(port)
        if _value(fams, family, destination="example") >= want or time.monotonic() > deadline:
            return fams
        time.sleep(0.1)


def _entry(raw: bytes) -> Any:
    return CanalEntry.from_bytes(raw).entry


def test_metrics_of_a_live_instance(mariadb_settings: Any, admin_conn: Any, table: str, tmp_path: Path) -> None:
    conf = _conf(tmp_path, mariadb_settings.port)
    server = CanalServerWithEmbedded()
    metrics = MetricsServer(server, "127.0.0.1", 0, cache_seconds=0)  # each scrape renders: values of now
    metrics.start()
    client = ClientIdentity("example", 1001, "")
    try:
        _start(server, conf)
        server.subscribe(client)
        # eight transactions (autocommit): rows per statement 5, 3, 1 | 2, 1, 1, 1, 1 = 15
        with admin_conn.cursor() as cur:
            cur.execute(f"INSERT INTO {TABLE} VALUES (1,'a'),(2,'a'),(3,'a'),(4,'a'),(5,'a')")
            cur.execute(f"UPDATE {TABLE} SET v = 'b' WHERE id <= 3")
            cur.execute(f"INSERT INTO {TABLE} VALUES (6,'a')")
            time.sleep(2.1)  # binlog times are in seconds: what is got below is >= 2 s older than the last put
            cur.execute(f"DELETE FROM {TABLE} WHERE id IN (4, 5)")
            for i in range(7, 11):
                cur.execute(f"INSERT INTO {TABLE} VALUES (%s, 'a')", (i,))
        written, got_rows, acked_rows = 15, 5 + 3 + 1, 5 + 3

        # get one entry per batch (ITEMSIZE 1) through the end of the third transaction; ack through the end of
        # the second. Other tests' transactions may add empty BEGIN/END pairs in between: no rows, no matter.
        batches: list[tuple[int, Any]] = []
        row_changes = 0
        ack_upto = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msg = server.get_without_ack(client, 1, 5)
            if msg.empty:
                continue
            (e,) = [_entry(raw) for raw in msg.raw_entries]
            batches.append((msg.batch_id, e))
            if e.entryType == ROWDATA and e.header.tableName == "metrics_t":
                row_changes += 1
                assert len(pb.RowChange.FromString(e.storeValue).rowDatas) == [5, 3, 1][row_changes - 1]
            if e.entryType == TRANSACTIONEND and row_changes == 2 and ack_upto is None:
                ack_upto = msg.batch_id
            if e.entryType == TRANSACTIONEND and row_changes == 3:
                break
        assert row_changes == 3 and ack_upto is not None, batches
        for batch_id, _ in batches:
            if batch_id > ack_upto:
                break
            server.ack(client, batch_id)

        cm = metrics.client_metrics  # what the TCP server reports through its hooks
        cm.packet_received("example", "SUBSCRIPTION")
        cm.packet_received("example", "GET")
        cm.empty_batch("example")
        cm.bytes_sent("example", 1234)
        cm.request_error("example", 400)
        cm.request_latency("example", "GET", 0.003)

        _wait_value(metrics.port, "canal_instance_put_rows", written)
        text, fams = _scrape(metrics.port)
        d = {"destination": "example"}

        # every family of docs/canal-compat.md §7, with its labels, under Canal's bare counter names
        for family, extra in FAMILIES.items():
            samples = fams.get(family)
            assert samples, f"{family} missing or without samples"
            for name, labels, _ in samples:
                own = set(labels) - ({"le"} if name.endswith("_bucket") else set())
                assert labels.get("destination") == "example" and own == {"destination", *extra}, (name, labels)
        assert "_total" not in text and "_created" not in text
        assert f'canal_instance_put_rows{{destination="example"}} {float(written)}\n' in text
        assert "# TYPE canal_instance_put_rows counter\n" in text

        assert _value(fams, "canal_instance", mode="spring", **d) == 1
        assert _value(fams, "canal_instance_subscriptions", **d) == 1
        assert _value(fams, "canal_instance_store", batchMode="ITEMSIZE", size="1024", **d) == 1
        assert _value(fams, "canal_instance_parser_mode", parallel="false", **d) == 1

        # rows: exactly what our SQL wrote, what we got, what we acked
        assert _value(fams, "canal_instance_put_rows", **d) == written
        assert _value(fams, "canal_instance_get_rows", **d) == got_rows
        assert _value(fams, "canal_instance_ack_rows", **d) == acked_rows
        # sequences: 8 transactions x (BEGIN, ROWDATA, END) = 24 entries, 6 acked (plus any empty transactions)
        put_seq = _value(fams, "canal_instance_store_produce_seq", **d)
        ack_seq = _value(fams, "canal_instance_store_consume_seq", **d)
        assert put_seq >= 23 and ack_seq >= 5 and put_seq - ack_seq >= 18
        assert ack_seq == ack_upto - 1  # one entry per batch, batch ids from 1, sequences from 0
        assert _value(fams, "canal_instance_store_produce_mem", **d) > _value(
            fams, "canal_instance_store_consume_mem", **d) > 0
        assert _value(fams, "canal_instance_transactions", **d) >= 8  # every commit the dump thread saw
        assert _value(fams, "canal_instance_received_binlog_bytes", parser="0", **d) > 1000
        assert _value(fams, "canal_instance_publish_blocking_time", parser="0", **d) > 0
        assert _value(fams, "canal_instance_sink_blocking_time", **d) == 0  # 1024 slots never filled

        # delays (ms): all from one clock reading, so their order is exact
        traffic = _value(fams, "canal_instance_traffic_delay", **d)
        put, get, ack = (_value(fams, f"canal_instance_{k}_delay", **d) for k in ("put", "get", "ack"))
        assert 0 <= traffic <= put < 30_000  # the dump thread has seen at least the last stored event
        assert get - put >= 2000  # got through the 3rd transaction, 2+ s before the last put
        assert ack >= get and ack < 60_000

        # the client metrics
        assert _value(fams, "canal_instance_client_packets", packetType="GET", **d) == 1
        assert _value(fams, "canal_instance_client_packets", packetType="SUBSCRIPTION", **d) == 1
        assert _value(fams, "canal_instance_client_empty_batches", **d) == 1
        assert _value(fams, "canal_instance_client_bytes", **d) == 1234
        assert _value(fams, "canal_instance_client_request_error", errorCode="400", **d) == 1
        assert _value(fams, "canal_instance_client_request_latency", le="2.5", **d) == 0
        assert _value(fams, "canal_instance_client_request_latency", le="10.0", **d) == 1

        # restart: the series go with the stopped instance; the new one counts from zero (not on top of 15)
        server.stop("example")
        _, fams = _scrape(metrics.port)
        assert not fams["canal_instance_put_rows"] and not fams["canal_instance"]
        _start(server, conf)
        server.subscribe(client)
        rest = 1 + 2 + 4  # resumes after the acked 2nd transaction: transactions 3..8 come again
        _wait_value(metrics.port, "canal_instance_put_rows", rest)
        time.sleep(0.5)  # nothing more may come
        _, fams = _scrape(metrics.port)
        assert _value(fams, "canal_instance_put_rows", **d) == rest
        assert _value(fams, "canal_instance_get_rows", **d) == 0 and _value(fams, "canal_instance_ack_rows", **d) == 0
        # the client metrics belong to the server, not to the instance: they carry on
        assert _value(fams, "canal_instance_client_bytes", **d) == 1234
    finally:
        metrics.stop()
        server.stop_all()
