"""The in-memory schema model of the schema history: databases -> tables -> columns, evolved by the
operations of ``ddl.parse_ddl`` and rendered the way MariaDB 10.11 prints information_schema.COLUMNS
(COLUMN_TYPE with display widths, DATA_TYPE, CHARACTER_SET_NAME / COLLATION_NAME, COLUMN_KEY = PRI).

Rules followed (checked against the live server by tests/integration/test_schema_history.py):
- integer display widths: tinyint(4)/(3 unsigned), smallint(6)/(5), mediumint(9)/(8), int(11)/(10),
  bigint(20)/(20); an explicit width is kept; ZEROFILL implies UNSIGNED; BOOL = tinyint(1).
- decimal defaults to (10,0); FLOAT(p) is float for p <= 24, double above; REAL = double.
- char/binary default to (1); bit to (1); TEXT(n)/BLOB(n) pick the smallest type holding n characters;
  YEAR prints year(4); fractional seconds print only when > 0.
- character columns: the column's COLLATE, else its CHARACTER SET's default collation (BINARY attribute
  = the charset's _bin), else the table's; a table's comes from its options, else the database's,
  else the server's. CHARACTER SET binary turns char/varchar/text into binary/varbinary/blob;
  NATIONAL types are utf8mb3; utf8 means utf8mb3 (old_mode UTF8_IS_UTF8MB3, the 10.11 default).
- MariaDB JSON is longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin; UUID, INET6, INET4 are their own
  types without a charset.
- the key columns (is_key) are the primary key's; without one, those of the first UNIQUE index whose
  columns are all NOT NULL and unprefixed (the server shows that index as PRI). Primary key columns
  are NOT NULL.
- CONVERT TO CHARACTER SET changes every character column and widens TEXT types so that they keep
  their length in characters; DEFAULT CHARSET only changes the table default.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from . import ddl as D
from .collations import COLLATIONS, Collations
from .model import ColumnMeta, TableMeta
from .tables import (
    SchemaApplyError,
    add_index,
    drop_index_column,
    inline_indexes,
    pk_not_null,
    rename_index_column,
    table_from_dict,
    table_to_dict,
    with_keys,
)

__all__ = ["SchemaApplyError", "SchemaModel"]


# ---- types -----------------------------------------------------------------------------------------

_INT_WIDTH = {"tinyint": (4, 3), "smallint": (6, 5), "mediumint": (9, 8), "int": (11, 10), "bigint": (20, 20)}
_TEXT_TYPES = (("tinytext", 255), ("text", 65535), ("mediumtext", 16777215), ("longtext", 4294967295))
_BLOB_TYPES = (("tinyblob", 255), ("blob", 65535), ("mediumblob", 16777215), ("longblob", 4294967295))
_TEXT_BYTES = dict(_TEXT_TYPES)
_CHAR_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}
_BINARY_OF = {"char": "binary", "varchar": "varbinary", "tinytext": "tinyblob", "text": "blob",
              "mediumtext": "mediumblob", "longtext": "longblob"}
BINARY_TYPES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
GEOMETRY_TYPES = frozenset({"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
                            "multipolygon", "geometrycollection"})
_TEMPORAL_FSP = {"time", "datetime", "timestamp"}
_SEQUENCE_COLUMNS = (("next_not_cached_value", False), ("minimum_value", False), ("maximum_value", False),
                     ("start_value", False), ("increment", False), ("cache_size", True),
                     ("cycle_option", True), ("cycle_count", False))


def _enum_text(values: Iterable[str]) -> str:
    return ",".join("'" + v.replace("\\", "\\\\").replace("'", "''") + "'" for v in values)


def _sized(kinds: tuple[tuple[str, int], ...], nbytes: int) -> str:
    for name, cap in kinds:
        if nbytes <= cap:
            return name
    return kinds[-1][0]


@dataclass
class _Db:
    name: str
    charset: str
    collation: str


@dataclass
class SchemaModel:
    """Databases and tables as the history knows them. Tables are TableMeta (model.py) whose
    ``extra["indexes"]`` holds the index definitions (``ddl.IndexSpec``)."""

    charset: str = "utf8mb4"  # @@character_set_server
    collation: str = "utf8mb4_general_ci"  # @@collation_server
    explicit_defaults_for_timestamp: bool = True
    lower_case_table_names: int = 0
    flavor: str = "mariadb"  # "mariadb" | "mysql": JSON is longtext on MariaDB
    collations: Collations = field(default=COLLATIONS, repr=False)
    databases: dict[str, _Db] = field(default_factory=dict)
    tables: dict[tuple[str, str], TableMeta] = field(default_factory=dict)

    # ---- lookups --------------------------------------------------------------------------------

    def key(self, schema: str, name: str) -> tuple[str, str]:
        if self.lower_case_table_names:
            return schema.lower(), name.lower()
        return schema, name

    def table(self, schema: str, name: str) -> TableMeta | None:
        return self.tables.get(self.key(schema, name))

    def database(self, name: str) -> _Db:
        db = self.databases.get(name.lower() if self.lower_case_table_names else name)
        if db is None:
            return _Db(name=name, charset=self.charset, collation=self.collation)
        return db

    def copy(self) -> SchemaModel:
        return replace(self, databases={k: replace(v) for k, v in self.databases.items()},
                       tables=dict(self.tables))

    # ---- applying operations ------------------------------------------------------------------

    def apply(self, parsed: D.ParsedDdl) -> list[tuple[str, str]]:
        """Apply a parsed statement; returns the (schema, table) pairs whose definition changed
        (old and new names for renames, dropped tables included)."""
        changed: list[tuple[str, str]] = []
        for op in parsed.operations:
            changed.extend(self.apply_operation(op))
        return changed

    def apply_operation(self, op: Any) -> list[tuple[str, str]]:
        if isinstance(op, D.CreateTable):
            return self._create_table(op)
        if isinstance(op, D.AlterTable):
            return self._alter_table(op)
        if isinstance(op, D.RenameTables):
            return self._rename_tables(op)
        if isinstance(op, D.DropTables):
            if op.temporary:
                return []  # temporary tables are never in the model (not logged in ROW format)
            # a table the history does not know (another schema, or lost track of) is simply gone
            for s, t in op.tables:
                self.tables.pop(self.key(s, t), None)
            return list(op.tables)
        if isinstance(op, D.TruncateTables):
            return []
        if isinstance(op, D.CreateDatabase):
            cs, coll = self._charset_pair(op.charset, op.collation, self.charset, self.collation)
            k = op.name.lower() if self.lower_case_table_names else op.name
            if k in self.databases and op.if_not_exists:
                return []
            self.databases[k] = _Db(op.name, cs, coll)
            return []
        if isinstance(op, D.AlterDatabase):
            db = self.database(op.name)
            cs, coll = self._charset_pair(op.charset, op.collation, db.charset, db.collation, keep=True)
            k = op.name.lower() if self.lower_case_table_names else op.name
            self.databases[k] = _Db(op.name, cs, coll)
            return []
        if isinstance(op, D.DropDatabase):
            k = op.name.lower() if self.lower_case_table_names else op.name
            self.databases.pop(k, None)
            gone = [key for key in self.tables if key[0] == self.key(op.name, "")[0]]
            for key in gone:
                del self.tables[key]
            return gone
        if isinstance(op, D.CreateSequence):
            return self._create_sequence(op)
        raise SchemaApplyError(f"unknown operation {type(op).__name__}")

    def _charset_pair(self, cs: str | None, coll: str | None, dcs: str, dcoll: str,
                      keep: bool = False) -> tuple[str, str]:
        C = self.collations
        cs = C.charset_name(cs)
        coll = C.collation_name(coll, cs)
        if coll and not cs:
            cs = C.charset_of(coll) or dcs
        if not cs:
            return dcs, dcoll
        return cs, coll or C.default_collation(cs)

    # ---- columns ------------------------------------------------------------------------------

    def column_meta(self, spec: D.ColumnSpec, table_charset: str, table_collation: str) -> ColumnMeta:
        """A column definition -> ColumnMeta as information_schema prints it."""
        C = self.collations
        t = spec.type
        p = spec.params
        unsigned = spec.unsigned or spec.zerofill
        nullable = spec.nullable
        sfx = (" unsigned" if unsigned else "") + (" zerofill" if spec.zerofill else "")
        charset = collation = None
        values = spec.values
        if t == "serial":
            t, p, unsigned, sfx = "bigint", (), True, " unsigned"
            nullable = False
        if t == "bool":
            t, p = "tinyint", (1,)
        if t in ("nchar", "nvarchar"):
            t = "char" if t == "nchar" else "varchar"
            spec = replace(spec, charset=spec.charset or "utf8mb3")
        if t == "json" and self.flavor == "mariadb":
            t = "longtext"
            spec = replace(spec, charset="utf8mb4", collation="utf8mb4_bin")
        if t in _CHAR_TYPES:
            charset, collation = self._column_charset(spec, table_charset, table_collation)
            if charset == "binary" and t in _BINARY_OF:
                t = _BINARY_OF[t]
                charset = collation = None
        if t in _INT_WIDTH:
            width = p[0] if p else _INT_WIDTH[t][1 if unsigned else 0]
            column_type = f"{t}({width}){sfx}"
        elif t == "decimal":
            m = p[0] if p else 10
            d = p[1] if len(p) > 1 else 0
            column_type = f"decimal({m},{d}){sfx}"
        elif t in ("float", "double"):
            if t == "float" and len(p) == 1 and p[0] > 24:
                t = "double"
                p = ()
            if len(p) >= 2:
                column_type = f"{t}({p[0]},{p[1]}){sfx}"
            else:
                column_type = f"{t}{sfx}"
        elif t == "bit":
            column_type = f"bit({p[0] if p else 1})"
        elif t in ("char", "binary"):
            column_type = f"{t}({p[0] if p else 1})"
        elif t in ("varchar", "varbinary"):
            if not p:
                raise SchemaApplyError(f"column {spec.name}: {t} without a length")
            column_type = f"{t}({p[0]})"
        elif t in ("tinytext", "text", "mediumtext", "longtext"):
            if p and t == "text":
                t = _sized(_TEXT_TYPES, p[0] * C.bytes_per_char(charset))
            column_type = t
        elif t in ("tinyblob", "blob", "mediumblob", "longblob"):
            if p and t == "blob":
                t = _sized(_BLOB_TYPES, p[0])
            column_type = t
        elif t in ("enum", "set"):
            column_type = f"{t}({_enum_text(values or ())})"
        elif t in _TEMPORAL_FSP:
            column_type = f"{t}({p[0]})" if p and p[0] else t
        elif t == "year":
            column_type = "year(4)"
        elif t in ("date", "uuid", "inet6", "inet4", "json") or t in GEOMETRY_TYPES:
            column_type = t
        elif t == "":
            column_type = ""
        else:
            raise SchemaApplyError(f"column {spec.name}: unsupported type {t!r}")
        if nullable is None:
            nullable = not (t == "timestamp" and not self.explicit_defaults_for_timestamp)
        coll_id = C.collation_id(collation) if collation else (63 if t in BINARY_TYPES or t in GEOMETRY_TYPES
                                                                 else None)
        return ColumnMeta(
            name=spec.name, data_type=t, column_type=column_type, nullable=bool(nullable),
            unsigned=unsigned and t in (*_INT_WIDTH, "decimal", "float", "double"),
            charset=charset, collation=collation, collation_id=coll_id,
            enum_values=tuple(values) if t == "enum" and values is not None else None,
            set_values=tuple(values) if t == "set" and values is not None else None,
            default=spec.default, generated=spec.generated)

    def _column_charset(self, spec: D.ColumnSpec, tcs: str, tcoll: str) -> tuple[str, str]:
        C = self.collations
        cs = C.charset_name(spec.charset)
        coll = C.collation_name(spec.collation, cs or tcs)
        if coll and not cs:
            cs = C.charset_of(coll)
        if not cs:
            return tcs, C.bin_collation(tcs) if spec.binary else tcoll
        return cs, coll or (C.bin_collation(cs) if spec.binary else C.default_collation(cs))

    # ---- tables -------------------------------------------------------------------------------

    def _new_table(self, schema: str, name: str, columns: list[ColumnMeta], indexes: list[D.IndexSpec],
                   charset: str, collation: str, comment: str = "", **extra: Any) -> TableMeta:
        tm = TableMeta(schema=schema, name=name, columns=tuple(columns), charset=charset, collation=collation,
                       comment=comment, extra={"indexes": tuple(indexes), **extra})
        return with_keys(tm)

    def _create_table(self, op: D.CreateTable) -> list[tuple[str, str]]:
        if op.temporary:
            return []
        key = self.key(op.schema, op.name)
        if key in self.tables and op.if_not_exists:
            return []
        if op.like is not None:
            src = self.table(*op.like)
            if src is None:
                raise SchemaApplyError(f"CREATE TABLE {op.schema}.{op.name} LIKE {op.like[0]}.{op.like[1]}: "
                                       "the source table is not in the history", (op.schema, op.name))
            self.tables[key] = TableMeta(schema=op.schema, name=op.name, columns=src.columns, charset=src.charset,
                                         collation=src.collation, comment=src.comment, extra=dict(src.extra))
            return [(op.schema, op.name)]
        db = self.database(op.schema)
        tcs, tcoll = self._charset_pair(op.charset, op.collation, db.charset, db.collation)
        columns: list[ColumnMeta] = []
        indexes: list[D.IndexSpec] = []
        for spec in op.columns:
            columns.append(self.column_meta(spec, tcs, tcoll))
            indexes.extend(inline_indexes(spec))
        incomplete = False
        if op.select is not None:
            have = {c.name.lower() for c in columns}
            for sc in op.select:
                for cm in self._select_column(sc):
                    if cm.data_type == "":
                        incomplete = True
                    if cm.name.lower() not in have:
                        columns.append(cm)
                        have.add(cm.name.lower())
        for ix in op.indexes:
            indexes = add_index(indexes, ix, columns)
        extra: dict[str, Any] = {"incomplete": True} if incomplete else {}
        tm = self._new_table(op.schema, op.name, pk_not_null(columns, indexes), indexes, tcs, tcoll,
                             op.comment or "", **extra)
        self.tables[key] = tm
        return [(op.schema, op.name)]

    def _select_column(self, sc: D.SelectColumn) -> list[ColumnMeta]:
        if sc.source is not None:
            src = self.table(sc.source[0], sc.source[1])
            if src is not None:
                if sc.source[2] == "*":
                    return [replace(c, is_key=False) for c in src.columns]
                c = src.column(sc.source[2])
                if c is not None:
                    return [replace(c, name=sc.name, is_key=False)]
        if sc.name == "*":
            return [ColumnMeta(name="*", data_type="", column_type="")]
        return [ColumnMeta(name=sc.name, data_type="", column_type="")]

    def _create_sequence(self, op: D.CreateSequence) -> list[tuple[str, str]]:
        key = self.key(op.schema, op.name)
        if key in self.tables and op.if_not_exists:
            return []
        cols = []
        for name, unsigned in _SEQUENCE_COLUMNS:
            t = "tinyint" if name == "cycle_option" else "bigint"
            width = 1 if t == "tinyint" else 21
            cols.append(ColumnMeta(name=name, data_type=t, column_type=f"{t}({width})" + (" unsigned" if unsigned
                                                                                          else ""),
                                   nullable=False, unsigned=unsigned))
        db = self.database(op.schema)
        self.tables[key] = self._new_table(op.schema, op.name, cols, [], db.charset, db.collation, sequence=True)
        return [(op.schema, op.name)]

    def _rename_tables(self, op: D.RenameTables) -> list[tuple[str, str]]:
        # applied one pair at a time, like the server (a TO tmp, b TO a, tmp TO b swaps)
        out = []
        for old, new in op.pairs:
            tm = self.tables.pop(self.key(*old), None)
            if tm is None:
                raise SchemaApplyError(f"RENAME TABLE {old[0]}.{old[1]}: no such table in the history", old)
            if self.key(*new) in self.tables:
                raise SchemaApplyError(f"RENAME TABLE to {new[0]}.{new[1]}: that table already exists in the "
                                       "history", new)
            self.tables[self.key(*new)] = tm.renamed(new[0], new[1])
            out.extend([old, new])
        return out

    def _alter_table(self, op: D.AlterTable) -> list[tuple[str, str]]:
        key = self.key(op.schema, op.name)
        tm = self.tables.get(key)
        name = (op.schema, op.name)
        if tm is None:
            raise SchemaApplyError(f"ALTER TABLE {op.schema}.{op.name}: no such table in the history", name)
        cols = list(tm.columns)
        indexes = list(tm.extra.get("indexes", ()))
        tcs, tcoll = tm.charset or self.charset, tm.collation or self.collation
        comment = tm.comment
        new_name = name
        # like the server: table options (the new default charset) hold for the whole statement, and
        # CONVERT TO CHARACTER SET converts every character column of the result
        convert = None
        for a in op.actions:
            if isinstance(a, D.TableOptions) and (a.charset or a.collation):
                tcs, tcoll = self._charset_pair(a.charset, a.collation, tcs, tcoll)
            elif isinstance(a, D.ConvertCharset):
                tcs, tcoll = self._charset_pair(a.charset, a.collation, tcs, tcoll)
                convert = (tcs, tcoll)
        for a in op.actions:
            if isinstance(a, D.ConvertCharset) or (isinstance(a, D.TableOptions) and a.comment is None):
                continue
            try:
                cols, indexes, tcs, tcoll, comment, new_name = self._action(a, cols, indexes, tcs, tcoll,
                                                                            comment, new_name)
            except SchemaApplyError as e:
                raise SchemaApplyError(f"ALTER TABLE {op.schema}.{op.name}: {e}", name) from None
        if convert is not None:
            cols = [self._convert(c, *convert) for c in cols]
        extra = {k: v for k, v in tm.extra.items() if k != "indexes"}
        new = self._new_table(new_name[0], new_name[1], pk_not_null(cols, indexes), indexes, tcs, tcoll,
                              comment, **extra)
        del self.tables[key]
        if new_name != name and self.key(*new_name) in self.tables:
            raise SchemaApplyError(f"ALTER TABLE {op.schema}.{op.name} RENAME: {new_name[0]}.{new_name[1]} "
                                   "already exists in the history", name)
        self.tables[self.key(*new_name)] = new
        return [name] if new_name == name else [name, new_name]

    def _action(self, a: Any, cols: list[ColumnMeta], indexes: list[D.IndexSpec], tcs: str, tcoll: str,
                comment: str, name: tuple[str, str]) -> tuple:
        def find(cname: str) -> int:
            low = cname.lower()
            for i, c in enumerate(cols):
                if c.name.lower() == low:
                    return i
            return -1

        def place(cm: ColumnMeta, first: bool, after: str | None, at: int | None = None) -> None:
            if first:
                cols.insert(0, cm)
            elif after is not None:
                j = find(after)
                if j < 0:
                    raise SchemaApplyError(f"AFTER {after}: no such column")
                cols.insert(j + 1, cm)
            elif at is not None:
                cols.insert(at, cm)
            else:
                cols.append(cm)

        if isinstance(a, D.AddColumn):
            if find(a.spec.name) >= 0:
                if a.if_not_exists:
                    return cols, indexes, tcs, tcoll, comment, name
                raise SchemaApplyError(f"ADD COLUMN {a.spec.name}: the column already exists")
            place(self.column_meta(a.spec, tcs, tcoll), a.first, a.after)
            for ix in inline_indexes(a.spec):
                indexes = add_index(indexes, ix, cols)
        elif isinstance(a, D.DropColumn):
            i = find(a.name)
            if i < 0:
                if a.if_exists:
                    return cols, indexes, tcs, tcoll, comment, name
                raise SchemaApplyError(f"DROP COLUMN {a.name}: no such column")
            gone = cols.pop(i).name.lower()
            indexes = drop_index_column(indexes, gone)
        elif isinstance(a, D.ModifyColumn | D.ChangeColumn):
            old = a.old if isinstance(a, D.ChangeColumn) else a.spec.name
            i = find(old)
            if i < 0:
                if a.if_exists:
                    return cols, indexes, tcs, tcoll, comment, name
                raise SchemaApplyError(f"{'CHANGE' if isinstance(a, D.ChangeColumn) else 'MODIFY'} {old}: "
                                       "no such column")
            cols.pop(i)
            if a.spec.name.lower() != old.lower() and find(a.spec.name) >= 0:
                raise SchemaApplyError(f"CHANGE {old} {a.spec.name}: the new name is taken")
            place(self.column_meta(a.spec, tcs, tcoll), a.first, a.after, at=i)
            if a.spec.name != old:
                indexes = rename_index_column(indexes, old, a.spec.name)
            for ix in inline_indexes(a.spec):
                indexes = add_index(indexes, ix, cols)
        elif isinstance(a, D.RenameColumn):
            i = find(a.old)
            if i < 0:
                raise SchemaApplyError(f"RENAME COLUMN {a.old}: no such column")
            if a.new.lower() != a.old.lower() and find(a.new) >= 0:
                raise SchemaApplyError(f"RENAME COLUMN {a.old} TO {a.new}: the new name is taken")
            cols[i] = replace(cols[i], name=a.new)
            indexes = rename_index_column(indexes, a.old, a.new)
        elif isinstance(a, D.RenameTo):
            name = (a.schema, a.name)
        elif isinstance(a, D.AddIndex):
            if a.if_not_exists and a.index.name and any((x.name or "").lower() == a.index.name.lower()
                                                        for x in indexes):
                return cols, indexes, tcs, tcoll, comment, name
            for cname, _ in a.index.columns:
                if find(cname) < 0:
                    raise SchemaApplyError(f"index on {cname}: no such column")
            indexes = add_index(indexes, a.index, cols)
        elif isinstance(a, D.DropPrimaryKey):
            if not any(x.kind == "primary" for x in indexes):
                raise SchemaApplyError("DROP PRIMARY KEY: the table has none")
            indexes = [x for x in indexes if x.kind != "primary"]
        elif isinstance(a, D.DropIndex):
            keep = [x for x in indexes if (x.name or "").lower() != a.name.lower() or x.kind == "primary"]
            if len(keep) == len(indexes) and not (a.if_exists or a.constraint):
                raise SchemaApplyError(f"DROP INDEX {a.name}: no such index")
            indexes = keep
        elif isinstance(a, D.RenameIndex):
            indexes = [replace(x, name=a.new) if (x.name or "").lower() == a.old.lower() else x for x in indexes]
        elif isinstance(a, D.SetDefault):
            i = find(a.column)
            if i < 0:
                raise SchemaApplyError(f"ALTER COLUMN {a.column}: no such column")
            cols[i] = replace(cols[i], default=a.default)
        elif isinstance(a, D.TableOptions):
            if a.comment is not None:
                comment = a.comment
        elif isinstance(a, D.NoOp):
            pass
        else:
            raise SchemaApplyError(f"unknown ALTER TABLE action {type(a).__name__}")
        return cols, indexes, tcs, tcoll, comment, name

    def _convert(self, c: ColumnMeta, cs: str, coll: str) -> ColumnMeta:
        if c.charset is None or c.data_type not in _CHAR_TYPES:
            return c
        C = self.collations
        if cs == "binary":
            if c.data_type in _BINARY_OF:
                t = _BINARY_OF[c.data_type]
                ct = c.column_type.replace(c.data_type, t, 1)
                return replace(c, data_type=t, column_type=ct, charset=None, collation=None, collation_id=63)
            return replace(c, charset=None, collation=None, collation_id=63)
        t, ct = c.data_type, c.column_type
        if t in _TEXT_BYTES:
            chars = _TEXT_BYTES[t] // C.bytes_per_char(c.charset)
            wanted = _sized(_TEXT_TYPES, chars * C.bytes_per_char(cs))
            if _TEXT_BYTES[wanted] > _TEXT_BYTES[t]:
                t = ct = wanted
        return replace(c, data_type=t, column_type=ct, charset=cs, collation=coll, collation_id=C.collation_id(coll))

    # ---- snapshots ----------------------------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        return {"charset": self.charset, "collation": self.collation,
                "explicit_defaults_for_timestamp": self.explicit_defaults_for_timestamp,
                "lower_case_table_names": self.lower_case_table_names, "flavor": self.flavor}

    def to_dict(self) -> dict[str, Any]:
        return {
            "server": self.settings(),
            "databases": [{"name": d.name, "charset": d.charset, "collation": d.collation}
                          for d in sorted(self.databases.values(), key=lambda d: d.name)],
            "tables": [table_to_dict(t) for _, t in sorted(self.tables.items())],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SchemaModel:
        s = d.get("server") or {}
        m = cls(charset=s.get("charset", "utf8mb4"), collation=s.get("collation", "utf8mb4_general_ci"),
                explicit_defaults_for_timestamp=bool(s.get("explicit_defaults_for_timestamp", True)),
                lower_case_table_names=int(s.get("lower_case_table_names", 0)), flavor=s.get("flavor", "mariadb"))
        for db in d.get("databases") or []:
            k = db["name"].lower() if m.lower_case_table_names else db["name"]
            m.databases[k] = _Db(db["name"], db["charset"], db["collation"])
        for t in d.get("tables") or []:
            tm = table_from_dict(t)
            m.tables[m.key(tm.schema, tm.name)] = tm
        return m

