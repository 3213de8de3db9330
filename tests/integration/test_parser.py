"""EventParser end to end on the private MariaDB: real history, locator, converter and position files."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pymysql
import pytest

from canal_core.entry.convert import EntryConverter
from canal_core.parse.filter import EventFilter
from canal_core.parse.health import ErrorKind, ParserState
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


@pytest.fixture
def parser_t(admin_conn: Any, clean: None) -> None:
    """canal_test.parser_t, created before the test's parser starts (``clean`` drops it afterwards)."""
    with admin_conn.cursor() as cur:
        cur.execute("CREATE TABLE canal_test.parser_t (id INT PRIMARY KEY, name VARCHAR(20), amount DECIMAL(8,2))")


def _parser(s: Any, tmp: Path, sink: Collector, history: SchemaHistory, **config: Any) -> EventParser:
    cfg = ParserConfig(destination="example", master=SourceConfig(s.host, s.port, s.repl_user, s.repl_password),
                       heartbeat_period=1.0, reconnect_min=0.2, **config)
    return EventParser(cfg, sink=sink, history=history, positions=FilePositionManager(tmp / "meta"),
                       converter_factory=lambda ident: EntryConverter(ident, timezone="UTC"),
                       event_filter=EventFilter.from_config({"canal.instance.filter.regex": "canal_test\\.parser_.*"}))


@contextmanager
def _running(parser: EventParser) -> Iterator[EventParser]:
    """The parser started and given 0.5 s to locate the current end; stopped afterwards."""
    parser.start()
    try:
        time.sleep(0.5)
        yield parser
    finally:
        parser.stop()


def _bootstrap(s: Any, tmp: Path) -> SchemaHistory:
    conn = pymysql.connect(**s.repl_kwargs())
    try:
        return SchemaHistory.bootstrap_from_server(conn, schemas=["canal_test"], store=tmp / "history")
    finally:
        conn.close()


def _bootstrapped_parser(s: Any, tmp: Path) -> tuple[EventParser, Collector]:
    """A parser on a history bootstrapped from the server's canal_test schema, and the sink it delivers to."""
    sink = Collector()
    return _parser(s, tmp, sink, _bootstrap(s, tmp)), sink


def test_parser_streams_entries_and_resumes_from_its_position(mariadb_settings: Any, admin_conn: Any,
                                                               clean: None, tmp_path: Path) -> None:
    history = _bootstrap(mariadb_settings, tmp_path)
    sink = Collector()
    parser = _parser(mariadb_settings, tmp_path, sink, history)
    with _running(parser):
        with admin_conn.cursor() as cur:
            cur.execute("CREATE TABLE canal_test.parser_t (id INT PRIMARY KEY, name VARCHAR(20), amount DECIMAL(8,2))")
            cur.execute("INSERT INTO canal_test.parser_t VALUES (1, 'a', 1.50), (2, 'b', 2.25)")
            cur.execute("UPDATE canal_test.parser_t SET amount = 9.99 WHERE id = 1")
            cur.execute("ALTER TABLE canal_test.parser_t CHANGE name label VARCHAR(30)")
            cur.execute("INSERT INTO canal_test.parser_t VALUES (3, 'c', 3.00)")
            cur.execute("DELETE FROM canal_test.parser_t WHERE id = 2")
        got = sink.wait(lambda es: any(e.event_type == EVENT_DELETE for e in es))
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
    with _running(parser):
        with admin_conn.cursor() as cur:
            cur.execute("INSERT INTO canal_test.parser_u VALUES (1)")
        deadline = time.monotonic() + 15
        while parser.running and time.monotonic() < deadline:
            time.sleep(0.05)
    err = parser.last_error
    assert err is not None and type(err).__name__ == "UnknownTableError", err
    health = parser.health  # stopped for good, and says why
    assert health.state is ParserState.STOPPED and health.error is not None
    assert health.error.kind is ErrorKind.NEEDS_PERSON and health.error.error is err
    assert "canal_test.parser_u" in str(err) and "mysql-bin." in str(err)
    assert not any(e.rows for e in sink.entries)


