"""Typed decoder errors. Each one says where (binlog file:position) and what to do."""

from __future__ import annotations

from ..protocol.errors import CanalError


class BinlogError(CanalError):
    """Base of every error the binlog decoder raises.

    ``file`` and ``position`` locate the event (its start offset) when known.
    """

    hint: str = ""

    def __init__(self, message: str, *, file: str | None = None, position: int | None = None,
                 hint: str | None = None) -> None:
        self.reason = message
        self.file = file
        self.position = position
        if hint is not None:
            self.hint = hint
        super().__init__(self._render())

    @property
    def where(self) -> str:
        if self.file is None and self.position is None:
            return "<unknown position>"
        return f"{self.file or '<unknown file>'}:{self.position if self.position is not None else '?'}"

    def _render(self) -> str:
        text = f"{self.where}: {self.reason}"
        if self.hint:
            text += f" ({self.hint})"
        return text

    def at(self, file: str | None, position: int | None) -> BinlogError:
        """Fill in the location if the raiser did not know it."""
        if self.file is None:
            self.file = file
        if self.position is None:
            self.position = position
        self.args = (self._render(),)
        return self


class BadMagicError(BinlogError):
    hint = "this is not a binlog file: it must start with the bytes fe 62 69 6e"


class TruncatedEventError(BinlogError):
    hint = "the event is shorter than its header or fields say; the file or stream was cut or is corrupt"


class ChecksumError(BinlogError):
    hint = "the event's CRC32 does not match its bytes; the binlog is corrupt or was altered in transit"


class UnknownEventError(BinlogError):
    hint = ("the decoder does not know this event type; upgrade, or set skip_unknown_events "
            "to skip (skipped events are counted and logged)")

    def __init__(self, type_code: int, **kw: object) -> None:
        self.type_code = type_code
        super().__init__(f"unknown binlog event type {type_code}", **kw)  # type: ignore[arg-type]


class EncryptedBinlogError(BinlogError):
    hint = ("the binlog is encrypted (MariaDB encrypt_binlog=ON); read it over replication, where the "
            "server decrypts it, not from the file")


class MalformedEventError(BinlogError):
    hint = "a field of the event is out of range for its format; the binlog is corrupt or of an unsupported version"


class EventTooLargeError(BinlogError):
    """An event, or what a compressed event inflates to, is larger than the configured maximum event size.
    Raised before a buffer of the declared size exists: a corrupt or crafted length field costs no memory."""

    hint = ("the binlog is corrupt or crafted, or really holds events this large: then raise the maximum event "
            "size (canal-binlog --max-event-size, canal.instance.parser.maxEventSize, max_event_size=)")


class TableMapMissingError(BinlogError):
    hint = ("a rows event names a table id with no TABLE_MAP before it: start at the transaction's "
            "BEGIN (or GTID event), not in the middle of it")


class UnsupportedColumnTypeError(BinlogError):
    hint = "the column type cannot be decoded by this version; upgrade or filter the table out"
