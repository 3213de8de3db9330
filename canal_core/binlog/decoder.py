"""The sans-IO binlog decoder: one raw event (header + body [+ CRC32]) in, one Event out.

It keeps the state a binlog stream carries: the FORMAT_DESCRIPTION_EVENT (header length, post-header
lengths, checksum algorithm), the current file name (from ROTATE) and the table maps by table id.
It never touches a socket or a file; the replication connection and the file reader feed it.
"""

from __future__ import annotations

import logging
import re
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import zstandard

from . import events as E
from .constants import (
    CHECKSUM_CRC32,
    CHECKSUM_UNDEF,
    DEFAULT_MAX_EVENT_SIZE,
    EVENT_NAMES,
    LOG_EVENT_ARTIFICIAL_F,
    LOG_EVENT_BINLOG_IN_USE_F,
    ROWS_EVENTS,
    EventType,
)
from .errors import (
    BinlogError,
    ChecksumError,
    EncryptedBinlogError,
    EventTooLargeError,
    MalformedEventError,
    TableMapMissingError,
    TruncatedEventError,
    UnknownEventError,
)
from .inflate import inflate_mariadb, inflate_payload
from .packed import read_packed
from .rows import build_row_decoder
from .tablemap import ColumnHint, TableDef, apply_hints, parse_table_map_body

log = logging.getLogger(__name__)

_HEADER = struct.Struct("<IBIIIH")
_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from
_I64 = struct.Struct("<q").unpack_from

# Exceptions that mean "the bytes are not what the format says": re-raised as MalformedEventError.
_MALFORMED = (struct.error, IndexError, ValueError, UnicodeError, LookupError, zlib.error, zstandard.ZstdError,
              OverflowError, TypeError, MemoryError)

# Post-header lengths before any FORMAT_DESCRIPTION_EVENT (only ROTATE can come first, on the wire).
_DEFAULT_POST_HEADER: dict[int, int] = {EventType.ROTATE: 8}

TableFilter = Callable[[str, str], bool]
SchemaHints = Callable[[str, str], Sequence[ColumnHint] | None]


def _version_tuple(version: str) -> tuple[int, int, int]:
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else (0, 0, 0)


