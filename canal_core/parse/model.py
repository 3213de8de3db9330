"""Shared data model of the parser: binlog positions as Canal stores them, and table metadata as the
schema history knows it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from ..binlog.tablemap import ColumnHint


@dataclass(frozen=True, slots=True, order=True)
class EntryPosition:
    """A point in a source's binlog: Canal's EntryPosition (note Canal's JSON key "postion")."""

    journal_name: str = ""
    position: int = 0
    server_id: int | None = None
    timestamp: int | None = None  # ms since the epoch
    gtid: str = ""
    included: bool = False  # Canal: whether the event at this position was already consumed

    def to_json_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"gtid": self.gtid, "included": self.included, "journalName": self.journal_name,
                               "position": self.position}
        if self.server_id is not None:
            out["serverId"] = self.server_id
        if self.timestamp is not None:
            out["timestamp"] = self.timestamp
        return out

    @classmethod
    def from_json_dict(cls, d: dict[str, Any]) -> EntryPosition:
        return cls(journal_name=d.get("journalName") or "", position=int(d.get("position") or 0),
                   server_id=d.get("serverId"), timestamp=d.get("timestamp"), gtid=d.get("gtid") or "",
                   included=bool(d.get("included", False)))


@dataclass(frozen=True, slots=True)
class LogIdentity:
    """Which source a position belongs to: Canal's LogIdentity (sourceAddress + slaveId)."""

    address: str = "127.0.0.1"
    port: int = 3306
    slave_id: int = -1

    def to_json_dict(self) -> dict[str, Any]:
        return {"slaveId": self.slave_id, "sourceAddress": {"address": self.address, "port": self.port}}

    @classmethod
    def from_json_dict(cls, d: dict[str, Any]) -> LogIdentity:
        src = d.get("sourceAddress") or {}
        return cls(address=src.get("address", ""), port=int(src.get("port", 0)), slave_id=int(d.get("slaveId", -1)))


LOG_POSITION_TYPE = "com.alibaba.otter.canal.protocol.position.LogPosition"


@dataclass(frozen=True, slots=True)
class LogPosition:
    """Canal's LogPosition: identity + position. JSON exactly as Canal writes it (with "@type" where
    Java readers need it: ZooKeeper cursors)."""

    identity: LogIdentity
    position: EntryPosition

    def to_json(self, *, with_type: bool = False) -> str:
        d: dict[str, Any] = {}
        if with_type:
            d["@type"] = LOG_POSITION_TYPE
        d["identity"] = self.identity.to_json_dict()
        d["postion"] = self.position.to_json_dict()  # sic: Canal's historical spelling
        return json.dumps(d, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> LogPosition:
        d = json.loads(text)
        return cls(identity=LogIdentity.from_json_dict(d.get("identity") or {}),
                   position=EntryPosition.from_json_dict(d.get("postion") or d.get("position") or {}))


@dataclass(frozen=True, slots=True)
class ColumnMeta:
    """A column as the schema history knows it."""

    name: str
    data_type: str  # MySQL's DATA_TYPE, lower case: "int", "varchar", "decimal", "enum", "uuid", ...
    column_type: str  # MySQL's COLUMN_TYPE text: "bigint(20) unsigned", "decimal(12,2)", "enum('a','b')"
    nullable: bool = True
    unsigned: bool = False
    charset: str | None = None
    collation: str | None = None
    collation_id: int | None = None  # 63 = binary
    enum_values: tuple[str, ...] | None = None
    set_values: tuple[str, ...] | None = None
    is_key: bool = False  # part of the primary key
    default: str | None = None
    generated: bool = False

    def hint(self) -> ColumnHint:
        logical = self.data_type if self.data_type in ("uuid", "inet6", "inet4") else None
        return ColumnHint(name=self.name, unsigned=self.unsigned, collation=self.collation_id,
                          enum_values=self.enum_values, set_values=self.set_values, logical=logical)


@dataclass(frozen=True, slots=True)
class TableMeta:
    schema: str
    name: str
    columns: tuple[ColumnMeta, ...]
    charset: str | None = None
    collation: str | None = None
    comment: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def full_name(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def primary_key(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.is_key)

    def column(self, name: str) -> ColumnMeta | None:
        low = name.lower()
        for c in self.columns:
            if c.name.lower() == low:
                return c
        return None

    def hints(self) -> list[ColumnHint]:
        return [c.hint() for c in self.columns]

    def renamed(self, schema: str, name: str) -> TableMeta:
        return replace(self, schema=schema, name=name)


# Canal's EventType codes for what a statement did (EntryProtocol.proto)
EVENT_INSERT, EVENT_UPDATE, EVENT_DELETE = 1, 2, 3
EVENT_CREATE, EVENT_ALTER, EVENT_ERASE, EVENT_QUERY, EVENT_TRUNCATE, EVENT_RENAME = 4, 5, 6, 7, 8, 9
EVENT_CINDEX, EVENT_DINDEX, EVENT_GTID, EVENT_XACOMMIT, EVENT_XAROLLBACK, EVENT_MHEARTBEAT = 10, 11, 12, 13, 14, 15


@dataclass(frozen=True, slots=True)
class DdlResult:
    """What the schema history made of one QUERY event."""

    event_type: int  # EVENT_CREATE .. EVENT_DINDEX, or EVENT_QUERY for statements that change no table
    schema: str  # the table's schema (Canal's header schemaName)
    table: str  # the table (Canal's header tableName); "" for schema-level statements
    ddl_schema: str  # the session's default schema (Canal's RowChange.ddlSchemaName)
    tables: tuple[tuple[str, str], ...] = ()  # every (schema, table) the statement touched
    parsed: bool = True  # False: recorded but not understood (see the history's rules)


class SchemaHistoryError(Exception):
    """Base of schema-history errors; each names schema.table and the binlog position."""


class SchemaMismatchError(SchemaHistoryError):
    """A TABLE_MAP disagrees with the history (Canal's "column size is not match")."""


class UnknownTableError(SchemaHistoryError):
    """Rows for a table the history does not know."""


class UnparsableDdlError(SchemaHistoryError):
    """DDL the history cannot parse touches a subscribed table."""
