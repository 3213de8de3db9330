"""Real binlog files from the fixture root ($CANAL_FIXTURES, else ../shared/fixtures beside the repository)
converted to Canal entries.

Table metadata is written by hand from the schema the fixture states (its SQL, or the CREATE TABLE in
the binlog); expected positions, times, thread ids, XIDs and row values come from the mysqlbinlog dumps
kept with the fixtures, turned into Canal's formats by the documented rules (execute time = SET
TIMESTAMP x 1000; TIMESTAMP epoch seconds printed in the converter's zone; DOUBLE/FLOAT printed by
Java's toString, which always shows a fractional digit; DECIMAL with all its scale digits).
For the two osheroff files, which carry no dump, the expected values were transcribed from
`mariadb-binlog -v --base64-output=decode-rows` output of the same file (quoted below).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any

from fixture_support import BOXERCRAB, DumpEvent, fixture_path, parse_mysqlbinlog, read_text

from canal_core.binlog import BinlogDecoder, read_file
from canal_core.binlog import events as E
from canal_core.entry import CanalEntry, EntryConverter
from canal_core.parse.model import EVENT_ALTER, EVENT_CREATE, EVENT_DELETE, ColumnMeta, DdlResult, GtidInfo, TableMeta
from canal_core.protocol.proto import EntryProtocol_pb2 as pb

UTC = dt.UTC


def drive(path: str, metas: Callable[[str, str], TableMeta | None], *, tz: str = "UTC",
          ddl: Callable[[E.QueryEvent], DdlResult | None] = lambda ev: None,
          on_query: Callable[[E.QueryEvent], None] = lambda ev: None) -> Iterator[tuple[E.Event, CanalEntry]]:
    """What the event parser does with each event, minus filtering and positions: GTID tracking,
    query dispatch, rows with the table's meta, XIDs."""
    def hints(schema: str, table: str) -> Any:
        meta = metas(schema, table)
        return meta.hints() if meta is not None else None

    conv = EntryConverter(timezone=tz)
    gtid: GtidInfo | None = None
    for ev in read_file(fixture_path(path), BinlogDecoder(schema_hints=hints)):
        if isinstance(ev, E.GtidEvent) and not ev.anonymous:
            gtid = GtidInfo.of(ev, ev.gtid)
        elif isinstance(ev, E.QueryEvent):
            yield ev, conv.query(ev, ddl(ev), gtid)
            on_query(ev)
        elif isinstance(ev, E.RowsEvent):
            yield ev, conv.rows(ev, metas(ev.table.schema, ev.table.table), gtid)
        elif isinstance(ev, E.XidEvent):
            yield ev, conv.end(ev, gtid)


def dump(rel: str) -> dict[int, DumpEvent]:
    return {e.position: e for e in parse_mysqlbinlog(read_text(fixture_path(rel))) if e.position is not None}


def row_change(ce: CanalEntry) -> pb.RowChange:
    return pb.RowChange.FromString(ce.entry.storeValue)


def check_header(ce: CanalEntry, d: DumpEvent, when: int) -> None:
    h = ce.entry.header
    assert h.version == 1 and h.serverenCode == "UTF-8" and h.sourceType == pb.MYSQL
    assert h.logfileOffset == d.position  # the event's START offset ("# at N")
    assert h.eventLength == d.end_log_pos - d.position
    assert h.serverId == d.server_id
    assert h.executeTime == when * 1000


def cols(image: Any) -> list[tuple[str, int, str, bool]]:
    return [(c.name, c.sqlType, c.value, c.isNull) for c in image]


# ---- MySQL 5.7: GTID transaction with an UPDATE of FLOAT/DOUBLE/DECIMAL/TEXT columns --------------

