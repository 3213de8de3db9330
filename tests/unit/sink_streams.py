"""Synthetic binlog streams as Canal entries for the sink tests (single source and group): real positions,
execute times in ms, and a one-letter rendering of a batch."""

from __future__ import annotations

from canal_core.entry.model import (
    ENTRY_HEARTBEAT,
    ENTRY_ROWDATA,
    ENTRY_TRANSACTIONBEGIN,
    ENTRY_TRANSACTIONEND,
    CanalEntry,
)
from canal_core.parse.model import EVENT_INSERT, EVENT_MHEARTBEAT
from canal_core.protocol.position import EntryPosition


class Stream:
    """One source's binlog as Canal entries: real positions (journal, start offset, event length, server
    id) and execute times in ms."""

    def __init__(self, server_id: int = 1, journal: str = "mysql-bin.000001", offset: int = 4,
                 schema: str = "shop", table: str = "orders") -> None:
        self.server_id = server_id
        self.journal = journal
        self.offset = offset
        self.schema = schema
        self.table = table

    def _entry(self, entry_type: int, event_type: int, ts: int, length: int, **kw: object) -> CanalEntry:
        pos = EntryPosition(journal_name=self.journal, position=self.offset, server_id=self.server_id,
                            timestamp=ts, gtid="")
        self.offset += length
        return CanalEntry(entry_type=entry_type, event_type=event_type, position=pos, event_length=length,
                          _data=b"", **kw)  # type: ignore[arg-type]

    def begin(self, ts: int) -> CanalEntry:
        return self._entry(ENTRY_TRANSACTIONBEGIN, 0, ts, 80, schema="", table="")

    def end(self, ts: int) -> CanalEntry:
        return self._entry(ENTRY_TRANSACTIONEND, 0, ts, 31, schema="", table="")

    def row(self, ts: int, n: int = 1, table: str | None = None, event_type: int = EVENT_INSERT) -> CanalEntry:
        return self._entry(ENTRY_ROWDATA, event_type, ts, 40 + 20 * n, schema=self.schema,
                           table=table or self.table, columns=("id",), rows=[(i,) for i in range(n)])

    def ddl(self, ts: int, sql: str = "ALTER TABLE orders ADD c INT", event_type: int = 5) -> CanalEntry:
        return self._entry(ENTRY_ROWDATA, event_type, ts, 60 + len(sql), schema=self.schema, table=self.table,
                           sql=sql)

    def tx(self, ts: int, rows: int = 1, table: str | None = None) -> list[CanalEntry]:
        return [self.begin(ts), *(self.row(ts, table=table) for _ in range(rows)), self.end(ts)]

    def heartbeat(self, ts: int) -> CanalEntry:
        return CanalEntry(entry_type=ENTRY_HEARTBEAT, event_type=0, schema="", table="",
                          position=EntryPosition(timestamp=ts), _data=b"")

    def master_heartbeat(self) -> CanalEntry:
        """The server's HEARTBEAT_LOG_EVENT: header time 0."""
        return CanalEntry(entry_type=ENTRY_HEARTBEAT, event_type=EVENT_MHEARTBEAT, schema="", table="",
                          position=EntryPosition(journal_name=self.journal, position=self.offset, timestamp=0),
                          _data=b"")


def kinds(batch: list[CanalEntry]) -> str:
    """B begin, R row, E end, D ddl/query, H heartbeat."""
    out = []
    for e in batch:
        if e.entry_type == ENTRY_ROWDATA:
            out.append("R" if e.event_type in (1, 2, 3) else "D")
        else:
            out.append({ENTRY_TRANSACTIONBEGIN: "B", ENTRY_TRANSACTIONEND: "E", ENTRY_HEARTBEAT: "H"}[e.entry_type])
    return "".join(out)


def feed(sink: object, entries: list[CanalEntry]) -> None:
    """As the parser does: one sink call per entry."""
    for e in entries:
        sink([e])  # type: ignore[operator]
