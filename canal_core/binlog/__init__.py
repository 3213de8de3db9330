"""Sans-IO binlog decoding: bytes in, events out."""

from .constants import DEFAULT_MAX_EVENT_SIZE
from .decoder import BinlogDecoder
from .errors import (
    BadMagicError,
    BinlogError,
    ChecksumError,
    EncryptedBinlogError,
    EventTooLargeError,
    MalformedEventError,
    TableMapMissingError,
    TruncatedEventError,
    UnknownEventError,
    UnsupportedColumnTypeError,
)
from .reader import FileFramer, LocalBinlogReader, read_file
from .rows import ABSENT
from .tablemap import ColumnHint

__all__ = [
    "ABSENT",
    "DEFAULT_MAX_EVENT_SIZE",
    "BadMagicError",
    "BinlogDecoder",
    "BinlogError",
    "ChecksumError",
    "ColumnHint",
    "EncryptedBinlogError",
    "EventTooLargeError",
    "FileFramer",
    "LocalBinlogReader",
    "MalformedEventError",
    "TableMapMissingError",
    "TruncatedEventError",
    "UnknownEventError",
    "UnsupportedColumnTypeError",
    "read_file",
]
