"""End-to-end decoding of every real binlog file in the shared fixtures (see fixtures README/MANIFEST).

Expected values come only from the fixture texts: MANIFEST.md (counts, versions, checksum), the
originating projects' mysqlbinlog dumps (dump.txt, plaintext-*), SHOW BINLOG EVENTS output (show.txt),
the SQL they ran (sql.sql, gen_test_data.sql) and facts their tests/READMEs state (cited inline).
"""

from __future__ import annotations

import collections
import datetime as dt
import re
import zlib
from decimal import Decimal
from pathlib import Path
from typing import Any

import pymysql.charset
import pytest
from fixture_support import (
    DUMP_TYPE_NAMES,
    MISSING,
    DumpEvent,
    ManifestRow,
    as_text,
    fixtures_available,
    fixtures_root,
    load_binlog_bytes,
    manifest_rows,
    parse_mysqlbinlog,
    parse_show_binlog_events,
    read_text,
    require_fixtures,
    squash,
    value_matches,
    walk_headers,
)

from canal_core.binlog import (
    ABSENT,
    BadMagicError,
    BinlogDecoder,
    BinlogError,
    FileFramer,
    UnknownEventError,
    read_file,
)
from canal_core.binlog import events as E
from canal_core.binlog.constants import CHECKSUM_CRC32, CHECKSUM_OFF, CHECKSUM_UNDEF
from canal_core.binlog.values import decimal_decoder

# ---- MANIFEST-driven end-to-end decoding ------------------------------------------------------------

_ROWS = manifest_rows()
_VALID = [r for r in _ROWS if not r.corrupt] or [MISSING]
_CORRUPT = [r for r in _ROWS if r.corrupt]


def _row_id(r: ManifestRow | str) -> str:
    return r if isinstance(r, str) else r.file


def _decode_file(path: Path, **kw: Any) -> tuple[BinlogDecoder, list[E.Event]]:
    dec = BinlogDecoder(**kw)
    return dec, list(read_file(path, dec))


def _expected_alg(checksum: str) -> int:
    if checksum.startswith("CRC32"):
        return CHECKSUM_CRC32
    if "pre-5.6" in checksum:
        return CHECKSUM_UNDEF  # no algorithm byte at all
    assert checksum.startswith("NONE"), checksum
    return CHECKSUM_OFF


@pytest.mark.parametrize("row", _VALID, ids=_row_id)
def test_manifest_file_decodes(row: ManifestRow | str) -> None:
    """Every event decodes; counts per type code (and inside TRANSACTION_PAYLOAD) match MANIFEST.md."""
    root = require_fixtures()
    assert isinstance(row, ManifestRow)
    path = root / row.file
    data = load_binlog_bytes(path)
    assert len(data) == row.size
    headers = walk_headers(data)
    assert headers and headers[-1].offset + headers[-1].length == len(data), "fixture is not whole"

    dec, events = _decode_file(path)

    assert len(events) == row.events
    assert dict(collections.Counter(e.type_code for e in events)) == row.types
    inner = [i for e in events if isinstance(e, E.TransactionPayloadEvent) for i in e.events]
    assert dict(collections.Counter(i.type_code for i in inner)) == row.inner_types
    assert all(i.log_pos == 0 for i in inner), "README: inner events of a TRANSACTION_PAYLOAD have log_pos 0"
    assert dec.skipped_unknown == 0
    # Aurora's padding (type 100) is unknown to the decoder but flagged ignorable: skipped as such
    assert dec.skipped_ignorable == row.types.get(100, 0)
    assert all(isinstance(e, E.IgnorableEvent) for e in events if e.type_code == 100)

    # positions and lengths are the file's own framing
    assert [(e.position, e.length) for e in events] == [(h.offset, h.length) for h in headers]
    name = path.name.removesuffix(".gz")
    assert {e.file for e in events} == {name}

    fdes = [e for e in events if isinstance(e, E.FormatDescriptionEvent)]
    fde = fdes[0]
    assert events[0] is fde
    assert fde.server_version == row.server_version
    assert fde.flavor == row.flavor.lower()
    assert fde.binlog_version == 4
    assert fde.checksum_alg == _expected_alg(row.checksum)
    if "in-use flag set" in row.notes:
        assert fde.flags & 0x1


def test_manifest_lists_every_binary_file() -> None:
    """MANIFEST.md is the list the parametrized test runs over: it must not be empty."""
    require_fixtures()
    assert len([r for r in _ROWS if not r.corrupt]) >= 59
    assert all((fixtures_root() / r.file).is_file() for r in _ROWS)


