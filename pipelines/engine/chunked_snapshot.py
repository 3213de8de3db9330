"""Initial load of a large table in key-range chunks, read by parallel readers: no long transaction on the source,
resumable after a crash.

The whole-table snapshot (pipelines.engine.snapshot) reads every row inside one consistent transaction, which
the source then holds for as long as the read takes (minutes to hours for tens of millions of rows: undo history
kept, purge held back). Here, as in DBLog-style incremental snapshots, the table is read in chunks of
``chunk_rows`` rows in primary-key order, each chunk in a consistent transaction of its own:

    begin:   B = the binlog position now, and the key's MIN and MAX then (a consistent snapshot opened and closed
             at once); the key range cut into segments of equal width; the mirror emptied, marked as loading from
             B with that plan (pipelines.engine.lake.snapshot_chunks)
    chunk:   START TRANSACTION WITH CONSISTENT SNAPSHOT -> position P >= B; SELECT ... WHERE key > last AND key <=
             segment's upper bound ORDER BY key LIMIT chunk_rows (fewer for wide rows; the chunk also ends at
             chunk_bytes of rows); the table's columns checked again (the transaction's metadata lock holds DDL
             off); ROLLBACK. Its rows are appended with _canal_pos = P - 1.
    finish:  the mirror's txn version B - 1; the registry records B, so the next window run catches the mirror
             up by replaying the binlog from B.

Why that is exact: a chunk holds its key range's rows as of its P. The catch-up replays every change from B in
binlog order through the mirror's per-row guard: a change below a row's P is older than what the chunk saw and
loses; a change after P wins; a key inserted and deleted between B and P comes and goes again in order. A key
outside [MIN, MAX] at B did not exist at B: its insert comes after B and the catch-up applies it. The stream keeps
flowing meanwhile (windows apply the other tables and the changelog; this mirror is pending), and no transaction
outlives one chunk.

Readers: ``readers`` processes (one thread when 1), each with its own connection, read chunks of different
segments at once (a segment's next chunk starts after its last key, so one segment is read by one reader at a
time); the load's process commits each chunk to Delta as it arrives. At most two chunks per reader are read and
not yet committed (their Parquet parts on disk, nothing in memory); a reader process ends with the load's.

A crash leaves the mirror marked and holding whole chunks (each is one commit, a segment's in key order): the next
attempt starts each segment after its largest key in the mirror, never reading a finished chunk again. A table whose
columns changed since the load began (a DDL) is loaded again from the start: chunks of two shapes make no table.

Chunks need a single-column integer primary key (their ranges are compared in the source and in the mirror, and
integer order is the same in both); other tables use the whole-table snapshot.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import multiprocessing
import os
import re
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql

from .snapshot import SnapshotError, _begin, _connect, _fresh_dir, _quote, _write_parts, table_columns
from .window import ColumnSpec, Position, format_position, parse_position

log = logging.getLogger(__name__)

_INTEGER = re.compile(r"^(tiny|small|medium|big)?int\b", re.IGNORECASE)


@dataclass(slots=True)
class ChunkRead:
    segment: int
    index: int                 # within its segment
    after: Any                 # the range read is (after, upto]; after None: from the table's first key
    upto: Any                  # the segment's upper bound (None: no bound)
    last: Any                  # the last key read; None when the chunk was empty
    position: Position
    rows: int
    path: Path
    held_seconds: float        # how long its transaction was open
    reader: str = ""           # the process and thread that read it
    started: float = 0.0       # time.monotonic() when its transaction began (one clock for every process)
    unrepresentable: dict[str, int] = field(default_factory=dict)
    more: bool = False         # the segment goes on after this chunk (it ended at its row limit or byte bound)
    bytes: int = 0             # the rows' size as read (an estimate: what the reader held in memory)


@dataclass(frozen=True, slots=True)
class Segment:
    index: int
    after: Any                 # exclusive lower bound (None: below every key)
    upto: Any                  # inclusive upper bound (None: above every key)


@dataclass(slots=True)
class ChunkedResult:
    begin: Position            # the catch-up starts here
    columns: list[ColumnSpec]
    segments: int
    resumed: bool              # this attempt continued a load an earlier one began
    resumed_after: dict[int, Any] = field(default_factory=dict)  # segment -> the key this attempt started after
    restarted: bool = False    # an unfinished load was started again from scratch (the columns changed)
    chunks: int = 0            # read by this attempt
    rows: int = 0
    readers: set[str] = field(default_factory=set)
    longest_hold: float = 0.0  # seconds, the longest any chunk transaction stayed open
    largest_chunk_bytes: int = 0
    unrepresentable: dict[str, int] = field(default_factory=dict)


def chunk_key(columns: list[ColumnSpec]) -> ColumnSpec | None:
    """The column chunks are ranges of, or None when the table cannot be loaded in chunks."""
    keys = [c for c in columns if c.is_key]
    return keys[0] if len(keys) == 1 and _INTEGER.match(keys[0].mysql_type) else None


def plan_bounds(low: int, high: int, count: int) -> list[int]:
    """Upper bounds of ``count`` segments of equal width over the keys [low, high] (fewer when the range is
    narrower); the last is ``high``. Segment i is (bounds[i-1], bounds[i]], the first open below."""
    span = high - low + 1
    n = max(1, min(count, span))
    return sorted({low - 1 + span * i // n for i in range(1, n + 1)})


def segments_of(bounds: list[Any]) -> list[Segment]:
    return [Segment(i, bounds[i - 1] if i else None, b) for i, b in enumerate(bounds)]


def estimated_rows(conn_kwargs: dict[str, Any], schema: str, table: str) -> int:
    """InnoDB's estimate of the table's rows (information_schema.TABLES), 0 when unknown."""
    conn = pymysql.connect(**conn_kwargs)
    try:
        with conn.cursor() as cur:
            return _table_stats(cur, schema, table)[0]
    finally:
        conn.close()


def _table_stats(cur: Any, schema: str, table: str) -> tuple[int, int]:
    """InnoDB's estimates of the table's rows and average row length in bytes (0 when unknown)."""
    cur.execute("SELECT TABLE_ROWS, AVG_ROW_LENGTH FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                "AND TABLE_NAME = %s", (schema, table))
    row = cur.fetchone()
    return (int(row[0] or 0), int(row[1] or 0)) if row else (0, 0)


def _row_bytes(row: tuple[Any, ...]) -> int:
    return sum(len(v) if isinstance(v, (bytes, bytearray, str)) else 8 for v in row) + 64


def read_chunk(conn: Any, schema: str, table: str, columns: list[ColumnSpec], key: ColumnSpec, segment: Segment,
               after: Any, limit: int, out_dir: Path, index: int, max_bytes: int = 0) -> ChunkRead:
    """Chunk ``index`` of ``segment``: up to ``limit`` rows with ``after`` < key <= the segment's bound in key order,
    in a consistent transaction of its own (the rows as of its position), written as Parquet under ``out_dir``.
    The chunk also ends once its rows hold ``max_bytes`` (0: no bound): what a reader keeps in memory."""
    from . import types as T

    out_dir = _fresh_dir(out_dir)
    exprs = ", ".join(T.select_expr(c.name, c.mysql_type) for c in columns)
    k = _quote(key.name)
    conds, args = [], []
    if after is not None:
        conds.append(f"{k} > %s")
        args.append(after)
    if segment.upto is not None:
        conds.append(f"{k} <= %s")
        args.append(segment.upto)
    where = " WHERE " + " AND ".join(conds) if conds else ""
    t0 = time.monotonic()
    position = _begin(conn, schema, table)
    try:  # the transaction lasts as long as the SELECT: rows are kept in memory (one chunk) and written after
        scur = conn.cursor()
        scur.execute(f"SELECT {exprs} FROM {_quote(schema)}.{_quote(table)}{where} ORDER BY {k} LIMIT {int(limit)}",
                     args)
        rows, size, cut = [], 0, False
        for row in scur:
            rows.append(row)
            size += _row_bytes(row)
            if max_bytes and size >= max_bytes and len(rows) < limit:
                cut = True   # the rest of the result is read off the wire and dropped (the LIMIT keeps it small)
                break
        scur.close()
        # still inside the transaction, whose metadata lock holds off any DDL since the SELECT began: the columns
        # the rows have are the ones the load began with, or the load stops here (the next attempt starts again)
        ccur = conn.cursor(pymysql.cursors.Cursor)
        now = table_columns(ccur, schema, table)
        ccur.close()
        if columns_digest(now) != columns_digest(columns):
            raise SnapshotError(f"{schema}.{table}: the table's columns changed during its chunked load (a DDL); "
                                "the next attempt loads it again from the start")
    finally:
        conn.rollback()
    held = time.monotonic() - t0
    written = _write_parts(rows, columns, out_dir, max(limit, 1), schema, table)
    at = [c.name for c in columns].index(key.name)
    last = written.last[at] if written.last is not None else None
    return ChunkRead(segment.index, index, after, segment.upto, last, position, written.rows, out_dir, held,
                     f"{os.getpid()}/{threading.current_thread().name}", t0, written.unrepresentable,
                     more=cut or written.rows >= limit, bytes=size)


# a reader's connection: one per reader process (or thread), opened when the reader starts
_reader = threading.local()


def _open_reader(conn_kwargs: dict[str, Any], opened: list[Any]) -> None:
    _reader.conn = _connect(conn_kwargs)
    opened.append(_reader.conn)   # (a thread reader's connection is closed by the load; a process's with it)


def _open_reader_process(conn_kwargs: dict[str, Any], parent: int) -> None:
    threading.Thread(target=_exit_with, args=(parent,), name="exit with the load", daemon=True).start()
    _open_reader(conn_kwargs, [])


def _exit_with(parent: int) -> None:
    # a pool's processes outlive a parent that is killed (SIGKILL, OOM): each would keep its connection, and wait,
    # forever. A reader ends within half a second of its parent (mid-SELECT too: the server rolls its read back).
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def reader_pool(readers: int, conn_kwargs: dict[str, Any], opened: list[Any], name: str) -> Executor:
    """``readers`` reader processes (spawned: the load's process runs Spark's gateway threads, unsafe to fork),
    or one thread when 1; each opens its own connection. A thread's connection lands in ``opened``."""
    if readers == 1:
        return ThreadPoolExecutor(1, name, _open_reader, (conn_kwargs, opened))
    # processes: a reader decodes rows in Python, so threads would share one core
    return ProcessPoolExecutor(readers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_open_reader_process, initargs=(conn_kwargs, os.getpid()))


