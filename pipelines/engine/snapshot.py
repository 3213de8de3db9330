"""Initial load of a table: a consistent snapshot whose binlog position is known.

MariaDB gives this without locks: inside ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` the status
variables ``Binlog_snapshot_file`` / ``Binlog_snapshot_position`` name the binlog point the snapshot
sees (every transaction before it, none after). The mirror is written from the snapshot with that
position as its version; the stream then applies only changes after it (a rows event always follows
its transaction's GTID/BEGIN event, so the first change after the snapshot has a larger order key).

Rows are read with a server-side cursor and written as Parquet parts of ``part_rows`` rows, typed by
``pipelines.engine.types`` exactly as staged windows are.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql
import pymysql.cursors

from .window import ColumnSpec, Position


class SnapshotError(RuntimeError):
    """The snapshot could not be taken (no such table, binlog off, not InnoDB)."""


@dataclass(slots=True)
class SnapshotResult:
    schema: str
    table: str
    position: Position
    path: Path                      # directory of Parquet parts (table columns only)
    rows: int
    columns: list[ColumnSpec] = field(default_factory=list)
    unrepresentable: dict[str, int] = field(default_factory=dict)

    @property
    def position_key(self) -> int:
        return self.position.key


def table_columns(cur: Any, schema: str, table: str) -> list[ColumnSpec]:
    """The table's columns (pipelines.engine.reconcile.read_columns); a missing table is a SnapshotError."""
    from .reconcile import read_columns

    cols = read_columns(cur, schema, table)
    if not cols:
        raise SnapshotError(f"{schema}.{table}: no such table on the source (information_schema.COLUMNS is empty)")
    return cols


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _connect(conn_kwargs: dict[str, Any]) -> Any:
    kw = dict(conn_kwargs)
    kw.setdefault("charset", "utf8mb4")
    # TIMESTAMP values in UTC, as the entries' text is
    kw["init_command"] = "SET time_zone = '+00:00'"
    kw["cursorclass"] = pymysql.cursors.SSCursor
    return pymysql.connect(**kw)


def _begin(conn: Any, schema: str, table: str) -> Position:
    """START TRANSACTION WITH CONSISTENT SNAPSHOT on ``conn``: the binlog position it sees."""
    cur = conn.cursor(pymysql.cursors.Cursor)
    try:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
        status = {k.lower(): v for k, v in cur.fetchall()}
    finally:
        cur.close()
    file, pos = status.get("binlog_snapshot_file"), status.get("binlog_snapshot_position")
    if not file or pos is None:
        raise SnapshotError(f"{schema}.{table}: the source reports no binlog snapshot position "
                            "(binary logging off?)")
    return Position(file, int(pos))


@dataclass(slots=True)
class _Written:
    rows: int = 0
    unrepresentable: dict[str, int] = field(default_factory=dict)
    last: tuple[Any, ...] | None = None    # the last row read, as the server sent it


def _write_parts(rows_in: Any, columns: list[ColumnSpec], out_dir: Path, part_rows: int, schema: str,
                 table: str) -> _Written:
    """Rows (an executed SELECT's cursor, or a list) as Parquet parts of ``part_rows`` rows (at least one part)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from . import types as T

    arrow_schema = T.arrow_schema(columns)
    norms = [T.from_db(c.mysql_type, c.name) for c in columns]
    out = _Written()
    part = 0

    def flush(rows: list[tuple[Any, ...]]) -> None:
        nonlocal part
        cols_out = []
        for i, c in enumerate(columns):
            norm = norms[i]
            vals = []
            bad = 0
            for r in rows:
                v = r[i]
                nv = norm(v)
                if nv is None and v is not None:
                    bad += 1
                vals.append(nv)
            if bad:
                key = f"{schema}.{table}.{c.name}"
                out.unrepresentable[key] = out.unrepresentable.get(key, 0) + bad
            cols_out.append(pa.array(vals, type=arrow_schema.field(i).type))
        tbl = pa.Table.from_arrays(cols_out, schema=arrow_schema)
        path = out_dir / f"{part:05d}.parquet"
        pq.write_table(tbl, path)
        with open(path, "rb+") as fh:
            os.fsync(fh.fileno())
        part += 1

    batch: list[tuple[Any, ...]] = []
    for row in rows_in:
        batch.append(row)
        if len(batch) >= part_rows:
            flush(batch)
            out.rows += len(batch)
            out.last = batch[-1]
            batch = []
    if batch or part == 0:
        flush(batch)
        out.rows += len(batch)
        out.last = batch[-1] if batch else out.last
    return out


def _fresh_dir(out_dir: Path) -> Path:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.parquet"):
        old.unlink()
    return out_dir


def take_snapshot(conn_kwargs: dict[str, Any], schema: str, table: str, out_dir: Path, *,
                  part_rows: int = 100_000, on_position: Callable[[Position], None] | None = None) -> SnapshotResult:
    """``on_position`` is called once the snapshot and its position exist, before the rows are read (tests
    write to the table there: what they write must not be in the snapshot, and comes after the position)."""
    from . import types as T

    out_dir = _fresh_dir(out_dir)
    conn = _connect(conn_kwargs)
    try:
        cur = conn.cursor(pymysql.cursors.Cursor)
        columns = table_columns(cur, schema, table)
        cur.close()
        position = _begin(conn, schema, table)
        if on_position is not None:
            on_position(position)
        scur = conn.cursor()
        # select_expr: FLOAT read as the double it widens to (its text on the wire has 6 digits only)
        exprs = ", ".join(T.select_expr(c.name, c.mysql_type) for c in columns)
        scur.execute(f"SELECT {exprs} FROM {_quote(schema)}.{_quote(table)}")
        written = _write_parts(scur, columns, out_dir, part_rows, schema, table)
        scur.close()
        conn.rollback()
    finally:
        conn.close()
    return SnapshotResult(schema, table, position, out_dir, written.rows, columns, written.unrepresentable)
