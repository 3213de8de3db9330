"""One destination: parser -> sink -> store, with meta, as Canal's CanalInstanceWithSpring builds it.

The parser's restart position comes from the clients: a FailbackPositionManager over memory (while
running) and the minimum client cursor (after a restart), so a restart resumes from what consumers
acked, never from what merely reached the in-memory store (Canal's file-instance / memory-instance).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..entry.convert import EntryConverter
from ..meta import FileMixedMetaManager, MemoryMetaManager, MetaManager, meta_position_manager
from ..parse.history import SchemaHistory
from ..parse.parser import EventParser, ParserConfig
from ..parse.position import FailbackPositionManager, MemoryPositionManager
from ..server.embedded import Destination
from ..sink import EntrySink
from ..store.ring import MemoryEventStore, StoredEvent
from .config import CanalConfig, InstanceConfig, MetaMode

log = logging.getLogger(__name__)


class CanalInstance(Destination):
    def __init__(self, name: str, parser_config: ParserConfig, *, store: MemoryEventStore, meta: MetaManager,
                 history: SchemaHistory, event_filter: Any = None, transaction_size: int = 1024,
                 filter_transaction_entry: bool = False, timezone: str | None = None) -> None:
        super().__init__(name, store, meta, parser_config.master.identity)
        self.history = history
        self.sink = EntrySink(self._put, transaction_size=transaction_size,
                              filter_transaction_entry=filter_transaction_entry)
        self.positions = FailbackPositionManager(MemoryPositionManager(), meta_position_manager(meta))
        self.parser = EventParser(parser_config, sink=self.sink, history=history, positions=self.positions,
                                  converter_factory=lambda ident: EntryConverter(ident, timezone=timezone),
                                  event_filter=event_filter)
        self.filter_listeners.append(self._replace_filter)

    def _put(self, entries: list[Any]) -> None:
        # blocks while the store is full: back-pressure on the parser
        self.store.put([StoredEvent.from_entry(e) for e in entries])

    def _replace_filter(self, regex: str) -> None:
        from ..parse.filter import TableFilter

        self.parser.filter.white = TableFilter(regex, empty_accepts=True)

    def start(self) -> None:
        super().start()
        self.parser.start()

    def stop(self) -> None:
        self.parser.stop()
        super().stop()

    @classmethod
    def from_config(cls, canal: CanalConfig, instance: InstanceConfig) -> CanalInstance:
        data_dir = Path(instance.data_dir)  # {canal.file.data.dir}/{destination}
        meta: MetaManager
        if instance.meta_mode is MetaMode.MEMORY:
            meta = MemoryMetaManager()
        else:
            # file-mixed (zookeeper modes arrive with the HA issue): {canal.file.data.dir}/{dest}/meta.dat
            meta = FileMixedMetaManager(instance.file_data_dir, flush_period_ms=instance.meta_flush_period_ms)
        sc = instance.store_config()
        store = MemoryEventStore(sc.buffer_size, sc.buffer_memunit, sc.batch_mode.value, sc.ddl_isolation)
        history = SchemaHistory(data_dir / "history")
        return cls(instance.destination, instance.parser_config(), store=store, meta=meta, history=history,
                   event_filter=instance.event_filter(), transaction_size=instance.transaction_size,
                   filter_transaction_entry=instance.filter_config().get(
                       "canal.instance.filter.transaction.entry", "false") == "true")
