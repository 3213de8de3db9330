"""Canal's Entry model: protobuf definitions (``proto``), conversion of decoded binlog events into
entries (``convert``) and the ``CanalEntry`` wrapper that carries the serialized entry together with
its position and the typed rows (``model``)."""

from .convert import EntryConverter, JavaTypes, classify_query
from .model import (
    ENTRY_GTIDLOG,
    ENTRY_HEARTBEAT,
    ENTRY_ROWDATA,
    ENTRY_TRANSACTIONBEGIN,
    ENTRY_TRANSACTIONEND,
    CanalEntry,
)

__all__ = [
    "ENTRY_GTIDLOG",
    "ENTRY_HEARTBEAT",
    "ENTRY_ROWDATA",
    "ENTRY_TRANSACTIONBEGIN",
    "ENTRY_TRANSACTIONEND",
    "CanalEntry",
    "EntryConverter",
    "JavaTypes",
    "classify_query",
]
