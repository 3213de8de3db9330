"""Parse-position managers: Canal's JSON shapes, the file manager's atomic replace, failback, meta."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from canal_core.parse import position as P
from canal_core.parse.position import (
    FailbackPositionManager,
    FilePositionManager,
    MemoryPositionManager,
    MetaPositionManager,
    PositionManager,
    PositionStoreError,
)
from canal_core.protocol.position import EntryPosition, LogIdentity, LogPosition

# docs/canal-compat.md §2, verbatim
CURSOR_EXAMPLE = (
    '{"@type":"com.alibaba.otter.canal.protocol.position.LogPosition","identity":{"slaveId":-1,"sourceAddress":'
    '{"address":"localhost","port":3306}},"postion":{"gtid":"","included":false,"journalName":"mysql-bin.000004",'
    '"position":13885,"serverId":1,"timestamp":1591600659000}}'
)
PARSE_EXAMPLE = CURSOR_EXAMPLE.replace('"@type":"com.alibaba.otter.canal.protocol.position.LogPosition",', "")


def _pos(offset: int = 13885, journal: str = "mysql-bin.000004") -> LogPosition:
    return LogPosition(identity=LogIdentity("localhost", 3306, -1),
                       position=EntryPosition(journal_name=journal, position=offset, server_id=1,
                                              timestamp=1591600659000))


# ---- JSON shapes -------------------------------------------------------------------------------------


def test_cursor_json_round_trips_byte_for_byte() -> None:
    pos = LogPosition.from_json(CURSOR_EXAMPLE)
    assert pos == _pos()
    assert pos.to_json(with_type=True) == CURSOR_EXAMPLE


def test_parse_position_payload_is_canal_json_without_type() -> None:
    assert P.encode_position(_pos()) == PARSE_EXAMPLE.encode()
    assert "@type" not in json.loads(P.encode_position(_pos()))
    assert P.decode_position(PARSE_EXAMPLE) == _pos()
    assert P.decode_position(CURSOR_EXAMPLE.encode()) == _pos()  # readers accept "@type" too


def test_optional_fields_are_omitted_like_canal() -> None:
    pos = LogPosition(identity=LogIdentity("10.0.0.1", 3306), position=EntryPosition(journal_name="b.000001",
                                                                                    position=4))
    d = json.loads(P.encode_position(pos))
    assert d["postion"] == {"gtid": "", "included": False, "journalName": "b.000001", "position": 4}


def test_garbage_is_a_typed_error() -> None:
    with pytest.raises(PositionStoreError, match="cannot parse"):
        P.decode_position(b"{not json", where="/x/parse.dat")
    with pytest.raises(PositionStoreError, match="names no journal"):
        P.decode_position('{"identity":{},"postion":{}}')


# ---- memory --------------------------------------------------------------------------------------------


def test_memory_manager() -> None:
    m = MemoryPositionManager()
    assert m.get_latest("example") is None
    m.persist("example", _pos(100))
    m.persist("example", _pos(200))
    m.persist("other", _pos(300))
    assert m.get_latest("example") == _pos(200)
    assert sorted(m.destinations()) == ["example", "other"]
    m.remove_cache("example")
    assert m.get_latest("example") is None


# ---- file ------------------------------------------------------------------------------------------------


def test_file_manager_writes_canal_json_per_destination(tmp_path: Path) -> None:
    with FilePositionManager(tmp_path) as fm:
        assert fm.get_latest("example") is None
        fm.persist("example", _pos())
        path = tmp_path / "example" / "parse.dat"
        assert path.read_text() == PARSE_EXAMPLE
        fm.persist("example", _pos(20000))
    # a new manager (restart) reads what the old one wrote
    assert FilePositionManager(tmp_path).get_latest("example") == _pos(20000)
    assert FilePositionManager(tmp_path).get_latest("missing") is None
    assert sorted(p.name for p in (tmp_path / "example").iterdir()) == ["parse.dat"]  # no temp files left


def test_file_manager_reads_a_file_written_by_canal(tmp_path: Path) -> None:
    (tmp_path / "example").mkdir()
    (tmp_path / "example" / "parse.dat").write_text(CURSOR_EXAMPLE)
    assert FilePositionManager(tmp_path).get_latest("example") == _pos()


def test_file_manager_crash_during_replace_keeps_the_old_position(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    fm = FilePositionManager(tmp_path)
    fm.persist("example", _pos(100))
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(P.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])

    def crash(src: str, dst: str) -> None:
        # at the moment of the rename the new content is complete and synced in the temp file
        assert json.loads(Path(src).read_text())["postion"]["position"] == 200
        assert synced
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(P.os, "replace", crash)
    with pytest.raises(PositionStoreError, match=r"cannot write the position of example to .*parse.dat"):
        fm.persist("example", _pos(200))
    assert FilePositionManager(tmp_path).get_latest("example") == _pos(100)
    assert fm.get_latest("example") == _pos(100)  # the failed write did not change memory either
    assert sorted(p.name for p in (tmp_path / "example").iterdir()) == ["parse.dat"]


def test_file_manager_concurrent_persists_leave_a_whole_file(tmp_path: Path) -> None:
    fm = FilePositionManager(tmp_path)

    def writer(base: int) -> None:
        for i in range(50):
            fm.persist("example", _pos(base + i))

    threads = [threading.Thread(target=writer, args=(b,)) for b in (1000, 2000, 3000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = FilePositionManager(tmp_path).get_latest("example")
    assert got is not None and got.position.position in {1049, 2049, 3049}


def test_file_manager_with_flush_period_buffers_and_flushes(tmp_path: Path) -> None:
    fm = FilePositionManager(tmp_path, flush_period=3600)
    fm.start()
    try:
        fm.persist("example", _pos(100))
        assert fm.get_latest("example") == _pos(100)  # memory first
        assert not (tmp_path / "example" / "parse.dat").exists()
        fm.flush()
        assert FilePositionManager(tmp_path).get_latest("example") == _pos(100)
        fm.persist("example", _pos(300))
    finally:
        fm.stop()  # stop flushes what is pending
    assert FilePositionManager(tmp_path).get_latest("example") == _pos(300)


def test_file_manager_corrupt_file_and_bad_names_are_typed_errors(tmp_path: Path) -> None:
    (tmp_path / "example").mkdir()
    (tmp_path / "example" / "parse.dat").write_text('{"identity":')
    with pytest.raises(PositionStoreError, match=r"parse\.dat"):
        FilePositionManager(tmp_path).get_latest("example")
    for bad in ("", "..", "a/b"):
        with pytest.raises(PositionStoreError, match="invalid destination"):
            FilePositionManager(tmp_path).persist(bad, _pos())


# ---- failback and meta ----------------------------------------------------------------------------------


class Broken(PositionManager):
    def __init__(self) -> None:
        self.calls = 0

    def get_latest(self, destination: str) -> LogPosition | None:
        self.calls += 1
        raise PositionStoreError("store down")

    def persist(self, destination: str, position: LogPosition) -> None:
        self.calls += 1
        raise PositionStoreError("store down")


def test_failback_reads_primary_then_secondary() -> None:
    primary, secondary = MemoryPositionManager(), MemoryPositionManager()
    fb = FailbackPositionManager(primary, secondary)
    assert fb.get_latest("example") is None
    secondary.persist("example", _pos(1))
    assert fb.get_latest("example") == _pos(1)  # primary has nothing: secondary
    fb.persist("example", _pos(2))
    assert primary.get_latest("example") == _pos(2)
    assert secondary.get_latest("example") == _pos(1)  # persist goes to the primary only
    assert fb.get_latest("example") == _pos(2)


def test_failback_on_primary_errors() -> None:
    primary, secondary = Broken(), MemoryPositionManager()
    fb = FailbackPositionManager(primary, secondary)
    secondary.persist("example", _pos(5))
    assert fb.get_latest("example") == _pos(5)
    fb.persist("example", _pos(6))
    assert secondary.get_latest("example") == _pos(6)
    assert primary.calls == 2
    with pytest.raises(PositionStoreError):
        FailbackPositionManager(MemoryPositionManager(), Broken()).get_latest("example")


def test_canal_default_composition_memory_over_meta(tmp_path: Path) -> None:
    cursors = {"example": _pos(777)}
    asked: list[str] = []

    def min_cursor(destination: str) -> LogPosition | None:
        asked.append(destination)
        return cursors.get(destination)

    meta = MetaPositionManager(min_cursor)
    fb = FailbackPositionManager(MemoryPositionManager(), meta)
    assert fb.get_latest("example") == _pos(777)  # after a restart: the clients' minimum cursor
    meta.persist("example", _pos(1))  # a no-op: acks move the cursors
    assert meta.get_latest("example") == _pos(777)
    fb.persist("example", _pos(800))
    assert fb.get_latest("example") == _pos(800)
    assert asked == ["example", "example"]
    assert fb.get_latest("none") is None
