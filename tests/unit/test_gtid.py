"""GTID sets (MySQL, incl. 8.3+ tags) and GTID positions (MariaDB)."""

from __future__ import annotations

import itertools
import struct
from pathlib import Path

import pytest
from fixture_support import fixtures_root
from hypothesis import given
from hypothesis import strategies as st

from canal_core.binlog.gtid import GNO_END, GtidError, MariaGtidPosition, MySQLGtidSet

FIXTURES = fixtures_root()  # $CANAL_FIXTURES, else ../shared/fixtures beside the repository
U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
U2 = "896e7882-18fe-11ef-ab88-22222d34d411"


# --- text form ---------------------------------------------------------------------------------------
def test_parse_normalizes_like_mysql() -> None:
    text = f" {U2.upper()}:1-3 ,\n{U1.upper()}:7:1-5:6 ,{U1}:10-12:9\n"
    s = MySQLGtidSet(text)
    assert str(s) == f"{U1}:1-7:9-12,{U2}:1-3"
    assert s.to_string(",\n") == f"{U1}:1-7:9-12,\n{U2}:1-3"
    assert MySQLGtidSet.parse(str(s)) == s
    assert s.intervals(U1) == [(1, 8), (9, 13)]


def test_empty_and_trailing_separators() -> None:
    assert str(MySQLGtidSet("")) == "" and not MySQLGtidSet("")
    assert str(MySQLGtidSet(None)) == ""
    assert str(MySQLGtidSet(f"{U1}:1-2,")) == f"{U1}:1-2"
    assert not MySQLGtidSet(U1)  # a bare uuid names no transaction


def test_whitespace_inside_elements() -> None:
    assert str(MySQLGtidSet(f"{U1} : 1 - 3 : 5")) == f"{U1}:1-3:5"


def test_tagged_text() -> None:
    # Intervals after a tag belong to that tag, up to the next tag.
    s = MySQLGtidSet(f"{U1}:1-2:Zeta:3:ALPHA:1-4:6,{U1}:zeta:4")
    assert str(s) == f"{U1}:1-2:alpha:1-4:6:zeta:3-4"
    assert s.is_tagged
    assert s.contains(U1, 4, "ZETA") and not s.contains(U1, 3)
    assert f"{U1}:alpha:6" in s and f"{U1}:alpha:5" not in s
    # A tag-only source prints uuid:tag:...
    assert str(MySQLGtidSet(f"{U2}:tg_1:1-5")) == f"{U2}:tg_1:1-5"


def test_add_contains_union_subset() -> None:
    s = MySQLGtidSet()
    for g in (5, 3, 4, 1, 10):
        s.add(U1, g)
    s.add(U1, 2, "t")
    assert str(s) == f"{U1}:1:3-5:10:t:2"
    s.add(U1, 2)
    assert str(s) == f"{U1}:1-5:10:t:2"
    assert s.contains(U1, 10) and not s.contains(U1, 9) and not s.contains(U2, 1)
    assert f"{U1}:3" in s
    other = MySQLGtidSet(f"{U1}:6-9,{U2}:1")
    u = s.union(other)
    assert str(u) == f"{U1}:1-10:t:2,{U2}:1"
    assert str(s) == f"{U1}:1-5:10:t:2"  # union does not modify
    assert (s | other) == u
    assert s.issubset(u) and other.issubset(u) and not u.issubset(s)
    s.update(other)
    assert s == u
    c = u.copy()
    c.add(U2, 2)
    assert u != c


def test_add_interval_merges_overlaps() -> None:
    s = MySQLGtidSet()
    s.add_interval(U1, 10, 20)
    s.add_interval(U1, 1, 3)
    s.add_interval(U1, 5, 9)
    assert str(s) == f"{U1}:1-3:5-20"
    s.add_interval(U1, 2, 30)
    assert str(s) == f"{U1}:1-30"