class BinlogDecoder:
    """Decode binlog events one at a time.

    - ``checksum``: whether events carry a CRC32 trailer before the first FORMAT_DESCRIPTION_EVENT
      tells (the replication connection knows it from @@global.binlog_checksum); None = detect.
    - ``table_filter(schema, table)``: rows of tables it rejects are not decoded (rows=None).
    - ``schema_hints(schema, table)``: column facts the binlog may lack (names, signedness, charsets,
      ENUM/SET values, MariaDB UUID/INET types), e.g. from the schema history.
    - ``skip_unknown_events``: an unknown event type becomes an UnknownEvent (counted in
      ``skipped_unknown`` and logged) instead of an UnknownEventError.
    - ``max_event_size``: the largest event, and the largest a compressed event (TRANSACTION_PAYLOAD, MariaDB's
      compressed QUERY and rows events) may inflate to; beyond it EventTooLargeError, before the memory is taken.
    """

    def __init__(self, *, file: str | None = None, checksum: bool | None = None, verify_checksum: bool = True,
                 skip_unknown_events: bool = False, decode_rows: bool = True,
                 table_filter: TableFilter | None = None, schema_hints: SchemaHints | None = None,
                 max_event_size: int = DEFAULT_MAX_EVENT_SIZE) -> None:
        if max_event_size < 19:
            raise ValueError(f"max_event_size must be at least an event header (19 bytes), got {max_event_size}")
        self.file = file
        self.max_event_size = max_event_size
        self.checksum = checksum
        self.verify_checksum = verify_checksum
        self.skip_unknown_events = skip_unknown_events
        self.decode_rows = decode_rows
        self.table_filter = table_filter
        self.schema_hints = schema_hints
        self.header_length = 19
        self.post_header: bytes = b""
        self.format: E.FormatDescriptionEvent | None = None
        self.tables: dict[int, TableDef] = {}
        self.skipped_unknown = 0
        self._tdef_cache: dict[bytes, TableDef] = {}
        self._handlers: dict[int, Callable[..., E.Event]] = self._build_handlers()

    # ---- public API ---------------------------------------------------------------------------

    def decode(self, raw: bytes, position: int | None = None) -> E.Event:
        """Decode one event. ``position``, when given, is the event's start offset in ``self.file``
        (file reading); otherwise it is derived from the header's log_pos (replication stream)."""
        if not isinstance(raw, bytes):
            raw = bytes(raw)
        return self._decode(raw, position, inner=False)

    def iter_events(self, event: E.Event) -> Iterator[E.Event]:
        """The event itself, or the events inside a TRANSACTION_PAYLOAD, in order."""
        if isinstance(event, E.TransactionPayloadEvent):
            yield from event.events
        else:
            yield event

    # ---- core ---------------------------------------------------------------------------------

    def _decode(self, raw: bytes, position: int | None, *, inner: bool) -> E.Event:
        n = len(raw)
        if n < 19:
            raise TruncatedEventError(f"event of {n} bytes is shorter than the 19-byte header",
                                      file=self.file, position=position)
        ts, tc, sid, elen, lpos, flags = _HEADER.unpack_from(raw, 0)
        if position is None and not inner and lpos >= elen and not flags & LOG_EVENT_ARTIFICIAL_F \
                and tc != EventType.HEARTBEAT:
            position = lpos - elen
        if n > self.max_event_size:
            raise EventTooLargeError(f"{EVENT_NAMES.get(tc, tc)} event of {n} bytes is larger than the maximum event "
                                     f"size of {self.max_event_size} bytes", file=self.file, position=position)
        if elen != n:
            cls = TruncatedEventError if elen > n else MalformedEventError
            raise cls(f"{EVENT_NAMES.get(tc, tc)} event header says {elen} bytes, got {n}",
                      file=self.file, position=position)
        common = {"type_code": tc, "timestamp": ts, "server_id": sid, "length": elen, "log_pos": lpos,
                  "flags": flags, "file": self.file, "position": position}
        try:
            if tc == EventType.FORMAT_DESCRIPTION:
                return self._format_description(raw, common)
            end = n
            if not inner:
                checksum = self.checksum
                if checksum is None:
                    checksum = self._looks_checksummed(raw)
                if checksum:
                    end = n - 4
                    if self.verify_checksum and zlib.crc32(raw[:end]) != _U32(raw, end)[0]:
                        raise ChecksumError(f"CRC32 mismatch in {EVENT_NAMES.get(tc, tc)} event")
            hl = self.header_length
            if end < hl:
                raise TruncatedEventError(f"event of {n} bytes is shorter than its {hl}-byte header")
            handler = self._handlers.get(tc)
            if handler is None:
                if self.skip_unknown_events:
                    self.skipped_unknown += 1
                    log.warning("skipping unknown binlog event type %d at %s:%s (%d skipped so far)",
                                tc, self.file, position, self.skipped_unknown)
                    return E.UnknownEvent(data=raw[hl:end], **common)
                raise UnknownEventError(tc)
            return handler(raw, hl, end, common)
        except BinlogError as e:
            raise e.at(self.file, position) from None
        except _MALFORMED as e:
            raise MalformedEventError(f"{EVENT_NAMES.get(tc, f'type {tc}')} event: {e}",
                                      file=self.file, position=position) from e

    @staticmethod
    def _looks_checksummed(raw: bytes) -> bool:
        return len(raw) >= 23 and zlib.crc32(raw[:-4]) == _U32(raw, len(raw) - 4)[0]

    def _post_len(self, tc: int) -> int:
        if self.format is None:
            return _DEFAULT_POST_HEADER.get(tc, 0)
        return self.post_header[tc - 1] if 0 < tc <= len(self.post_header) else 0

    def _format_description(self, raw: bytes, common: dict[str, Any]) -> E.Event:
        hl = 19  # the FDE itself always uses the v4 common header
        n = len(raw)
        binlog_version = _U16(raw, hl)[0]
        server_version = raw[hl + 2:hl + 52].split(b"\0", 1)[0].decode("ascii", "replace")
        create_ts = _U32(raw, hl + 52)[0]
        header_length = raw[hl + 56]
        if binlog_version != 4 or header_length < 19:
            raise MalformedEventError(
                f"FORMAT_DESCRIPTION_EVENT with binlog version {binlog_version} and header length "
                f"{header_length}: only binlog format v4 (MySQL >= 5.0) is supported")
        flavor = "mariadb" if "mariadb" in server_version.lower() else "mysql"
        ver = _version_tuple(server_version)
        capable = ver >= ((5, 3, 0) if flavor == "mariadb" else (5, 6, 1))
        if capable:
            alg = raw[n - 5]
            post = raw[hl + 57:n - 5]
            if alg == CHECKSUM_CRC32 and self.verify_checksum:
                stored = _U32(raw, n - 4)[0]
                if zlib.crc32(raw[:n - 4]) != stored:
                    # a binlog copied while open has LOG_EVENT_BINLOG_IN_USE_F set in its FDE, but
                    # the server computed the CRC before setting it
                    cleared = raw[:17] + struct.pack("<H", common["flags"] & ~LOG_EVENT_BINLOG_IN_USE_F) \
                        + raw[19:n - 4]
                    if zlib.crc32(cleared) != stored:
                        raise ChecksumError("CRC32 mismatch in FORMAT_DESCRIPTION event")
        else:
            alg = CHECKSUM_UNDEF
            post = raw[hl + 57:n]
        self.header_length = header_length
        self.post_header = bytes(post)
        self.checksum = alg == CHECKSUM_CRC32
        ev = E.FormatDescriptionEvent(binlog_version=binlog_version, server_version=server_version,
                                      create_timestamp=create_ts, header_length=header_length,
                                      checksum_alg=alg, flavor=flavor, post_header_lengths=bytes(post),
                                      **common)
        self.format = ev
        return ev

    # ---- handlers -----------------------------------------------------------------------------

    def _build_handlers(self) -> dict[int, Callable[..., E.Event]]:
        T = EventType
        h: dict[int, Callable[..., E.Event]] = {
            T.QUERY: self._query,
            T.QUERY_COMPRESSED: self._query,
            T.EXECUTE_LOAD_QUERY: self._query,
            T.ROTATE: self._rotate,
            T.XID: lambda raw, p, end, c: E.XidEvent(xid=_U64(raw, p)[0], **c),
            T.INTVAR: lambda raw, p, end, c: E.IntvarEvent(kind=raw[p], value=_U64(raw, p + 1)[0], **c),
            T.RAND: lambda raw, p, end, c: E.RandEvent(seed1=_U64(raw, p)[0], seed2=_U64(raw, p + 8)[0], **c),
            T.USER_VAR: self._user_var,
            T.STOP: lambda raw, p, end, c: E.StopEvent(**c),
            T.INCIDENT: self._incident,
            T.HEARTBEAT: self._heartbeat,
            T.HEARTBEAT_V2: self._heartbeat_v2,
            T.IGNORABLE: lambda raw, p, end, c: E.IgnorableEvent(data=raw[p:end], **c),
            T.ROWS_QUERY: lambda raw, p, end, c: E.RowsQueryEvent(
                query=raw[p + 1:end].decode("utf8", "replace"), **c),
            T.TABLE_MAP: self._table_map,
            T.GTID: self._gtid,
            T.ANONYMOUS_GTID: self._gtid,
            T.GTID_TAGGED: self._gtid_tagged,
            T.PREVIOUS_GTIDS: self._previous_gtids,
            T.TRANSACTION_CONTEXT: self._transaction_context,
            T.VIEW_CHANGE: self._view_change,
            T.XA_PREPARE: self._xa_prepare,
            T.TRANSACTION_PAYLOAD: self._transaction_payload,
            T.ANNOTATE_ROWS: lambda raw, p, end, c: E.AnnotateRowsEvent(
                query=raw[p:end].decode("utf8", "replace"), **c),
            T.BINLOG_CHECKPOINT: lambda raw, p, end, c: E.BinlogCheckpointEvent(
                checkpoint_file=raw[p + 4:p + 4 + _U32(raw, p)[0]].decode("utf8"), **c),
            T.MARIA_GTID: self._maria_gtid,
            T.GTID_LIST: self._gtid_list,
            T.START_ENCRYPTION: self._start_encryption,
        }
        for code in (T.LOAD, T.CREATE_FILE, T.APPEND_BLOCK, T.EXEC_LOAD, T.DELETE_FILE, T.NEW_LOAD,
                     T.BEGIN_LOAD_QUERY):
            h[code] = self._load
        for rows_code in ROWS_EVENTS:
            h[rows_code] = self._rows
        return h

    def _query(self, raw: bytes, p: int, end: int, c: dict[str, Any]) -> E.Event:
        tc = c["type_code"]
        post = self._post_len(tc) or (26 if tc == EventType.EXECUTE_LOAD_QUERY else 13)
        thread_id, exec_time = _U32(raw, p)[0], _U32(raw, p + 4)[0]
        db_len = raw[p + 8]
        error_code = _U16(raw, p + 9)[0]
        status_len = _U16(raw, p + 11)[0] if post >= 13 else 0
        file_id = _U32(raw, p + 13)[0] if tc == EventType.EXECUTE_LOAD_QUERY else None
        q = p + post
        status = _query_status(raw, q, q + status_len)
        q += status_len
        schema = raw[q:q + db_len].decode("utf8")
        q += db_len + 1
        data = raw[q:end]
        compressed = tc == EventType.QUERY_COMPRESSED
        if compressed:
            data = bytes(inflate_mariadb(data, self.max_event_size))
        # statements are logged in the client's charset; utf8 covers the overwhelming majority and
        # undecodable bytes are kept visible rather than dropped
        query = data.decode("utf8", "surrogateescape")
        if tc == EventType.EXECUTE_LOAD_QUERY:
            return E.LoadEvent(file_id=file_id, query=query, schema=schema, **c)
        return E.QueryEvent(thread_id=thread_id, exec_time=exec_time, error_code=error_code, schema=schema,
                            query=query, status=status, compressed=compressed, **c)

    def _rotate(self, raw: bytes, p: int, end: int, c: dict[str, Any]) -> E.Event:
        post = self._post_len(EventType.ROTATE) or 8
        nxt = _U64(raw, p)[0] if post >= 8 else 4
        name = raw[p + post:end].decode("utf8")
        ev = E.RotateEvent(next_file=name, next_position=nxt, **c)
        self.file = name
        return ev

    def _user_var(self, raw: bytes, p: int, end: int, c: dict[str, Any]) -> E.Event:
        nlen = _U32(raw, p)[0]
        name = raw[p + 4:p + 4 + nlen].decode("utf8")
        p += 4 + nlen
        if raw[p]:
            return E.UserVarEvent(var_name=name, is_null=True, **c)
        vtype, charset, vlen = raw[p + 1], _U32(raw, p + 2)[0], _U32(raw, p + 6)[0]
        value = raw[p + 10:p + 10 + vlen]
        if len(value) != vlen or p + 10 + vlen > end:
            raise ValueError("user variable value runs past the event")
        q = p + 10 + vlen
        unsigned = bool(raw[q] & 1) if q < end else False
        return E.UserVarEvent(var_name=name, is_null=False, value_type=vtype, charset=charset, value=value,
                              unsigned=unsigned, **c)

    def _incident(self, raw: bytes, p: int, end: int, c: dict[str, Any]) -> E.Event:
        mlen = raw[p + 2]
        return E.IncidentEvent(incident=_U16(raw, p)[0], message=raw[p + 3:p + 3 + mlen].decode("utf8", "replace"),
                               **c)

    def _heartbeat(self, raw: bytes, p: int, end: int, c: dict[str, Any]) -> E.Event:
        return E.HeartbeatEvent(log_file=raw[p:end].decode("utf8"), log_position=c["log_pos"], **c)

    def _heartbeat_v2(self, raw: bytes, p: int, end: int, c: dict[str, Any]) -> E.Event:
        fields = _tlv(raw, p, end)
        name = fields.get(1, b"").decode("utf8")
        pos = read_packed(fields[2], 0)[0] if 2 in fields else c["log_pos"]
        return E.HeartbeatEvent(log_file=name, log_position=pos, **c)

    def _load(self, raw: bytes, p: int, end: int, c: dict[str, Any]) -> E.Event:
        post = self._post_len(c["type_code"])
        file_id = _U32(raw, p)[0] if post >= 4 else None
        return E.LoadEvent(file_id=file_id, data=raw[p + post:end], **c)

    def _table_map(self, raw: bytes, p: int, end: int, c: dict[str, Any]) -> E.Event:
        if self._post_len(EventType.TABLE_MAP) == 6:
            tid, q = _U32(raw, p)[0], p + 4
        else:
            tid, q = int.from_bytes(raw[p:p + 6], "little"), p + 6
        tflags = _U16(raw, q)[0]
        key = raw[q + 2:end]
        tdef = self._tdef_cache.get(key)
        if tdef is None:
            tdef = parse_table_map_body(key, 0, self.format.flavor if self.format else "mysql")
            if self.schema_hints is not None:
                hints = self.schema_hints(tdef.schema, tdef.table)
                if hints:
                    tdef = apply_hints(tdef, hints)
            if len(self._tdef_cache) > 4096:
                self._tdef_cache.clear()
            self._tdef_cache[key] = tdef
        self.tables[tid] = tdef
        return E.TableMapEvent(table_id=tid, table_flags=tflags, table=tdef, **c)

    def invalidate_table_cache(self) -> None:
        """Forget parsed table maps (call after schema hints changed, e.g. after a DDL)."""
        self._tdef_cache.clear()

    def _rows(self, raw: bytes, p: int, end: int, c: dict[str, Any]) -> E.Event:
        tc = c["type_code"]
        kind, version, compressed = ROWS_EVENTS[tc]
        post = self._post_len(tc)
        if post == 6:
            tid, p = _U32(raw, p)[0], p + 4
        else:
            tid, p = int.from_bytes(raw[p:p + 6], "little"), p + 6
        rflags = _U16(raw, p)[0]
        p += 2
        extra = b""
        if version == 2:
            elen = _U16(raw, p)[0]
            if elen < 2:
                raise ValueError(f"rows extra data length {elen} < 2")
            extra = raw[p + 2:p + elen]
            p += elen
        ncols, p = read_packed(raw, p)
        nb = (ncols + 7) // 8
        present = raw[p:p + nb]
        p += nb
        present_after = None
        if kind == "update":
            present_after = raw[p:p + nb]
            p += nb
        if p > end:
            raise ValueError("rows event header runs past the event")
        buf = raw
        if compressed:
            buf = bytes(inflate_mariadb(memoryview(raw)[p:end], self.max_event_size))  # values slice as bytes
            p, end = 0, len(buf)
        tdef = self.tables.get(tid)
        if tdef is None:
            raise TableMapMissingError(f"{EVENT_NAMES[tc]} event for table id {tid} with no TABLE_MAP before it")
        partial = tc == EventType.PARTIAL_UPDATE_ROWS
        rows = None
        if self.decode_rows and (self.table_filter is None or self.table_filter(tdef.schema, tdef.table)):
            if ncols != len(tdef.columns):
                raise MalformedEventError(
                    f"rows event for {tdef.schema}.{tdef.table} has {ncols} columns, its table map "
                    f"{len(tdef.columns)}")
            try:
                rows = build_row_decoder(tdef, kind, present, present_after, partial)(buf, p, end)
            except _MALFORMED as e:
                raise MalformedEventError(f"{EVENT_NAMES[tc]} event for {tdef.schema}.{tdef.table}: "
                                          f"{type(e).__name__}: {e}") from e
        return E.RowsEvent(kind=kind, version=version, table_id=tid, rows_flags=rflags, table=tdef, rows=rows,
                           columns_present=present, columns_present_after=present_after, extra_data=extra,
                           compressed=compressed, partial=partial, **c)

    def _gtid(self, raw: bytes, p: int, end: int, c: dict[str, Any]) -> E.Event:
        flags = raw[p]
        sid = raw[p + 1:p + 17].hex()
        sid = f"{sid[0:8]}-{sid[8:12]}-{sid[12:16]}-{sid[16:20]}-{sid[20:32]}"
        gno = _I64(raw, p + 17)[0]
        kw: dict[str, Any] = {}
        q = p + 25
        if q < end and raw[q] == 2:  # LOGICAL_TIMESTAMP_TYPECODE
            kw["last_committed"], kw["sequence_number"] = _I64(raw, q + 1)[0], _I64(raw, q + 9)[0]
            q += 17
            if q + 7 <= end:
                ts = int.from_bytes(raw[q:q + 7], "little")
                q += 7
                if ts & (1 << 55):
                    ts &= (1 << 55) - 1
                    kw["original_commit_timestamp"] = int.from_bytes(raw[q:q + 7], "little")
                    q += 7
                else:
                    kw["original_commit_timestamp"] = ts
                kw["immediate_commit_timestamp"] = ts
                if q < end:
                    kw["transaction_length"], q = read_packed(raw, q)
                if q + 4 <= end:
                    v = _U32(raw, q)[0]
                    q += 4
                    if v & (1 << 31):
                        v &= (1 << 31) - 1
                        kw["original_server_version"] = _U32(raw, q)[0]
                        q += 4
                    else:
                        kw["original_server_version"] = v
                    kw["immediate_server_version"] = v
        return E.GtidEvent(anonymous=c["type_code"] == EventType.ANONYMOUS_GTID, commit_flag=bool(flags & 1),
                           sid=sid, gno=gno, **kw, **c)

    def _gtid_tagged(self, raw: bytes, p: int, end: int, c: dict[str, Any]) -> E.Event:
        f = _serialized_fields(raw, p, end)
        if 1 not in f or 2 not in f:
            raise ValueError("GTID_TAGGED event without uuid or gno")
        sid = f[1].hex() if isinstance(f[1], bytes) else ""
        sid = f"{sid[0:8]}-{sid[8:12]}-{sid[12:16]}-{sid[16:20]}-{sid[20:32]}"
        tag = f.get(3)
        return E.GtidEvent(anonymous=False, commit_flag=bool(f.get(0, 0) & 1), sid=sid, gno=f[2],
                           tag=tag.decode("utf8") if isinstance(tag, bytes) and tag else None,
                           last_committed=f.get(4), sequence_number=f.get(5),
                           immediate_commit_timestamp=f.get(6), original_commit_timestamp=f.get(7, f.get(6)),
                           transaction_length=f.get(8), immediate_server_version=f.get(9),
                           original_server_version=f.get(10, f.get(9)), **c)

    def _previous_gtids(self, raw: bytes, p: int, end: int, c: dict[str, Any]) -> E.Event:
        from .gtid import MySQLGtidSet

        return E.PreviousGtidsEvent(gtid_set=str(MySQLGtidSet.decode(raw[p:end])), **c)

    def _transaction_context(self, raw: bytes, p: int, end: int, c: dict[str, Any]) -> E.Event:
        ulen = raw[p]
        thread_id = _U32(raw, p + 1)[0]
        specified = bool(raw[p + 5])
        # then snapshot-version, write-set and read-set lengths (4 bytes each), then the uuid
        uuid = raw[p + 18:p + 18 + ulen].decode("ascii", "replace")
        return E.TransactionContextEvent(server_uuid=uuid, thread_id=thread_id, gtid_specified=specified,
                                         data=raw[p + 18 + ulen:end], **c)

    def _view_change(self, raw: bytes, p: int, end: int, c: dict[str, Any]) -> E.Event:
        view_id = raw[p:p + 40].split(b"\0", 1)[0].decode("ascii", "replace")
        return E.ViewChangeEvent(view_id=view_id, seq_number=_U64(raw, p + 40)[0], data=raw[p + 48:end], **c)

    def _xa_prepare(self, raw: bytes, p: int, end: int, c: dict[str, Any]) -> E.Event:
        one_phase = bool(raw[p])
        fmt, glen, blen = _U32(raw, p + 1)[0], _U32(raw, p + 5)[0], _U32(raw, p + 9)[0]
        if glen > 64 or blen > 64:
            raise ValueError(f"XA id lengths {glen}/{blen} exceed 64")
        data = raw[p + 13:p + 13 + glen + blen]
        return E.XaPrepareEvent(one_phase=one_phase, format_id=fmt, gtrid=data[:glen], bqual=data[glen:], **c)

    def _transaction_payload(self, raw: bytes, p: int, end: int, c: dict[str, Any]) -> E.Event:
        fields: dict[int, int] = {}
        while True:
            ftype, p = read_packed(raw, p)
            if ftype == 0:  # header end mark
                break
            flen, p = read_packed(raw, p)
            fields[ftype] = read_packed(raw[p:p + flen], 0)[0]
            p += flen
            if p > end:
                raise ValueError("payload header runs past the event")
        size = fields.get(1, end - p)
        ctype = fields.get(2, 0)
        usize = fields.get(3, 0)
        data = memoryview(raw)[p:end]
        if len(data) != size:
            raise ValueError(f"payload is {len(data)} bytes, its header says {size}")
        inner: bytes | bytearray | memoryview
        if ctype == 0:
            inner = inflate_payload(data, usize, self.max_event_size)
        elif ctype == 255:
            inner = data
        else:
            raise ValueError(f"unknown transaction payload compression type {ctype}")
        if usize and len(inner) != usize:
            raise ValueError(f"payload uncompressed to {len(inner)} bytes, header says {usize}")
        evs: list[E.Event] = []
        q = 0
        while q < len(inner):
            if q + 19 > len(inner):
                raise ValueError("truncated event inside transaction payload")
            elen = _U32(inner, q + 9)[0]
            if elen < 19 or q + elen > len(inner):
                raise ValueError(f"inner event length {elen} out of range")
            evs.append(self._decode(bytes(inner[q:q + elen]), c["position"], inner=True))
            q += elen
        return E.TransactionPayloadEvent(compression_type=ctype, payload_size=size, uncompressed_size=usize,
                                         events=evs, **c)

    def _maria_gtid(self, raw: bytes, p: int, end: int, c: dict[str, Any]) -> E.Event:
        seq, domain, gflags = _U64(raw, p)[0], _U32(raw, p + 8)[0], raw[p + 12]
        kw: dict[str, Any] = {}
        q = p + 13
        if gflags & 2:  # FL_GROUP_COMMIT_ID
            kw["commit_id"] = _U64(raw, q)[0]
        elif gflags & (64 | 128):  # FL_PREPARED_XA | FL_COMPLETED_XA
            kw["xid_format_id"] = _U32(raw, q)[0]
            glen, blen = raw[q + 4], raw[q + 5]
            kw["xid_gtrid"] = raw[q + 6:q + 6 + glen]
            kw["xid_bqual"] = raw[q + 6 + glen:q + 6 + glen + blen]
        return E.MariaGtidEvent(seq_no=seq, domain_id=domain, gtid_flags=gflags, **kw, **c)

    def _gtid_list(self, raw: bytes, p: int, end: int, c: dict[str, Any]) -> E.Event:
        v = _U32(raw, p)[0]
        count, lflags = v & 0x0FFFFFFF, v >> 28
        if p + 4 + count * 16 > end:
            raise ValueError(f"GTID_LIST of {count} entries runs past the event")
        gtids = [(_U32(raw, q)[0], _U32(raw, q + 4)[0], _U64(raw, q + 8)[0])
                 for q in range(p + 4, p + 4 + count * 16, 16)]
        return E.GtidListEvent(gtids=gtids, list_flags=lflags, **c)

    def _start_encryption(self, raw: bytes, p: int, end: int, c: dict[str, Any]) -> E.Event:
        raise EncryptedBinlogError("START_ENCRYPTION event: the rest of this binlog file is encrypted")


