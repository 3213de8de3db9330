"""The metrics exporter without a database: ClientMetrics, Canal's text naming, the collector over a store and
meta only (and over fake group parsers), and the HTTP endpoint."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from canal_core.instance.destination import Destination
from canal_core.meta import MemoryMetaManager
from canal_core.protocol.identity import ClientIdentity
from canal_core.protocol.position import EntryPosition
from canal_core.server.embedded import CanalServerWithEmbedded
from canal_core.server.metrics import ClientMetrics, MetricsServer, render
from canal_core.store.ring import MemoryEventStore, StoredEvent


def _families(text: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    return {f.name: [(s.name, s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)}


def _value(fams: dict, family: str, **labels: str) -> float:
    hits = [v for name, lab, v in fams[family] if not name.endswith("_created")
            and all(lab.get(k) == x for k, x in labels.items())]
    assert len(hits) == 1, (family, labels, fams.get(family))
    return hits[0]


def _event(i: int, rows: int = 1, ts: int = 0) -> StoredEvent:
    return StoredEvent(b"x" * 10, EntryPosition("mysql-bin.000001", 4 + i, timestamp=ts or None), 2, 1, rows)


def test_client_metrics_canal_names_and_labels() -> None:
    cm = ClientMetrics(lambda d: d == "d1")
    cm.packet_received("d1", "SUBSCRIPTION")
    cm.packet_received("d1", "GET")
    cm.packet_received("d1", "GET")
    cm.bytes_sent("d1", 100)
    cm.bytes_sent("d1", 23)
    cm.empty_batch("d1")
    cm.request_error("d1", 400)
    cm.request_error("d1", 0)  # no error: not counted (Canal counts codes > 0)
    for ms in (1, 5, 20, 50, 500):
        cm.request_latency("d1", "GET", ms / 1000)
    text = render(cm.collect()).decode()
    # Canal's (simpleclient 0.4) naming: bare counter names, no _total / _created
    assert "_total" not in text and "_created" not in text
    assert '# TYPE canal_instance_client_packets counter\n' in text
    assert 'canal_instance_client_packets{destination="d1",packetType="GET"} 2.0\n' in text
    fams = _families(text)
    assert _value(fams, "canal_instance_client_packets", destination="d1", packetType="SUBSCRIPTION") == 1
    assert _value(fams, "canal_instance_client_bytes", destination="d1") == 123
    assert _value(fams, "canal_instance_client_empty_batches", destination="d1") == 1
    assert _value(fams, "canal_instance_client_request_error", destination="d1", errorCode="400") == 1
    assert len(fams["canal_instance_client_request_error"]) == 1
    # milliseconds into Canal's buckets 2.5, 10, 25, 100
    buckets = {lab["le"]: v for name, lab, v in fams["canal_instance_client_request_latency"]
               if name.endswith("_bucket")}
    assert buckets == {"2.5": 1, "10.0": 2, "25.0": 3, "100.0": 4, "+Inf": 5}
    rest = {name: v for name, _, v in fams["canal_instance_client_request_latency"] if not name.endswith("_bucket")}
    assert rest == {"canal_instance_client_request_latency_count": 5,
                    "canal_instance_client_request_latency_sum": pytest.approx(576.0)}


def test_render_escapes_label_values() -> None:
    cm = ClientMetrics(lambda d: True)
    cm.packet_received('a"b\\c\nd', "GET")
    text = render(cm.collect()).decode()
    assert r'destination="a\"b\\c\nd"' in text
    fams = _families(text)
    assert _value(fams, "canal_instance_client_packets", destination='a"b\\c\nd') == 1


def test_client_metrics_only_for_known_destinations() -> None:
    """What a client sends cannot add series: events without a destination (the authentication exchange) or
    naming one the server does not run are not counted; the page does not grow with them."""
    cm = ClientMetrics(lambda d: d == "d1")
    cm.packet_received("d1", "GET")
    before = render(cm.collect())
    for i in range(2000):
        name = f"dest-{i}-" + "x" * 1000
        cm.packet_received(name, "SUBSCRIPTION")
        cm.packet_received(None, "CLIENTAUTHENTICATION")
        cm.bytes_sent(name, 10)
        cm.bytes_sent(None, 10)
        cm.empty_batch(name)
        cm.request_error(name, 400)
        cm.request_error(None, 400)
        cm.request_latency(name, "GET", 0.001)
        cm.request_latency("", "GET", 0.001)
    assert render(cm.collect()) == before


def test_collector_store_meta_and_blocking() -> None:
    server = CanalServerWithEmbedded()
    store = MemoryEventStore(4, 1024, "ITEMSIZE")
    server.start(Destination("d1", store, MemoryMetaManager()))
    server.subscribe(ClientIdentity("d1", 1001, ""))
    now = int(time.time() * 1000)
    store.put([_event(0, rows=2, ts=now - 5000), _event(1, rows=3, ts=now - 4000),
               _event(2, rows=1, ts=now - 3000), _event(3, rows=4, ts=now - 2000)])
    # a fifth put waits for room: the sink blocking time
    blocked = threading.Thread(target=store.put, args=([_event(4, rows=1, ts=now - 1000)],))
    blocked.start()
    time.sleep(0.2)
    got = store.get(2)  # events 0, 1
    store.ack(seq=got.end_seq)
    blocked.join(5)
    store.get(1)  # event 2
    metrics = MetricsServer(server, "127.0.0.1", 0)
    fams = _families(metrics.render().decode())
    d = {"destination": "d1"}
    assert _value(fams, "canal_instance", mode="spring", **d) == 1
    assert _value(fams, "canal_instance_subscriptions", **d) == 1
    assert _value(fams, "canal_instance_store", batchMode="ITEMSIZE", size="4", **d) == 1
    assert _value(fams, "canal_instance_put_rows", **d) == 11
    assert _value(fams, "canal_instance_get_rows", **d) == 6
    assert _value(fams, "canal_instance_ack_rows", **d) == 5
    assert _value(fams, "canal_instance_store_produce_seq", **d) == 4
    assert _value(fams, "canal_instance_store_consume_seq", **d) == 1
    assert _value(fams, "canal_instance_store_produce_mem", **d) == 50
    assert _value(fams, "canal_instance_store_consume_mem", **d) == 20
    assert _value(fams, "canal_instance_sink_blocking_time", **d) >= 150  # ms
    put, get, ack = (_value(fams, f"canal_instance_{k}_delay", **d) for k in ("put", "get", "ack"))
    assert 1000 <= put < 1000 + 5000
    assert get - put == pytest.approx(2000, abs=1) and ack - put == pytest.approx(3000, abs=1)
    # no parser: no parser families' samples, no traffic delay
    for fam in ("canal_instance_traffic_delay", "canal_instance_transactions", "canal_instance_parser_mode",
                "canal_instance_received_binlog_bytes", "canal_instance_publish_blocking_time"):
        assert fams[fam] == []
    # a stopped destination leaves no series behind
    server.stop("d1")
    fams = _families(metrics.render().decode())
    assert all(not samples for name, samples in fams.items() if name.startswith("canal_instance"))


def test_collector_clamps_delays_as_canal() -> None:
    server = CanalServerWithEmbedded()
    store = MemoryEventStore(8, 1024, "MEMSIZE")
    server.start(Destination("d1", store, MemoryMetaManager()))
    now = int(time.time() * 1000)
    store.put([_event(0, ts=now - 60_000)])
    store.try_get(1)
    store.put([_event(1, ts=now + 60_000)])  # a source clock ahead of ours: delay 0, not negative
    fams = _families(MetricsServer(server, "127.0.0.1", 0).render().decode())
    assert _value(fams, "canal_instance_put_delay", destination="d1") == 0
    assert _value(fams, "canal_instance_get_delay", destination="d1") >= 60_000
    # nothing acked yet: the ack time is the store's start, but never newer than the get's
    assert _value(fams, "canal_instance_ack_delay", destination="d1") >= 60_000


def test_group_parsers_are_labelled_one_to_n() -> None:
    class Group(Destination):
        pass

    server = CanalServerWithEmbedded()
    dest = Group("g", MemoryEventStore(8), MemoryMetaManager())
    now = int(time.time() * 1000)
    dest.parsers = [  # type: ignore[attr-defined]
        SimpleNamespace(transactions=3, received_bytes=100, sink_blocking=0.5, last_event_ms=now - 9000),
        SimpleNamespace(transactions=4, received_bytes=200, sink_blocking=0.25, last_event_ms=now - 2000),
    ]
    server.start(dest)
    fams = _families(MetricsServer(server, "127.0.0.1", 0).render().decode())
    assert _value(fams, "canal_instance_received_binlog_bytes", destination="g", parser="1") == 100
    assert _value(fams, "canal_instance_received_binlog_bytes", destination="g", parser="2") == 200
    assert _value(fams, "canal_instance_publish_blocking_time", destination="g", parser="1") == 500
    assert _value(fams, "canal_instance_publish_blocking_time", destination="g", parser="2") == 250
    assert _value(fams, "canal_instance_transactions", destination="g") == 7
    assert _value(fams, "canal_instance_parser_mode", destination="g", parallel="false") == 1
    assert 2000 <= _value(fams, "canal_instance_traffic_delay", destination="g") < 5000  # the merged stream


def test_http_endpoint_and_separate_registries() -> None:
    server = CanalServerWithEmbedded()
    server.start(Destination("d1", MemoryEventStore(8), MemoryMetaManager()))
    a = MetricsServer(server, "127.0.0.1", 0)
    b = MetricsServer(CanalServerWithEmbedded(), "127.0.0.1", 0)  # its own registry: no clash
    a.client_metrics.packet_received("d1", "GET")
    with a, b:
        for path in ("/metrics", "/"):
            with urllib.request.urlopen(f"http://127.0.0.1:{a.port}{path}", timeout=5) as r:
                assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
                fams = _families(r.read().decode())
            assert _value(fams, "canal_instance_store", destination="d1") == 1
            assert _value(fams, "canal_instance_client_packets", destination="d1", packetType="GET") == 1
        with urllib.request.urlopen(f"http://127.0.0.1:{b.port}/metrics", timeout=5) as r:
            fams = _families(r.read().decode())
        assert fams["canal_instance_store"] == [] and fams["canal_instance_client_packets"] == []
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{a.port}/nope", timeout=5)
        assert e.value.code == 404
        port = a.port
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
