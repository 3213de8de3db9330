"""pipelines.engine.staging reads row texts three ways (all rows of an entry from one merged parse, a row from its own
merged parse, column by column); whichever it takes, the staged window must be the same. Random windows of
Canal entries, written the way our encoder does (proto3: empty texts and index 0 left out) and the way Canal's
Java server does (proto2: every set field written), with NULLs, empty texts, key changes, DDL and incomplete
row images, are staged normally and with the merged parses disabled, and the files compared byte for byte."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

import pipelines.engine.staging as S
from canal_core.entry.convert import ENTRY_ROWDATA, _entry_bytes, _rows_entry_bytes
from canal_core.protocol import wire as W
from canal_core.protocol.proto import EntryProtocol_pb2 as pb
from pipelines.engine.staging import files as staged_files
from pipelines.engine.staging import rows as row_texts
from pipelines.engine.staging import stager as window_stager
from pipelines.engine.types import convert_texts

# (name, mysqlType, isKey)
LAYOUT = [("id", "int(11)", True), ("k2", "varchar(8)", True), ("v", "varchar(20)", False), ("b", "blob", False),
          ("d", "decimal(6,2)", False), ("t", "datetime(3)", False)]


def _value(rnd: random.Random, name: str, nullable: bool, empty: float) -> str | None:
    if nullable and rnd.random() < 0.15:
        return None
    if name == "id":
        return str(rnd.randint(-5, 50))
    if name == "b":
        return "".join(chr(rnd.randint(0, 255)) for _ in range(rnd.randint(0 if rnd.random() < empty else 1, 5)))
    if name in ("k2", "v") and rnd.random() < empty:
        return ""
    if name == "k2":
        return rnd.choice(["a", "bb", "é"])
    if name == "v":
        return rnd.choice(["x", "héllo", "中文", "a" * 19, "0"])
    if name == "d":
        return rnd.choice(["0.00", "-1.50", "9999.99", "12.30"])
    return rnd.choice(["2026-01-01 00:00:00.000", "1999-12-31 23:59:59.123", "0000-00-00 00:00:00.000"])


def _column(i: int, name: str, mysql_type: str, key: bool, v: str | None, style: str, updated: bool) -> bytes:
    if style == "java":  # proto2: every set field on the wire, empty texts and index 0 included
        return (W.field_oneof_int(1, i) + W.field_int(2, 12) + W.field_str(3, name) + W.field_oneof_int(4, key)
                + W.field_oneof_int(5, updated) + W.field_oneof_int(6, v is None)
                + (b"" if v is None else W.key(8, W.LEN) + W.varint(len(v.encode())) + v.encode())
                + W.field_str(10, mysql_type))
    c = pb.Column(index=i, sqlType=12, name=name, isKey=key, updated=updated, value=v or "", mysqlType=mysql_type)
    if style != "no-isnull" or v is None:
        c.isNull = v is None
    return c.SerializeToString()


def _window(seed: int) -> list[bytes]:
    rnd = random.Random(seed)
    layout = LAYOUT[:rnd.randint(2, len(LAYOUT))]
    empty = rnd.choice([0.0, 0.02, 0.3])
    out = []
    offset = 4
    for _ in range(rnd.randint(1, 14)):
        offset += rnd.randint(1, 500)
        h = pb.Header(logfileName="mysql-bin.000007", logfileOffset=offset, serverId=9,
                      executeTime=1_700_000_000_000 + offset, schemaName="s", tableName=rnd.choice(["t", "u"]),
                      gtid=f"0-1-{offset}")
        kind = rnd.random()
        if kind < 0.06:
            h.eventType = pb.ALTER
            rc = pb.RowChange(eventType=pb.ALTER, isDdl=True, sql="ALTER TABLE t ADD x INT", ddlSchemaName="s")
            out.append(pb.Entry(header=h, entryType=pb.ROWDATA, storeValue=rc.SerializeToString()).SerializeToString())
            continue
        if kind < 0.12:
            end = pb.TransactionEnd(transactionId="7").SerializeToString()
            out.append(pb.Entry(header=h, entryType=pb.TRANSACTIONEND, storeValue=end).SerializeToString())
            continue
        et = rnd.choice([pb.INSERT, pb.UPDATE, pb.DELETE])
        h.eventType = et
        style = rnd.choice(["proto3", "proto3", "java", "no-isnull"])
        rows = b""
        for _ in range(rnd.randint(1, 8)):
            cols = layout[:-1] if rnd.random() < 0.004 else layout  # an incomplete image now and then
            b = [_value(rnd, n, not k, empty) for n, _, k in layout]
            a = [_value(rnd, n, not k, empty) for n, _, k in layout]
            if rnd.random() < 0.7:  # the key kept, else the row moves
                a = [bv if k else av for (_, _, k), bv, av in zip(layout, b, a, strict=True)]
            rd = b""
            if et != pb.INSERT:
                rd += b"".join(W.field_message(1, _column(i, n, t, k, b[i], style, False))
                               for i, (n, t, k) in enumerate(cols))
            if et != pb.DELETE:
                rd += b"".join(W.field_message(2, _column(i, n, t, k, a[i], style, et == pb.INSERT or a[i] != b[i]))
                               for i, (n, t, k) in enumerate(cols))
            rows += W.field_message(12, rd)
        store = W.field_int(1, 3) + W.field_oneof_int(2, et) + W.field_oneof_int(10, 0) + rows
        out.append(pb.Entry(header=h, entryType=pb.ROWDATA, storeValue=store).SerializeToString())
    return out


def _staged(entries: list[bytes], root: Path) -> str:
    """A digest of the staged files (the manifest without its creation time), or the error staging raised."""
    try:
        S.stage_window(entries, root=root, destination="d", window=1, attempt=0, batch_ids=[1])
    except S.StagingError as e:
        return f"{type(e).__name__}: {e}"
    path = S.window_path(root, "d", 1, 0)
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        data = f.read_bytes()
        if f.name == staged_files.MANIFEST:
            m = json.loads(data)
            m.pop("created_ms")
            data = json.dumps(m, sort_keys=True).encode()
        h.update(str(f.relative_to(path)).encode() + b"\0" + data)
    return h.hexdigest()


class _NoMerge:
    """A stand-in for the merged parses (of a RowData, of a RowChange: ``.rowDatas``) that lines up with
    nothing: every row is read column by column."""

    @staticmethod
    def FromString(data: bytes) -> Any:
        side = SimpleNamespace(isNull=[True], value=[], index=[])  # never the expected count
        return SimpleNamespace(beforeColumns=side, afterColumns=side, rowDatas=SimpleNamespace(
            beforeColumns=side, afterColumns=side))


@pytest.mark.parametrize("chunk", range(4))
def test_merged_and_column_reads_stage_the_same(chunk: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    raised = 0
    calls = {"merged": 0, "columns": 0}

    def counted(name: str, fn: Any) -> Any:
        def call(*args: Any) -> Any:
            calls[name] += 1
            return fn(*args)
        return call

    for seed in range(chunk * 50, chunk * 50 + 50):
        entries = _window(seed)
        with monkeypatch.context() as m:
            m.setattr(row_texts, "_texts", counted("merged", row_texts._texts))
            m.setattr(row_texts, "_column_texts", counted("columns", row_texts._column_texts))
            fast = _staged(entries, tmp_path / f"fast{seed}")
        with monkeypatch.context() as m:
            m.setattr(row_texts, "_MergedRowData", _NoMerge)
            m.setattr(row_texts, "_MergedRowChange", _NoMerge)
            slow = _staged(entries, tmp_path / f"slow{seed}")
        assert fast == slow, f"seed {seed}"
        raised += ":" in fast
    assert raised < 25  # most windows stage
    assert calls["merged"] > 40 and calls["columns"] > 40  # both ways were taken


def test_merged_read_of_java_style_entries(tmp_path: Path) -> None:
    """Entries with every field written (empty texts, index 0) line up in the merged parse; NULL and '' differ."""
    rows = b""
    for k, v in enumerate(["", None, "x"]):
        rd = b"".join(W.field_message(2, _column(i, n, t, key, val, "java", True)) for i, (n, t, key), val in
                      zip(range(3), LAYOUT[:3], [str(k), "a", v], strict=True))
        rows += W.field_message(12, rd)
    store = W.field_int(1, 3) + W.field_oneof_int(2, pb.INSERT) + W.field_oneof_int(10, 0) + rows
    h = pb.Header(logfileName="mysql-bin.000001", logfileOffset=4, schemaName="s", tableName="t",
                  eventType=pb.INSERT)
    st = window_stager._Stager("d", 1, "UTC")
    st.add(pb.Entry(header=h, entryType=pb.ROWDATA, storeValue=store).SerializeToString())
    assert st.texts == [b"0", b"a", b"", b"1", b"a", None, b"2", b"a", b"x"]


@pytest.mark.parametrize("seed", range(20))
def test_latin1_bytes_is_convert_texts(seed: int) -> None:
    rnd = random.Random(seed)
    texts = [None if rnd.random() < 0.2 else "".join(chr(rnd.randint(0, 255)) for _ in range(rnd.randint(0, 6)))
             for _ in range(rnd.randint(0, 40))]
    arr = pa.array(texts, pa.string())
    for sliced in (arr, arr.slice(min(3, len(arr))), arr.slice(0, len(arr) // 2)):
        got = row_texts._latin1_bytes(sliced)
        assert got is not None
        want, bad = convert_texts("blob", sliced)
        assert bad == 0 and got.type == want.type and got.to_pylist() == want.to_pylist()
    assert row_texts._latin1_bytes(pa.array(["ok", "€"], pa.string())) is None  # not ISO-8859-1: convert_texts decides


def test_rows_entry_bytes_is_entry_bytes() -> None:
    header = pb.Header(logfileName="mysql-bin.000001", logfileOffset=4, schemaName="s").SerializeToString()
    for head, rows in ((b"\x08\x01\x10\x01P\x00", b""), (b"\x10\x02P\x00", b"\x62\x03abc" * 50)):
        data = _rows_entry_bytes(header, head, rows)
        assert data == _entry_bytes(header, ENTRY_ROWDATA, head + rows)
        assert pb.Entry.FromString(data).storeValue == head + rows
