"""Schema history maintenance.

    python -m canal_core.parse.history_cli rebuild --data-dir DIR --host HOST [--port 3306] --user USER
        [--password PW | env CANAL_HISTORY_PASSWORD] --at FILE:POS [--schemas a,b] [--force]

Run it after a SchemaMismatchError / UnknownTableError (their messages print this command with the
position filled in). It replaces the history in DIR by one whose first snapshot is the server's schema
now (SHOW CREATE TABLE), labelled FILE:POS, so the parser can resume at FILE:POS. That is right only
if no DDL ran on the server after FILE:POS: the command checks by reading the binlog from FILE:POS to
its end (needs REPLICATION SLAVE for USER) and refuses, listing the statements, when there is any (on
the given schemas), unless --force. The previous history is kept under DIR/archive/<time>/.

    python -m canal_core.parse.history_cli show --data-dir DIR [--at FILE:POS] [--table schema.table]

lists snapshots and DDL records, or prints the tables as of a position.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from ..protocol.position import EntryPosition
from .ddl import parse_ddl
from .history import SchemaHistory, format_position
from .history_store import FileHistoryStore


def parse_at(text: str) -> EntryPosition:
    file, sep, pos = text.rpartition(":")
    if not sep or not file or not pos.isdigit():
        raise argparse.ArgumentTypeError(f"expected FILE:POS (e.g. mysql-bin.000003:4), got {text!r}")
    return EntryPosition(journal_name=file, position=int(pos))


def _archive(data_dir: Path) -> Path | None:
    items = [p for p in data_dir.iterdir() if p.name != "archive"] if data_dir.exists() else []
    if not items:
        return None
    dest = data_dir / "archive" / time.strftime("%Y%m%dT%H%M%S")
    n = 1
    while dest.exists():
        dest = dest.with_name(dest.name.split("-")[0] + f"-{n}")
        n += 1
    dest.mkdir(parents=True)
    for p in items:
        shutil.move(str(p), str(dest / p.name))
    return dest


def ddl_after(host: str, port: int, user: str, password: str, at: EntryPosition,
              schemas: list[str] | None) -> list[tuple[str, str]]:
    """(position, sql) of every schema-changing statement in the binlog from ``at`` to its end."""
    from ..binlog import BinlogDecoder
    from ..binlog import events as E
    from ..mysql import ReplicationConnection

    found: list[tuple[str, str]] = []
    with ReplicationConnection(host, port, user, password) as rc:
        dec = BinlogDecoder(decode_rows=False)
        for raw in rc.dump(at.journal_name, at.position, non_blocking=True):
            for ev in dec.iter_events(dec.decode(raw)):
                if not isinstance(ev, E.QueryEvent) or ev.query in ("BEGIN", "COMMIT"):
                    continue
                parsed = parse_ddl(ev.query, ev.schema)
                if not parsed.changes_schema:
                    continue
                touched = {s for s, _ in parsed.tables} | ({parsed.schema} if parsed.schema else set())
                if schemas and touched and not touched & set(schemas):
                    continue
                found.append((f"{ev.file}:{ev.position}", ev.query))
    return found


def rebuild(args: argparse.Namespace) -> int:
    import pymysql

    password = args.password if args.password is not None else os.environ.get("CANAL_HISTORY_PASSWORD")
    if password is None:
        password = getpass.getpass(f"password for {args.user}@{args.host}: ")
    schemas = [s for s in (args.schemas or "").split(",") if s] or None
    at: EntryPosition = args.at
    if not args.force:
        try:
            later = ddl_after(args.host, args.port, args.user, password, at, schemas)
        except Exception as e:  # no replication privilege, purged binlog ...
            print(f"cannot check the binlog after {format_position(at)} ({type(e).__name__}: {e}); "
                  "make sure no DDL ran since, then use --force", file=sys.stderr)
            return 2
        if later:
            print(f"DDL ran after {format_position(at)}; the server's current schema is not the schema at that "
                  "position. Statements:", file=sys.stderr)
            for pos, sql in later:
                print(f"  {pos}: {sql}", file=sys.stderr)
            print("Rebuild at a position after them (and replay from there), or use --force.", file=sys.stderr)
            return 3
    conn = pymysql.connect(host=args.host, port=args.port, user=args.user, password=password, charset="utf8mb4",
                           autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@server_id")
            row = cur.fetchone()
            assert row is not None  # a SELECT of a variable always returns one row
            server_id = int(row[0])
        position = EntryPosition(journal_name=at.journal_name, position=at.position, server_id=server_id,
                                 timestamp=int(time.time() * 1000))
        data_dir = Path(args.data_dir)
        archived = _archive(data_dir)
        hist = SchemaHistory.bootstrap_from_server(
            conn, position, schemas=schemas, store=FileHistoryStore(data_dir),
            source={"host": args.host, "port": args.port, "user": args.user})
    finally:
        conn.close()
    print(f"schema history rebuilt in {data_dir} at {format_position(position)}: "
          f"{len(hist.model.tables)} tables in {len({s for s, _ in hist.model.tables})} schemas"
          + (f"; the previous history is in {archived}" if archived else ""))
    return 0


def show(args: argparse.Namespace) -> int:
    hist = SchemaHistory(FileHistoryStore(args.data_dir))
    if args.at is None:
        out: dict[str, Any] = {"snapshots": hist.snapshot_list(), "records": hist.records()}
        print(json.dumps(out, indent=2, ensure_ascii=False))
        return 0
    hist.restore(args.at)
    tables = sorted(hist.model.tables.values(), key=lambda t: (t.schema, t.name))
    if args.table:
        tables = [t for t in tables if t.full_name == args.table]
    for t in tables:
        print(f"{t.full_name} ({t.charset}/{t.collation})")
        for c in t.columns:
            flags = ("" if c.nullable else " NOT NULL") + (" KEY" if c.is_key else "") + \
                (f" COLLATE {c.collation}" if c.collation else "")
            print(f"  {c.name} {c.column_type}{flags}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m canal_core.parse.history_cli",
                                 description="Schema history maintenance (see the module docstring).")
    sub = ap.add_subparsers(dest="command", required=True)
    rb = sub.add_parser("rebuild", help="replace the history by a snapshot of the live server at FILE:POS")
    rb.add_argument("--data-dir", required=True, help="the history's directory")
    rb.add_argument("--host", required=True)
    rb.add_argument("--port", type=int, default=3306)
    rb.add_argument("--user", required=True)
    rb.add_argument("--password", default=None, help="else $CANAL_HISTORY_PASSWORD, else asked")
    rb.add_argument("--at", required=True, type=parse_at, help="FILE:POS the snapshot is labelled with")
    rb.add_argument("--schemas", default=None, help="comma-separated schemas (default: all but system ones)")
    rb.add_argument("--force", action="store_true", help="skip the check for DDL after FILE:POS")
    rb.set_defaults(func=rebuild)
    sh = sub.add_parser("show", help="list snapshots and records, or the tables as of a position")
    sh.add_argument("--data-dir", required=True)
    sh.add_argument("--at", type=parse_at, default=None)
    sh.add_argument("--table", default=None, help="schema.table")
    sh.set_defaults(func=show)
    args = ap.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
