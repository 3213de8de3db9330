"""Helpers for the fixture-driven decoder tests (test_fixtures.py, test_vectors.py, test_fuzz.py).

Everything here reads the *fixture files* (MANIFEST.md, mysqlbinlog dumps, SHOW BINLOG EVENTS output,
vector sidecars): expected values always come from those texts, never from running the decoder.

Fixture root: $CANAL_FIXTURES, else ../shared/fixtures beside the repository. When it is missing the tests
FAIL (never skip) with a message that says where they looked.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import struct
import zlib
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from canal_core.binlog.constants import ColumnType as CT
from canal_core.parse.model import ColumnMeta, TableMeta

# The table of mysql-cdc-rs tests/events/5.7/31_update_rows_v2 (its sql.sql): the binlog carries no column names.
BOXERCRAB = TableMeta("default", "boxercrab", (
    ColumnMeta("id", "int", "int(10) unsigned", nullable=False, unsigned=True, is_key=True),
    ColumnMeta("varchar_l", "varchar", "varchar(100)", nullable=False, charset="utf8mb4", collation_id=45),
    ColumnMeta("varchar_s", "varchar", "varchar(40)", nullable=False, charset="utf8mb4", collation_id=45),
    ColumnMeta("text_s", "text", "text", nullable=False, charset="utf8mb4", collation_id=45),
    ColumnMeta("text_m", "mediumtext", "mediumtext", nullable=False, charset="utf8mb4", collation_id=45),
    ColumnMeta("text_l", "longtext", "longtext", nullable=False, charset="utf8mb4", collation_id=45),
    ColumnMeta("num_float", "float", "float", nullable=False),
    ColumnMeta("num_double", "double", "double", nullable=False),
    ColumnMeta("num_decimal", "decimal", "decimal(10,4)"),
))

# ---- locating the fixtures -------------------------------------------------------------------------

_DEFAULT_ROOT = Path(__file__).resolve().parents[3] / "shared" / "fixtures"


def fixtures_root() -> Path:
    env = os.environ.get("CANAL_FIXTURES")
    return Path(env) if env else _DEFAULT_ROOT


def fixtures_available() -> bool:
    return (fixtures_root() / "MANIFEST.md").is_file()


MISSING = "FIXTURES-MISSING"


def require_fixtures() -> Path:
    """The fixture root, or a test failure (never a skip) naming where the fixtures were looked for."""
    root = fixtures_root()
    if not (root / "MANIFEST.md").is_file():
        pytest.fail(
            f"binlog fixtures not found: expected {root / 'MANIFEST.md'} "
            f"(set CANAL_FIXTURES to the directory holding MANIFEST.md; default is {_DEFAULT_ROOT})",
            pytrace=False,
        )
    return root


def fixture_path(rel: str) -> Path:
    return require_fixtures() / rel


def read_text(path: Path) -> str:
    """Fixture text: UTF-8, or UTF-16LE with BOM (mysql-cdc-rs 8.0 files), CRLF normalized to LF."""
    data = path.read_bytes()
    if data[:2] == b"\xff\xfe":
        text = data[2:].decode("utf-16-le")
    elif data[:3] == b"\xef\xbb\xbf":
        text = data[3:].decode("utf-8")
    else:
        text = data.decode("utf-8")
    return text.replace("\r\n", "\n").replace("\r", "\n")


# ---- MANIFEST.md ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ManifestRow:
    file: str
    flavor: str
    server_version: str
    checksum: str
    size: int | None
    events: int | None
    types: dict[int, int]
    inner_types: dict[int, int]
    column_types: str
    notes: str

    @property
    def corrupt(self) -> bool:
        return self.events is None


_COUNT_RE = re.compile(r"(\d+)\((\d+)\)")


def _counts(text: str) -> dict[int, int]:
    return {int(t): int(n) for t, n in _COUNT_RE.findall(text)}


def manifest_rows() -> list[ManifestRow]:
    """Rows of MANIFEST.md's per-file table (binary binlog files), in order. [] when fixtures are missing."""
    if not fixtures_available():
        return []
    out: list[ManifestRow] = []
    in_table = False
    for line in read_text(fixtures_root() / "MANIFEST.md").splitlines():
        if line.startswith("| file | flavor |"):
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            break
        if not in_table or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 9:
            continue
        types_cell = cells[6]
        outer, _, inner = types_cell.partition("; inside payload:")
        out.append(ManifestRow(
            file=cells[0], flavor=cells[1], server_version=cells[2].removesuffix(" (readable text)"),
            checksum=cells[3], size=int(cells[4]) if cells[4].isdigit() else None,
            events=int(cells[5]) if cells[5].isdigit() else None,
            types=_counts(outer), inner_types=_counts(inner), column_types=cells[7], notes=cells[8]))
    return out


