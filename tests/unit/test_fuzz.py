"""Robustness of the decoder against corrupt input: mutated real events and files must only ever raise
typed errors (BinlogError subclasses), never another exception, and must not hang.

(a) real events taken from fixture files (rows v1/v2, TABLE_MAPs with optional metadata,
    TRANSACTION_PAYLOAD, MariaDB GTID/GTID_LIST/checkpoint, QUERY, USER_VAR, LOAD, ...) are mutated
    (byte flips and overwrites, truncation, extension, type-code swaps, random length fields) and fed
    to a copy of a decoder that has already decoded everything before them in their file (FDE, table
    maps). In "fix" mode the header length and CRC32 are rewritten so the mutation reaches the body
    parsers; in "raw" mode they are not; checksum verification is on or off at random.
(b) whole files, truncated/mutated, through FileFramer + BinlogDecoder and through read_file.
(c) hypothesis deadline (2 s per example) and small inputs guard against hangs; derandomized for CI.

Regression tests at the end hold the minimal inputs of crashes found this way.
"""

from __future__ import annotations

import copy
import functools
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import zstandard
from fixture_support import (
    fix_length_and_crc,
    fixtures_available,
    fixtures_root,
    load_binlog_bytes,
    make_event,
    packed,
    require_fixtures,
    walk_headers,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from canal_core.binlog import BinlogDecoder, BinlogError, FileFramer, read_file
from canal_core.binlog.constants import EventType

FUZZ = settings(max_examples=2500, deadline=2000, derandomize=True, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

EVENT_FILES = [
    ("mysql-cdc-rs/tests/events/8.0/02_query_bigger/binlog.000733", 2),
    ("mysql-cdc-rs/tests/events/8.0/32_delete_rows_v2/binlog.000001", 2),
    ("apecloud-mysql-binlog-connector-rust/tests/parse_file_tests/mysql-bin.000057", 3),
    ("osheroff-mysql-binlog-connector-java/src/test/resources/mysql-bin.compressed", 3),
    ("osheroff-mysql-binlog-connector-java/src/test/resources/mysql-bin.checksum-crc32", 2),
    ("osheroff-mysql-binlog-connector-java/src/test/resources/mysql-bin.sakila.gz", 2),
    ("zalora-binlog-parser/data/fixtures/mysql-bin.07", 3),
    ("zalora-binlog-parser/data/fixtures/mysql-bin.06", 2),
    ("mariadb-poc/mariadb-binlog/binlogs/domain_id_0/mariadb-repl-bin.000009", 3),
    ("mysql-cdc-rs/tests/events/5.7/14_user_var/log.bin", 3),
    ("mysql-cdc-rs/tests/events/5.7/17_18_load/log.bin", 2),
    ("mysql-cdc-rs/tests/events/5.7/13_rand/log.bin", 2),
    ("mysql-cdc-rs/tests/events/5.7/29_row_query/log.bin", 2),
    ("canal/parse/src/test/resources/binlog/mysql-bin.000001", 2),
    ("canal/parse/src/test/resources/binlog/tsdb/mysql-bin.000003", 2),
    ("percona-toolkit/t/lib/samples/relay-binlog001", 2),
    ("percona-binlog-server/mtr/binlog_streaming/std_data/data_80045_gtid/binlog.000001", 2),
]

FILE_FUZZ_FILES = [
    "zalora-binlog-parser/data/fixtures/mysql-bin.07",
    "zalora-binlog-parser/data/fixtures/mysql-bin.01",
    "apecloud-mysql-binlog-connector-rust/tests/parse_file_tests/mysql-bin.000057",
    "osheroff-mysql-binlog-connector-java/src/test/resources/mysql-bin.compressed",
    "osheroff-mysql-binlog-connector-java/src/test/resources/mysql-bin.aurora-padding",
    "mysql-cdc-rs/tests/events/8.0/31_update_rows_v2/binlog.000001",
    "mysql-cdc-rs/tests/events/5.7/14_user_var/log.bin",
    "mariadb-poc/mariadb-binlog/binlogs/domain_id_0/mariadb-repl-bin.000009",
    "percona-toolkit/t/lib/samples/relay-binlog001",
    "rust-mysql-binlog/test_data/bin-log.000001",
]


@dataclass(frozen=True)
class Sample:
    label: str
    decoder: BinlogDecoder  # state just before the event; copied per example
    raw: bytes
    position: int
    checksum: bool


@functools.cache
def corpus() -> tuple[Sample, ...]:
    root = fixtures_root()
    out: list[Sample] = []
    for rel, per_type in EVENT_FILES:
        data = load_binlog_bytes(root / rel)
        dec = BinlogDecoder(file=Path(rel).name, skip_unknown_events=True)
        taken: dict[int, int] = {}
        for h in walk_headers(data):
            raw = data[h.offset:h.offset + h.length]
            if taken.get(h.type_code, 0) < per_type and len(raw) <= 4096:
                taken[h.type_code] = taken.get(h.type_code, 0) + 1
                out.append(Sample(f"{rel}@{h.offset}(type {h.type_code})", copy.deepcopy(dec), raw, h.offset,
                                  bool(dec.checksum)))
            dec.decode(raw, h.offset)
    # event vectors needing their own decoder state: Google 27-byte headers, MariaDB 10.0 without CRC
    vt = root / "vitess/vectors"
    for fde_name, names in (("008_google_format_description.bin",
                             ["009_google_query_create_table.bin", "011_google_intvar_last_insert_id.bin",
                              "007_google_rotate.bin"]),
                            ("013_mariadb10013_format_description_nochecksum.bin",
                             ["014_mariadb10013_gtid_standalone.bin", "016_mariadb10013_query_insert.bin"])):
        dec = BinlogDecoder(file="vector")
        dec.decode((vt / fde_name).read_bytes())
        for n in names:
            out.append(Sample(f"vitess/{n}", copy.deepcopy(dec), (vt / n).read_bytes(), 1000, bool(dec.checksum)))
    return tuple(out)


def _corpus_or_fail() -> tuple[Sample, ...]:
    require_fixtures()
    return corpus()


# ---- mutations ------------------------------------------------------------------------------------

_SPECIAL = [0x00, 0x01, 0x02, 0x7F, 0x80, 0xFA, 0xFB, 0xFC, 0xFD, 0xFE, 0xFF]
_BIG = [0, 1, 2, 18, 19, 0x7F, 0xFF, 0x100, 0xFFFF, 0x10000, 0x7FFFFFFF, 0xFFFFFFFF]
_TYPES = [*sorted(int(t) for t in EventType), 100, 200, 255]

_op = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 16), st.integers(1, 255)),
    st.tuples(st.just("set"), st.integers(0, 1 << 16), st.sampled_from(_SPECIAL)),
    st.tuples(st.just("u16"), st.integers(0, 1 << 16), st.sampled_from(_BIG)),
    st.tuples(st.just("u32"), st.integers(0, 1 << 16), st.sampled_from(_BIG)),
    st.tuples(st.just("packed"), st.integers(0, 1 << 16), st.sampled_from([0xFC, 0xFD, 0xFE]),
              st.binary(min_size=8, max_size=8)),
    st.tuples(st.just("truncate"), st.integers(0, 1 << 16)),
    st.tuples(st.just("extend"), st.binary(min_size=1, max_size=24)),
    st.tuples(st.just("retype"), st.sampled_from(_TYPES)),
)


