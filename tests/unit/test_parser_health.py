"""The parser's health: error classification (a pure function of the exception), the snapshot's transitions,
and the parser moving them (a fake source: no server needed)."""

from __future__ import annotations

import socket
import struct
from typing import Any

import pymysql
import pytest

from canal_core.binlog.errors import BinlogError
from canal_core.mysql import (
    BinlogNotEnabledError,
    BinlogPositionError,
    ConnectionLostError,
    MissingPrivilegeError,
    ReplicationAuthError,
    ReplicationError,
    ReplicationTLSError,
    ServerInfo,
    ServerUnreachableError,
)
from canal_core.parse.health import ErrorKind, HealthTracker, ParserState, classify
from canal_core.parse.identity import SourceMismatchError
from canal_core.parse.locator import PositionBeyondEndError, TimestampTooOldError
from canal_core.parse.model import SchemaMismatchError
from canal_core.parse.parser import EventParser, ParserConfig, SourceConfig
from canal_core.parse.position import MemoryPositionManager
from canal_core.protocol.position import EntryPosition, LogPosition
from tests.support.waiting import wait_until
from tests.unit.fixture_support import make_event
from tests.unit.parser_fakes import FakeHistory, FakeSource

MISMATCH = SourceMismatchError("127.0.0.1:3439", "mysql-bin.000001", 1234, "an event written at T by server 1",
                               "server id 1, an event written at T + 5 s")


