"""Initial load of a large table in key-range chunks: no long transaction on the source, resumable after a crash.

The whole-table snapshot (pipelines.engine.snapshot) reads every row inside one consistent transaction, which
the source then holds for as long as the read takes (minutes to hours for tens of millions of rows: undo history
kept, purge held back). Here, as in DBLog-style incremental snapshots, the table is read in chunks of
``chunk_rows`` rows in primary-key order, each chunk in a consistent transaction of its own:

    begin:   B = the binlog position now (a consistent snapshot opened and closed at once); the mirror emptied,
             marked as loading from B (pipelines.engine.lake.snapshot_chunks)
    chunk i: START TRANSACTION WITH CONSISTENT SNAPSHOT -> position P_i >= B; SELECT ... WHERE key > last ORDER BY
             key LIMIT chunk_rows; ROLLBACK. Its rows are appended with _canal_pos = P_i - 1.
    finish:  the mirror's txn version B - 1; the registry records B, so the next window run catches the mirror
             up by replaying the binlog from B.

Why that is exact: a chunk holds its key range's rows as of P_i. The catch-up replays every change from B in
binlog order through the mirror's per-row guard: a change below a row's P_i is older than what the chunk saw and
loses; a change after P_i wins; a key inserted and deleted between B and P_i comes and goes again in order. The
stream keeps flowing meanwhile (windows apply the other tables and the changelog; this mirror is pending), and no
transaction outlives one chunk.

A crash leaves the mirror marked and holding whole chunks (each is one commit): the next attempt starts after the
largest key in the mirror, never reading a finished chunk again. A reader thread reads ahead of the writer (at
most two chunks), so the source is read while Spark commits the previous chunk.

Chunks need a single-column integer primary key (their ranges are compared in the source and in the mirror, and
integer order is the same in both); other tables use the whole-table snapshot.
"""

from __future__ import annotations

import datetime as dt
import queue
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql

from .snapshot import SnapshotError, _begin, _connect, _fresh_dir, _quote, _write_parts, table_columns
from .window import ColumnSpec, Position, format_position, parse_position

_INTEGER = re.compile(r"^(tiny|small|medium|big)?int\b", re.IGNORECASE)


@dataclass(slots=True)
class ChunkRead:
    index: int
    after: Any                 # the range is (after, last]; after None: from the table's first key
    last: Any                  # the last key read; None when the chunk was empty
    position: Position
    rows: int
    path: Path
    held_seconds: float        # how long its transaction was open
    unrepresentable: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class ChunkedResult:
    begin: Position            # the catch-up starts here
    columns: list[ColumnSpec]
    resumed_after: Any         # the key this attempt started after (None: from the start)
    resumed: bool              # this attempt continued a load an earlier one began
    chunks: int = 0            # read by this attempt
    rows: int = 0
    longest_hold: float = 0.0  # seconds, the longest any chunk transaction stayed open
    unrepresentable: dict[str, int] = field(default_factory=dict)


def chunk_key(columns: list[ColumnSpec]) -> ColumnSpec | None:
    """The column chunks are ranges of, or None when the table cannot be loaded in chunks."""
    keys = [c for c in columns if c.is_key]
    return keys[0] if len(keys) == 1 and _INTEGER.match(keys[0].mysql_type) else None


def estimated_rows(conn_kwargs: dict[str, Any], schema: str, table: str) -> int:
    """InnoDB's estimate of the table's rows (information_schema.TABLES), 0 when unknown."""
    conn = pymysql.connect(**conn_kwargs)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                        (schema, table))
            row = cur.fetchone()
    finally:
        conn.close()
    return int(row[0] or 0) if row else 0


