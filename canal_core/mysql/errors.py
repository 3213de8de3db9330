"""Typed errors of the replication connection; each message is one line that says what to do."""

from __future__ import annotations

from ..protocol.errors import CanalError

# Server error codes this package maps to typed errors.
ER_ACCESS_DENIED = 1045
ER_DBACCESS_DENIED = 1044
ER_TABLEACCESS_DENIED = 1142
ER_SPECIFIC_ACCESS_DENIED = 1227
ER_ACCESS_DENIED_NO_PASSWORD = 1698
ER_NOT_SUPPORTED_AUTH_MODE = 1251
ER_NO_BINARY_LOGGING = 1381
ER_MASTER_FATAL_READING_BINLOG = 1236
ER_SERVER_SHUTDOWN = 1053
ER_QUERY_INTERRUPTED = 1317
ER_CONNECTION_KILLED = 1927
CR_AUTH_PLUGIN_CANNOT_LOAD = 2059

# Codes that mean "this session is gone" rather than "the request is wrong".
CONNECTION_GONE_CODES = frozenset({ER_SERVER_SHUTDOWN, ER_QUERY_INTERRUPTED, ER_CONNECTION_KILLED,
                                   2006, 2013, 2055})

REQUIRED_PRIVILEGES = "SELECT, REPLICATION SLAVE, REPLICATION CLIENT"


def _one_line(text: str) -> str:
    # Messages must stay one log line even when the server's text spans several.
    return " ".join(text.split())


class ReplicationError(CanalError):
    """Base of every error raised by ``canal_core.mysql``.

    ``code`` is the server error code when the server reported one; ``retryable`` says whether
    reconnecting (with back-off) can help without a change of configuration.
    """

    retryable: bool = False

    def __init__(self, message: str, *, code: int | None = None) -> None:
        message = _one_line(message)
        super().__init__(message)
        self.message = message
        self.code = code


class ServerUnreachableError(ReplicationError):
    """TCP connect or the handshake failed (server down, wrong host/port, firewall)."""

    retryable = True


class ReplicationTLSError(ReplicationError):
    """The TLS handshake failed (untrusted certificate, name mismatch, no TLS on the server)."""


class ReplicationAuthError(ReplicationError):
    """The server refused the credentials or the authentication method."""


class BinlogNotEnabledError(ReplicationError):
    """The server does not write a binary log."""

    def __init__(self, server: str, detail: str = "log_bin is OFF") -> None:
        super().__init__(
            f"binary logging is not enabled on {server} ({detail}): add log_bin=mysql-bin, "
            f"binlog_format=ROW, binlog_row_image=FULL and a unique server_id under [mysqld] in my.cnf "
            f"and restart the server")


class BinlogFormatError(ReplicationError):
    """binlog_format is not ROW, or binlog_row_image is not FULL (when strict)."""

    def __init__(self, server: str, variable: str, value: str, wanted: str) -> None:
        super().__init__(
            f"{server} has {variable}={value} but Canal needs {variable}={wanted}: add {variable}={wanted} "
            f"under [mysqld] in my.cnf (and SET GLOBAL {variable}='{wanted}' to apply it without a "
            f"restart to new sessions)")
        self.variable = variable
        self.value = value
        self.wanted = wanted


class MissingPrivilegeError(ReplicationError):
    """The replication user lacks a privilege; ``grant`` is the statement that fixes it."""

    def __init__(self, account: str, privilege: str, server_message: str, *, code: int | None = None) -> None:
        self.account = account
        self.privilege = privilege
        self.grant = f"GRANT {REQUIRED_PRIVILEGES} ON *.* TO {account}"
        super().__init__(
            f"user {account} lacks {privilege} ({_one_line(server_message)}): run {self.grant}",
            code=code)


class BinlogPositionError(ReplicationError):
    """The server cannot stream from the requested position (error 1236 during the dump)."""

    def __init__(self, server_message: str, file: str, position: int, *, gtid: str | None = None,
                 oldest_file: str | None = None, code: int = ER_MASTER_FATAL_READING_BINLOG) -> None:
        self.server_message = server_message
        self.file = file
        self.position = position
        self.gtid = gtid
        self.oldest_file = oldest_file
        start = f"GTID {gtid}" if gtid else f"{file or '<first binlog>'}:{position}"
        text = f"server cannot stream the binlog from {start}: {_one_line(server_message)}"
        if oldest_file:
            text += (f"; the oldest binlog on the server is {oldest_file}: if the wanted binlog was purged, "
                     f"restart from {oldest_file}:4 (the purged changes are lost) and keep binlogs longer "
                     f"(binlog_expire_logs_seconds), otherwise fix the configured position")
        else:
            text += "; check the configured journal name/position against SHOW BINARY LOGS"
        super().__init__(text, code=code)


class ConnectionLostError(ReplicationError):
    """The dump stream broke; resume from ``(file, position)``, the end of the last complete event."""

    retryable = True

    def __init__(self, file: str, position: int, reason: str, *, code: int | None = None) -> None:
        self.file = file
        self.position = position
        self.reason = reason
        super().__init__(
            f"replication connection lost at {file or '<unknown file>'}:{position} ({_one_line(reason)}); "
            f"reconnect and resume from that position", code=code)


class PacketTooLargeError(ReplicationError):
    """The server sent an event larger than the configured maximum event size (MySQL's own replica stops the same
    way at replica_max_allowed_packet). Refused before the event is buffered."""

    def __init__(self, server: str, file: str, position: int, size: int, limit: int) -> None:
        self.file = file
        self.position = position
        self.size = size
        self.limit = limit
        super().__init__(
            f"{server} sent an event of at least {size} bytes after {file or '<unknown file>'}:{position}, more than "
            f"the maximum event size of {limit} bytes; if the source really writes events this large (its "
            f"max_allowed_packet), raise the limit (canal.instance.parser.maxEventSize, canal-binlog "
            f"--max-event-size)")