@pytest.mark.parametrize("text, fragment", [
    ("3e11fa47-71ca-11e1-9e33:1-5", "uuid"),
    (f"{U1}:5-3", "end before start"),
    (f"{U1}:0", "out of range"),
    (f"{U1}:{GNO_END}", "out of range"),
    (f"{U1}:1-5:tag", "has no interval"),
    (f"{U1}:a:b:1", "has no interval"),
    (f"{U1}:1bad:1", "invalid GTID tag"),
    (f"{U1}:{'x' * 33}:1", "invalid GTID tag"),
    (f"{U1}::1", "empty field"),
    (f"{U1}:1-", "invalid GTID tag"),
])
def test_text_errors(text: str, fragment: str) -> None:
    with pytest.raises(GtidError, match=fragment) as ei:
        MySQLGtidSet(text)
    assert isinstance(ei.value, ValueError)


def test_gtid_membership_text_error() -> None:
    with pytest.raises(GtidError):
        _ = "nonsense" in MySQLGtidSet(f"{U1}:1")


# --- binary form -------------------------------------------------------------------------------------
def test_encode_untagged_layout() -> None:
    s = MySQLGtidSet(f"{U2}:1-3,{U1}:1-5:7")
    data = s.encode()
    assert struct.unpack_from("<Q", data)[0] == 2
    assert data[8:24] == bytes.fromhex(U1.replace("-", ""))  # sorted by uuid
    assert struct.unpack_from("<Qqqqq", data, 24) == (2, 1, 6, 7, 8)  # [start, end) pairs
    assert len(data) == 8 + (16 + 8 + 2 * 16) + (16 + 8 + 16)
    assert MySQLGtidSet.decode(data) == s


def test_encode_tagged_layout() -> None:
    s = MySQLGtidSet(f"{U1}:1-2:abc:5")
    data = s.encode()
    assert struct.unpack_from("<Q", data)[0] == (1 << 56) | (2 << 8) | 1
    # untagged entry: tag byte 0; tagged entry: varlen length (3 << 1) then the tag
    assert data[24] == 0
    assert data[8 + 16 + 1 + 8 + 16 + 16:][:4] == b"\x06abc"
    assert MySQLGtidSet.decode(data) == s
    with pytest.raises(GtidError, match="cannot be encoded"):
        s.encode(tagged=False)
    plain = MySQLGtidSet(f"{U1}:1")
    assert MySQLGtidSet.decode(plain.encode(tagged=True)) == plain
    assert plain.encode(tagged=True)[:8] == bytes.fromhex("0101000000000001")


def test_empty_set_encoding() -> None:
    assert MySQLGtidSet().encode() == bytes(8)
    assert not MySQLGtidSet.decode(bytes(8))


@pytest.mark.parametrize("data, fragment", [
    (b"\x00" * 7, "shorter than its 8-byte header"),
    (struct.pack("<Q", 2 << 56), "unknown GTID set encoding format 2"),
    (struct.pack("<Q", 1), "truncated in source 0"),
    (struct.pack("<Q", 1) + bytes(16) + struct.pack("<Q", 1) + bytes(8), "truncated: 1 intervals"),
    (struct.pack("<Q", 1) + bytes(16) + struct.pack("<Qqq", 1, 5, 5), "malformed GTID interval"),
    (struct.pack("<Q", 1) + bytes(16) + struct.pack("<Qqqqq", 2, 1, 5, 3, 9), "malformed GTID interval"),
    (struct.pack("<Q", 1) + bytes(16) + struct.pack("<Qqq", 1, 0, 5), "malformed GTID interval"),
    (bytes(8) + b"\x00", "1 trailing bytes"),
    (struct.pack("<Q", (1 << 56) | (1 << 8) | 1) + bytes(16) + b"\x03ab" + bytes(8), "one-byte varlen"),
    (struct.pack("<Q", (1 << 56) | (1 << 8) | 1) + bytes(16) + bytes([66]) + b"a" * 33 + bytes(8),
     "too long"),
    (struct.pack("<Q", (1 << 56) | (1 << 8) | 1) + bytes(16) + b"\x041x" + bytes(8), "invalid GTID tag"),
])
def test_decode_errors(data: bytes, fragment: str) -> None:
    with pytest.raises(GtidError, match=fragment):
        MySQLGtidSet.decode(data)