def test_sakila_gz_counts_osheroff() -> None:
    """osheroff BinaryLogFileReaderIntegrationTest: sakila.gz 1462, compressed 5, checksum-none 191,
    checksum-crc32 303; apecloud parse_file_tests.rs: mysql-bin.000057 8, mysql-bin.000080 37."""
    root = require_fixtures()
    expect = {
        "osheroff-mysql-binlog-connector-java/src/test/resources/mysql-bin.sakila.gz": 1462,
        "osheroff-mysql-binlog-connector-java/src/test/resources/mysql-bin.compressed": 5,
        "osheroff-mysql-binlog-connector-java/src/test/resources/mysql-bin.checksum-none": 191,
        "osheroff-mysql-binlog-connector-java/src/test/resources/mysql-bin.checksum-crc32": 303,
        "apecloud-mysql-binlog-connector-rust/tests/parse_file_tests/mysql-bin.000057": 8,
        "apecloud-mysql-binlog-connector-rust/tests/parse_file_tests/mysql-bin.000080": 37,
    }
    got = {rel: len(_decode_file(root / rel)[1]) for rel in expect}
    assert got == expect


# ---- unknown events (Aurora padding, type 100) -------------------------------------------------------

AURORA = "osheroff-mysql-binlog-connector-java/src/test/resources/mysql-bin.aurora-padding"


def test_aurora_padding_is_skipped_as_ignorable() -> None:
    """The padding event (type 100) carries LOG_EVENT_IGNORABLE_F: a reader that does not know the type skips
    it, as MySQL's replica does (osheroff's SHOW BINLOG EVENTS lists it as Ignorable)."""
    path = fixture_path_or_fail(AURORA)
    headers = walk_headers(path.read_bytes())
    pad = next(h for h in headers if h.type_code == 100)
    assert pad.flags & 0x80
    dec, events = _decode_file(path)
    assert [(e.position, e.type_code) for e in events] == [(h.offset, h.type_code) for h in headers]
    ignored = [e for e in events if e.type_code == 100]
    assert len(ignored) == 1 and isinstance(ignored[0], E.IgnorableEvent)
    assert len(ignored[0].data) == pad.length - 19 - 4  # body without header and CRC32
    assert dec.skipped_ignorable == 1 and dec.skipped_unknown == 0
    assert isinstance(events[-1], E.QueryEvent)  # the events behind it decode as usual


def _without_ignorable_flag(data: bytes, at: int) -> bytes:
    """The file with LOG_EVENT_IGNORABLE_F cleared in the event at ``at`` (its CRC32 recomputed)."""
    b = bytearray(data)
    length = int.from_bytes(b[at + 9:at + 13], "little")
    flags = int.from_bytes(b[at + 17:at + 19], "little") & ~0x80
    b[at + 17:at + 19] = flags.to_bytes(2, "little")
    end = at + length
    b[end - 4:end] = zlib.crc32(bytes(b[at:end - 4])).to_bytes(4, "little")
    return bytes(b)


def test_unknown_event_without_ignorable_flag_is_a_typed_error(tmp_path: Path) -> None:
    src = fixture_path_or_fail(AURORA)
    data = src.read_bytes()
    pad = next(h for h in walk_headers(data) if h.type_code == 100)
    path = tmp_path / src.name
    path.write_bytes(_without_ignorable_flag(data, pad.offset))
    seen: list[E.Event] = []
    with pytest.raises(UnknownEventError) as ei:
        for ev in read_file(path, BinlogDecoder()):
            seen.append(ev)
    err = ei.value
    assert err.type_code == 100
    assert (err.file, err.position) == ("mysql-bin.aurora-padding", pad.offset)
    assert f"mysql-bin.aurora-padding:{pad.offset}" in str(err)
    assert [e.position for e in seen] == [h.offset for h in walk_headers(data) if h.offset < pad.offset]
    # asked to, the decoder skips it as an UnknownEvent (counted) and keeps going
    dec, events = _decode_file(path, skip_unknown_events=True)
    assert dec.skipped_unknown == 1 and dec.skipped_ignorable == 0
    assert [type(e) for e in events if e.type_code == 100] == [E.UnknownEvent]
    assert isinstance(events[-1], E.QueryEvent)


def fixture_path_or_fail(rel: str) -> Path:
    return require_fixtures() / rel


# ---- negative samples ---------------------------------------------------------------------------

NEGATIVE = [
    "canal/parse/src/test/resources/binlog/tsdb/mysql-bin.000001",
    "apecloud-mysql-binlog-connector-rust/tests/parse_file_tests/non-binlog",
]