# ---- an independent header walker (the MANIFEST's own method) --------------------------------------


@dataclass(frozen=True)
class RawHeader:
    offset: int
    timestamp: int
    type_code: int
    server_id: int
    length: int
    log_pos: int
    flags: int


_HDR = struct.Struct("<IBIIIH")


def walk_headers(data: bytes) -> list[RawHeader]:
    """Walk 19-byte event headers from offset 4 (no decoding)."""
    out = []
    p = 4
    while p + 19 <= len(data):
        ts, tc, sid, ln, lp, fl = _HDR.unpack_from(data, p)
        if ln < 19:
            break
        out.append(RawHeader(p, ts, tc, sid, ln, lp, fl))
        p += ln
    return out


def load_binlog_bytes(path: Path) -> bytes:
    if path.suffix == ".gz":
        import gzip

        return gzip.decompress(path.read_bytes())
    return path.read_bytes()


# ---- synthetic event wrapping ----------------------------------------------------------------------


def make_event(type_code: int, body: bytes, *, checksum: bool, timestamp: int = 0, server_id: int = 1,
               log_pos: int = 0, flags: int = 0, header_extra: bytes = b"") -> bytes:
    """A full event around a body: v4 common header (+ header_extra, e.g. Google's 8-byte group id),
    body, and a CRC32 trailer when ``checksum``."""
    length = 19 + len(header_extra) + len(body) + (4 if checksum else 0)
    raw = _HDR.pack(timestamp, type_code, server_id, length, log_pos, flags) + header_extra + body
    if checksum:
        raw += struct.pack("<I", zlib.crc32(raw))
    return raw


def packed(n: int) -> bytes:
    """``n`` as a MySQL packed (length-encoded) integer: one byte below 251, else 0xFC/0xFD/0xFE and 2/3/8 bytes."""
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little")
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + n.to_bytes(8, "little")


def fix_length_and_crc(raw: bytes, *, checksum: bool) -> bytes:
    """Rewrite event_length to len(raw) and (optionally) recompute the CRC32 trailer."""
    b = bytearray(raw)
    if len(b) < 19:
        return bytes(b)
    struct.pack_into("<I", b, 9, len(b))
    if checksum and len(b) >= 23:
        struct.pack_into("<I", b, len(b) - 4, zlib.crc32(bytes(b[:-4])))
    return bytes(b)


# ---- mysqlbinlog dumps ----------------------------------------------------------------------------


@dataclass
class DumpEvent:
    position: int | None
    end_log_pos: int
    server_id: int
    when: str
    crc: str | None
    desc: str | None = None
    lines: list[str] = field(default_factory=list)

    # -- derived --
    @property
    def kind(self) -> str:
        d = self.desc or ""
        for prefix, kind in _KINDS:
            if d.startswith(prefix):
                return kind
        return "?"

    @property
    def comment_lines(self) -> list[str]:
        """The '# ...' lines right after the description (Previous-GTIDs set, Rows_query text)."""
        out = []
        for line in self.lines:
            if line.startswith("# ") or line == "#":
                out.append(line[2:])
            elif line.strip() == "":
                continue
            else:
                break
        return out

    @property
    def sql_lines(self) -> list[str]:
        return [line for line in self.lines if not line.startswith("#")]

    def statement(self) -> str | None:
        """The statement of a Query event: the last '/*!*/;'-terminated chunk, minus the newlines
        mysqlbinlog puts around it."""
        lines = []
        for line in self.lines:
            if "/* added by mysqlbinlog */" in line or line.startswith("DELIMITER ;"):
                break  # mysqlbinlog's own trailer after the last event
            lines.append(line)
        text = "\n".join(lines)
        chunks = text.split("/*!*/;")
        if len(chunks) < 2:
            return None
        last = chunks[-2]
        if last.startswith("\n"):
            last = last[1:]
        if last.endswith("\n"):
            last = last[:-1]
        return last

    def set_values(self) -> dict[str, str]:
        """Session settings mysqlbinlog prints before a statement (SET TIMESTAMP=..., use `db`)."""
        out: dict[str, str] = {}
        for line in self.lines:
            m = re.match(r"^SET TIMESTAMP=(\d+)(?:\.\d+)?/\*!\*/;", line)
            if m:
                out["timestamp"] = m.group(1)
            m = re.match(r"^use `(.*)`/\*!\*/;", line)
            if m:
                out["use"] = m.group(1)
            m = re.search(r"SET @@session\.(original_server_version|immediate_server_version)=(\d+)", line)
            if m:
                out[m.group(1)] = m.group(2)
            m = re.search(r"SET @@SESSION\.GTID_NEXT= '([^']*)'", line)
            if m and "added by mysqlbinlog" not in line:
                out["gtid_next"] = m.group(1)
        return out

    def fields(self) -> dict[str, str]:
        """key=value pairs of the description (thread_id=..., last_committed=..., Xid = N)."""
        d = self.desc or ""
        out = dict(re.findall(r"(\w+)=(\S+)", d))
        m = re.search(r"Xid = (\d+)", d)
        if m:
            out["Xid"] = m.group(1)
        return out

    def rows(self) -> list[DumpRow]:
        out: list[DumpRow] = []
        for line in self.lines:
            if not line.startswith("###"):
                continue
            s = line[3:].strip()
            if s.startswith("INSERT INTO"):
                out.append(DumpRow("write", s[len("INSERT INTO"):].strip()))
            elif s.startswith("UPDATE "):
                out.append(DumpRow("update", s[len("UPDATE"):].strip()))
            elif s.startswith("DELETE FROM"):
                out.append(DumpRow("delete", s[len("DELETE FROM"):].strip()))
            elif s in ("SET", "WHERE"):
                out[-1].images.append({})
            else:
                m = _COL_RE.match(s)
                if not m:
                    raise AssertionError(f"unparsed mysqlbinlog row line: {line!r}")
                out[-1].images[-1][int(m.group(1))] = DumpValue(
                    text=m.group(2).strip(), type_name=m.group(3), meta=_int_or_none(m.group(4)),
                    nullable=_int_or_none(m.group(5)), is_null=_int_or_none(m.group(6)))
        return out


