"""Prometheus metrics of the Canal server on canal.metrics.pull.port (docs/canal-compat.md §7), under Canal's names.

- ``CanalCollector`` reads the live counters of every destination of a ``CanalServerWithEmbedded`` at scrape
  time: no polling thread, nothing cached. The counters live on the instance's parser and store, so a
  restarted destination starts again from zero, as Canal's (its collectors re-register the new instance).
- ``ClientMetrics``: the client-facing counters, fed by the TCP server per request (its ClientHooks).
- ``MetricsServer``: GET /metrics (and /, as Canal's HTTPServer answers any path) from its own registry, with
  bounded connections, a deadline per connection and the page rendered at most once a second.

The text is the Prometheus 0.0.4 format as Canal's exporter (simpleclient 0.4) writes it: counters under
their bare names (``canal_instance_put_rows``, not ``..._total``) and no ``_created`` samples. The
library's own encoder appends ``_total``, which would break every query and dashboard written for Canal,
so ``render`` formats the families that prometheus_client collects. docs/metrics.md lists the metrics.
"""

from __future__ import annotations

import gzip
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeGuard

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from ..instance.destination import Destination
from ..parse.parser import EventParser
from .embedded import CanalServerError, CanalServerWithEmbedded

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

DEST = "destination"

# name -> (type, help, extra labels after destination); help texts and labels as Canal's collectors
_FAMILIES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "canal_instance": ("gauge", "Canal instance", ("mode",)),
    "canal_instance_subscriptions": ("gauge", "Canal instance subscriptions", ()),
    "canal_instance_traffic_delay": ("gauge", "Traffic delay of canal instance in milliseconds", ()),
    "canal_instance_transactions": ("counter", "Transactions counter of canal instance", ()),
    "canal_instance_parser_mode": ("gauge", "Parser mode(parallel/serial) of instance", ("parallel",)),
    "canal_instance_received_binlog_bytes": ("counter", "Received binlog bytes", ("parser",)),
    "canal_instance_publish_blocking_time": ("counter", "Publish blocking time of dump thread in milliseconds",
                                             ("parser",)),
    "canal_instance_sink_blocking_time": ("counter", "Total sink blocking time", ()),
    "canal_instance_store": ("gauge", "Canal instance info", ("batchMode", "size")),
    "canal_instance_store_produce_seq": ("counter", "Produced events counter of canal instance", ()),
    "canal_instance_store_consume_seq": ("counter", "Consumed events counter of canal instance", ()),
    "canal_instance_store_produce_mem": ("counter", "Produced mem bytes of canal instance", ()),
    "canal_instance_store_consume_mem": ("counter", "Consumed mem bytes of canal instance", ()),
    "canal_instance_put_delay": ("gauge", "Traffic delay of canal instance put", ()),
    "canal_instance_get_delay": ("gauge", "Traffic delay of canal instance get", ()),
    "canal_instance_ack_delay": ("gauge", "Traffic delay of canal instance ack", ()),
    "canal_instance_put_rows": ("counter", "Put table rows of canal instance", ()),
    "canal_instance_get_rows": ("counter", "Got table rows of canal instance", ()),
    "canal_instance_ack_rows": ("counter", "Acked table rows of canal instance", ()),
}

# every destination is built from its instance.properties: Canal's CanalInstanceWithSpring ("manager" is
# canal-admin's mode, which canal-core does not implement)
INSTANCE_MODE = "spring"
# the parser decodes, converts and sinks on its dump thread whatever canal.instance.parser.parallel says
PARSER_PARALLEL = "false"


