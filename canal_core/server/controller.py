"""CanalController: the destinations of one conf directory, kept running (Canal's CanalController).

Starts every destination of canal.destinations (plus, with canal.auto.scan, every directory of the conf
dir holding an instance.properties) in one embedded server; with auto scan, every
canal.auto.scan.interval seconds a new directory starts its destination, an edited or touched
instance.properties restarts it, a removed one stops it. A destination that fails to start is logged
and retried at the next scan; the others keep running.

With ``tcp=True`` (the canal-server process) it also serves Canal's TCP protocol on canal.ip:canal.port
with canal.user / canal.passwd (canal.serverMode = tcp). The port is bound before any destination
starts, so a busy port fails the start at once; clients are accepted once the destinations run.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from ..instance.config import (
    CanalConfig,
    ConfigError,
    ScannedDestination,
    ServerMode,
    diff_destinations,
    scan_destinations,
)
from ..instance.instance import CanalInstance
from .auth import AuthConfigError
from .embedded import CanalServerWithEmbedded
from .metrics import MetricsServer
from .tcp import CanalTcpServer, ClientHooks

log = logging.getLogger(__name__)


class CanalController:
    def __init__(self, conf_dir: str | Path, *, overrides: dict[str, str] | None = None, tcp: bool = False,
                 tcp_hooks: ClientHooks | None = None) -> None:
        self.conf_dir = Path(conf_dir)
        self.overrides = overrides
        self.canal = CanalConfig.load(self.conf_dir, overrides=overrides)
        self.server = CanalServerWithEmbedded()
        self.tcp: CanalTcpServer | None = None
        self.metrics: MetricsServer | None = None
        if tcp:
            # the server process also exports Canal's Prometheus metrics on canal.metrics.pull.port
            self.metrics = MetricsServer(self.server, self.canal.ip, self.canal.metrics_pull_port)
            self.tcp = self._tcp_server(tcp_hooks or self.metrics.client_metrics)
        self.failed: dict[str, str] = {}  # destination -> last error, retried at the next scan
        self._scanned: dict[str, ScannedDestination] = {}
        self._stop = threading.Event()
        self._scanner: threading.Thread | None = None
        self._lock = threading.Lock()

    def _wanted(self) -> dict[str, ScannedDestination]:
        scanned = scan_destinations(self.canal.conf_dir)
        names = set(self.canal.destinations)
        if self.canal.auto_scan:
            names |= set(scanned)
        return {n: scanned[n] for n in names if n in scanned}

    def _tcp_server(self, hooks: ClientHooks | None) -> CanalTcpServer | None:
        c = self.canal
        if c.server_mode is not ServerMode.TCP:
            log.warning("canal.serverMode = %s: canal-core serves tcp only; no TCP server started", c.server_mode)
            return None
        try:
            return CanalTcpServer(self.server, host=c.ip, port=c.port, user=c.user, passwd=c.passwd, hooks=hooks)
        except AuthConfigError as e:
            raise ConfigError(f"{c.conf_file}: {e}", file=str(c.conf_file), key="canal.passwd",
                              value=c.passwd) from None

    @property
    def tcp_address(self) -> tuple[str, int] | None:
        return self.tcp.address if self.tcp is not None else None

    def start(self) -> None:
        """Raises OSError when the TCP port cannot be bound (nothing is started then)."""
        if self.tcp is not None:
            self.tcp.bind()
        if self.metrics is not None:
            try:
                self.metrics.start()
            except OSError as e:  # as Canal: the server runs on without its metrics endpoint
                log.warning("metrics on %s:%d not started: %s", self.canal.ip or "0.0.0.0",
                            self.canal.metrics_pull_port, e)
        with self._lock:
            self._scanned = self._wanted()
            for name in sorted(self._scanned):
                self._start_one(name)
        if self.tcp is not None:
            self.tcp.start()
        if self.canal.auto_scan:
            self._scanner = threading.Thread(target=self._scan_loop, name="canal-auto-scan", daemon=True)
            self._scanner.start()

    def _start_one(self, name: str) -> None:
        try:
            inst = CanalInstance.from_config(self.canal, self.canal.instance(name))
            self.server.start(inst)
            self.failed.pop(name, None)
            log.info("destination %s started", name)
        except (ConfigError, OSError, ValueError) as e:
            self.failed[name] = str(e)
            log.error("destination %s failed to start: %s", name, e)

    def _scan_loop(self) -> None:
        while not self._stop.wait(self.canal.auto_scan_interval):
            self.scan_once()

    def scan_once(self) -> None:
        """One auto-scan pass (public so tests and operators can force one)."""
        with self._lock:
            new = self._wanted()
            diff = diff_destinations(self._scanned, new)
            for name in diff.removed:
                log.info("destination %s removed from %s: stopping", name, self.conf_dir)
                self.server.stop(name)
                self.failed.pop(name, None)
            for name in diff.changed:
                log.info("destination %s changed: restarting", name)
                self.server.stop(name)
                self._start_one(name)
            for name in diff.added:
                self._start_one(name)
            for name in list(self.failed):
                if name in new and name not in diff.added and name not in diff.changed \
                        and not self.server.is_start(name):
                    self._start_one(name)
            self._scanned = new

    def stop(self) -> None:
        """Stop the TCP server, then every destination; the meta managers flush on stop (clean SIGTERM
        shutdown). Closing the stores wakes any GET still blocked in a connection thread."""
        self._stop.set()
        if self.tcp is not None:
            self.tcp.stop(timeout=0)
        if self._scanner is not None:
            self._scanner.join(5)
        with self._lock:
            self.server.stop_all()
        if self.metrics is not None:
            self.metrics.stop()
        if self.tcp is not None and not self.tcp.join(5.0):
            log.warning("some client connections did not end within 5 s")
