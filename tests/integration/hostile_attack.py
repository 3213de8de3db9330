"""A combined attack on a real canal-server process while an honest client streams a workload from MariaDB.

At once: idle connections that never authenticate, failed logins with random destination names (each from an
address of its own, as a botnet would), a client that subscribes a catastrophic-backtracking filter, a client
whose blocking GET waits on a full store, and slow /metrics scrapers (the request dribbled in, the page read
slowly). Meanwhile an honest client streams every row of a workload. ``run_attack`` returns the figures;
the CI test (test_server_combined_attack.py) runs a short version, this module's ``main`` a longer one:

    .venv/bin/python -m tests.integration.hostile_attack --rows 100000 --failed-logins 50000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import signal
import socket
import string
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pymysql

from canal_core.client import SimpleConnector
from canal_core.protocol.proto import CanalProtocol_pb2 as cp
from canal_core.protocol.proto import EntryProtocol_pb2 as ep
from tests.integration.server_process import PASSWORD, USER, RawClient, ServerProcess, start_server, write_conf

TABLE = "hs_stream"
LONG_TABLE = "hs_regex_abcdefghijklmnopqrstuvwxyz_0123"  # schema.table of 51 characters and no '#'
BAD_FILTER = "(?:[a-z_.0-9]+)+#"  # exponential backtracking on a name it does not match
RSS_LIMIT_MB = 2048  # the watchdog kills the server beyond this: the machine is shared
PROBE_TIMEOUT = 5.0


@dataclass
class Sizes:
    idle: int = 2000
    failed_logins: int = 10_000
    scrapers: int = 100
    rows: int = 5000
    rows_per_transaction: int = 10
    bad_filter: bool = True
    login_threads: int = 8
    deadline: float = 90.0  # s for the honest client to get every row


@dataclass
class Figures:
    rows_expected: int = 0
    rows_got: int = 0
    in_order: bool = False
    gets: int = 0
    get_p50_ms: float = 0.0
    get_p99_ms: float = 0.0
    get_max_ms: float = 0.0
    stream_seconds: float = 0.0
    rss_start_mb: float = 0.0
    rss_max_mb: float = 0.0
    rss_end_mb: float = 0.0
    metrics_max_bytes: int = 0
    scrapes: int = 0
    scrapes_refused: int = 0  # connections the metrics endpoint reset or refused: its own limits
    failed_logins: int = 0
    failed_logins_per_s: float = 0.0
    idle_opened: int = 0
    idle_closed_by_server: int = 0
    stuck_get_batches: int = 0
    connections_at_end: int | None = None
    server_alive: bool = False
    errors: list[str] = field(default_factory=list)


def _conf(root: Path, mysql_port: int) -> Path:
    stream = f"canal.instance.filter.regex = canal_test\\\\.{TABLE}\n"
    return write_conf(root, mysql_port, {
        "example": stream,
        "stuck": stream + "canal.instance.memory.buffer.size = 16\n",  # full after a few rows, never acked
        "regex": "canal.instance.filter.regex = canal_test\\\\..*\n",
    })


def _tables(admin: dict[str, Any]) -> None:
    with pymysql.connect(**admin) as conn, conn.cursor() as cur:
        for t in (TABLE, LONG_TABLE):
            cur.execute(f"DROP TABLE IF EXISTS canal_test.{t}")
            cur.execute(f"CREATE TABLE canal_test.{t} (id INT PRIMARY KEY, v VARCHAR(32))")


def _source(i: int, second: int) -> str:
    """A distinct loopback address per attacker (Linux routes all of 127/8 to lo)."""
    return f"127.{second}.{i // 250 % 250}.{i % 250 + 1}"


def _percentile(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


def _responds(server: ServerProcess) -> bool:
    """A handshake arrives within PROBE_TIMEOUT (the server's threads get the GIL)."""
    try:
        RawClient(server.address, timeout=PROBE_TIMEOUT).close()
        return True
    except (OSError, AssertionError, EOFError):
        return False


class _Attack:
    def __init__(self, server: ServerProcess, sizes: Sizes, figures: Figures) -> None:
        self.server = server
        self.sizes = sizes
        self.fig = figures
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()
        self.idle: list[RawClient] = []

    def spawn(self, target: Any, *args: Any) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        t.start()
        self.threads.append(t)

    def error(self, text: str) -> None:
        with self.lock:
            if len(self.fig.errors) < 20:
                self.fig.errors.append(text)

    # ---- the attackers ----------------------------------------------------------------------------------

    def watch_rss(self) -> None:
        while not self.stop.wait(0.25):
            try:
                rss = self.server.rss_mb()
            except (OSError, KeyError):
                return
            self.fig.rss_max_mb = max(self.fig.rss_max_mb, rss)
            if rss > RSS_LIMIT_MB:
                self.error(f"server RSS {rss:.0f} MB > {RSS_LIMIT_MB} MB: killed")
                os.kill(self.server.pid, signal.SIGKILL)
                return

    def open_idle(self) -> None:
        for i in range(self.sizes.idle):
            try:
                self.idle.append(RawClient(self.server.address, source=_source(i, 1), handshake=False))
            except OSError as e:
                self.error(f"idle connection {i}: {e}")
                return
        self.fig.idle_opened = len(self.idle)

    def stuck_get(self) -> None:
        """Subscribed on 'stuck' (a 16-slot store): blocking GETs for 100,000 entries, never an ack."""
        try:
            c = RawClient(self.server.address, source="127.0.0.60", timeout=600)
            assert c.auth(destination="stuck", client_id="1001").error_code == 0
            while not self.stop.is_set():
                c.send_packet(cp.GET, cp.Get(destination="stuck", client_id="1001", fetch_size=100_000)
                              .SerializeToString())
                p = c.read(timeout=600)
                if p.type == cp.MESSAGES:
                    self.fig.stuck_get_batches += 1
        except (OSError, EOFError, AssertionError) as e:
            if not self.stop.is_set():
                self.error(f"stuck client: {e!r}")

    def subscribe_bad_filter(self) -> RawClient:
        c = RawClient(self.server.address, source="127.0.0.61")
        assert c.auth(destination="regex", client_id="1001").error_code == 0
        c.send_packet(cp.SUBSCRIPTION, cp.Sub(destination="regex", client_id="1001", filter=BAD_FILTER)
                      .SerializeToString())
        c.ack()  # accepted or refused (Ack 400): either is fine, the server must keep serving
        return c

    def failed_logins(self) -> None:
        letters = string.ascii_letters + string.digits
        t0 = time.monotonic()

        def one(i: int) -> None:
            if self.stop.is_set():
                return
            dest = "".join(random.choices(letters, k=random.randint(8, 200)))
            try:
                c = RawClient(self.server.address, source=_source(i, 2), timeout=30)
                try:
                    ack = c.auth(password="not-the-password", destination=dest, client_id="1001")
                    if ack.error_code == 400:
                        with self.lock:
                            self.fig.failed_logins += 1
                finally:
                    c.close()
            except (OSError, EOFError, AssertionError) as e:
                self.error(f"failed login {i}: {e!r}")

        with ThreadPoolExecutor(self.sizes.login_threads) as pool:
            list(pool.map(one, range(self.sizes.failed_logins)))
        self.fig.failed_logins_per_s = round(self.fig.failed_logins / max(1e-9, time.monotonic() - t0))

    def scraper(self, n: int) -> None:
        """Dribbles its request in, reads the page 4 KB at a time with pauses, again and again."""
        host, port = "127.0.0.1", int(self.server.metrics_url.rsplit(":", 1)[1].split("/")[0])
        request = b"GET /metrics HTTP/1.1\r\nHost: canal\r\nConnection: close\r\n\r\n"
        while not self.stop.is_set():
            try:
                with socket.create_connection((host, port), timeout=30) as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                    for i in range(0, len(request), 8):
                        s.sendall(request[i:i + 8])
                        if self.stop.wait(0.05):
                            return
                    size = 0
                    while chunk := s.recv(4096):
                        size += len(chunk)
                        if self.stop.wait(0.02):
                            return
                with self.lock:
                    self.fig.scrapes += 1
                    self.fig.metrics_max_bytes = max(self.fig.metrics_max_bytes, size)
            except OSError:
                with self.lock:
                    self.fig.scrapes_refused += 1
                self.stop.wait(1)

    # ---- the honest client ------------------------------------------------------------------------------

    def stream(self, admin: dict[str, Any], attacking: threading.Thread) -> None:
        """At least ``rows`` rows, and rows as long as ``attacking`` runs; then every one must have come."""
        target = [self.sizes.rows]
        got: list[int] = []
        latencies: list[float] = []
        failed: list[BaseException] = []
        conn = SimpleConnector(self.server.address, "example", USER, PASSWORD, so_timeout=10)
        conn.connect()
        conn.subscribe()

        def consume() -> None:
            try:
                deadline = None
                while len(got) < target[0] or writer.is_alive():
                    if not writer.is_alive():
                        deadline = deadline or time.monotonic() + self.sizes.deadline
                        if time.monotonic() > deadline:
                            break
                    t0 = time.monotonic()
                    msg = conn.get_without_ack(1000, 100)  # ms
                    latencies.append(time.monotonic() - t0)
                    for e in msg.entries:
                        if e.entryType == ep.ROWDATA and e.header.tableName == TABLE:
                            got.extend(int(rd.afterColumns[0].value)
                                       for rd in ep.RowChange.FromString(e.storeValue).rowDatas)
                    if not msg.empty:
                        conn.ack(msg.batch_id)
            except BaseException as e:  # reported in the figures
                failed.append(e)

        def write() -> None:
            with pymysql.connect(**admin) as w, w.cursor() as cur:
                k = self.sizes.rows_per_transaction
                written = 0
                while written < self.sizes.rows or attacking.is_alive():
                    cur.executemany(f"INSERT INTO canal_test.{TABLE} VALUES (%s, 'row')",
                                    [(i,) for i in range(written + 1, written + k + 1)])
                    w.commit()
                    written += k
                    target[0] = written
                    time.sleep(0.005)

        writer = threading.Thread(target=write, daemon=True)
        consumer = threading.Thread(target=consume, daemon=True)
        t0 = time.monotonic()
        writer.start()
        consumer.start()
        writer.join()
        consumer.join(self.sizes.deadline + 20)
        n = target[0]
        self.fig.stream_seconds = round(time.monotonic() - t0, 1)
        conn.disconnect()
        if failed:
            self.error(f"honest client: {failed[0]!r}")
        self.fig.rows_expected = n
        self.fig.rows_got = len(got)
        self.fig.in_order = got == list(range(1, n + 1))
        self.fig.gets = len(latencies)
        self.fig.get_p50_ms = round(_percentile(latencies, 0.5) * 1000, 1)
        self.fig.get_p99_ms = round(_percentile(latencies, 0.99) * 1000, 1)
        self.fig.get_max_ms = round(max(latencies, default=0.0) * 1000, 1)


def run_attack(mysql_port: int, admin: dict[str, Any], root: Path, sizes: Sizes) -> Figures:
    """Everything above against a fresh canal-server under ``root``; the server is stopped on return."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = sizes.idle + sizes.scrapers + sizes.login_threads + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    _tables(admin)
    fig = Figures()
    server = start_server(_conf(root, mysql_port), root / "logs")
    attack = _Attack(server, sizes, fig)
    try:
        fig.rss_start_mb = round(server.rss_mb(), 1)
        attack.spawn(attack.watch_rss)
        attack.open_idle()
        attack.spawn(attack.stuck_get)
        if sizes.bad_filter:
            bad = attack.subscribe_bad_filter()
            attack.idle.append(bad)
            with pymysql.connect(**admin) as w, w.cursor() as cur:  # a name the filter backtracks on
                cur.execute(f"INSERT INTO canal_test.{LONG_TABLE} VALUES (1, 'x')")
                w.commit()
            time.sleep(1)
            if not _responds(server):
                attack.error(f"the server stopped answering within {PROBE_TIMEOUT:g} s once a client subscribed "
                             f"the filter {BAD_FILTER} on destination 'regex': its matching is not linear-time")
                return fig
        for i in range(sizes.scrapers):
            attack.spawn(attack.scraper, i)
        logins = threading.Thread(target=attack.failed_logins, daemon=True)
        logins.start()
        attack.threads.append(logins)
        attack.stream(admin, logins)
        attack.stop.set()
        fig.idle_closed_by_server = sum(c.closed_by_server(0.001) for c in attack.idle)
        fig.connections_at_end = server.connections()
        fig.server_alive = server.alive() and _responds(server)
        if fig.server_alive:
            fig.rss_end_mb = round(server.rss_mb(), 1)
        return fig
    finally:
        attack.stop.set()
        for c in attack.idle:
            c.close()
        server.stop()
        for t in attack.threads:
            t.join(5)
        fig.rss_max_mb = round(fig.rss_max_mb, 1)


@contextmanager
def _workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="canal-attack-") as d:
        yield Path(d)


def main(argv: list[str] | None = None) -> int:
    from tests.conftest import _settings_from_env

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = Sizes()
    for name, value in asdict(defaults).items():
        if isinstance(value, bool):
            ap.add_argument(f"--{name.replace('_', '-')}", action=argparse.BooleanOptionalAction, default=value)
        else:
            ap.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    args = ap.parse_args(argv)
    sizes = Sizes(**{k: getattr(args, k) for k in asdict(defaults)})
    settings = _settings_from_env()
    with _workdir() as root:
        fig = run_attack(settings.port, settings.admin_kwargs(), root, sizes)
    print(json.dumps({"sizes": asdict(sizes), "figures": asdict(fig)}, indent=2))
    return 0 if not fig.errors and fig.in_order else 1


if __name__ == "__main__":
    raise SystemExit(main())
