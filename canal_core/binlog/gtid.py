"""GTID values of both flavors, sans-IO.

* ``MySQLGtidSet``: MySQL GTID sets ("uuid:1-5:7,uuid2:1-3"), including MySQL 8.3+ tagged GTIDs
  ("uuid:1-5:tag:1-3"), in text form and in the binary form carried by COM_BINLOG_DUMP_GTID and
  PREVIOUS_GTIDS_LOG_EVENT.
* ``MariaGtidPosition``: MariaDB GTID positions ("domain-server-seq,..."), one GTID per domain, as in
  @@gtid_binlog_pos / @@gtid_current_pos / @slave_connect_state.

Binary form of a MySQL GTID set (all integers little-endian):
    u64 n_sids; per entry: 16-byte uuid, [tag], u64 n_intervals, n_intervals * (i64 start, i64 end_excl).
The top byte of n_sids is a format code: 0 = untagged (the whole u64 is the count), 1 = tagged (count in
bits 8..55, the format code repeated in bits 0..7, and every entry carries a tag: one varlen-length byte
``len << 1`` then the lowercase tag, ``00`` for an untagged entry). Servers before 8.3 only understand
format 0, so ``encode`` uses format 1 only when the set holds a tagged GTID.
"""

from __future__ import annotations

import re
import struct
from bisect import bisect_right
from collections.abc import Iterable, Iterator

__all__ = ["GNO_END", "GtidError", "MariaGtidPosition", "MySQLGtidSet"]

# Valid sequence numbers are 1 .. GNO_END - 1 (MySQL's GNO_END = INT64_MAX, an exclusive end).
GNO_END = (1 << 63) - 1
TAG_MAX_LENGTH = 32
FORMAT_UNTAGGED = 0
FORMAT_TAGGED = 1

_UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TAG_RE = re.compile(r"[a-z_][a-z0-9_]{0,31}")
_INTERVAL_RE = re.compile(r"(\d+)\s*(?:-\s*(\d+))?")
_U64 = struct.Struct("<Q")
_I64X2 = struct.Struct("<qq")
_MARIA_RE = re.compile(r"(\d+)\s*-\s*(\d+)\s*-\s*(\d+)")


class GtidError(ValueError):
    """A GTID set or GTID position is malformed, in text or binary form."""


Interval = tuple[int, int]  # [start, end_exclusive)


def _check_uuid(uuid: str) -> str:
    u = uuid.strip().lower()
    if not _UUID_RE.fullmatch(u):
        raise GtidError(f"invalid GTID source uuid {uuid!r}: expected 8-4-4-4-12 hex digits")
    return u


def _check_tag(tag: str) -> str:
    t = tag.strip().lower()
    if t and not _TAG_RE.fullmatch(t):
        raise GtidError(f"invalid GTID tag {tag!r}: expected 1-32 of [a-z0-9_], not starting with a digit")
    return t


def _check_gno(gno: int) -> int:
    if not 1 <= gno < GNO_END:
        raise GtidError(f"GTID sequence number {gno} out of range 1..{GNO_END - 1}")
    return gno


def _insert(ivs: list[list[int]], start: int, end: int) -> None:
    """Add [start, end) to a sorted list of disjoint, non-adjacent intervals, merging neighbours."""
    # First interval whose start is > end cannot touch; everything before i may.
    i = bisect_right(ivs, [end, GNO_END + 1])
    j = i
    while j > 0 and ivs[j - 1][1] >= start:
        j -= 1
    if j == i:
        ivs.insert(i, [start, end])
        return
    ivs[j:i] = [[min(start, ivs[j][0]), max(end, ivs[i - 1][1])]]