def _dump_threads(admin_conn: Any) -> list[int]:
    with admin_conn.cursor() as cur:
        cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND = 'Binlog Dump'")
        return [r[0] for r in cur.fetchall()]


def test_parser_reconnects_after_its_dump_is_killed(mariadb_settings: Any, admin_conn: Any, parser_t: None,
                                                    tmp_path: Path) -> None:
    parser, sink = _bootstrapped_parser(mariadb_settings, tmp_path)
    before = set(_dump_threads(admin_conn))
    with _running(parser):
        with admin_conn.cursor() as cur:
            cur.execute("INSERT INTO canal_test.parser_t VALUES (1, 'before', 1)")
        sink.wait(lambda es: len(_rows(es, "parser_t")) == 1)
        ours = set(_dump_threads(admin_conn)) - before
        assert len(ours) == 1
        with admin_conn.cursor() as cur:
            cur.execute(f"KILL {ours.pop()}")
            for i in range(2, 6):
                cur.execute("INSERT INTO canal_test.parser_t VALUES (%s, 'after', %s)", (i, i))
        got = sink.wait(lambda es: {r[0] for _, r in _rows(es, "parser_t")} >= {1, 2, 3, 4, 5})
        health, current = parser.health, parser.last_error
    ids = [r[0] for _, r in _rows(got, "parser_t")]
    # resumed from the last boundary: every row once (nothing lost, the completed one not repeated)
    assert ids == [1, 2, 3, 4, 5], ids
    # the kill was seen and retried; streaming again, the error no longer current but kept with when it cleared
    assert health.state is ParserState.STREAMING and health.error is None and current is None
    last = health.last_error
    assert last is not None and last.kind is ErrorKind.UNREACHABLE and last.type_name == "ConnectionLostError"
    assert last.cleared_at is not None and last.cleared_at >= last.since


def test_gtid_mode_carries_the_executed_set_and_resumes_by_gtid(mariadb_settings: Any, admin_conn: Any,
                                                                 parser_t: None, tmp_path: Path) -> None:
    from canal_core.parse.locator import StartConfig

    history = _bootstrap(mariadb_settings, tmp_path)

    def gtid_parser(sink: Collector, hist: SchemaHistory) -> EventParser:
        p = _parser(mariadb_settings, tmp_path, sink, hist)
        p.config.master_start = StartConfig(gtid_on=True)
        return p

    sink = Collector()
    parser = gtid_parser(sink, history)
    with _running(parser):
        with admin_conn.cursor() as cur:
            cur.execute("INSERT INTO canal_test.parser_t VALUES (1, 'g1', 1)")
            cur.execute("SELECT @@gtid_binlog_pos")
            pos_after_1 = cur.fetchone()[0]
        got = sink.wait(lambda es: len(_rows(es, "parser_t")) == 1 and any(e.entry_type == END for e in es))
    assert parser.last_error is None, parser.last_error
    # the entry headers carry the executed GTID set; the stored position has it too
    end = [e for e in got if e.entry_type == END][-1]
    assert end.position.gtid and "0-1-" in end.position.gtid
    # as Canal's LogDecoder: from its GTID event on, every entry of a transaction carries the set that includes
    # the transaction itself (the server's @@gtid_binlog_pos right after it)
    mine = pos_after_1.split(",")[0]
    tx = [e for e in got if e.entry_type in (BEGIN, ROWDATA, END) and e.position.gtid][-3:]
    assert [e.entry_type for e in tx] == [BEGIN, ROWDATA, END]
    assert all(mine in e.position.gtid.split(",") for e in tx), [e.position.gtid for e in tx]
    stored = (tmp_path / "meta" / "example" / "parse.dat").read_text()
    assert pos_after_1.split(",")[0] in stored
    with admin_conn.cursor() as cur:
        cur.execute("INSERT INTO canal_test.parser_t VALUES (2, 'g2', 2)")
    sink2 = Collector()
    parser2 = gtid_parser(sink2, SchemaHistory(tmp_path / "history"))
    parser2.start()
    try:
        got2 = sink2.wait(lambda es: len(_rows(es, "parser_t")) >= 1)
        time.sleep(0.5)
    finally:
        parser2.stop()
    assert parser2.last_error is None, parser2.last_error
    assert [r[:2] for _, r in _rows(got2, "parser_t")] == [(2, "g2")]


