"""Compressed binlog events inflated within a hard output limit.

MySQL's TRANSACTION_PAYLOAD (zstd) and MariaDB's compressed QUERY and rows events (zlib) state their
uncompressed size in the same bytes as the compressed data, so a few kilobytes of corrupt or crafted input can
declare, and inflate to, gigabytes. Both are inflated incrementally: a declared size above the limit (the
configured maximum event size) is refused before anything is inflated, and inflating stops as soon as the output
passes what was declared, so no buffer ever grows past the limit.
"""

from __future__ import annotations

import zlib

import zstandard

from .errors import EventTooLargeError

_CHUNK = 1 << 20


def _over(what: str, limit: int) -> EventTooLargeError:
    return EventTooLargeError(f"{what}, more than the maximum event size of {limit} bytes")


def inflate_payload(data: bytes | memoryview, declared: int, limit: int) -> bytearray:
    """A zstd TRANSACTION_PAYLOAD. ``declared``: its uncompressed-size field (0 when absent: the limit
    alone bounds it). MySQL's frames carry no content size, so the output is read in chunks."""
    if declared > limit:
        raise _over(f"the transaction payload declares an uncompressed size of {declared} bytes", limit)
    bound = declared or limit
    reader = zstandard.ZstdDecompressor().stream_reader(data)
    out = bytearray()
    while True:
        chunk = reader.read(min(_CHUNK, bound + 1 - len(out)))
        if not chunk:
            return out
        out += chunk
        if len(out) > bound:
            if declared:
                raise ValueError(f"payload inflates past the {declared} bytes its header promises")
            raise EventTooLargeError(f"the transaction payload inflates to more than the maximum event size of "
                                     f"{limit} bytes")


def inflate_mariadb(data: bytes | memoryview, limit: int) -> bytearray:
    """MariaDB compressed event data: one header byte (0x80 | width of the length), the uncompressed length
    big-endian in that many bytes, then a zlib stream."""
    if not data:
        raise ValueError("empty compressed data")
    head = data[0]
    width = head & 0x07
    if not head & 0x80 or not 1 <= width <= 4:
        raise ValueError(f"bad compression header byte 0x{head:02x}")
    ulen = int.from_bytes(data[1:1 + width], "big")
    if ulen > limit:
        raise _over(f"the compressed event declares an uncompressed size of {ulen} bytes", limit)
    d = zlib.decompressobj()
    out = bytearray()
    rest: bytes | memoryview = memoryview(data)[1 + width:]
    # in chunks, at most one byte past the declared size: that byte already shows the header lies
    while not d.eof and len(out) <= ulen:
        chunk = d.decompress(rest, min(_CHUNK, ulen + 1 - len(out)))
        rest = d.unconsumed_tail
        if not chunk and not rest:
            break  # the stream ends early: a truncated block
        out += chunk
    if len(out) != ulen or not d.eof:
        raise ValueError(f"compressed data inflates to {len(out)} bytes, header says {ulen}")
    return out
