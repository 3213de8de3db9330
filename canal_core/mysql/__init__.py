"""Replication connection to MySQL/MariaDB: session setup, COM_REGISTER_SLAVE, binlog dump, semi-sync."""

from canal_core.mysql.connection import ReplicationConnection, ServerInfo
from canal_core.mysql.errors import (
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

__all__ = [
    "BinlogFormatError",
    "BinlogNotEnabledError",
    "BinlogPositionError",
    "ConnectionLostError",
    "MissingPrivilegeError",
    "PacketTooLargeError",
    "ReplicationAuthError",
    "ReplicationConnection",
    "ReplicationError",
    "ReplicationTLSError",
    "ServerInfo",
    "ServerUnreachableError",
]