def test_mysql57_gtid_transaction_with_update() -> None:
    base = "mysql-cdc-rs/tests/events/5.7/31_update_rows_v2/"
    d = dump(base + "dump.txt")
    out = list(drive(base + "log.bin", lambda s, t: BOXERCRAB if t == "boxercrab" else None))
    assert [pb.EntryType.Name(ce.entry_type) for _, ce in out] == ["TRANSACTIONBEGIN", "ROWDATA", "TRANSACTIONEND"]
    begin, rows, end = (ce for _, ce in out)
    when = int(d[219].set_values()["timestamp"])
    gtid = d[154].set_values()["gtid_next"]  # SET @@SESSION.GTID_NEXT= 'e3e2a4ee-...:1'
    for ce, at in ((begin, 219), (rows, 369), (end, 502)):
        check_header(ce, d[at], when)
        h = ce.entry.header
        assert h.gtid == gtid
        props = [(p.key, p.value) for p in h.props]
        assert props[:3] == [("curtGtid", gtid), ("curtGtidSn", d[154].fields()["sequence_number"]),
                             ("curtGtidLct", d[154].fields()["last_committed"])]
    assert not begin.entry.header.HasField("eventType")
    assert pb.TransactionBegin.FromString(begin.entry.storeValue).threadId == int(d[219].fields()["thread_id"])
    assert pb.TransactionEnd.FromString(end.entry.storeValue).transactionId == d[502].fields()["Xid"]
    assert [(p.key, p.value) for p in rows.entry.header.props][3:] == [("rowsCount", "1")]
    h = rows.entry.header
    assert (h.schemaName, h.tableName, h.eventType) == ("default", "boxercrab", pb.UPDATE)
    rc = row_change(rows)
    assert (rc.tableId, rc.eventType, rc.isDdl) == (208, pb.UPDATE, False)  # "mapped to number 208"
    (rd,) = rc.rowDatas
    # sql.sql: INSERT ... ('abc', 'abc', 'abc', 'abc', 'abc', 1.0, 2.0, 3.0); UPDATE ... 'xd' ..., 4.0, 4.0, 4.0;
    # decimal(10,4) 3.0000 is "3.0" in Canal's text (its decoder leaves out a zero left-over fraction word)
    assert cols(rd.beforeColumns) == [
        ("id", 4, "1", False), ("varchar_l", 12, "abc", False), ("varchar_s", 12, "abc", False),
        ("text_s", 2005, "abc", False), ("text_m", 2005, "abc", False), ("text_l", 2005, "abc", False),
        ("num_float", 7, "1.0", False), ("num_double", 8, "2.0", False), ("num_decimal", 3, "3.0", False)]
    assert cols(rd.afterColumns) == [
        ("id", 4, "1", False), ("varchar_l", 12, "xd", False), ("varchar_s", 12, "xd", False),
        ("text_s", 2005, "xd", False), ("text_m", 2005, "xd", False), ("text_l", 2005, "xd", False),
        ("num_float", 7, "4.0", False), ("num_double", 8, "4.0", False), ("num_decimal", 3, "4.0", False)]
    assert [c.updated for c in rd.afterColumns] == [False] + [True] * 8
    assert [c.isKey for c in rd.afterColumns] == [True] + [False] * 8
    assert [c.mysqlType for c in rd.afterColumns] == [c.column_type for c in BOXERCRAB.columns]
    # the typed rows ride along untouched
    assert rows.columns == tuple(c.name for c in BOXERCRAB.columns)
    (before, after), = rows.rows
    assert before[6] == 1.0 and str(after[8]) == "4.0000"


# ---- MySQL 8.2: integer types, tinyint(1), a partial UPDATE, a CREATE TABLE --------------------------

INT_TABLE = TableMeta("test", "int_table", (  # mysql-cdc-rs tests/events/8.0/31_update_rows_v2/sql.sql
    ColumnMeta("col1", "tinyint", "tinyint(4)"), ColumnMeta("col2", "smallint", "smallint(6)"),
    ColumnMeta("col3", "mediumint", "mediumint(9)"), ColumnMeta("col4", "int", "int(11)"),
    ColumnMeta("col5", "bigint", "bigint(20)"), ColumnMeta("col6", "tinyint", "tinyint(1)"),
))


