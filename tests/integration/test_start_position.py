"""Start-position rules against the private MariaDB, one test per rule.

A module fixture writes six transactions into canal_test.start_pos across three fresh binlog files
(FLUSH BINARY LOGS), ~1.1 s apart so that each has its own binlog second. Every test locates a start,
dumps from it and checks which of those transactions' rows come first (other sessions may write to the
same server meanwhile: only this table's rows are compared). Where a test checks an exact offset, the
expectation comes from decoding the binlog directly: the first GTID event at or after T in binlog order.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from canal_core.binlog import BinlogDecoder
from canal_core.binlog import events as E
from canal_core.mysql import ReplicationConnection
from canal_core.parse.locator import (
    BinlogFileNotFoundError,
    GtidNotAvailableError,
    PositionBeyondEndError,
    StartConfig,
    StartPosition,
    StartPositionLocator,
    TimestampTooOldError,
)
from canal_core.protocol.position import EntryPosition, LogIdentity, LogPosition
from tests.integration.binlog_end import binlog_end

pytestmark = pytest.mark.integration

SCHEMA, TABLE = "canal_test", "start_pos"
DESTINATION = "it-start-position"  # its own derived replica server id: no clash with other sessions' dumps

# (flush binary logs before it, statements); a row is (id, grp, note)
SCRIPT: list[tuple[bool, list[str]]] = [
    (True, ["INSERT INTO {t} VALUES (1, 1, 'one-a'), (2, 1, 'one-b')"]),
    (False, ["INSERT INTO {t} VALUES (3, 2, 'two')"]),
    (True, ["INSERT INTO {t} VALUES (4, 3, 'three-a')", "INSERT INTO {t} VALUES (5, 3, 'three-b')"]),
    (False, ["INSERT INTO {t} VALUES (6, 4, 'four')"]),
    (True, ["INSERT INTO {t} VALUES (7, 5, 'five-a')", "INSERT INTO {t} VALUES (8, 5, 'five-b')",
            "INSERT INTO {t} VALUES (9, 5, 'five-c')", "UPDATE {t} SET note = 'five-c2' WHERE id = 9"]),
    (False, ["INSERT INTO {t} VALUES (10, 6, 'six')"]),
]
EXPECTED_ROWS = [
    [("write", (1, 1, "one-a")), ("write", (2, 1, "one-b"))],
    [("write", (3, 2, "two"))],
    [("write", (4, 3, "three-a")), ("write", (5, 3, "three-b"))],
    [("write", (6, 4, "four"))],
    [("write", (7, 5, "five-a")), ("write", (8, 5, "five-b")), ("write", (9, 5, "five-c")),
     ("update", (9, 5, "five-c2"))],
    [("write", (10, 6, "six"))],
]


@dataclass
class Txn:
    gtid: str
    rows: list[tuple[str, tuple[Any, ...]]]
    file: str = ""
    pos: int = 0  # its GTID event
    ts: int = 0  # seconds
    events: list[tuple[int, str]] = field(default_factory=list)  # (offset, event name) of its events


@dataclass
class History:
    files: list[str]  # the files of transactions 1, 3 and 5 (each written after a FLUSH BINARY LOGS)
    txns: list[Txn]
    gtid_events: list[tuple[str, int, int, str]]  # every GTID event from the first flush on: (file, pos, ts, gtid)


def _connect(s: Any) -> ReplicationConnection:
    return ReplicationConnection(s.host, s.port, s.repl_user, s.repl_password, destination=DESTINATION,
                                 read_timeout=30.0)


def _locator(s: Any, config: StartConfig | None = None) -> StartPositionLocator:
    return StartPositionLocator(lambda: _connect(s), LogIdentity(s.host, s.port), config or StartConfig())


def _scalar(conn: Any, sql: str) -> Any:
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchone()[0]


def _is_mine(schema: str, table: str) -> bool:
    return (schema, table) == (SCHEMA, TABLE)


def _dump(s: Any, file: str, pos: int, gtid: str | None = None) -> Iterator[E.Event]:
    with _connect(s) as rc:
        dec = BinlogDecoder(table_filter=_is_mine)
        for raw in rc.dump(file, pos, gtid=gtid, non_blocking=True):
            yield from dec.iter_events(dec.decode(raw))


def _rows_from(s: Any, start: StartPosition | tuple[str, int], *,
               scripted: bool = True) -> list[tuple[str, tuple[str, tuple[Any, ...]]]]:
    """(gtid, (kind, row)) of every start_pos row change from the start to the binlog's end (only the
    fixture's rows, ids < 100, when ``scripted``)."""
    if isinstance(start, StartPosition):
        it = _dump(s, start.position.journal_name, start.position.position, start.dump_gtid)
    else:
        it = _dump(s, *start)
    out = []
    gtid = ""
    for ev in it:
        if isinstance(ev, E.MariaGtidEvent):
            gtid = ev.gtid
        elif isinstance(ev, E.RowsEvent) and ev.table is not None and _is_mine(ev.table.schema, ev.table.table):
            assert ev.rows is not None
            for r in ev.rows:
                row = tuple(r[1] if ev.kind == "update" else r)
                if not scripted or row[0] < 100:
                    out.append((gtid, (ev.kind, row)))
    return out


