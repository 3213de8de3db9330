"""canal-binlog: decode MySQL/MariaDB binlogs into JSON lines, one object per event.

Sources: binlog files, a directory of them (read in index order, ``--follow`` to tail), or a live
server over the replication protocol (``--host``/``--url``). Errors end the run with exit status 1
(2 for usage errors) and exactly one line on stderr, ``canal-binlog: error: ...``, that says what to do.
"""

from __future__ import annotations

import argparse
import base64
import datetime as _dt
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, BinaryIO

from ..binlog import events as E
from ..binlog.constants import DEFAULT_MAX_EVENT_SIZE, EventType
from ..binlog.decoder import BinlogDecoder
from ..binlog.errors import BinlogError
from ..binlog.events import _jsonable
from ..binlog.gtid import GtidError, MariaGtidPosition, MySQLGtidSet
from ..binlog.reader import LocalBinlogReader, read_file
from ..binlog.rows import ABSENT
from ..binlog.tablemap import ColumnHint, TableDef
from .server_login import ASK, PASSWORD_ENV, LoginError, resolve_login

PROG = "canal-binlog"
ERROR_PREFIX = f"{PROG}: error: "
DEBUG_ENV = "CANAL_BINLOG_DEBUG"

_HEARTBEATS = frozenset({EventType.HEARTBEAT, EventType.HEARTBEAT_V2})
_MARIA_GTID_RE = re.compile(r"\s*\d+-\d+-\d+\s*(,\s*\d+-\d+-\d+\s*)*,?\s*")
_PLAIN = frozenset({int, str, type(None), bool})
_TX_QUERIES = frozenset({"BEGIN", "COMMIT", "ROLLBACK", "XA START", "XA END"})

DESCRIPTION = """\
Decode MySQL/MariaDB binlog events into JSON lines on stdout, one object per event: type (code), name,
file, position (start offset), log_pos (end offset as the server wrote it), timestamp, server_id, then
the decoded content. Rows events carry "schema", "table" and "rows": a list of {"column": value}
objects (update rows: {"before": {...}, "after": {...}}); columns without a known name are "@1", "@2"...
and columns absent from a row image are left out. Bytes print as "base64:...", DECIMAL as a string,
temporal values as MySQL text. Events inside a TRANSACTION_PAYLOAD follow it, one line each, with
"inner": true and the payload's position.

sources:
  canal-binlog FILE [FILE...]          local binlog files, in the order given (.gz is read too)
  canal-binlog DIR                     every binlog of a directory, in index order (--follow to tail)
  canal-binlog --host H [--port P] --user U      (password: $CANAL_BINLOG_PASSWORD, or --password to be asked)
  canal-binlog --url mysql://user@host:port
  canal-binlog --defaults-file FILE              ([client] host=, port=, user=, password=)
                                       a live server, as a replica: non-blocking read from the start
                                       position to the current end (--stop-never to keep tailing)"""

EPILOG = f"""\
live start position: --gtid, else --start-file (with --start-position), else the server's current end (SHOW
MASTER STATUS), as Canal does. The password comes from --password, the URL, --defaults-file, or
${PASSWORD_ENV}; the first two are visible to every user in the process list (ps), so prefer the others.
The replication user needs SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.*.

exit status: 0 on success (also when the reader of stdout goes away, e.g. `| head`), 1 on runtime errors,
2 on usage errors; errors print one line on stderr starting with "{ERROR_PREFIX}"."""


