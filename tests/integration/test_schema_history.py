"""Schema history against the live MariaDB.

1. The server is the oracle for the schema model: varied CREATE TABLE (and ALTER TABLE) statements run
   on the server, and the model's ColumnMeta must equal information_schema.COLUMNS; SHOW CREATE TABLE
   read back through the parser (the bootstrap path) must give the same.
2. A scripted mix of DDL interleaved with DML, replayed from the binlog through
   ReplicationConnection + BinlogDecoder with the history's hints, (a) from a history bootstrapped
   before the script ("fresh instance", TABLE_MAPs stripped of all optional metadata in-process so that
   every name, signedness, charset and ENUM list must come from the history), (b) restored in the
   middle (TABLE_MAPs as the server sends them, cross-checked): every row decodes with the names it had
   when written and the values the script wrote.
3. Unparsable DDL on a subscribed table, rows of an unknown table and a TABLE_MAP with
   more columns than the history each give a typed error naming schema.table and file:position.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from canal_core.binlog import BinlogDecoder
from canal_core.binlog import decoder as decoder_module
from canal_core.binlog import events as E
from canal_core.mysql import ReplicationConnection
from canal_core.parse.ddl import parse_ddl
from canal_core.parse.history import SchemaHistory, position_key
from canal_core.parse.model import SchemaMismatchError, UnknownTableError, UnparsableDdlError
from canal_core.parse.schema import SchemaModel
from canal_core.parse.server_schema import read_server_schema
from canal_core.protocol.position import EntryPosition

pytestmark = pytest.mark.integration

DB = "canal_test"


def _x(cur: Any, sql: str, args: Any = None) -> None:
    cur.execute(sql, args)


def _master(s: Any) -> EntryPosition:
    with ReplicationConnection(s.host, s.port, s.repl_user, s.repl_password) as rc:
        f, p, _ = rc.master_status()
        sid = rc.server_id
    return EntryPosition(journal_name=f, position=p, server_id=sid, timestamp=int(time.time() * 1000))


# ---- 1. information_schema is the oracle -----------------------------------------------------------

ORACLE_TABLES = [
    # integers, widths, zerofill, bool, serial
    "(a int, b int unsigned zerofill, c bool, d tinyint(1), e tinyint unsigned, f smallint(3), g mediumint, "
    "h bigint(20) unsigned not null, i int(5) zerofill, j integer unsigned, k int1, l int8, "
    "m middleint, n serial, primary key (h))",
    # decimals and floats
    "(a decimal, b dec(5), c numeric(6,3), d fixed(4,1) unsigned, e float, f float(30), g float(10), "
    "h float(7,3) unsigned, i double, j double(10,2) unsigned zerofill, k real, l double precision, m float8, "
    "n decimal(65,30))",
    # character types and charsets
    "(a char, b char(10), c varchar(20) not null default '', d nchar(3), e national varchar(4), "
    "f varchar(5) character set latin1, g varchar(5) collate utf8mb4_bin, h char(4) binary, "
    "i varchar(3) charset utf8, j char(3) ascii, k char(3) unicode, l varchar(5) charset binary, "
    "m text(100), n text(70) charset latin1, o tinytext, p mediumtext, q longtext, r long varchar, "
    "s character varying(7), t varchar(3) character set 'utf8mb4' collate 'utf8mb4_unicode_ci', "
    "u varchar(4) collate utf8mb4_uca1400_ai_ci, v text charset binary) DEFAULT CHARSET=latin1",
    # binary types
    "(a binary, b binary(16), c varbinary(10), d tinyblob, e blob, f blob(300), g blob(70000), h mediumblob, "
    "i longblob, j long varbinary, k bit, l bit(10))",
    # enum / set
    "(a enum('x','y''z','back\\\\slash'), b set('p','q','r') not null default 'p,q', "
    "c enum('a','b') character set latin1, d enum('é','ü') collate utf8mb4_bin)",
    # temporal
    "(a date, b time, c time(3), d datetime, e datetime(6) default current_timestamp(6), f timestamp null, "
    "g timestamp(3) not null default current_timestamp(3) on update current_timestamp(3), h year, i year(4))",
    # MariaDB types, json, geometry, generated
    "(a uuid, b inet6, c inet4, d json, e point not null, f geometry, g linestring, h polygon, "
    "i multipoint, j int as (1 + 1) virtual, k varchar(10) as (concat('a', 'b')) persistent, "
    "l geometrycollection)",
    # keys: no primary key, unique not null promoted to PRI
    "(a int not null, b int, c varchar(10) not null, unique key (c), key (b)) COLLATE=utf8mb4_unicode_ci",
    "(a int, b int not null, c int not null, unique key uab (a, b), unique key ubc (b, c))",
    "(a int primary key, b int unique key, c varchar(20) not null, unique (c(5)))",
    "(`select` int key, `we``ird` varchar(3), `Mixed Case` char(2), index `ix`(`select`)) "
    "ENGINE=InnoDB DEFAULT CHARSET=utf8mb3 COMMENT 'x,y'",
]

ORACLE_ALTERS = [
    ("(id int primary key, a varchar(10), b text, c tinytext, d enum('x'), e int) DEFAULT CHARSET=latin1",
     ["ALTER TABLE {t} CONVERT TO CHARACTER SET utf8mb4",
      "ALTER TABLE {t} ADD COLUMN f varchar(3) AFTER a, ADD (g int unsigned, h char(2)), DROP COLUMN e",
      "ALTER TABLE {t} MODIFY a varchar(30) NOT NULL FIRST, CHANGE b bb mediumtext CHARACTER SET latin1",
      "ALTER TABLE {t} RENAME COLUMN bb TO b2, DEFAULT CHARSET=utf8mb3, ADD COLUMN i varchar(2)",
      "ALTER TABLE {t} DROP PRIMARY KEY, ADD PRIMARY KEY (a, id), ALTER COLUMN g SET DEFAULT 5",
      "ALTER TABLE {t} ADD UNIQUE KEY uh (h), MODIFY h char(2) NOT NULL, DROP PRIMARY KEY",
      "ALTER TABLE {t} CONVERT TO CHARSET latin1 COLLATE latin1_bin"]),
    ("(id int, a varchar(3)) charset utf8mb4",
     ["ALTER TABLE {t} ADD b varchar(3), DEFAULT CHARSET=latin1",
      "ALTER TABLE {t} DEFAULT CHARSET=utf8mb3, ADD c text, MODIFY b varchar(4)",
      "ALTER TABLE {t} ADD d char(2), COLLATE latin1_bin, ADD j json",
      "ALTER TABLE {t} ADD e tinytext, CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci, ADD f json",
      "ALTER TABLE {t} ADD g varchar(2) CHARACTER SET latin1, ADD CONSTRAINT ck CHECK (id > 0), "
      "ADD CONSTRAINT uq UNIQUE (a), ALGORITHM=COPY, LOCK=SHARED",
      "ALTER TABLE {t} MODIFY id int NOT NULL, DROP CONSTRAINT ck, ADD UNIQUE KEY (id)",
      "ALTER TABLE {t} RENAME INDEX id TO uid, COMMENT 'c', ENGINE=InnoDB, FORCE",
      "ALTER TABLE {t} DROP INDEX uid, DROP COLUMN IF EXISTS nope, ADD COLUMN IF NOT EXISTS a int",
      "ALTER TABLE {t} MODIFY COLUMN IF EXISTS a varchar(9) AFTER g, CHANGE COLUMN IF EXISTS nope n int"]),
    ("(id int, v varchar(5), primary key (id))",
     ["CREATE UNIQUE INDEX uv ON {t} (v)", "ALTER TABLE {t} MODIFY v varchar(5) NOT NULL",
      "ALTER TABLE {t} DROP PRIMARY KEY", "DROP INDEX uv ON {t}", "ALTER TABLE {t} ADD KEY (v), ADD id2 int FIRST"]),
]


def _info_schema(cur: Any, table: str) -> list[dict[str, Any]]:
    cur.execute("SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, COLLATION_NAME, COLUMN_KEY "
                "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY ORDINAL_POSITION",
                (DB, table))
    out = []
    for name, dtype, ctype, nullable, coll, key in cur.fetchall():
        out.append({"name": name, "data_type": dtype, "column_type": ctype, "nullable": nullable == "YES",
                    "unsigned": " unsigned" in ctype, "collation": coll, "is_key": key == "PRI"})
    return out


def _model_view(model: SchemaModel, table: str) -> list[dict[str, Any]]:
    t = model.table(DB, table)
    assert t is not None, f"{table} not in the model"
    return [{"name": c.name, "data_type": c.data_type, "column_type": c.column_type, "nullable": c.nullable,
             "unsigned": c.unsigned, "collation": c.collation, "is_key": c.is_key} for c in t.columns]


def _enum_values(cur: Any, table: str) -> dict[str, tuple[str, ...]]:
    from canal_core.mysql.schema import parse_enum_values

    cur.execute("SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND "
                "TABLE_NAME=%s AND DATA_TYPE IN ('enum','set')", (DB, table))
    return {n: parse_enum_values(t) for n, t in cur.fetchall()}


@pytest.fixture
def oracle_tables(admin_conn: Any) -> Any:
    made: list[str] = []
    yield made
    with admin_conn.cursor() as cur:
        for t in made:
            cur.execute(f"DROP TABLE IF EXISTS {DB}.`{t}`")


def _assert_same(model: SchemaModel, cur: Any, table: str, context: str) -> None:
    expected = _info_schema(cur, table)
    got = _model_view(model, table)
    for e, g in zip(expected, got, strict=False):
        assert g == e, f"{context}: column {e['name']}: model {g} != server {e}"
    assert len(got) == len(expected), f"{context}: model has {len(got)} columns, server {len(expected)}"
    t = model.table(DB, table)
    cur.execute("SELECT c.COLUMN_NAME, a.ID FROM information_schema.COLUMNS c JOIN "
                "information_schema.COLLATION_CHARACTER_SET_APPLICABILITY a "
                "ON a.FULL_COLLATION_NAME = c.COLLATION_NAME WHERE c.TABLE_SCHEMA=%s AND c.TABLE_NAME=%s", (DB, table))
    for name, cid in cur.fetchall():
        assert t.column(name).collation_id == cid, f"{context}: {name} collation id"
    for c in t.columns:
        if c.data_type in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"):
            assert c.collation_id == 63
    for name, values in _enum_values(cur, table).items():
        c = t.column(name)
        assert (c.enum_values or c.set_values) == values, f"{context}: {name} values"


def test_model_matches_information_schema(admin_conn: Any, oracle_tables: list[str]) -> None:
    model = SchemaModel()
    with admin_conn.cursor() as cur:
        cur.execute(f"SHOW CREATE DATABASE {DB}")
        model.apply(parse_ddl(cur.fetchone()[1], DB))
        for i, body in enumerate(ORACLE_TABLES):
            name = f"shx_oracle_{i}"
            oracle_tables.append(name)
            sql = f"CREATE TABLE {name} {body}"
            cur.execute(f"DROP TABLE IF EXISTS {DB}.{name}")
            cur.execute(f"USE {DB}")
            cur.execute(sql)
            parsed = parse_ddl(sql, DB)
            assert parsed.parsed, (sql, parsed.error)
            model.apply(parsed)
            _assert_same(model, cur, name, sql)
            # the bootstrap path: SHOW CREATE TABLE read back
            cur.execute(f"SHOW CREATE TABLE {DB}.{name}")
            shown = cur.fetchone()[1]
            m2 = SchemaModel()
            m2.apply(parse_ddl(shown, DB))
            _assert_same(m2, cur, name, shown)


def test_model_follows_alter_table_like_the_server(admin_conn: Any, oracle_tables: list[str]) -> None:
    model = SchemaModel()
    with admin_conn.cursor() as cur:
        cur.execute(f"USE {DB}")
        for i, (body, alters) in enumerate(ORACLE_ALTERS):
            name = f"shx_alter_{i}"
            oracle_tables.append(name)
            cur.execute(f"DROP TABLE IF EXISTS {name}")
            for sql in [f"CREATE TABLE {name} {body}", *[a.format(t=name) for a in alters]]:
                cur.execute(sql)
                parsed = parse_ddl(sql, DB)
                assert parsed.parsed, (sql, parsed.error)
                model.apply(parsed)
                _assert_same(model, cur, name, sql)
        # LIKE copies the definition; CREATE ... SELECT copies the selected columns it can see
        name = "shx_alter_like"
        oracle_tables.extend([name, "shx_alter_sel", "shx_seq"])
        cur.execute(f"DROP TABLE IF EXISTS {name}, shx_alter_sel")
        cur.execute("DROP SEQUENCE IF EXISTS shx_seq")
        for sql in (f"CREATE TABLE {name} LIKE shx_alter_0",
                    "CREATE TABLE IF NOT EXISTS shx_alter_sel AS SELECT id, a AS aa, b2, shx_alter_0.g "
                    "FROM shx_alter_0",
                    "CREATE SEQUENCE shx_seq"):
            cur.execute(sql)
            model.apply(parse_ddl(sql, DB))
        _assert_same(model, cur, name, "LIKE")
        _assert_same(model, cur, "shx_seq", "SEQUENCE")
        sel = model.table(DB, "shx_alter_sel")
        assert [c.column_type for c in sel.columns] == [c["column_type"] for c in _info_schema(cur, "shx_alter_sel")]


def test_bootstrap_reads_the_server(admin_conn: Any, oracle_tables: list[str], tmp_path: Path) -> None:
    with admin_conn.cursor() as cur:
        cur.execute(f"USE {DB}")
        oracle_tables.append("shx_boot")
        cur.execute("DROP TABLE IF EXISTS shx_boot")
        cur.execute("CREATE TABLE shx_boot (id bigint unsigned primary key, e enum('a','b'), j json, u uuid)")
        model, pos = read_server_schema(admin_conn, None, [DB])
        assert pos.journal_name and pos.position > 0
        _assert_same(model, cur, "shx_boot", "bootstrap")
    hist = SchemaHistory.bootstrap_from_server(admin_conn, pos, schemas=[DB], store=tmp_path / "h")
    assert hist.table(DB, "shx_boot").primary_key == ("id",)
    again = SchemaHistory(tmp_path / "h")
    again.restore(pos)
    assert again.table(DB, "shx_boot") == hist.table(DB, "shx_boot")


# ---- 2. replaying a scripted DDL + DML mix ---------------------------------------------------------

PREFIX = "shx_"
TABLES = ("shx_a", "shx_b", "shx_c", "shx_tmp", "shx_d")
UUID1 = "4a8e1c6e-3f1b-11ef-9a1c-0242ac120002"


def _ours(schema: str, table: str) -> bool:
    return schema == DB and table.startswith(PREFIX)


class Script:
    """Runs DDL and DML on the server and keeps, per table, the rows as the script wrote them, so
    that each row event's expected before/after images are known without asking the server."""

    def __init__(self, cur: Any, settings: Any) -> None:
        self.cur = cur
        self.settings = settings
        self.rows: dict[str, dict[Any, dict[str, Any]]] = {}  # table -> key -> row (column order kept)
        self.expected: list[tuple[str, str, dict | None, dict | None]] = []
        self.marks: dict[str, tuple[EntryPosition, int]] = {}

    def mark(self, name: str) -> None:
        self.marks[name] = (_master(self.settings), len(self.expected))

    def ddl(self, sql: str, transform: Any = None) -> None:
        self.cur.execute(sql)
        if transform is not None:
            transform(self.rows)

    def insert(self, table: str, key: Any, row: dict[str, Any], computed: dict[str, Any] | None = None) -> None:
        """``computed``: the values the server fills in (generated and defaulted columns)."""
        cols = ", ".join(f"`{c}`" for c in row)
        self.cur.execute(f"INSERT INTO {table} ({cols}) VALUES ({', '.join(['%s'] * len(row))})",
                         [_sql_value(v) for v in row.values()])
        full = {**row, **(computed or {})}
        self.rows.setdefault(table, {})[key] = full
        self.expected.append((table, "write", None, dict(full)))

    def update(self, table: str, key: Any, where: str, changes: dict[str, Any]) -> None:
        sets = ", ".join(f"`{c}`=%s" for c in changes)
        self.cur.execute(f"UPDATE {table} SET {sets} WHERE {where}", [_sql_value(v) for v in changes.values()])
        before = dict(self.rows[table][key])
        after = {**before, **changes}
        self.rows[table][key] = after
        self.expected.append((table, "update", before, after))

    def delete(self, table: str, key: Any, where: str) -> None:
        self.cur.execute(f"DELETE FROM {table} WHERE {where}")
        before = self.rows[table].pop(key)
        self.expected.append((table, "delete", before, None))