class MySQLGtidSet:
    """A MySQL GTID set: (uuid, tag) -> merged sequence-number intervals.

    Text output is normalized the way MySQL prints it: sources sorted by uuid, the untagged intervals
    first and then each tag in order, intervals merged, lowercase; ``to_string(",\\n")`` gives the exact
    separator of @@gtid_executed.
    """

    __slots__ = ("_sets",)

    def __init__(self, text: str | None = None) -> None:
        self._sets: dict[tuple[str, str], list[list[int]]] = {}
        if text:
            self._parse_into(text)

    # --- construction -------------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> MySQLGtidSet:
        return cls(text)

    def _parse_into(self, text: str) -> None:
        for part in text.split(","):
            tokens = [t.strip() for t in part.split(":")]
            if tokens == [""]:
                # MySQL tolerates empty elements such as a trailing comma.
                continue
            uuid = _check_uuid(tokens[0])
            tag = ""
            pending_tag = False
            for tok in tokens[1:]:
                m = _INTERVAL_RE.fullmatch(tok)
                if m:
                    start = int(m.group(1))
                    last = int(m.group(2)) if m.group(2) is not None else start
                    if last < start:
                        raise GtidError(
                            f"invalid GTID interval {tok!r} in {part.strip()!r}: end before start")
                    self.add_interval(uuid, start, last, tag)
                    pending_tag = False
                    continue
                if not tok:
                    raise GtidError(f"empty field in GTID set element {part.strip()!r}")
                if pending_tag:
                    raise GtidError(f"GTID tag {tag!r} in {part.strip()!r} has no interval")
                tag = _check_tag(tok)
                pending_tag = True
            if pending_tag:
                raise GtidError(f"GTID tag {tag!r} in {part.strip()!r} has no interval")

    def add(self, uuid: str, gno: int, tag: str = "") -> None:
        """Add one GTID (uuid[:tag]:gno)."""
        self.add_interval(uuid, gno, gno, tag)

    def add_interval(self, uuid: str, first: int, last: int, tag: str = "") -> None:
        """Add GTIDs first..last (inclusive, as in the text form)."""
        _check_gno(first)
        _check_gno(last)
        if last < first:
            raise GtidError(f"invalid GTID interval {first}-{last}: end before start")
        key = (_check_uuid(uuid), _check_tag(tag))
        _insert(self._sets.setdefault(key, []), first, last + 1)

    def update(self, other: MySQLGtidSet) -> None:
        """In-place union."""
        for key, ivs in other._sets.items():
            mine = self._sets.setdefault(key, [])
            for s, e in ivs:
                _insert(mine, s, e)

    def union(self, other: MySQLGtidSet) -> MySQLGtidSet:
        out = self.copy()
        out.update(other)
        return out

    __or__ = union

    def copy(self) -> MySQLGtidSet:
        out = MySQLGtidSet()
        out._sets = {k: [iv[:] for iv in v] for k, v in self._sets.items()}
        return out

    # --- queries ------------------------------------------------------------------------------------
    def contains(self, uuid: str, gno: int, tag: str = "") -> bool:
        ivs = self._sets.get((_check_uuid(uuid), _check_tag(tag)))
        if not ivs:
            return False
        i = bisect_right(ivs, [gno, GNO_END + 1]) - 1
        return i >= 0 and ivs[i][0] <= gno < ivs[i][1]

    def issubset(self, other: MySQLGtidSet) -> bool:
        for key, ivs in self._sets.items():
            theirs = other._sets.get(key, [])
            for s, e in ivs:
                i = bisect_right(theirs, [s, GNO_END + 1]) - 1
                if i < 0 or not (theirs[i][0] <= s and e <= theirs[i][1]):
                    return False
        return True

    def __contains__(self, gtid: str) -> bool:
        """``"uuid:gno"`` or ``"uuid:tag:gno"`` in set."""
        parts = gtid.split(":")
        if len(parts) not in (2, 3) or not parts[-1].strip().isdigit():
            raise GtidError(f"invalid GTID {gtid!r}: expected uuid[:tag]:number")
        return self.contains(parts[0], int(parts[-1]), parts[1] if len(parts) == 3 else "")

    def intervals(self, uuid: str, tag: str = "") -> list[Interval]:
        """Intervals of one source as [start, end_exclusive) pairs."""
        return [(s, e) for s, e in self._sets.get((_check_uuid(uuid), _check_tag(tag)), [])]

    def sources(self) -> Iterator[tuple[str, str]]:
        """(uuid, tag) pairs in MySQL order."""
        return iter(sorted(k for k, v in self._sets.items() if v))

    def __bool__(self) -> bool:
        return any(self._sets.values())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MySQLGtidSet):
            return NotImplemented
        return self._norm() == other._norm()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def _norm(self) -> list[tuple[tuple[str, str], list[list[int]]]]:
        return sorted((k, v) for k, v in self._sets.items() if v)

    # --- text ---------------------------------------------------------------------------------------
    def to_string(self, separator: str = ",") -> str:
        out: list[str] = []
        cur_uuid = None
        buf: list[str] = []
        for (uuid, tag), ivs in self._norm():
            if uuid != cur_uuid:
                if buf:
                    out.append(":".join(buf))
                buf = [uuid]
                cur_uuid = uuid
            if tag:
                buf.append(tag)
            buf.extend(str(s) if e == s + 1 else f"{s}-{e - 1}" for s, e in ivs)
        if buf:
            out.append(":".join(buf))
        return separator.join(out)

    def __str__(self) -> str:
        return self.to_string()

    def __repr__(self) -> str:
        return f"MySQLGtidSet({self.to_string()!r})"

    # --- binary -------------------------------------------------------------------------------------
    @property
    def is_tagged(self) -> bool:
        return any(tag for (_, tag), v in self._sets.items() if v)

    def encode(self, tagged: bool | None = None) -> bytes:
        """Binary form; ``tagged`` forces the format (default: tagged only if a source has a tag)."""
        entries = self._norm()
        if tagged is None:
            tagged = self.is_tagged
        elif not tagged and self.is_tagged:
            raise GtidError("a GTID set with tagged GTIDs cannot be encoded in the untagged format")
        n = len(entries)
        head = (FORMAT_TAGGED << 56) | (n << 8) | FORMAT_TAGGED if tagged else n
        parts = [_U64.pack(head)]
        for (uuid, tag), ivs in entries:
            parts.append(bytes.fromhex(uuid.replace("-", "")))
            if tagged:
                raw = tag.encode("ascii")
                # One-byte varlen length: value << 1 (tags are at most 32 chars, so one byte suffices).
                parts.append(bytes((len(raw) << 1,)) + raw)
            parts.append(_U64.pack(len(ivs)))
            parts.extend(_I64X2.pack(s, e) for s, e in ivs)
        return b"".join(parts)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> MySQLGtidSet:
        """Decode the binary form; the buffer must hold exactly one encoded set."""
        out, used = cls.decode_prefix(data)
        if used != len(data):
            raise GtidError(f"GTID set encoding has {len(data) - used} trailing bytes after {used} bytes")
        return out

    @classmethod
    def decode_prefix(cls, data: bytes | bytearray | memoryview) -> tuple[MySQLGtidSet, int]:
        """Decode a binary GTID set at the start of ``data``; return it and the bytes consumed."""
        buf = bytes(data)
        size = len(buf)
        if size < 8:
            raise GtidError(f"GTID set encoding is {size} bytes, shorter than its 8-byte header")
        head = _U64.unpack_from(buf, 0)[0]
        fmt = head >> 56
        if fmt == FORMAT_UNTAGGED:
            n_sids = head
        elif fmt == FORMAT_TAGGED:
            n_sids = (head >> 8) & 0xFFFF_FFFF_FFFF
        else:
            raise GtidError(f"unknown GTID set encoding format {fmt} (expected 0 untagged or 1 tagged)")
        tagged = fmt == FORMAT_TAGGED
        out = cls()
        pos = 8
        for i in range(n_sids):
            if size - pos < 16 + 8:
                raise GtidError(f"GTID set encoding truncated in source {i} of {n_sids} at byte {pos}")
            uuid_hex = buf[pos:pos + 16].hex()
            pos += 16
            uuid = f"{uuid_hex[:8]}-{uuid_hex[8:12]}-{uuid_hex[12:16]}-{uuid_hex[16:20]}-{uuid_hex[20:]}"
            tag = ""
            if tagged:
                b = buf[pos]
                if b & 1:
                    raise GtidError(f"GTID tag length at byte {pos} is not a one-byte varlen integer")
                tlen = b >> 1
                if tlen > TAG_MAX_LENGTH or size - pos - 1 < tlen + 8:
                    raise GtidError(f"GTID tag of length {tlen} at byte {pos} is too long or truncated")
                try:
                    tag = _check_tag(buf[pos + 1:pos + 1 + tlen].decode("ascii"))
                except UnicodeDecodeError as e:
                    raise GtidError(f"GTID tag at byte {pos} is not ASCII") from e
                pos += 1 + tlen
            n_iv = _U64.unpack_from(buf, pos)[0]
            pos += 8
            if size - pos < 16 * n_iv:
                raise GtidError(f"GTID set encoding truncated: {n_iv} intervals of {uuid} need "
                                f"{16 * n_iv} bytes, {size - pos} left")
            ivs = out._sets.setdefault((uuid, tag), [])
            last = 0
            for _ in range(n_iv):
                start, end = _I64X2.unpack_from(buf, pos)
                pos += 16
                # Same rule as the server: strictly increasing, non-empty, positive intervals.
                if start <= last or end <= start:
                    raise GtidError(f"malformed GTID interval [{start}, {end}) for {uuid} at byte {pos - 16}")
                last = end
                _insert(ivs, start, end)
        return out, pos


