"""The texts of an entry's row images as UTF-8 bytes (merged parse, row by row, or column by column), checked to
be FULL images, and the Arrow building blocks the stager assembles columns from."""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from itertools import accumulate, chain, compress, repeat
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from canal_core.protocol.proto import EntryProtocol_pb2 as pb

from .errors import RowImageError
from .messages import _FullRowChange, _MergedRowChange, _MergedRowData, _RowData


def _latin1_bytes(texts: pa.StringArray) -> pa.Array | None:
    """convert_texts of a binary column (Canal's text of bytes is one ISO-8859-1 char per byte) for the whole
    column at once: one decode + encode of the texts' UTF-8 buffer, the byte lengths being the char lengths.
    None when a text is not ISO-8859-1: convert_texts raises its error then."""
    n = len(texts)
    _, off_buf, data_buf = texts.buffers()
    offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, off_buf], offset=texts.offset)
    lo, hi = offsets[0].as_py(), offsets[n].as_py()
    try:
        data = data_buf[lo:hi].to_pybytes().decode("utf-8").encode("latin-1") if hi > lo else b""
    except UnicodeEncodeError:
        return None
    lengths = pc.fill_null(pc.utf8_length(texts), 0)
    ends = pc.cumulative_sum(lengths) if n else pa.array([], pa.int32())
    new_offsets = pa.concat_arrays([pa.array([0], pa.int32()), ends.cast(pa.int32())])
    out = pa.Array.from_buffers(pa.binary(), n, [None, new_offsets.buffers()[1], pa.py_buffer(data)])
    return pc.if_else(texts.is_null(), pa.scalar(None, pa.binary()), out) if texts.null_count else out


def _image_error(h: Any, et: int) -> RowImageError:
    return RowImageError(f"{pb.EventType.Name(et)} row image of {h.schemaName}.{h.tableName} at "
                         f"{h.logfileName}:{h.logfileOffset} lacks columns (binlog_row_image MINIMAL or NOBLOB?): "
                         "the source's binlog_row_image must be FULL")


class _Rows:
    """The RowDatas of one entry (``raw``: each serialized), parsed as needed: the first row (the layout), all
    rows merged (the texts), row by row, or the whole RowChange with its columns."""

    __slots__ = ("_merged", "first", "raw", "store")

    def __init__(self, store: bytes, raw: Any) -> None:
        self.store = store
        self.raw = raw
        self.first = _RowData.FromString(raw[0])
        self._merged: Any = None

    def __len__(self) -> int:
        return len(self.raw)

    @property
    def merged(self) -> Any:
        if self._merged is None:
            self._merged = _MergedRowChange.FromString(self.store).rowDatas
        return self._merged

    def parsed(self) -> Any:
        return _FullRowChange.FromString(self.store)


def _images(rds: _Rows, side: str, n_cols: int, h: Any, et: int) -> list[bytes | None]:
    """Canal's texts (UTF-8) of one image of every row, row-major; None for SQL NULL (isNull and no text).

    Read from the merged parse of all rows (_Rows.merged) when its lists line up with the columns: each column
    carries one value and one isNull (every protobuf writer writes a field at most once) and each row the
    first row's column indexes, as written (proto3 leaves index 0 out; a row never holds a column twice), so
    that every image is complete. Otherwise row by row: a row whose columns all carry a value from its own
    merged parse, the others (NULLs, empty texts a proto3 writer leaves out, incomplete images) column by
    column."""
    f = getattr(rds.merged, side)
    n = len(rds)
    total = n_cols * n
    pattern = list(getattr(_MergedRowData.FromString(rds.raw[0]), side).index)
    lined_up = len(f.isNull) == total and list(f.index) == pattern * n  # an isNull per column, complete rows
    if lined_up and len(f.value) == total:
        return _texts(list(f.value), f.isNull)
    nulls = list(f.isNull)
    if lined_up and total - len(f.value) == nulls.count(True):
        # the columns without a value are as many as the NULLs (no empty text left out): the rows without a NULL
        # are read from their own merged parse, those with one column by column
        out: list[bytes | None] = []
        for r, raw in enumerate(rds.raw):
            if True not in nulls[r * n_cols:(r + 1) * n_cols]:
                f = getattr(_MergedRowData.FromString(raw), side)
                if len(f.isNull) == n_cols and len(f.value) == n_cols and list(f.index) == pattern:
                    out += _texts(list(f.value), f.isNull)
                    continue
            out += _column_texts(getattr(_RowData.FromString(raw), side), n_cols, h, et)
        return out
    return list(chain.from_iterable(_column_texts(getattr(rd, side), n_cols, h, et) for rd in rds.parsed().rowDatas))


def _texts(values: list[bytes | None], nulls: Any) -> list[bytes | None]:
    """Values lined up with their columns' isNull: NULL is isNull with the empty text."""
    if any(nulls):
        for i in compress(range(len(values)), nulls):
            if values[i] == b"":
                values[i] = None
    return values


def _column_texts(cols: Any, n_cols: int, h: Any, et: int) -> list[bytes | None]:
    """One row image's texts, read column by column; RowImageError when it lacks columns."""
    texts: list[bytes | None] = [c.value for c in cols]
    if len(texts) != n_cols:
        raise _image_error(h, et)
    if b"" in texts:
        for i, v in enumerate(texts):
            if v == b"" and cols[i].isNull:
                texts[i] = None
    return texts


def _int32s(values: Iterable[int] | array[int]) -> pa.Array:
    """An Arrow int32 array over a C int array's memory: no Python int per value on Arrow's side."""
    a = values if isinstance(values, array) else array("i", values)
    return pa.Array.from_buffers(pa.int32(), len(a), [None, pa.py_buffer(a)])


def _lists(items: Iterable[tuple[list[int], int] | list[list[int]]]) -> tuple[pa.Array, pa.Array]:
    """Offsets and flat values of list columns: ``(ids, n)`` is the same list n times, a list of lists one
    list per row."""
    offsets = array("i", [0])
    flat = array("i")
    for item in items:
        if isinstance(item, tuple):
            ids, n = item
            k = len(ids)
            last = offsets[-1]
            offsets.extend(range(last + k, last + k * n + 1, k) if k else repeat(last, n))
            if k:
                flat.extend(array("i", ids) * n)
        else:
            ends = accumulate(map(len, item), initial=offsets[-1])
            next(ends)
            offsets.extend(ends)
            flat.extend(chain.from_iterable(item))
    return _int32s(offsets), _int32s(flat)