# ---- helpers ----------------------------------------------------------------------------------

_STATUS_FIXED = {0: ("flags2", 4), 1: ("sql_mode", 8), 3: ("auto_increment", 4), 4: ("charset", 6),
                 7: ("lc_time_names", 2), 8: ("charset_database", 2), 9: ("table_map_for_update", 8),
                 10: ("master_data_written", 4), 13: ("microseconds", 3), 16: ("explicit_defaults_ts", 1),
                 17: ("ddl_xid", 8), 18: ("default_collation_utf8mb4", 2), 19: ("sql_require_pk", 1),
                 20: ("default_table_encryption", 1), 128: ("hrnow", 3), 129: ("xid", 8),
                 130: ("gtid_flags3", 1)}


def _query_status(raw: bytes, p: int, end: int) -> dict[str, Any]:
    """Parse QUERY status variables. An unknown code stops parsing (its size is unknowable) and the
    rest is kept raw; the statement itself is located by the block length, so nothing is lost."""
    out: dict[str, Any] = {}
    while p < end:
        code = raw[p]
        p += 1
        fixed = _STATUS_FIXED.get(code)
        if fixed is not None:
            name, size = fixed
            if p + size > end:
                raise ValueError(f"query status variable {code} runs past the status block")
            if code == 3:
                out[name] = (_U16(raw, p)[0], _U16(raw, p + 2)[0])
            elif code == 4:
                out[name] = (_U16(raw, p)[0], _U16(raw, p + 2)[0], _U16(raw, p + 4)[0])
            else:
                out[name] = int.from_bytes(raw[p:p + size], "little")
            p += size
        elif code == 2:  # Q_CATALOG_CODE: length, string, NUL
            n = raw[p]
            out["catalog"] = raw[p + 1:p + 1 + n].decode("utf8", "replace")
            p += n + 2
        elif code in (5, 6):  # time zone, catalog (no NUL)
            n = raw[p]
            out["time_zone" if code == 5 else "catalog"] = raw[p + 1:p + 1 + n].decode("utf8", "replace")
            p += 1 + n
        elif code == 11:  # invoker user, host
            n = raw[p]
            user = raw[p + 1:p + 1 + n].decode("utf8", "replace")
            p += 1 + n
            n = raw[p]
            out["invoker"] = (user, raw[p + 1:p + 1 + n].decode("utf8", "replace"))
            p += 1 + n
        elif code == 12:  # updated db names
            count = raw[p]
            p += 1
            names = []
            if count != 254:  # OVER_MAX_DBS_IN_EVENT_MTS: no names follow
                for _ in range(count):
                    z = raw.index(b"\0", p, end)
                    names.append(raw[p:z].decode("utf8", "replace"))
                    p = z + 1
            out["updated_db_names"] = names
        else:
            out["unparsed"] = raw[p - 1:end].hex()
            break
    if "hrnow" in out:
        out["microseconds"] = out["hrnow"]
    return out