@pytest.mark.parametrize("rel", NEGATIVE)
def test_negative_sample_bad_magic(rel: str) -> None:
    path = fixture_path_or_fail(rel)
    with pytest.raises(BadMagicError) as ei:
        list(read_file(path))
    assert ei.value.position == 0
    assert ei.value.file == path.name
    with pytest.raises(BadMagicError):
        FileFramer(path.name).feed(path.read_bytes())
    # started past the magic, the reader still checks it (it needs the FORMAT_DESCRIPTION_EVENT)
    with pytest.raises(BinlogError):
        list(read_file(path, start_position=120))


def test_corrupt_canal_file_is_in_manifest() -> None:
    require_fixtures()
    assert [r.file for r in _CORRUPT] == [NEGATIVE[0]]
    data = (fixtures_root() / NEGATIVE[0]).read_bytes()
    assert data[:6] == bytes.fromhex("efbfbd62696e")  # as MANIFEST.md says


# ---- mysqlbinlog dumps vs decoded events ---------------------------------------------------------

_KIND_TYPES: dict[str, set[int]] = {
    "fde": {15}, "query": {2}, "execute_load_query": {18}, "begin_load_query": {17}, "table_map": {19},
    "write": {20, 23, 30}, "update": {21, 24, 31, 39}, "delete": {22, 25, 32}, "xid": {16}, "rotate": {4},
    "gtid": {33}, "anonymous_gtid": {34}, "previous_gtids": {35}, "stop": {3}, "intvar": {5}, "rand": {13},
    "user_var": {14}, "rows_query": {29}, "gtid_list": {163}, "binlog_checkpoint": {161}, "maria_gtid": {162},
}


def _dump_pairs() -> list[tuple[str, str]]:
    if not fixtures_available():
        return [(MISSING, MISSING)]
    root = fixtures_root()
    pairs = []
    for d in sorted((root / "mysql-cdc-rs/tests/events/5.7").iterdir()):
        pairs.append((str((d / "dump.txt").relative_to(root)), str((d / "log.bin").relative_to(root))))
    for d in sorted((root / "mysql-cdc-rs/tests/events/8.0").iterdir()):
        if d.name == "02_query_bigger":
            continue  # its dump.txt holds only the command line; show.txt covers it
        binary = next(p for p in d.iterdir() if p.name.startswith("binlog."))
        pairs.append((str((d / "dump.txt").relative_to(root)), str(binary.relative_to(root))))
    z = root / "zalora-binlog-parser/data/fixtures"
    for p in sorted(z.glob("plaintext-mysql-bin.*")):
        pairs.append((str(p.relative_to(root)), str((z / p.name.removeprefix("plaintext-")).relative_to(root))))
    return pairs


def _charset_collation_name(cid: int) -> str:
    return pymysql.charset.charset_by_id(cid).collation.replace("utf8mb3", "utf8")


def _check_rows(d: DumpEvent, ev: E.RowsEvent, problems: list[str]) -> None:
    where = f"@{d.position} {d.kind}"
    drows = d.rows()
    if not drows and not any(line.startswith("###") for line in d.lines) and "BINLOG '" in d.lines:
        return  # dump made without -v: no row text to compare
    if ev.rows is None:
        problems.append(f"{where}: rows not decoded")
        return
    if len(drows) != len(ev.rows):
        problems.append(f"{where}: {len(ev.rows)} rows decoded, dump shows {len(drows)}")
        return
    assert ev.table is not None
    cols = ev.table.columns
    for i, (drow, row) in enumerate(zip(drows, ev.rows, strict=True)):
        images = [row] if ev.kind != "update" else list(row)
        if drow.kind != ev.kind or len(drow.images) != len(images):
            problems.append(f"{where} row {i}: dump {drow.kind}/{len(drow.images)} images, decoded {ev.kind}")
            continue
        for k, (dimg, img) in enumerate(zip(drow.images, images, strict=True)):
            present = {n + 1 for n, v in enumerate(img) if v is not ABSENT}
            if set(dimg) != present:
                problems.append(f"{where} row {i} image {k}: columns {sorted(present)}, dump {sorted(dimg)}")
            for n, dv in dimg.items():
                if n > len(img):
                    continue
                col = cols[n - 1]
                got = img[n - 1]
                if not value_matches(got, dv.text):
                    problems.append(f"{where} row {i} image {k} @{n} ({col.type_name}): "
                                    f"decoded {got!r}, mysqlbinlog {dv.text}")
                if dv.type_name:
                    base = dv.type_name.split("(")[0]
                    if base in DUMP_TYPE_NAMES and col.type not in DUMP_TYPE_NAMES[base]:
                        problems.append(f"{where} @{n}: column type {col.type_name}, mysqlbinlog {dv.type_name}")
                if dv.meta is not None and col.meta != dv.meta:
                    problems.append(f"{where} @{n}: column meta {col.meta}, mysqlbinlog meta={dv.meta}")
                if dv.nullable is not None and col.nullable != bool(dv.nullable):
                    problems.append(f"{where} @{n}: nullable {col.nullable}, mysqlbinlog nullable={dv.nullable}")
                if dv.is_null is not None and (got is None) != bool(dv.is_null):
                    problems.append(f"{where} @{n}: decoded {got!r}, mysqlbinlog is_null={dv.is_null}")