def test_decode_prefix_reports_consumed_bytes() -> None:
    data = MySQLGtidSet(f"{U1}:1-9").encode()
    s, used = MySQLGtidSet.decode_prefix(data + b"rest")
    assert used == len(data) and str(s) == f"{U1}:1-9"


# --- vectors and real binlog files ---------------------------------------------------------------------
@pytest.mark.parametrize("name, expected", [
    ("go-mysql/vectors/065_PreviousGTIDs_tagged_line150.bin", ""),
    ("go-mysql/vectors/066_PreviousGTIDs_tagged_line154.bin", f"{U2}:1-3"),
    ("go-mysql/vectors/067_PreviousGTIDs_tagged_line158.bin", f"{U2}:1-4:aaaa:1"),
    ("go-mysql/vectors/068_PreviousGTIDs_tagged_line162.bin",
     f"{U2}:1-4:aaaa:1:abc:1-3:bbbbb:1:bbbbbb:1:x:1,896e7882-18fe-11ef-ab88-22222d34d412:1-2"),
    ("go-mysql/vectors/069_PreviousGTIDs_tagged_line166.bin",
     "042f20cc-bc4c-11ef-a1d0-0242ac110002:1-7:aaa:1:tag45678901234567890:1:"
     "tag45678901234567890123456789012:1"),
    ("osheroff-mysql-binlog-connector-java/vectors/previous_gtids_body_2_sids.bin",
     "b5cd1624-5f30-11e4-b4e9-1051721bd241:1-7081968,bb421d26-5f30-11e4-b4e9-d89d672b2ef8:1-7823824"),
])
def test_previous_gtids_vectors(name: str, expected: str) -> None:
    data = (FIXTURES / name).read_bytes()
    s = MySQLGtidSet.decode(data)
    assert str(s) == expected
    # Re-encoding gives the same bytes when the format is kept (the server picks it by content).
    assert s.encode(tagged=data[7] == 1) == data


def _events(path: Path) -> list[tuple[int, bytes]]:
    """(type, whole event) of every event in a binlog file (19-byte headers, v4 format)."""
    data = path.read_bytes()
    assert data[:4] == b"\xfebin"
    out, off = [], 4
    while off + 19 <= len(data):
        length = struct.unpack_from("<I", data, off + 9)[0]
        out.append((data[off + 4], data[off:off + length]))
        off += length
    return out


def _previous_gtids(path: Path) -> MySQLGtidSet:
    body = next(ev for typ, ev in _events(path) if typ == 35)[19:-4]  # header, CRC32 trailer
    return MySQLGtidSet.decode(body)


def _gtids_in(path: Path) -> MySQLGtidSet:
    out = MySQLGtidSet()
    for typ, ev in _events(path):
        if typ == 33:  # GTID_LOG_EVENT: flags(1) sid(16) gno(8)
            h = ev[20:36].hex()
            out.add(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}", struct.unpack_from("<q", ev, 36)[0])
    return out


APE = FIXTURES / "apecloud-mysql-binlog-connector-rust/tests/parse_file_tests"
PERCONA = FIXTURES / "percona-binlog-server/mtr/binlog_streaming/std_data/data_80045_gtid"


@pytest.mark.parametrize("path, expected", [
    (APE / "mysql-bin.000057", "76f3e7be-6720-11ed-9cad-0242ac110002:1-10"),
    (APE / "mysql-bin.000080", "58cf6502-63db-11ed-8079-0242ac110002:1-52"),
    (PERCONA / "binlog.000001", ""),
    (PERCONA / "binlog.000002", "396e294c-1ca4-11f1-9ae7-00155da79c6b:1-4"),
    (FIXTURES / "rust-mysql-binlog/test_data/bin-log.000001", "87cee3a4-6b31-11e7-bdfd-0d98d6698870:1-14916"),
    # its mysqlbinlog dump.txt says: Previous-GTIDs [empty]
    (FIXTURES / "mysql-cdc-rs/tests/events/5.7/33_35_gtid_prev_gtid/log.bin", ""),
])
def test_previous_gtids_of_real_files(path: Path, expected: str) -> None:
    prev = _previous_gtids(path)
    assert str(prev) == expected
    body = next(ev for typ, ev in _events(path) if typ == 35)[19:-4]
    assert prev.encode() == body
    # The file's own transactions continue right after the previous set.
    own = _gtids_in(path)
    for uuid, _tag in own.sources():
        first = own.intervals(uuid)[0][0]
        known = prev.intervals(uuid)
        assert first == (known[-1][1] if known else 1)