def _tlv(raw: bytes, p: int, end: int) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    while p < end:
        ftype, p = read_packed(raw, p)
        if ftype == 0:
            break
        flen, p = read_packed(raw, p)
        out[ftype] = raw[p:p + flen]
        p += flen
    return out


def _varlen(raw: bytes, p: int, end: int) -> tuple[int, int]:
    """MySQL serialization-library unsigned variable-length integer: the count of trailing one bits
    of the first byte is the count of extra bytes (8 means a full 64-bit value follows)."""
    if p >= end:
        raise ValueError("variable-length integer runs past the event")
    first = raw[p]
    extra = 0
    while extra < 8 and first & (1 << extra):
        extra += 1
    if p + 1 + extra > end:
        raise ValueError("variable-length integer runs past the event")
    if extra == 8:
        return int.from_bytes(raw[p + 1:p + 9], "little"), p + 9
    return int.from_bytes(raw[p:p + 1 + extra], "little") >> (extra + 1), p + 1 + extra


def _zigzag(v: int) -> int:
    return -(v >> 1) - 1 if v & 1 else v >> 1


# GTID_TAGGED field ids (MySQL's Gtid_event serialization): value kinds
_TAGGED_SIGNED = {2, 4, 5}  # gno, last_committed, sequence_number
_TAGGED_KNOWN = set(range(12))


