"""EventParser end to end on the private MariaDB: real history, locator, converter and position files."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from canal_core.entry.convert import EntryConverter
from canal_core.parse.filter import EventFilter
from canal_core.parse.history import SchemaHistory
from canal_core.parse.model import EVENT_ALTER, EVENT_CREATE, EVENT_DELETE, EVENT_INSERT, EVENT_UPDATE
from canal_core.parse.parser import EventParser, ParserConfig, SourceConfig
from canal_core.parse.position import FilePositionManager

pytestmark = pytest.mark.integration

ROWDATA, BEGIN, END = 2, 1, 3


class Collector:
    def __init__(self) -> None:
        self.entries: list[Any] = []
        self.lock = threading.Lock()

    def __call__(self, entries: Any) -> None:
        with self.lock:
            self.entries.extend(entries)

    def wait(self, pred: Callable[[list[Any]], bool], timeout: float = 20) -> list[Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                snap = list(self.entries)
            if pred(snap):
                return snap
            time.sleep(0.05)
        raise AssertionError(f"timed out; got {len(snap)} entries: {[(e.entry_type, e.table) for e in snap][-20:]}")


def _rows(entries: list[Any], table: str) -> list[tuple[int, Any]]:
    return [(e.event_type, r) for e in entries if e.entry_type == ROWDATA and e.table == table and e.rows
            for r in e.rows]


@pytest.fixture
def clean(admin_conn: Any) -> Iterator[None]:
    with admin_conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS canal_test.parser_t, canal_test.parser_u")
    yield
    with admin_conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS canal_test.parser_t, canal_test.parser_u")


def _parser(s: Any, tmp: Path, sink: Collector, history: SchemaHistory) -> EventParser:
    cfg = ParserConfig(destination="example", master=SourceConfig(s.host, s.port, s.repl_user, s.repl_password),
                       heartbeat_period=1.0, reconnect_min=0.2)
    return EventParser(cfg, sink=sink, history=history, positions=FilePositionManager(tmp / "meta"),
                       converter_factory=lambda ident: EntryConverter(ident, timezone="UTC"),
                       event_filter=EventFilter.from_config({"canal.instance.filter.regex": "canal_test\\.parser_.*"}))


def _bootstrap(s: Any, tmp: Path) -> SchemaHistory:
    conn = pymysql.connect(**s.repl_kwargs())
    try:
        return SchemaHistory.bootstrap_from_server(conn, schemas=["canal_test"], store=tmp / "history")
    finally:
        conn.close()


def test_parser_streams_entries_and_resumes_from_its_position(mariadb_settings: Any, admin_conn: Any,
                                                               clean: None, tmp_path: Path) -> None:
    history = _bootstrap(mariadb_settings, tmp_path)
    sink = Collector()
    parser = _parser(mariadb_settings, tmp_path, sink, history)
    parser.start()
    try:
        time.sleep(0.5)  # the parser has located the current end
        with admin_conn.cursor() as cur:
            cur.execute("CREATE TABLE canal_test.parser_t (id INT PRIMARY KEY, name VARCHAR(20), amount DECIMAL(8,2))")
            cur.execute("INSERT INTO canal_test.parser_t VALUES (1, 'a', 1.50), (2, 'b', 2.25)")
            cur.execute("UPDATE canal_test.parser_t SET amount = 9.99 WHERE id = 1")
            cur.execute("ALTER TABLE canal_test.parser_t CHANGE name label VARCHAR(30)")
            cur.execute("INSERT INTO canal_test.parser_t VALUES (3, 'c', 3.00)")
            cur.execute("DELETE FROM canal_test.parser_t WHERE id = 2")
        got = sink.wait(lambda es: any(e.event_type == EVENT_DELETE for e in es))
    finally:
        parser.stop()
    assert parser.last_error is None, parser.last_error
    ddl = [(e.event_type, e.sql) for e in got if e.entry_type == ROWDATA and e.sql]
    assert [t for t, _ in ddl] == [EVENT_CREATE, EVENT_ALTER]
    rows = _rows(got, "parser_t")
    assert rows[0][0] == EVENT_INSERT
    inserts = [r[:2] for t, r in rows if t == EVENT_INSERT]
    assert inserts == [(1, "a"), (2, "b"), (3, "c")]
    # rows written before the ALTER carry the old column name, after it the new one
    names = [e.columns for e in got if e.entry_type == ROWDATA and e.table == "parser_t" and e.rows]
    assert names[0] == ("id", "name", "amount") and names[-1] == ("id", "label", "amount")
    update = [r for t, r in rows if t == EVENT_UPDATE]
    assert str(update[0][0][2]) == "1.50" and str(update[0][1][2]) == "9.99"
    # every transaction is whole: BEGIN ... END
    kinds = [e.entry_type for e in got]
    assert kinds.count(BEGIN) == kinds.count(END) >= 4
    # the position file holds the last boundary, in Canal's JSON
    stored = (tmp_path / "meta" / "example" / "parse.dat").read_text()
    assert '"postion"' in stored and '"journalName"' in stored

    # restart: only what was written while stopped comes, nothing again
    with admin_conn.cursor() as cur:
        cur.execute("INSERT INTO canal_test.parser_t VALUES (4, 'd', 4.00)")
    sink2 = Collector()
    history2 = SchemaHistory(tmp_path / "history")
    parser2 = _parser(mariadb_settings, tmp_path, sink2, history2)
    parser2.start()
    try:
        got2 = sink2.wait(lambda es: any(e.event_type == EVENT_INSERT for e in es))
        time.sleep(0.5)
    finally:
        parser2.stop()
    assert parser2.last_error is None, parser2.last_error
    assert [r[:2] for _, r in _rows(got2, "parser_t")] == [(4, "d")]
    assert next(e.columns for e in got2 if e.rows) == ("id", "label", "amount")


def test_rows_of_a_table_the_history_does_not_know_stop_the_parser(mariadb_settings: Any, admin_conn: Any,
                                                                   clean: None, tmp_path: Path) -> None:
    with admin_conn.cursor() as cur:
        cur.execute("CREATE TABLE canal_test.parser_u (id INT PRIMARY KEY)")
    # a history that only tracks another schema: canal_test.parser_u is unknown to it
    conn = pymysql.connect(**mariadb_settings.repl_kwargs())
    try:
        history = SchemaHistory.bootstrap_from_server(conn, schemas=["mysql"], store=tmp_path / "history")
    finally:
        conn.close()
    sink = Collector()
    parser = _parser(mariadb_settings, tmp_path, sink, history)
    parser.start()
    try:
        time.sleep(0.5)
        with admin_conn.cursor() as cur:
            cur.execute("INSERT INTO canal_test.parser_u VALUES (1)")
        deadline = time.monotonic() + 15
        while parser.running and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        parser.stop()
    err = parser.last_error
    assert err is not None and type(err).__name__ == "UnknownTableError", err
    assert "canal_test.parser_u" in str(err) and "mysql-bin." in str(err)
    assert not any(e.rows for e in sink.entries)