def _sql_value(v: Any) -> Any:
    if isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S.%f")
    return v


def _add(col: str, value: Any = None, after: str | None = None, first: bool = False) -> Any:
    def f(rows: dict[str, dict[Any, dict[str, Any]]], table: str) -> None:
        for key, row in rows.get(table, {}).items():
            items = list(row.items())
            if first:
                items.insert(0, (col, value))
            elif after is not None:
                i = [k for k, _ in items].index(after)
                items.insert(i + 1, (col, value))
            else:
                items.append((col, value))
            rows[table][key] = dict(items)
    return f


def _drop(col: str) -> Any:
    def f(rows: dict[str, dict[Any, dict[str, Any]]], table: str) -> None:
        for row in rows.get(table, {}).values():
            row.pop(col)
    return f


def _rename(old: str, new: str) -> Any:
    def f(rows: dict[str, dict[Any, dict[str, Any]]], table: str) -> None:
        for key, row in rows.get(table, {}).items():
            rows[table][key] = {new if k == old else k: v for k, v in row.items()}
    return f


def _on(table: str, *fns: Any) -> Any:
    def f(rows: dict[str, dict[Any, dict[str, Any]]]) -> None:
        for fn in fns:
            fn(rows, table)
    return f


def _move_table(old: str, new: str) -> Any:
    def f(rows: dict[str, dict[Any, dict[str, Any]]]) -> None:
        rows[new] = rows.pop(old, {})
    return f