@pytest.mark.parametrize(("error", "kind"), [
    (ReplicationAuthError("127.0.0.1:3306 refused login for user 'canal'", code=1045), ErrorKind.ACCESS),
    (MissingPrivilegeError("'canal'@'%'", "REPLICATION SLAVE", "Access denied", code=1227), ErrorKind.ACCESS),
    (ReplicationError("'SHOW BINARY LOGS' failed: [1227] Access denied", code=1227), ErrorKind.ACCESS),
    (pymysql.err.OperationalError(1045, "Access denied for user 'canal'@'localhost'"), ErrorKind.ACCESS),
    (pymysql.err.OperationalError(1044, "Access denied for user 'canal' to database 'x'"), ErrorKind.ACCESS),
    (ServerUnreachableError("cannot connect to 127.0.0.1:3439 (refused)", code=2003), ErrorKind.UNREACHABLE),
    (ConnectionLostError("mysql-bin.000001", 4, "server closed the connection"), ErrorKind.UNREACHABLE),
    (pymysql.err.OperationalError(2003, "Can't connect to MySQL server on '127.0.0.1'"), ErrorKind.UNREACHABLE),
    (pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query"), ErrorKind.UNREACHABLE),
    (ConnectionRefusedError(111, "Connection refused"), ErrorKind.UNREACHABLE),
    (TimeoutError("timed out"), ErrorKind.UNREACHABLE),
    (socket.gaierror(-2, "Name or service not known"), ErrorKind.UNREACHABLE),
    (MISMATCH, ErrorKind.SOURCE_MISMATCH),
    (PositionBeyondEndError("mysql-bin.000001", 900, 400, "127.0.0.1:3439", ("mysql-bin.000001", 400)),
     ErrorKind.NEEDS_PERSON),
    (TimestampTooOldError(1000, "mysql-bin.000002", 2000, "127.0.0.1:3439"), ErrorKind.NEEDS_PERSON),
    (SchemaMismatchError("canal_test.t at mysql-bin.000001:500: 3 columns in the binlog, 2 in the history"),
     ErrorKind.NEEDS_PERSON),
    (BinlogPositionError("Could not find first log file name in binary log index file", "mysql-bin.000009", 4),
     ErrorKind.NEEDS_PERSON),
    (BinlogNotEnabledError("127.0.0.1:3439"), ErrorKind.NEEDS_PERSON),
    (ReplicationTLSError("TLS handshake with 127.0.0.1:3439 failed"), ErrorKind.NEEDS_PERSON),
    (BinlogError("checksum mismatch", file="mysql-bin.000001", position=500), ErrorKind.NEEDS_PERSON),
    (ReplicationError("command 0x12 failed: [1236] bogus data"), ErrorKind.OTHER),
    (ValueError("a bug"), ErrorKind.OTHER),
])
def test_classify(error: BaseException, kind: ErrorKind) -> None:
    assert classify(error) is kind


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_health_transitions() -> None:
    clock = Clock()
    h = HealthTracker("127.0.0.1:3439", clock=clock)
    assert (h.snapshot.state, h.snapshot.error) == (ParserState.STOPPED, None)  # not started
    h.connecting("127.0.0.1:3439")
    assert (h.snapshot.state, h.snapshot.since, h.snapshot.source) == (ParserState.CONNECTING, 1000.0,
                                                                       "127.0.0.1:3439")
    h.streaming()
    clock.t = 1010.0
    lost = ConnectionLostError("mysql-bin.000001", 400, "server closed the connection")
    h.failed(lost, retrying=True)
    first = h.snapshot
    assert (first.state, first.since) == (ParserState.RETRYING, 1010.0)
    assert first.error is not None and first.last_error is first.error
    assert (first.error.error, first.error.kind, first.error.since, first.error.failures) == (
        lost, ErrorKind.UNREACHABLE, 1010.0, 1)
    clock.t = 1012.0
    h.failed(ServerUnreachableError("cannot connect to 127.0.0.1:3439"), retrying=True)
    assert h.snapshot.error is not None and (h.snapshot.error.since, h.snapshot.error.failures) == (1010.0, 2)
    clock.t = 1015.0
    h.failed(MISMATCH, retrying=True)  # another kind: its own "since", the state's stays
    s = h.snapshot
    assert (s.state, s.since) == (ParserState.RETRYING, 1010.0)
    assert s.error is not None and (s.error.kind, s.error.since, s.error.failures) == (ErrorKind.SOURCE_MISMATCH,
                                                                                       1015.0, 3)
    assert "retrying 127.0.0.1:3439 since" in s.describe() and "source-mismatch (3 failures since" in s.describe()
    assert s.to_dict()["error"]["type"] == "SourceMismatchError"
    # the first event of a dump: streaming, the error cleared and kept with the time it cleared
    clock.t = 1020.0
    h.streaming()
    ok = h.snapshot
    assert (ok.state, ok.since, ok.error) == (ParserState.STREAMING, 1020.0, None)
    assert ok.last_error is not None and ok.last_error.error is MISMATCH and ok.last_error.cleared_at == 1020.0
    assert ok.to_dict()["last_error"]["cleared_at"] == 1020000
    clock.t = 1030.0
    h.streaming()  # already streaming: nothing changes
    assert h.snapshot is ok
    # snapshots are immutable: the earlier ones still say what was true then
    assert first.state is ParserState.RETRYING and first.error is not None and first.error.cleared_at is None
    # stopped on an error retrying cannot fix: says so, and stop() afterwards keeps it
    history = SchemaMismatchError("canal_test.t at mysql-bin.000001:900: column count 3 != 2")
    h.failed(history, retrying=False)
    h.stopped()
    end = h.snapshot
    assert (end.state, end.since) == (ParserState.STOPPED, 1030.0)
    assert end.error is not None and (end.error.kind, end.error.error) == (ErrorKind.NEEDS_PERSON, history)


def test_stop_while_retrying_keeps_the_uncleared_error() -> None:
    clock = Clock()
    h = HealthTracker("db:3306", clock=clock)
    h.connecting("db:3306")
    h.failed(ReplicationAuthError("db:3306 refused login for user 'canal'", code=1045), retrying=True)
    clock.t = 1005.0
    h.stopped()
    s = h.snapshot
    assert (s.state, s.since, s.error) == (ParserState.STOPPED, 1005.0, None)
    assert s.last_error is not None and s.last_error.kind is ErrorKind.ACCESS and s.last_error.cleared_at is None
    h.connecting("db:3306")  # started again: connecting, the old error stays diagnostics only
    assert h.snapshot.state is ParserState.CONNECTING


# ---- the parser moves the snapshot ------------------------------------------------------------------------------

INFO = ServerInfo(flavor="mariadb", version=(10, 11, 19), version_string="10.11.19-MariaDB", server_id=1,
                  server_uuid=None, log_bin=True, binlog_format="ROW", binlog_row_image="FULL",
                  binlog_checksum="CRC32", gtid_mode=None, gtid_current_pos="", gtid_binlog_pos="",
                  semi_sync_master=False)


def _rotate() -> bytes:  # the fake ROTATE a server sends first on every dump
    return make_event(4, struct.pack("<Q", 4) + b"mysql-bin.000001", checksum=True, flags=0x20)


def _heartbeat() -> bytes:
    return make_event(27, b"mysql-bin.000001", checksum=True, log_pos=400)


class Converter:
    def master_heartbeat(self, ev: Any) -> str:
        return "heartbeat entry"


class Parser(EventParser):
    def __init__(self, locate: Any, events: list[bytes], sink: Any) -> None:
        cfg = ParserConfig(destination="health", master=SourceConfig("127.0.0.1", 3439), reconnect_min=0.01,
                           reconnect_max=0.02)
        super().__init__(cfg, sink=sink, history=FakeHistory(), positions=MemoryPositionManager(),  # type: ignore[arg-type]
                         converter_factory=lambda ident: Converter(), locate=locate)
        self.fake_events = events

    def _connection(self, src: SourceConfig) -> Any:
        return FakeSource(INFO, self.fake_events)


def _wait(cond: Any, timeout: float = 10.0) -> None:
    wait_until(cond, timeout, step=0.01)


def test_the_parser_clears_its_error_at_the_first_event_after_it() -> None:
    calls: list[int] = []

    def locate(src: SourceConfig, stored: LogPosition | None) -> tuple[EntryPosition, bool]:
        calls.append(1)
        if len(calls) == 1:
            raise ServerUnreachableError("cannot connect to 127.0.0.1:3439 (Connection refused)", code=2003)
        if len(calls) == 2:
            raise MISMATCH
        return EntryPosition(journal_name="mysql-bin.000001", position=4), False

    parser = Parser(locate, [_rotate()], sink=lambda entries: None)
    parser.start()
    try:
        _wait(lambda: parser.health.state is ParserState.STREAMING)
        h = parser.health
        assert h.error is None and parser.last_error is None and parser.running
        assert h.last_error is not None and h.last_error.error is MISMATCH and h.last_error.failures == 2
        assert h.last_error.cleared_at is not None and h.last_error.cleared_at >= h.last_error.since
    finally:
        parser.stop()
    assert parser.health.state is ParserState.STOPPED and parser.health.error is None


def test_a_parser_that_stops_for_good_says_so() -> None:
    beyond = PositionBeyondEndError("mysql-bin.000001", 900, 400, "127.0.0.1:3439", ("mysql-bin.000001", 400))

    def locate(src: SourceConfig, stored: LogPosition | None) -> tuple[EntryPosition, bool]:
        raise beyond

    parser = Parser(locate, [], sink=lambda entries: None)
    parser.start()
    _wait(lambda: not parser.running)
    h = parser.health
    assert h.state is ParserState.STOPPED and h.error is not None
    assert (h.error.error, h.error.kind) == (beyond, ErrorKind.NEEDS_PERSON)
    assert parser.last_error is beyond
    parser.stop()
    assert parser.health.error is not None  # stop() afterwards keeps why it stopped


def test_an_unexpected_error_stops_the_parser_visibly() -> None:
    def locate(src: SourceConfig, stored: LogPosition | None) -> tuple[EntryPosition, bool]:
        return EntryPosition(journal_name="mysql-bin.000001", position=4), False

    def sink(entries: Any) -> None:
        raise RuntimeError("the store is closed")

    parser = Parser(locate, [_rotate(), _heartbeat()], sink=sink)
    parser.start()
    _wait(lambda: not parser.running)
    h = parser.health
    assert h.state is ParserState.STOPPED and h.error is not None
    assert (h.error.kind, h.error.message) == (ErrorKind.OTHER, "the store is closed")
    parser.stop()