def _rows_of(txns: list[Txn]) -> list[tuple[str, tuple[str, tuple[Any, ...]]]]:
    return [(t.gtid, r) for t in txns for r in t.rows]


def _first_gtid_at(h: History, t_ms: int, from_file: str = "") -> tuple[str, int]:
    for file, pos, ts, _ in h.gtid_events:  # binlog order; same-width file names sort like the index
        if ts * 1000 >= t_ms and file >= from_file:
            return file, pos
    raise AssertionError(f"no GTID event at or after {t_ms}")


@pytest.fixture(scope="module")
def history(mariadb_settings: Any) -> Iterator[History]:
    import pymysql

    s = mariadb_settings
    conn = pymysql.connect(**s.admin_kwargs())
    t = f"{SCHEMA}.{TABLE}"
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {t}")
            cur.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, grp INT NOT NULL, note VARCHAR(40))")
        first_file = ""
        txns: list[Txn] = []
        for (flush, stmts), rows in zip(SCRIPT, EXPECTED_ROWS, strict=True):
            with conn.cursor() as cur:
                if flush:
                    cur.execute("FLUSH BINARY LOGS")
                    if not first_file:
                        first_file = binlog_end(s.repl_kwargs())[0]
                time.sleep(1.1)
                cur.execute("BEGIN")
                for sql in stmts:
                    cur.execute(sql.format(t=t))
                cur.execute("COMMIT")
            txns.append(Txn(gtid=_scalar(conn, "SELECT @@last_gtid"), rows=rows))
        by_gtid = {x.gtid: x for x in txns}
        gtid_events = []
        current: Txn | None = None
        for ev in _dump(s, first_file, 4):
            if isinstance(ev, E.MariaGtidEvent):
                assert ev.file is not None and ev.position is not None
                gtid_events.append((ev.file, ev.position, ev.timestamp, ev.gtid))
                current = by_gtid.get(ev.gtid)
                if current is not None:
                    current.file, current.pos, current.ts = ev.file, ev.position, ev.timestamp
            if current is not None and ev.position is not None:
                current.events.append((ev.position, ev.name))
                if isinstance(ev, E.XidEvent):
                    current = None
        assert all(x.pos for x in txns), "every scripted transaction was found in the binlog"
        files = [x.file for x in txns][::2]
        assert files == sorted(set(files)), "the flushes put transactions 1, 3 and 5 in new files"
        assert txns[1].file == files[0] or txns[1].file < files[1]
        assert len({x.ts for x in txns}) == len(txns), "each transaction has its own binlog second"
        yield History(files=files, txns=txns, gtid_events=gtid_events)
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {t}")
        conn.close()


# ---- stored position ------------------------------------------------------------------------------------


def test_stored_position_of_the_same_source(mariadb_settings: Any, history: History) -> None:
    s, tx = mariadb_settings, history.txns
    stored = LogPosition(identity=LogIdentity(s.host, s.port),
                         position=EntryPosition(journal_name=tx[2].file, position=tx[2].pos, server_id=1,
                                                timestamp=tx[2].ts * 1000))
    # configuration is ignored when a stored position exists
    start = _locator(s, StartConfig(journal_name=history.files[0], position=4)).locate(stored)
    assert (start.rule, start.position, start.realigned_from) == ("stored", stored.position, None)
    assert _rows_from(s, start) == _rows_of(tx[2:])
    # Canal records a transaction's XID offset: a boundary, kept as is
    xid = next(off for off, name in tx[1].events if name == "XID")
    stored = LogPosition(identity=LogIdentity(s.host, s.port),
                         position=EntryPosition(journal_name=tx[1].file, position=xid, server_id=1,
                                                timestamp=tx[1].ts * 1000))
    start = _locator(s).locate(stored)
    assert (start.rule, start.position.position, start.realigned_from) == ("stored", xid, None)
    assert _rows_from(s, start) == _rows_of(tx[2:])


# ---- configured journal + position, journal + timestamp, timestamp ---------------------------------------------