@dataclass
class DumpValue:
    text: str
    type_name: str | None
    meta: int | None
    nullable: int | None
    is_null: int | None


@dataclass
class DumpRow:
    kind: str
    table: str
    images: list[dict[int, DumpValue]] = field(default_factory=list)


def _int_or_none(s: str | None) -> int | None:
    return int(s) if s is not None else None


_COL_RE = re.compile(
    r"^@(\d+)=(.*?)(?:\s*/\* ([A-Z_0-9]+(?:\([^)]*\))?) meta=(\d+) nullable=(\d) is_null=(\d) \*/)?\s*$")

_KINDS = [
    ("Start:", "fde"), ("Query", "query"), ("Execute_load_query", "execute_load_query"),
    ("Begin_load_query", "begin_load_query"), ("Table_map:", "table_map"),
    ("Write_rows", "write"), ("Update_rows", "update"), ("Delete_rows", "delete"), ("Xid", "xid"),
    ("Rotate to", "rotate"), ("GTID\t", "gtid"), ("Anonymous_GTID", "anonymous_gtid"),
    ("Previous-GTIDs", "previous_gtids"), ("Stop", "stop"), ("Intvar", "intvar"), ("Rand", "rand"),
    ("User_var", "user_var"), ("Rows_query", "rows_query"), ("Gtid list", "gtid_list"),
    ("Binlog checkpoint", "binlog_checkpoint"), ("GTID ", "maria_gtid"),
]

_AT_RE = re.compile(r"^# at (\d+)\s*$")
_HEADER_RE = re.compile(
    r"^#(\d{6}\s+\d{1,2}:\d{2}:\d{2}) server id (\d+)\s+end_log_pos (\d+)(?:\s+CRC32 0x([0-9a-f]+))?\s*(.*)$")
_HEX_RE = re.compile(r"^#\s+[0-9a-f]+\s+[0-9a-f]{2}(\s|$)")


def parse_mysqlbinlog(text: str) -> list[DumpEvent]:
    """Events of `mysqlbinlog [-v|-vv] [--hexdump]` output, with their '# at' positions."""
    events: list[DumpEvent] = []
    pending: list[int] = []
    cur: DumpEvent | None = None
    awaiting_desc = False
    for line in text.split("\n"):
        m = _AT_RE.match(line)
        if m:
            pending.append(int(m.group(1)))
            cur = None
            continue
        m = _HEADER_RE.match(line)
        if m:
            rest = m.group(5).strip()
            cur = DumpEvent(position=pending.pop(0) if pending else None, end_log_pos=int(m.group(3)),
                            server_id=int(m.group(2)), when=m.group(1), crc=m.group(4), desc=rest or None)
            events.append(cur)
            awaiting_desc = not rest
            continue
        if cur is None:
            continue
        if awaiting_desc:
            if line.startswith("# Position") or _HEX_RE.match(line) or line.strip() in ("#", ""):
                continue
            if line.startswith("#"):
                cur.desc = line.lstrip("#").strip()
                awaiting_desc = False
                continue
            awaiting_desc = False
        cur.lines.append(line)
    return events


# ---- SHOW BINLOG EVENTS output ---------------------------------------------------------------------


@dataclass
class ShowRow:
    log_name: str
    pos: int
    event_type: str
    server_id: int
    end_log_pos: int
    info: str


