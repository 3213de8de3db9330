"""Staging windows from a live embedded Canal instance on the private MariaDB: every MariaDB column type
inserted, updated (one primary key changed), deleted, a column added mid-window; the staged parts read with
pyarrow and with Spark must equal the server's SELECT normalized by docs/type-mapping.md, with the
documented Spark types; the changelog has one row per row change; the manifest counts what the server
reported."""

from __future__ import annotations

import datetime as dt
import random
import struct
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from canal_core.instance.config import CanalConfig
from canal_core.instance.instance import CanalInstance
from canal_core.meta import MemoryMetaManager
from canal_core.parse.history import SchemaHistory
from canal_core.protocol.identity import ClientIdentity
from canal_core.protocol.proto import EntryProtocol_pb2 as pb
from canal_core.server.embedded import CanalServerWithEmbedded
from canal_core.store.ring import MemoryEventStore
from pipelines.engine.staging import IncompleteWindowError, RowImageError, load_window, stage_window, window_path
from pipelines.engine.types import from_db, text_converter
from pipelines.engine.window import META_COLUMNS, OP_DELETE, OP_INSERT, OP_UPDATE, order_key
from tests.integration.binlog_end import master_status
from tests.integration.type_rows import (
    COLUMNS,
    GEOM,
    MAX_ROW,
    MIN_ROW,
    NAMES,
    TABLE,
    ZERO_DATE_COLUMNS,
    ZERO_ROW,
    insert_rows,
    random_row,
)

pytestmark = pytest.mark.integration


# ---- the oracle: the server's SELECT, normalized by the rules of docs/type-mapping.md ------------------

def _select(cur: Any, table: str, extra: tuple[str, ...] = ()) -> dict[int, dict[str, Any]]:
    names = NAMES + list(extra)
    exprs = [f"{n} * 1e0" if n == "c_float" else n for n in names]
    cur.execute(f"SELECT {', '.join(exprs)} FROM canal_test.{table}")
    return {row[0]: dict(zip(names, row, strict=True)) for row in cur.fetchall()}


def _expected(name: str, v: Any) -> Any:
    """The documented staged value of a SELECT value (PyMySQL, session time zone UTC)."""
    if v is None:
        return None
    if name in ZERO_DATE_COLUMNS:
        if isinstance(v, str):
            return None  # zero / invalid dates: NULL (PyMySQL hands them back as text)
        return v.replace(tzinfo=dt.UTC) if name.startswith("c_timestamp") else v
    if name in ("c_ubigint", "c_bit64"):
        return Decimal(int.from_bytes(v, "big") if isinstance(v, bytes) else v)
    if name.startswith("c_bit"):
        return int.from_bytes(v, "big")
    if name == "c_float":
        return struct.unpack("<f", struct.pack("<f", v))[0]
    if name == "c_dec65":
        return f"{v:f}" if v else "0." + "0" * 30
    if name in ("c_time", "c_time6"):  # TIME: Canal's text, hours at least 2 digits, fsp fraction digits
        us = v // dt.timedelta(microseconds=1)
        secs, frac = divmod(abs(us), 10**6)
        text = f"{'-' if us < 0 else ''}{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}"
        return text + f".{frac:06d}" if name == "c_time6" else text
    return v


def _same(e: Any, g: Any) -> bool:
    return e == g and (type(e) is type(g) or {type(e), type(g)} <= {bytes, bytearray})


# ---- an embedded Canal instance ------------------------------------------------------------------------