def _serialized_fields(raw: bytes, p: int, end: int) -> dict[int, Any]:
    """Fields of a GTID_TAGGED event (MySQL 8.4 serialization library, format version 2): version
    byte, message size (counting from the version byte), last non-ignorable field id, then
    (field id, value) pairs. Field 1 (uuid) is 16 variable-length bytes, field 3 (tag) a
    length-prefixed string, the others variable-length integers."""
    start = p
    version = raw[p]
    if version != 2:
        raise ValueError(f"GTID_TAGGED serialization version {version} is not supported")
    size, q = _varlen(raw, p + 1, end)
    last_required, q = _varlen(raw, q, end)
    stop = start + size
    if size < q - start or stop > end:
        raise ValueError(f"GTID_TAGGED message size {size} does not fit the event")
    out: dict[int, Any] = {}
    while q < stop:
        fid, q = _varlen(raw, q, stop)
        if fid == 1:
            uuid = bytearray()
            for _ in range(16):
                b, q = _varlen(raw, q, stop)
                if b > 255:
                    raise ValueError("GTID_TAGGED uuid byte out of range")
                uuid.append(b)
            out[1] = bytes(uuid)
        elif fid == 3:
            n, q = _varlen(raw, q, stop)
            if q + n > stop:
                raise ValueError("GTID_TAGGED tag runs past the message")
            out[3] = raw[q:q + n]
            q += n
        elif fid in _TAGGED_KNOWN:
            v, q = _varlen(raw, q, stop)
            out[fid] = _zigzag(v) if fid in _TAGGED_SIGNED else v
        elif fid <= last_required:
            raise ValueError(f"GTID_TAGGED has unknown required field {fid}")
        else:
            break  # an unknown optional field: its size is unknowable, and what follows is optional
    return out
