"""The replication connection: PyMySQL for auth and queries, our own packet loop for the binlog stream."""

from __future__ import annotations

import logging
import re
import socket
import struct
import warnings
import zlib
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast

import pymysql
import pymysql.err

from canal_core.binlog.constants import DEFAULT_MAX_EVENT_SIZE
from canal_core.binlog.gtid import MariaGtidPosition, MySQLGtidSet
from canal_core.mysql import protocol as proto
from canal_core.mysql.errors import (
    CONNECTION_GONE_CODES,
    CR_AUTH_PLUGIN_CANNOT_LOAD,
    ER_ACCESS_DENIED,
    ER_ACCESS_DENIED_NO_PASSWORD,
    ER_DBACCESS_DENIED,
    ER_MASTER_FATAL_READING_BINLOG,
    ER_NO_BINARY_LOGGING,
    ER_NOT_SUPPORTED_AUTH_MODE,
    ER_SPECIFIC_ACCESS_DENIED,
    ER_TABLEACCESS_DENIED,
    BinlogFormatError,
    BinlogNotEnabledError,
    BinlogPositionError,
    ConnectionLostError,
    MissingPrivilegeError,
    PacketTooLargeError,
    ReplicationAuthError,
    ReplicationError,
    ReplicationTLSError,
    ServerUnreachableError,
)

log = logging.getLogger(__name__)

# 1 MB read buffer: one recv() serves thousands of small events.
READ_BUFFER = 1 << 20
_HEAD = struct.Struct("<HBBB")  # packet length (low 16, high 8 bits), sequence id, first payload byte
_U32 = struct.Struct("<I")
_AUTH_CODES = frozenset({ER_ACCESS_DENIED, ER_ACCESS_DENIED_NO_PASSWORD, ER_NOT_SUPPORTED_AUTH_MODE,
                         CR_AUTH_PLUGIN_CANNOT_LOAD})
_PRIV_CODES = frozenset({ER_SPECIFIC_ACCESS_DENIED, ER_ACCESS_DENIED, ER_TABLEACCESS_DENIED,
                         ER_DBACCESS_DENIED})
# 1236 messages that mean the requested start is no longer (or never was) on the server.
_PURGED_RE = re.compile(r"purged|could not find|not in the master's binlog|first log file", re.I)

_SHOW_VARS = ("version", "version_comment", "server_id", "server_uuid", "log_bin", "binlog_format",
              "binlog_row_image", "binlog_checksum", "gtid_mode", "gtid_current_pos", "gtid_binlog_pos",
              "rpl_semi_sync_master_enabled", "rpl_semi_sync_source_enabled")


@dataclass(frozen=True)
class ServerInfo:
    flavor: Literal["mysql", "mariadb"]
    version: tuple[int, int, int]
    version_string: str
    server_id: int
    server_uuid: str | None        # MySQL only
    log_bin: bool
    binlog_format: str | None
    binlog_row_image: str | None   # None before MySQL 5.6 / MariaDB 10.1
    binlog_checksum: str | None    # "CRC32" | "NONE"; None before MySQL 5.6.1 / MariaDB 5.3
    gtid_mode: str | None          # MySQL: OFF .. ON
    gtid_current_pos: str | None   # MariaDB
    gtid_binlog_pos: str | None    # MariaDB
    semi_sync_master: bool

    @property
    def is_mariadb(self) -> bool:
        return self.flavor == "mariadb"


def _parse_version(text: str) -> tuple[int, int, int]:
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", text)
    if not m:
        return (0, 0, 0)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3)))


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes | bytearray) else str(v)


class _PyMySQLInternals(Protocol):
    """The members of PyMySQL's Connection below its public API that the replica protocol uses (raw commands,
    the socket a dump reads); PyMySQL's stubs leave them out."""

    _sock: socket.socket
    _current_timeout: float | None

    def _execute_command(self, command: int, sql: bytes | str) -> None: ...

    def _force_close(self) -> None: ...


def _internals(conn: pymysql.connections.Connection) -> _PyMySQLInternals:
    return cast(_PyMySQLInternals, conn)


