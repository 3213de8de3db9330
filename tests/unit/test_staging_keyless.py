"""Staging of tables without a primary key: an UPDATE is staged as DELETE of its before image (sub 0) and INSERT
of its after image (sub 1), row by row, so that a part holds what the multiset mirror needs; the changelog keeps
one UPDATE row with both images. Entries are built here from Canal's protobuf model, the expected rows written
out by hand."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from canal_core.protocol.proto import EntryProtocol_pb2 as pb
from pipelines.engine.staging import RowImageError, stage_window, window_path

COLUMNS = [("a", "int(11)"), ("note", "varchar(8)")]


def _entry(event: int, offset: int, rows: list[tuple[tuple[int, str | None] | None, tuple[int, str | None] | None]],
           *, key: bool = False, after_columns: int | None = None) -> bytes:
    """One rows entry of canal_test.t at mysql-bin.000004:offset; rows are (before, after) images."""
    rc = pb.RowChange(tableId=1, eventType=event, isDdl=False)
    for before, after in rows:
        rd = rc.rowDatas.add()
        for image, values, limit in ((rd.beforeColumns, before, None), (rd.afterColumns, after, after_columns)):
            if values is None:
                continue
            for i, ((name, mysql_type), v) in enumerate(zip(COLUMNS, values, strict=True)):
                if limit is not None and i >= limit:
                    break
                image.add(index=i, name=name, isKey=key and i == 0, isNull=v is None,
                          value="" if v is None else str(v), mysqlType=mysql_type)
    h = pb.Header(logfileName="mysql-bin.000004", logfileOffset=offset, serverId=1, executeTime=1_700_000_000_000,
                  schemaName="canal_test", tableName="t", eventType=event)
    return pb.Entry(header=h, entryType=pb.ROWDATA, storeValue=rc.SerializeToString()).SerializeToString()


def test_update_without_primary_key_is_staged_as_delete_and_insert(tmp_path: Path) -> None:
    entries = [
        _entry(pb.INSERT, 100, [(None, (1, "x")), (None, (1, "x")), (None, (2, None))]),
        # one row event updating two rows: one of two identical rows, and a row into a copy of another
        _entry(pb.UPDATE, 200, [((1, "x"), (1, "y")), ((2, None), (1, "x"))]),
        _entry(pb.DELETE, 300, [((1, "y"), None)]),
    ]
    m = stage_window(entries, root=tmp_path, destination="d", window=1, attempt=0, batch_ids=[1])
    path = window_path(tmp_path, "d", 1, 0)
    (table,) = m.tables
    (part,) = table.parts
    assert (part.rows, part.inserts, part.updates, part.deletes) == (8, 5, 0, 3)
    staged = pq.read_table(path / part.file).to_pylist()
    got = sorted((r["_canal_pos"] & 0xFFFFFFFF, r["_canal_row"], r["_canal_sub"], r["_canal_op"], r["a"], r["note"])
                 for r in staged)
    assert got == [
        (100, 0, 0, "INSERT", 1, "x"),
        (100, 1, 0, "INSERT", 1, "x"),
        (100, 2, 0, "INSERT", 2, None),
        (200, 0, 0, "DELETE", 1, "x"),
        (200, 0, 1, "INSERT", 1, "y"),
        (200, 1, 0, "DELETE", 2, None),
        (200, 1, 1, "INSERT", 1, "x"),
        (300, 0, 0, "DELETE", 1, "y"),
    ]
    # the changelog is what a Canal client saw: one UPDATE per updated row, with both images
    cl = pq.read_table(path / m.changelog).to_pylist()
    assert [(c["binlog_offset"], c["row"], c["op"], c["before"], c["after"], c["updated"]) for c in cl] == [
        (100, 0, "INSERT", None, [("a", "1"), ("note", "x")], ["a", "note"]),
        (100, 1, "INSERT", None, [("a", "1"), ("note", "x")], ["a", "note"]),
        (100, 2, "INSERT", None, [("a", "2"), ("note", None)], ["a", "note"]),
        (200, 0, "UPDATE", [("a", "1"), ("note", "x")], [("a", "1"), ("note", "y")], ["note"]),
        (200, 1, "UPDATE", [("a", "2"), ("note", None)], [("a", "1"), ("note", "x")], ["a", "note"]),
        (300, 0, "DELETE", [("a", "1"), ("note", "y")], None, []),
    ]

    # the same UPDATE of a table whose first column is its primary key stays one UPDATE of the after image
    m = stage_window([_entry(pb.UPDATE, 200, [((1, "x"), (1, "y"))], key=True)], root=tmp_path, destination="d",
                     window=2, attempt=0, batch_ids=[2])
    staged = pq.read_table(window_path(tmp_path, "d", 2, 0) / m.tables[0].parts[0].file).to_pylist()
    assert [(r["_canal_op"], r["_canal_sub"], r["a"], r["note"]) for r in staged] == [("UPDATE", 0, 1, "y")]


def test_update_without_primary_key_and_partial_after_image_is_refused(tmp_path: Path) -> None:
    # MySQL with binlog_row_image=MINIMAL logs a full before image for a table without a key (every column
    # identifies the row) but only the changed columns after: the mirror cannot know the after image
    raw = _entry(pb.UPDATE, 200, [((1, "x"), (2, "x"))], after_columns=1)
    with pytest.raises(RowImageError, match=r"canal_test\.t at mysql-bin\.000004:200 lacks columns"):
        stage_window([raw], root=tmp_path, destination="d", window=1, attempt=0, batch_ids=[1])
