"""What the parser puts in entry headers about GTIDs, by dump mode (a fake MySQL source streaming a real binlog).

Canal's decoder is given a GTID set only when it dumps by GTID (canal.instance.gtidon with a start GTID): only
then do headers carry the executed set (Header.gtid) and, after a MySQL GTID event, curtGtid, curtGtidSn and
curtGtidLct. Expected values come from the fixture's mysqlbinlog dump (``# at 154``: GTID_NEXT
'e3e2a4ee-b6dc-11ea-8bcf-0242ac150002:1', last_committed=0, sequence_number=1)."""

from __future__ import annotations

import time
from typing import Any

from fixture_support import BOXERCRAB, fixture_path, load_binlog_bytes, make_event, walk_headers
from parser_fakes import FakeHistory, FakeSource

from canal_core.entry import EntryConverter
from canal_core.mysql import ServerInfo
from canal_core.parse.parser import EventParser, ParserConfig, SourceConfig
from canal_core.parse.position import MemoryPositionManager
from canal_core.protocol.position import EntryPosition, LogPosition

FIXTURE = "mysql-cdc-rs/tests/events/5.7/31_update_rows_v2/log.bin"
GTID = "e3e2a4ee-b6dc-11ea-8bcf-0242ac150002:1"
OTHER = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"  # the start set given to a GTID dump
BEGIN, ROWDATA, END = 1, 2, 3

INFO = ServerInfo(flavor="mysql", version=(5, 7, 30), version_string="5.7.30-log", server_id=1,
                  server_uuid="e3e2a4ee-b6dc-11ea-8bcf-0242ac150002", log_bin=True, binlog_format="ROW",
                  binlog_row_image="FULL", binlog_checksum="CRC32", gtid_mode="ON", gtid_current_pos="",
                  gtid_binlog_pos="", semi_sync_master=False)

class Parser(EventParser):
    def __init__(self, start: EntryPosition, by_gtid: bool, sink: Any) -> None:
        def locate(src: SourceConfig, stored: LogPosition | None) -> tuple[EntryPosition, bool]:
            return start, by_gtid

        cfg = ParserConfig(destination="gtid", master=SourceConfig("127.0.0.1", 3439))
        super().__init__(cfg, sink=sink, history=FakeHistory(BOXERCRAB), positions=MemoryPositionManager(),  # type: ignore[arg-type]
                         converter_factory=lambda ident: EntryConverter(ident, timezone="UTC"), locate=locate)
        data = load_binlog_bytes(fixture_path(FIXTURE))
        self.raw_events = [data[h.offset:h.offset + h.length] for h in walk_headers(data)]

    def _connection(self, src: SourceConfig) -> Any:
        return FakeSource(INFO, self.raw_events)


def _headers(start: EntryPosition, by_gtid: bool, *, inject: bytes = b"") -> list[Any]:
    """The entry headers of the fixture's one transaction; ``inject`` is streamed right after the FDE."""
    got: list[Any] = []
    parser = Parser(start, by_gtid, got.extend)
    if inject:
        parser.raw_events.insert(1, inject)
    parser.start()
    try:
        deadline = time.monotonic() + 20
        while not any(e.entry_type == END for e in got):
            assert parser.last_error is None, parser.last_error
            assert time.monotonic() < deadline, got
            time.sleep(0.02)
    finally:
        parser.stop()
    assert [e.entry_type for e in got] == [BEGIN, ROWDATA, END]
    return [e.entry.header for e in got]


def test_a_gtid_dump_carries_the_executed_set_and_the_current_gtid() -> None:
    start = EntryPosition(journal_name="mysql-bin.000001", position=4, gtid=OTHER)
    for h in _headers(start, by_gtid=True):
        assert set(h.gtid.split(",")) == {OTHER, GTID}
        curt = [(p.key, p.value) for p in h.props if p.key.startswith("curtGtid")]
        assert curt == [("curtGtid", GTID), ("curtGtidSn", "1"), ("curtGtidLct", "0")]


def test_a_position_dump_carries_no_gtid() -> None:
    # gtidon=false, even with a GTID in the start position (a stored position of an earlier GTID-mode run)
    for start in (EntryPosition(journal_name="mysql-bin.000001", position=4),
                  EntryPosition(journal_name="mysql-bin.000001", position=4, gtid=OTHER)):
        for h in _headers(start, by_gtid=False):
            assert h.gtid == ""
            assert [p.key for p in h.props if p.key.startswith("curtGtid")] == []


def test_an_ignorable_event_of_unknown_type_is_skipped_on_the_stream() -> None:
    # Aurora's padding: type 100, LOG_EVENT_IGNORABLE_F (0x80) set, as in the osheroff aurora-padding fixture
    padding = make_event(100, bytes(64), checksum=True, log_pos=0, flags=0x80)
    start = EntryPosition(journal_name="mysql-bin.000001", position=4)
    assert len(_headers(start, by_gtid=False, inject=padding)) == 3