def test_without_gtid_mode_entries_and_positions_carry_no_gtid(mariadb_settings: Any, admin_conn: Any,
                                                               parser_t: None, tmp_path: Path) -> None:
    # canal.instance.gtidon=false (the default): Canal's decoder has no GTID set, so no entry header carries
    # one (Header.gtid empty, no curtGtid props), although MariaDB writes a GTID for every transaction
    import json

    parser, sink = _bootstrapped_parser(mariadb_settings, tmp_path)
    with _running(parser):
        with admin_conn.cursor() as cur:
            cur.execute("INSERT INTO canal_test.parser_t VALUES (1, 'n1', 1)")
        got = sink.wait(lambda es: len(_rows(es, "parser_t")) == 1 and any(e.entry_type == END for e in es))
    assert parser.last_error is None, parser.last_error
    tx = [e for e in got if e.entry_type in (BEGIN, ROWDATA, END)][-3:]
    assert [e.entry_type for e in tx] == [BEGIN, ROWDATA, END]
    for e in tx:
        h = e.entry.header
        assert (h.gtid, [p.key for p in h.props if p.key.startswith("curtGtid")], e.position.gtid) == ("", [], "")
    stored = json.loads((tmp_path / "meta" / "example" / "parse.dat").read_text())
    assert stored["postion"]["gtid"] == "", stored


def test_field_filter_drops_columns_from_entries(mariadb_settings: Any, admin_conn: Any, parser_t: None,
                                                 tmp_path: Path) -> None:
    from canal_core.binlog import ABSENT
    from canal_core.entry.model import CanalEntry

    parser, sink = _bootstrapped_parser(mariadb_settings, tmp_path)
    parser.filter = EventFilter.from_config({"canal.instance.filter.regex": "canal_test\\.parser_.*",
                                             "canal.instance.filter.field": "canal_test.parser_t:id/amount"})
    with _running(parser):
        with admin_conn.cursor() as cur:
            cur.execute("INSERT INTO canal_test.parser_t VALUES (1, 'secret', 5.00)")
            cur.execute("UPDATE canal_test.parser_t SET name = 'other', amount = 6.00 WHERE id = 1")
        got = sink.wait(lambda es: len(_rows(es, "parser_t")) == 2)
    (_, ins), (_, (before, after)) = _rows(got, "parser_t")
    assert ins[0] == 1 and ins[1] is ABSENT and str(ins[2]) == "5.00"
    assert before[1] is ABSENT and after[1] is ABSENT and str(after[2]) == "6.00"
    # the Canal entry bytes carry no column "name" at all
    for e in got:
        if e.rows:
            decoded = CanalEntry.from_bytes(e.data).entry
            assert b"secret" not in e.data and b"other" not in e.data
            assert decoded.header.tableName == "parser_t"


def test_first_start_takes_the_history_snapshot_from_the_server(mariadb_settings: Any, admin_conn: Any,
                                                                parser_t: None, tmp_path: Path) -> None:
    history = SchemaHistory(tmp_path / "history")  # empty: nothing bootstrapped by hand
    assert history.empty
    sink = Collector()
    parser = _parser(mariadb_settings, tmp_path, sink, history)
    parser.config.bootstrap_schemas = ("canal_test",)
    with _running(parser):
        with admin_conn.cursor() as cur:
            cur.execute("INSERT INTO canal_test.parser_t VALUES (7, 'boot', 7.70)")
        got = sink.wait(lambda es: len(_rows(es, "parser_t")) == 1)
    assert parser.last_error is None, parser.last_error
    assert not history.empty and any((tmp_path / "history" / "snapshots").iterdir())
    assert next(e.columns for e in got if e.rows) == ("id", "name", "amount")
    assert [r[:2] for _, r in _rows(got, "parser_t")] == [(7, "boot")]


