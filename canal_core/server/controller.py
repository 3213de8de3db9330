"""CanalController: the destinations of one conf directory, kept running (Canal's CanalController).

Starts every destination of canal.destinations (plus, with canal.auto.scan, every directory of the conf
dir holding an instance.properties) in one embedded server; with auto scan, every
canal.auto.scan.interval seconds a new directory starts its destination, an edited or touched
instance.properties restarts it, a removed one stops it. A destination that fails to start is logged
and retried at the next scan; the others keep running.

With ``tcp=True`` (the canal-server process) it also serves Canal's TCP protocol on canal.ip:canal.port
with canal.user / canal.passwd (canal.serverMode = tcp). The port is bound before any destination
starts, so a busy port fails the start at once; clients are accepted once the destinations run.

HA (canal.zkServers set; docs/zookeeper.md "HA with ZooKeeper"): the server registers
``/otter/canal/cluster/{ip:port}`` (canal.register.ip or canal.ip, else this host's address; canal.port) and
runs one ServerRunningMonitor per destination instead of starting it: the destination's instance is started
only while this server holds ``{dest}/running`` (its ZooKeeper meta fenced by the monitor's fence) and stopped
when it loses it (dumping and serving stop; TCP clients get Canal's "should start first" and fail over). Auto
scan adds, restarts (stop + start: a fresh election, which the restarting server wins at once) and removes
monitors. ``stop()`` releases every running node after the instance flushed its meta (Canal's rule: a standby
takes over after its 5 s delay). Without canal.zkServers nothing of this runs.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
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
from ..meta import MetaStoreError, PeriodMixedMetaManager
from ..meta.zkclient import zk_servers
from ..meta.zkpayload import split_address
from .auth import AuthConfigError
from .embedded import CanalServerError, CanalServerWithEmbedded
from .metrics import MetricsServer
from .running import ServerRegistration, ServerRunningMonitor
from .tcp import CanalTcpServer, ClientHooks
from .throttle import AuthThrottle

log = logging.getLogger(__name__)


def local_address(toward: str = "") -> str:
    """This host's address for ZooKeeper when neither canal.register.ip nor canal.ip is set (Canal's
    AddressUtils.getHostIp): the hostname's address unless it is loopback, else the source address of a
    route toward ``toward`` (the first ZooKeeper host; a UDP connect sends nothing), else 127.0.0.1."""
    try:
        addr = socket.gethostbyname(socket.gethostname())
        if not addr.startswith("127."):
            return addr
    except OSError:
        pass
    for target in (toward, "192.0.2.1"):  # 192.0.2.1: TEST-NET, only used to pick a route
        if not target:
            continue
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((target, 9))
                return str(s.getsockname()[0])
        except OSError:
            continue
    return "127.0.0.1"


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
            self.metrics = MetricsServer(self.server, self.canal.metrics_pull_ip, self.canal.metrics_pull_port)
            self.tcp = self._tcp_server(tcp_hooks or self.metrics.client_metrics)
        self.failed: dict[str, str] = {}  # destination -> last error, retried at the next scan
        self._scanned: dict[str, ScannedDestination] = {}
        self._stop = threading.Event()
        self._scanner: threading.Thread | None = None
        self._lock = threading.Lock()
        # HA (canal.zkServers): monitors by destination, the registered address, when each became active
        self.monitors: dict[str, ServerRunningMonitor] = {}
        self.registration: ServerRegistration | None = None
        self.address: str | None = None
        self.active_since: dict[str, float] = {}  # destination -> time.time() of its on_start

    @property
    def ha(self) -> bool:
        """True when canal.zkServers is set: destinations run only where ZooKeeper elects this server."""
        return bool(self.canal.zk_servers)

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
            throttle = AuthThrottle(c.tcp_auth_backoff / 1000, c.tcp_auth_backoff_max / 1000)
            return CanalTcpServer(self.server, host=c.ip, port=c.port, user=c.user, passwd=c.passwd, hooks=hooks,
                                  auth_timeout=c.tcp_auth_timeout, max_connections=c.tcp_max_connections,
                                  max_request_bytes=c.tcp_max_request_bytes, throttle=throttle)
        except AuthConfigError as e:
            raise ConfigError(f"{c.conf_file}: {e}", file=str(c.conf_file), key="canal.passwd",
                              value=c.passwd) from None

    @property
    def tcp_address(self) -> tuple[str, int] | None:
        return self.tcp.address if self.tcp is not None else None

    def start(self) -> None:
        """Raises OSError when the TCP port cannot be bound (nothing is started then), MetaStoreError when
        canal.zkServers is set and ZooKeeper cannot be reached."""
        if self.tcp is not None:
            self.tcp.bind()
        if self.metrics is not None:
            try:
                self.metrics.start()
            except OSError as e:  # as Canal: the server runs on without its metrics endpoint
                log.warning("metrics on %s:%d not started: %s", self.canal.metrics_pull_ip or "0.0.0.0",
                            self.canal.metrics_pull_port, e)
        if self.ha:
            self._register()
        with self._lock:
            self._scanned = self._wanted()
            for name in sorted(self._scanned):
                self._add(name)
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

    # ---- destinations: directly, or through a running monitor (HA) -------------------------------

    def _add(self, name: str) -> None:
        if self.ha:
            self._start_monitor(name)
        else:
            self._start_one(name)

    def _remove(self, name: str) -> None:
        monitor = self.monitors.get(name)
        if monitor is not None:
            monitor.stop()  # on_stop (instance stopped, meta flushed while fenced), then the node is deleted
            # listed until it has left ZooKeeper entirely (running node, then its cluster node)
            self.monitors.pop(name, None)
        self.server.stop(name)
        self.failed.pop(name, None)

    def _register(self) -> None:
        c = self.canal
        port = self.tcp.address[1] if self.tcp is not None else c.port
        bind = c.ip if c.ip not in ("0.0.0.0", "::") else ""  # a wildcard bind names no address to publish
        zk_host = c.zk_servers.split("/", 1)[0].split(",")[0].rsplit(":", 1)[0].strip("[]")
        host = c.register_ip or bind or local_address(zk_host)
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if split_address(self.address) is None:
            raise ConfigError(f"{c.conf_file}: canal.register.ip / canal.ip {host!r} gives no ip:port",
                              file=str(c.conf_file), key="canal.register.ip", value=host)
        self.registration = ServerRegistration(zk_servers(c.zk_servers, c.zookeeper_auth), self.address,
                                               session_timeout_ms=c.zookeeper_session_timeout)
        try:
            self.registration.start()
        except MetaStoreError:
            self.registration = None
            raise
        log.info("registered in ZooKeeper %s as %s (session timeout %d ms)", c.zk_servers, self.address,
                 c.zookeeper_session_timeout)

    def _start_monitor(self, name: str) -> None:
        assert self.address is not None
        zk = zk_servers(self.canal.zk_servers, self.canal.zookeeper_auth)
        monitor = ServerRunningMonitor(zk, name, self.address, session_timeout_ms=self.canal.zookeeper_session_timeout)
        monitor.on_start = lambda: self._on_active(name, monitor)
        monitor.on_stop = lambda: self._on_inactive(name)
        try:
            monitor.start()
        except MetaStoreError as e:  # retried at the next scan
            self.failed[name] = str(e)
            log.error("destination %s: cannot stand for election: %s", name, e)
            return
        self.monitors[name] = monitor
        log.info("destination %s: standing for election in ZooKeeper as %s", name, self.address)

    # on the monitor's thread; must not take self._lock (scan_once holds it while stopping a monitor)
    def _on_active(self, name: str, monitor: ServerRunningMonitor) -> None:
        try:
            inst = CanalInstance.from_config(self.canal, self.canal.instance(name), fence=monitor.fence)
            if not isinstance(inst.meta, PeriodMixedMetaManager):
                log.warning("destination %s: HA with %s meta: a standby taking over will not see this server's "
                            "cursors (canal.instance.global.spring.xml = classpath:spring/default-instance.xml "
                            "keeps them in ZooKeeper)", name, type(inst.meta).__name__)
            self.server.start(inst)
        except (ConfigError, OSError, ValueError, MetaStoreError, CanalServerError) as e:
            self.failed[name] = str(e)
            log.error("destination %s failed to start: %s; releasing it to the other servers", name, e)
            monitor.release()
            return
        self.failed.pop(name, None)
        self.active_since[name] = time.time()
        log.info("destination %s started: active in ZooKeeper as %s (fence version %s)", name, self.address,
                 monitor.fence.version)

    def _on_inactive(self, name: str) -> None:
        self.active_since.pop(name, None)
        dest = self.server._destinations.get(name)
        try:
            self.server.stop(name)  # parser first (the dump connection closes), then meta flush and store
        except Exception:
            log.exception("destination %s: stopping failed", name)
            if dest is not None:
                dest.store.close()  # blocked GETs end: their clients fail over
        if dest is not None:
            log.info("destination %s stopped: no longer active here", name)

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
                self._remove(name)
            for name in diff.changed:
                log.info("destination %s changed: restarting", name)
                self._remove(name)
                self._add(name)
            for name in diff.added:
                self._add(name)
            for name in list(self.failed):
                # HA: a monitor whose start failed released the node and competes again by itself
                if name in new and name not in diff.added and name not in diff.changed \
                        and not self.server.is_start(name) and name not in self.monitors:
                    self._add(name)
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
            for name in sorted(self.monitors):
                # releases the running node after on_stop flushed the meta with the fence still held
                self._remove(name)
            self.server.stop_all()
        if self.registration is not None:
            self.registration.stop()
            self.registration = None
        if self.metrics is not None:
            self.metrics.stop()
        if self.tcp is not None and not self.tcp.join(5.0):
            log.warning("some client connections did not end within 5 s")