class ReplicationConnection:
    """One connection to a MySQL/MariaDB primary, acting as a replica.

    ``dump()`` takes the connection over: when its iterator ends (EOF, error or ``close()``) the
    connection is closed, and ``connect()`` opens a new one.

    server_id: replica id registered with COM_REGISTER_SLAVE; 0 derives a stable one from local host,
        source address, user and ``destination`` (replicas with equal ids kill each other's dump).
    read_timeout: socket timeout (s) for queries and the dump stream; None = no limit for queries and,
        for the stream, max(30, 4 * heartbeat_period) when heartbeats are on, else no limit.
    heartbeat_period: seconds between server heartbeats on an idle stream (0 = none).
    net_read_timeout / net_write_timeout: the server session's timeouts (s) while dumping.
    semi_sync: ACK transactions to a semi-sync primary; "auto" = when the server has it enabled.
    strict_row_image: check_ready() fails (True) or only warns (False) when binlog_row_image != FULL.
    max_event_size: the largest event accepted from the stream (bytes); a larger one raises PacketTooLargeError
        before it is buffered (events of 16 MB or more come in several packets, joined here).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 3306, user: str = "canal", password: str = "",
                 *, server_id: int = 0, ssl: dict[str, Any] | None = None, connect_timeout: float = 10.0,
                 read_timeout: float | None = None, write_timeout: float | None = None,
                 heartbeat_period: float = 15.0, net_read_timeout: int = 7200,
                 net_write_timeout: int = 7200, charset: str = "utf8mb4",
                 semi_sync: bool | Literal["auto"] = "auto", strict_row_image: bool = True,
                 destination: str = "", max_event_size: int = DEFAULT_MAX_EVENT_SIZE) -> None:
        self.host = host
        self.port = port
        self.user = user
        self.password = password
        self.ssl = ssl
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.write_timeout = write_timeout
        self.heartbeat_period = heartbeat_period
        self.net_read_timeout = net_read_timeout
        self.net_write_timeout = net_write_timeout
        self.charset = charset
        self.semi_sync = semi_sync
        self.strict_row_image = strict_row_image
        self.destination = destination
        self.max_event_size = max_event_size
        self._server_id = server_id
        self._conn: pymysql.connections.Connection | None = None
        self._info: ServerInfo | None = None
        self._account: str | None = None
        self.checksum_len = 4
        self._file = ""
        self._pos = 4
        self.semi_sync_active = False
        self._dumping = False

    # --- lifecycle ----------------------------------------------------------------------------------
    @property
    def server_address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def position(self) -> tuple[str, int]:
        """(file, position) just past the last complete event received (where to resume)."""
        return (self._file, self._pos)

    @property
    def server_id(self) -> int:
        """The replica server id registered with the primary (derived when constructed with 0)."""
        if not self._server_id:
            # Stable across restarts for the same host/source/destination, distinct between them.
            key = f"{socket.gethostname()}|{self.host}:{self.port}|{self.user}|{self.destination}"
            self._server_id = (zlib.crc32(key.encode()) & 0x7FFFFFFF) or 1
        return self._server_id

    @property
    def thread_id(self) -> int | None:
        """Server-side connection id (PROCESSLIST Id)."""
        return self._conn.thread_id() if self._conn is not None else None

    def connect(self) -> ReplicationConnection:
        self.close()
        try:
            self._conn = pymysql.connect(
                host=self.host, port=self.port, user=self.user, password=self.password,
                # no ssl settings = plaintext, as Canal's sslMode=DISABLED default: PyMySQL would otherwise
                # negotiate unverified TLS whenever the server offers it
                ssl=self.ssl, ssl_disabled=self.ssl is None,
                connect_timeout=self.connect_timeout, read_timeout=self.read_timeout,
                write_timeout=self.write_timeout, charset=self.charset, autocommit=True,
                max_allowed_packet=1 << 30)
        except pymysql.err.MySQLError as e:
            code, msg = self._err_args(e)
            if self.ssl and ("SSL" in msg or "TLS" in msg or "certificate" in msg):
                raise ReplicationTLSError(
                    f"TLS handshake with {self.server_address} failed ({msg}): check that ssl['ca'] is the CA "
                    f"that signed the server certificate and that the host name matches it", code=code) from e
            if code in _AUTH_CODES:
                raise ReplicationAuthError(
                    f"{self.server_address} refused login for user {self.user!r} ({msg}): check the "
                    f"password and the account's host part, or ALTER USER to a supported auth plugin",
                    code=code) from e
            raise ServerUnreachableError(
                f"cannot connect to {self.server_address} ({msg}): check host, port and that the "
                f"server is running", code=code) from e
        except RuntimeError as e:
            # PyMySQL raises RuntimeError when an auth plugin's crypto library is missing.
            raise ReplicationAuthError(
                f"cannot authenticate {self.user!r} at {self.server_address}: {e}; install "
                f"PyMySQL[rsa,ed25519] or use TLS") from e
        except OSError as e:
            raise ServerUnreachableError(
                f"cannot connect to {self.server_address} ({e}): check host, port and that the server "
                f"is running") from e
        return self

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and self._dumping:
            # another thread may sit in recv() on this socket: close() alone does not wake it, shutdown does
            sock = getattr(conn, "_sock", None)
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        if conn is not None:
            try:
                conn.close()
            except Exception:
                # close() sends COM_QUIT; a dead or mid-dump socket just gets dropped.
                _internals(conn)._force_close()

    def __enter__(self) -> ReplicationConnection:
        if self._conn is None:
            self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- queries ------------------------------------------------------------------------------------
    @staticmethod
    def _err_args(e: BaseException) -> tuple[int | None, str]:
        args = e.args
        if len(args) >= 2 and isinstance(args[0], int):
            return args[0], str(args[1])
        return None, str(e)

    def _require(self) -> pymysql.connections.Connection:
        if self._conn is None:
            raise ReplicationError(f"not connected to {self.server_address}: call connect() first")
        return self._conn

    def _query(self, sql: str) -> list[tuple[Any, ...]]:
        conn = self._require()
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return list(cur.fetchall())
        except pymysql.err.MySQLError as e:
            code, msg = self._err_args(e)
            if code in CONNECTION_GONE_CODES or not conn.open:
                self.close()
                raise ServerUnreachableError(
                    f"lost the connection to {self.server_address} during {sql!r} ({msg})", code=code) from e
            raise ReplicationError(f"{sql!r} failed on {self.server_address}: [{code}] {msg}",
                                   code=code) from e

    def account(self) -> str:
        """The account the server matched, quoted for GRANT ('user'@'host')."""
        if self._account is None:
            try:
                cur = _text(self._query("SELECT CURRENT_USER()")[0][0])
                user, _, host = cur.rpartition("@")
                self._account = f"'{user}'@'{host}'" if user else f"'{cur}'@'%'"
            except ReplicationError:
                self._account = f"'{self.user}'@'%'"
        return self._account

    def server_info(self, *, refresh: bool = False) -> ServerInfo:
        if self._info is not None and not refresh:
            return self._info
        names = ",".join(f"'{n}'" for n in _SHOW_VARS)
        rows = self._query(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")
        v = {_text(k).lower(): _text(val) for k, val in rows}
        version_string = v.get("version", "")
        mariadb = "mariadb" in (version_string + " " + v.get("version_comment", "")).lower()
        semi = (v.get("rpl_semi_sync_master_enabled") or v.get("rpl_semi_sync_source_enabled") or "OFF")
        self._info = ServerInfo(
            flavor="mariadb" if mariadb else "mysql",
            version=_parse_version(version_string),
            version_string=version_string,
            server_id=int(v.get("server_id") or 0),
            server_uuid=v.get("server_uuid") or None,
            log_bin=v.get("log_bin", "OFF").upper() in ("ON", "1"),
            binlog_format=(v.get("binlog_format") or None),
            binlog_row_image=(v.get("binlog_row_image") or None),
            binlog_checksum=(v.get("binlog_checksum") or None),
            gtid_mode=None if mariadb else (v.get("gtid_mode") or None),
            gtid_current_pos=v.get("gtid_current_pos") if mariadb else None,
            gtid_binlog_pos=v.get("gtid_binlog_pos") if mariadb else None,
            semi_sync_master=semi.upper() in ("ON", "1"),
        )
        return self._info

    def _privileged(self, sql: str, privilege: str) -> list[tuple[Any, ...]]:
        try:
            return self._query(sql)
        except ReplicationError as e:
            if e.code in _PRIV_CODES:
                raise MissingPrivilegeError(self.account(), privilege, e.message, code=e.code) from e
            if e.code == ER_NO_BINARY_LOGGING:
                raise BinlogNotEnabledError(self.server_address) from e
            raise

    def master_status(self) -> tuple[str, int, str]:
        """(file, position, executed GTID set / MariaDB gtid_binlog_pos) of the binlog's end."""
        info = self.server_info()
        if info.flavor == "mysql" and info.version >= (8, 4, 0):
            sql = "SHOW BINARY LOG STATUS"  # SHOW MASTER STATUS was removed in 8.4
        else:
            sql = "SHOW MASTER STATUS"
        rows = self._privileged(sql, "REPLICATION CLIENT")
        if not rows:
            raise BinlogNotEnabledError(self.server_address, f"{sql} returned no row")
        row = rows[0]
        file, pos = _text(row[0]), int(row[1])
        if info.is_mariadb:
            gtid = _text(self._query("SELECT @@global.gtid_binlog_pos")[0][0] or "")
        else:
            gtid = _text(row[4] or "") if len(row) > 4 else ""
            gtid = gtid.replace("\n", "")
        return file, pos, gtid

    def binary_logs(self) -> list[tuple[str, int]]:
        rows = self._privileged("SHOW BINARY LOGS", "REPLICATION CLIENT")
        return [(_text(r[0]), int(r[1])) for r in rows]

    def check_ready(self) -> ServerInfo:
        """Raise a typed error unless this account can replicate a ROW binlog from this server."""
        info = self.server_info(refresh=True)
        where = self.server_address
        if not info.log_bin:
            raise BinlogNotEnabledError(where)
        if (info.binlog_format or "").upper() != "ROW":
            raise BinlogFormatError(where, "binlog_format", info.binlog_format or "?", "ROW")
        if info.binlog_row_image is not None and info.binlog_row_image.upper() != "FULL":
            err = BinlogFormatError(where, "binlog_row_image", info.binlog_row_image, "FULL")
            if self.strict_row_image:
                raise err
            warnings.warn(err.message, stacklevel=2)
        # Each probe needs exactly one of the three privileges Canal needs.
        self._privileged("SELECT 1 FROM mysql.db LIMIT 0", "SELECT")
        self.master_status()  # REPLICATION CLIENT
        self._register_slave()  # REPLICATION SLAVE
        return info

    # --- dump ---------------------------------------------------------------------------------------
    def _command(self, payload: bytes, privilege: str) -> None:
        """Send a command and read its OK, mapping errors."""
        conn = self._require()
        try:
            _internals(conn)._execute_command(payload[0], payload[1:])
            conn._read_packet()
        except pymysql.err.MySQLError as e:
            code, msg = self._err_args(e)
            if code in _PRIV_CODES:
                raise MissingPrivilegeError(self.account(), privilege, msg, code=code) from e
            if code in CONNECTION_GONE_CODES or not conn.open:
                self.close()
                raise ServerUnreachableError(f"lost the connection to {self.server_address} ({msg})",
                                             code=code) from e
            raise ReplicationError(f"command 0x{payload[0]:02x} failed on {self.server_address}: "
                                   f"[{code}] {msg}", code=code) from e

    def _register_slave(self) -> None:
        conn = self._require()
        host = socket.gethostname().encode()[:60]
        local_port = 0
        try:
            local_port = _internals(conn)._sock.getsockname()[1]
        except (OSError, IndexError, TypeError, AttributeError):
            pass
        self._command(proto.register_slave(self.server_id, host, port=local_port), "REPLICATION SLAVE")

    def _set(self, sql: str) -> None:
        # Like Canal: a session setting an old or other-flavor server does not know is not fatal.
        try:
            self._query(sql)
        except ServerUnreachableError:
            raise
        except ReplicationError as e:
            log.warning("%s: %s", self.server_address, e)

    def _prepare_session(self) -> None:
        self._set("set wait_timeout=9999999")
        self._set(f"set net_write_timeout={int(self.net_write_timeout)}")
        self._set(f"set net_read_timeout={int(self.net_read_timeout)}")
        self._set("set names 'binary'")
        self._set("set @master_binlog_checksum= @@global.binlog_checksum")
        self._set("set @slave_uuid=uuid()")
        self._set("SET @mariadb_slave_capability='4'")
        if self.heartbeat_period > 0:
            self._set(f"SET @master_heartbeat_period={int(self.heartbeat_period * 1_000_000_000)}")
        rows = self._query("select @@global.binlog_checksum")
        alg = _text(rows[0][0]).upper() if rows and rows[0][0] is not None else "NONE"
        self.checksum_len = 0 if alg == "NONE" else 4

    def dump(self, file: str, position: int, *, gtid: str | None = None,
             non_blocking: bool = False) -> Generator[bytes, None, None]:
        """Start streaming the binlog; yields each event's bytes (header + body + checksum).

        The session is prepared and the dump command sent before this returns, so privilege errors
        raise here; position errors (1236) arrive with the first read.
        """
        info = self.server_info()
        self._prepare_session()
        want_semi = info.semi_sync_master if self.semi_sync == "auto" else bool(self.semi_sync)
        self.semi_sync_active = False
        if want_semi:
            # MariaDB and MySQL < 8.0.26 read the first name, MySQL's semisync_source plugin the second.
            self._set("SET @rpl_semi_sync_slave=1")
            self._set("SET @rpl_semi_sync_replica=1")
        if gtid and info.is_mariadb:
            state = str(MariaGtidPosition(gtid))
            self._query(f"SET @slave_connect_state='{state}'")
            self._query("SET @slave_gtid_strict_mode=1")
            self._query("SET @slave_gtid_ignore_duplicates=0")
        self._register_slave()
        flags = proto.BINLOG_DUMP_NON_BLOCK if non_blocking else 0
        if gtid and not info.is_mariadb:
            data = MySQLGtidSet(gtid).encode()
            payload = proto.binlog_dump_gtid("", 4, flags | proto.BINLOG_THROUGH_GTID, self.server_id, data)
            self._file, self._pos = file or "", 4
        else:
            if info.is_mariadb:
                flags |= proto.BINLOG_SEND_ANNOTATE_ROWS_EVENT
            if gtid:
                # MariaDB starts from @slave_connect_state; file and position are ignored.
                file, position = "", 4
            payload = proto.binlog_dump(file, position, flags, self.server_id)
            self._file, self._pos = file, position
        conn = self._require()
        try:
            _internals(conn)._execute_command(payload[0], payload[1:])
        except pymysql.err.MySQLError as e:
            self.close()
            raise ConnectionLostError(self._file, self._pos, f"sending the dump command: {e}") from e
        return self._stream(conn, want_semi, file, position, gtid)

    def _lost(self, reason: str, code: int | None = None) -> ConnectionLostError:
        return ConnectionLostError(self._file, self._pos, reason, code=code)

    def _server_error(self, payload: bytes, file: str, position: int, gtid: str | None) -> ReplicationError:
        code, msg = proto.parse_err_payload(payload)
        if code == ER_MASTER_FATAL_READING_BINLOG:
            oldest = self._oldest_binlog() if _PURGED_RE.search(msg) else None
            return BinlogPositionError(msg, file, position, gtid=gtid, oldest_file=oldest)
        if code in _PRIV_CODES:
            return MissingPrivilegeError(self.account(), "REPLICATION SLAVE", msg, code=code)
        if code in CONNECTION_GONE_CODES:
            return self._lost(f"server error {code}: {msg}", code)
        return ReplicationError(f"binlog dump from {self.server_address} failed: [{code}] {msg}", code=code)

    def _oldest_binlog(self) -> str | None:
        """First file of SHOW BINARY LOGS, asked on a second connection (this one is mid-dump)."""
        probe = ReplicationConnection(self.host, self.port, self.user, self.password, ssl=self.ssl,
                                      connect_timeout=self.connect_timeout, read_timeout=30.0,
                                      charset=self.charset)
        try:
            with probe.connect():
                logs = probe.binary_logs()
            return logs[0][0] if logs else None
        except ReplicationError as e:
            log.warning("cannot list binary logs on %s: %s", self.server_address, e)
            return None

    def _stream(self, conn: pymysql.connections.Connection, want_semi: bool, req_file: str,
                req_pos: int, gtid: str | None) -> Generator[bytes, None, None]:
        sock = _internals(conn)._sock
        self._dumping = True
        timeout = self.read_timeout
        if timeout is None and self.heartbeat_period > 0:
            # Heartbeats arrive every period on an idle server; several missing means a dead link.
            timeout = max(30.0, 4 * self.heartbeat_period)
        sock.settimeout(timeout)
        _internals(conn)._current_timeout = timeout
        reader = sock.makefile("rb", buffering=READ_BUFFER)
        read = reader.read
        unpack_head = _HEAD.unpack
        unpack_u32 = _U32.unpack_from
        checksum_len = self.checksum_len
        semi = want_semi
        first = True
        max_len = proto.MAX_PACKET_LEN
        try:
            while True:
                head = read(5)
                if len(head) < 5:
                    raise self._lost("server closed the connection")
                lo, hi, seq, status = unpack_head(head)
                length = lo | (hi << 16)
                if status == 0:
                    need = length - 1
                    if need > self.max_event_size + 2:  # + the semi-sync prefix
                        raise self._too_large(need)
                    if length == max_len:
                        event = self._read_continued(read, need, seq)
                    else:
                        event = read(need)
                        if len(event) < need:
                            raise self._lost("server closed the connection mid-event")
                    ack = False
                    if semi:
                        if first:
                            # Decide from the first (fake ROTATE, timestamp 0) event whether the server
                            # really prefixes the 2 semi-sync bytes: its first byte is 0 otherwise.
                            semi = event[0] == proto.SEMI_SYNC_INDICATOR
                            self.semi_sync_active = semi
                        if semi:
                            ack = bool(event[1] & proto.SEMI_SYNC_ACK_REQ)
                            event = event[2:]
                    first = False
                    if len(event) < proto.EVENT_HEADER_LEN:
                        raise ReplicationError(
                            f"{self.server_address} sent a {len(event)}-byte event after "
                            f"{self._file}:{self._pos}; an event header is 19 bytes")
                    if event[4] == proto.ROTATE_EVENT:
                        self._file, self._pos = proto.parse_rotate(event, checksum_len)
                    else:
                        nxt = unpack_u32(event, 13)[0]
                        if nxt:
                            self._pos = nxt
                    if ack:
                        self._send_ack(sock)
                    yield event
                elif status == 0xFE and length < 9:
                    read(length - 1)
                    return  # EOF: non-blocking dump reached the end of the binlog
                elif status == 0xFF:
                    rest = read(length - 1)
                    raise self._server_error(head[4:] + rest, req_file, req_pos, gtid)
                else:
                    raise ReplicationError(
                        f"{self.server_address} sent an unexpected packet (first byte 0x{status:02x}, "
                        f"{length} bytes) after {self._file}:{self._pos}")
        except TimeoutError as e:
            raise self._lost(f"no data for {timeout} s") from e
        except OSError as e:
            raise self._lost(str(e) or type(e).__name__) from e
        finally:
            reader.close()
            if self._conn is conn:
                self.close()
                self._dumping = False
            else:
                _internals(conn)._force_close()  # an abandoned old stream must not close a newer connection

    def _too_large(self, size: int) -> PacketTooLargeError:
        return PacketTooLargeError(self.server_address, self._file, self._pos, size, self.max_event_size)

    def _read_continued(self, read: Any, need: int, seq: int) -> bytes:
        """An event of 16 MB or more: the first packet is full, then continuation packets follow. Their sum is
        checked against max_event_size before each one is read."""
        parts = [read(need)]
        if len(parts[0]) < need:
            raise self._lost("server closed the connection mid-event")
        total = need
        length = proto.MAX_PACKET_LEN
        while length == proto.MAX_PACKET_LEN:
            head = read(4)
            if len(head) < 4:
                raise self._lost("server closed the connection mid-event")
            word = _U32.unpack(head)[0]
            length, nseq = word & 0xFFFFFF, word >> 24
            if nseq != (seq + 1) & 0xFF:
                raise ReplicationError(f"packet sequence {nseq} after {seq} in a multi-packet event after "
                                       f"{self._file}:{self._pos}; the stream is corrupt")
            seq = nseq
            total += length
            if total > self.max_event_size + 2:
                raise self._too_large(total)
            chunk = read(length)
            if len(chunk) < length:
                raise self._lost("server closed the connection mid-event")
            parts.append(chunk)
        return b"".join(parts)

    def _send_ack(self, sock: socket.socket) -> None:
        # The ACK is a new client "command": its own packet sequence starting at 0.
        sock.sendall(proto.with_header(proto.semi_sync_ack(self._file, self._pos), 0))