def test_mysql80_integers_and_update_flags() -> None:
    base = "mysql-cdc-rs/tests/events/8.0/31_update_rows_v2/"
    d = dump(base + "dump.txt")

    def ddl(ev: E.QueryEvent) -> DdlResult | None:
        if ev.query.startswith("CREATE TABLE"):
            return DdlResult(event_type=EVENT_CREATE, schema="test", table="int_table", ddl_schema=ev.schema)
        return None

    out = {ev.position: ce for ev, ce in drive(base + "binlog.000001",
                                                lambda s, t: INT_TABLE if t == "int_table" else None, ddl=ddl)}
    create = out[447]
    check_header(create, d[447], int(d[447].set_values()["timestamp"]))
    h = create.entry.header
    assert (h.schemaName, h.tableName, h.eventType) == ("test", "int_table", pb.CREATE)
    rc = row_change(create)
    assert (rc.eventType, rc.isDdl, rc.ddlSchemaName) == (pb.CREATE, True, d[234].set_values()["use"])
    assert rc.sql == d[447].statement()
    sql_types = [-6, 5, 4, 4, -5, -6]  # TINYINT, SMALLINT, MEDIUMINT->INTEGER, INTEGER, BIGINT, tinyint(1)->TINYINT
    for at, begin_at in ((1046, 911), (1355, 1211)):
        ce = out[at]
        check_header(ce, d[at], int(d[begin_at].set_values()["timestamp"]))
        (rd,) = row_change(ce).rowDatas
        (drow,) = d[at].rows()
        images = [rd.afterColumns] if drow.kind == "write" else [rd.beforeColumns, rd.afterColumns]
        for image, dimg in zip(images, drow.images, strict=True):
            assert [(c.index + 1, c.value) for c in image] == [(k, v.text) for k, v in sorted(dimg.items())]
            assert [c.sqlType for c in image] == sql_types
            assert not any(c.isKey for c in image)  # no primary key
        if drow.kind == "update":
            before, after = drow.images
            assert [c.updated for c in rd.afterColumns] == [before[k].text != after[k].text for k in sorted(after)]
            assert [c.updated for c in rd.afterColumns] == [False, True, True, False, False, False]
    assert pb.TransactionEnd.FromString(out[1431].entry.storeValue).transactionId == d[1431].fields()["Xid"]


# ---- MySQL 5.6 (zalora): TIMESTAMP time zones, unsigned TINYINT, CHAR, DDL, statement DML ----------

LANG3 = TableMeta("test_db", "language", (  # the CREATE TABLE at 220 in the dump
    ColumnMeta("language_id", "tinyint", "tinyint(3) unsigned", nullable=False, unsigned=True, is_key=True),
    ColumnMeta("name", "char", "char(20)", nullable=False, charset="utf8", collation_id=33),
    ColumnMeta("last_update", "timestamp", "timestamp", nullable=False),
))
LANG4 = TableMeta("test_db", "language", (*LANG3.columns,  # alter table language add some_field varchar(255)
                                          ColumnMeta("some_field", "varchar", "varchar(255)", charset="utf8",
                                                     collation_id=33)))


def _zalora(tz: str) -> tuple[dict[int, DumpEvent], dict[int, CanalEntry]]:
    current = {"meta": LANG3}

    def on_query(ev: E.QueryEvent) -> None:
        if ev.query.lower().startswith("alter table language"):
            current["meta"] = LANG4

    def ddl(ev: E.QueryEvent) -> DdlResult | None:
        q = ev.query.lower()
        if q.startswith("create table"):
            return DdlResult(event_type=EVENT_CREATE, schema="test_db", table="language", ddl_schema=ev.schema)
        if q.startswith("alter table"):
            return DdlResult(event_type=EVENT_ALTER, schema="test_db", table="language", ddl_schema=ev.schema)
        if q.startswith("delete"):
            return DdlResult(event_type=EVENT_DELETE, schema="test_db", table="filler", ddl_schema=ev.schema)
        return None

    out = {ev.position: ce for ev, ce in drive("zalora-binlog-parser/data/fixtures/mysql-bin.06",
                                                lambda s, t: current["meta"], tz=tz, ddl=ddl, on_query=on_query)}
    return dump("zalora-binlog-parser/data/fixtures/plaintext-mysql-bin.06"), out


