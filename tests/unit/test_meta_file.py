"""FileMixedMetaManager: meta.dat in Canal's JSON, periodic flush, reload, atomic replace, flush on stop."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import canal_core.meta.file as meta_file
from canal_core.meta import BatchLedger, FileMixedMetaManager, MetaStoreError, PositionRange
from canal_core.parse.position import FailbackPositionManager, MemoryPositionManager, MetaPositionManager
from canal_core.protocol.identity import ClientIdentity
from canal_core.protocol.position import EntryPosition, LogIdentity, LogPosition
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
C1 = ClientIdentity("example", 1001, "")
C2 = ClientIdentity("example", 1002, "test\\..*")
COMPAT_META = (b'{"clientDatas":[{"clientIdentity":{"clientId":1001,"destination":"example","filter":""},"cursor":'
               b'{"identity":{"slaveId":-1,"sourceAddress":{"address":"localhost","port":3306}},"postion":{"gtid":"",'
               b'"included":false,"journalName":"mysql-bin.000004","position":13885,"serverId":1,'
               b'"timestamp":1591600659000}}}],"destination":"example"}')


def pos(offset: int = 13885, journal: str = "mysql-bin.000004") -> LogPosition:
    return LogPosition(LogIdentity("localhost", 3306, -1), EntryPosition(journal, offset, 1, 1591600659000))


def wait_for(cond: Callable[[], bool], timeout: float = 3.0) -> bool:
    return wait_until(cond, timeout, step=0.01)


def read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def test_file_is_canals_json(tmp_path: Path) -> None:
    m = FileMixedMetaManager(tmp_path, flush_period_ms=50)
    m.start()
    m.subscribe(C1)
    m.update_cursor(C1, pos())
    path = tmp_path / "example" / "meta.dat"
    assert wait_for(lambda: read(path) == COMPAT_META)
    m.stop()
    assert path.read_bytes() == COMPAT_META


def test_flush_period_coalesces_updates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[tuple[float, bytes]] = []
    real = meta_file.write_atomically

    def counting(path: Path, data: bytes) -> None:
        writes.append((time.monotonic(), data))
        real(path, data)

    monkeypatch.setattr(meta_file, "write_atomically", counting)
    m = FileMixedMetaManager(tmp_path, flush_period_ms=300)
    m.start()
    try:
        m.subscribe(C1)  # subscriptions are written at once, not at the next period
        assert wait_for(lambda: len(writes) == 1, timeout=0.25)
        t0 = time.monotonic()
        for i in range(200):
            m.update_cursor(C1, pos(1000 + i))
        path = tmp_path / "example" / "meta.dat"
        assert wait_for(lambda: b'"position":1199' in read(path), timeout=2.0)
        assert writes[-1][0] - t0 <= 0.3 + 0.5  # within one period (plus scheduling slack)
        time.sleep(0.35)
        assert 2 <= len(writes) <= 3  # 200 cursor moves, one write (two if a period boundary fell inside)
    finally:
        m.stop()


def test_reload_after_restart(tmp_path: Path) -> None:
    m = FileMixedMetaManager(tmp_path, flush_period_ms=50)
    m.start()
    ledger = BatchLedger(m)
    m.subscribe(C1)
    m.subscribe(C2)
    m.subscribe(ClientIdentity("other", 1001))
    r = PositionRange(start=pos(100), ack=pos(200), end=pos(210))
    assert ledger.register(C1, r) == 1
    assert ledger.register(C1, PositionRange(start=pos(300), ack=pos(400), end=pos(410))) == 2
    ledger.ack(C1, 1)
    m.update_cursor(C2, pos(50, "mysql-bin.000003"))
    m.stop()

    again = FileMixedMetaManager(tmp_path, flush_period_ms=50)
    again.start()
    try:
        subs = again.list_all_subscribe("example")
        assert subs == [C1, C2] and subs[1].filter == "test\\..*"
        assert again.get_cursor(C1) == pos(200)
        assert again.get_cursor(C2) == pos(50, "mysql-bin.000003")
        assert again.list_all_subscribe("other") == [ClientIdentity("other", 1001)]
        # outstanding batches are memory-only (Canal): batch 2 is gone, ids start again at 1
        assert again.list_all_batches(C1) == {}
        assert BatchLedger(again).register(C1, r) == 1
        # the parser restarts from the minimum cursor, through parse.position's adapters
        failback = FailbackPositionManager(MemoryPositionManager(), MetaPositionManager(again.min_cursor))
        assert failback.get_latest("example") == pos(50, "mysql-bin.000003")
    finally:
        again.stop()


def test_unsubscribe_is_written(tmp_path: Path) -> None:
    m = FileMixedMetaManager(tmp_path, flush_period_ms=60_000)
    m.start()
    m.subscribe(C1)
    m.subscribe(C2)
    path = tmp_path / "example" / "meta.dat"
    assert wait_for(lambda: b'"clientId":1002' in read(path))
    m.unsubscribe(C2)
    assert wait_for(lambda: b'"clientId":1002' not in read(path))  # without waiting for the 60 s period
    m.stop()


def test_flush_on_stop(tmp_path: Path) -> None:
    m = FileMixedMetaManager(tmp_path, flush_period_ms=60_000)
    m.start()
    m.subscribe(C1)
    path = tmp_path / "example" / "meta.dat"
    assert wait_for(lambda: path.exists())
    m.update_cursor(C1, pos())
    time.sleep(0.05)
    assert b"cursor" not in path.read_bytes()  # the period has not come
    m.stop()
    assert path.read_bytes() == COMPAT_META


def test_failed_write_keeps_old_file_and_retries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "example" / "meta.dat"
    path.parent.mkdir()
    path.write_bytes(COMPAT_META)
    m = FileMixedMetaManager(tmp_path, flush_period_ms=60_000)
    m.start()
    assert m.get_cursor(C1) == pos()
    m.update_cursor(C1, pos(99999))

    def crash(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(MetaStoreError, match="No space left on device"):
        m.flush()
    assert path.read_bytes() == COMPAT_META
    assert [p.name for p in path.parent.iterdir()] == ["meta.dat"]  # no temp file left behind
    monkeypatch.undo()
    m.stop()  # still dirty: the final flush writes it
    assert b'"position":99999' in path.read_bytes()


def test_crash_between_write_and_rename(tmp_path: Path) -> None:
    """A process killed after writing the temp file, before the rename: the old meta.dat is intact."""
    path = tmp_path / "example" / "meta.dat"
    path.parent.mkdir()
    path.write_bytes(COMPAT_META)
    script = textwrap.dedent(f"""
        import os
        from canal_core.meta import FileMixedMetaManager
        from canal_core.protocol.identity import ClientIdentity
        from canal_core.protocol.position import EntryPosition, LogIdentity, LogPosition
        m = FileMixedMetaManager({str(tmp_path)!r}, flush_period_ms=60_000)
        m.start()
        m.update_cursor(ClientIdentity("example", 1001),
                        LogPosition(LogIdentity("localhost", 3306, -1), EntryPosition("mysql-bin.000009", 4)))
        os.replace = lambda src, dst: os._exit(9)  # die right before the rename
        m.flush()
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, timeout=30)
    assert proc.returncode == 9, proc.stderr.decode()
    assert path.read_bytes() == COMPAT_META
    leftovers = [p.name for p in path.parent.iterdir() if p.name != "meta.dat"]
    assert len(leftovers) == 1 and b"mysql-bin.000009" in (path.parent / leftovers[0]).read_bytes()
    m = FileMixedMetaManager(tmp_path)
    m.start()  # the stray temp file is ignored
    assert m.get_cursor(C1) == pos()
    m.stop()


