"""Sans-IO binlog decoding: bytes in, events out."""

from .decoder import BinlogDecoder
from .errors import (
    BadMagicError,
    BinlogError,
    ChecksumError,
    EncryptedBinlogError,
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
    "BadMagicError",
    "BinlogDecoder",
    "BinlogError",
    "ChecksumError",
    "ColumnHint",
    "EncryptedBinlogError",
    "FileFramer",
    "LocalBinlogReader",
    "MalformedEventError",
    "TableMapMissingError",
    "TruncatedEventError",
    "UnknownEventError",
    "UnsupportedColumnTypeError",
    "read_file",
]