def test_zalora_rows_in_utc_and_shanghai() -> None:
    for tz in ("UTC", "Asia/Shanghai"):
        d, out = _zalora(tz)
        for at, begin_at in ((723, 589), (1080, 943)):
            ce = out[at]
            check_header(ce, d[at], int(d[begin_at].set_values()["timestamp"]))
            (drow,) = d[at].rows()
            (image,) = drow.images
            (rd,) = row_change(ce).rowDatas
            epoch = int(image[3].text)
            expected = [("language_id", -6, image[1].text, False),  # 70 < 128: TINYINT
                        ("name", 1, image[2].text.strip("'"), False),
                        ("last_update", 93,
                         dt.datetime.fromtimestamp(epoch, dt.timezone(dt.timedelta(hours=0 if tz == "UTC" else 8)))
                         .strftime("%Y-%m-%d %H:%M:%S"), False)]
            if 4 in image:
                expected.append(("some_field", 12, image[4].text.strip("'"), False))
            assert cols(rd.afterColumns) == expected
        assert out[723].entry.header.executeTime == 1493012711000


def test_zalora_ddl_and_statement_dml() -> None:
    d, out = _zalora("UTC")
    for at, et, is_ddl in ((220, pb.CREATE, True), (802, pb.ALTER, True), (120, pb.DELETE, False)):
        ce = out[at]
        check_header(ce, d[at], int(d[at].set_values()["timestamp"]))
        rc = row_change(ce)
        assert (rc.eventType, rc.isDdl, rc.sql, rc.ddlSchemaName) == (et, is_ddl, d[at].statement(), "test_db")
        assert ce.entry.header.eventType == et and ce.sql == d[at].statement()
    assert [pb.TransactionEnd.FromString(out[at].entry.storeValue).transactionId for at in (771, 1140)] == [
        d[771].fields()["Xid"], d[1140].fields()["Xid"]]


# ---- MySQL 5.7 (osheroff checksum-crc32): DOUBLE, TIMESTAMP2, DECIMAL, utf8 text, NULL ------------

def _bigint(name: str) -> ColumnMeta:
    return ColumnMeta(name, "bigint", "bigint(20)")


def _varchar(name: str, n: int) -> ColumnMeta:
    return ColumnMeta(name, "varchar", f"varchar({n})", charset="utf8", collation_id=33)


# column types as the TABLE_MAP events state them (VARCHAR(765) = varchar(255) in utf8); names invented
FILE = TableMeta("simu_file_dev", "file", (
    _bigint("id"), _varchar("name", 255), _varchar("path", 55), _bigint("c4"), _bigint("c5"),
    _varchar("c6", 512), _bigint("c7"), ColumnMeta("created", "timestamp", "timestamp"),
    ColumnMeta("size", "double", "double"), ColumnMeta("c10", "tinyint", "tinyint(4)"),
    ColumnMeta("c11", "tinyint", "tinyint(4)"), ColumnMeta("c12", "int", "int(11)"),
    ColumnMeta("c13", "tinyint", "tinyint(4)"), ColumnMeta("updated", "timestamp", "timestamp"),
    _bigint("c15"), _bigint("c16"), _bigint("c17")))