def test_journal_and_position(mariadb_settings: Any, history: History) -> None:
    s, tx = mariadb_settings, history.txns
    start = _locator(s, StartConfig(journal_name=tx[1].file, position=tx[1].pos)).locate(None)
    assert start.rule == "journal-position" and not start.gtid_mode and start.realigned_from is None
    assert (start.position.journal_name, start.position.position) == (tx[1].file, tx[1].pos)
    assert start.position.timestamp == tx[1].ts * 1000  # filled from the event there, like Canal
    assert _rows_from(s, start) == _rows_of(tx[1:])


def test_journal_and_timestamp(mariadb_settings: Any, history: History) -> None:
    s, tx, files = mariadb_settings, history.txns, history.files
    t_ms = tx[1].ts * 1000 - 500
    start = _locator(s, StartConfig(journal_name=files[0], timestamp=t_ms)).locate(None)
    assert start.rule == "journal-timestamp"
    assert (start.position.journal_name, start.position.position) == _first_gtid_at(history, t_ms, files[0])
    assert start.position.timestamp is not None and start.position.timestamp >= t_ms
    assert _rows_from(s, start) == _rows_of(tx[1:])
    # a time before the named file: that file's first transaction
    start = _locator(s, StartConfig(journal_name=files[1], timestamp=tx[0].ts * 1000)).locate(None)
    assert start.position.journal_name == files[1]
    assert _rows_from(s, start) == _rows_of(tx[2:])


def test_timestamp_only_across_binlog_files(mariadb_settings: Any, history: History) -> None:
    s, tx = mariadb_settings, history.txns
    for k in (1, 2, 4, 5):  # second in file 1, first in file 2, first in file 3, second in file 3
        t_ms = tx[k].ts * 1000 - 500
        start = _locator(s, StartConfig(timestamp=t_ms)).locate(None)
        assert start.rule == "timestamp"
        assert (start.position.journal_name, start.position.position) == _first_gtid_at(history, t_ms), k
        if k in (2, 4):
            assert start.position.journal_name == tx[k].file != tx[k - 1].file
        mine = _rows_from(s, start)
        assert mine == _rows_of(tx[k:]), k
        assert start.position.gtid  # the executed GTIDs before the transaction (GTID_LIST + GTIDs)
    # exactly on a transaction's second: that transaction is included
    start = _locator(s, StartConfig(timestamp=tx[3].ts * 1000)).locate(None)
    assert _rows_from(s, start)[0][0] == tx[3].gtid


def test_timestamp_before_the_oldest_binlog(mariadb_settings: Any, history: History) -> None:
    s = mariadb_settings
    with _connect(s) as rc:
        oldest = rc.binary_logs()[0][0]
    with _connect(s) as rc:
        first = next(ev for ev in (BinlogDecoder().decode(r) for r in rc.dump(oldest, 4, non_blocking=True))
                     if isinstance(ev, E.FormatDescriptionEvent))
    t_ms = first.timestamp * 1000 - 1000
    with pytest.raises(TimestampTooOldError) as ei:
        _locator(s, StartConfig(timestamp=t_ms)).locate(None)
    e = ei.value
    assert (e.oldest_file, e.oldest_ms, e.requested_ms) == (oldest, first.timestamp * 1000, t_ms)
    assert f"the oldest binlog still there is {oldest}, starting at " in str(e)


def test_nothing_configured_and_future_timestamp_are_the_current_end(mariadb_settings: Any, history: History,
                                                                      admin_conn: Any) -> None:
    s = mariadb_settings
    with _connect(s) as rc:
        before = rc.master_status()[:2]
    start = _locator(s).locate(None)
    future = _locator(s, StartConfig(timestamp=int(time.time() * 1000) + 3_600_000)).locate(None)
    with _connect(s) as rc:
        after = rc.master_status()[:2]
    for st, rule in ((start, "master-status"), (future, "timestamp")):
        assert st.rule == rule and not st.gtid_mode
        assert before <= (st.position.journal_name, st.position.position) <= after
    assert start.position.gtid and start.position.server_id == 1
    with admin_conn.cursor() as cur:
        cur.execute(f"INSERT INTO {SCHEMA}.{TABLE} VALUES (100, 7, 'after-the-end')")
    for st in (start, future):
        assert [r for _, r in _rows_from(s, st, scripted=False)][:1] == [("write", (100, 7, "after-the-end"))]
    with admin_conn.cursor() as cur:
        cur.execute(f"DELETE FROM {SCHEMA}.{TABLE} WHERE id = 100")


# ---- GTID ---------------------------------------------------------------------------------------------------------


