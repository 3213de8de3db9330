"""StartPositionLocator against a fake server that streams real MySQL binlog files from the fixtures
(GTID, anonymous GTID, no GTID, compressed transaction payloads): the MySQL code paths that the private
MariaDB cannot exercise, and every rule's decision logic.

Expected offsets come from the files' event lists (printed in the comments), not from the locator."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from canal_core.mysql import BinlogPositionError, ServerInfo
from canal_core.parse.identity import Provenance, RecordedEvent
from canal_core.parse.locator import (
    BinlogFileNotFoundError,
    FallbackImpossibleError,
    GtidNotAvailableError,
    InvalidStartConfigError,
    PositionBeyondEndError,
    SourceMismatchError,
    StartConfig,
    StartPosition,
    StartPositionLocator,
    TimestampTooOldError,
    same_source,
)
from canal_core.protocol.position import EntryPosition, LogIdentity, LogPosition
from tests.unit.fixture_support import fix_length_and_crc, fixture_path, make_event, walk_headers

UUID = "396e294c-1ca4-11f1-9ae7-00155da79c6b"
GTID_DIR = "percona-binlog-server/mtr/binlog_streaming/std_data/data_80045_gtid"
# binlog.000001 (CRC32, MySQL 8.0.45; times 1773162711 for GTID:1, 1773162714 after)
#   4 FDE | 126 PREVIOUS_GTIDS | 157 GTID:1 | 234 QUERY CREATE TABLE
#   365 GTID:2 | 444 BEGIN | 519 TABLE_MAP | 567 WRITE_ROWS | 611 XID
#   642 GTID:3 | 721 BEGIN | 796 TABLE_MAP | 844 WRITE_ROWS | 888 XID
#   919 GTID:4 | 998 BEGIN | 1073 TM | 1121 WR | 1165 TM | 1213 WR | 1257 TM | 1305 WR | 1349 TM | 1397 WR | 1441 XID
#   1472 ROTATE (size 1516)
# binlog.000002 (FDE at 1773162714): 4 FDE | 126 PREVIOUS_GTIDS | 197 GTID:5 | 276 BEGIN | 360 TM | 408 UPDATE
#   | 498 XID | 529 GTID:6 | 608 BEGIN | 683 TM | 731 DELETE | 793 XID | 824 STOP (1773162716; size 847)
T1, T2 = 1773162711, 1773162714


def _load(rel: str) -> bytes:
    return Path(fixture_path(rel)).read_bytes()


class FakeServer:
    """Serves binlog files like a primary: SHOW BINARY LOGS / MASTER STATUS and non-blocking dumps."""

    def __init__(self, files: dict[str, bytes], *, checksum: bool = True, flavor: str = "mysql",
                 server_id: int = 1, executed: str = "") -> None:
        self.files = files
        self.checksum = checksum
        self.flavor = flavor
        self.server_id = server_id
        self.executed = executed
        self.bad_gtids: set[str] = set()
        self.dumps: list[tuple[str, int, str | None]] = []
        self.open_conns = 0

    def connect(self) -> FakeConn:
        return FakeConn(self)


class FakeConn:
    def __init__(self, server: FakeServer) -> None:
        self.s = server
        self.thread_id: int | None = None
        self.checksum_len = 4 if server.checksum else 0
        self.server_address = "10.0.0.5:3306"
        self.max_event_size = 64 << 20  # as ReplicationConnection's default

    def connect(self) -> FakeConn:
        if self.thread_id is None:
            self.s.open_conns += 1
        self.thread_id = 1
        return self

    def close(self) -> None:
        if self.thread_id is not None:
            self.s.open_conns -= 1
        self.thread_id = None

    def server_info(self) -> ServerInfo:
        return ServerInfo(flavor=self.s.flavor, version=(8, 0, 45), version_string="8.0.45",  # type: ignore[arg-type]
                          server_id=self.s.server_id, server_uuid=UUID, log_bin=True, binlog_format="ROW",
                          binlog_row_image="FULL", binlog_checksum="CRC32", gtid_mode="ON", gtid_current_pos=None,
                          gtid_binlog_pos=None, semi_sync_master=False)

    def binary_logs(self) -> list[tuple[str, int]]:
        return [(n, len(b)) for n, b in self.s.files.items()]

    def master_status(self) -> tuple[str, int, str]:
        name, data = list(self.s.files.items())[-1]
        return name, len(data), self.s.executed

    def _fake_rotate(self, name: str, pos: int) -> bytes:
        return make_event(4, struct.pack("<Q", pos) + name.encode(), checksum=self.s.checksum, flags=0x20)

    def dump(self, file: str, position: int, *, gtid: str | None = None,
             non_blocking: bool = False) -> Iterator[bytes]:
        assert non_blocking
        self.s.dumps.append((file, position, gtid))
        return self._stream(file, position, gtid)

    def _stream(self, file: str, position: int, gtid: str | None) -> Iterator[bytes]:
        try:
            if gtid is not None:
                if gtid in self.s.bad_gtids:
                    raise BinlogPositionError("The slave is connecting using CHANGE MASTER TO MASTER_AUTO_POSITION"
                                              " = 1, but the master has purged binary logs", "", 4, gtid=gtid)
                return
            names = list(self.s.files)
            if file not in names:
                raise BinlogPositionError("Could not find first log file name in binary log index file", file,
                                          position)
            for name in names[names.index(file):]:
                data = self.s.files[name]
                heads = walk_headers(data)
                starts = {h.offset for h in heads}
                if position not in starts and position != len(data):
                    raise BinlogPositionError(f"bogus data in log event at {position}", file, position)
                yield self._fake_rotate(name, position)
                if position > 4:
                    fde = bytearray(data[heads[0].offset:heads[0].offset + heads[0].length])
                    struct.pack_into("<I", fde, 13, 0)
                    yield fix_length_and_crc(bytes(fde), checksum=self.s.checksum)
                for h in heads:
                    if h.offset >= position:
                        yield data[h.offset:h.offset + h.length]
                position = 4
        finally:
            self.close()


SOURCE = LogIdentity("10.0.0.5", 3306)


def _locator(server: FakeServer, config: StartConfig | None = None) -> StartPositionLocator:
    return StartPositionLocator(server.connect, SOURCE, config or StartConfig(), clock=lambda: 1800000000.5)


@pytest.fixture
def gtid_server() -> FakeServer:
    return FakeServer({"binlog.000001": _load(f"{GTID_DIR}/binlog.000001"),
                       "binlog.000002": _load(f"{GTID_DIR}/binlog.000002")}, executed=f"{UUID}:1-6")


def _align(server: FakeServer, file: str, pos: int) -> StartPosition:
    return _locator(server, StartConfig(journal_name=file, position=pos)).locate(None)


# ---- realignment (MySQL GTID) ----------------------------------------------------------------------------


@pytest.mark.parametrize(("pos", "expected", "gtid"), [
    (157, 157, None),  # GTID:1: a boundary
    (234, 157, ""),  # the DDL of the standalone GTID:1 group
    (365, 365, None),
    (444, 365, f"{UUID}:1"),  # BEGIN after GTID:2
    (519, 365, f"{UUID}:1"),  # TABLE_MAP
    (567, 365, f"{UUID}:1"),  # rows
    (600, 365, f"{UUID}:1"),  # the middle of the rows event
    (611, 611, None),  # XID: Canal's recorded position (the end of a transaction)
    (620, 365, f"{UUID}:1"),  # the middle of the XID: still inside
    (642, 642, None),
    (1213, 919, f"{UUID}:1-3"),  # deep inside the 4-table transaction
    (1441, 1441, None),
    (1472, 1472, None),  # ROTATE
    (1516, 1516, None),  # the end of the file
    (60, 4, ""),  # inside the FORMAT_DESCRIPTION event: its start
    (130, 126, ""),  # inside PREVIOUS_GTIDS
])
def test_positions_inside_a_transaction_move_to_its_start(gtid_server: FakeServer, pos: int, expected: int,
                                                          gtid: str | None) -> None:
    start = _align(gtid_server, "binlog.000001", pos)
    assert start.rule == "journal-position"
    assert not start.gtid_mode
    assert start.position.journal_name == "binlog.000001"
    assert start.position.position == expected
    if expected == pos:
        assert start.realigned_from is None
    else:
        assert start.realigned_from == EntryPosition(journal_name="binlog.000001", position=pos)
        assert start.position.gtid == gtid  # the executed set before the transaction
        assert start.position.server_id == 1
    assert gtid_server.open_conns == 0


def test_a_boundary_position_costs_one_probe_and_gets_its_time(gtid_server: FakeServer) -> None:
    start = _align(gtid_server, "binlog.000001", 642)
    assert start.position.timestamp == T2 * 1000 and start.position.server_id == 1
    assert [d[:2] for d in gtid_server.dumps] == [("binlog.000001", 642)]


def test_position_errors(gtid_server: FakeServer) -> None:
    with pytest.raises(PositionBeyondEndError, match=r"binlog.000001:2000: binlog.000001 on .* is only 1516 bytes"):
        _align(gtid_server, "binlog.000001", 2000)
    with pytest.raises(BinlogFileNotFoundError, match=r"has no binlog binlog.000009 \(it has binlog.000001 .. "
                                                      r"binlog.000002\)"):
        _align(gtid_server, "binlog.000009", 4)
    with pytest.raises(BinlogFileNotFoundError, match=r"binlog\.000000 was purged .* oldest binlog there "
                                                      r"is binlog\.000001") as ei:
        _align(gtid_server, "binlog.000000", 400)
    assert ei.value.purged and ei.value.available == ["binlog.000001", "binlog.000002"]
    assert gtid_server.open_conns == 0


# ---- realignment without GTIDs, with anonymous GTIDs, with compressed transactions --------------------------


def test_realignment_without_gtids() -> None:
    # Canal's own 5.1 test binlog (no checksums): 106 BEGIN | 175 TABLE_MAP | 226 WRITE_ROWS | 289 XID |
    # 316 CREATE TABLE (a statement of its own) | 546 BEGIN ...
    server = FakeServer({"mysql-bin.000001": _load("canal/parse/src/test/resources/binlog/mysql-bin.000001")},
                        checksum=False)
    for pos, expected in [(106, 106), (175, 106), (226, 106), (289, 289), (316, 316), (400, 316), (546, 546),
                          (700, 546)]:
        start = _align(server, "mysql-bin.000001", pos)
        assert start.position.position == expected, pos


def test_realignment_with_anonymous_gtids_and_payloads() -> None:
    anon = FakeServer({"binlog.000001": _load(
        "percona-binlog-server/mtr/binlog_streaming/std_data/data_80045_position/binlog.000001")})
    assert _align(anon, "binlog.000001", 1305).position.position == 919
    assert _align(anon, "binlog.000001", 1305).position.gtid == ""
    # 157 ANONYMOUS_GTID | 236 TRANSACTION_PAYLOAD (the whole transaction) | 724 ROTATE
    comp = FakeServer({"mysql-bin.000001": _load(
        "osheroff-mysql-binlog-connector-java/src/test/resources/mysql-bin.compressed")})
    assert _align(comp, "mysql-bin.000001", 236).position.position == 157
    assert _align(comp, "mysql-bin.000001", 724).position.position == 724


# ---- timestamp search ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("t_ms", "file", "pos", "gtid"), [
    (T1 * 1000, "binlog.000001", 157, ""),
    (T1 * 1000 + 1, "binlog.000001", 365, f"{UUID}:1"),  # GTID:1 at T1 s is before T1 s + 1 ms
    (T2 * 1000, "binlog.000001", 365, f"{UUID}:1"),  # not binlog.000002, whose first event is at T2 too
    (T2 * 1000 + 500, "binlog.000002", 847, None),  # after every transaction: the current end
])
def test_timestamp_search(gtid_server: FakeServer, t_ms: int, file: str, pos: int, gtid: str | None) -> None:
    start = _locator(gtid_server, StartConfig(timestamp=t_ms)).locate(None)
    assert start.rule == "timestamp"
    assert (start.position.journal_name, start.position.position) == (file, pos)
    if pos == 847:  # nothing at or after T: the end (SHOW MASTER STATUS), with the executed set
        assert start.position.gtid == f"{UUID}:1-6"
        assert start.position.timestamp == 1800000000500
    else:
        assert start.position.gtid == gtid
        assert start.position.timestamp is not None and start.position.timestamp >= t_ms
    assert gtid_server.open_conns == 0


def test_timestamp_before_the_oldest_binlog_is_a_clear_error(gtid_server: FakeServer) -> None:
    with pytest.raises(TimestampTooOldError) as ei:
        _locator(gtid_server, StartConfig(timestamp=T1 * 1000 - 1)).locate(None)
    e = ei.value
    assert (e.oldest_file, e.oldest_ms, e.requested_ms) == ("binlog.000001", T1 * 1000, T1 * 1000 - 1)
    assert "the oldest binlog still there is binlog.000001, starting at 2026-03-10 17:11:51.000 UTC" in str(e)


def test_journal_and_timestamp_searches_from_that_file(gtid_server: FakeServer) -> None:
    start = _locator(gtid_server, StartConfig(journal_name="binlog.000002", timestamp=T1 * 1000)).locate(None)
    assert (start.rule, start.position.journal_name, start.position.position) == ("journal-timestamp",
                                                                                  "binlog.000002", 197)
    assert start.position.gtid == f"{UUID}:1-4"
    with pytest.raises(BinlogFileNotFoundError):
        _locator(gtid_server, StartConfig(journal_name="binlog.000007", timestamp=T1 * 1000)).locate(None)


def test_journal_alone_starts_at_the_file_start(gtid_server: FakeServer) -> None:
    start = _locator(gtid_server, StartConfig(journal_name="binlog.000002")).locate(None)
    assert (start.rule, start.position.journal_name, start.position.position) == ("journal", "binlog.000002", 4)


def test_binary_search_picks_the_last_file_starting_before_t() -> None:
    firsts = [100, 200, 200, 300, 450, 460, 900, 1000, 1001, 5000]
    names = [f"b.{i:06d}" for i in range(1, len(firsts) + 1)]
    probed: list[str] = []

    class Probe(StartPositionLocator):
        def end_position(self) -> EntryPosition:
            return EntryPosition(journal_name=names[-1], position=4)

        def binary_logs(self) -> list[tuple[str, int]]:
            return [(n, 4) for n in names]

        def _first_time(self, file: str) -> int:
            probed.append(file)
            return firsts[names.index(file)]

        def _scan_for_time(self, file: str, t_ms: int, end: EntryPosition, names_: list[str]) -> EntryPosition:
            return EntryPosition(journal_name=file, position=4)

    loc = Probe(lambda: None, LogIdentity())  # type: ignore[arg-type,return-value]
    for t, want in [(100, 0), (150, 0), (200, 0), (201, 2), (300, 2), (301, 3), (455, 4), (999, 6), (1001, 7),
                    (1002, 8), (10**6, 9)]:
        probed.clear()
        assert loc.find_by_timestamp(t * 1000).journal_name == names[want], t
        assert len(probed) <= 5  # 1 + log2(10)
    with pytest.raises(TimestampTooOldError):
        loc.find_by_timestamp(99_999)


# ---- the rules ------------------------------------------------------------------------------------------------


def _stored(pos: int, *, file: str = "binlog.000001", address: str = "10.0.0.5", server_id: int | None = 1,
            timestamp: int | None = T2 * 1000, gtid: str = "") -> LogPosition:
    return LogPosition(identity=LogIdentity(address, 3306),
                       position=EntryPosition(journal_name=file, position=pos, server_id=server_id,
                                              timestamp=timestamp, gtid=gtid))


def test_stored_position_of_the_same_source_wins_over_configuration(gtid_server: FakeServer) -> None:
    cfg = StartConfig(journal_name="binlog.000002", position=4, timestamp=T1 * 1000)
    start = _locator(gtid_server, cfg).locate(_stored(642))
    assert (start.rule, start.position.position, start.realigned_from) == ("stored", 642, None)
    assert start.position.timestamp == T2 * 1000  # the stored fields are kept
    inside = _locator(gtid_server, cfg).locate(_stored(1257))
    assert (inside.rule, inside.position.position) == ("stored", 919)
    assert inside.realigned_from == _stored(1257).position


def test_source_switch_searches_by_stored_time_minus_fallback(gtid_server: FakeServer) -> None:
    stored = _stored(400, file="other-bin.000077", address="10.0.0.6", timestamp=T2 * 1000 + 2500)
    start = _locator(gtid_server, StartConfig(fallback_interval=2)).locate(stored)  # T = T2 s + 0.5 s
    assert (start.rule, start.position.journal_name, start.position.position) == ("source-switch",
                                                                                 "binlog.000002", 847)
    start = _locator(gtid_server, StartConfig(fallback_interval=3)).locate(stored)  # T = T2 s - 0.5 s
    assert (start.position.journal_name, start.position.position) == ("binlog.000001", 365)
    with pytest.raises(FallbackImpossibleError, match="carries no timestamp"):
        _locator(gtid_server).locate(_stored(400, address="10.0.0.6", timestamp=None))


def test_changed_server_id_at_the_same_address(gtid_server: FakeServer) -> None:
    # VIP failover: the stored position does not exist on the new server -> search by time
    gone = _stored(400, file="binlog.000031", server_id=7, timestamp=T1 * 1000 + 60_000)
    start = _locator(gtid_server, StartConfig(fallback_interval=60)).locate(gone)
    assert (start.rule, start.position.journal_name, start.position.position) == ("server-id-changed",
                                                                                 "binlog.000001", 157)
    # not a boundary on this server -> search by time as well
    inside = _stored(1257, server_id=7, timestamp=T1 * 1000 + 60_000)
    assert _locator(gtid_server, StartConfig(fallback_interval=60)).locate(inside).rule == "server-id-changed"
    # even where the old offset happens to be a clean boundary on the new server: another server answers
    # at this address (positions store the source's own @@server_id), so its offsets are not trusted
    fits = _stored(642, server_id=7, timestamp=T1 * 1000 + 60_000)
    assert _locator(gtid_server, StartConfig(fallback_interval=60)).locate(fits).rule == "server-id-changed"
    # same server id: a missing file is an error, never a silent jump
    with pytest.raises(BinlogFileNotFoundError):
        _locator(gtid_server).locate(_stored(400, file="binlog.000031"))


def test_stored_position_with_only_a_timestamp(gtid_server: FakeServer) -> None:
    stored = LogPosition(identity=LogIdentity("10.0.0.5", 3306),
                         position=EntryPosition(timestamp=T2 * 1000, position=0))
    start = _locator(gtid_server, StartConfig(fallback_interval=0)).locate(stored)
    assert (start.rule, start.position.position) == ("stored-timestamp", 365)


def test_gtid_mode(gtid_server: FakeServer) -> None:
    cfg = StartConfig(gtid_on=True, gtid=f"{UUID}:1-2", journal_name="binlog.000002", position=4)
    start = _locator(gtid_server, cfg).locate(None)
    assert (start.rule, start.gtid_mode, start.position.gtid) == ("gtid-configured", True, f"{UUID}:1-2")
    assert start.dump_gtid == f"{UUID}:1-2"
    assert gtid_server.dumps[-1] == ("", 4, f"{UUID}:1-2")  # probed by GTID
    stored = _stored(642, gtid=f"{UUID}:1-3", address="10.0.0.9")  # GTIDs are global: any source
    start = _locator(gtid_server, cfg).locate(stored)
    assert (start.rule, start.position.gtid, start.position.position) == ("gtid-stored", f"{UUID}:1-3", 642)
    # a stored position without gtid (gtidon switched on later): the position rules
    start = _locator(gtid_server, cfg).locate(_stored(642))
    assert (start.rule, start.gtid_mode) == ("stored", False)
    # gtidon and nothing configured: the end, by GTID
    start = _locator(gtid_server, StartConfig(gtid_on=True)).locate(None)
    assert (start.rule, start.gtid_mode, start.position.gtid) == ("master-status", True, f"{UUID}:1-6")
    with pytest.raises(InvalidStartConfigError, match="not a MySQL uuid:interval set"):
        _locator(gtid_server, StartConfig(gtid_on=True, gtid="0-1-5")).locate(None)
    gtid_server.bad_gtids.add(f"{UUID}:1-9")
    with pytest.raises(GtidNotAvailableError, match=f"cannot stream from GTID {UUID}:1-9: .*purged.*executed "
                                                    f"{UUID}:1-6"):
        _locator(gtid_server, StartConfig(gtid_on=True, gtid=f"{UUID}:1-9")).locate(None)
    assert gtid_server.open_conns == 0


def test_gtid_configured_but_gtidon_off_uses_positions(gtid_server: FakeServer) -> None:
    start = _locator(gtid_server, StartConfig(gtid=f"{UUID}:1-2")).locate(None)
    assert (start.rule, start.gtid_mode) == ("master-status", False)


def test_nothing_configured_is_the_current_end(gtid_server: FakeServer) -> None:
    start = _locator(gtid_server).locate(None)
    pos, gtid_mode = start  # unpacks like the parser's Locate result
    assert (start.rule, gtid_mode) == ("master-status", False)
    assert pos == EntryPosition(journal_name="binlog.000002", position=847, server_id=1, timestamp=1800000000500,
                                gtid=f"{UUID}:1-6")
    assert gtid_server.dumps == []


# ---- configuration and identity ----------------------------------------------------------------------------------


def test_start_config_from_canal_properties() -> None:
    props = {"canal.instance.gtidon": "true", "canal.instance.master.journal.name": " mysql-bin.000003 ",
             "canal.instance.master.position": "4567", "canal.instance.master.timestamp": "1591600659000",
             "canal.instance.master.gtid": "", "canal.instance.standby.journal.name": "s-bin.000001",
             "canal.instance.fallbackIntervalInSeconds": "30"}
    assert StartConfig.from_properties(props) == StartConfig(gtid_on=True, journal_name="mysql-bin.000003",
                                                             position=4567, timestamp=1591600659000, gtid="",
                                                             fallback_interval=30)
    standby = StartConfig.from_properties(props, "standby")
    assert (standby.journal_name, standby.position, standby.fallback_interval) == ("s-bin.000001", None, 30)
    assert StartConfig.from_properties({}) == StartConfig()


def test_same_source() -> None:
    assert same_source(LogIdentity("localhost", 3306), LogIdentity("127.0.0.1", 3306))
    assert same_source(LogIdentity("DB1.example", 3306), LogIdentity("db1.example", 3306))
    assert not same_source(LogIdentity("127.0.0.1", 3306), LogIdentity("127.0.0.1", 3307))
    assert not same_source(LogIdentity("10.0.0.5", 3306), LogIdentity("10.0.0.6", 3306))


# ---- source identity: the same address and server id, but is it the same server? ---------------------------------

QUERY, XID, STOP = 2, 16, 3


def _mismatch(server: FakeServer, stored: LogPosition, config: StartConfig | None = None, **kw: object) -> str:
    with pytest.raises(SourceMismatchError) as ei:
        _locator(server, config).locate(stored, **kw)  # type: ignore[arg-type]
    e = ei.value
    assert (e.server, e.file, e.position) == ("10.0.0.5:3306", stored.position.journal_name,
                                              stored.position.position)
    assert "remove its stored position" in str(e) and "canal.instance.master.address" in str(e)
    assert server.open_conns == 0
    return str(e)


def test_a_cursor_is_checked_against_the_event_starting_there(gtid_server: FakeServer) -> None:
    # Canal's cursor: the XID at 611 (written at T2 by server 1), one probe decides
    start = _locator(gtid_server).locate(_stored(611))
    assert (start.rule, start.position.position) == ("stored", 611)
    assert [d[:2] for d in gtid_server.dumps] == [("binlog.000001", 611)]
    # the same offset written five seconds later: another server's XID
    msg = _mismatch(gtid_server, _stored(611, timestamp=T2 * 1000 + 5000))
    assert "expected an event written 2026-03-10 17:11:59.000 UTC (1773162719000 ms) by server 1 there" in msg
    assert ("found server id 1 (@@server_uuid 396e294c-1ca4-11f1-9ae7-00155da79c6b), starting there a XID event "
            "at binlog.000001:611..642 written 2026-03-10 17:11:54.000 UTC") in msg
    # what cannot be checked is used as before: no time stored, or another server id at the address (Canal's
    # VIP failover rule searches by time on a server whose offsets are its own)
    assert _locator(gtid_server).locate(_stored(611, timestamp=None)).position.position == 611
    assert _locator(gtid_server, StartConfig(fallback_interval=0)).locate(
        _stored(611, server_id=7, timestamp=T2 * 1000 + 5000)).rule == "server-id-changed"


def test_the_parsers_own_position_is_checked_against_the_event_ending_there(gtid_server: FakeServer) -> None:
    # the parser records the end of the DDL (234..365, T1); the event at 365 is GTID:2 at T2: read the file
    start = _locator(gtid_server).locate(_stored(365, timestamp=T1 * 1000))
    assert (start.rule, start.position.position, start.realigned_from) == ("stored", 365, None)
    assert [d[:2] for d in gtid_server.dumps] == [("binlog.000001", 365), ("binlog.000001", 4)]
    msg = _mismatch(gtid_server, _stored(365, timestamp=T1 * 1000 - 3000))
    assert "starting there a GTID event at binlog.000001:365..444" in msg
    assert "ending there a QUERY event at binlog.000001:234..365 written 2026-03-10 17:11:51.000 UTC" in msg
    # at the end of a file: the last event (STOP, 824..847, T2 + 2 s)
    end = _stored(847, file="binlog.000002", timestamp=(T2 + 2) * 1000)
    assert _locator(gtid_server).locate(end).position.position == 847
    msg = _mismatch(gtid_server, _stored(847, file="binlog.000002", timestamp=T2 * 1000))
    assert "ending there a STOP event at binlog.000002:824..847" in msg


def test_a_position_inside_a_transaction_is_checked_against_the_events_around_it(gtid_server: FakeServer) -> None:
    start = _locator(gtid_server).locate(_stored(600))  # inside WRITE_ROWS 567..611 of GTID:2 (T2)
    assert (start.rule, start.position.position) == ("stored", 365)
    msg = _mismatch(gtid_server, _stored(600, timestamp=T1 * 1000))
    assert "around it a WRITE_ROWS_V2 event at binlog.000001:567..611" in msg
    assert "opening its transaction a GTID event at binlog.000001:365..444" in msg


def test_a_position_at_a_file_start_needs_a_file_created_before_its_time(gtid_server: FakeServer) -> None:
    assert _locator(gtid_server).locate(_stored(4, file="binlog.000002")).position.position == 4
    msg = _mismatch(gtid_server, _stored(4, file="binlog.000002", timestamp=T1 * 1000))
    assert "binlog.000002 created 2026-03-10 17:11:54.000 UTC (1773162714000 ms), later than the position" in msg


def test_the_parser_reconnecting_compares_the_event_it_recorded(gtid_server: FakeServer) -> None:
    stored = _stored(365, timestamp=T1 * 1000)
    ddl = RecordedEvent("binlog.000001", 234, 365, T1, 1, QUERY)
    start = _locator(gtid_server).locate(stored, provenance=Provenance(stored, ddl, UUID))
    assert start.position.position == 365
    # one probe where the position is, one where its event starts: no reading of the file from its start
    assert [d[:2] for d in gtid_server.dumps] == [("binlog.000001", 365), ("binlog.000001", 234)]
    msg = _mismatch(gtid_server, stored, provenance=Provenance(stored, replace(ddl, timestamp=T1 - 1), UUID))
    assert "expected the event it was recorded from, a QUERY event at binlog.000001:234..365 written" in msg
    msg = _mismatch(gtid_server, stored, provenance=Provenance(stored, replace(ddl, start=200), UUID))
    assert "no event starting at binlog.000001:200" in msg
    # MySQL: the uuid of the server it streamed from
    msg = _mismatch(gtid_server, stored, provenance=Provenance(stored, ddl, "11111111-2222-3333-4444-555555555555"))
    assert "expected @@server_uuid 11111111-2222-3333-4444-555555555555" in msg
    # provenance of another position is not evidence for this one
    other = Provenance(_stored(642), RecordedEvent("binlog.000001", 611, 642, T1, 1, XID), UUID)
    assert _locator(gtid_server).locate(stored, provenance=other).position.position == 365


def test_a_stored_gtid_of_the_same_server_is_checked_by_its_journal_position(gtid_server: FakeServer) -> None:
    cfg = StartConfig(gtid_on=True)
    ok = _stored(642, gtid=f"{UUID}:1-2")
    assert _locator(gtid_server, cfg).locate(ok).rule == "gtid-stored"
    _mismatch(gtid_server, _stored(642, gtid=f"{UUID}:1-2", timestamp=T1 * 1000), cfg)
    # another server id at the address (failover): GTIDs are global, nothing to compare
    moved = _stored(642, gtid=f"{UUID}:1-2", timestamp=T1 * 1000, server_id=7)
    assert _locator(gtid_server, cfg).locate(moved).rule == "gtid-stored"

