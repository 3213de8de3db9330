"""pipelines.engine.replay: a bounded binlog range through a separate client, by position and by time."""

from __future__ import annotations

import time

import pymysql

from canal_core.entry.model import ENTRY_ROWDATA, CanalEntry
from canal_core.parse.filter import EventFilter
from canal_core.parse.parser import ParserConfig, SourceConfig
from pipelines.engine.replay import ReplaySource, binlog_head, replay_entries
from pipelines.engine.window import EventTime

T = "canal_test.replay_t"


def _source(settings) -> ReplaySource:
    return ReplaySource(ParserConfig(destination="replay-test",
                                     master=SourceConfig(settings.host, settings.port, "canal", "canal")),
                        EventFilter(), None)


def _ids(chunks) -> list[tuple[str, int]]:
    out = []
    for chunk in chunks:
        for data in chunk:
            e = CanalEntry.from_bytes(data)
            if e.entry_type != ENTRY_ROWDATA or e.table != "replay_t":
                continue
            from canal_core.protocol.proto import EntryProtocol_pb2 as pb

            rc = pb.RowChange.FromString(e.entry.storeValue)
            for rd in rc.rowDatas:
                cols = rd.afterColumns or rd.beforeColumns
                out.append((pb.EventType.Name(rc.eventType), int(next(c.value for c in cols if c.name == "id"))))
    return out


def test_replay_by_position_and_time(mariadb_settings, admin_conn: pymysql.connections.Connection) -> None:
    src = _source(mariadb_settings)
    with admin_conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {T}")
        cur.execute(f"CREATE TABLE {T} (id INT PRIMARY KEY, v VARCHAR(10))")
        p0 = binlog_head(src.conn_kwargs())
        cur.execute(f"INSERT INTO {T} VALUES (1,'a'),(2,'b'),(3,'c')")
        cur.execute(f"UPDATE {T} SET v='bb' WHERE id=2")
        p1 = binlog_head(src.conn_kwargs())
        time.sleep(1.2)  # binlog timestamps have one-second resolution
        t1 = int(time.time()) * 1000  # a whole second: later events carry t1 or more, earlier ones less
        cur.execute(f"DELETE FROM {T} WHERE id=1")
        cur.execute(f"INSERT INTO {T} VALUES (4,'d')")

    # by position: exactly the changes between two heads
    assert _ids(replay_entries(src, start=p0, end=p1)) == [("INSERT", 1), ("INSERT", 2), ("INSERT", 3),
                                                             ("UPDATE", 2)]
    # from a position to the end of the binlog
    assert _ids(replay_entries(src, start=p1)) == [("DELETE", 1), ("INSERT", 4)]
    # by time: the first transaction at or after t1, to the end
    assert _ids(replay_entries(src, start=EventTime(t1))) == [("DELETE", 1), ("INSERT", 4)]
    # by time at both ends: up to just before t1
    assert _ids(replay_entries(src, start=p0, end=EventTime(t1 - 1))) == [("INSERT", 1), ("INSERT", 2), ("INSERT", 3),
                                                                 ("UPDATE", 2)]
    # a table selection that excludes it
    assert _ids(replay_entries(src, start=p0, tables=["canal_test.other"])) == []
    # chunks: small chunk size still gives every change once, in order
    chunks = list(replay_entries(src, start=p0, chunk_rows=1))
    assert _ids(chunks) == [("INSERT", 1), ("INSERT", 2), ("INSERT", 3), ("UPDATE", 2), ("DELETE", 1),
                            ("INSERT", 4)]


def test_a_replay_the_account_cannot_read_fails_at_once(mariadb_settings) -> None:
    """A wrong password is not waited out for the replay's whole timeout: the replay fails naming it."""
    import pytest

    from pipelines.engine.replay import ReplayError

    good = _source(mariadb_settings)
    start = binlog_head(good.conn_kwargs())
    bad = ReplaySource(ParserConfig(destination="replay-test", master=SourceConfig(
        mariadb_settings.host, mariadb_settings.port, "canal", "not-the-password")), EventFilter(), None)
    t0 = time.monotonic()
    with pytest.raises(ReplayError, match="Access denied"):
        list(replay_entries(bad, start=start))
    assert time.monotonic() - t0 < 30


def test_a_reconcile_replay_starting_before_the_history_begins_starts_where_it_begins(
        mariadb_settings, admin_conn: pymysql.connections.Connection, tmp_path) -> None:
    """A reconcile replays from a margin before the mirror's last change; on a destination younger than the
    margin that start precedes the schema history's first snapshot. The replay then starts at that snapshot (no
    change it needs is older), instead of failing with "no snapshot at or before"; a backfill asking for the
    same range still gets that error, naming the rebuild command."""
    import pytest

    from canal_core.parse.history import SchemaHistory
    from pipelines.engine.replay import ReplayError

    with admin_conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {T}")
        cur.execute(f"CREATE TABLE {T} (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute(f"INSERT INTO {T} VALUES (1,'a')")  # before the history: not replayed
    time.sleep(1.2)  # binlog timestamps have one-second resolution
    boot = pymysql.connect(host=mariadb_settings.host, port=mariadb_settings.port, user="canal", password="canal")
    try:
        SchemaHistory.bootstrap_from_server(boot, schemas=["canal_test"], store=tmp_path / "history")
    finally:
        boot.close()
    with admin_conn.cursor() as cur:
        cur.execute(f"INSERT INTO {T} VALUES (2,'b')")
        cur.execute(f"UPDATE {T} SET v='aa' WHERE id=1")
    src = _source(mariadb_settings)
    src.history_dir = tmp_path / "history"
    early = EventTime(int(time.time() * 1000) - 60_000)
    assert _ids(replay_entries(src, start=early, from_history_start=True)) == [("INSERT", 2), ("UPDATE", 1)]
    with pytest.raises(ReplayError, match=r"no snapshot at or before.*rebuild") as err:
        list(replay_entries(src, start=early))
    # the command names the destination's history, not the replay's temporary copy of it
    assert f"--data-dir {tmp_path / 'history'} " in str(err.value) and "canal-replay-" not in str(err.value)
