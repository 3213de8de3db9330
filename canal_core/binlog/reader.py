"""Binlog files: a sans-IO framer (bytes in, (offset, raw event) out) and a local reader that walks
a directory of binlog files in index order, following rotation (Canal's LocalBinlog mode)."""

from __future__ import annotations

import gzip
import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from .constants import BINLOG_MAGIC, DEFAULT_MAX_EVENT_SIZE
from .decoder import BinlogDecoder
from .errors import BadMagicError, BinlogError, EventTooLargeError, TruncatedEventError
from .events import Event, FormatDescriptionEvent, RotateEvent

_LEN = struct.Struct("<I").unpack_from
_CHUNK = 1 << 20


class FileFramer:
    """Split a binlog file's bytes into events. Feed chunks in order; each event comes out whole
    with its start offset. Call ``close()`` at end of file to detect a truncated last event.

    An event header's length is checked before its bytes are buffered: beyond ``max_event_size`` it is an
    EventTooLargeError, past ``file_size`` (when the file is complete and its size known) a TruncatedEventError.
    So the buffer never holds more than one chunk plus one event of at most ``max_event_size``."""

    def __init__(self, name: str | None = None, start_offset: int = 0, *,
                 max_event_size: int = DEFAULT_MAX_EVENT_SIZE, file_size: int | None = None) -> None:
        self.name = name
        self.offset = start_offset  # file offset of the first byte in the buffer
        self.max_event_size = max_event_size
        self.file_size = file_size
        self._buf = bytearray()
        self._magic_checked = start_offset > 0
        self._error: BinlogError | None = None  # raised at the next call, after the events before it came out

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        if self._error is not None:
            raise self._error
        self._buf += data
        out: list[tuple[int, bytes]] = []
        buf = self._buf
        p = 0
        if not self._magic_checked:
            if len(buf) < 4:
                return out
            if bytes(buf[:4]) != BINLOG_MAGIC:
                raise BadMagicError(f"bad magic {bytes(buf[:4]).hex(' ')}", file=self.name, position=0)
            self._magic_checked = True
            p = 4
        n = len(buf)
        while n - p >= 13:
            elen = _LEN(buf, p + 9)[0]
            if elen < 19:
                raise TruncatedEventError(f"event length {elen} is shorter than an event header",
                                          file=self.name, position=self.offset + p)
            try:
                _check_length(elen, self.offset + p, self.name, self.max_event_size, self.file_size)
            except BinlogError as e:
                if not out:
                    raise
                self._error = e
                break
            if n - p < elen:
                break
            out.append((self.offset + p, bytes(buf[p:p + elen])))
            p += elen
        if p:
            del buf[:p]
            self.offset += p
        return out

    def close(self) -> None:
        if self._error is not None:
            raise self._error
        if self._buf:
            raise TruncatedEventError(f"file ends inside an event ({len(self._buf)} bytes left over)",
                                      file=self.name, position=self.offset)

    @property
    def pending(self) -> int:
        return len(self._buf)


def _check_length(elen: int, at: int, name: str | None, limit: int, file_size: int | None) -> None:
    """Refuse an event length before its bytes are read: over the limit, or past the end of a complete file."""
    if elen > limit:
        raise EventTooLargeError(f"event header says {elen} bytes, more than the maximum event size of "
                                 f"{limit} bytes", file=name, position=at)
    if file_size is not None and at + elen > file_size:
        raise TruncatedEventError(f"file ends inside an event: its header says {elen} bytes, the file ends "
                                  f"{file_size - at} bytes after its start", file=name, position=at)


def _open(path: Path) -> BinaryIO | gzip.GzipFile:
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return open(path, "rb")


def _size_of(fh: Any, path: Path) -> int | None:
    """The size of a plain file being read (not of a .gz: its inflated size is unknown up front)."""
    return None if path.suffix == ".gz" else os.fstat(fh.fileno()).st_size


