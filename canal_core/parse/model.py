"""Shared data model of the parser: table metadata as the schema history knows it, what a DDL did, and
the schema history's errors."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..binlog.events import GtidEvent
from ..binlog.tablemap import ColumnHint
from ..protocol.errors import CanalError


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


@dataclass(frozen=True, slots=True)
class GtidInfo:
    """GTID facts carried by every entry of a transaction (Canal's LogHeader.putGtid).

    ``executed``: the executed GTID set including the current transaction (Header.gtid); ``current``,
    ``sequence_number``, ``last_committed``: the transaction's MySQL GTID event (props curtGtid,
    curtGtidSn, curtGtidLct), only known for MySQL GTID events; each prop is left out when unknown."""

    executed: str = ""
    current: str = ""
    sequence_number: int | None = None
    last_committed: int | None = None

    @classmethod
    def of(cls, event: GtidEvent, executed: str) -> GtidInfo:
        return cls(executed=executed, current=event.gtid, sequence_number=event.sequence_number,
                   last_committed=event.last_committed)


class SchemaHistoryError(CanalError):
    """Base of schema-history errors; each names schema.table and the binlog position."""


class SchemaMismatchError(SchemaHistoryError):
    """A TABLE_MAP disagrees with the history (Canal's "column size is not match")."""


class UnknownTableError(SchemaHistoryError):
    """Rows for a table the history does not know."""


class UnparsableDdlError(SchemaHistoryError):
    """DDL the history cannot parse touches a subscribed table."""
