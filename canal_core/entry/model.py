"""``CanalEntry``: one Canal Entry with its source position and, for row changes, the typed rows.

Two kinds of consumers read entries: Canal clients want the serialized protobuf ``Entry`` (``data``),
the Dagster pipeline wants typed values (``rows``) and never pays for the text and protobuf encoding.
The serialized bytes are therefore produced on first access of ``data`` (and kept), and the protobuf
message object only on first access of ``entry`` (parsed from ``data``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..protocol.position import EntryPosition
from ..protocol.proto import EntryProtocol_pb2 as pb

# EntryType codes (EntryProtocol.proto)
ENTRY_TRANSACTIONBEGIN = 1
ENTRY_ROWDATA = 2
ENTRY_TRANSACTIONEND = 3
ENTRY_HEARTBEAT = 4
ENTRY_GTIDLOG = 5


@dataclass(slots=True, eq=False)
class CanalEntry:
    """A Canal Entry.

    - ``entry_type``: ENTRY_* code; ``event_type``: the header's EventType code, 0 when it has none
      (transaction begin/end, timer heartbeats).
    - ``schema``, ``table``: the header's schemaName / tableName.
    - ``position``: where the event starts (journal_name, position = start offset, server_id,
      timestamp = header executeTime in ms, gtid = the executed GTID set carried in the header).
    - ``event_length``: the binlog event's length (header eventLength).
    - Row changes (event_type INSERT/UPDATE/DELETE): ``columns`` are the names of all table columns
      in table order and ``rows`` the decoded rows, exactly as the binlog decoder produced them:
      tuples over all columns for INSERT/DELETE, (before, after) pairs for UPDATE, with ABSENT for
      columns the row image left out (see canal_core.binlog.values for the value types).
    - ``sql``: the statement text of DDL/query entries.
    """

    entry_type: int
    event_type: int
    schema: str
    table: str
    position: EntryPosition
    event_length: int = 0
    columns: tuple[str, ...] | None = None
    rows: list[Any] | None = None
    sql: str | None = None
    _encode: Callable[[], bytes] | None = field(default=None, repr=False)
    _data: bytes | None = field(default=None, repr=False)
    _entry: Any = field(default=None, repr=False)

    @property
    def data(self) -> bytes:
        """The serialized protobuf Entry (built once)."""
        data = self._data
        if data is None:
            if self._encode is None:
                raise ValueError("entry has neither bytes nor an encoder")
            data = self._data = self._encode()
            self._encode = None  # drop the closure (and what it holds) once the bytes exist
        return data

    @property
    def entry(self) -> pb.Entry:
        """The protobuf Entry message (parsed from ``data`` once)."""
        msg = self._entry
        if msg is None:
            msg = self._entry = pb.Entry.FromString(self.data)
        return msg

    @property
    def execute_time(self) -> int:
        """Header executeTime: milliseconds since the epoch."""
        return self.position.timestamp or 0

    @property
    def is_row_change(self) -> bool:
        return self.entry_type == ENTRY_ROWDATA and self.rows is not None

    @property
    def ends_transaction(self) -> bool:
        return self.entry_type == ENTRY_TRANSACTIONEND

    @classmethod
    def from_bytes(cls, data: bytes) -> CanalEntry:
        """Wrap a serialized Entry (from a Canal server, a store): header fields and position from the
        message; no typed rows."""
        msg = pb.Entry.FromString(data)
        h = msg.header
        pos = EntryPosition(journal_name=h.logfileName, position=h.logfileOffset, server_id=h.serverId,
                            timestamp=h.executeTime, gtid=h.gtid)
        sql = None
        if msg.entryType == ENTRY_ROWDATA and msg.storeValue:
            sql = pb.RowChange.FromString(msg.storeValue).sql or None
        return cls(entry_type=msg.entryType, event_type=h.eventType, schema=h.schemaName, table=h.tableName,
                   position=pos, event_length=h.eventLength, sql=sql, _data=bytes(data), _entry=msg)