def mutate(raw: bytes, ops: list[tuple], *, lo: int) -> bytes:
    b = bytearray(raw)
    for op in ops:
        kind = op[0]
        span = len(b) - lo
        if kind == "extend":
            b += op[1]
            continue
        if kind == "retype":
            if len(b) > 4:
                b[4] = op[1]
            continue
        if span <= 0:
            continue
        i = lo + op[1] % span
        if kind == "flip":
            b[i] ^= op[2]
        elif kind == "set":
            b[i] = op[2]
        elif kind == "u16":
            b[i:i + 2] = struct.pack("<H", op[2] & 0xFFFF)
        elif kind == "u32":
            b[i:i + 4] = struct.pack("<I", op[2])
        elif kind == "packed":
            b[i:i + 9] = bytes([op[2]]) + op[3]
        elif kind == "truncate":
            del b[lo + op[1] % (span + 1):]
    return bytes(b)


def decode_only_typed(dec: BinlogDecoder, raw: bytes, position: int | None, label: str) -> None:
    try:
        dec.decode(raw, position)
    except BinlogError:
        pass
    except Exception as e:  # anything else is the bug being hunted
        pytest.fail(f"{type(e).__name__}: {e}\n  from {label}\n  event hex: {raw.hex()}", pytrace=False)