class UsageError(Exception):
    """Wrong or conflicting arguments: exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def _port(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 < v < 65536:
        raise argparse.ArgumentTypeError(f"port {v} is out of range 1..65535")
    return v


def _nonneg_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {v}")
    return v


_SIZE_RE = re.compile(r"(\d+)\s*([kmg]?)i?b?", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def _size(text: str) -> int:
    m = _SIZE_RE.fullmatch(text.strip())
    if m is None:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (bytes, or with K, M or G: 64M, 1G)")
    v = int(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    if not 1024 <= v < 1 << 32:
        raise argparse.ArgumentTypeError(f"{text} is outside 1K..4G (an event length is 32 bits)")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description=DESCRIPTION, epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="*", metavar="FILE|DIR", help="binlog files, or one directory of binlogs")
    live = p.add_argument_group("live server")
    live.add_argument("--url", metavar="URL", help="mysql://user@host:port (mariadb:// too); --host/--port/--user "
                      "override its parts (a password in it is visible in the process list: warned about)")
    live.add_argument("--host", help="server host")
    live.add_argument("--port", type=_port, help="server port (default 3306)")
    live.add_argument("--user", help="replication user (default canal)")
    live.add_argument("--password", nargs="?", const=ASK, metavar="PW",
                      help="without a value: ask for it on the terminal; with one: visible in the process list "
                           f"(warned about). Default: --defaults-file, else ${PASSWORD_ENV}")
    live.add_argument("--defaults-file", metavar="FILE",
                      help="a MySQL option file: host, port, user, password from its [client] and [canal-binlog] "
                           "groups (the flags above override them)")
    live.add_argument("--server-id", type=_nonneg_int, default=0,
                      help="replica server id to register (default: derived per process)")
    live.add_argument("--gtid", metavar="GTIDS",
                      help="start after these GTIDs: a MySQL GTID set (uuid:1-100,...) or a MariaDB "
                           "domain-server-seq list (0-1-100,1-2-7)")
    live.add_argument("--stop-never", action="store_true",
                      help="keep tailing the live binlog instead of stopping at its current end")
    pos = p.add_argument_group("position")
    pos.add_argument("--start-file", metavar="NAME",
                     help="binlog file to start from (live server, or a name inside DIR)")
    pos.add_argument("--start-position", type=_nonneg_int, metavar="POS",
                     help="offset in the start file (default 4); for FILE arguments, in the first file")
    pos.add_argument("--follow", action="store_true",
                     help="local: keep reading as the server appends and rotates (like tail -f)")
    dec = p.add_argument_group("decoding")
    dec.add_argument("--tables", metavar="REGEX",
                     help="only tables whose schema.table matches (full match, case-insensitive; commas "
                          "separate alternatives, as in Canal's filter.regex): TABLE_MAP and rows events "
                          "of other tables are neither decoded nor printed")
    dec.add_argument("--skip-unknown-events", action="store_true",
                     help="print events of unknown types with their raw body (base64) instead of failing")
    dec.add_argument("--no-verify-checksum", action="store_true", help="do not verify CRC32 checksums")
    dec.add_argument("--max-event-size", type=_size, default=DEFAULT_MAX_EVENT_SIZE, metavar="SIZE",
                     help="the largest event, or compressed event once inflated, to accept (default 64M, MySQL 8's "
                          "max_allowed_packet); a larger one is an error naming its file:position, before any "
                          "memory is taken for it")
    dec.add_argument("--schema-hints", action="store_true",
                     help="fetch column facts (names, signedness, charsets, ENUM/SET values, MariaDB "
                          "UUID/INET6/INET4) from the server's information_schema (the tables as they "
                          "are now); with FILE/DIR needs --host/--url for the server to ask")
    out = p.add_argument_group("output")
    out.add_argument("--limit", type=_positive_int, metavar="N", help="stop after printing N events")
    out.add_argument("--brief", action="store_true",
                     help="shorter lines for reading: name, file, position and the content only")
    return p


# ---- options -------------------------------------------------------------------------------------


class Options:
    """Validated arguments."""

    def __init__(self, ns: argparse.Namespace) -> None:
        self.ns = ns
        self.paths = [Path(x) for x in ns.paths]
        self.host: str | None = None
        self.port = 3306
        self.user = "canal"
        self.password = ""
        self.warnings: list[str] = []
        self._connection_settings(ns)
        self.live = not self.paths
        self.table_filter = _table_filter(ns.tables) if ns.tables else None
        self.gtid: str | None = None
        self._check(ns)

    def _connection_settings(self, ns: argparse.Namespace) -> None:
        try:
            login = resolve_login(url=ns.url, host=ns.host, port=ns.port, user=ns.user, password=ns.password,
                                  defaults_file=ns.defaults_file, use_file_host=not ns.paths or ns.schema_hints)
        except LoginError as e:
            raise UsageError(str(e)) from None
        self.host, self.port, self.user, self.password = login.host, login.port, login.user, login.password
        self.warnings = login.warnings

    def _check(self, ns: argparse.Namespace) -> None:
        server_given = self.host is not None
        if self.live:
            if not server_given:
                raise UsageError("nothing to read: give binlog FILEs or a DIR, or a live server with --host "
                                 "or --url")
            if ns.follow:
                raise UsageError("--follow is for FILE/DIR; use --stop-never to keep tailing a live server")
            if ns.gtid is not None:
                if ns.start_file or ns.start_position is not None:
                    raise UsageError("--gtid replaces --start-file/--start-position: give one or the other")
                self.gtid = _check_gtid(ns.gtid)
            elif ns.start_position is not None and not ns.start_file:
                raise UsageError("--start-position needs --start-file on a live server")
            return
        for flag, value in (("--gtid", ns.gtid), ("--stop-never", ns.stop_never),
                            ("--server-id", ns.server_id)):
            if value:
                raise UsageError(f"{flag} is for a live server (--host/--url), not for FILE/DIR")
        if server_given and not ns.schema_hints:
            raise UsageError("give either FILE/DIR or a live server (--host/--url), not both (with FILE/DIR "
                             "a server is only used by --schema-hints)")
        if ns.schema_hints and not server_given:
            raise UsageError("--schema-hints with FILE/DIR needs a server to ask: add --host or --url")
        dirs = [p for p in self.paths if p.is_dir()]
        if dirs and len(self.paths) > 1:
            raise UsageError(f"give one directory ({dirs[0]}) or binlog files, not both or several directories")
        if ns.start_file and not dirs:
            raise UsageError("--start-file names a file inside DIR (or on a live server); with FILE arguments "
                             "just start the list at that file")
        if ns.follow and len(self.paths) > 1:
            raise UsageError("--follow tails one FILE or DIR")


def _check_gtid(text: str) -> str:
    text = text.strip()
    if not text:
        raise UsageError("--gtid is empty: give a MySQL GTID set or a MariaDB domain-server-seq list")
    try:
        if _MARIA_GTID_RE.fullmatch(text):
            MariaGtidPosition(text)
        else:
            MySQLGtidSet(text)
    except GtidError as e:
        raise UsageError(f"--gtid {text!r}: {e}") from None
    return text


def _table_filter(spec: str) -> Callable[[str, str], bool]:
    alternatives = [a.strip() for a in spec.split(",") if a.strip()]
    if not alternatives:
        raise UsageError("--tables is empty: give a regular expression over schema.table")
    try:
        rx = re.compile("|".join(f"(?:{a})" for a in alternatives), re.IGNORECASE)
    except re.error as e:
        raise UsageError(f"--tables {spec!r} is not a valid regular expression: {e}") from None
    seen: dict[tuple[str, str], bool] = {}

    def accept(schema: str, table: str) -> bool:
        key = (schema, table)
        ok = seen.get(key)
        if ok is None:
            ok = seen[key] = rx.fullmatch(f"{schema}.{table}") is not None
        return ok

    return accept


# ---- schema hints --------------------------------------------------------------------------------


class SchemaHints:
    """Column hints from information_schema over one lazily opened connection, cached per table."""

    def __init__(self, opts: Options, table_filter: Callable[[str, str], bool] | None) -> None:
        self.opts = opts
        self.table_filter = table_filter
        self._conn: Any = None
        self._cache: dict[tuple[str, str], list[ColumnHint] | None] = {}

    def __call__(self, schema: str, table: str) -> Sequence[ColumnHint] | None:
        if self.table_filter is not None and not self.table_filter(schema, table):
            return None
        key = (schema, table)
        if key not in self._cache:
            self._cache[key] = self._fetch(schema, table) or None
        return self._cache[key]

    def _fetch(self, schema: str, table: str) -> list[ColumnHint]:
        import pymysql

        from canal_core.mysql.errors import ReplicationAuthError, ReplicationError, ServerUnreachableError
        from canal_core.mysql.schema import column_hints

        o = self.opts
        where = f"{o.host}:{o.port}"
        if self._conn is None:
            try:
                self._conn = pymysql.connect(host=o.host, port=o.port, user=o.user, password=o.password,
                                             charset="utf8mb4", autocommit=True, connect_timeout=10)
            except pymysql.err.OperationalError as e:
                code = e.args[0] if e.args else None
                if code in (1045, 1698):
                    raise ReplicationAuthError(f"{where} refused login for user {o.user!r} ({e.args[-1]})",
                                               code=code) from e
                raise ServerUnreachableError(f"cannot connect to {where} for --schema-hints ({e.args[-1]}): "
                                             f"check host, port and that the server is running") from e
        try:
            return column_hints(self._conn, schema, table)
        except pymysql.err.MySQLError as e:
            raise ReplicationError(f"--schema-hints: reading information_schema.COLUMNS for {schema}.{table} "
                                   f"on {where} failed ({e}); drop --schema-hints or grant SELECT") from e

    def invalidate(self) -> None:
        self._cache.clear()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass


# ---- rendering -----------------------------------------------------------------------------------


def _float(v: float) -> Any:
    return v if math.isfinite(v) else str(v)


def _b64(v: bytes) -> str:
    return "base64:" + base64.b64encode(v).decode()


# Fast paths for the common column value types; the same text as Event.to_dict() (events._jsonable).
_CONVERT: dict[type, Callable[[Any], Any]] = {
    Decimal: str,
    _dt.datetime: lambda v: v.isoformat(sep=" "),
    _dt.date: _dt.date.isoformat,
    _dt.timedelta: E.format_timedelta,
    bytes: _b64,
    float: _float,
}


def _value(v: Any) -> Any:
    """A column value as JSON: natively for int/str/None/bool, else the to_dict() text convention."""
    t = type(v)
    if t in _PLAIN:
        return v
    return _CONVERT.get(t, _jsonable)(v)


def _default(v: Any) -> Any:
    # json calls this only for what it cannot encode itself (Decimal, datetime, bytes, ...)
    return _CONVERT.get(type(v), _jsonable)(v)


def _names(tdef: TableDef) -> tuple[str, ...]:
    return tuple(c.name if c.name is not None else f"@{c.index + 1}" for c in tdef.columns)


def _row(names: tuple[str, ...], row: Sequence[Any]) -> dict[str, Any]:
    # values stay Python objects here; the encoder converts them through _default
    if ABSENT in row:
        return {n: v for n, v in zip(names, row, strict=False) if v is not ABSENT}
    return dict(zip(names, row, strict=False))


def render(ev: E.Event, *, brief: bool = False, inner: bool = False) -> dict[str, Any]:
    """The JSON object printed for one event: Event.to_dict() with rows as {column: value} objects."""
    if isinstance(ev, E.RowsEvent):
        d = _rows_dict(ev)
    else:
        d = ev.to_dict()
        if isinstance(ev, E.MariaGtidEvent | E.GtidEvent):
            d["gtid"] = ev.gtid
        elif isinstance(ev, E.GtidListEvent):
            d["gtid_position"] = ev.gtid_position
        elif isinstance(ev, E.TransactionPayloadEvent):
            d["events"] = len(ev.events)  # each follows as its own line
    if inner:
        d["inner"] = True
    return _brief(ev, d) if brief else d


def _rows_dict(ev: E.RowsEvent) -> dict[str, Any]:
    d: dict[str, Any] = {"type": ev.type_code, "name": ev.name, "file": ev.file, "position": ev.position,
                         "log_pos": ev.log_pos, "timestamp": ev.timestamp, "server_id": ev.server_id,
                         "kind": ev.kind, "version": ev.version, "table_id": ev.table_id,
                         "rows_flags": ev.rows_flags}
    tdef = ev.table
    d["schema"] = tdef.schema if tdef is not None else None
    d["table"] = tdef.table if tdef is not None else None
    if ev.rows is None or tdef is None:
        d["rows"] = None
    else:
        names = _names(tdef)
        if ev.kind == "update":
            d["rows"] = [{"before": _row(names, b), "after": _row(names, a)} for b, a in ev.rows]
        else:
            d["rows"] = [_row(names, r) for r in ev.rows]
    if ev.extra_data:
        d["extra_data"] = _jsonable(ev.extra_data)
    if ev.compressed:
        d["compressed"] = True
    if ev.partial:
        d["partial"] = True
    return d


_BRIEF_DROP = frozenset({
    "type", "log_pos", "timestamp", "server_id", "status", "thread_id", "exec_time", "post_header_lengths",
    "header_length", "binlog_version", "create_timestamp", "table_id", "table_flags", "rows_flags", "version",
    "list_flags", "gtid_flags", "gtids", "seq_no", "domain_id", "sid", "gno", "compressed",
})


def _brief(ev: E.Event, d: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in d.items() if k not in _BRIEF_DROP and v is not None}
    if isinstance(ev, E.TableMapEvent):
        out["table"] = f"{ev.table.schema}.{ev.table.table}"
        out["columns"] = list(_names(ev.table))
    elif isinstance(ev, E.QueryEvent) and ev.error_code:
        out["error_code"] = ev.error_code
    elif isinstance(ev, E.QueryEvent):
        out.pop("error_code", None)
    return out


def _finite(v: Any) -> Any:
    if isinstance(v, float):
        return _float(v)
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_finite(x) for x in v]
    return v


def _lines(events: Iterable[E.Event], decoder: BinlogDecoder, hints: SchemaHints | None,
           table_filter: Callable[[str, str], bool] | None, brief: bool) -> Iterator[dict[str, Any]]:
    for ev in events:
        tc = ev.type_code
        if tc in _HEARTBEATS:
            continue  # the server's keep-alives, not binlog content
        if table_filter is not None and isinstance(ev, E.TableMapEvent | E.RowsEvent) \
                and ev.table is not None and not table_filter(ev.table.schema, ev.table.table):
            continue
        if hints is not None and isinstance(ev, E.QueryEvent) and ev.query.strip().upper() not in _TX_QUERIES:
            # a DDL may have changed a table: ask information_schema again for later table maps
            hints.invalidate()
            decoder.invalidate_table_cache()
        yield render(ev, brief=brief)
        if isinstance(ev, E.TransactionPayloadEvent):
            for inner in ev.events:
                if table_filter is not None and isinstance(inner, E.TableMapEvent | E.RowsEvent) \
                        and inner.table is not None and not table_filter(inner.table.schema, inner.table.table):
                    continue
                yield render(inner, brief=brief, inner=True)


class _Writer:
    """JSON lines to a binary stream; flushes every line when tailing, else lets the buffer work."""

    def __init__(self, stream: BinaryIO, *, flush_each: bool) -> None:
        self.stream = stream
        self.flush_each = flush_each

    _encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=_default).encode
    _encode_ascii = json.JSONEncoder(allow_nan=False, default=_default).encode

    def write(self, obj: dict[str, Any]) -> None:
        try:
            data = self._encode(obj).encode("utf-8")
        except UnicodeEncodeError:
            # undecodable statement bytes (kept as surrogates): \u escapes keep the line valid JSON
            data = self._encode_ascii(obj).encode("ascii")
        except ValueError:
            # NaN/Infinity are not JSON: print them as strings
            data = json.dumps(_finite(obj), ensure_ascii=False, default=_default).encode("utf-8", "backslashreplace")
        self.stream.write(data + b"\n")
        if self.flush_each:
            self.stream.flush()


# ---- sources -------------------------------------------------------------------------------------


def _decoder(opts: Options, hints: SchemaHints | None, checksum: bool | None = None) -> BinlogDecoder:
    ns = opts.ns
    return BinlogDecoder(checksum=checksum, verify_checksum=not ns.no_verify_checksum,
                         skip_unknown_events=ns.skip_unknown_events, table_filter=opts.table_filter,
                         schema_hints=hints, max_event_size=ns.max_event_size)


def _local_events(opts: Options, decoder: BinlogDecoder) -> Iterator[E.Event]:
    ns = opts.ns
    first = opts.paths[0]
    if first.is_dir():
        reader = LocalBinlogReader(first, start_file=ns.start_file, start_position=ns.start_position or 4,
                                   follow=ns.follow, decoder=decoder)
        yield from reader
        return
    if ns.follow:
        if not first.is_file():
            raise FileNotFoundError(2, "No such file or directory", str(first))
        yield from LocalBinlogReader(first.parent or Path("."), start_file=first.name,
                                     start_position=ns.start_position or 4, follow=True, decoder=decoder)
        return
    for i, path in enumerate(opts.paths):
        start = (ns.start_position or 4) if i == 0 else 4
        yield from read_file(path, decoder, start_position=start)


def _run_local(opts: Options, writer: _Writer) -> None:
    hints = SchemaHints(opts, opts.table_filter) if opts.ns.schema_hints else None
    decoder = _decoder(opts, hints)
    try:
        _emit(_lines(_local_events(opts, decoder), decoder, hints, opts.table_filter, opts.ns.brief),
              writer, opts.ns.limit)
    finally:
        if hints is not None:
            hints.close()


def _run_live(opts: Options, writer: _Writer) -> None:
    from canal_core.mysql import BinlogNotEnabledError, ReplicationConnection

    ns = opts.ns
    assert opts.host is not None
    conn = ReplicationConnection(opts.host, opts.port, opts.user, opts.password, server_id=ns.server_id,
                                 destination=f"{PROG}/{os.getpid()}", max_event_size=ns.max_event_size)
    hints: SchemaHints | None = None
    stream: Iterator[bytes] | None = None
    try:
        conn.connect()
        info = conn.server_info()
        if not info.log_bin:
            raise BinlogNotEnabledError(conn.server_address)
        gtid = opts.gtid
        if gtid is not None:
            maria_text = _MARIA_GTID_RE.fullmatch(gtid) is not None
            if info.is_mariadb and not maria_text:
                raise UsageError(f"--gtid {gtid!r} is a MySQL GTID set but {conn.server_address} is MariaDB: "
                                 f"give a domain-server-seq list such as {info.gtid_binlog_pos or '0-1-100'}")
            if not info.is_mariadb and maria_text:
                raise UsageError(f"--gtid {gtid!r} is a MariaDB GTID list but {conn.server_address} is MySQL: "
                                 f"give a GTID set such as uuid:1-100")
            file, position = "", 4
        elif ns.start_file:
            file, position = ns.start_file, ns.start_position if ns.start_position is not None else 4
        else:
            file, position, _ = conn.master_status()
        if ns.schema_hints:
            hints = SchemaHints(opts, opts.table_filter)
        raw_events = conn.dump(file, position, gtid=gtid, non_blocking=not ns.stop_never)
        stream = raw_events
        decoder = _decoder(opts, hints, checksum=conn.checksum_len == 4)
        decoded = (decoder.decode(raw) for raw in raw_events)
        _emit(_lines(decoded, decoder, hints, opts.table_filter, ns.brief), writer, ns.limit)
    finally:
        if stream is not None and hasattr(stream, "close"):
            stream.close()
        conn.close()
        if hints is not None:
            hints.close()


def _emit(lines: Iterator[dict[str, Any]], writer: _Writer, limit: int | None) -> None:
    n = 0
    for obj in lines:
        writer.write(obj)
        n += 1
        if limit is not None and n >= limit:
            break
    writer.stream.flush()


# ---- entry point ---------------------------------------------------------------------------------


def _fail(message: str, status: int) -> int:
    line = " ".join(str(message).split())
    try:
        sys.stderr.write(f"{ERROR_PREFIX}{line}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    return status


def _quiet_stdout() -> None:
    """After EPIPE: point stdout at /dev/null so the interpreter's final flush cannot fail too."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _auth_hint(opts: Options) -> str:
    return (f"; check --user and the password (--defaults-file, ${PASSWORD_ENV}, --password) for "
            f"{opts.user}@{opts.host}:{opts.port}")