class CanalCollector:
    """The instance metrics of every running destination, read when scraped."""

    def __init__(self, server: CanalServerWithEmbedded) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        for name, (kind, doc, labels) in _FAMILIES.items():
            cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            families[name] = cls(name, doc, labels=[DEST, *labels])
        for dest_name in sorted(self.server.destinations()):
            try:
                samples = self._samples(dest_name)
            except CanalServerError:
                continue  # stopped between the listing and now
            except Exception:  # one broken destination must not cost the scrape of the others
                log.warning("metrics of destination %s unavailable", dest_name, exc_info=True)
                continue
            for family, label_values, value in samples:
                families[family].add_metric([dest_name, *label_values], value)
        yield from families.values()

    def _samples(self, name: str) -> list[tuple[str, tuple[str, ...], float]]:
        """(family, label values after destination, value): all read first, so that a failure adds nothing."""
        dest = self.server._dest(name)  # the server's own lookup (raises CanalServerError once stopped)
        store = dest.store
        st = store.stats()
        out: list[tuple[str, tuple[str, ...], float]] = [
            ("canal_instance", (INSTANCE_MODE,), 1.0),
            ("canal_instance_subscriptions", (), float(len(dest.meta.list_all_subscribe(name)))),
            ("canal_instance_store", (store.batch_mode.value, str(store.buffer_size)), 1.0),
            ("canal_instance_store_produce_seq", (), float(st.put_seq)),
            ("canal_instance_store_consume_seq", (), float(st.ack_seq)),  # Canal: the ack sequence
            # Canal exports these in MEMSIZE mode only; this store counts bytes in both modes
            ("canal_instance_store_produce_mem", (), float(st.put_mem)),
            ("canal_instance_store_consume_mem", (), float(st.ack_mem)),
            ("canal_instance_put_rows", (), float(st.put_rows)),
            ("canal_instance_get_rows", (), float(st.get_rows)),
            ("canal_instance_ack_rows", (), float(st.ack_rows)),
            ("canal_instance_sink_blocking_time", (), st.blocking_time * 1000.0),
        ]
        # Canal's clamping: get is never newer than put, ack never newer than get (a client that has not
        # consumed since the start must not show a smaller delay than the put), and never negative
        now = st.snapshot_time
        put = st.put_exec_time
        got = min(st.get_exec_time, put)
        acked = min(st.ack_exec_time, got)
        out += [("canal_instance_put_delay", (), float(max(0, now - put))),
                ("canal_instance_get_delay", (), float(max(0, now - got))),
                ("canal_instance_ack_delay", (), float(max(0, now - acked)))]

        parsers = _parsers(dest)
        if parsers:
            out.append(("canal_instance_parser_mode", (PARSER_PARALLEL,), 1.0))
            out.append(("canal_instance_transactions", (), float(sum(p.transactions for _, p in parsers))))
            for label, p in parsers:
                out.append(("canal_instance_received_binlog_bytes", (label,), float(p.received_bytes)))
                out.append(("canal_instance_publish_blocking_time", (label,), p.sink_blocking * 1000.0))
            latest = max(p.last_event_ms for _, p in parsers)
            if latest:  # nothing received yet: no delay to tell (Canal would show now - 0)
                out.append(("canal_instance_traffic_delay", (), float(max(0, now - latest))))
        return out


def _parsers(dest: Destination) -> list[tuple[str, EventParser]]:
    """(parser label, parser): "0" for the one parser of an instance, "1".."n" for the sources of a group
    instance (Canal's labels)."""
    if dest.parsers:
        return [(str(i + 1), p) for i, p in enumerate(dest.parsers)]
    return [("0", dest.parser)] if dest.parser is not None else []


class ClientMetrics:
    """The client_* metrics (Canal's PrometheusClientInstanceProfiler), fed by the TCP server: one call per
    request or response, from any thread.

    Labelled series exist only for destinations ``is_known`` accepts (the server's running ones): an event
    with no destination (the authentication exchange, which Canal does not count either, or a request that
    names none) or naming any other destination is not counted, so what clients send cannot add series.

    As in Canal, a GET answered with an empty batch counts in ``empty_batch`` only, not in
    ``packet_received`` (call one of the two for a GET)."""

    def __init__(self, is_known: Callable[[str], bool]) -> None:
        self._is_known = is_known
        self._packets = Counter("canal_instance_client_packets", "Total packets sent to client.",
                                [DEST, "packetType"], registry=None)
        self._bytes = Counter("canal_instance_client_bytes", "Total bytes sent to client.", [DEST], registry=None)
        self._empty = Counter("canal_instance_client_empty_batches", "Total empty batches sent to client.",
                              [DEST], registry=None)
        self._errors = Counter("canal_instance_client_request_error", "Total client request errors.",
                               [DEST, "errorCode"], registry=None)
        # Canal observes milliseconds into these buckets
        self._latency = Histogram("canal_instance_client_request_latency", "Client request latency.", [DEST],
                                  buckets=(2.5, 10.0, 25.0, 100.0), registry=None)

    def _known(self, destination: str | None) -> TypeGuard[str]:
        return destination is not None and destination != "" and self._is_known(destination)

    def packet_received(self, destination: str | None, packet_type: str) -> None:
        if self._known(destination):
            self._packets.labels(destination, packet_type).inc()

    def bytes_sent(self, destination: str | None, nbytes: int) -> None:
        if self._known(destination):
            self._bytes.labels(destination).inc(nbytes)

    def empty_batch(self, destination: str) -> None:
        if self._known(destination):
            self._empty.labels(destination).inc()

    def request_error(self, destination: str | None, error_code: int) -> None:
        # 0 is the protocol's "no error" (Canal counts codes > 0 only); the codes are the server's own
        if error_code > 0 and self._known(destination):
            self._errors.labels(destination, str(error_code)).inc()

    def request_latency(self, destination: str | None, packet_type: str, seconds: float) -> None:
        # Canal's histogram is per destination only: packet_type is part of the hook for other exporters
        if self._known(destination):
            self._latency.labels(destination).observe(seconds * 1000.0)

    def collect(self) -> Iterator[Metric]:
        for m in (self._packets, self._bytes, self._empty, self._errors, self._latency):
            yield from m.collect()


