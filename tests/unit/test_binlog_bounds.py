"""Allocations bounded by the maximum event size, never by a length the input declares.

canal-binlog runs as a child of a small wrapper that reports the child's peak RSS (getrusage of its only child)
under an address-space cap, so a decoder that believes a declared length shows up as a large peak (or a
MemoryError) instead of taking the machine's memory. The crafted files start with a real FORMAT_DESCRIPTION_EVENT
from the fixtures; the crafted events are generated here.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import zstandard
from fixture_support import make_event, packed, require_fixtures, walk_headers

from canal_core.binlog import (
    DEFAULT_MAX_EVENT_SIZE,
    BinlogDecoder,
    EventTooLargeError,
    FileFramer,
    MalformedEventError,
    TruncatedEventError,
    read_file,
)
from canal_core.binlog.constants import EventType

REPO_ROOT = Path(__file__).resolve().parents[2]
MYSQL_80 = "osheroff-mysql-binlog-connector-java/src/test/resources/mysql-bin.compressed"  # 8.0.28, CRC32
MYSQL_PAYLOAD = "apecloud-mysql-binlog-connector-rust/tests/parse_file_tests/mysql-bin.000057"  # 8.0.31, 2 payloads
MARIADB_11 = "mariadb-poc/mariadb-binlog/binlogs/domain_id_0/mariadb-repl-bin.000001"  # 11.8.5, CRC32
PEAK_RSS_BOUND_MB = 256
ADDRESS_SPACE_CAP = 3 << 30  # the child may not map more: a decoder that trusts a length fails here, not the host

# Runs argv[2:] with RLIMIT_AS = argv[1]; prints the child's peak RSS (kB) on its own stderr line, last.
_WRAPPER = """
import resource, subprocess, sys
cap = int(sys.argv[1])
def limit():
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
proc = subprocess.run(sys.argv[2:], preexec_fn=limit, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
sys.stderr.write(proc.stderr)
sys.stderr.write(f"PEAK_RSS_KB={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\\n")
sys.exit(proc.returncode)
"""


def run_bounded(*args: str) -> tuple[int, str, float]:
    """canal-binlog ARGS under the cap: (exit status, its stderr, peak RSS in MB)."""
    cmd = [sys.executable, "-c", _WRAPPER, str(ADDRESS_SPACE_CAP), sys.executable, "-m", "canal_core.binlog_cli", *args]
    env = {k: v for k, v in os.environ.items() if k != "CANAL_BINLOG_DEBUG"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT, env=env)
    lines = proc.stderr.splitlines()
    assert lines and lines[-1].startswith("PEAK_RSS_KB="), proc.stderr
    return proc.returncode, "\n".join(lines[:-1]), int(lines[-1].split("=")[1]) / 1024


def fde_of(rel: str) -> bytes:
    """Magic + the FORMAT_DESCRIPTION_EVENT of a fixture file, as the server wrote them."""
    data = (require_fixtures() / rel).read_bytes()
    h = walk_headers(data)[0]
    assert h.type_code == EventType.FORMAT_DESCRIPTION
    return data[:h.offset + h.length]


def zeros_compressed(total: int, compress: object) -> bytes:
    """``total`` zero bytes through a streaming compressor, 1 MiB at a time (never ``total`` in memory)."""
    block = bytes(1 << 20)
    out = [compress.compress(block) for _ in range(total >> 20)]  # type: ignore[attr-defined]
    out.append(compress.flush())  # type: ignore[attr-defined]
    return b"".join(out)


def zlib_zeros(total: int) -> bytes:
    """A zlib stream of ``total`` (a multiple of 1 MiB) zero bytes, built from one 1 MiB block repeated: each block
    ends in a full flush (no back-references across it), so the copies are identical; the trailer is the
    Adler-32 of ``total`` zeros (a = 1, b = total mod 65521)."""
    block = bytes(1 << 20)
    c = zlib.compressobj(9)
    first = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)  # carries the 2-byte zlib header
    again = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    last = c.flush()[:-4]  # the final empty block, without the trailer of the 2 MiB seen
    return first + again * ((total >> 20) - 1) + last + (((total % 65521) << 16) | 1).to_bytes(4, "big")


def transaction_payload(frame: bytes, uncompressed_size: int) -> bytes:
    """TRANSACTION_PAYLOAD body: TLV fields (type, length, packed value): 1 payload size, 2 compression type
    (0 = ZSTD), 3 uncompressed size, then the end mark 0 and the zstd frame."""
    def field(ftype: int, value: int) -> bytes:
        v = packed(value)
        return bytes([ftype]) + packed(len(v)) + v

    return field(1, len(frame)) + field(2, 0) + field(3, uncompressed_size) + b"\0" + frame


def maria_compressed_query(zdata: bytes, declared: int) -> bytes:
    """QUERY_COMPRESSED body: the 13-byte post-header (thread id, exec time, db length, error code, status
    length), no status variables, db "t" + NUL, then MariaDB's compressed block: 0x80 | 4, the uncompressed
    length big-endian in 4 bytes, the zlib stream."""
    post = struct.pack("<IIBHH", 7, 0, 1, 0, 0)
    return post + b"t\0" + bytes([0x84]) + declared.to_bytes(4, "big") + zdata


def assert_refused(status: int, stderr: str, peak_mb: float, *, where: str) -> None:
    assert status == 1, stderr
    assert stderr.startswith("canal-binlog: error: "), stderr
    assert "a bug" not in stderr and "MemoryError" not in stderr, stderr
    assert where in stderr, stderr
    assert peak_mb < PEAK_RSS_BOUND_MB, f"peak RSS {peak_mb:.0f} MB; stderr: {stderr}"


# ---- canal-binlog on crafted files: a typed error in bounded memory --------------------------------------


def test_zstd_payload_bomb_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """1 GiB of zeros compresses to ~32 KB of zstd: a payload declaring (and inflating to) 1 GiB took
    canal-binlog to 2.1 GB RSS when the declared size was the only bound."""
    head = fde_of(MYSQL_80)
    frame = zeros_compressed(1 << 30, zstandard.ZstdCompressor(level=1).compressobj())
    assert len(frame) < 64 << 10
    event = make_event(EventType.TRANSACTION_PAYLOAD, transaction_payload(frame, 1 << 30), checksum=True)
    path = tmp_path / "mysql-bin.000001"
    path.write_bytes(head + event)

    status, stderr, peak = run_bounded(str(path))
    assert_refused(status, stderr, peak, where=f"mysql-bin.000001:{len(head)}")
    assert "maximum event size" in stderr and f"{DEFAULT_MAX_EVENT_SIZE}" in stderr, stderr


def test_zstd_payload_without_a_declared_size_is_bounded_by_the_limit(tmp_path: Path) -> None:
    """No uncompressed-size field: the maximum event size alone bounds the inflation."""
    head = fde_of(MYSQL_80)
    frame = zeros_compressed(256 << 20, zstandard.ZstdCompressor(level=1).compressobj())
    body = bytes([1]) + packed(len(packed(len(frame)))) + packed(len(frame)) + b"\0" + frame
    path = tmp_path / "mysql-bin.000002"
    path.write_bytes(head + make_event(EventType.TRANSACTION_PAYLOAD, body, checksum=True))

    status, stderr, peak = run_bounded(str(path), "--max-event-size", "16M")
    assert_refused(status, stderr, peak, where=f"mysql-bin.000002:{len(head)}")
    assert f"maximum event size of {16 << 20} bytes" in stderr, stderr


@pytest.mark.parametrize("type_code", [EventType.QUERY_COMPRESSED, EventType.WRITE_ROWS_COMPRESSED_V1])
def test_mariadb_zlib_bomb_is_refused_in_bounded_memory(tmp_path: Path, type_code: EventType) -> None:
    """512 MiB of zeros in ~500 KB of zlib, declaring 4 GiB - 1: a 765 KB event took canal-binlog to 1.6 GB."""
    head = fde_of(MARIADB_11)
    zdata = zlib_zeros(512 << 20)
    block = bytes([0x84]) + (2**32 - 1).to_bytes(4, "big") + zdata
    if type_code == EventType.QUERY_COMPRESSED:
        body = maria_compressed_query(zdata, 2**32 - 1)
    else:  # rows v1 post-header (6-byte table id, flags), 1 column, its bitmap, then the compressed rows
        body = (5).to_bytes(6, "little") + b"\x00\x00" + b"\x01" + b"\x01" + block
    path = tmp_path / "mariadb-bin.000003"
    path.write_bytes(head + make_event(type_code, body, checksum=True))

    status, stderr, peak = run_bounded(str(path))
    assert_refused(status, stderr, peak, where=f"mariadb-bin.000003:{len(head)}")
    assert "declares an uncompressed size of 4294967295 bytes" in stderr, stderr


def test_sparse_multi_gib_file_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """A 6 GiB sparse file whose second event header claims 4 GiB - 16: the framer buffered whatever length a
    header claimed (1 GB RSS for 1 GiB; a MemoryError reported as a bug under a ulimit)."""
    head = fde_of(MYSQL_80)
    path = tmp_path / "mysql-bin.000004"
    claimed = 2**32 - 16
    with open(path, "wb") as fh:
        fh.write(head + struct.pack("<IBIIIH", 1700000000, EventType.QUERY, 1, claimed, 0, 0))
        fh.truncate(6 << 30)
    assert os.stat(path).st_blocks * 512 < 1 << 20  # really sparse: the test costs no disk

    status, stderr, peak = run_bounded(str(path))
    assert_refused(status, stderr, peak, where=f"mysql-bin.000004:{len(head)}")
    assert f"event header says {claimed} bytes" in stderr, stderr


def test_event_past_the_end_of_a_sparse_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """A length under the limit that runs past the end of the file: a truncated event at once, with the
    events before it printed (not a buffer filled with the rest of the file first)."""
    head = fde_of(MYSQL_80)
    path = tmp_path / "mysql-bin.000005"
    claimed = 60 << 20
    with open(path, "wb") as fh:
        fh.write(head + struct.pack("<IBIIIH", 1700000000, EventType.QUERY, 1, claimed, 0, 0))
        fh.truncate(len(head) + (50 << 20))

    status, stderr, peak = run_bounded(str(path), "--max-event-size", "1G")
    assert status == 1 and f"mysql-bin.000005:{len(head)}" in stderr, stderr
    assert "file ends inside an event: its header says 62914560 bytes, the file ends 52428800 bytes after" \
        in stderr, stderr
    assert peak < 100, f"peak RSS {peak:.0f} MB: the event was buffered before its length was checked"


# ---- the limit in the library ------------------------------------------------------------------------------


def test_real_payload_decodes_under_the_limit_and_is_refused_over_it() -> None:
    """The fixture's two payloads hold 13 inner events (MANIFEST.md). With the default limit all decode; with
    1 KiB the first (a few hundred bytes inflated) decodes and the second is refused at its offset."""
    path = require_fixtures() / MYSQL_PAYLOAD
    payloads = [h for h in walk_headers(path.read_bytes()) if h.type_code == EventType.TRANSACTION_PAYLOAD]
    assert len(payloads) == 2

    decoded = [ev for ev in read_file(path) if ev.type_code == EventType.TRANSACTION_PAYLOAD]
    assert sum(len(ev.events) for ev in decoded) == 13  # type: ignore[attr-defined]

    seen: list[int | None] = []
    with pytest.raises(EventTooLargeError) as info:
        for ev in read_file(path, BinlogDecoder(max_event_size=1024)):
            seen.append(ev.position)
    assert payloads[0].offset in seen
    assert info.value.file == "mysql-bin.000057" and info.value.position == payloads[1].offset
    assert "declares an uncompressed size of" in str(info.value)


def test_framer_refuses_an_oversized_length_before_buffering() -> None:
    framer = FileFramer("f", max_event_size=4096)
    head = b"\xfebin" + struct.pack("<IBIIIH", 0, EventType.QUERY, 1, 5000, 0, 0)
    with pytest.raises(EventTooLargeError) as info:
        framer.feed(head)
    assert info.value.position == 4 and framer.pending == len(head)


def test_framer_refuses_a_length_past_the_known_file_size() -> None:
    ok = make_event(EventType.XID, bytes(8), checksum=False)
    bad = struct.pack("<IBIIIH", 0, EventType.QUERY, 1, 1000, 0, 0)
    data = b"\xfebin" + ok + bad
    framer = FileFramer("f", file_size=len(data) + 100)
    assert framer.feed(data) == [(4, ok)]  # the complete event before the bad one still comes out
    with pytest.raises(TruncatedEventError) as info:
        framer.close()
    assert info.value.position == 4 + len(ok)


def test_decoder_refuses_an_event_over_the_limit() -> None:
    dec = BinlogDecoder(max_event_size=1024)
    raw = make_event(EventType.QUERY, bytes(2000), checksum=False)
    with pytest.raises(EventTooLargeError) as info:
        dec.decode(raw, 120)
    assert info.value.position == 120


def test_zlib_block_declaring_more_than_it_holds_is_malformed_not_inflated_further() -> None:
    """A declared size under the limit caps the inflation itself: 64 MiB of zeros declared as 1 KiB stops at
    1 KiB + 1 and is a MalformedEventError."""
    dec = BinlogDecoder()
    dec.decode(fde_of(MARIADB_11)[4:], 4)
    zdata = zlib_zeros(64 << 20)
    raw = make_event(EventType.QUERY_COMPRESSED, maria_compressed_query(zdata, 1024), checksum=True)
    with pytest.raises(MalformedEventError, match="inflates to 1025 bytes, header says 1024"):
        dec.decode(raw, 256)