def read_chunk(conn: Any, schema: str, table: str, columns: list[ColumnSpec], key: ColumnSpec, after: Any,
               limit: int, out_dir: Path, index: int) -> ChunkRead:
    """Chunk ``index``: up to ``limit`` rows with key > ``after`` in key order, in a consistent transaction of its
    own (the rows as of its position), written as Parquet under ``out_dir``."""
    from . import types as T

    out_dir = _fresh_dir(out_dir)
    exprs = ", ".join(T.select_expr(c.name, c.mysql_type) for c in columns)
    k = _quote(key.name)
    where, args = (f" WHERE {k} > %s", (after,)) if after is not None else ("", ())
    t0 = time.monotonic()
    position = _begin(conn, schema, table)
    try:  # the transaction lasts as long as the SELECT: rows are kept in memory (one chunk) and written after
        scur = conn.cursor()
        scur.execute(f"SELECT {exprs} FROM {_quote(schema)}.{_quote(table)}{where} ORDER BY {k} LIMIT {int(limit)}",
                     args)
        rows = list(scur)
        scur.close()
    finally:
        conn.rollback()
    held = time.monotonic() - t0
    written = _write_parts(rows, columns, out_dir, max(limit, 1), schema, table)
    at = [c.name for c in columns].index(key.name)
    last = written.last[at] if written.last is not None else None
    return ChunkRead(index, after, last, position, written.rows, out_dir, held, written.unrepresentable)


def load_in_chunks(spark: Any, lake: Any, conn_kwargs: dict[str, Any], schema: str, table: str, work_dir: Path, *,
                   chunk_rows: int, on_chunk: Callable[[ChunkRead], None] | None = None) -> ChunkedResult:
    """Load mirror/<schema>/<table> in chunks (resuming a load an earlier attempt began); the caller records
    ``result.begin`` in the snapshot registry. ``on_chunk`` is called after each chunk's commit."""
    from . import lake as L
    from . import types as T

    conn = _connect(conn_kwargs)
    try:
        cur = conn.cursor(pymysql.cursors.Cursor)
        columns = table_columns(cur, schema, table)
        cur.close()
        key = chunk_key(columns)
        if key is None:
            raise SnapshotError(f"{schema}.{table}: no single-column integer primary key to load in chunks")
        progress = L.chunked_progress(spark, lake, schema, table, key.name)
        if progress is None:
            begin = _begin(conn, schema, table)   # opened and closed at once: only its position matters
            conn.rollback()
            L.begin_chunked(spark, lake, schema, table, T.arrow_schema(columns), format_position(begin))
            after: Any = None
        else:
            begin, after = parse_position(progress[0]), progress[1]
        result = ChunkedResult(begin, columns, after, progress is not None)
        taken = dt.datetime.now(dt.UTC)
        ready: queue.Queue[ChunkRead | BaseException | None] = queue.Queue(maxsize=1)
        stop = threading.Event()

        # the reader stays at most two chunks ahead: one waiting in the queue, one being read (three directories:
        # the writer's, the queued chunk's, the reader's)
        def reader() -> None:
            nonlocal after
            try:
                i = 0
                while not stop.is_set():
                    chunk = read_chunk(conn, schema, table, columns, key, after, chunk_rows,
                                       work_dir / f"chunk-{i % 3}", i)
                    while not stop.is_set():
                        try:
                            ready.put(chunk, timeout=0.5)
                            break
                        except queue.Full:
                            continue
                    if chunk.rows < chunk_rows:
                        break
                    after, i = chunk.last, i + 1
                ready.put(None)
            except BaseException as e:  # handed to the writer, which raises it
                ready.put(e)

        thread = threading.Thread(target=reader, name=f"chunks {schema}.{table}", daemon=True)
        thread.start()
        try:
            while True:
                got = ready.get()
                if got is None:
                    break
                if isinstance(got, BaseException):
                    raise got
                if got.rows:
                    L.append_chunk(spark, lake, schema, table, got.path, got.position.key, taken,
                                   f"canal:snapshot-chunk:{got.index}@{format_position(got.position)}")
                result.chunks += 1
                result.rows += got.rows
                result.longest_hold = max(result.longest_hold, got.held_seconds)
                for k, v in got.unrepresentable.items():
                    result.unrepresentable[k] = result.unrepresentable.get(k, 0) + v
                if on_chunk is not None:
                    on_chunk(got)
        finally:
            stop.set()
            while thread.is_alive():   # unblock a reader waiting to hand over its chunk
                try:
                    ready.get(timeout=0.2)
                except queue.Empty:
                    pass
            thread.join()
        L.finish_chunked(spark, lake, schema, table, begin.key)
    finally:
        conn.close()
        shutil.rmtree(work_dir, ignore_errors=True)
    return result