FUND_ACCOUNT = TableMeta("menkor_dev", "fund_account", (
    _bigint("id"), ColumnMeta("balance", "decimal", "decimal(17,2)"), _bigint("c3"), _bigint("c4"), _bigint("c5"),
    ColumnMeta("c6", "tinyint", "tinyint(4)"), _varchar("c7", 64), _varchar("currency", 3), _varchar("owner", 40),
    ColumnMeta("c10", "tinyint", "tinyint(4)"), ColumnMeta("created", "timestamp", "timestamp"),
    ColumnMeta("updated", "timestamp", "timestamp"), ColumnMeta("frozen", "decimal", "decimal(15,2)"),
    ColumnMeta("c14", "tinyint", "tinyint(4)"), ColumnMeta("c15", "tinyint", "tinyint(4)"), _bigint("c16")))
PERSONNEL = TableMeta("simu_affair_dev", "personnel", (
    *(_bigint(f"c{i}") for i in range(1, 6)), ColumnMeta("c6", "tinyint", "tinyint(4)"),
    *(ColumnMeta(f"t{i}", "timestamp", "timestamp") for i in range(7, 10)), _bigint("c10"),
    ColumnMeta("c11", "tinyint", "tinyint(4)")))


def test_osheroff_double_timestamp_decimal_text() -> None:
    metas = {"file": FILE, "fund_account": FUND_ACCOUNT, "personnel": PERSONNEL}
    out = {ev.position: ce for ev, ce in drive(
        "osheroff-mysql-binlog-connector-java/src/test/resources/mysql-bin.checksum-crc32",
        lambda s, t: metas.get(t)) if isinstance(ev, E.RowsEvent) and ev.table.table in metas}
    # mariadb-binlog -v, "# at 1116 ... Write_rows": @1=12600330 @2='Balance(magazine)-04-2.3.001-bigpicture_04_2.jpg'
    # @3='/' ... @8=1525426053 @9=449847 ... @14=1525426053
    ins = row_change(out[1116]).rowDatas[0].afterColumns
    assert out[1116].entry.header.executeTime == 1525426053000  # SET TIMESTAMP=1525426053
    assert [(c.name, c.sqlType, c.value) for c in ins[:2]] == [
        ("id", -5, "12600330"), ("name", 12, "Balance(magazine)-04-2.3.001-bigpicture_04_2.jpg")]
    assert (ins[7].sqlType, ins[7].value) == (93, "2018-05-04 09:27:33")  # 1525426053 in UTC
    assert (ins[8].sqlType, ins[8].value) == (8, "449847.0")  # Double.toString always has a fraction digit
    # "# at 1635 ... Update_rows": only @2 changes, 'Balance(...).jpg' -> '陶瓷.jpg'
    upd = row_change(out[1635]).rowDatas[0]
    assert upd.afterColumns[1].value == "陶瓷.jpg" and upd.beforeColumns[1].value == ins[1].value
    assert [c.name for c in upd.afterColumns if c.updated] == ["name"]
    # "# at 26270": @2=0.00 ... @9='yan闫庆庆' @11=1525434153 @13=0.00 (Canal's text of a zero DECIMAL(_,2): "0.0")
    fa = row_change(out[26270]).rowDatas[0].afterColumns
    assert [(c.sqlType, c.value) for c in (fa[1], fa[8], fa[10], fa[12])] == [
        (3, "0.0"), (12, "yan闫庆庆"), (93, "2018-05-04 11:42:33"), (3, "0.0")]
    # "# at 22297": @9=NULL (a TIMESTAMP column)
    pe = row_change(out[22297]).rowDatas[0].afterColumns
    assert (pe[8].isNull, pe[8].sqlType, pe[8].value) == (True, 93, "")


# ---- MySQL 5.5 sakila: YEAR, ENUM, SET, DECIMAL(4,2), TEXT, old TIMESTAMP, MyISAM COMMIT ------------