def read_file(path: str | os.PathLike[str], decoder: BinlogDecoder | None = None, *,
              start_position: int = 4) -> Iterator[Event]:
    """Decode every event of one binlog file. With ``start_position`` > 4 the FORMAT_DESCRIPTION_EVENT
    at offset 4 is read first (the decoder needs it) and events start at start_position. The decoder's
    ``max_event_size`` bounds every event read."""
    path = Path(path)
    dec = decoder or BinlogDecoder()
    dec.file = path.name.removesuffix(".gz")
    limit = dec.max_event_size
    with _open(path) as fh:
        size = _size_of(fh, path)
        if start_position > 4:
            head = fh.read(4 + 19)
            if head[:4] != BINLOG_MAGIC:
                raise BadMagicError(f"bad magic {head[:4].hex(' ')}", file=dec.file, position=0)
            if len(head) < 23:
                raise TruncatedEventError("file ends inside its FORMAT_DESCRIPTION_EVENT", file=dec.file,
                                          position=4)
            flen = _LEN(head, 4 + 9)[0]
            if flen < 19:
                raise TruncatedEventError(f"event length {flen} is shorter than an event header",
                                          file=dec.file, position=4)
            _check_length(flen, 4, dec.file, limit, size)
            fde = head[4:] + fh.read(flen - 19)
            ev = dec.decode(fde, 4)
            if not isinstance(ev, FormatDescriptionEvent):
                raise BinlogError("the event at offset 4 is not a FORMAT_DESCRIPTION_EVENT",
                                  file=dec.file, position=4)
            fh.seek(start_position)
            framer = FileFramer(dec.file, start_position, max_event_size=limit, file_size=size)
        else:
            framer = FileFramer(dec.file, max_event_size=limit, file_size=size)
        while True:
            chunk = fh.read(_CHUNK)
            if not chunk:
                break
            for offset, raw in framer.feed(chunk):
                ev = dec.decode(raw, offset)
                if isinstance(ev, RotateEvent):
                    dec.file = path.name.removesuffix(".gz")  # events after a rotate stay in this file
                yield ev
        framer.close()


class LocalBinlogReader:
    """Read binlog files from a directory in index order, from (file, position), rotating to the next
    file at the end of each; with ``follow`` the last file is tailed as the server appends to it."""

    def __init__(self, directory: str | os.PathLike[str], *, start_file: str | None = None,
                 start_position: int = 4, follow: bool = False, poll_interval: float = 0.2,
                 decoder: BinlogDecoder | None = None) -> None:
        self.directory = Path(directory)
        self.start_file = start_file
        self.start_position = start_position
        self.follow = follow
        self.poll_interval = poll_interval
        self.decoder = decoder or BinlogDecoder()

    def files(self) -> list[str]:
        """Binlog file names in order: from the .index file when there is one, else by name."""
        index = sorted(self.directory.glob("*.index"))
        if index:
            names = [Path(line.strip()).name for line in index[0].read_text().splitlines() if line.strip()]
            return [n for n in names if (self.directory / n).exists()]
        cands = [p.name for p in self.directory.iterdir()
                 if p.is_file() and p.suffix.lstrip(".").isdigit()]
        return sorted(cands, key=lambda n: (n.rsplit(".", 1)[0], int(n.rsplit(".", 1)[1])))

    def __iter__(self) -> Iterator[Event]:
        names = self.files()
        if not names:
            raise BinlogError(f"no binlog files in {self.directory}")
        if self.start_file is not None:
            if self.start_file not in names:
                raise BinlogError(f"binlog file {self.start_file} not found in {self.directory}; "
                                  f"available: {names[0]} .. {names[-1]}")
            names = names[names.index(self.start_file):]
        name = names[0]
        position = self.start_position
        while True:
            yield from self._read_one(name, position)
            position = 4
            # the index may have grown (or been purged) meanwhile: find the successor by name
            names = self.files() if self.follow else names
            while True:
                later = names[names.index(name) + 1:] if name in names else []
                if later:
                    name = later[0]
                    break
                if not self.follow:
                    return
                time.sleep(self.poll_interval)
                names = self.files()

    def _read_one(self, name: str, position: int) -> Iterator[Event]:
        if not self.follow:
            yield from read_file(self.directory / name, self.decoder, start_position=position)
            return
        # tail mode: keep reading the file while it grows, until a ROTATE or STOP ends it
        dec = self.decoder
        dec.file = name
        path = self.directory / name
        with open(path, "rb") as fh:
            framer = FileFramer(name, max_event_size=dec.max_event_size)  # the file grows: no size check
            skip_to = position
            while True:
                chunk = fh.read(_CHUNK)
                if not chunk:
                    if name != self.files()[-1] and not framer.pending:
                        return
                    time.sleep(self.poll_interval)
                    continue
                for offset, raw in framer.feed(chunk):
                    ev = dec.decode(raw, offset)
                    if isinstance(ev, RotateEvent):
                        dec.file = name
                        yield ev
                        return
                    if offset >= skip_to:  # earlier events are decoded only for their state
                        yield ev