def test_previous_gtids_chain_across_files() -> None:
    # PREVIOUS_GTIDS of a file = PREVIOUS_GTIDS of the file before it + that file's GTIDs.
    first, second = PERCONA / "binlog.000001", PERCONA / "binlog.000002"
    assert _previous_gtids(second) == _previous_gtids(first).union(_gtids_in(first))


# --- properties --------------------------------------------------------------------------------------
_gnos = st.sets(st.integers(min_value=1, max_value=60), max_size=25)


@given(st.dictionaries(st.sampled_from([(U1, ""), (U1, "tg"), (U2, ""), (U2, "b_2")]), _gnos, max_size=4))
def test_roundtrips_and_membership(members: dict[tuple[str, str], set[int]]) -> None:
    s = MySQLGtidSet()
    for (uuid, tag), gnos in members.items():
        for g in gnos:
            s.add(uuid, g, tag)
    assert MySQLGtidSet(str(s)) == s
    assert MySQLGtidSet(s.to_string(",\n")) == s
    assert MySQLGtidSet.decode(s.encode()) == s
    for (uuid, tag), gnos in members.items():
        assert {g for g in range(1, 62) if s.contains(uuid, g, tag)} == gnos
        # intervals are merged: no two touch
        ivs = s.intervals(uuid, tag)
        assert all(a[1] < b[0] for a, b in itertools.pairwise(ivs))


@given(_gnos, _gnos)
def test_union_is_set_union(a: set[int], b: set[int]) -> None:
    sa, sb = MySQLGtidSet(), MySQLGtidSet()
    for g in a:
        sa.add(U1, g)
    for g in b:
        sb.add(U1, g)
    u = sa | sb
    assert {g for g in range(1, 62) if u.contains(U1, g)} == a | b
    assert sa.issubset(u) and sb.issubset(u)
    assert sa.issubset(sb) == a.issubset(b)


# --- MariaDB -----------------------------------------------------------------------------------------
def test_maria_position_parse_format_update() -> None:
    p = MariaGtidPosition(" 1-2-30 ,\n0-1-100")
    assert str(p) == "0-1-100,1-2-30"
    assert p.get(0) == (1, 100) and p.get(5) is None
    p.update(0, 3, 101)
    p.update(7, 1, 1)
    assert str(p) == "0-3-101,1-2-30,7-1-1"
    assert list(p.gtids()) == [(0, 3, 101), (1, 2, 30), (7, 1, 1)]
    assert MariaGtidPosition(str(p)) == p
    assert MariaGtidPosition.parse("0 - 1 - 5") == MariaGtidPosition("0-1-5")
    assert str(MariaGtidPosition("")) == "" and not MariaGtidPosition(None)
    q = p.copy()
    q.update(1, 2, 31)
    assert q != p and repr(q) == "MariaGtidPosition('0-3-101,1-2-31,7-1-1')"


@pytest.mark.parametrize("text, fragment", [
    ("0-1", "expected domain-server-sequence"),
    ("0-1-x", "expected domain-server-sequence"),
    ("0-1-5,0-2-6", "names domain 0 twice"),
    (f"{1 << 32}-1-1", "out of range"),
    (f"0-1-{1 << 64}", "out of range"),
    ("a:b", "expected domain-server-sequence"),
])
def test_maria_position_errors(text: str, fragment: str) -> None:
    with pytest.raises(GtidError, match=fragment):
        MariaGtidPosition(text)
