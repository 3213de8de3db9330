"""The Canal connection the sensor drives, behind one interface (``CanalSource``).

``EmbeddedCanalSource`` hosts the destination's CanalInstance inside the process that evaluates the
sensor (the Dagster code server): one per destination per process, started on first use (never at import:
run processes import the same definitions and must not start a second parser). ``RemoteCanalSource`` talks to
a canal-server (``remote``) or to whichever server ZooKeeper says runs the destination (``cluster``) over
Canal's TCP protocol; entries are Canal's protobuf Entry bytes either way.

``epoch`` identifies the server incarnation: outstanding batch ids only mean something within one epoch.
After a restart (new code-server process) the server redelivers from its acked cursor, so the sensor must
neither ack nor roll back batch ids of an older epoch.
"""

from __future__ import annotations

import atexit
import fcntl
import logging
import os
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TextIO

if TYPE_CHECKING:  # pragma: no cover
    from canal_core.server.embedded import CanalServerWithEmbedded

    from .config import PipelineConfig

log = logging.getLogger(__name__)

POLL_SECONDS = 0.25  # one getWithoutAck waits at most this long for a full batch
RESTART_STOPPED_SECONDS = 300.0  # a parser stopped on an error is started again after this long


class SourceUnavailable(RuntimeError):
    """The Canal destination cannot serve (not startable, held by another process, stopped)."""


@dataclass(frozen=True, slots=True)
class SourceHealth:
    """Whether the source reads its database now; when not, what is wrong and what to do (one line)."""

    ok: bool = True
    problem: str = ""
    kind: str = ""          # access, unreachable, source-mismatch, stopped, config, unavailable, other
    since: float = 0.0      # epoch seconds the problem began (0: unknown)
    streaming: bool = True  # reading the binlog now (False while connecting: "no new changes" is not known yet)


@dataclass(slots=True)
class FetchedWindow:
    batch_ids: list[int] = field(default_factory=list)
    entries: list[bytes] = field(default_factory=list)
    rows: int = 0       # row changes (Canal's rowsCount) in the entries
    bytes: int = 0

    @property
    def empty(self) -> bool:
        return not self.batch_ids


class CanalSource(ABC):
    """Canal's streaming API, taken a window (several outstanding batches) at a time."""

    @property
    @abstractmethod
    def epoch(self) -> str:
        """Changes whenever the server/instance restarted (outstanding batch ids are then gone)."""

    @abstractmethod
    def get_window(self, max_rows: int, max_bytes: int, max_wait: float) -> FetchedWindow:
        """getWithoutAck small batches until ``max_rows`` rows or ``max_bytes`` bytes are taken or ``max_wait``
        seconds passed; the batches stay outstanding until ``ack`` / ``rollback``."""

    @abstractmethod
    def ack(self, batch_ids: Sequence[int]) -> None:
        """Ack the batches, oldest first (Canal requires that order)."""

    @abstractmethod
    def rollback(self) -> None:
        """Drop every outstanding batch: their entries come again, in order."""

    def outstanding(self) -> list[int] | None:
        """The batch ids taken and neither acked nor rolled back, oldest first; None when unknown."""
        return None

    def health(self) -> SourceHealth:
        """Whether the source reads its database now (evaluated afresh on every call)."""
        return SourceHealth()

    def close(self) -> None:  # noqa: B027 - optional hook
        pass

    # one source per destination per process, in a registry of each subclass's own
    _registry: dict[tuple[Any, ...], Any]
    _registry_lock = threading.Lock()
    _closed_at_exit: set[type] = set()

    @classmethod
    def registry_key(cls, config: PipelineConfig) -> tuple[Any, ...]:
        raise NotImplementedError

    @classmethod
    def for_config(cls, config: PipelineConfig) -> Self:
        """The process-wide source of the config's destination (created, not started, on first call); every
        one is closed when the process exits (an embedded instance flushes its acked cursors then)."""
        key = cls.registry_key(config)
        with cls._registry_lock:
            if cls not in CanalSource._closed_at_exit:  # once per class, however often the registry empties
                CanalSource._closed_at_exit.add(cls)
                atexit.register(cls.close_all)
            src = cls._registry.get(key)
            if src is None:
                src = cls._registry[key] = cls(config)  # type: ignore[call-arg]
            return src

    @classmethod
    def close_all(cls) -> None:
        with cls._registry_lock:
            sources = list(cls._registry.values())
            cls._registry.clear()
        for s in sources:
            s.close()