FILM = TableMeta("sakila", "film", (  # CREATE TABLE film (...) at 3406 in the binlog
    ColumnMeta("film_id", "smallint", "smallint(5) unsigned", nullable=False, unsigned=True, is_key=True),
    ColumnMeta("title", "varchar", "varchar(255)", nullable=False, charset="utf8", collation_id=33),
    ColumnMeta("description", "text", "text", charset="utf8", collation_id=33),
    ColumnMeta("release_year", "year", "year(4)"),
    ColumnMeta("language_id", "tinyint", "tinyint(3) unsigned", nullable=False, unsigned=True),
    ColumnMeta("original_language_id", "tinyint", "tinyint(3) unsigned", unsigned=True),
    ColumnMeta("rental_duration", "tinyint", "tinyint(3) unsigned", nullable=False, unsigned=True),
    ColumnMeta("rental_rate", "decimal", "decimal(4,2)", nullable=False),
    ColumnMeta("length", "smallint", "smallint(5) unsigned", unsigned=True),
    ColumnMeta("replacement_cost", "decimal", "decimal(5,2)", nullable=False),
    ColumnMeta("rating", "enum", "enum('G','PG','PG-13','R','NC-17')",
               enum_values=("G", "PG", "PG-13", "R", "NC-17"), charset="utf8", collation_id=33),
    ColumnMeta("special_features", "set", "set('Trailers','Commentaries','Deleted Scenes','Behind the Scenes')",
               set_values=("Trailers", "Commentaries", "Deleted Scenes", "Behind the Scenes"), charset="utf8",
               collation_id=33),
    ColumnMeta("last_update", "timestamp", "timestamp", nullable=False),
))


def test_sakila_film_year_enum_set_decimal() -> None:
    film: CanalEntry | None = None
    commit: CanalEntry | None = None
    for ev, ce in drive("osheroff-mysql-binlog-connector-java/src/test/resources/mysql-bin.sakila.gz",
                        lambda s, t: FILM if t == "film" else None):
        if isinstance(ev, E.QueryEvent) and ev.position == 236834:
            commit = ce
        if isinstance(ev, E.RowsEvent) and ev.table.table == "film":
            film = ce
            break
    # "# at 236834 ... COMMIT" after the MyISAM film_text load: Canal ends it with transactionId "0"
    assert commit is not None and commit.entry.entryType == pb.TRANSACTIONEND
    assert pb.TransactionEnd.FromString(commit.entry.storeValue).transactionId == "0"
    assert film is not None and film.entry.header.logfileOffset == 237022
    rds = row_change(film).rowDatas
    # mariadb-binlog -v: @1=1 @2='ACADEMY DINOSAUR' @3='A Epic Drama of ...' @4=2006 @5=1 @6=NULL @7=6 @8=0.99
    # @9=86 @10=20.99 @11=2 @12=b'00001100' @13=1139976222; mysqlbinlog, like Canal, prints the ENUM index
    # and the SET bitmask
    first = rds[0].afterColumns
    assert [(c.sqlType, c.value, c.isNull) for c in first] == [
        (5, "1", False), (12, "ACADEMY DINOSAUR", False),
        (2005, "A Epic Drama of a Feminist And a Mad Scientist who must Battle a Teacher in The Canadian Rockies",
         False),
        (12, "2006", False), (-6, "1", False), (-6, "", True), (-6, "6", False), (3, "0.99", False),
        (5, "86", False), (3, "20.99", False), (4, "2", False), (-7, str(0b00001100), False),
        (93, "2006-02-15 04:03:42", False)]  # 1139976222 in UTC
    # second and third rows: @8=4.99 @10=12.99 @11=1 @12=b'00000101'; @8=2.99 @10=18.99 @11=5 @12=b'00000101'
    assert [[rd.afterColumns[i].value for i in (7, 9, 10, 11)] for rd in rds[1:3]] == [
        ["4.99", "12.99", "1", "5"], ["2.99", "18.99", "5", "5"]]
    # the typed rows keep the text of ENUM/SET values
    assert film.rows[0][10] == "PG" and film.rows[0][11] == "Deleted Scenes,Behind the Scenes"