# ---- (a) mutated events ----------------------------------------------------------------------------

@pytest.mark.timeout(120)
@FUZZ
@given(data=st.data(), ops=st.lists(_op, min_size=1, max_size=4),
       mode=st.sampled_from(["fix", "fix", "raw"]), verify=st.booleans())
def test_mutated_events_raise_only_typed_errors(data: st.DataObject, ops: list[tuple], mode: str,
                                                verify: bool) -> None:
    samples = _corpus_or_fail()
    s = data.draw(st.sampled_from(samples), label="sample")
    dec = copy.deepcopy(s.decoder)
    dec.verify_checksum = verify
    raw = mutate(s.raw, ops, lo=19 if mode == "fix" else 0)
    if mode == "fix":
        raw = fix_length_and_crc(raw, checksum=s.checksum)
    decode_only_typed(dec, raw, s.position, s.label)


@pytest.mark.timeout(120)
@FUZZ
@given(data=st.data())
def test_random_bodies_behind_real_headers(data: st.DataObject) -> None:
    """Any body bytes for any event type, framed correctly (length and CRC right)."""
    samples = _corpus_or_fail()
    s = data.draw(st.sampled_from(samples), label="sample")
    type_code = data.draw(st.sampled_from(_TYPES), label="type")
    body = data.draw(st.binary(max_size=96), label="body")
    dec = copy.deepcopy(s.decoder)
    raw = make_event(type_code, body, checksum=s.checksum)
    decode_only_typed(dec, raw, s.position, f"{s.label} retyped {type_code}")