def parse_show_binlog_events(text: str) -> list[ShowRow]:
    rows: list[ShowRow] = []
    cur: list[str] | None = None
    for line in text.split("\n"):
        m = re.match(r"^\| (\S+)\s*\|\s*(\d+) \| (\w+)\s*\|\s*(\d+) \|\s*(\d+) \|\s?(.*)$", line)
        if m:
            cur = [m.group(1), m.group(2), m.group(3), m.group(4), m.group(5), m.group(6)]
            rows.append(ShowRow(cur[0], int(cur[1]), cur[2], int(cur[3]), int(cur[4]), cur[5]))
        elif rows and cur is not None and not line.startswith("+") and not line.startswith("| Log_name"):
            rows[-1].info += "\n" + line
        if line.startswith("+") or re.match(r"^\d+ rows? in set", line):
            cur = None
    for r in rows:
        r.info = re.sub(r"\s*\|\s*$", "", r.info.rstrip())
    return rows


def squash(s: str) -> str:
    """Whitespace-normalized text (table padding and line breaks of console output differ)."""
    return " ".join(s.split())


# ---- mysqlbinlog value text vs decoded values -------------------------------------------------------

# mysqlbinlog -vv type names -> binlog column types
DUMP_TYPE_NAMES: dict[str, set[int]] = {
    "TINYINT": {CT.TINY}, "SHORTINT": {CT.SHORT}, "MEDIUMINT": {CT.INT24}, "INT": {CT.LONG},
    "LONGINT": {CT.LONGLONG}, "VARSTRING": {CT.VARCHAR, CT.VAR_STRING}, "STRING": {CT.STRING},
    "DATE": {CT.DATE, CT.NEWDATE}, "TIMESTAMP": {CT.TIMESTAMP, CT.TIMESTAMP2},
    "DATETIME": {CT.DATETIME, CT.DATETIME2}, "DECIMAL": {CT.NEWDECIMAL}, "FLOAT": {CT.FLOAT},
    "DOUBLE": {CT.DOUBLE}, "YEAR": {CT.YEAR}, "TIME": {CT.TIME, CT.TIME2},
}


def unquote_mysqlbinlog(text: str) -> bytes:
    """A quoted mysqlbinlog string value: bytes > 0x1f except ' and \\ as is, the rest as \\xHH."""
    assert text.startswith("'") and text.endswith("'"), text
    body = text[1:-1].encode("utf-8", "surrogateescape")
    out = bytearray()
    i = 0
    while i < len(body):
        if body[i:i + 2] == b"\\x" and i + 4 <= len(body):
            out.append(int(body[i + 2:i + 4], 16))
            i += 4
        else:
            out.append(body[i])
            i += 1
    return bytes(out)


def value_matches(decoded: Any, text: str) -> bool:
    """Does a decoded value equal what mysqlbinlog -v printed for it?"""
    if text == "NULL":
        return decoded is None
    if decoded is None:
        return False
    if text.startswith("'"):
        want = unquote_mysqlbinlog(text)
        if isinstance(decoded, bytes | bytearray):
            return bytes(decoded) == want
        if isinstance(decoded, str):
            return decoded.encode("utf-8") == want
        if isinstance(decoded, dt.datetime):
            return mysql_datetime_text(decoded) == want.decode()
        if isinstance(decoded, dt.date):
            # mysqlbinlog prints DATE as YYYY:MM:DD
            return want.decode().replace(":", "-") == decoded.isoformat()
        return False
    m = re.match(r"^(-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)(?: \((\d+)\))?$", text)
    if not m:
        return str(decoded) == text
    if isinstance(decoded, dt.datetime):  # old TIMESTAMP prints the epoch seconds
        return decoded.tzinfo is not None and int(decoded.timestamp()) == int(m.group(1))
    if isinstance(decoded, bool):
        return False
    if isinstance(decoded, int):
        cands = {int(m.group(1))} if "." not in m.group(1) and "e" not in m.group(1) else set()
        if m.group(2):
            cands.add(int(m.group(2)))
        return decoded in cands
    if isinstance(decoded, Decimal):
        return decoded == Decimal(m.group(1))
    if isinstance(decoded, float):
        return abs(decoded - float(m.group(1))) <= 1e-6 * max(1.0, abs(decoded))
    return False


def mysql_datetime_text(v: dt.datetime, fsp: int = 0) -> str:
    text = f"{v.year:04d}-{v.month:02d}-{v.day:02d} {v.hour:02d}:{v.minute:02d}:{v.second:02d}"
    if fsp:
        text += "." + f"{v.microsecond:06d}"[:fsp]
    return text


def as_text(v: Any) -> Any:
    """bytes -> str (UTF-8) for comparisons against SQL literals; other values unchanged."""
    if isinstance(v, bytes | bytearray):
        return bytes(v).decode("utf-8")
    return v