def _check_user_var(d: DumpEvent, ev: E.UserVarEvent, problems: list[str]) -> None:
    where = f"@{d.position} user_var"
    text = "\n".join(d.sql_lines)
    m = re.search(r"SET @`(.+?)`:=(.*)/\*!\*/;", text)
    if not m:
        problems.append(f"{where}: unparsed dump text {text!r}")
        return
    name, val = m.group(1), m.group(2).strip()
    if ev.var_name != name:
        problems.append(f"{where}: name {ev.var_name!r}, dump {name!r}")
    if val == "NULL":
        if not ev.is_null:
            problems.append(f"{where}: decoded non-NULL, dump NULL")
        return
    mm = re.match(r"^_(\w+) 0x([0-9A-Fa-f]*) COLLATE `(\w+)`$", val)
    if mm:  # STRING_RESULT
        if ev.value_type != 0 or ev.value != bytes.fromhex(mm.group(2)):
            problems.append(f"{where}: decoded type {ev.value_type} value {ev.value!r}, dump {val}")
        if ev.charset is None or _charset_collation_name(ev.charset) != mm.group(3):
            problems.append(f"{where}: charset {ev.charset}, dump collation {mm.group(3)}")
    elif re.match(r"^-?\d+$", val):  # INT_RESULT
        assert ev.value is not None
        got = int.from_bytes(ev.value, "little", signed=not ev.unsigned)
        if ev.value_type != 2 or got != int(val):
            problems.append(f"{where}: decoded type {ev.value_type} value {got}, dump {val}")
    elif re.match(r"^-?\d+\.\d+$", val):  # DECIMAL_RESULT: precision, scale, binary decimal
        assert ev.value is not None
        got_d = decimal_decoder(ev.value[0], ev.value[1])(ev.value[2:])
        if ev.value_type != 4 or format(got_d, "f") != val:
            problems.append(f"{where}: decoded type {ev.value_type} value {got_d}, dump {val}")
    else:
        problems.append(f"{where}: unhandled dump value {val!r}")


