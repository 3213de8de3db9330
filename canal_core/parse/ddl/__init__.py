"""DDL statements from QUERY events -> schema operations and Canal's DDL classification.

The grammar is sqlglot's MySQL dialect, extended for MariaDB (user-defined type names such as INET6
and POINT, REAL = DOUBLE, FLOAT UNSIGNED, PERSISTENT generated columns). Around it sits only the
hand work sqlglot cannot do for us:

- executable comments (``/*!50100 ... */``, ``/*M!100301 ... */``) are unwrapped before tokenizing
  (sqlglot drops them as comments, but the server executed them);
- statements are recognised by their leading tokens; ALTER TABLE is split into its top-level
  comma-separated actions and each action is parsed by sqlglot on its own (so one action sqlglot
  does not know, e.g. ``ADD (a INT, b INT)`` or ``CONVERT TO CHARACTER SET``, does not lose the rest);
- RENAME TABLE, ALTER DATABASE and CONVERT TO CHARACTER SET are read from the tokens.

``parse_ddl(sql, default_schema)`` never raises: a statement that changes tables but that we cannot
understand comes back with ``parsed=False`` and ``error`` set, and the tables it names (when the
tokens show them), so the schema history can decide whether that is fatal.

Canal's classification (DruidDdlParser + LogEventConvert): the statement's type, schema and table
are those of its first "result": CREATE TABLE -> CREATE; ALTER TABLE per action: RENAME TO -> RENAME,
ADD INDEX/KEY/UNIQUE/PRIMARY KEY -> CINDEX, DROP INDEX/KEY/CONSTRAINT -> DINDEX, ADD FOREIGN KEY/CHECK
-> (no result), anything else -> ALTER; DROP TABLE -> ERASE (one result per table); TRUNCATE ->
TRUNCATE; RENAME TABLE -> RENAME (schema/table = the new name); CREATE INDEX -> CINDEX; DROP INDEX ->
DINDEX; CREATE/DROP DATABASE -> QUERY with the database as schema; INSERT/UPDATE/DELETE statements
(statement-based logging) -> INSERT/UPDATE/DELETE; everything else -> QUERY.
"""

from __future__ import annotations

from .classify import parse_ddl
from .comments import DEFAULT_SERVER_VERSION, unwrap_executable_comments
from .lexing import DdlParseError
from .operations import (
    AddColumn,
    AddIndex,
    AlterDatabase,
    AlterTable,
    ChangeColumn,
    ColumnSpec,
    ConvertCharset,
    CreateDatabase,
    CreateSequence,
    CreateTable,
    DropColumn,
    DropDatabase,
    DropIndex,
    DropPrimaryKey,
    DropTables,
    IndexSpec,
    ModifyColumn,
    NoOp,
    ParsedDdl,
    RenameColumn,
    RenameIndex,
    RenameTables,
    RenameTo,
    SelectColumn,
    SetDefault,
    TableOptions,
    TruncateTables,
)

__all__ = [
    "DEFAULT_SERVER_VERSION",
    "AddColumn",
    "AddIndex",
    "AlterDatabase",
    "AlterTable",
    "ChangeColumn",
    "ColumnSpec",
    "ConvertCharset",
    "CreateDatabase",
    "CreateSequence",
    "CreateTable",
    "DdlParseError",
    "DropColumn",
    "DropDatabase",
    "DropIndex",
    "DropPrimaryKey",
    "DropTables",
    "IndexSpec",
    "ModifyColumn",
    "NoOp",
    "ParsedDdl",
    "RenameColumn",
    "RenameIndex",
    "RenameTables",
    "RenameTo",
    "SelectColumn",
    "SetDefault",
    "TableOptions",
    "TruncateTables",
    "parse_ddl",
    "unwrap_executable_comments",
]