@pytest.mark.timeout(60)
@settings(FUZZ, max_examples=150)
@given(data=st.data())
def test_truncated_events_every_length(data: st.DataObject) -> None:
    """Every prefix of an event (header length fixed up or not)."""
    samples = _corpus_or_fail()
    s = data.draw(st.sampled_from(samples), label="sample")
    for cut in range(0, len(s.raw), max(1, len(s.raw) // 64)):
        part = s.raw[:cut]
        decode_only_typed(copy.deepcopy(s.decoder), part, s.position, f"{s.label}[:{cut}]")
        if cut >= 19:
            decode_only_typed(copy.deepcopy(s.decoder), fix_length_and_crc(part, checksum=s.checksum), s.position,
                              f"{s.label}[:{cut}] fixed")


@functools.cache
def payload_samples() -> tuple[tuple[Sample, list[tuple[int, int]], int], ...]:
    """TRANSACTION_PAYLOAD samples with their TLV header fields [(type, value)] and the payload offset."""
    from canal_core.binlog.packed import read_packed

    out = []
    for s in corpus():
        if s.raw[4] != EventType.TRANSACTION_PAYLOAD:
            continue
        p, fields = 19, []
        while True:
            t, p = read_packed(s.raw, p)
            if t == 0:
                break
            n, p = read_packed(s.raw, p)
            fields.append((t, read_packed(s.raw[p:p + n], 0)[0]))
            p += n
        out.append((s, fields, p))
    return tuple(out)


_TLV_VALUE = st.one_of(st.sampled_from([0, 1, 255, 1 << 24, 1 << 31, 1 << 40, (1 << 63) - 1, (1 << 64) - 1]),
                      st.integers(0, 1 << 20))


@pytest.mark.timeout(60)
@settings(FUZZ, max_examples=300)
@given(data=st.data())
def test_transaction_payload_header_fields(data: st.DataObject) -> None:
    """TRANSACTION_PAYLOAD TLV values (compression type, payload size, uncompressed size) set at random."""
    _corpus_or_fail()
    samples = payload_samples()
    assert samples, "no TRANSACTION_PAYLOAD sample in the corpus"
    s, fields, start = data.draw(st.sampled_from(samples), label="sample")
    new: list[int | None] = [None] * len(fields)
    for _ in range(data.draw(st.integers(1, 2), label="how many")):
        new[data.draw(st.integers(0, len(fields) - 1), label="field")] = data.draw(_TLV_VALUE, label="value")
    header = b""
    for (t, v), nv in zip(fields, new, strict=True):
        val = packed(v if nv is None else nv)
        header += bytes([t]) + packed(len(val)) + val
    raw = fix_length_and_crc(s.raw[:19] + header + b"\x00" + s.raw[start:], checksum=s.checksum)
    decode_only_typed(copy.deepcopy(s.decoder), raw, s.position, f"{s.label} TLV values {new}")


@pytest.mark.timeout(60)
@settings(FUZZ, max_examples=300)
@given(collation=st.integers(0, 2100), enum_collation=st.integers(0, 2100), column=st.sampled_from(
    [(15, b"\x0a\x00"), (254, b"\xfe\x0a"), (252, b"\x02"), (253, b"\x0a\x00")]))
def test_collation_ids_in_optional_metadata(collation: int, enum_collation: int, column: tuple[int, bytes]) -> None:
    """A character column and an ENUM column with any collation id in DEFAULT_CHARSET /
    ENUM_AND_SET_DEFAULT_CHARSET, then a row: decodes, or a typed error."""
    dec = BinlogDecoder(file="fuzz")
    dec.decode(_fde(_FDE80), 4)
    ctype, cmeta = column
    om = (b"\x02" + packed(len(packed(collation))) + packed(collation)
          + b"\x0a" + packed(len(packed(enum_collation))) + packed(enum_collation)
          + b"\x06\x03\x01\x01a")
    body = ((7).to_bytes(6, "little") + b"\x01\x00" + b"\x01d\x00" + b"\x01t\x00" + b"\x02"
            + bytes([ctype, 254]) + bytes([len(cmeta) + 2]) + cmeta + b"\xf7\x01" + b"\x03" + om)
    label = f"collation {collation} enum collation {enum_collation} column type {ctype}"
    tm = make_event(19, body, checksum=True)
    try:
        dec.decode(tm, 1000)
    except BinlogError:
        return
    except Exception as e:
        pytest.fail(f"{type(e).__name__}: {e}\n  {label}\n  TABLE_MAP hex: {tm.hex()}", pytrace=False)
    value = b"\x02\x00xy" if ctype == 252 else b"\x02xy"  # BLOB meta 2: two length bytes
    rows = (7).to_bytes(6, "little") + b"\x01\x00\x02\x00\x02\xff\x00" + value + b"\x01"
    raw = make_event(30, rows, checksum=True)
    decode_only_typed(dec, raw, 1100, f"{label}; TABLE_MAP hex {tm.hex()}")


# ---- (b) files through FileFramer / read_file ------------------------------------------------------

@functools.cache
def file_bytes() -> tuple[tuple[str, bytes], ...]:
    root = fixtures_root()
    return tuple((rel, load_binlog_bytes(root / rel)) for rel in FILE_FUZZ_FILES)


def _files_or_fail() -> tuple[tuple[str, bytes], ...]:
    require_fixtures()
    return file_bytes()


_file_op = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 20), st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 1 << 20)),
    st.tuples(st.just("hdrlen"), st.integers(0, 1000), st.sampled_from([*_BIG, 1 << 30])),
    st.tuples(st.just("hdrtype"), st.integers(0, 1000), st.sampled_from(_TYPES)),
)