def _check_dump_event(d: DumpEvent, ev: E.Event, problems: list[str]) -> None:
    where = f"@{d.position} {d.kind}"
    kinds = _KIND_TYPES.get(d.kind)
    if kinds is None:
        problems.append(f"{where}: unknown mysqlbinlog description {d.desc!r}")
        return
    if ev.type_code not in kinds:
        problems.append(f"{where}: decoded type {ev.type_code} ({ev.name})")
        return
    if ev.log_pos != d.end_log_pos:
        problems.append(f"{where}: log_pos {ev.log_pos}, end_log_pos {d.end_log_pos}")
    if ev.server_id != d.server_id:
        problems.append(f"{where}: server_id {ev.server_id}, dump {d.server_id}")
    desc = d.desc or ""
    f = d.fields()
    sv = d.set_values()

    def expect(label: str, got: Any, want: Any) -> None:
        if got != want:
            problems.append(f"{where}: {label} decoded {got!r}, dump {want!r}")

    if isinstance(ev, E.FormatDescriptionEvent):
        m = re.search(r"binlog v (\d+), server v (\S+)", desc)
        assert m, desc
        expect("binlog_version", ev.binlog_version, int(m.group(1)))
        expect("server_version", ev.server_version, m.group(2))
    elif isinstance(ev, E.QueryEvent):
        expect("query", ev.query, d.statement())
        for key in ("thread_id", "exec_time", "error_code"):
            if key in f:
                expect(key, getattr(ev, key), int(f[key]))
        if "Xid" in f:
            expect("ddl_xid", ev.status.get("ddl_xid"), int(f["Xid"]))
        if "timestamp" in sv:
            expect("timestamp (SET TIMESTAMP)", ev.timestamp, int(sv["timestamp"]))
        if "use" in sv:
            expect("schema (use)", ev.schema, sv["use"])
    elif isinstance(ev, E.LoadEvent):
        if d.kind == "execute_load_query":
            # mysqlbinlog rewrites the file name part to the LOCAL temp file it writes the data to
            fname = re.compile(r"(?:LOCAL )?INFILE '[^']*'")
            expect("query", fname.sub("INFILE ?", ev.query or ""), fname.sub("INFILE ?", d.statement() or ""))
            if "use" in sv:
                expect("schema (use)", ev.schema, sv["use"])
            m = re.search(r"^# file_id: (\d+)", "\n".join(d.lines), re.M)
            if m:
                expect("file_id", ev.file_id, int(m.group(1)))
        else:
            m = re.search(r"file_id: (\d+)\s+block_len: (\d+)", desc)
            assert m, desc
            expect("file_id", ev.file_id, int(m.group(1)))
            expect("block_len", len(ev.data), int(m.group(2)))
    elif isinstance(ev, E.TableMapEvent):
        m = re.search(r"Table_map: `(.*)`\.`(.*)` mapped to number (\d+)", desc)
        assert m, desc
        expect("schema", ev.table.schema, m.group(1))
        expect("table", ev.table.table, m.group(2))
        expect("table_id", ev.table_id, int(m.group(3)))
    elif isinstance(ev, E.RowsEvent):
        m = re.search(r"table id (\d+) flags: (\S+)", desc)
        assert m, desc
        expect("table_id", ev.table_id, int(m.group(1)))
        expect("STMT_END_F", ev.stmt_end, m.group(2) == "STMT_END_F")
        _check_rows(d, ev, problems)
    elif isinstance(ev, E.XidEvent):
        expect("xid", ev.xid, int(f["Xid"]))
    elif isinstance(ev, E.RotateEvent):
        m = re.search(r"Rotate to (\S+)\s+pos: (\d+)", desc)
        assert m, desc
        expect("next_file", ev.next_file, m.group(1))
        expect("next_position", ev.next_position, int(m.group(2)))
    elif isinstance(ev, E.GtidEvent):
        for key, attr in (("last_committed", "last_committed"), ("sequence_number", "sequence_number"),
                          ("original_committed_timestamp", "original_commit_timestamp"),
                          ("immediate_commit_timestamp", "immediate_commit_timestamp"),
                          ("transaction_length", "transaction_length")):
            if key in f:
                expect(attr, getattr(ev, attr), int(f[key]))
        for key in ("original_server_version", "immediate_server_version"):
            if key in sv:
                expect(key, getattr(ev, key), int(sv[key]))
        if "gtid_next" in sv:
            expect("gtid", ev.gtid, sv["gtid_next"])
        expect("anonymous", ev.anonymous, d.kind == "anonymous_gtid")
    elif isinstance(ev, E.PreviousGtidsEvent):
        text = "".join(x.strip() for x in d.comment_lines)
        expect("gtid_set", ev.gtid_set, "" if text == "[empty]" else text)
    elif isinstance(ev, E.IntvarEvent):
        m = re.search(r"SET (LAST_INSERT_ID|INSERT_ID)=(\d+)", "\n".join(d.lines))
        assert m, d.lines
        expect("kind", ev.kind, 1 if m.group(1) == "LAST_INSERT_ID" else 2)
        expect("value", ev.value, int(m.group(2)))
    elif isinstance(ev, E.RandEvent):
        m = re.search(r"SET @@RAND_SEED1=(\d+), @@RAND_SEED2=(\d+)", "\n".join(d.lines))
        assert m, d.lines
        expect("seeds", (ev.seed1, ev.seed2), (int(m.group(1)), int(m.group(2))))
    elif isinstance(ev, E.UserVarEvent):
        _check_user_var(d, ev, problems)
    elif isinstance(ev, E.RowsQueryEvent):
        expect("query", ev.query, "\n".join(d.comment_lines))
    elif isinstance(ev, E.GtidListEvent):
        m = re.search(r"Gtid list \[(.*)\]", desc)
        assert m, desc
        expect("gtid list", ev.gtid_position, m.group(1))
    elif isinstance(ev, E.BinlogCheckpointEvent):
        expect("checkpoint", ev.checkpoint_file, desc.removeprefix("Binlog checkpoint").strip())
    elif isinstance(ev, E.MariaGtidEvent):
        m = re.search(r"GTID (\d+-\d+-\d+)", desc)
        assert m, desc
        expect("gtid", ev.gtid, m.group(1))
        expect("standalone", ev.standalone, "BEGIN" not in d.sql_lines)
    elif isinstance(ev, E.StopEvent):
        pass
    else:
        problems.append(f"{where}: no check for {type(ev).__name__}")