def test_mariadb_gtid(mariadb_settings: Any, history: History) -> None:
    s, tx = mariadb_settings, history.txns
    start = _locator(s, StartConfig(gtid_on=True, gtid=tx[1].gtid)).locate(None)
    assert (start.rule, start.gtid_mode, start.dump_gtid) == ("gtid-configured", True, tx[1].gtid)
    assert _rows_from(s, start) == _rows_of(tx[2:])  # resumes after the given GTID
    # a stored gtid wins over the configured one, whatever address it was recorded for
    stored = LogPosition(identity=LogIdentity("192.0.2.10", 3306),
                         position=EntryPosition(journal_name="x-bin.000001", position=4, gtid=tx[3].gtid))
    start = _locator(s, StartConfig(gtid_on=True, gtid=tx[1].gtid)).locate(stored)
    assert (start.rule, start.dump_gtid) == ("gtid-stored", tx[3].gtid)
    assert _rows_from(s, start) == _rows_of(tx[4:])
    domain, server, seq = (int(x) for x in tx[-1].gtid.split("-"))
    missing = f"{domain}-{server}-{seq + 10_000_000}"
    with pytest.raises(GtidNotAvailableError, match=f"cannot stream from GTID {missing}: .*not in the master's "
                                                    f"binlog"):
        _locator(s, StartConfig(gtid_on=True, gtid=missing)).locate(None)


# ---- source switch ------------------------------------------------------------------------------------------------


def test_source_switch_falls_back_by_time(mariadb_settings: Any, history: History) -> None:
    s, tx = mariadb_settings, history.txns
    # recorded on another server, 0.5 s after transaction 4 began; rewind 1 s
    stored = LogPosition(identity=LogIdentity("192.0.2.10", 3306),
                         position=EntryPosition(journal_name="other-bin.000123", position=98765, server_id=9,
                                                timestamp=tx[3].ts * 1000 + 500))
    start = _locator(s, StartConfig(fallback_interval=1)).locate(stored)
    assert start.rule == "source-switch"
    assert (start.position.journal_name, start.position.position) == _first_gtid_at(history, tx[3].ts * 1000 - 500)
    assert _rows_from(s, start) == _rows_of(tx[3:])
    # VIP failover: same address, another server id, and the stored file is not on this server
    vip = LogPosition(identity=LogIdentity(s.host, s.port), position=stored.position)
    start = _locator(s, StartConfig(fallback_interval=1)).locate(vip)
    assert start.rule == "server-id-changed"
    assert _rows_from(s, start) == _rows_of(tx[3:])


# ---- inside a transaction ------------------------------------------------------------------------------------------


def test_stored_position_inside_a_transaction_is_realigned(mariadb_settings: Any, history: History) -> None:
    s, tx = mariadb_settings, history.txns
    t5 = tx[4]
    maps = [off for off, name in t5.events if name == "TABLE_MAP"]
    rows_ev = [off for off, name in t5.events if name.endswith("_ROWS_V1")]
    assert len(maps) == 4 and len(rows_ev) == 4
    # dumping from inside the transaction as is would lose its first rows (or fail on an unknown table id)
    raw_rows = _rows_from(s, (t5.file, maps[2]))
    assert raw_rows[:2] == [("", t5.rows[2]), ("", t5.rows[3])]  # half a transaction, and no GTID
    for pos in (maps[2], rows_ev[1], rows_ev[3] + 7):  # a TABLE_MAP, a rows event, the middle of an event
        stored = LogPosition(identity=LogIdentity(s.host, s.port),
                             position=EntryPosition(journal_name=t5.file, position=pos, server_id=1,
                                                    timestamp=t5.ts * 1000))
        start = _locator(s).locate(stored)
        assert start.rule == "stored"
        assert (start.position.journal_name, start.position.position) == (t5.file, t5.pos), pos
        assert start.realigned_from == stored.position
        assert start.position.timestamp == t5.ts * 1000
        got = _rows_from(s, start)
        assert got == _rows_of(tx[4:]), pos  # transaction 5 whole, then 6: none lost, none twice
    # a configured position inside the transaction is realigned the same way
    start = _locator(s, StartConfig(journal_name=t5.file, position=rows_ev[0])).locate(None)
    assert start.position.position == t5.pos and start.realigned_from is not None


def test_positions_that_do_not_exist(mariadb_settings: Any, history: History) -> None:
    s = mariadb_settings
    with _connect(s) as rc:
        logs = rc.binary_logs()
    name, size = next((n, sz) for n, sz in logs if n == history.files[0])
    with pytest.raises(PositionBeyondEndError, match=f"{name}:{size + 1000}: {name} .* is only {size} bytes"):
        _locator(s, StartConfig(journal_name=name, position=size + 1000)).locate(None)
    base, _, num = logs[-1][0].rpartition(".")
    future = f"{base}.{int(num) + 1000:0{len(num)}d}"
    with pytest.raises(BinlogFileNotFoundError, match=f"has no binlog {future} \\(it has {logs[0][0]} "):
        _locator(s, StartConfig(journal_name=future, position=4)).locate(None)