class EmbeddedCanalSource(CanalSource):
    """The destination's CanalInstance in this process, with TIMESTAMP text rendered in UTC."""

    _registry: dict[tuple[Any, ...], Any] = {}

    def __init__(self, config: PipelineConfig) -> None:
        from canal_core.protocol.identity import ClientIdentity

        self.config = config
        self.client = ClientIdentity(config.destination, config.canal.client_id)
        self._lock = threading.RLock()
        self._server: CanalServerWithEmbedded | None = None
        self._instance: Any = None
        self._epoch = ""
        self._lockfile: TextIO | None = None
        self._stamp = ""                     # conf_stamp the running instance was built from
        self._refused: SourceHealth | None = None  # an edited conf that does not load (the old one keeps running)

    @classmethod
    def registry_key(cls, config: PipelineConfig) -> tuple[Any, ...]:
        return (str(config.canal.conf_dir), config.destination, config.canal.client_id)

    # --- lifecycle ---------------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._server is not None

    def _ensure_started(self) -> CanalServerWithEmbedded:
        with self._lock:
            self._follow_conf()
            self._restart_stopped_parser()
            if self._server is not None:
                return self._server
            from canal_core.instance.config import ConfigError
            from canal_core.instance.instance import CanalInstance
            from canal_core.server.embedded import CanalServerWithEmbedded

            from .config import conf_stamp

            stamp = conf_stamp(self.config.canal.conf_dir, self.config.destination)
            try:
                canal = self.config.canal_config()
                inst_cfg = canal.instance(self.config.destination)
            except (ConfigError, OSError) as e:
                raise SourceUnavailable(f"the Canal conf of {self.config.destination} does not load: {e}") from e
            self._lock_data_dir(Path(inst_cfg.data_dir))
            try:
                # TIMESTAMP text in the pipeline's zone (UTC), not the process's local zone
                instance = CanalInstance.from_config(canal, inst_cfg, timezone=self.config.timezone)
                server = CanalServerWithEmbedded()
                server.start(instance)
                server.subscribe(self.client)
            except BaseException:
                self._unlock_data_dir()
                raise
            self._server, self._instance, self._stamp, self._refused = server, instance, stamp, None
            self._epoch = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
            log.info("embedded canal instance %s started (epoch %s)", self.config.destination, self._epoch)
            return server

    def _restart_stopped_parser(self) -> None:
        """A parser that stopped on an error retrying could not fix (a schema history or start position problem)
        waits for a person; once they may have acted, after RESTART_STOPPED_SECONDS, the instance is started anew
        (a new epoch), so a fixed problem clears without a reload. A still broken one stops again, visibly."""
        from canal_core.parse.health import ParserState

        if self._instance is None:
            return
        parsers = getattr(self._instance, "parsers", None) or [self._instance.parser]
        stopped = [p.health for p in parsers if p.health.state is ParserState.STOPPED and p.health.error is not None]
        if stopped and time.time() - max(h.since for h in stopped) >= RESTART_STOPPED_SECONDS:
            log.warning("the binlog parser of %s stopped (%s): starting the instance again", self.config.destination,
                        stopped[0].describe())
            self.close()

    def _follow_conf(self) -> None:
        """An edited canal.properties / instance.properties takes effect at once, as canal.auto.scan does for
        canal-server: the instance restarts with it (a new epoch: outstanding batches are gone and come again from
        the acked cursor). A conf that does not load is refused: the running instance keeps the old one and
        health() says why, naming the file."""
        if self._server is None:
            return
        from canal_core.instance.config import ConfigError

        from .config import conf_stamp

        stamp = conf_stamp(self.config.canal.conf_dir, self.config.destination)
        if stamp == self._stamp:
            self._refused = None  # edited back to what runs
            return
        try:
            self.config.canal_config().instance(self.config.destination)
        except (ConfigError, OSError) as e:
            if self._refused is None or self._refused.problem != str(e):
                log.error("the edited Canal conf of %s is refused, the running instance keeps the previous one: %s",
                          self.config.destination, e)
                self._refused = SourceHealth(False, f"the edited Canal conf is refused (the running instance keeps "
                                             f"the previous one): {e}", "config", time.time())
            return
        log.warning("the Canal conf of %s changed: restarting its instance", self.config.destination)
        self.close()

    def _lock_data_dir(self, data_dir: Path) -> None:
        """One live instance per destination on this machine: a second process (a reloaded code server
        while the old one still runs) would fight over the replica connection and the meta file."""
        data_dir.mkdir(parents=True, exist_ok=True)
        fh = open(data_dir / "pipeline.lock", "a+")  # held (locked) for the instance lifetime
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise SourceUnavailable(f"destination {self.config.destination} is already hosted by {holder} "
                                    f"({data_dir / 'pipeline.lock'})") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()}\n")
        fh.flush()
        self._lockfile = fh

    def _unlock_data_dir(self) -> None:
        if self._lockfile is not None:
            self._lockfile.close()  # releases the flock
            self._lockfile = None

    def close(self) -> None:
        with self._lock:
            if self._server is not None:
                self._server.stop_all()
            self._server, self._instance, self._epoch = None, None, ""
            self._unlock_data_dir()

    # --- the streaming API -------------------------------------------------------------------------------

    @property
    def epoch(self) -> str:
        self._ensure_started()
        return self._epoch

    def _batch_size(self, remaining_bytes: int) -> int:
        sc = self._instance.store.batch_mode
        if getattr(sc, "value", sc) == "MEMSIZE":
            unit = self._instance.store.mem_unit
            return max(1, min(self.config.canal.batch_bytes, remaining_bytes) // unit)
        return self.config.canal.batch_entries

    def _store_exhausted(self) -> bool:
        """Everything in the store is taken and it cannot take more until an ack: waiting is pointless."""
        store = self._instance.store
        st = store.stats()
        if st.get_seq < st.put_seq:
            return False
        if getattr(store.batch_mode, "value", store.batch_mode) == "MEMSIZE":
            return st.put_mem - st.ack_mem >= store.buffer_size * store.mem_unit * 0.9
        return st.put_seq - st.ack_seq >= store.buffer_size

    def get_window(self, max_rows: int, max_bytes: int, max_wait: float) -> FetchedWindow:
        server = self._ensure_started()
        out = FetchedWindow()
        deadline = time.monotonic() + max(0.0, max_wait)
        with self._lock:
            while out.rows < max_rows and out.bytes < max_bytes:
                left = deadline - time.monotonic()
                msg = server.get_without_ack(self.client, self._batch_size(max_bytes - out.bytes),
                                             timeout=max(0.0, min(left, POLL_SECONDS)))
                if not msg.empty:
                    out.batch_ids.append(msg.batch_id)
                    out.entries.extend(msg.raw_entries)
                    out.rows += sum(e.rows for e in msg.events)
                    out.bytes += sum(len(e) for e in msg.raw_entries)
                if left <= 0 or (msg.empty and self._store_exhausted()):
                    break
        return out

    def ack(self, batch_ids: Sequence[int]) -> None:
        server = self._ensure_started()
        with self._lock:
            for b in batch_ids:
                server.ack(self.client, b)

    def rollback(self) -> None:
        server = self._ensure_started()
        with self._lock:
            server.rollback(self.client)

    def outstanding(self) -> list[int] | None:
        server = self._ensure_started()
        with self._lock:
            return list(server.list_batch_ids(self.client))

    def health(self) -> SourceHealth:
        with self._lock:
            self._follow_conf()
            if self._refused is not None:
                return self._refused
            if self._instance is None:
                return SourceHealth(False, "the embedded Canal instance is not started", "unavailable")
            parsers = getattr(self._instance, "parsers", None) or [self._instance.parser]
        props = self.config.canal.conf_dir / self.config.destination / "instance.properties"
        healths = [parser_health(p, props) for p in parsers]
        problems = [h for h in healths if not h.ok]
        if not problems:
            return SourceHealth(streaming=all(h.streaming for h in healths))
        first = min(problems, key=lambda h: h.since or time.time())
        return SourceHealth(False, "; ".join(h.problem for h in problems), first.kind, first.since)


class RemoteCanalSource(CanalSource):
    """A canal-server over Canal's TCP protocol (canal_core.client.ClusterConnector): ``remote`` names the
    server(s) by ``canal.address`` (host:port, or a comma-separated list tried in turn), ``cluster`` finds the
    server running the destination in ZooKeeper (``canal.zk_servers``) and follows it when another takes over.

    Every (re)connection rolls back, so the batches of the previous connection are gone: it starts a new
    epoch, and the sensor neither acks nor rolls back their ids (their entries come again from the cursor).
    The server renders TIMESTAMP text in its own zone (as Canal's JVM does): run it with TZ=UTC."""

    _registry: dict[tuple[Any, ...], Any] = {}

    def __init__(self, config: PipelineConfig) -> None:
        from canal_core.client.connector import ClusterConnector

        self.config = config
        c = config.canal
        self._zk: Any = None
        if c.mode == "cluster":
            addresses: Any = self._zk_addresses
        else:
            addresses = [a.strip() for a in c.address.split(",") if a.strip()]
        self._conn = ClusterConnector(addresses, config.destination, c.username, c.password,
                                      client_id=c.client_id, retries=3, backoff=1.0, max_backoff=5.0)
        self._lock = threading.RLock()
        self._seen: Any = None  # the SimpleConnector of the current epoch
        self._epoch = ""
        self._unacked: list[int] = []  # this epoch's batches taken and not yet acked / rolled back

    @classmethod
    def registry_key(cls, config: PipelineConfig) -> tuple[Any, ...]:
        c = config.canal
        return (c.mode, c.address or c.zk_servers, config.destination, c.client_id)

    def _zk_addresses(self) -> list[tuple[str, int]]:
        if self._zk is None:  # started on first use, never at import (run processes import this module)
            from canal_core.client.zookeeper import ServerDiscovery

            c = self.config.canal
            self._zk = ServerDiscovery(c.zk_servers, self.config.destination, allowed=c.zk_allowed.split(","))
            self._zk.start()
        return self._zk.addresses()

    def _call(self, op: Any) -> Any:
        """One connector call; a connection failure beyond the connector's own retries is SourceUnavailable."""
        from canal_core.client.connector import CanalClientError

        with self._lock:
            try:
                self._conn.connect()
                if self._conn.current is not self._seen:
                    self._conn.subscribe()
                return op()
            except CanalClientError as e:
                raise SourceUnavailable(f"canal server for {self.config.destination}: {e}") from e
            finally:
                if self._conn.current is not self._seen:  # connected anew (or failed over): batches are gone
                    self._seen = self._conn.current
                    self._unacked = []
                    self._epoch = uuid.uuid4().hex[:12] if self._seen is not None else ""

    @property
    def epoch(self) -> str:
        self._call(lambda: None)
        return self._epoch

    def get_window(self, max_rows: int, max_bytes: int, max_wait: float) -> FetchedWindow:
        from canal_core.protocol.proto import EntryProtocol_pb2 as ep

        out = FetchedWindow()
        deadline = time.monotonic() + max(0.0, max_wait)
        epoch = self.epoch
        while out.rows < max_rows and out.bytes < max_bytes:
            left = deadline - time.monotonic()
            wait_ms = max(1, int(min(max(left, 0.0), POLL_SECONDS) * 1000))
            msg = self._call(lambda w=wait_ms: self._conn.get_without_ack(self.config.canal.batch_entries, w))
            if self._epoch != epoch:  # failed over mid-window: what was taken is gone, start again
                out, epoch = FetchedWindow(), self._epoch
            if not msg.empty:
                out.batch_ids.append(msg.batch_id)
                self._unacked.append(msg.batch_id)
                out.entries.extend(msg.raw_entries)
                out.bytes += sum(len(e) for e in msg.raw_entries)
                for raw in msg.raw_entries:
                    h = ep.Entry.FromString(raw).header
                    out.rows += next((int(p.value) for p in h.props if p.key == "rowsCount"), 0)
            if left <= 0 or msg.empty:
                break
        return out

    def ack(self, batch_ids: Sequence[int]) -> None:
        for b in batch_ids:
            self._call(lambda b=b: self._conn.ack(b))
            if b in self._unacked:
                self._unacked.remove(b)

    def rollback(self) -> None:
        self._call(lambda: self._conn.rollback())
        self._unacked = []

    def outstanding(self) -> list[int] | None:
        with self._lock:
            return list(self._unacked)

    def status(self) -> str:
        a = self._conn.address
        return f"connected to {a[0]}:{a[1]}" if a else "not connected"

    def health(self) -> SourceHealth:
        # reaching the server is what this evaluation did (SourceUnavailable otherwise); the server's own parser
        # health is on its metrics endpoint and in its logs
        return SourceHealth()

    def close(self) -> None:
        with self._lock:
            try:
                self._conn.disconnect()
            except Exception:  # closing anyway
                pass
            self._seen, self._epoch = None, ""
            if self._zk is not None:
                self._zk.stop()
                self._zk = None


_HINTS = {
    "access": "check canal.instance.dbUsername / canal.instance.dbPassword in {props}, and that the account has "
              "SELECT, REPLICATION SLAVE, REPLICATION CLIENT",
    "unreachable": "is the database up at canal.instance.master.address in {props}?",
    "source-mismatch": "another server answers at canal.instance.master.address in {props}",
}


def parser_health(parser: Any, props: Path) -> SourceHealth:
    """One EventParser's health (canal_core.parse.health) as the sensor shows it, with what to do."""
    from canal_core.parse.health import ParserState

    h = parser.health
    if h.state is ParserState.STREAMING:
        return SourceHealth()
    if h.state is ParserState.CONNECTING:
        return SourceHealth(streaming=False)
    e = h.error
    if e is None:
        return SourceHealth(False, f"the binlog parser of {h.source} is not running", "stopped", h.since)
    hint = _HINTS.get(e.kind.value, "").format(props=props)
    text = f"{h.source}: {e.type_name}: {e.message}" + (f" ({hint})" if hint else "")
    if h.state is ParserState.STOPPED:
        return SourceHealth(False, f"the binlog parser stopped: {text}", "stopped", e.since)
    return SourceHealth(False, text, e.kind.value, e.since)


def make_source(config: PipelineConfig) -> CanalSource:
    """The configured Canal connection (canal.mode)."""
    if config.canal.mode == "embedded":
        return EmbeddedCanalSource.for_config(config)
    return RemoteCanalSource.for_config(config)