class Canal:
    """An embedded instance with TIMESTAMP text in UTC, starting at a given binlog position."""

    def __init__(self, tmp: Path, settings: Any, regex: str, start: tuple[str, int]) -> None:
        conf = tmp / "conf"
        (conf / "example").mkdir(parents=True)
        (conf / "canal.properties").write_text(
            f"canal.destinations = example\ncanal.file.data.dir = {tmp / 'data'}\n"
            "canal.instance.memory.buffer.size = 4096\ncanal.instance.memory.batch.mode = ITEMSIZE\n")
        (conf / "example" / "instance.properties").write_text(
            f"canal.instance.master.address = {settings.host}:{settings.port}\n"
            f"canal.instance.dbUsername = {settings.repl_user}\ncanal.instance.dbPassword = {settings.repl_password}\n"
            f"canal.instance.filter.regex = {regex}\n"
            f"canal.instance.master.journal.name = {start[0]}\ncanal.instance.master.position = {start[1]}\n")
        cfg = CanalConfig.load(conf)
        ic = cfg.instance("example")
        sc = ic.store_config()
        store = MemoryEventStore(sc.buffer_size, sc.buffer_memunit, sc.batch_mode.value, sc.ddl_isolation)
        instance = CanalInstance(ic.destination, ic.parser_config(), store=store, meta=MemoryMetaManager(),
                                 history=SchemaHistory(tmp / "history"), event_filter=ic.event_filter(),
                                 timezone="UTC")
        self.server = CanalServerWithEmbedded()
        self.server.start(instance)
        self.client = ClientIdentity("example", 1001, "")
        self.server.subscribe(self.client)

    def take(self, row_changes: int, timeout: float = 90) -> tuple[list[bytes], list[int]]:
        """getWithoutAck until ``row_changes`` row changes arrived: (entries, batch ids)."""
        entries: list[bytes] = []
        batch_ids: list[int] = []
        seen = 0
        deadline = time.monotonic() + timeout
        while seen < row_changes:
            assert time.monotonic() < deadline, f"only {seen} of {row_changes} row changes arrived"
            msg = self.server.get_without_ack(self.client, 2048, 0.5)
            if msg.empty:
                continue
            batch_ids.append(msg.batch_id)
            entries += msg.raw_entries
            for raw in msg.raw_entries:
                e = pb.Entry.FromString(raw)
                if e.entryType == pb.ROWDATA:
                    seen += len(pb.RowChange.FromString(e.storeValue).rowDatas)
        return entries, batch_ids

    def stop(self) -> None:
        self.server.stop_all()


@pytest.fixture
def types_table(admin_conn: Any) -> Iterator[str]:
    with admin_conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS canal_test.{TABLE}")
    yield TABLE
    with admin_conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS canal_test.{TABLE}")