def main(argv: Sequence[str] | None = None) -> int:
    from canal_core.mysql.errors import ReplicationAuthError, ReplicationError, ServerUnreachableError

    opts: Options | None = None
    try:
        ns = build_parser().parse_args(argv)
        opts = Options(ns)
        for warning in opts.warnings:
            sys.stderr.write(f"{PROG}: warning: {warning}\n")
        writer = _Writer(sys.stdout.buffer, flush_each=bool(ns.stop_never or ns.follow))
        if opts.live:
            _run_live(opts, writer)
        else:
            _run_local(opts, writer)
        return 0
    except UsageError as e:
        return _fail(f"{e} (see {PROG} --help)", 2)
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except KeyboardInterrupt:
        return 130
    except ReplicationAuthError as e:
        hint = _auth_hint(opts) if opts is not None else ""
        return _fail(f"{e.message}{hint}", 1)
    except ServerUnreachableError as e:
        hint = " (--host/--port or --url)" if opts is not None and opts.live else ""
        return _fail(f"{e.message}{hint}", 1)
    except ReplicationError as e:
        return _fail(e.message, 1)
    except BinlogError as e:
        return _fail(str(e), 1)
    except OSError as e:
        name = e.filename if e.filename is not None else ""
        reason = e.strerror or str(e)
        return _fail(f"cannot read {name}: {reason}" if name else f"I/O error: {reason}", 1)
    except Exception as e:
        if os.environ.get(DEBUG_ENV):
            raise
        return _fail(f"unexpected {type(e).__name__}: {e} (a bug: rerun with {DEBUG_ENV}=1 for the traceback "
                     f"and report it)", 1)


if __name__ == "__main__":
    sys.exit(main())