def render(metrics: Iterable[Metric]) -> bytes:
    """Prometheus text format 0.0.4 with Canal's (simpleclient 0.4) naming: a counter's samples under the
    family name, no ``_created`` samples. Handles the counter, gauge and histogram families used here."""
    out: list[str] = []
    for m in metrics:
        mtype = "untyped" if m.type == "unknown" else m.type
        doc = m.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {m.name} {doc}\n# TYPE {m.name} {mtype}\n")
        total, created = m.name + "_total", m.name + "_created"
        for s in m.samples:
            if s.name == created:
                continue
            name = m.name if s.name == total else s.name
            if s.labels:
                labels = ",".join(f'{k}="{_escape(v)}"' for k, v in s.labels.items())
                out.append(f"{name}{{{labels}}} {floatToGoString(s.value)}\n")
            else:
                out.append(f"{name} {floatToGoString(s.value)}\n")
    return "".join(out).encode()


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


# Bounds that keep the endpoint cheap whatever its clients do (docs/metrics.md, "The endpoint"):
# a scrape is one small request: a connection that has not been answered within this is cut (slow clients)
REQUEST_TIMEOUT = 10.0
# connections served at once; one more is answered 503 and closed at once
MAX_CONNECTIONS = 8
# scrapes this close together get the same rendered page: N scrapers cost one render, not N
CACHE_SECONDS = 1.0

_BUSY = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n"
         b"Retry-After: 1\r\nConnection: close\r\n\r\nbusy\n")


class MetricsServer:
    """Serves the metrics of ``server`` (and of ``client_metrics``, created if not given) over HTTP from its
    own registry, so that several servers can run in one process. ``port`` 0 picks a free port (see
    ``port`` after ``start``); an empty ``host`` listens on every address.

    At most ``max_connections`` connections are served at once, each cut ``request_timeout`` seconds after
    it was accepted; the page is rendered at most once per ``cache_seconds``."""

    def __init__(self, server: CanalServerWithEmbedded, host: str, port: int, *,
                 client_metrics: ClientMetrics | None = None, request_timeout: float = REQUEST_TIMEOUT,
                 max_connections: int = MAX_CONNECTIONS, cache_seconds: float = CACHE_SECONDS) -> None:
        self.host = host
        self._port = port
        self.client_metrics = client_metrics if client_metrics is not None else ClientMetrics(server.is_start)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(CanalCollector(server))
        self.registry.register(self.client_metrics)
        self.request_timeout = request_timeout
        self.max_connections = max_connections
        self.cache_seconds = cache_seconds
        self._page_lock = threading.Lock()
        self._page: bytes | None = None
        self._page_gz: bytes | None = None
        self._page_at = 0.0
        self.renders = 0  # pages rendered (not served from the cache)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1] if self._httpd is not None else self._port

    def render(self) -> bytes:
        return render(self.registry.collect())

    def page(self, gz: bool = False) -> bytes:
        """The page served: rendered again once ``cache_seconds`` old. Concurrent scrapes wait for the one
        render under way instead of rendering it each."""
        with self._page_lock:
            now = time.monotonic()
            if self._page is None or now - self._page_at >= self.cache_seconds:
                self._page, self._page_gz = self.render(), None
                self._page_at = time.monotonic()
                self.renders += 1
            if not gz:
                return self._page
            if self._page_gz is None:
                self._page_gz = gzip.compress(self._page)
            return self._page_gz

    def start(self) -> None:
        if self._httpd is not None:
            return
        self._httpd = _HTTPServer((self.host, self._port), _handler(self), max_connections=self.max_connections,
                                  request_timeout=self.request_timeout)
        self._thread = threading.Thread(target=self._httpd.serve_forever, name=f"canal-metrics-{self.port}",
                                        daemon=True)
        self._thread.start()
        log.info("metrics on http://%s:%d/metrics", self.host or "0.0.0.0", self.port)

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def __enter__(self) -> MetricsServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a slow scraper must not hold up stop()

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *, max_connections: int,
                 request_timeout: float) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self._slots = threading.BoundedSemaphore(max_connections)
        self.request_timeout = request_timeout
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            _refuse(request)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)  # the connection's thread releases the slot
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        # one deadline for the whole exchange: the socket timeout alone would let a client that sends a
        # byte now and then hold its slot for ever
        deadline = threading.Timer(self.request_timeout, _cut, (request,))
        deadline.daemon = True
        deadline.start()
        try:
            super().process_request_thread(request, client_address)
        finally:
            deadline.cancel()
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a scraper gone or cut at its deadline: not worth the traceback the default prints on stderr
        log.debug("metrics connection from %s failed", client_address, exc_info=True)


def _refuse(sock: socket.socket) -> None:
    try:
        sock.settimeout(1.0)
        sock.sendall(_BUSY)
    except OSError:
        pass


def _cut(sock: socket.socket) -> None:
    """Ends a connection past its deadline: its thread's blocked read or write returns at once."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _handler(metrics: MetricsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = metrics.request_timeout  # each read and write; _HTTPServer bounds the whole exchange

        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] not in ("/", "/metrics"):
                self.send_error(404)
                return
            gz = "gzip" in self.headers.get("Accept-Encoding", "")
            try:
                body = metrics.page(gz)
            except Exception as e:
                log.exception("metrics scrape failed")
                self.send_error(500, explain=str(e))
                return
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            if gz:
                self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("metrics %s: " + format, self.client_address[0], *args)

    return Handler