def test_stage_every_type(mariadb_settings: Any, admin_conn: Any, types_table: str, tmp_path: Path,
                          spark: Any) -> None:
    start = master_status(mariadb_settings)
    canal = Canal(tmp_path, mariadb_settings, f"canal_test\\\\.{types_table}", start)
    try:
        cur = admin_conn.cursor()
        cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES', time_zone = '+00:00'")
        cols_sql = ", ".join(f"{n} {t}" for n, t, _ in COLUMNS)
        cur.execute(f"CREATE TABLE canal_test.{types_table} (id INT PRIMARY KEY, {cols_sql}) DEFAULT CHARSET=utf8mb4")
        r = random.Random(20261122)
        rows = [(1, MAX_ROW), (2, MIN_ROW), (3, {}), (4, ZERO_ROW)] + [(i, random_row(r)) for i in range(5, 41)]
        cur.execute("BEGIN")
        inserted = insert_rows(cur, types_table, rows)
        cur.execute("COMMIT")
        s1 = _select(cur, types_table)
        cur.execute("BEGIN")
        updated = 0
        for i in range(2, 41, 3):
            new = random_row(r)
            sets = ", ".join(f"{n} = {'ST_GeomFromText(%s)' if n in GEOM else '%s'}" for n, *_ in COLUMNS)
            updated += cur.execute(f"UPDATE canal_test.{types_table} SET {sets} WHERE id = %s",
                                   [new[n] for n, *_ in COLUMNS] + [i])
        moved = cur.execute(f"UPDATE canal_test.{types_table} SET id = 1006, c_int = 7 WHERE id = 6")
        cur.execute("COMMIT")
        s2 = _select(cur, types_table)
        deleted = cur.execute(f"DELETE FROM canal_test.{types_table} WHERE id IN (1, 4, 7, 30)")
        cur.execute(f"ALTER TABLE canal_test.{types_table} ADD COLUMN c_added VARCHAR(10) DEFAULT 'new'")
        added = insert_rows(cur, types_table, [(100, MAX_ROW), (101, ZERO_ROW)])
        s3 = _select(cur, types_table, ("c_added",))
        assert (inserted, moved, deleted, added) == (40, 1, 4, 2) and updated == 13

        entries, batch_ids = canal.take(inserted + updated + moved + deleted + added)
    finally:
        canal.stop()

    root = tmp_path / "staging"
    t0 = time.perf_counter()
    m = stage_window(entries, root=root, destination="example", window=7, attempt=0, batch_ids=batch_ids,
                     timezone="UTC")
    elapsed = time.perf_counter() - t0
    path = window_path(root, "example", 7, 0)
    assert path == root / "example" / "w000000000007-a0" and (path / "manifest.json").is_file()
    assert load_window(path) == m
    assert m.batch_ids == batch_ids and m.entries == len(entries) and m.timezone == "UTC"
    assert m.bytes == sum(len(e) for e in entries)
    print(f"staged {m.rows} row changes of {len(NAMES)} columns in {elapsed:.2f}s")

    # positions: the first and last entries' headers
    first, last = pb.Entry.FromString(entries[0]).header, pb.Entry.FromString(entries[-1]).header
    assert (m.start.journal, m.start.offset) == (first.logfileName, first.logfileOffset)
    assert (m.end.journal, m.end.offset) == (last.logfileName, last.logfileOffset)
    assert order_key(*start) <= m.start.key <= m.end.key

    # one table, two parts: the ADD COLUMN starts a new column layout
    (tc,) = m.tables
    assert tc.name == f"canal_test.{types_table}" and tc.primary_key == ["id"]
    p1, p2 = tc.parts
    assert [c.name for c in p1.columns] == NAMES and [c.name for c in p2.columns] == [*NAMES, "c_added"]
    assert (p1.inserts, p1.updates, p1.deletes) == (inserted + moved, updated, deleted + moved)
    assert (p2.inserts, p2.updates, p2.deletes) == (added, 0, 0)
    assert p1.max_pos < p2.min_pos
    alters = [d for d in m.ddl if d.kind == "ALTER"]
    assert len(alters) == 1 and "c_added" in alters[0].sql and p1.max_pos < alters[0].pos < p2.min_pos
    assert m.rows == inserted + updated + moved + deleted + added

    # expected staged rows, keyed (op, id, sub): inserts from s1, updates from s2, the moved key as delete + insert
    want: dict[tuple[str, int, int], dict[str, Any]] = {}
    for i, row in s1.items():
        want[(OP_INSERT, i, 0)] = row
    for i in range(2, 41, 3):
        want[(OP_UPDATE, i, 0)] = s2[i]
    want[(OP_DELETE, 6, 0)] = s1[6]
    want[(OP_INSERT, 1006, 1)] = s2[1006]
    for i in (1, 4, 7, 30):
        want[(OP_DELETE, i, 0)] = s2[i]
    want2 = {(OP_INSERT, i, 0): s3[i] for i in (100, 101)}

    problems: list[str] = []
    zero_dates: dict[str, int] = {}
    for part, expect in ((p1, want), (p2, want2)):
        table = pq.read_table(path / part.file)
        assert table.column_names[:len(META_COLUMNS)] == list(META_COLUMNS)
        got = table.to_pylist()
        assert len(got) == len(expect) == part.rows
        for g in got:
            e = expect[(g["_canal_op"], g["id"], g["_canal_sub"])]
            assert part.min_pos <= g["_canal_pos"] <= part.max_pos
            for name in NAMES + (["c_added"] if part is p2 else []):
                ev = _expected(name, e[name])
                if name in ZERO_DATE_COLUMNS and isinstance(e[name], str):
                    zero_dates[name] = zero_dates.get(name, 0) + 1
                if not _same(ev, g[name]):
                    problems.append(f"{g['_canal_op']} id={g['id']} {name}: select={e[name]!r} "
                                    f"expected={ev!r} staged={g[name]!r}")
                # from_db (used by snapshots and reconciliation) agrees with staging
                spec = next(c for c in part.columns if c.name == name)
                if not _same(from_db(spec.mysql_type)(e[name]), g[name]):
                    problems.append(f"from_db {name}: {from_db(spec.mysql_type)(e[name])!r} != {g[name]!r}")
    assert not problems, f"{len(problems)} mismatches:\n" + "\n".join(problems[:40])
    assert zero_dates, "no zero dates were staged"
    assert m.unrepresentable == {f"canal_test.{types_table}.{k}": v for k, v in zero_dates.items()}

    # Spark reads the parts with the documented types and the same values
    spark_types = dict([("id", "int")] + [(n, s) for n, _, s in COLUMNS] + [("c_added", "string")])
    df = spark.read.parquet(str(path / p1.file))
    assert {f.name: f.dataType.simpleString() for f in df.schema.fields} == {
        "_canal_op": "string", "_canal_pos": "bigint", "_canal_row": "int", "_canal_sub": "tinyint",
        "_canal_ts": "timestamp", **{n: spark_types[n] for n in NAMES}}
    # TIMESTAMP as epoch microseconds: collect() would render it in the driver's local zone
    micros = {n for n, _, s in COLUMNS if s == "timestamp"}
    sel = [f"unix_micros({n}) AS {n}" if n in micros else n for n in ["_canal_op", "_canal_sub", *NAMES]]
    for g in df.selectExpr(*sel).collect():
        e = want[(g["_canal_op"], g["id"], g["_canal_sub"])]
        for name in NAMES:
            ev = _expected(name, e[name])
            if name in micros and ev is not None:
                ev = (ev - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
            gv = bytes(g[name]) if isinstance(g[name], bytearray) else g[name]
            if not _same(ev, gv):
                problems.append(f"spark {g['_canal_op']} id={g['id']} {name}: expected={ev!r} spark={gv!r}")
    assert not problems, f"{len(problems)} mismatches:\n" + "\n".join(problems[:40])
    df2 = spark.read.parquet(str(path / p2.file))
    assert df2.schema["c_added"].dataType.simpleString() == "string" and df2.count() == added

    # the changelog: one row per row change, in binlog order, Canal's text images
    cl = pq.read_table(path / m.changelog).to_pylist()
    assert len(cl) == m.rows
    assert [(c["pos"], c["row"]) for c in cl] == sorted((c["pos"], c["row"]) for c in cl)
    assert sum(c["op"] == "INSERT" for c in cl) == inserted + added
    assert sum(c["op"] == "UPDATE" for c in cl) == updated + moved
    assert sum(c["op"] == "DELETE" for c in cl) == deleted
    for c in cl:
        assert c["destination"] == "example" and c["window"] == 7 and c["keys"] == ["id"]
        assert c["schema_name"] == "canal_test" and c["table_name"] == types_table
        assert c["pos"] == order_key(c["binlog_file"], c["binlog_offset"])
        assert c["event_date"] == c["execute_time"].date()
        before = dict(c["before"]) if c["before"] is not None else None
        after = dict(c["after"]) if c["after"] is not None else None
        assert (before is None) == (c["op"] == "INSERT") and (after is None) == (c["op"] == "DELETE")
        image = after or before
        assert image is not None
        key = int(image["id"])
        cols = p2.columns if "c_added" in image else p1.columns
        assert list(image) == [x.name for x in cols]
        if c["op"] == "UPDATE":
            assert set(c["updated"]) == {k for k in after if after[k] != before[k]}
            src = s2[key]
            prev = s1[int(before["id"])]
        else:
            assert c["updated"] == (list(after) if c["op"] == "INSERT" else [])
            src = (s3 if "c_added" in image else s1 if c["op"] == "INSERT" else s2)[key]
            prev = None
        for spec in cols:
            # the text converts to the value the server holds
            ev = _expected(spec.name, src[spec.name])
            if not _same(text_converter(spec.mysql_type, "UTC")(image[spec.name]), ev):
                problems.append(f"changelog {c['op']} id={key} {spec.name}: text={image[spec.name]!r} "
                                f"select={src[spec.name]!r}")
            if prev is not None and before is not None:
                pv = _expected(spec.name, prev[spec.name])
                if not _same(text_converter(spec.mysql_type, "UTC")(before[spec.name]), pv):
                    problems.append(f"changelog before id={key} {spec.name}: text={before[spec.name]!r}")
        # a few texts compared with the server's directly
        assert image["c_int"] == (None if src["c_int"] is None else str(src["c_int"]))
        assert image["c_varchar"] == src["c_varchar"]
    assert not problems, f"{len(problems)} mismatches:\n" + "\n".join(problems[:40])


def test_restaging_replaces_and_incomplete_is_refused(tmp_path: Path) -> None:
    def entry(table: str, value: str) -> bytes:
        rc = pb.RowChange(tableId=1, eventType=pb.INSERT, isDdl=False)
        rc.rowDatas.add().afterColumns.add(index=0, name="id", isKey=True, isNull=False, value=value,
                                           mysqlType="int(11)", updated=True)
        h = pb.Header(logfileName="mysql-bin.000003", logfileOffset=400, serverId=1, executeTime=1_700_000_000_000,
                      schemaName="s", tableName=table, eventType=pb.INSERT)
        return pb.Entry(header=h, entryType=pb.ROWDATA, storeValue=rc.SerializeToString()).SerializeToString()

    m1 = stage_window([entry("a", "1")], root=tmp_path, destination="d", window=1, attempt=2, batch_ids=[5])
    m2 = stage_window([entry("b", "2")], root=tmp_path, destination="d", window=1, attempt=2, batch_ids=[6])
    path = window_path(tmp_path, "d", 1, 2)
    assert [t.table for t in m1.tables] == ["a"] and load_window(path) == m2
    assert sorted(p.name for p in (path / "tables").iterdir()) == ["s.b"]
    assert [p.name for p in (tmp_path / "d").iterdir()] == [path.name]  # no temporary directories left
    assert pq.read_table(path / m2.tables[0].parts[0].file).column("id").to_pylist() == [2]
    (path / "manifest.json").unlink()
    with pytest.raises(IncompleteWindowError):
        load_window(path)
    (tmp_path / "d" / f".{path.name}.tmp-crashed").mkdir()  # a staging that died half way
    m3 = stage_window([entry("a", "3")], root=tmp_path, destination="d", window=1, attempt=2, batch_ids=[7])
    assert load_window(path) == m3
    assert [p.name for p in (tmp_path / "d").iterdir()] == [path.name]


def test_minimal_row_image_is_refused(mariadb_settings: Any, admin_conn: Any, tmp_path: Path) -> None:
    table = "stg_minimal"
    with admin_conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS canal_test.{table}")
        start = master_status(mariadb_settings)
        cur.execute(f"CREATE TABLE canal_test.{table} (id INT PRIMARY KEY, a INT, b VARCHAR(10))")
    canal = Canal(tmp_path, mariadb_settings, f"canal_test\\\\.{table}", start)
    try:
        with admin_conn.cursor() as cur:
            cur.execute(f"INSERT INTO canal_test.{table} VALUES (1, 1, 'x'), (2, 2, 'y')")
            cur.execute("SET SESSION binlog_row_image = 'MINIMAL'")
            cur.execute(f"UPDATE canal_test.{table} SET a = 10 WHERE id = 1")
            cur.execute(f"DELETE FROM canal_test.{table} WHERE id = 2")
            cur.execute("SET SESSION binlog_row_image = 'FULL'")
        entries, _ = canal.take(4)
    finally:
        canal.stop()
        with admin_conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS canal_test.{table}")
    rows = [e for e in entries if pb.Entry.FromString(e).entryType == pb.ROWDATA
            and pb.RowChange.FromString(pb.Entry.FromString(e).storeValue).rowDatas]
    update = next(e for e in rows if pb.Entry.FromString(e).header.eventType == pb.UPDATE)
    h = pb.Entry.FromString(update).header
    with pytest.raises(RowImageError) as err:
        stage_window([*rows[:1], update], root=tmp_path, destination="d", window=1, attempt=0, batch_ids=[1])
    msg = str(err.value)
    assert f"canal_test.{table}" in msg and f"{h.logfileName}:{h.logfileOffset}" in msg and "FULL" in msg
    delete = next(e for e in rows if pb.Entry.FromString(e).header.eventType == pb.DELETE)
    with pytest.raises(RowImageError):
        stage_window([*rows[:1], delete], root=tmp_path, destination="d", window=2, attempt=0, batch_ids=[1])
    assert not window_path(tmp_path, "d", 1, 0).exists()



def test_changelog_images_of_updates(tmp_path: Path) -> None:
    """Only UPDATEs in the window (the after images start mid-pool), NULLs and empty strings kept apart."""
    rc = pb.RowChange(tableId=1, eventType=pb.UPDATE, isDdl=False)
    for k, (old, new) in enumerate([("a", None), ("", "b")]):
        rd = rc.rowDatas.add()
        for image, v in ((rd.beforeColumns, old), (rd.afterColumns, new)):
            image.add(index=0, name="id", isKey=True, isNull=False, value=str(k + 1), mysqlType="int(11)")
            image.add(index=1, name="v", isNull=v is None, value=v or "", mysqlType="varchar(5)")
    h = pb.Header(logfileName="mysql-bin.000009", logfileOffset=1234, serverId=3, executeTime=1_700_000_000_000,
                  schemaName="s", tableName="t", eventType=pb.UPDATE)
    raw = pb.Entry(header=h, entryType=pb.ROWDATA, storeValue=rc.SerializeToString()).SerializeToString()
    m = stage_window([raw], root=tmp_path, destination="d", window=1, attempt=0, batch_ids=[1])
    path = window_path(tmp_path, "d", 1, 0)
    cl = pq.read_table(path / m.changelog).to_pylist()
    assert [(c["row"], c["before"], c["after"], c["updated"]) for c in cl] == [
        (0, [("id", "1"), ("v", "a")], [("id", "1"), ("v", None)], ["v"]),
        (1, [("id", "2"), ("v", "")], [("id", "2"), ("v", "b")], ["v"]),
    ]
    part = pq.read_table(path / m.tables[0].parts[0].file).to_pylist()
    assert [(p["_canal_op"], p["id"], p["v"]) for p in part] == [("UPDATE", 1, None), ("UPDATE", 2, "b")]
    assert cl[0]["pos"] == 9 << 32 | 1234 == part[0]["_canal_pos"] and cl[0]["server_id"] == 3