def test_statement_based_dml_names_its_table_and_passes_the_table_filter(mariadb_settings: Any, admin_conn: Any,
                                                                         clean: None, tmp_path: Path) -> None:
    """A statement-logged INSERT carries its target table in the header (Canal's DruidDdlParser result), so the
    filter applies: one on a filtered table comes through, one on an unfiltered table from a session without a default
    database (which used to arrive unnamed and stop the pipeline's staging) does not."""
    with admin_conn.cursor() as cur:
        cur.execute("CREATE TABLE canal_test.parser_t (id INT PRIMARY KEY, name VARCHAR(20), amount DECIMAL(8,2))")
        cur.execute("CREATE TABLE canal_test.stmt_other (id INT PRIMARY KEY)")
    parser, sink = _bootstrapped_parser(mariadb_settings, tmp_path)
    parser.start()
    nodb = pymysql.connect(**mariadb_settings.admin_kwargs())  # no default database
    try:
        time.sleep(0.5)
        with nodb.cursor() as cur:
            cur.execute("SET SESSION binlog_format = 'STATEMENT'")
            cur.execute("INSERT INTO canal_test.stmt_other VALUES (7)")
            cur.execute("INSERT INTO canal_test.parser_t VALUES (1, 'a', 1.00)")
            cur.execute("UPDATE canal_test.parser_t SET amount = 2.00 WHERE id = 1")
        got = sink.wait(lambda es: any(e.event_type == EVENT_UPDATE for e in es))
        time.sleep(0.3)
    finally:
        nodb.close()
        parser.stop()
        with admin_conn.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS canal_test.stmt_other")
    assert parser.last_error is None, parser.last_error
    dml = [(e.event_type, e.schema, e.table, e.sql) for e in got
           if e.entry_type == ROWDATA and e.event_type in (EVENT_INSERT, EVENT_UPDATE)]
    assert dml == [
        (EVENT_INSERT, "canal_test", "parser_t", "INSERT INTO canal_test.parser_t VALUES (1, 'a', 1.00)"),
        (EVENT_UPDATE, "canal_test", "parser_t", "UPDATE canal_test.parser_t SET amount = 2.00 WHERE id = 1"),
    ]


def test_an_event_over_the_maximum_event_size_stops_the_parser_at_its_position(
        mariadb_settings: Any, admin_conn: Any, clean: None, tmp_path: Path) -> None:
    """canal.instance.parser.maxEventSize reaches the dump connection: a 10 KB rows event against a 4 KiB limit
    stops the parser (retrying would fetch the same event again) with the position and the limit named; the
    transaction before it was delivered."""
    with admin_conn.cursor() as cur:
        cur.execute("CREATE TABLE canal_test.parser_t (id INT PRIMARY KEY, body MEDIUMBLOB)")
    history = _bootstrap(mariadb_settings, tmp_path)
    sink = Collector()
    parser = _parser(mariadb_settings, tmp_path, sink, history, max_event_size=4096)
    with _running(parser):
        with admin_conn.cursor() as cur:
            cur.execute("INSERT INTO canal_test.parser_t VALUES (1, 'small')")
            cur.execute("INSERT INTO canal_test.parser_t VALUES (2, REPEAT('x', 10000))")
        deadline = time.monotonic() + 15
        while parser.running and time.monotonic() < deadline:
            time.sleep(0.05)
        running = parser.running
    assert not running, "the parser kept retrying the same oversized event"
    err = parser.last_error
    assert err is not None and type(err).__name__ == "PacketTooLargeError", err
    assert "maximum event size of 4096 bytes" in str(err) and "mysql-bin." in str(err), err
    health = parser.health
    assert health.state is ParserState.STOPPED and health.error is not None
    assert health.error.kind is ErrorKind.NEEDS_PERSON
    assert [r[1][:1] for r in _rows(sink.entries, "parser_t")] == [(1,)]