@pytest.mark.parametrize(("dump", "binary"), _dump_pairs(), ids=lambda v: v.split("/events/")[-1])
def test_mysqlbinlog_dump_matches(dump: str, binary: str) -> None:
    """Each event mysqlbinlog printed (positions, types, statements, GTIDs, XIDs, rotate targets, row
    values of -v output with the -vv column comments) equals what the decoder returns."""
    root = require_fixtures()
    path = root / binary
    size = path.stat().st_size
    _, events = _decode_file(path)
    by_pos = {e.position: e for e in events}
    devents = [d for d in parse_mysqlbinlog(read_text(root / dump)) if d.position is not None]
    assert devents, "no events parsed from the dump"
    problems: list[str] = []
    checked = 0
    for d in devents:
        if d.position >= size:
            continue  # dump taken after the binary was copied (file still in use)
        ev = by_pos.get(d.position)
        if ev is None:
            problems.append(f"@{d.position}: no decoded event starts there")
            continue
        _check_dump_event(d, ev, problems)
        checked += 1
    # mysqlbinlog prints every event of the file
    assert checked == len(events), f"dump covers {checked} of {len(events)} events"
    assert not problems, "\n".join(problems)


# ---- SHOW BINLOG EVENTS (mysql-cdc-rs 8.0 show.txt) ------------------------------------------------

_SHOW_TYPES = {"Format_desc": 15, "Previous_gtids": 35, "Anonymous_Gtid": 34, "Gtid": 33, "Query": 2,
               "Table_map": 19, "Write_rows": 30, "Update_rows": 31, "Delete_rows": 32, "Xid": 16,
               "Stop": 3, "Rotate": 4}


def _show_files() -> list[str]:
    if not fixtures_available():
        return [MISSING]
    root = fixtures_root()
    return [str(p.relative_to(root)) for p in sorted(root.glob("mysql-cdc-rs/tests/events/8.0/*/show.txt"))]


def _show_info(ev: E.Event) -> str | None:
    if isinstance(ev, E.FormatDescriptionEvent):
        return f"Server ver: {ev.server_version}, Binlog ver: {ev.binlog_version}"
    if isinstance(ev, E.GtidEvent):
        return f"SET @@SESSION.GTID_NEXT= '{ev.gtid}'"
    if isinstance(ev, E.QueryEvent):
        use = f"use `{ev.schema}`; " if ev.schema and not ev.flags & 0x8 else ""  # LOG_EVENT_SUPPRESS_USE_F
        xid = f" /* xid={ev.status['ddl_xid']} */" if "ddl_xid" in ev.status else ""
        return use + ev.query + xid
    if isinstance(ev, E.TableMapEvent):
        return f"table_id: {ev.table_id} ({ev.table.schema}.{ev.table.table})"
    if isinstance(ev, E.RowsEvent):
        return f"table_id: {ev.table_id}" + (" flags: STMT_END_F" if ev.stmt_end else "")
    if isinstance(ev, E.XidEvent):
        return f"COMMIT /* xid={ev.xid} */"
    if isinstance(ev, E.PreviousGtidsEvent):
        return ev.gtid_set
    return None


@pytest.mark.parametrize("show", _show_files(), ids=lambda v: v.split("/events/")[-1])
def test_show_binlog_events_matches(show: str) -> None:
    root = require_fixtures()
    d = (root / show).parent
    path = next(p for p in d.iterdir() if p.name.startswith("binlog."))
    size = path.stat().st_size
    _, events = _decode_file(path)
    by_pos = {e.position: e for e in events}
    rows = parse_show_binlog_events(read_text(root / show))
    assert rows
    problems = []
    for r in rows:
        if r.pos >= size:
            continue  # SHOW ran after the file was copied
        assert r.log_name == path.name
        ev = by_pos.get(r.pos)
        if ev is None:
            problems.append(f"{r.pos}: no decoded event")
            continue
        if ev.type_code != _SHOW_TYPES.get(r.event_type):
            problems.append(f"{r.pos}: type {ev.type_code}, SHOW says {r.event_type}")
        if (ev.log_pos, ev.server_id) != (r.end_log_pos, r.server_id):
            problems.append(f"{r.pos}: log_pos/server_id {(ev.log_pos, ev.server_id)}, "
                            f"SHOW {(r.end_log_pos, r.server_id)}")
        info = _show_info(ev)
        if info is not None and squash(info) != squash(r.info):
            problems.append(f"{r.pos}: info {squash(info)!r}, SHOW {squash(r.info)!r}")
    assert not problems, "\n".join(problems)


# ---- row values stated by the SQL that produced the files ---------------------------------------------

_L = dt.date


def _lineitem(ok: int, pk: int, sk: int, ln: int, q: str, ep: str, disc: str, tax: str, flag: str,
              status: str | None, comment: str | None) -> tuple:
    return (ok, pk, sk, ln, Decimal(q), Decimal(ep), Decimal(disc), Decimal(tax), flag, status,
            _L(1990, 8, 1), _L(1990, 6, 1), _L(1990, 1, 1), "test@test.com", "test", comment)



