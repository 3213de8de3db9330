"""The accumulation of one window: entries parsed into per-table parts (a new part when the column layout changes
or a DDL on the table intervenes) and changelog rows, then written as typed Parquet plus the manifest."""

from __future__ import annotations

import shutil
import time
import uuid
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import chain, compress, repeat
from operator import ne
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf.message import DecodeError

from canal_core.protocol.proto import EntryProtocol_pb2 as pb

from ..types import TypeMappingError, arrow_schema, convert_texts, parse_type
from ..window import (
    COL_OP,
    COL_POS,
    COL_ROW,
    COL_SUB,
    COL_TS,
    OP_DELETE,
    OP_INSERT,
    OP_UPDATE,
    ColumnSpec,
    DdlRecord,
    Position,
    TableChanges,
    TablePart,
    WindowManifest,
    changelog_schema,
    order_key,
)
from .errors import StagingError
from .files import CHANGELOG, MANIFEST, _fsync_dir, _replace_dir, _write_file, _write_parquet, window_path
from .messages import _DDL_TYPES, _DML, _RowChange
from .rows import _image_error, _images, _int32s, _latin1_bytes, _lists, _Rows

META_FIELDS = (
    pa.field(COL_OP, pa.string(), nullable=False),
    pa.field(COL_POS, pa.int64(), nullable=False),
    pa.field(COL_ROW, pa.int32(), nullable=False),
    pa.field(COL_SUB, pa.int8(), nullable=False),
    pa.field(COL_TS, pa.timestamp("us", tz="UTC"), nullable=False),
)


_MS_PER_DAY = 86_400_000


@dataclass(slots=True)
class _Part:
    columns: list[ColumnSpec]
    names: list[str]
    key_idx: list[int]
    name_ids: list[int]      # the column names' ids in the window's name list (for the changelog maps)
    key_ids: list[int]
    ops: list[str] = field(default_factory=list)
    pos: list[int] = field(default_factory=list)
    row: list[int] = field(default_factory=list)
    sub: list[int] = field(default_factory=list)
    ts: list[int] = field(default_factory=list)
    images: list[int] = field(default_factory=list)  # each row's image: its index in the window's text pool
    inserts: int = 0
    updates: int = 0
    deletes: int = 0

    def extend(self, op: str, pos: int, ts: int, images: Iterable[int], rows: Iterable[int], sub: int = 0) -> None:
        n = len(self.images)
        self.images.extend(images)
        n = len(self.images) - n
        self.ops.extend([op] * n)
        self.pos.extend([pos] * n)
        self.row.extend(rows)
        self.sub.extend([sub] * n)
        self.ts.extend([ts] * n)


@dataclass(slots=True)
class _Table:
    schema: str
    table: str
    parts: list[_Part] = field(default_factory=list)
    layout: list[tuple[str, str, bool]] | None = None
    ddl_since: bool = False  # a DDL on this table since its current part's last row


@dataclass(slots=True)
class _Changes:
    """The changelog rows of one rows entry (columns are built at write time)."""

    schema: str
    table: str
    op: str
    file: str
    offset: int
    pos: int
    gtid: str
    server_id: int
    ts_ms: int
    n: int
    part: _Part
    before: int  # the first row's before / after image in the text pool, -1 when the change has none
    after: int
    updated: list[list[int]] | None  # UPDATE: ids of the changed columns per row; INSERT all, DELETE none


