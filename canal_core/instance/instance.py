"""One destination: parser -> sink -> store, with meta, as Canal's CanalInstanceWithSpring builds it.

The parser's restart position comes from the clients: a FailbackPositionManager over memory (while
running) and the minimum client cursor (after a restart), so a restart resumes from what consumers
acked, never from what merely reached the in-memory store (Canal's file-instance / memory-instance).
Before any client acked, it is where the destination first started reading (Canal would take the binlog's
end there and skip what was written meanwhile).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from pathlib import Path
from typing import Any

import pymysql

from ..entry.convert import EntryConverter
from ..meta import FileMixedMetaManager, MemoryMetaManager, MetaManager, meta_position_manager
from ..meta.period_mixed import PeriodMixedMetaManager
from ..meta.zkclient import zk_servers
from ..meta.zkfence import Fence
from ..parse.filter import TableFilter
from ..parse.history import SchemaHistory, format_position
from ..parse.parser import EventParser, ParserConfig
from ..parse.position import FailbackPositionManager, MemoryPositionManager, PositionManager, write_atomically
from ..protocol.position import EntryPosition, LogPosition
from ..sink import EntrySink, GroupSink
from ..store.ring import MemoryEventStore, StoredEvent
from .config import CanalConfig, InstanceConfig, MetaMode
from .destination import Destination

log = logging.getLogger(__name__)


class FirstStartPositionManager(PositionManager):
    """Where the destination first started reading (its schema history's bootstrap position), as the parse position
    of last resort: when no client has acked anything yet. Canal falls back to the binlog's end there, so what was
    written while a destination whose client had not acked yet was restarting was never read; here it is.

    The position carries no time and no server id: it was not recorded from an event, so the locator aligns it
    to a transaction boundary without the identity checks that compare an event's header."""

    def __init__(self, history: SchemaHistory, identity: Any) -> None:
        self.history = history
        self.identity = identity

    def get_latest(self, destination: str) -> LogPosition | None:
        boot = (self.history.store.read_meta() or {}).get("bootstrap") or {}
        if not boot.get("position"):
            return None
        pos = EntryPosition.from_json_dict(boot["position"])
        return LogPosition(self.identity, dataclasses.replace(pos, timestamp=None, server_id=None))

    def persist(self, destination: str, position: LogPosition) -> None:
        """Nothing: the clients' acks move the positions."""


class CanalInstance(Destination):
    parser: EventParser

    def __init__(self, name: str, parser_config: ParserConfig, *, store: MemoryEventStore, meta: MetaManager,
                 history: SchemaHistory, event_filter: Any = None, transaction_size: int = 1024,
                 filter_transaction_entry: bool = False, timezone: str | None = None,
                 bootstrap_empty_history: bool = False) -> None:
        super().__init__(name, store, meta, parser_config.master.identity)
        self.history = history
        self.sink = EntrySink(self._put, transaction_size=transaction_size,
                              filter_transaction_entry=filter_transaction_entry)
        self.positions = FailbackPositionManager(
            MemoryPositionManager(),
            FailbackPositionManager(meta_position_manager(meta),
                                    FirstStartPositionManager(history, parser_config.master.identity)))
        self.parser = EventParser(parser_config, sink=self.sink, history=history, positions=self.positions,
                                  converter_factory=lambda ident: EntryConverter(ident, timezone=timezone),
                                  event_filter=event_filter,
                                  restore_history=self._restore_history if bootstrap_empty_history else None)
        self.filter_listeners.append(self._replace_filter)

    def _restore_history(self, as_of: EntryPosition) -> None:
        """HA: a server taking a destination over resumes at a cursor another server wrote, with no schema
        history of its own yet. It then bootstraps one from the live schema at that position, as Canal's TSDB
        does when it holds nothing; a table changed since fails check_table_map loudly (not a misdecode)."""
        if self.history.empty:
            src = self.parser.source
            log.warning("%s: no local schema history: taking it from %s's live schema as of %s (a standby taking "
                        "over)", self.name, src.address, format_position(as_of))
            conn = pymysql.connect(host=src.host, port=src.port, user=src.user, password=src.password, ssl=src.ssl)
            try:
                self.history.bootstrap(conn, as_of, schemas=self.parser.config.bootstrap_schemas)
            finally:
                conn.close()
            return
        self.history.restore(as_of)

    def _put(self, entries: list[Any]) -> None:
        # blocks while the store is full: back-pressure on the parser
        self.store.put([StoredEvent.from_entry(e) for e in entries])

    def _replace_filter(self, table_filter: TableFilter) -> None:
        self.parser.filter.white = table_filter

    def start(self) -> None:
        super().start()
        self.parser.start()

    def stop(self) -> None:
        # the store closes before the parser is joined: a put waiting for room (no client reading) wakes on it
        self.parser.request_stop()
        self.store.close()
        self.parser.stop()
        super().stop()

    @classmethod
    def from_config(cls, canal: CanalConfig, instance: InstanceConfig, *, timezone: str | None = None,
                    fence: Fence | None = None) -> CanalInstance | GroupCanalInstance:
        """``timezone``: the zone of TIMESTAMP text in entries (None: this process's zone, as Canal's JVM).
        ``fence``: the destination's ServerRunningMonitor.fence, for ZooKeeper meta (HA; docs/zookeeper.md)."""
        data_dir = Path(instance.data_dir)  # {canal.file.data.dir}/{destination}
        meta: MetaManager
        if instance.meta_mode is MetaMode.MEMORY:
            meta = MemoryMetaManager()
        elif instance.meta_mode is MetaMode.PERIOD_MIXED:
            # default-instance.xml: memory + ZooKeeper (canal.zkServers, a client shared per server string)
            zk = zk_servers(instance.zk_servers, instance.zookeeper_auth)
            meta = PeriodMixedMetaManager(zk, flush_period_ms=instance.zookeeper_flush_period,
                                          fence=fence, session_timeout_ms=instance.zookeeper_session_timeout)
        else:
            # file-mixed: {canal.file.data.dir}/{dest}/meta.dat
            meta = FileMixedMetaManager(instance.file_data_dir, flush_period_ms=instance.meta_flush_period_ms)
        sc = instance.store_config()
        store = MemoryEventStore(sc.buffer_size, sc.buffer_memunit, sc.batch_mode.value, sc.ddl_isolation)
        if instance.is_group:
            return GroupCanalInstance(instance.destination, instance.parser_configs(), store=store, meta=meta,
                                      data_dir=data_dir, event_filter=instance.event_filter(),
                                      transaction_size=instance.transaction_size, timezone=timezone)
        history = SchemaHistory(data_dir / "history")
        return cls(instance.destination, instance.parser_config(), store=store, meta=meta, history=history,
                   event_filter=instance.event_filter(), transaction_size=instance.transaction_size,
                   filter_transaction_entry=instance.filter_config().get(
                       "canal.instance.filter.transaction.entry", "false") == "true", timezone=timezone,
                   bootstrap_empty_history=fence is not None)


class _AckedSourcePosition(PositionManager):
    """Parse positions of one group source: what the client acked from that source (after a restart)."""

    def __init__(self, group: GroupCanalInstance, source: str) -> None:
        self.group = group
        self.source = source

    def get_latest(self, destination: str) -> LogPosition | None:
        return self.group.acked.get(self.source)

    def persist(self, destination: str, position: LogPosition) -> None:
        pass  # written by the group when the client acks, not when the parser stores


class GroupCanalInstance(Destination):
    """n:1 (group-instance.xml): one parser per source (canal.instance.masterN.*) merged by GroupSink in
    executeTime order, transactions never interleaved. Better than Canal: each source keeps its own resume
    position, taken from what the client acked of THAT source (persisted on every ack in
    ``{data dir}/group-positions.json``), so a restart resumes every source where its consumer stopped."""

    POSITIONS = "group-positions.json"

    def __init__(self, name: str, parser_configs: list[ParserConfig], *, store: MemoryEventStore,
                 meta: MetaManager, data_dir: Path, event_filter: Any = None, transaction_size: int = 1024,
                 timezone: str | None = None) -> None:
        super().__init__(name, store, meta, parser_configs[0].master.identity)
        self.data_dir = data_dir
        self.sources = [str(i + 1) for i in range(len(parser_configs))]
        self.identities = {n: cfg.master.identity for n, cfg in zip(self.sources, parser_configs, strict=True)}
        self.acked: dict[str, LogPosition] = self._load_acked()
        self.group = GroupSink(None, self.identities, put_source=self._put_source,  # type: ignore[arg-type]
                               transaction_size=transaction_size)
        self._batch_points: dict[int, dict[str, Any]] = {}
        self._acked_lock = threading.Lock()
        self.parsers = []
        for n, cfg in zip(self.sources, parser_configs, strict=True):
            # an idle source holds the merge back until it offers a time: heartbeat it every second
            cfg = dataclasses.replace(cfg, destination=f"{name}.{n}", heartbeat_period=min(cfg.heartbeat_period, 1.0))
            self.parsers.append(EventParser(
                cfg, sink=self.group.source(n), history=SchemaHistory(data_dir / f"history-{n}"),
                positions=FailbackPositionManager(MemoryPositionManager(), _AckedSourcePosition(self, n)),
                converter_factory=lambda ident: EntryConverter(ident, timezone=timezone), event_filter=event_filter))

    def _load_acked(self) -> dict[str, LogPosition]:
        try:
            raw = json.loads((self.data_dir / self.POSITIONS).read_text())
        except FileNotFoundError:
            return {}
        return {n: LogPosition.from_json(v) for n, v in raw.items()}

    def _put_source(self, source: str, entries: list[Any]) -> None:
        self.store.put([StoredEvent.from_entry(e, source=source) for e in entries])

    def on_batch(self, client: Any, batch_id: int, events: list[StoredEvent]) -> None:
        points = {}
        for ev in events:
            if ev.ack_point and ev.source:
                points[ev.source] = ev.position
        self._batch_points[batch_id] = points

    def on_ack(self, client: Any, batch_id: int) -> None:
        points = self._batch_points.pop(batch_id, None)
        if not points:
            return
        with self._acked_lock:
            for n, pos in points.items():
                self.acked[n] = LogPosition(self.identities[n], pos)
            data = json.dumps({n: p.to_json() for n, p in self.acked.items()}, sort_keys=True).encode()
            self.data_dir.mkdir(parents=True, exist_ok=True)
            write_atomically(self.data_dir / self.POSITIONS, data)  # durable before the ack returns

    def on_rollback(self, client: Any) -> None:
        self._batch_points.clear()

    def start(self) -> None:
        super().start()
        for p in self.parsers:
            p.start()

    def stop(self) -> None:
        self.group.close()
        for p in self.parsers:
            p.request_stop()
        self.store.close()   # wakes a put waiting for room (see CanalInstance.stop)
        for p in self.parsers:
            p.stop()
        super().stop()