def _read(schema: str, table: str, columns: list[ColumnSpec], key: ColumnSpec, segment: Segment, after: Any,
          limit: int, out_dir: Path, index: int, max_bytes: int) -> ChunkRead:
    return read_chunk(_reader.conn, schema, table, columns, key, segment, after, limit, out_dir, index, max_bytes)


def _begin_load(conn: Any, spark: Any, lake: Any, schema: str, table: str, columns: list[ColumnSpec],
                key: ColumnSpec, segments: int) -> tuple[Position, list[Any]]:
    """B, the key's MIN and MAX as of B, the plan; the mirror emptied and marked."""
    from . import lake as L
    from . import types as T

    begin = _begin(conn, schema, table)   # opened and closed at once: only its position and the key range matter
    try:
        cur = conn.cursor(pymysql.cursors.Cursor)
        k = _quote(key.name)
        cur.execute(f"SELECT MIN({k}), MAX({k}) FROM {_quote(schema)}.{_quote(table)}")
        low, high = cur.fetchone()
        cur.close()
    finally:
        conn.rollback()
    bounds = [] if low is None else plan_bounds(int(low), int(high), segments)
    L.begin_chunked(spark, lake, schema, table, T.arrow_schema(columns), format_position(begin), bounds,
                    columns_digest(columns))
    return begin, bounds