def test_query_bigger_rows_match_sql() -> None:
    """mysql-cdc-rs 8.0/02_query_bigger: sql.sql's INSERT/UPDATE/DELETE values (DECIMAL, DATE from a
    datetime literal, utf8mb4 text) in the row events at the positions its show.txt lists."""
    root = require_fixtures()
    d = root / "mysql-cdc-rs/tests/events/8.0/02_query_bigger"
    sql = read_text(d / "sql.sql")
    assert "INSERT INTO LINEITEM" in sql
    cn = re.search("'(\u4f7f\u7528[^']*)'", sql)  # the one non-ASCII L_COMMENT (starts with U+4F7F U+7528)
    assert cn is not None
    chinese = cn.group(1)
    _, events = _decode_file(d / "binlog.000733")
    by_pos = {e.position: e for e in events}
    first = _lineitem(1234567890111, 1235111, 13711, 888878711, "99.911", "76.11", "888.1", "109.1",
                      "code", "Y", "com")
    five = [
        _lineitem(12345678909876, 12356789, 13789, 888878787, "99.998", "76.77", "888.7", "109.7", "code", "Y",
                  "com"),
        _lineitem(12345678909877, 12356790, 13789, 888878788, "99.997", "76.88", "888.1", "109.8", "code", "Y",
                  "com"),
        _lineitem(12345678909878, 12356791, 13790, 888878789, "99.999", "76.99", "888.5", "109.9", "code", "Y",
                  chinese),
        _lineitem(12345678909879, 12356792, 13791, 888878790, "99.995", "76.01", "888.3", "109.1", "code", "Y",
                  "com"),
        _lineitem(12345678909880, 12356792, 13791, 888878791, "99.999", "76.22", "888.8", "109.0", "code", "Y",
                  "com"),
    ]
    updated = list(five[1])
    updated[4] = Decimal("88.880")
    updated[8] = "update L_RETURNFLAG "
    demo = [
        _lineitem(12345678909876, 12356789, 13789, 888878787, "99.998", "76.77", "888.7", "109.7", "code", None,
                  None),
        _lineitem(12345678909877, 12356790, 13789, 888878788, "99.997", "76.88", "888.1", "109.8", "code", "Y",
                  None),
        _lineitem(12345678909878, 12356791, 13790, 888878789, "99.999", "76.99", "888.5", "109.9", "code", None,
                  None),
        _lineitem(12345678909879, 12356792, 13791, 888878790, "99.995", "76.01", "888.3", "109.1", "code", "Y",
                  None),
        _lineitem(12345678909880, 12356792, 13791, 888878791, "99.999", "76.22", "888.8", "109.0", "code", "Y",
                  None),
    ]

    def rows(pos: int) -> list:
        ev = by_pos[pos]
        assert isinstance(ev, E.RowsEvent) and ev.rows is not None
        return [tuple(as_text(v) for v in r) if ev.kind != "update"
                else tuple(tuple(as_text(v) for v in img) for img in r) for r in ev.rows]

    assert rows(1427) == [first]
    assert rows(1831) == five
    assert rows(2838) == [(five[1], tuple(updated))]
    assert rows(3352) == [five[4]]
    assert rows(3756) == [five[3]]
    assert rows(7345) == demo


def test_update_rows_57_match_sql() -> None:
    """mysql-cdc-rs 5.7/31_update_rows_v2 sql.sql: INSERT ('abc' x5, 1.0, 2.0, 3.0) then UPDATE to
    ('xd' x5, 4.0, 4.0, 4.0) on DECIMAL(10,4), FLOAT, DOUBLE, TEXT/MEDIUMTEXT/LONGTEXT."""
    root = require_fixtures()
    d = root / "mysql-cdc-rs/tests/events/5.7/31_update_rows_v2"
    _, events = _decode_file(d / "log.bin")
    (ev,) = [e for e in events if isinstance(e, E.RowsEvent)]
    assert ev.kind == "update" and ev.rows is not None and len(ev.rows) == 1
    before, after = ev.rows[0]
    assert [as_text(v) for v in before] == [1, "abc", "abc", "abc", "abc", "abc", 1.0, 2.0, Decimal("3.0000")]
    assert [as_text(v) for v in after] == [1, "xd", "xd", "xd", "xd", "xd", 4.0, 4.0, Decimal("4.0000")]
    assert str(before[8]) == "3.0000" and str(after[8]) == "4.0000"


