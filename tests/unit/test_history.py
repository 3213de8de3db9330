"""SchemaHistory without a server: recording, restore semantics, snapshots (interval / expire), the
file store, the subscription rules for DDL we cannot parse or apply, and TABLE_MAP cross-checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from canal_core.binlog.constants import ColumnType as T
from canal_core.binlog.tablemap import Column, TableDef
from canal_core.parse.ddl import parse_ddl
from canal_core.parse.history import SchemaHistory, position_key
from canal_core.parse.history_cli import main as cli_main
from canal_core.parse.history_cli import parse_at
from canal_core.parse.history_store import FileHistoryStore, MemoryHistoryStore
from canal_core.parse.model import (
    EVENT_ALTER,
    EVENT_QUERY,
    SchemaHistoryError,
    SchemaMismatchError,
    UnknownTableError,
    UnparsableDdlError,
)
from canal_core.parse.schema import SchemaModel
from canal_core.parse.table_map_check import table_map_differences
from canal_core.protocol.position import EntryPosition


def P(pos: int, file: str = "mysql-bin.000001", **kw: Any) -> EntryPosition:
    return EntryPosition(journal_name=file, position=pos, server_id=1, **kw)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def _history(store: Any = None, *ddl: str, at: int = 4, **kw: Any) -> SchemaHistory:
    m = SchemaModel()
    for sql in ddl:
        m.apply(parse_ddl(sql, "db"))
    return SchemaHistory.create(m, P(at), store=store, **kw)


def test_positions_order_by_file_number_then_offset() -> None:
    assert position_key(P(500, "mysql-bin.999999")) < position_key(P(4, "mysql-bin.1000000"))
    assert position_key(P(4, "b.000002")) > position_key(P(9999, "b.000001"))


def test_apply_records_and_restore_replays_up_to_the_position(tmp_path: Path) -> None:
    h = _history(tmp_path, "CREATE TABLE t (a int)")
    assert h.apply_ddl("db", "ALTER TABLE t ADD b int", P(100)).event_type == EVENT_ALTER
    h.apply_ddl("db", "ALTER TABLE t ADD c int", P(200))
    h.apply_ddl("db", "GRANT ALL ON *.* TO x", P(250))  # changes nothing: not recorded
    h.apply_ddl("db", "RENAME TABLE t TO u", P(300))
    assert [r["position"]["position"] for r in h.records()] == [100, 200, 300]
    lines = (tmp_path / "history.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    assert rec["sql"] == "ALTER TABLE t ADD b int" and rec["position"]["journalName"] == "mysql-bin.000001"
    assert rec["result"] == {"type": EVENT_ALTER, "schema": "db", "table": "t", "tables": [["db", "t"]],
                             "parsed": True}

    again = SchemaHistory(tmp_path)
    with pytest.raises(SchemaHistoryError, match="restore"):
        again.apply_ddl("db", "ALTER TABLE t ADD z int", P(400))
    for pos, cols in ((4, ["a"]), (100, ["a"]), (101, ["a", "b"]), (200, ["a", "b"]), (300, ["a", "b", "c"])):
        again.restore(P(pos))
        assert [c.name for c in again.table("db", "t").columns] == cols, pos
    again.restore(P(200, included=True))  # the event at 200 was consumed
    assert [c.name for c in again.table("db", "t").columns] == ["a", "b", "c"]
    again.restore(P(301))
    assert again.table("db", "t") is None and again.table("db", "u") is not None
    with pytest.raises(SchemaHistoryError, match=r"no snapshot at or before mysql-bin\.000001:3"):
        again.restore(P(3))


def test_replayed_ddl_is_not_recorded_twice() -> None:
    store = MemoryHistoryStore()
    h = _history(store, "CREATE TABLE t (a int)")
    h.apply_ddl("db", "ALTER TABLE t ADD b int", P(100))
    h.apply_ddl("db", "ALTER TABLE t ADD c int", P(200))
    h2 = SchemaHistory(store)
    h2.restore(P(100))
    h2.apply_ddl("db", "ALTER TABLE t ADD b int", P(100))
    h2.apply_ddl("db", "ALTER TABLE t ADD c int", P(200))
    assert len(h2.records()) == 2
    assert [c.name for c in h2.table("db", "t").columns] == ["a", "b", "c"]


def test_snapshot_interval_and_expire() -> None:
    clock = Clock()
    store = MemoryHistoryStore()
    h = _history(store, "CREATE TABLE t (a int)", clock=clock, snapshot_interval_hours=1, snapshot_expire_hours=5)
    assert not h.maybe_snapshot(P(50))  # just bootstrapped
    h.apply_ddl("db", "ALTER TABLE t ADD b int", P(100))
    assert not h.maybe_snapshot(P(150))  # interval not over
    clock.now += 3600
    assert h.maybe_snapshot(P(150))
    clock.now += 3600
    assert not h.maybe_snapshot(P(160))  # nothing changed since
    h.apply_ddl("db", "ALTER TABLE t ADD c int", P(200))
    clock.now += 6 * 3600
    assert h.maybe_snapshot(P(250))  # and the first two snapshots expire
    snaps = h.snapshot_list()
    assert [s["position"]["position"] for s in snaps] == [250]
    assert h.records() == []  # compacted: the kept snapshot includes every record
    h2 = SchemaHistory(store)
    h2.restore(P(300))
    assert [c.name for c in h2.table("db", "t").columns] == ["a", "b", "c"]
    with pytest.raises(SchemaHistoryError):
        h2.restore(P(120))  # expired


def test_a_snapshot_holding_ddl_at_the_restore_position_is_not_used() -> None:
    store = MemoryHistoryStore()
    h = _history(store, "CREATE TABLE t (a int)")
    h.apply_ddl("db", "ALTER TABLE t ADD b int", P(100))
    h.maybe_snapshot(P(100), force=True)  # taken right after the DDL at 100
    h2 = SchemaHistory(store)
    h2.restore(P(100))  # the DDL at 100 is still to come
    assert [c.name for c in h2.table("db", "t").columns] == ["a"]
    h2.restore(P(101))
    assert [c.name for c in h2.table("db", "t").columns] == ["a", "b"]


def test_file_store_survives_a_torn_last_line(tmp_path: Path) -> None:
    h = _history(tmp_path, "CREATE TABLE t (a int)")
    h.apply_ddl("db", "ALTER TABLE t ADD b int", P(100))
    with open(tmp_path / "history.jsonl", "a") as f:
        f.write('{"seq": 2, "posi')
    h2 = SchemaHistory(FileHistoryStore(tmp_path))
    assert len(h2.records()) == 1
    h2.restore(P(200))
    h2.apply_ddl("db", "ALTER TABLE t ADD c int", P(200))
    assert SchemaHistory(tmp_path).records()[-1]["seq"] == 2
    assert (tmp_path / "meta.json").exists() and list((tmp_path / "snapshots").glob("snapshot-*.json"))


def test_unparsable_ddl_rules() -> None:
    h = _history(None, "CREATE TABLE sub (a int)", "CREATE TABLE other (a int)",
                 table_filter=lambda s, t: t == "sub", source={"host": "db1", "port": 3306, "user": "canal"})
    with pytest.raises(UnparsableDdlError) as ei:
        h.apply_ddl("db", "ALTER TABLE sub FROBNICATE", P(100))
    assert "db.sub" in str(ei.value) and "mysql-bin.000001:100" in str(ei.value)
    # not subscribed: recorded as unparsed and passed on; the table is no longer trusted
    res = h.apply_ddl("db", "ALTER TABLE other FROBNICATE", P(200))
    assert not res.parsed and res.table == "other"
    assert h.records()[-1]["result"]["parsed"] is False
    assert h.table("db", "other") is None
    with pytest.raises(UnknownTableError, match=r"lost track of it: unparsed DDL at mysql-bin\.000001:200"):
        h.check_table_map(_tdef("other", (T.LONG, 0)), P(300))
    # a later CREATE brings it back
    h.apply_ddl("db", "DROP TABLE other", P(400))
    h.apply_ddl("db", "CREATE TABLE other (b int)", P(410))
    assert h.check_table_map(_tdef("other", (T.LONG, 0)), P(420)).columns[0].name == "b"


def test_ddl_that_does_not_fit_is_a_mismatch_on_subscribed_tables() -> None:
    h = _history(None, "CREATE TABLE t (a int)", "CREATE TABLE o (a int)", table_filter=lambda s, t: t == "t",
                 source={"host": "db1", "port": 3306, "user": "canal"})
    h.data_dir  # noqa: B018 - memory store: no directory
    with pytest.raises(SchemaMismatchError) as ei:
        h.apply_ddl("db", "ALTER TABLE t DROP COLUMN nope", P(100))
    msg = str(ei.value)
    assert "db.t" in msg and "mysql-bin.000001:100" in msg
    assert "python -m canal_core.parse.history_cli rebuild --data-dir <data-dir> --host db1 --port 3306 " \
           "--user canal --at mysql-bin.000001:100" in msg
    assert [c.name for c in h.table("db", "t").columns] == ["a"]  # nothing half-applied
    h.apply_ddl("db", "ALTER TABLE o DROP COLUMN nope", P(200))  # not subscribed: passed on
    assert h.table("db", "o") is None


def test_tracked_schemas_limit_what_is_fatal() -> None:
    m = SchemaModel()
    h = SchemaHistory.create(m, P(4), schemas=["db"])
    h.apply_ddl("elsewhere", "ALTER TABLE unknown ADD b int", P(100))  # another schema: passed on
    with pytest.raises(SchemaMismatchError):
        h.apply_ddl("db", "ALTER TABLE unknown ADD b int", P(200))


def test_hints() -> None:
    h = _history(None, "CREATE TABLE t (id bigint unsigned, e enum('a','b'), s varchar(3) charset latin1, u uuid)")
    hints = h.hints("db", "t")
    assert [x.name for x in hints] == ["id", "e", "s", "u"]
    assert hints[0].unsigned and hints[1].enum_values == ("a", "b") and hints[2].collation == 8
    assert hints[3].logical == "uuid"
    assert h.hints("db", "nope") is None


# ---- TABLE_MAP checks ------------------------------------------------------------------------------


def _tdef(table: str, *cols: tuple[int, int], names: tuple[str | None, ...] | None = None,
          om: bool = False, **colkw: Any) -> TableDef:
    out = []
    for i, (t, length) in enumerate(cols):
        kw = {k: v[i] for k, v in colkw.items() if v[i] is not None}
        out.append(Column(index=i, type=t, meta=0, nullable=True, name=names[i] if names else None, length=length,
                          **kw))
    return TableDef(schema="db", table=table, columns=tuple(out), has_optional_metadata=om)


def test_check_table_map() -> None:
    h = _history(None, "CREATE TABLE t (id int unsigned, n varchar(5), d decimal(8,2), at datetime(3), "
                       "e enum('x','y'), b text, j json, g point, c char(2), u uuid, y year, bt bit(4))")
    good = [(T.LONG, 0), (T.VARCHAR, 20), (T.NEWDECIMAL, 0), (T.DATETIME2, 0), (T.ENUM, 1), (T.BLOB, 2),
            (T.BLOB, 4), (T.GEOMETRY, 4), (T.STRING, 8), (T.STRING, 16), (T.YEAR, 0), (T.BIT, 0)]
    kw = {"precision": [None, None, 8, None, None, None, None, None, None, None, None, None],
          "scale": [None, None, 2, None, None, None, None, None, None, None, None, None],
          "fsp": [None, None, None, 3, None, None, None, None, None, None, None, None],
          "bits": [None] * 11 + [4]}
    assert h.check_table_map(_tdef("t", *good, **kw), P(10)).name == "t"

    def problems(cols: list[tuple[int, int]], **over: Any) -> list[str]:
        args = {**kw, **over}
        return table_map_differences(h.table("db", "t"), _tdef("t", *cols, **args))

    assert problems(good[:-1], **{k: v[:-1] for k, v in kw.items()}) == \
        ["the binlog has 11 columns, the history 12 (id, n, d, at, e, b, j, g, c, u, y, bt)"]
    assert "binlog type LONGLONG" in problems([(T.LONGLONG, 0), *good[1:]])[0]
    assert "2-byte lengths" not in " ".join(problems(good))
    assert "3-byte lengths" in problems([*good[:5], (T.BLOB, 3), *good[6:]])[0]
    assert "decimal(9,2)" in problems(good, precision=[None, None, 9] + [None] * 9)[0]
    assert "fractional seconds 6" in problems(good, fsp=[None, None, None, 6] + [None] * 8)[0]
    assert "bit(5)" in problems(good, bits=[None] * 11 + [5])[0]
    names = ("id", "n", "d", "at", "e", "b", "j", "g", "c", "u", "y", "bt")
    assert table_map_differences(h.table("db", "t"), _tdef("t", *good, names=names, **kw)) == []
    renamed = _tdef("t", *good, names=("id", "name", *names[2:]), **kw)
    assert "the binlog names it 'name'" in table_map_differences(h.table("db", "t"), renamed)[0]
    signed = _tdef("t", *good, om=True, unsigned=[False] + [None] * 11, **kw)
    assert "the binlog says signed" in table_map_differences(h.table("db", "t"), signed)[0]
    enum = _tdef("t", *good, enum_values=[None] * 4 + [("x", "z")] + [None] * 7, **kw)
    assert "ENUM values" in table_map_differences(h.table("db", "t"), enum)[0]
    with pytest.raises(SchemaMismatchError, match=r"TABLE_MAP for db\.t at mysql-bin\.000001:77 disagrees"):
        h.check_table_map(_tdef("t", (T.LONG, 0)), P(77))
    with pytest.raises(UnknownTableError, match=r"rows for db\.nope at mysql-bin\.000001:78"):
        h.check_table_map(_tdef("nope", (T.LONG, 0)), P(78))


def test_cli_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    h = _history(tmp_path, "CREATE TABLE t (a int primary key)")
    h.apply_ddl("db", "ALTER TABLE t ADD b varchar(3)", P(100))
    assert cli_main(["show", "--data-dir", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["snapshots"]) == 1 and out["records"][0]["sql"] == "ALTER TABLE t ADD b varchar(3)"
    assert cli_main(["show", "--data-dir", str(tmp_path), "--at", "mysql-bin.000001:101"]) == 0
    text = capsys.readouterr().out
    assert "db.t" in text and "a int(11) NOT NULL KEY" in text and "b varchar(3)" in text
    assert parse_at("mysql-bin.000003:4") == EntryPosition(journal_name="mysql-bin.000003", position=4)
    assert EVENT_QUERY == 7