class MariaGtidPosition:
    """A MariaDB GTID position: at most one domain-server-seq GTID per replication domain."""

    __slots__ = ("_by_domain",)

    def __init__(self, text: str | None = None) -> None:
        self._by_domain: dict[int, tuple[int, int]] = {}
        if text:
            for part in text.split(","):
                p = part.strip()
                if not p:
                    continue
                m = _MARIA_RE.fullmatch(p)
                if not m:
                    raise GtidError(f"invalid MariaDB GTID {p!r}: expected domain-server-sequence")
                domain, server, seq = (int(g) for g in m.groups())
                if domain in self._by_domain:
                    raise GtidError(f"MariaDB GTID position {text.strip()!r} names domain {domain} twice")
                self.update(domain, server, seq)

    @classmethod
    def parse(cls, text: str) -> MariaGtidPosition:
        return cls(text)

    def update(self, domain: int, server: int, seq: int) -> None:
        if not (0 <= domain < 1 << 32 and 0 <= server < 1 << 32 and 0 <= seq < 1 << 64):
            raise GtidError(f"MariaDB GTID {domain}-{server}-{seq} out of range (u32-u32-u64)")
        self._by_domain[domain] = (server, seq)

    def get(self, domain: int) -> tuple[int, int] | None:
        """(server_id, seq) last seen in the domain."""
        return self._by_domain.get(domain)

    def gtids(self) -> Iterable[tuple[int, int, int]]:
        return [(d, s, q) for d, (s, q) in sorted(self._by_domain.items())]

    def copy(self) -> MariaGtidPosition:
        out = MariaGtidPosition()
        out._by_domain = dict(self._by_domain)
        return out

    def __bool__(self) -> bool:
        return bool(self._by_domain)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MariaGtidPosition):
            return NotImplemented
        return self._by_domain == other._by_domain

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __str__(self) -> str:
        return ",".join(f"{d}-{s}-{q}" for d, s, q in self.gtids())

    def __repr__(self) -> str:
        return f"MariaGtidPosition({str(self)!r})"