def columns_digest(columns: list[ColumnSpec]) -> str:
    """What a load's chunks must agree on: the columns' names, types and key, in order."""
    text = json.dumps([[c.name, c.mysql_type, c.is_key] for c in columns])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_in_chunks(spark: Any, lake: Any, conn_kwargs: dict[str, Any], schema: str, table: str, work_dir: Path, *,
                   chunk_rows: int, readers: int = 1, chunk_bytes: int = 0,
                   on_chunk: Callable[[ChunkRead], None] | None = None) -> ChunkedResult:
    """Load mirror/<schema>/<table> in chunks (resuming a load an earlier attempt began); the caller records
    ``result.begin`` in the snapshot registry. ``on_chunk`` is called after each chunk's commit. A chunk ends at
    ``chunk_rows`` rows or ``chunk_bytes`` bytes of rows (0: no byte bound), whichever comes first."""
    from . import lake as L

    readers = max(1, readers)
    conn = _connect(conn_kwargs)
    opened: list[Any] = []
    try:
        cur = conn.cursor(pymysql.cursors.Cursor)
        columns = table_columns(cur, schema, table)
        estimate, avg_len = _table_stats(cur, schema, table)
        cur.close()
        key = chunk_key(columns)
        if key is None:
            raise SnapshotError(f"{schema}.{table}: no single-column integer primary key to load in chunks")
        progress = L.chunked_progress(spark, lake, schema, table, key.name)
        restarted = False
        if progress is not None and progress.columns not in ("", columns_digest(columns)):
            # a DDL since the load began: chunks of two shapes do not make one table; start again
            log.warning("%s.%s: the table's columns changed since its chunked load began at %s: loading it again "
                        "from the start", schema, table, progress.begin)
            progress, restarted = None, True
        # wide rows: fewer per chunk, so that a chunk cut at chunk_bytes leaves little of its SELECT unread
        limit = max(1, min(chunk_rows, 2 * chunk_bytes // avg_len)) if chunk_bytes and avg_len else chunk_rows
        if progress is None:
            # segments enough to keep every reader busy to the end (four each), none much smaller than a chunk
            wanted = min(4 * readers, max(1, estimate // max(limit, 1)))
            begin, bounds = _begin_load(conn, spark, lake, schema, table, columns, key, wanted)
            done: dict[int, Any] = {}
        else:
            begin, bounds, done = parse_position(progress.begin), progress.bounds, progress.done
        conn.close()   # the readers have their own
        segments = segments_of(bounds)
        result = ChunkedResult(begin, columns, len(segments), progress is not None,
                               {s.index: done.get(s.index, s.after) for s in segments} if progress else {},
                               restarted=restarted)
        taken = dt.datetime.now(dt.UTC)
        todo = deque((s, done.get(s.index, s.after), 0) for s in segments)
        pool = reader_pool(readers, conn_kwargs, opened, f"chunks {schema}.{table}")
        running: dict[Future[ChunkRead], Segment] = {}

        def fill() -> None:   # up to two chunks per reader read or waiting, each of another segment
            while todo and len(running) < 2 * readers:
                seg, after, i = todo.popleft()
                running[pool.submit(_read, schema, table, columns, key, seg, after, limit,
                                    work_dir / f"s{seg.index}-c{i}", i, chunk_bytes)] = seg

        try:
            fill()
            while running:
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in finished:
                    running.pop(fut)
                    got = fut.result()   # a reader's error ends the load (the next attempt resumes)
                    if got.more:   # the segment goes on after this chunk, read while it is committed
                        todo.append((segments[got.segment], got.last, got.index + 1))
                    fill()
                    if got.rows:
                        L.append_chunk(spark, lake, schema, table, got.path, got.position.key, taken,
                                       f"canal:snapshot-chunk:{got.segment}.{got.index}@{format_position(got.position)}")
                    shutil.rmtree(got.path, ignore_errors=True)
                    result.chunks += 1
                    result.rows += got.rows
                    result.readers.add(got.reader)
                    result.longest_hold = max(result.longest_hold, got.held_seconds)
                    result.largest_chunk_bytes = max(result.largest_chunk_bytes, got.bytes)
                    for k, v in got.unrepresentable.items():
                        result.unrepresentable[k] = result.unrepresentable.get(k, 0) + v
                    if on_chunk is not None:
                        on_chunk(got)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        L.finish_chunked(spark, lake, schema, table, begin.key)
    finally:
        for c in [conn, *opened]:
            if c.open:
                c.close()
        shutil.rmtree(work_dir, ignore_errors=True)
    return result