def mutate_file(data: bytes, ops: list[tuple]) -> bytes:
    b = bytearray(data)
    headers = walk_headers(data)
    for op in ops:
        if not b:
            break
        if op[0] == "flip":
            b[op[1] % len(b)] ^= op[2]
        elif op[0] == "truncate":
            del b[op[1] % (len(b) + 1):]
        elif headers:
            h = headers[op[1] % len(headers)]
            if op[0] == "hdrlen" and h.offset + 13 <= len(b):
                b[h.offset + 9:h.offset + 13] = struct.pack("<I", op[2])
            elif op[0] == "hdrtype" and h.offset + 5 <= len(b):
                b[h.offset + 4] = op[2]
    return bytes(b)


def _frame_and_decode(data: bytes, chunks: list[int], dec: BinlogDecoder, label: str) -> None:
    framer = FileFramer("fuzz")
    p = 0
    try:
        sizes = iter(chunks)
        while p < len(data):
            n = next(sizes, len(data))
            for off, raw in framer.feed(data[p:p + n]):
                dec.decode(raw, off)
            p += n
        framer.close()
    except BinlogError:
        pass
    except Exception as e:
        pytest.fail(f"{type(e).__name__}: {e}\n  from {label}\n  file hex: {data.hex()}", pytrace=False)


@pytest.mark.timeout(120)
@settings(FUZZ, max_examples=600)
@given(data=st.data(), ops=st.lists(_file_op, min_size=1, max_size=3),
       chunks=st.lists(st.integers(1, 4096), max_size=8), verify=st.booleans(), skip=st.booleans())
def test_mutated_files_through_framer(data: st.DataObject, ops: list[tuple], chunks: list[int], verify: bool,
                                      skip: bool) -> None:
    files = _files_or_fail()
    rel, content = data.draw(st.sampled_from(files), label="file")
    mutated = mutate_file(content, ops)
    dec = BinlogDecoder(file="fuzz", verify_checksum=verify, skip_unknown_events=skip)
    _frame_and_decode(mutated, chunks, dec, f"{rel} {ops}")


_TMP = tempfile.TemporaryDirectory(prefix="canal-fuzz-")


@pytest.mark.timeout(120)
@settings(FUZZ, max_examples=200)
@given(data=st.data(), ops=st.lists(_file_op, min_size=1, max_size=3), start=st.sampled_from([4, 4, 120, 200]))
def test_mutated_files_through_read_file(data: st.DataObject, ops: list[tuple], start: int) -> None:
    files = _files_or_fail()
    rel, content = data.draw(st.sampled_from(files), label="file")
    mutated = mutate_file(content, ops)
    path = Path(_TMP.name) / "mysql-bin.000001"
    path.write_bytes(mutated)
    try:
        for _ in read_file(path, start_position=start):
            pass
    except BinlogError:
        pass
    except Exception as e:
        pytest.fail(f"{type(e).__name__}: {e}\n  from {rel} {ops} start={start}\n  file hex: {mutated.hex()}",
                    pytrace=False)