def _run_script(s: Script) -> None:
    c = s.cur
    s.ddl("CREATE TABLE shx_a (id int PRIMARY KEY, name varchar(20), qty int, flag enum('on','off')) "
          "DEFAULT CHARSET=latin1")
    s.insert("shx_a", 1, {"id": 1, "name": "ä-one", "qty": 10, "flag": "on"})
    s.insert("shx_a", 2, {"id": 2, "name": "two", "qty": 20, "flag": "off"})
    s.ddl("ALTER TABLE shx_a ADD COLUMN price decimal(8,2) AFTER name, ADD COLUMN big bigint unsigned",
          _on("shx_a", _add("price", after="name"), _add("big")))
    s.insert("shx_a", 3, {"id": 3, "name": "three", "price": Decimal("3.50"), "qty": 30, "flag": "on",
                          "big": 2**64 - 2})
    s.ddl("ALTER TABLE shx_a DROP COLUMN qty", _on("shx_a", _drop("qty")))
    s.update("shx_a", 1, "id=1", {"price": Decimal("1.25")})
    s.ddl("ALTER TABLE shx_a MODIFY name varchar(50) NOT NULL DEFAULT '', "
          "MODIFY flag enum('on','off','auto') DEFAULT 'auto'")
    s.mark("snapshot")
    s.insert("shx_a", 4, {"id": 4, "name": "four", "price": Decimal("4.00"), "flag": "auto", "big": 7})
    s.ddl("ALTER TABLE shx_a CHANGE name title varchar(60) CHARACTER SET utf8mb4, RENAME COLUMN price TO cost",
          _on("shx_a", _rename("name", "title"), _rename("price", "cost")))
    s.insert("shx_a", 5, {"id": 5, "title": "fünf 😀", "cost": Decimal("5.55"), "flag": "off", "big": None})
    s.ddl("RENAME TABLE shx_a TO shx_b", _move_table("shx_a", "shx_b"))
    s.update("shx_b", 2, "id=2", {"title": "TWO", "big": 2**63})
    s.delete("shx_b", 3, "id=3")
    s.mark("middle")
    s.ddl("ALTER TABLE shx_b DROP PRIMARY KEY, ADD PRIMARY KEY (id, title), ALGORITHM=COPY")
    s.insert("shx_b", 6, {"id": 6, "title": "six", "cost": Decimal("-6.00"), "flag": "on", "big": 6})
    s.update("shx_b", 6, "id=6", {"flag": "auto"})
    # drop and recreate under the same name, with other columns
    s.ddl("DROP TABLE shx_b", lambda rows: rows.pop("shx_b"))
    s.ddl("CREATE TABLE `shx_b` (k varchar(10) PRIMARY KEY, doc json, n int unsigned, at datetime(3), u uuid, "
          "tags set('x','y','z')) /*!40100 DEFAULT CHARSET=utf8mb4 */")
    at = dt.datetime(2024, 2, 29, 13, 14, 15, 123000)
    s.insert("shx_b", "k1", {"k": "k1", "doc": '{"a": [1, "ü"]}', "n": 4_000_000_000, "at": at, "u": UUID1,
                             "tags": "x,z"})
    s.ddl("ALTER TABLE shx_b ADD (c1 int, c2 varchar(5)), ADD COLUMN c0 tinyint FIRST, "
          "CONVERT TO CHARACTER SET latin1", _on("shx_b", _add("c1"), _add("c2"), _add("c0", first=True)))
    s.insert("shx_b", "k2", {"c0": -5, "k": "k2", "doc": "[]", "n": 1, "at": at, "u": None, "tags": "",
                             "c1": 11, "c2": "çé"})
    # a swap through a temporary name in one RENAME TABLE
    s.ddl("CREATE TABLE shx_c (x int NOT NULL, y varchar(3), v int AS (x * 2) VIRTUAL, h int INVISIBLE, "
          "UNIQUE KEY ux (x))")
    s.insert("shx_c", 1, {"x": 1, "y": "c"}, {"v": 2, "h": None})
    s.ddl("RENAME TABLE shx_b TO shx_tmp, shx_c TO shx_b, shx_tmp TO shx_c",
          lambda rows: rows.update({"shx_b": rows.pop("shx_c"), "shx_c": rows.pop("shx_b")}))
    s.insert("shx_b", 2, {"x": 2, "y": "b2", "h": 7}, {"v": 4})
    s.update("shx_c", "k1", "k='k1'", {"n": 5, "c1": 1})
    s.ddl("CREATE INDEX iy ON shx_b (y(2))")
    s.ddl("TRUNCATE TABLE shx_b", lambda rows: rows["shx_b"].clear())
    s.insert("shx_b", 3, {"x": 3, "y": "b3"}, {"v": 6, "h": None})
    s.ddl("DROP INDEX iy ON shx_b")
    s.ddl("/* a comment */ ALTER TABLE `canal_test`.`shx_b` ADD COLUMN `z z` bit(5) AFTER `x`",
          _on("shx_b", _add("z z", after="x")))
    s.insert("shx_b", 4, {"x": 4, "z z": 19, "y": None}, {"v": 8, "h": None})
    c.execute("SELECT 1")