def test_ybinlogp_statements_match_gen_test_data_sql() -> None:
    """ybinlogp testing/gen_test_data.sql: the statements up to the first FLUSH LOGS are the QUERY
    events of the first file (each autocommit INSERT in a BEGIN .. XID transaction), with INSERT_ID
    1, 2, 3 for the three rows of the fresh AUTO_INCREMENT table test2."""
    root = require_fixtures()
    sql = read_text(root / "ybinlogp/testing/gen_test_data.sql")
    stmts = []
    for s in sql.split(";"):
        s = "\n".join(x for x in s.strip().split("\n") if not x.startswith("--")).strip()
        if s.startswith("FLUSH LOGS"):
            break
        if s and not s.startswith("USE "):
            stmts.append(s)
    for name in ("mysql-bin.default-path", "mysql-bin.delayed-event"):
        _, events = _decode_file(root / "ybinlogp/testing/data" / name)
        queries = [e.query for e in events if isinstance(e, E.QueryEvent) and e.query != "BEGIN"]
        assert queries == stmts, name
        assert [(e.kind, e.value) for e in events if isinstance(e, E.IntvarEvent)] == [(2, 1), (2, 2), (2, 3)]
        assert isinstance(events[-1], E.RotateEvent)


def test_rust_mysql_binlog_first_query() -> None:
    """EasyPost/rust-mysql-binlog src/lib.rs test_parse_file: results[0] is the QUERY event creating foo."""
    root = require_fixtures()
    _, events = _decode_file(root / "rust-mysql-binlog/test_data/bin-log.000001")
    queries = [e for e in events if isinstance(e, E.QueryEvent)]
    assert queries[0].query == ("CREATE TABLE foo(id BIGINT AUTO_INCREMENT PRIMARY KEY, val_decimal "
                                "DECIMAL(10, 5) NOT NULL, comment VARCHAR(255) NOT NULL)")
    rows = [e for e in events if isinstance(e, E.RowsEvent)]
    assert rows and all(r.rows for r in rows)
    for r in rows:
        for row in r.rows or []:
            assert isinstance(row[1], Decimal) and -row[1].as_tuple().exponent == 5


# ---- mariadb-poc: the metadata its README prints (go-mysql based tool) --------------------------------

# mariadb-operator/mariadb-poc mariadb-binlog/README.md (commit 3f66509d): per file ServerId 10,
# LogPos (last event's end), First/LastTimestamp (first non-zero / last event header timestamp),
# PreviousGTIDs (the GTID_LIST event), First/LastGTID (MARIA_GTID events), RotateEvent/StopEvent.
MARIADB_POC = {
    "000001": (358, 1767101638, 1767127977, "", None, None, False, True),
    "000002": (3753792, 1767127979, 1767128127, "", "0-10-250080", "0-10-254512", True, False),
    "000004": (343488, 1767128182, 1767128185, "0-10-262175", "0-10-262176", "0-10-262580", True, False),
    "000005": (74142, 1767128185, 1767128186, "0-10-262580", "0-10-262581", "0-10-262667", True, False),
    "000006": (56355, 1767128186, 1767128186, "0-10-262667", "0-10-262668", "0-10-262733", True, False),
    "000007": (53814, 1767128186, 1767128187, "0-10-262733", "0-10-262734", "0-10-262796", True, False),
    "000009": (935, 1767173589, 1767181052, "0-10-292193", "0-10-292194", "0-10-292196", False, True),
    "000010": (2210, 1767181182, 1767181241, "0-10-292196", "0-10-292197", "0-10-292206", False, True),
}


@pytest.mark.parametrize("seq", sorted(MARIADB_POC))
def test_mariadb_poc_readme_metadata(seq: str) -> None:
    root = require_fixtures()
    path = root / f"mariadb-poc/mariadb-binlog/binlogs/domain_id_0/mariadb-repl-bin.{seq}"
    _, events = _decode_file(path)
    logpos, first_ts, last_ts, prev, first_gtid, last_gtid, rotate, stop = MARIADB_POC[seq]
    assert events[-1].server_id == 10
    assert events[0].server_version == "11.8.5-MariaDB-ubu2404-log"  # type: ignore[attr-defined]
    assert events[-1].log_pos == logpos
    assert next(e.timestamp for e in events if e.timestamp) == first_ts
    assert events[-1].timestamp == last_ts
    lists = [e for e in events if isinstance(e, E.GtidListEvent)]
    assert lists[-1].gtid_position == prev
    gtids = [e.gtid for e in events if isinstance(e, E.MariaGtidEvent)]
    assert (gtids[0] if gtids else None, gtids[-1] if gtids else None) == (first_gtid, last_gtid)
    assert any(isinstance(e, E.RotateEvent) for e in events) == rotate
    assert any(isinstance(e, E.StopEvent) for e in events) == stop
    if gtids:  # domain 0, server 10, consecutive sequence numbers
        seqs = [int(g.split("-")[2]) for g in gtids]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