@pytest.mark.timeout(60)
@settings(FUZZ, max_examples=40)
@given(data=st.data(), chunks=st.lists(st.integers(1, 700), min_size=1, max_size=40))
def test_framing_does_not_depend_on_chunking(data: st.DataObject, chunks: list[int]) -> None:
    files = _files_or_fail()
    _rel, content = data.draw(st.sampled_from(files), label="file")
    whole = FileFramer("a").feed(content)
    framer = FileFramer("b")
    got: list[tuple[int, bytes]] = []
    p = 0
    sizes = iter(chunks * (len(content) // max(1, sum(chunks)) + 2))
    while p < len(content):
        n = next(sizes)
        got += framer.feed(content[p:p + n])
        p += n
    framer.close()
    assert got == whole
    assert [off for off, _ in whole] == [h.offset for h in walk_headers(content)]


# ---- regressions: minimal inputs of crashes found by the fuzzers above --------------------------------

def _fde(rel: str) -> bytes:
    data = (require_fixtures() / rel).read_bytes()
    h = walk_headers(data)[0]
    return data[h.offset:h.offset + h.length]


_FDE80 = "osheroff-mysql-binlog-connector-java/src/test/resources/mysql-bin.compressed"


def test_regression_payload_uncompressed_size_is_not_trusted() -> None:
    """TRANSACTION_PAYLOAD whose uncompressed_size TLV says 2^40 and whose zstd frame has no content size:
    zstandard is asked to allocate 2^40 bytes and raises MemoryError (not a BinlogError)."""
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(b"")
    body = bytes([2, 1, 0, 3, 9, 0xFE]) + (1 << 40).to_bytes(8, "little") + bytes([1, 1, len(frame), 0]) + frame
    raw = make_event(40, body, checksum=True)
    assert raw.hex() == ("000000002801000000320000000000000000000201000309fe000000000001000001010900"
                         "28b52ffd0000010000" + raw[-4:].hex())
    dec = BinlogDecoder(file="fuzz")
    dec.decode(_fde(_FDE80), 4)
    with pytest.raises(BinlogError):
        dec.decode(raw, 1000)


def test_regression_row_string_in_charset_python_lacks() -> None:
    """VARCHAR column whose DEFAULT_CHARSET optional metadata is collation 32 (armscii8_general_ci): pymysql
    names the codec 'armscii8', which Python does not have, so decoding the row raises LookupError."""
    tm = bytes.fromhex("0000000013010000002e0000000000000000000100000000000100016400017400010f020a0001020120"
                       "492ffbaa")
    rows = bytes.fromhex("000000001e01000000260000000000000000000100000000000100020001ff0001610b6e8fc1")
    dec = BinlogDecoder(file="fuzz")
    dec.decode(_fde(_FDE80), 4)
    dec.decode(tm, 1000)
    try:
        dec.decode(rows, 1100)
    except BinlogError:
        pass  # a typed error (e.g. UnsupportedColumnTypeError) is acceptable; so are raw bytes


def test_regression_enum_values_in_charset_python_lacks() -> None:
    """ENUM column with ENUM_AND_SET_DEFAULT_CHARSET = 32 (armscii8) and ENUM_STR_VALUE ('a'): decoding the
    value list in tablemap.parse_table_map_body raises LookupError."""
    body = ((2).to_bytes(6, "little") + b"\x01\x00" + b"\x01d\x00" + b"\x01t\x00" + b"\x01" + bytes([254])
            + b"\x02\xf7\x01" + b"\x01" + b"\x0a\x01\x20" + b"\x06\x03\x01\x01a")
    dec = BinlogDecoder(file="fuzz")
    dec.decode(_fde(_FDE80), 4)
    try:
        dec.decode(make_event(19, body, checksum=True), 1000)
    except BinlogError:
        pass


def test_regression_read_file_start_position_with_short_fde() -> None:
    """read_file(start_position > 4) reads the FDE at offset 4 itself: a header length < 19 makes it call
    fh.read(negative) (ValueError), a file shorter than 23 bytes makes struct.unpack_from fail."""
    with tempfile.TemporaryDirectory() as d:
        for name, data in (("len0", b"\xfebin" + bytes(19)), ("short", b"\xfebin\x00")):
            path = Path(d) / name
            path.write_bytes(data)
            with pytest.raises(BinlogError):
                list(read_file(path, start_position=120))


def test_fixture_corpus_is_not_empty() -> None:
    assert fixtures_available() or require_fixtures()
    assert len(_corpus_or_fail()) > 50