def _strip_table_map(monkeypatch: Any) -> None:
    """Make every TABLE_MAP look like binlog_row_metadata=MINIMAL-without-anything: no names, no
    signedness, no charsets, no ENUM/SET values (done in-process; the server keeps FULL)."""
    from canal_core.binlog import tablemap

    orig = decoder_module.parse_table_map_body

    def stripped(body: bytes, p: int, flavor: str = "mysql") -> Any:
        t = orig(body, p, flavor)
        cols = tuple(replace(col, name=None, unsigned=False, collation=None, enum_values=None, set_values=None,
                             geometry_type=None, visible=True) for col in t.columns)
        return replace(t, columns=cols, primary_key=(), has_optional_metadata=False,
                       signature=tablemap._signature(list(cols)))

    monkeypatch.setattr(decoder_module, "parse_table_map_body", stripped)


def _replay(settings: Any, hist: SchemaHistory, start: EntryPosition, end: EntryPosition, *,
            snapshot_at: EntryPosition | None = None) -> list[tuple[str, str, dict | None, dict | None]]:
    """The parser's loop, reduced: QUERY -> apply_ddl (+ invalidate), TABLE_MAP -> check_table_map,
    rows of our tables decoded with the history's hints."""
    got: list[tuple[str, str, dict | None, dict | None]] = []
    dec = BinlogDecoder(schema_hints=hist.hints, table_filter=_ours)
    snapped = snapshot_at is None
    with ReplicationConnection(settings.host, settings.port, settings.repl_user, settings.repl_password) as rc:
        for raw in rc.dump(start.journal_name, start.position, non_blocking=True):
            for ev in dec.iter_events(dec.decode(raw)):
                if ev.file is None or ev.position is None or isinstance(ev, E.FormatDescriptionEvent | E.RotateEvent):
                    continue
                pos = EntryPosition(journal_name=ev.file, position=ev.position, server_id=ev.server_id,
                                    timestamp=ev.timestamp * 1000)
                if position_key(pos) >= position_key(end):
                    return got
                if not snapped and position_key(pos) >= position_key(snapshot_at):
                    assert hist.maybe_snapshot(pos, force=True)
                    snapped = True
                if isinstance(ev, E.QueryEvent):
                    if ev.query in ("BEGIN", "COMMIT"):
                        continue
                    hist.apply_ddl(ev.schema, ev.query, pos)
                    dec.invalidate_table_cache()
                elif isinstance(ev, E.TableMapEvent) and _ours(ev.table.schema, ev.table.table):
                    hist.check_table_map(ev.table, pos)
                elif isinstance(ev, E.RowsEvent) and ev.rows is not None:
                    names = [col.name for col in ev.table.columns]
                    for row in ev.rows:
                        if ev.kind == "update":
                            got.append((ev.table.table, "update", dict(zip(names, row[0], strict=True)),
                                        dict(zip(names, row[1], strict=True))))
                        elif ev.kind == "write":
                            got.append((ev.table.table, "write", None, dict(zip(names, row, strict=True))))
                        else:
                            got.append((ev.table.table, "delete", dict(zip(names, row, strict=True)), None))
    return got