def test_reads_java_canal_file_and_rejects_corrupt(tmp_path: Path) -> None:
    java = (b'{"clientDatas":[{"clientIdentity":{"clientId":1001,"destination":"example"},"cursor":{"@type":'
            b'"com.alibaba.otter.canal.protocol.position.LogPosition","identity":{"slaveId":-1,"sourceAddress":'
            b'{"address":"localhost","port":3306}},"postion":{"included":false,"journalName":"mysql-bin.000004",'
            b'"position":13885,"serverId":1,"timestamp":1591600659000}}}],"destination":"example"}')
    (tmp_path / "example").mkdir()
    (tmp_path / "example" / "meta.dat").write_bytes(java)
    m = FileMixedMetaManager(tmp_path)
    m.start()
    assert m.list_all_subscribe("example") == [C1] and m.get_cursor(C1) == pos()
    m.stop()

    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "meta.dat").write_bytes(b'{"clientDatas":[{"clientIdentity":')
    with pytest.raises(MetaStoreError, match=r"broken/meta\.dat"):
        FileMixedMetaManager(tmp_path).start()


def test_bad_settings(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        FileMixedMetaManager(tmp_path, flush_period_ms=-1)
    m = FileMixedMetaManager(tmp_path)
    with pytest.raises(MetaStoreError):
        m.subscribe(ClientIdentity("../evil", 1))


def test_period_zero_writes_every_cursor_before_returning(tmp_path: Path) -> None:
    from canal_core.protocol.position import EntryPosition, LogIdentity, LogPosition

    m = FileMixedMetaManager(tmp_path, flush_period_ms=0)
    m.start()
    try:
        c = ClientIdentity("example", 1001)
        m.subscribe(c)
        for pos in (100, 200, 300):
            m.update_cursor(c, LogPosition(LogIdentity("h", 1), EntryPosition("mysql-bin.000001", pos)))
            # on disk already: a reader (or a restart after SIGKILL) sees this very cursor
            assert f'"position":{pos}' in (tmp_path / "example" / "meta.dat").read_text()
    finally:
        m.stop()