class _Stager:
    def __init__(self, destination: str, window: int, timezone: str) -> None:
        self.destination = destination
        self.window = window
        self.timezone = timezone
        self.entries = 0
        self.bytes = 0
        self.rows = 0
        self.first: Any = None
        self.last: Any = None
        self.tables: dict[tuple[str, str], _Table] = {}
        self.changes: list[_Changes] = []
        self.ddl: list[DdlRecord] = []
        self.names: dict[str, int] = {}
        self.seq: dict[str, int] = {}
        # every row image once, as Canal's texts (UTF-8 bytes), image i being texts[starts[i]:starts[i + 1]];
        # parts and changelog refer to images by index and share one Arrow conversion of all texts
        self.texts: list[bytes | None] = []
        self.starts = array("i", [0])

    def add(self, raw: bytes) -> None:
        entry = pb.Entry.FromString(raw)
        self.entries += 1
        self.bytes += len(raw)
        h = entry.header
        if h.logfileName:
            if self.first is None:
                self.first = h
            self.last = h
        if entry.entryType != pb.ROWDATA:
            return  # transaction begin / end, heartbeats, GTID entries: counted, nothing to stage
        store = entry.storeValue
        rc = _RowChange.FromString(store)
        et = rc.eventType
        if rc.isDdl or et in _DDL_TYPES:
            self._ddl(h, rc)
        elif et in _DML:
            if not rc.rowDatas:
                if rc.sql:
                    raise StagingError(f"statement-based {pb.EventType.Name(et)} at {h.logfileName}:"
                                       f"{h.logfileOffset} on {h.schemaName}.{h.tableName}: the source's "
                                       "binlog_format must be ROW")
                return
            self._rows(h, store, rc, et)
        # QUERY (the original SQL of a rows event), XACOMMIT / XAROLLBACK: nothing to stage

    def _pos(self, h: Any) -> int:
        seq = self.seq.get(h.logfileName)
        if seq is None:
            seq = self.seq[h.logfileName] = order_key(h.logfileName, 0) >> 32
        if not 0 <= h.logfileOffset < 1 << 32:
            return order_key(h.logfileName, h.logfileOffset)  # raises with the position
        return seq << 32 | h.logfileOffset

    def _ddl(self, h: Any, rc: Any) -> None:
        schema = h.schemaName or rc.ddlSchemaName
        self.ddl.append(DdlRecord(pos=self._pos(h), schema=schema, table=h.tableName,
                                  kind=pb.EventType.Name(rc.eventType), sql=rc.sql, timestamp_ms=h.executeTime))
        t = self.tables.get((schema, h.tableName))
        if t is not None:
            t.ddl_since = True

    def _part(self, h: Any, cols: list[Any], et: int) -> _Part:
        """The part this entry's rows go to: the table's current one unless the column layout changed or a DDL
        on the table came in between. Checks the first row's image is complete."""
        key = (h.schemaName, h.tableName)
        t = self.tables.get(key)
        if t is None:
            t = self.tables[key] = _Table(h.schemaName, h.tableName)
        layout = [(c.name, c.mysqlType, c.isKey) for c in cols]
        if layout == t.layout and not t.ddl_since:
            return t.parts[-1]  # same names in the same order as a checked image: complete too
        n = len(layout)
        if [c.index for c in cols] != list(range(n)) or (
                t.layout is not None and not t.ddl_since and n < len(t.layout) and t.layout[:n] == layout):
            raise _image_error(h, et)
        specs = [ColumnSpec(name, mysql_type, is_key) for name, mysql_type, is_key in layout]
        try:
            arrow_schema(specs)
        except TypeMappingError as exc:
            raise TypeMappingError(exc.mysql_type, f"{h.schemaName}.{h.tableName}.{exc.column}") from None
        ids = [self.names.setdefault(c.name, len(self.names)) for c in specs]
        key_idx = [i for i, c in enumerate(specs) if c.is_key]
        part = _Part(specs, [c.name for c in specs], key_idx, ids, [ids[i] for i in key_idx])
        t.parts.append(part)
        t.layout = layout
        t.ddl_since = False
        return part

    def _rows(self, h: Any, store: bytes, rc: Any, et: int) -> None:
        rds = _Rows(store, rc.rowDatas)
        first = rds.first
        part = self._part(h, list(first.beforeColumns if et == pb.DELETE else first.afterColumns), et)
        n_cols = len(part.names)
        pos = self._pos(h)
        ts = h.executeTime * 1000
        n = len(rds)
        before = after = -1
        updated = None
        if et == pb.INSERT:
            after = self._add_images(_images(rds, "afterColumns", n_cols, h, et), n_cols, n)
            part.extend(OP_INSERT, pos, ts, range(after, after + n), range(n))
            part.inserts += n
        elif et == pb.DELETE:
            before = self._add_images(_images(rds, "beforeColumns", n_cols, h, et), n_cols, n)
            part.extend(OP_DELETE, pos, ts, range(before, before + n), range(n))
            part.deletes += n
        else:
            bv = _images(rds, "beforeColumns", n_cols, h, et)
            av = _images(rds, "afterColumns", n_cols, h, et)
            before = self._add_images(bv, n_cols, n)
            after = self._add_images(av, n_cols, n)
            # Canal's Column.updated: the text or NULL-ness differs from the before image
            changed = list(map(ne, bv, av))
            ids = part.name_ids
            updated = [list(compress(ids, changed[k:k + n_cols])) for k in range(0, n * n_cols, n_cols)]
            # a row moved when a key column changed (the images are row-major: column j of every row is a
            # slice with step n_cols); without a key every row does: the mirror of such a table is a multiset
            # of images, which drops one copy of the before image and adds one of the after image
            keys = [changed[j::n_cols] for j in part.key_idx]
            moved = list(map(any, zip(*keys, strict=True))) if keys else []
            if not keys:
                part.extend(OP_DELETE, pos, ts, range(before, before + n), range(n))
                part.extend(OP_INSERT, pos, ts, range(after, after + n), range(n), 1)
                part.deletes += n
                part.inserts += n
            elif not any(moved):
                part.extend(OP_UPDATE, pos, ts, range(after, after + n), range(n))
                part.updates += n
            else:
                for i, m in enumerate(moved):
                    if m:  # a new primary key: the mirror must drop the old row and add the new one
                        part.extend(OP_DELETE, pos, ts, (before + i,), (i,))
                        part.extend(OP_INSERT, pos, ts, (after + i,), (i,), 1)
                        part.deletes += 1
                        part.inserts += 1
                    else:
                        part.extend(OP_UPDATE, pos, ts, (after + i,), (i,))
                        part.updates += 1
        self.rows += n
        self.changes.append(_Changes(h.schemaName, h.tableName, _DML[et], h.logfileName, h.logfileOffset, pos,
                                     h.gtid, h.serverId, h.executeTime, n, part, before, after, updated))

    def _add_images(self, texts: list[bytes | None], n_cols: int, n: int) -> int:
        """Append n images of n_cols texts each (row-major); the first one's index."""
        first = len(self.starts) - 1
        start = self.starts[-1]
        self.texts += texts
        self.starts.extend(range(start + n_cols, start + n_cols * n + 1, n_cols) if n_cols else repeat(start, n))
        return first

    # ---- output ------------------------------------------------------------------------------------

    def write(self, root: Path | str, attempt: int, batch_ids: list[int]) -> WindowManifest:
        final = window_path(root, self.destination, self.window, attempt)
        final.parent.mkdir(parents=True, exist_ok=True)
        for stale in final.parent.glob(f".{final.name}.*"):  # left by a staging that crashed
            shutil.rmtree(stale, ignore_errors=True)
        tmp = final.parent / f".{final.name}.tmp-{uuid.uuid4().hex[:12]}"
        tmp.mkdir()
        try:
            manifest = self._write_into(tmp, attempt, batch_ids)
            _replace_dir(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return manifest

    def _write_into(self, out: Path, attempt: int, batch_ids: list[int]) -> WindowManifest:
        unrepresentable: dict[str, int] = {}
        tables: list[TableChanges] = []
        pool = self._pool_array()
        if self.tables:
            (out / "tables").mkdir()
        for t in self.tables.values():
            dirname = f"{_path_safe(t.schema)}.{_path_safe(t.table)}"
            tdir = out / "tables" / dirname
            tdir.mkdir()
            tc = TableChanges(t.schema, t.table)
            for i, part in enumerate(t.parts):
                rel = f"tables/{dirname}/{i:03d}.parquet"
                _write_parquet(self._part_table(t, part, pool, unrepresentable), out / rel)
                tc.parts.append(TablePart(file=rel, rows=len(part.ops), min_pos=min(part.pos),
                                          max_pos=max(part.pos), columns=part.columns, inserts=part.inserts,
                                          updates=part.updates, deletes=part.deletes))
            _fsync_dir(tdir)
            tables.append(tc)
        if self.tables:
            _fsync_dir(out / "tables")
        changelog = None
        if self.changes:
            _write_parquet(self._changelog(pool), out / CHANGELOG, use_dictionary=False)
            changelog = CHANGELOG
        manifest = WindowManifest(
            destination=self.destination, window=self.window, attempt=attempt, batch_ids=list(batch_ids),
            start=_position(self.first), end=_position(self.last), rows=self.rows, entries=self.entries,
            bytes=self.bytes, changelog=changelog, tables=tables, ddl=self.ddl, unrepresentable=unrepresentable,
            timezone=self.timezone, created_ms=int(time.time() * 1000))
        _write_file(out / MANIFEST, manifest.to_json().encode("utf-8"))  # last: its presence means complete
        _fsync_dir(out)
        return manifest

    def _pool_array(self) -> pa.ListArray:
        offsets = _int32s(self.starts)
        try:
            # as bytes, then one UTF-8 check of the whole buffer: half the cost of converting to string directly
            texts = pa.array(self.texts, pa.binary()).cast(pa.string())
        except pa.ArrowInvalid as exc:  # what parsing the value as a protobuf string would have refused
            raise DecodeError(f"a Canal Column.value is not UTF-8: {exc}") from None
        return pa.ListArray.from_arrays(offsets, texts)

    def _part_table(self, t: _Table, part: _Part, pool: pa.ListArray, unrepresentable: dict[str, int]) -> pa.Table:
        schema = arrow_schema(part.columns, META_FIELDS)
        arrays: list[pa.Array] = [
            pa.array(part.ops, pa.string()),
            pa.array(part.pos, pa.int64()),
            pa.array(part.row, pa.int32()),
            pa.array(part.sub, pa.int8()),
            pa.array(part.ts, pa.int64()).cast(META_FIELDS[4].type),
        ]
        # column j of image i is the pool's text starts[i] + j: one take of the flat texts per column
        first = pool.offsets.take(_int32s(part.images))
        for j, spec in enumerate(part.columns):
            try:
                texts = pool.values.take(pc.add(first, j))
                arr = _latin1_bytes(texts) if parse_type(spec.mysql_type, spec.name).kind == "binary" else None
                if arr is not None:
                    bad = 0
                else:
                    arr, bad = convert_texts(spec.mysql_type, texts, self.timezone, spec.name)
            except (ValueError, ArithmeticError, pa.ArrowException) as exc:
                raise StagingError(f"{t.schema}.{t.table}.{spec.name} ({spec.mysql_type}): a value Canal sent "
                                   f"does not convert: {exc}") from exc
            arrays.append(arr)
            if bad:
                k = f"{t.schema}.{t.table}.{spec.name}"
                unrepresentable[k] = unrepresentable.get(k, 0) + bad
        return pa.Table.from_arrays(arrays, schema=schema)

    def _changelog(self, pool: pa.ListArray) -> pa.Table:
        schema = changelog_schema()
        cs = self.changes
        counts = [c.n for c in cs]
        total = sum(counts)
        names = pa.array(list(self.names), pa.string())

        # each change's values repeated over its rows: one array of the changes, taken by row
        change_of_row = _int32s(chain.from_iterable(map(repeat, range(len(cs)), counts)))

        def per_change(values: list[Any], typ: pa.DataType) -> pa.Array:
            return pa.array(values, typ).take(change_of_row)

        # list<string> columns as offsets + ids into the window's name list (a take, not a string per value)
        key_off, key_ids = _lists((c.part.key_ids, c.n) for c in cs)
        upd_off, upd_ids = _lists(
            ((c.part.name_ids, c.n) if c.op == OP_INSERT else ([], c.n)) if c.updated is None else c.updated
            for c in cs)
        cols: dict[str, pa.Array] = {
            "destination": pa.array(repeat(self.destination, total), pa.string(), size=total),
            "schema_name": per_change([c.schema for c in cs], pa.string()),
            "table_name": per_change([c.table for c in cs], pa.string()),
            "op": per_change([c.op for c in cs], pa.string()),
            "binlog_file": per_change([c.file for c in cs], pa.string()),
            "binlog_offset": per_change([c.offset for c in cs], pa.int64()),
            "pos": per_change([c.pos for c in cs], pa.int64()),
            "row": _int32s(chain.from_iterable(map(range, counts))),
            "gtid": per_change([c.gtid for c in cs], pa.string()),
            "server_id": per_change([c.server_id for c in cs], pa.int64()),
            "execute_time": per_change([c.ts_ms * 1000 for c in cs], pa.int64()).cast(
                schema.field("execute_time").type),
            "event_date": per_change([c.ts_ms // _MS_PER_DAY for c in cs], pa.int32()).cast(pa.date32()),
            "window": pa.array(repeat(self.window, total), pa.int64(), size=total),
            "keys": pa.ListArray.from_arrays(key_off, names.take(key_ids)),
            "updated": pa.ListArray.from_arrays(upd_off, names.take(upd_ids)),
            "before": _text_maps(cs, names, pool, "before"),
            "after": _text_maps(cs, names, pool, "after"),
        }
        return pa.Table.from_arrays([cols[f.name] for f in schema], schema=schema)


def _select(pool: pa.ListArray, idx: list[Any]) -> pa.ListArray:
    """pool[idx]: a zero-copy slice when idx is a run of consecutive indexes (the common case)."""
    if idx and idx[0] is not None and idx[-1] is not None and idx[-1] - idx[0] == len(idx) - 1 \
            and idx == list(range(idx[0], idx[-1] + 1)):
        return pool.slice(idx[0], len(idx))
    return pool.take(pa.array(idx, pa.int32()))


def _path_safe(name: str) -> str:
    # quoted MySQL identifiers may hold "/" (and "%", our escape)
    return name.replace("%", "%25").replace("/", "%2F")


def _text_maps(cs: list[_Changes], names: pa.Array, pool: pa.ListArray, side: str) -> pa.Array:
    """One map<string,string> image per changelog row, NULL where the change has no such image."""
    idx: list[int | None] = []
    ids = array("i")
    for c in cs:
        first = c.before if side == "before" else c.after
        if first < 0:
            idx.extend(repeat(None, c.n))
        else:
            idx.extend(range(first, first + c.n))
            ids.extend(array("i", c.part.name_ids) * c.n)
    images = _select(pool, idx)
    offsets = images.offsets  # a slice's offsets start where it starts in the pool, flatten() at 0
    if offsets[0].as_py():
        offsets = pc.subtract(offsets, offsets[0])
    return pa.MapArray.from_arrays(offsets, names.take(_int32s(ids)), images.flatten(), mask=images.is_null())


def _position(h: Any) -> Position:
    if h is None:
        return Position(journal="", offset=0)
    return Position(journal=h.logfileName, offset=h.logfileOffset, timestamp_ms=h.executeTime, gtid=h.gtid,
                    server_id=h.serverId)


def stage_window(entries: Iterable[bytes], *, root: Path | str, destination: str, window: int, attempt: int,
                 batch_ids: list[int], timezone: str = "UTC") -> WindowManifest:
    """Write the window of serialized Canal Entries under ``window_path(root, destination, window, attempt)``
    and return its manifest (also written there, last).

    ``timezone``: the zone the entries' TIMESTAMP text is in (the Canal converter's zone; recorded in the
    manifest). Row changes go to typed per-table parts (a new part when the column layout changes or a DDL on
    the table intervenes; a primary-key-changing UPDATE, and every UPDATE of a table without a primary key,
    becomes DELETE + INSERT), every row change to the changelog, DDL to ``manifest.ddl``. ``manifest.rows``
    counts row changes (changelog rows), a part's ``rows`` its staged rows. Errors: RowImageError (not a FULL
    row image), StagingError (statement-based DML), TypeMappingError naming schema.table.column."""
    stager = _Stager(destination, window, timezone)
    for raw in entries:
        stager.add(raw)
    return stager.write(root, attempt, batch_ids)
