"""What a DDL statement does, as plain values: the operations ``parse_ddl`` returns and the schema model
applies (CREATE/ALTER/RENAME/DROP/TRUNCATE TABLE, databases, sequences) and ``ParsedDdl``, the
statement with Canal's classification."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..model import DdlResult


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """A column definition as written (types normalised to MySQL's base names)."""

    name: str
    type: str  # "int", "varchar", "enum", "float", "bool", "serial", "nchar", "point", "inet6", ... "" = unknown
    params: tuple[int, ...] = ()  # (length,) / (precision, scale) / (fsp,)
    values: tuple[str, ...] | None = None  # ENUM / SET
    unsigned: bool = False
    zerofill: bool = False
    charset: str | None = None
    collation: str | None = None
    binary: bool = False  # the BINARY attribute of character types (= the charset's _bin collation)
    nullable: bool | None = None  # None: not said
    default: str | None = None  # the default as SQL text ("NULL", "'a'", "current_timestamp()")
    auto_increment: bool = False
    comment: str = ""
    generated: bool = False
    primary_key: bool = False  # inline PRIMARY KEY / KEY
    unique: bool = False  # inline UNIQUE [KEY]
    on_update: str | None = None


@dataclass(frozen=True, slots=True)
class IndexSpec:
    name: str | None
    kind: str  # "primary" | "unique" | "index" | "fulltext" | "spatial"
    columns: tuple[tuple[str, int | None], ...]  # (column, prefix length)


@dataclass(frozen=True, slots=True)
class SelectColumn:
    """A column of CREATE TABLE ... SELECT: copied from a source column when known."""

    name: str
    source: tuple[str, str, str] | None = None  # (schema, table, column); "*" column = all columns


@dataclass(frozen=True, slots=True)
class CreateTable:
    schema: str
    name: str
    columns: tuple[ColumnSpec, ...] = ()
    indexes: tuple[IndexSpec, ...] = ()
    charset: str | None = None
    collation: str | None = None
    comment: str | None = None
    if_not_exists: bool = False
    or_replace: bool = False
    temporary: bool = False
    like: tuple[str, str] | None = None
    select: tuple[SelectColumn, ...] | None = None


@dataclass(frozen=True, slots=True)
class CreateSequence:
    schema: str
    name: str
    if_not_exists: bool = False
    or_replace: bool = False


# ALTER TABLE actions
@dataclass(frozen=True, slots=True)
class AddColumn:
    spec: ColumnSpec
    first: bool = False
    after: str | None = None
    if_not_exists: bool = False


@dataclass(frozen=True, slots=True)
class DropColumn:
    name: str
    if_exists: bool = False


@dataclass(frozen=True, slots=True)
class ModifyColumn:
    spec: ColumnSpec
    first: bool = False
    after: str | None = None
    if_exists: bool = False


@dataclass(frozen=True, slots=True)
class ChangeColumn:
    old: str
    spec: ColumnSpec
    first: bool = False
    after: str | None = None
    if_exists: bool = False


@dataclass(frozen=True, slots=True)
class RenameColumn:
    old: str
    new: str


@dataclass(frozen=True, slots=True)
class RenameTo:
    schema: str
    name: str


@dataclass(frozen=True, slots=True)
class AddIndex:
    index: IndexSpec
    if_not_exists: bool = False


@dataclass(frozen=True, slots=True)
class DropIndex:
    name: str
    if_exists: bool = False
    constraint: bool = False  # DROP CONSTRAINT name: an index of that name if there is one


@dataclass(frozen=True, slots=True)
class DropPrimaryKey:
    pass


@dataclass(frozen=True, slots=True)
class RenameIndex:
    old: str
    new: str


@dataclass(frozen=True, slots=True)
class SetDefault:
    column: str
    default: str | None  # None = DROP DEFAULT


@dataclass(frozen=True, slots=True)
class ConvertCharset:
    charset: str
    collation: str | None = None


@dataclass(frozen=True, slots=True)
class TableOptions:
    charset: str | None = None
    collation: str | None = None
    comment: str | None = None


@dataclass(frozen=True, slots=True)
class NoOp:
    """An action that changes no column (ENGINE=, ALGORITHM=, FORCE, partitions, checks, foreign keys)."""

    what: str = ""


AlterAction = (AddColumn | DropColumn | ModifyColumn | ChangeColumn | RenameColumn | RenameTo | AddIndex
               | DropIndex | DropPrimaryKey | RenameIndex | SetDefault | ConvertCharset | TableOptions | NoOp)


@dataclass(frozen=True, slots=True)
class AlterTable:
    schema: str
    name: str
    actions: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class RenameTables:
    pairs: tuple[tuple[tuple[str, str], tuple[str, str]], ...]


@dataclass(frozen=True, slots=True)
class TruncateTables:
    tables: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class DropTables:
    tables: tuple[tuple[str, str], ...]
    if_exists: bool = False
    temporary: bool = False


@dataclass(frozen=True, slots=True)
class CreateDatabase:
    name: str
    charset: str | None = None
    collation: str | None = None
    if_not_exists: bool = False
    or_replace: bool = False


@dataclass(frozen=True, slots=True)
class DropDatabase:
    name: str
    if_exists: bool = False


@dataclass(frozen=True, slots=True)
class AlterDatabase:
    name: str
    charset: str | None = None
    collation: str | None = None


@dataclass(frozen=True, slots=True)
class ParsedDdl:
    """What one QUERY event's statement is and does."""

    sql: str
    default_schema: str
    event_type: int
    schema: str
    table: str
    tables: tuple[tuple[str, str], ...] = ()  # every (schema, table) named
    operations: tuple[Any, ...] = ()
    parsed: bool = True
    error: str | None = None
    changes_schema: bool = False  # a statement of a kind that changes tables or databases

    def result(self) -> DdlResult:
        return DdlResult(event_type=self.event_type, schema=self.schema, table=self.table,
                         ddl_schema=self.default_schema, tables=self.tables, parsed=self.parsed)