def _normalise(rows: list[tuple[str, str, dict | None, dict | None]]) -> list[Any]:
    def norm(d: dict | None) -> Any:
        if d is None:
            return None
        return {k: (str(v) if k == "u" and v is not None else v) for k, v in d.items()}
    return [(t, k, norm(b), norm(a)) for t, k, b, a in rows]


@pytest.fixture
def clean_tables(admin_conn: Any) -> Any:
    def drop() -> None:
        with admin_conn.cursor() as cur:
            for t in (*TABLES, "shx_sv", "shx_u", "shx_m"):
                cur.execute(f"DROP TABLE IF EXISTS {DB}.{t}")
    drop()
    yield
    drop()


def test_replay_decodes_rows_with_their_schema_of_the_time(mariadb_settings: Any, admin_conn: Any,
                                                           clean_tables: Any, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    t0 = time.monotonic()
    source = {"host": mariadb_settings.host, "port": mariadb_settings.port, "user": mariadb_settings.admin_user}
    start = _master(mariadb_settings)
    hist = SchemaHistory.bootstrap_from_server(admin_conn, start, schemas=[DB], store=tmp_path / "history",
                                               table_filter=_ours, source=source)
    with admin_conn.cursor() as cur:
        cur.execute(f"USE {DB}")
        script = Script(cur, mariadb_settings)
        _run_script(script)
        final_schema = {t: _info_schema(cur, t) for t in ("shx_b", "shx_c")}
    end = _master(mariadb_settings)

    # (a) fresh instance: the history bootstrapped before the script; TABLE_MAPs stripped of metadata
    with monkeypatch.context() as mp:
        _strip_table_map(mp)
        got = _replay(mariadb_settings, hist, start, end, snapshot_at=script.marks["snapshot"][0])
    assert _normalise(got) == _normalise(script.expected)
    for t, cols in final_schema.items():
        assert _model_view(hist.model, t) == cols
    n_records = len(hist.records())
    assert n_records >= 15 and len(hist.snapshot_list()) == 2

    # (b) a new instance restored in the middle; TABLE_MAPs as the server sends them (cross-checked)
    middle, index = script.marks["middle"]
    again = SchemaHistory(tmp_path / "history", table_filter=_ours)
    again.restore(middle)
    assert again.table(DB, "shx_a") is None and [c.name for c in again.table(DB, "shx_b").columns] == \
        ["id", "title", "cost", "flag", "big"]
    got = _replay(mariadb_settings, again, middle, end)
    assert _normalise(got) == _normalise(script.expected[index:])
    assert len(again.records()) == n_records  # replayed DDL is recognised, not recorded twice
    assert time.monotonic() - t0 < 60


# ---- 3. typed errors with positions ----------------------------------------------------------------


def _pos_in(text: str, lo: EntryPosition, hi: EntryPosition) -> bool:
    """The first FILE:POS in text lies in [lo, hi)."""
    m = re.search(r"([\w.-]+\.\d+):(\d+)", text)
    if not m:
        return False
    p = EntryPosition(journal_name=m.group(1), position=int(m.group(2)))
    return position_key(lo) <= position_key(p) < position_key(hi)


def test_bad_ddl_unknown_table_and_mismatch_are_typed_errors(mariadb_settings: Any, admin_conn: Any,
                                                             clean_tables: Any, tmp_path: Path) -> None:
    from canal_core.parse import history_cli

    source = {"host": mariadb_settings.host, "port": mariadb_settings.port, "user": mariadb_settings.admin_user}
    with admin_conn.cursor() as cur:
        cur.execute(f"USE {DB}")
        cur.execute("CREATE TABLE shx_m (a int PRIMARY KEY, b varchar(5), c date)")
        p0 = _master(mariadb_settings)
        hist = SchemaHistory.bootstrap_from_server(admin_conn, p0, schemas=[DB], store=tmp_path / "h",
                                                   table_filter=_ours, source=source)
        cur.execute("CREATE TABLE shx_sv (id int) WITH SYSTEM VERSIONING")  # DDL we do not model
        p_unknown = _master(mariadb_settings)
        cur.execute("CREATE TABLE shx_u (id int)")
        p_after_create = _master(mariadb_settings)
        cur.execute("INSERT INTO shx_u VALUES (1)")
        cur.execute("ALTER TABLE shx_m ADD COLUMN d int")
        p_after_alter = _master(mariadb_settings)
        cur.execute("INSERT INTO shx_m VALUES (1, 'x', '2024-01-01', 4)")
    end = _master(mariadb_settings)

    # bad DDL on a subscribed table
    with pytest.raises(UnparsableDdlError) as ei:
        _replay(mariadb_settings, hist, p0, end)
    msg = str(ei.value)
    assert msg.startswith(f"cannot parse DDL on {DB}.shx_sv at ") and _pos_in(msg, p0, p_unknown), msg

    # rows of a table the history never saw created (the replay starts after its CREATE)
    h2 = SchemaHistory(tmp_path / "h", table_filter=_ours)
    h2.restore(p_after_create)
    with pytest.raises(UnknownTableError) as ei:
        _replay(mariadb_settings, h2, p_after_create, end)
    msg = str(ei.value)
    assert f"rows for {DB}.shx_u at " in msg and _pos_in(msg, p_after_create, p_after_alter), msg
    assert "history_cli rebuild" in msg

    # history: 3 columns; TABLE_MAP: 4 (the replay starts after the ALTER)
    h3 = SchemaHistory(tmp_path / "h", table_filter=lambda s, t: t == "shx_m")
    h3.restore(p_after_alter)
    assert len(h3.table(DB, "shx_m").columns) == 3
    with pytest.raises(SchemaMismatchError) as ei:
        _replay(mariadb_settings, h3, p_after_alter, end)
    msg = str(ei.value)
    assert msg.startswith(f"TABLE_MAP for {DB}.shx_m at ") and _pos_in(msg, p_after_alter, end), msg
    assert "the binlog has 4 columns, the history 3" in msg
    cmd = msg[msg.index("python -m canal_core.parse.history_cli rebuild"):].split()
    assert _pos_in(cmd[cmd.index("--at") + 1], p_after_alter, end)
    assert cmd[cmd.index("--data-dir") + 1] == str(tmp_path / "h")

    # the printed command fixes it (the binlog check sees no DDL after that position on canal_test)
    at = cmd[cmd.index("--at") + 1]
    rc = history_cli.main(["rebuild", "--data-dir", str(tmp_path / "h"), "--host", mariadb_settings.host,
                           "--port", str(mariadb_settings.port), "--user", mariadb_settings.admin_user,
                           "--password", mariadb_settings.admin_password, "--at", at, "--schemas", DB])
    assert rc == 0
    h4 = SchemaHistory(tmp_path / "h", table_filter=lambda s, t: t == "shx_m")
    h4.restore(history_cli.parse_at(at))
    got = _replay(mariadb_settings, h4, history_cli.parse_at(at), end)
    assert [r for r in got if r[0] == "shx_m"] == [
        ("shx_m", "write", None, {"a": 1, "b": "x", "c": dt.date(2024, 1, 1), "d": 4})]
    assert (tmp_path / "h" / "archive").is_dir()
    # and the rebuild refuses when DDL ran after the position
    rc = history_cli.main(["rebuild", "--data-dir", str(tmp_path / "h2"), "--host", mariadb_settings.host,
                           "--port", str(mariadb_settings.port), "--user", mariadb_settings.admin_user,
                           "--password", mariadb_settings.admin_password,
                           "--at", f"{p_unknown.journal_name}:{p_unknown.position}", "--schemas", DB])
    assert rc == 3
