"""canal.properties / instance.properties (docs/canal-compat.md §5): every key's default, a valid and an invalid value,
placeholders, precedence, the shipped conf/ and the auto-scan helper (the .properties format itself:
test_properties_format.py)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from canal_core.instance.config import (
    BOTH,
    INSTANCE,
    KEYS,
    KEYS_BY_NAME,
    SERVER,
    CanalConfig,
    ConfigError,
    HostPort,
    InstanceMode,
    MetaMode,
    ServerMode,
    SslMode,
    diff_destinations,
    meta_mode_for,
    scan_destinations,
)
from canal_core.store import BatchMode

REPO = Path(__file__).resolve().parents[2]

# Every key docs/canal-compat.md §5 lists, spelled out (".sql=" style shorthands expanded).
SECTION5 = """
canal.ip canal.register.ip canal.port canal.metrics.pull.port canal.user canal.passwd canal.zkServers
canal.zookeeper.flush.period canal.serverMode canal.file.data.dir canal.file.flush.period
canal.instance.memory.buffer.size canal.instance.memory.buffer.memunit canal.instance.memory.batch.mode
canal.instance.memory.rawEntry canal.instance.detecting.enable canal.instance.detecting.sql
canal.instance.detecting.interval.time canal.instance.detecting.retry.threshold
canal.instance.detecting.heartbeatHaEnable canal.instance.transaction.size canal.instance.fallbackIntervalInSeconds
canal.instance.network.receiveBufferSize canal.instance.network.sendBufferSize canal.instance.network.soTimeout
canal.instance.filter.druid.ddl canal.instance.filter.query.dcl canal.instance.filter.query.dml
canal.instance.filter.query.ddl canal.instance.filter.table.error canal.instance.filter.rows
canal.instance.filter.transaction.entry canal.instance.filter.dml.insert canal.instance.filter.dml.update
canal.instance.filter.dml.delete canal.instance.binlog.format canal.instance.binlog.image
canal.instance.get.ddl.isolation canal.instance.parser.parallel canal.instance.parser.parallelBufferSize
canal.instance.tsdb.enable canal.instance.tsdb.snapshot.interval canal.instance.tsdb.snapshot.expire
canal.destinations canal.conf.dir canal.auto.scan canal.auto.scan.interval canal.instance.global.mode
canal.instance.global.lazy canal.instance.global.spring.xml
canal.instance.mysql.slaveId canal.instance.gtidon canal.instance.master.address canal.instance.master.journal.name
canal.instance.master.position canal.instance.master.timestamp canal.instance.master.gtid
canal.instance.standby.address canal.instance.standby.journal.name canal.instance.standby.position
canal.instance.standby.timestamp canal.instance.standby.gtid canal.instance.dbUsername canal.instance.dbPassword
canal.instance.connectionCharset canal.instance.defaultDatabaseName canal.instance.filter.regex
canal.instance.filter.black.regex canal.instance.filter.field canal.instance.filter.black.field
canal.instance.master.sslMode
""".split()

# keys of ours, beyond docs/canal-compat.md §5 (each documented where it is used)
EXTENSIONS = ["canal.zookeeper.session.timeout", "canal.zookeeper.auth", "canal.instance.parser.maxEventSize",
              "canal.metrics.pull.ip", "canal.tcp.max.connections", "canal.tcp.max.request.bytes",
              "canal.tcp.auth.timeout", "canal.tcp.auth.backoff", "canal.tcp.auth.backoff.max",
              "canal.log.file.max.bytes", "canal.log.file.backups"]

CONF = object()  # placeholder for "the conf directory of the test"
T, F = "true", "false"
MYSQL_GTID = "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5"

# key, Canal's default, a valid text, what it parses to, an invalid text (None: every text is valid)
CASES: list[tuple[str, Any, str, Any, str | None]] = [
    ("canal.ip", "", "10.0.0.1", "10.0.0.1", None),
    ("canal.metrics.pull.ip", "", "127.0.0.1", "127.0.0.1", None),  # default: canal.ip
    ("canal.register.ip", "", "10.0.0.2", "10.0.0.2", None),
    ("canal.port", 11111, "21111", 21111, "70000"),
    ("canal.metrics.pull.port", 11112, "21112", 21112, "port"),
    ("canal.user", "", "canal", "canal", None),
    ("canal.passwd", "", "e3619321c1a937c46a0d8bd1dac39f93b27d4458", "E3619321C1A937C46A0D8BD1DAC39F93B27D4458",
     "canal"),
    ("canal.tcp.max.connections", 1000, "200", 200, "0"),
    ("canal.tcp.max.request.bytes", 1048576, "65536", 65536, "100"),
    ("canal.tcp.auth.timeout", 30, "5", 5, "0"),
    ("canal.tcp.auth.backoff", 250, "0", 0, "-1"),
    ("canal.tcp.auth.backoff.max", 10000, "2000", 2000, "1e4"),
    ("canal.log.file.max.bytes", 104857600, "1048576", 1048576, "1k"),
    ("canal.log.file.backups", 5, "0", 0, "-2"),
    ("canal.zkServers", "", "10.0.0.1:2181,10.0.0.2:2181/canal", "10.0.0.1:2181,10.0.0.2:2181/canal", "zk1"),
    ("canal.zookeeper.flush.period", 1000, "500", 500, "0"),
    ("canal.zookeeper.session.timeout", 90000, "4000", 4000, "500"),
    ("canal.zookeeper.auth", "", "canal:s3cr:et", "canal:s3cr:et", None),  # invalid: never echoed (below)
    ("canal.serverMode", ServerMode.TCP, "KAFKA", ServerMode.KAFKA, "http"),
    ("canal.file.data.dir", CONF, "data", ("conf", "data"), ""),
    ("canal.file.flush.period", 1000, "2000", 2000, "1s"),
    ("canal.destinations", ("example",), " a, b ,c", ("a", "b", "c"), "a,a"),
    ("canal.conf.dir", CONF, "sub", ("conf", "sub"), ""),
    ("canal.auto.scan", True, "FALSE", False, "yes"),
    ("canal.auto.scan.interval", 5, "10", 10, "-1"),
    ("canal.instance.global.mode", InstanceMode.SPRING, "manager", InstanceMode.MANAGER, "xml"),
    ("canal.instance.global.lazy", False, T, True, "1"),
    ("canal.instance.global.spring.xml", "classpath:spring/file-instance.xml", "classpath:spring/memory-instance.xml",
     "classpath:spring/memory-instance.xml", "classpath:spring/local-instance.xml"),
    ("canal.instance.memory.buffer.size", 16384, "1024", 1024, "1000"),
    ("canal.instance.memory.buffer.memunit", 1024, "2048", 2048, "0"),
    ("canal.instance.memory.batch.mode", BatchMode.MEMSIZE, "itemsize", BatchMode.ITEMSIZE, "BYTES"),
    ("canal.instance.memory.rawEntry", True, F, False, "no"),
    ("canal.instance.detecting.enable", False, T, True, "on"),
    ("canal.instance.detecting.sql", "select 1", "select 2", "select 2", None),
    ("canal.instance.detecting.interval.time", 3, "5", 5, "0"),
    ("canal.instance.detecting.retry.threshold", 3, "0", 0, "-1"),
    ("canal.instance.detecting.heartbeatHaEnable", False, T, True, "enabled"),
    ("canal.instance.transaction.size", 1024, "4096", 4096, "0"),
    ("canal.instance.fallbackIntervalInSeconds", 60, "0", 0, "-5"),
    ("canal.instance.network.receiveBufferSize", 16384, "65536", 65536, "64k"),
    ("canal.instance.network.sendBufferSize", 16384, "65536", 65536, "1e5"),
    ("canal.instance.network.soTimeout", 30, "60", 60, "0"),
    ("canal.instance.filter.druid.ddl", True, F, False, "Y"),
    ("canal.instance.filter.query.dcl", False, T, True, "Y"),
    ("canal.instance.filter.query.dml", False, T, True, "Y"),
    ("canal.instance.filter.query.ddl", False, T, True, "Y"),
    ("canal.instance.filter.table.error", False, T, True, "Y"),
    ("canal.instance.filter.rows", False, T, True, "Y"),
    ("canal.instance.filter.transaction.entry", False, T, True, "Y"),
    ("canal.instance.filter.dml.insert", False, T, True, "Y"),
    ("canal.instance.filter.dml.update", False, T, True, "Y"),
    ("canal.instance.filter.dml.delete", False, T, True, "Y"),
    ("canal.instance.binlog.format", ("ROW", "STATEMENT", "MIXED"), "row", ("ROW",), "ROW,JSON"),
    ("canal.instance.binlog.image", ("FULL", "MINIMAL", "NOBLOB"), "FULL", ("FULL",), "PARTIAL"),
    ("canal.instance.get.ddl.isolation", False, T, True, "2"),
    ("canal.instance.parser.parallel", True, F, False, "off"),
    ("canal.instance.parser.parallelBufferSize", 256, "512", 512, "300"),
    ("canal.instance.parser.maxEventSize", 64 << 20, "1073741824", 1 << 30, "1000"),
    ("canal.instance.tsdb.enable", True, F, False, "disabled"),
    ("canal.instance.tsdb.snapshot.interval", 24, "0", 0, "-1"),
    ("canal.instance.tsdb.snapshot.expire", 360, "720", 720, "1.5"),
    ("canal.instance.mysql.slaveId", 0, "1234", 1234, "4294967296"),
    ("canal.instance.gtidon", False, T, True, "gtid"),
    ("canal.instance.master.address", HostPort("127.0.0.1", 3306), "db.example.com:3407",
     HostPort("db.example.com", 3407), "127.0.0.1"),
    ("canal.instance.master.journal.name", "", "mysql-bin.000003", "mysql-bin.000003", None),
    ("canal.instance.master.position", None, "4", 4, "-4"),
    ("canal.instance.master.timestamp", None, "1700000000000", 1700000000000, "yesterday"),
    ("canal.instance.master.gtid", "", "0-1-100", "0-1-100", "not-a-gtid"),
    ("canal.instance.master.sslMode", SslMode.DISABLED, "verify_ca", SslMode.VERIFY_CA, "ON"),
    ("canal.instance.standby.address", None, "[::1]:3408", HostPort("::1", 3408), "::1:3408"),
    ("canal.instance.standby.journal.name", "", "mysql-bin.000009", "mysql-bin.000009", None),
    ("canal.instance.standby.position", None, "154", 154, "x"),
    ("canal.instance.standby.timestamp", None, "0", 0, "-1"),
    ("canal.instance.standby.gtid", "", MYSQL_GTID, MYSQL_GTID, "x:y"),
    ("canal.instance.dbUsername", "canal", "repl", "repl", None),
    ("canal.instance.dbPassword", "canal", "s3cret", "s3cret", None),
    ("canal.instance.connectionCharset", "UTF-8", "GBK", "GBK", "KLINGON-8"),
    ("canal.instance.defaultDatabaseName", "", "test", "test", None),
    ("canal.instance.filter.regex", ".*\\..*", "test\\..*", "test\\..*", "test\\.("),
    ("canal.instance.filter.black.regex", "mysql\\.slave_.*", "", "", "["),
    ("canal.instance.filter.field", "", "test.t1:id/name", "test.t1:id/name", "test.t1"),
    ("canal.instance.filter.black.field", "", "test.t1:photo", "test.t1:photo", "test.t1:"),
]
CASE_IDS = [c[0] for c in CASES]


def _esc(value: str) -> str:
    """A value as it must be written in a .properties file."""
    return value.replace("\\", "\\\\")


def _write(path: Path, props: dict[str, str] | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = props if isinstance(props, str) else "".join(f"{k} = {_esc(v)}\n" for k, v in props.items())
    path.write_text(text, encoding="utf-8")
    return path


def _conf(tmp_path: Path, canal: dict[str, str] | str | None = None,
          instances: dict[str, dict[str, str] | str] | None = None) -> Path:
    conf = tmp_path / "conf"
    _write(conf / "canal.properties", canal or {})
    for name, props in (instances or {"example": {}}).items():
        _write(conf / name / "instance.properties", props)
    return conf


def _expect(expected: Any, conf: Path) -> Any:
    if expected is CONF:
        return conf
    if isinstance(expected, tuple) and expected and expected[0] == "conf":
        return conf.joinpath(*expected[1:])
    return expected


def _typed(conf: Path, key: str, where: str) -> Any:
    """The key's typed value as the place that consumes it sees it."""
    k = KEYS_BY_NAME[key]
    canal = CanalConfig.load(conf, env={})
    if where == "canal" and k.scope in (SERVER, BOTH):
        return getattr(canal, k.attr)
    return getattr(canal.instance("example"), k.attr)


# --- the table ---------------------------------------------------------------------------------------------


def test_table_covers_section5_and_only_known_keys() -> None:
    assert len(set(SECTION5)) == len(SECTION5)
    assert set(SECTION5) | set(EXTENSIONS) == set(KEYS_BY_NAME), "KEYS and docs/canal-compat.md §5 (+ ours) differ"
    assert set(CASE_IDS) == set(KEYS_BY_NAME) and len(CASE_IDS) == len(set(CASE_IDS))
    from dataclasses import fields

    canal_fields = {f.name for f in fields(CanalConfig)}
    from canal_core.instance.config import InstanceConfig

    instance_fields = {f.name for f in fields(InstanceConfig)}
    for k in KEYS:
        target = canal_fields if k.scope == SERVER else instance_fields
        assert k.attr in target, k.name
        if k.scope == BOTH:
            assert k.attr in canal_fields, k.name


@pytest.mark.parametrize(("key", "default", "valid", "parsed", "invalid"), CASES, ids=CASE_IDS)
def test_default_when_absent(tmp_path: Path, key: str, default: Any, valid: str, parsed: Any,
                             invalid: str | None) -> None:
    conf = _conf(tmp_path)
    assert _typed(conf, key, "canal") == _expect(default, conf)
    if KEYS_BY_NAME[key].scope != SERVER:
        assert _typed(conf, key, "instance") == _expect(default, conf)


@pytest.mark.parametrize(("key", "default", "valid", "parsed", "invalid"), CASES, ids=CASE_IDS)
def test_valid_value_parses(tmp_path: Path, key: str, default: Any, valid: str, parsed: Any,
                            invalid: str | None) -> None:
    scope = KEYS_BY_NAME[key].scope
    # in canal.properties: seen by the server and (instance keys) inherited by every destination
    conf = _conf(tmp_path / "global", canal={key: valid})
    assert _typed(conf, key, "canal") == _expect(parsed, conf)
    if scope != SERVER:
        assert _typed(conf, key, "instance") == _expect(parsed, conf)
        # in instance.properties
        conf = _conf(tmp_path / "local", instances={"example": {key: valid}})
        assert _typed(conf, key, "instance") == _expect(parsed, conf)


@pytest.mark.parametrize(("key", "default", "valid", "parsed", "invalid"),
                         [c for c in CASES if c[4] is not None], ids=[c[0] for c in CASES if c[4] is not None])
def test_invalid_value_names_file_and_key(tmp_path: Path, key: str, default: Any, valid: str, parsed: Any,
                                          invalid: str) -> None:
    conf = _conf(tmp_path / "global", canal={"# a comment line": "", key: invalid})
    with pytest.raises(ConfigError) as e:
        CanalConfig.load(conf, env={})
    msg = str(e.value)
    assert f"{conf / 'canal.properties'}:2: {key} = {invalid!r} is invalid: expected " in msg
    assert (e.value.key, e.value.value, e.value.line) == (key, invalid, 2)
    if KEYS_BY_NAME[key].scope != SERVER:
        conf = _conf(tmp_path / "local", instances={"example": {key: invalid}})
        canal = CanalConfig.load(conf, env={})
        with pytest.raises(ConfigError) as e:
            canal.instance("example")
        assert f"{conf / 'example' / 'instance.properties'}:1: {key} = {invalid!r} is invalid" in str(e.value)


def test_invalid_zookeeper_auth_is_not_echoed(tmp_path: Path) -> None:
    for bad in ("canal-only", ":secret", "canal:"):
        conf = _conf(tmp_path / str(abs(hash(bad))), canal={"canal.zookeeper.auth": bad})
        with pytest.raises(ConfigError) as e:
            CanalConfig.load(conf, env={})
        assert "canal.zookeeper.auth = '***' is invalid: expected empty, or user:password" in str(e.value)
        assert bad not in str(e.value) and e.value.value == "***"


def test_invalid_messages_say_what_is_expected(tmp_path: Path) -> None:
    def err(key: str, value: str) -> str:
        with pytest.raises(ConfigError) as e:
            CanalConfig.load(_conf(tmp_path / str(abs(hash(key + value))), canal={key: value}), env={})
        return str(e.value)

    assert "power of two" in err("canal.instance.memory.buffer.size", "1000")
    assert "MEMSIZE|ITEMSIZE" in err("canal.instance.memory.batch.mode", "BYTES")
    assert "host:port" in err("canal.instance.master.address", "localhost")
    assert "true or false" in err("canal.auto.scan", "yes")
    assert "file-instance.xml" in err("canal.instance.global.spring.xml", "x.xml")


def test_blank_numbers_take_the_default_blank_text_is_a_value(tmp_path: Path) -> None:
    conf = _conf(tmp_path, canal="canal.port =\ncanal.instance.filter.regex =\ncanal.auto.scan=\n")
    canal = CanalConfig.load(conf, env={})
    assert canal.port == 11111 and canal.auto_scan is True
    inst = canal.instance("example")
    assert inst.filter_regex == "" and inst.event_filter().table("any", "thing")


def test_values_are_trimmed(tmp_path: Path) -> None:
    conf = _conf(tmp_path, canal="canal.instance.memory.buffer.memunit = 1024 \n",
                 instances={"example": "canal.instance.dbPassword = canal  \n"})
    canal = CanalConfig.load(conf, env={})
    assert canal.instance("example").db_password == "canal"
    assert canal.instance_defaults.memory_buffer_memunit == 1024


# --- precedence ---------------------------------------------------------------------------------------------


def test_instance_over_global_over_default(tmp_path: Path) -> None:
    conf = _conf(tmp_path, canal={"canal.instance.transaction.size": "2048", "canal.instance.dbUsername": "g",
                                  "canal.instance.memory.batch.mode": "ITEMSIZE"},
                 instances={"a": {"canal.instance.transaction.size": "4096"}, "b": {}})
    canal = CanalConfig.load(conf, env={})
    a, b = canal.instance("a"), canal.instance("b")
    assert (a.transaction_size, b.transaction_size, canal.instance_defaults.transaction_size) == (4096, 2048, 2048)
    assert a.db_username == b.db_username == "g"
    assert a.memory_batch_mode is BatchMode.ITEMSIZE
    assert a.detecting_interval_time == 3  # default


def test_overrides_beat_env_beat_files(tmp_path: Path) -> None:
    conf = _conf(tmp_path, canal={"canal.port": "1", "canal.instance.transaction.size": "2"},
                 instances={"example": {"canal.instance.transaction.size": "3"}})
    env = {"canal.port": "2000", "canal.instance.transaction.size": "20"}
    canal = CanalConfig.load(conf, env=env)
    assert canal.port == 2000 and canal.instance("example").transaction_size == 20
    canal = CanalConfig.load(conf, env=env, overrides={"canal.port": "3000", "canal.instance.transaction.size": "30"})
    assert canal.port == 3000 and canal.instance("example").transaction_size == 30
    with pytest.raises(ConfigError, match=r"^-D: canal\.port = 'x' is invalid"):
        CanalConfig.load(conf, env=env, overrides={"canal.port": "x"})
    with pytest.raises(ConfigError, match=r"^environment: canal\.port"):
        CanalConfig.load(conf, env={"canal.port": "0"})


def test_a_value_overriding_a_file_line_is_logged_with_both_sources(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    conf = _conf(tmp_path / "logged", canal={"canal.port": "1111", "canal.instance.transaction.size": "2"},
                 instances={"example": "# the source\ncanal.instance.master.address = 127.0.0.1:3407\n"})
    inst_file = conf / "example" / "instance.properties"
    with caplog.at_level(logging.WARNING, logger="canal_core.instance.config"):
        canal = CanalConfig.load(conf, env={"canal.instance.master.address": "127.0.0.1:3427", "unrelated": "x"},
                                 overrides={"canal.port": "2222"})
        inst = canal.instance("example")
        canal.instance("example")  # loaded again: said once
    assert inst.master_address == HostPort("127.0.0.1", 3427) and canal.port == 2222
    assert sorted(r.getMessage() for r in caplog.records) == [
        f"canal.instance.master.address: '127.0.0.1:3427' (environment) is used instead of '127.0.0.1:3407' "
        f"({inst_file}:2)",
        f"canal.port: '2222' (-D) is used instead of '1111' ({conf / 'canal.properties'}:1)",
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="canal_core.instance.config"):
        CanalConfig.load(conf, env={}).instance("example")  # nothing overridden: nothing said
    assert caplog.records == []


def test_server_keys_are_read_from_canal_properties_only(tmp_path: Path) -> None:
    conf = _conf(tmp_path, instances={"example": {"canal.port": "1", "canal.instance.global.lazy": "true",
                                                  "canal.instance.example.lazy": "true"}})
    canal = CanalConfig.load(conf, env={})
    inst = canal.instance("example")
    assert canal.port == 11111 and inst.lazy is False
    w = inst.warnings()
    assert len(w) == 3 and all("read from canal.properties only" in x for x in w)
    assert str(conf / "example" / "instance.properties") + ":1: canal.port" in w[0]


def test_per_destination_mode_lazy_spring_xml(tmp_path: Path) -> None:
    conf = _conf(tmp_path, canal={"canal.destinations": "a,b",
                                  "canal.instance.a.spring.xml": "classpath:spring/memory-instance.xml",
                                  "canal.instance.a.lazy": "true",
                                  "canal.instance.global.spring.xml": "classpath:spring/default-instance.xml",
                                  "canal.zkServers": "127.0.0.1:2181"},
                 instances={"a": {}, "b": {}})
    canal = CanalConfig.load(conf, env={})
    a, b = canal.instance("a"), canal.instance("b")
    assert (a.meta_mode, a.lazy, a.spring_xml) == (MetaMode.MEMORY, True, "classpath:spring/memory-instance.xml")
    assert (b.meta_mode, b.lazy) == (MetaMode.PERIOD_MIXED, False)
    assert canal.meta_mode is MetaMode.PERIOD_MIXED
    assert a.meta_flush_period_ms == 1000 and canal.warnings() == []
    with pytest.raises(ConfigError, match=r"canal\.properties:1: canal\.instance\.b\.lazy = 'maybe' is invalid"):
        CanalConfig.load(_conf(tmp_path / "bad", canal={"canal.instance.b.lazy": "maybe"}), env={})


@pytest.mark.parametrize(("xml", "mode"), [
    ("classpath:spring/file-instance.xml", MetaMode.FILE_MIXED),
    ("classpath:spring/memory-instance.xml", MetaMode.MEMORY),
    ("classpath:spring/default-instance.xml", MetaMode.PERIOD_MIXED),
    ("classpath:spring/group-instance.xml", MetaMode.GROUP),
    ("file-instance.xml", MetaMode.FILE_MIXED),
    ("classpath:spring/local-instance.xml", None),
])
def test_meta_mode_from_spring_xml(xml: str, mode: MetaMode | None) -> None:
    assert meta_mode_for(xml) is mode


# --- placeholders -------------------------------------------------------------------------------------------


def test_placeholders_expand_through_the_chain(tmp_path: Path) -> None:
    conf = _conf(tmp_path, canal={
        "db.host": "127.0.0.1", "db.port": "3407",
        "canal.file.data.dir": "${canal.conf.dir}/data",
        "canal.instance.detecting.sql": "select '${canal.instance.destination}'",
    }, instances={"example": {
        "canal.instance.master.address": "${db.host}:${db.port}",
        "canal.instance.dbUsername": "${db.user:canal}",
        "canal.instance.defaultDatabaseName": "${db.${which}}",
        "which": "host",
        "canal.instance.connectionCharset": "${missing.a:${missing.b:UTF-8}}",
        "canal.instance.master.journal.name": "${canal.port}-${unclosed",
    }})
    canal = CanalConfig.load(conf, env={})
    assert canal.file_data_dir == conf / "data"
    inst = canal.instance("example")
    assert inst.master_address == HostPort("127.0.0.1", 3407)
    assert inst.db_username == "canal"
    assert inst.default_database_name == "127.0.0.1"  # nested name
    assert inst.connection_charset == "UTF-8"  # nested default
    assert inst.master_journal_name == "11111-${unclosed"  # a known key's default; unterminated stays literal
    assert inst.detecting_sql == "select 'example'"
    assert inst.data_dir == conf / "data" / "example" and inst.meta_file == conf / "data" / "example" / "meta.dat"


def test_metrics_bind_address_follows_canal_ip_unless_set(tmp_path: Path) -> None:
    conf = _conf(tmp_path / "a", canal={"canal.ip": "10.0.0.1"})
    assert CanalConfig.load(conf, env={}).metrics_pull_ip == "10.0.0.1"
    conf = _conf(tmp_path / "b", canal={"canal.ip": "10.0.0.1", "canal.metrics.pull.ip": "127.0.0.1"})
    assert CanalConfig.load(conf, env={}).metrics_pull_ip == "127.0.0.1"


def test_placeholder_sees_overrides(tmp_path: Path) -> None:
    conf = _conf(tmp_path, instances={"example": {"canal.instance.master.address": "${db.addr}"}})
    canal = CanalConfig.load(conf, env={}, overrides={"db.addr": "10.1.1.1:3306"})
    assert canal.instance("example").master_address == HostPort("10.1.1.1", 3306)


def test_unknown_placeholder_names_file_line_and_key(tmp_path: Path) -> None:
    conf = _conf(tmp_path, instances={"example": "# first\n\ncanal.instance.master.address = ${db.addr}\n"})
    canal = CanalConfig.load(conf, env={})
    with pytest.raises(ConfigError) as e:
        canal.instance("example")
    assert str(e.value).startswith(f"{conf / 'example' / 'instance.properties'}:3: canal.instance.master.address: "
                                   f"unknown placeholder ${{db.addr}}")
    assert e.value.line == 3 and e.value.key == "canal.instance.master.address"


def test_placeholder_cycle_is_an_error(tmp_path: Path) -> None:
    conf = _conf(tmp_path, canal="a = ${b}\nb = x${a}\ncanal.instance.dbUsername = ${a}\n")
    with pytest.raises(ConfigError, match=r"canal\.properties:\d: .*placeholder cycle .*a -> b -> a"):
        CanalConfig.load(conf, env={})
    conf = _conf(tmp_path / "self", canal="canal.conf.dir = ${canal.conf.dir}/x\n")
    with pytest.raises(ConfigError, match=r"placeholder cycle canal\.conf\.dir -> canal\.conf\.dir"):
        CanalConfig.load(conf, env={})


def test_invalid_after_expansion_shows_both(tmp_path: Path) -> None:
    conf = _conf(tmp_path, canal="n = 12x\ncanal.port = ${n}\n")
    with pytest.raises(ConfigError, match=r"canal\.properties:2: canal\.port = '12x' \(from '\$\{n\}'\) is invalid"):
        CanalConfig.load(conf, env={})


def test_unused_keys_keep_unresolved_placeholders_and_java_keys_are_tolerated(tmp_path: Path) -> None:
    conf = _conf(tmp_path, canal=(
        "canal.id = 1\n"
        "canal.admin.port = 11110\n"
        "canal.instance.global.manager.address = ${canal.admin.manager}\n"
        "canal.instance.tsdb.dir = ${canal.file.data.dir:../conf}/${canal.instance.destination:}\n"
        "canal.instance.tsdb.spring.xml = classpath:spring/tsdb/h2-tsdb.xml\n"
        "kafka.bootstrap.servers = 127.0.0.1:9092\n"
        "canal.mq.flatMessage = true\n"
        "canal.instance.memory.bufer.size = 8\n"
    ))
    canal = CanalConfig.load(conf, env={})
    assert canal.raw["canal.instance.global.manager.address"] == "${canal.admin.manager}"
    assert "kafka.bootstrap.servers" in canal.ignored_keys() and "canal.id" in canal.ignored_keys()
    (w,) = canal.warnings()
    assert w == (f"{conf / 'canal.properties'}:8: unknown key canal.instance.memory.bufer.size (kept, not used); "
                 f"did you mean canal.instance.memory.buffer.size?")


def test_duplicate_key_warns(tmp_path: Path) -> None:
    conf = _conf(tmp_path, canal="canal.port = 1\ncanal.port = 2\n")
    canal = CanalConfig.load(conf, env={})
    assert canal.port == 2
    assert canal.warnings() == [f"{conf / 'canal.properties'}:2: canal.port is assigned again (line 1); "
                                f"the later value wins"]


# --- conversions --------------------------------------------------------------------------------------------


def test_parser_start_store_and_filter_conversions(tmp_path: Path) -> None:
    conf = _conf(tmp_path, canal={"canal.instance.memory.buffer.size": "1024"}, instances={"example": {
        "canal.instance.master.address": "10.0.0.1:3306", "canal.instance.master.journal.name": "mysql-bin.000002",
        "canal.instance.master.position": "120", "canal.instance.standby.address": "10.0.0.2:3307",
        "canal.instance.standby.timestamp": "1700000000000", "canal.instance.dbUsername": "u",
        "canal.instance.dbPassword": "p", "canal.instance.mysql.slaveId": "77", "canal.instance.gtidon": "true",
        "canal.instance.detecting.enable": "true", "canal.instance.detecting.heartbeatHaEnable": "true",
        "canal.instance.fallbackIntervalInSeconds": "30", "canal.instance.master.sslMode": "REQUIRED",
        "canal.instance.filter.regex": "shop\\..*", "canal.instance.filter.black.field": "shop.users:pw",
        "canal.instance.filter.dml.delete": "true", "canal.instance.get.ddl.isolation": "true",
        "canal.instance.parser.maxEventSize": "268435456",
    }})
    inst = CanalConfig.load(conf, env={}).instance("example")
    pc = inst.parser_config()
    assert pc.max_event_size == 256 << 20
    assert (pc.destination, pc.master.host, pc.master.port, pc.master.user, pc.master.password) == (
        "example", "10.0.0.1", 3306, "u", "p")
    assert pc.master.ssl == {"verify_mode": "none", "check_hostname": False}
    assert pc.standby is not None and pc.standby.address == "10.0.0.2:3307"
    assert (pc.slave_id, pc.detecting_enable, pc.heartbeat_ha_enable, pc.detecting_interval) == (77, True, True, 3.0)
    assert (pc.master_start.journal_name, pc.master_start.position, pc.master_start.gtid_on) == (
        "mysql-bin.000002", 120, True)
    assert pc.standby_start.timestamp == 1700000000000 and pc.standby_start.fallback_interval == 30
    assert inst.start_config("standby") == pc.standby_start
    assert inst.parser_configs() == [pc]
    st = inst.store_config()
    assert (st.buffer_size, st.memory_limit, st.batch_mode, st.ddl_isolation) == (
        1024, 1024 * 1024, BatchMode.MEMSIZE, True)
    f = inst.event_filter()
    assert f.table("shop", "orders") and not f.table("crm", "x")
    assert f.field_black == {"shop.users": frozenset({"pw"})} and f.dml_delete
    assert inst.filter_config()["canal.instance.filter.dml.delete"] == "true"
    assert CanalConfig.load(_conf(tmp_path / "d"), env={}).instance_defaults.store_config().memory_limit == 16 << 20


def test_group_instance_sources(tmp_path: Path) -> None:
    conf = _conf(tmp_path, canal={"canal.instance.global.spring.xml": "classpath:spring/group-instance.xml"},
                 instances={"g": {"canal.instance.master1.address": "127.0.0.1:3407",
                                  "canal.instance.master2.address": "127.0.0.1:3408",
                                  "canal.instance.master2.gtid": "1-2-30"},
                            "empty": {}})
    canal = CanalConfig.load(conf, env={})
    g = canal.instance("g")
    assert g.is_group and [s.index for s in g.group_sources] == [1, 2] and g.warnings() == []
    pcs = g.parser_configs()
    assert [(p.master.port, p.extra["group_index"]) for p in pcs] == [(3407, 1), (3408, 2)]
    assert pcs[1].master_start.gtid == "1-2-30"
    with pytest.raises(ConfigError, match="group instance"):
        g.parser_config()
    with pytest.raises(ConfigError, match=r"sets no canal\.instance\.master1\.address"):
        canal.instance("empty")
    bad = _conf(tmp_path / "bad", instances={"g": {"canal.instance.master3.address": "nohost"}})
    with pytest.raises(ConfigError, match=r"instance\.properties:1: canal\.instance\.master3\.address = 'nohost'"):
        CanalConfig.load(bad, env={}).instance("g")


def test_missing_instance_file_and_bad_destination(tmp_path: Path) -> None:
    canal = CanalConfig.load(_conf(tmp_path), env={})
    with pytest.raises(ConfigError, match=r"nope/instance\.properties: no such file"):
        canal.instance("nope")
    with pytest.raises(ConfigError, match="invalid destination name"):
        canal.instance("../etc")
    with pytest.raises(ConfigError, match=r"canal\.properties: no such file"):
        CanalConfig.load(tmp_path / "nothing", env={})


def test_canal_layout_conf_dir(tmp_path: Path) -> None:
    """Canal's canal.conf.dir = ../conf (relative to bin/) names the conf directory itself."""
    conf = _conf(tmp_path, canal={"canal.conf.dir": "../conf"})
    canal = CanalConfig.load(conf / "canal.properties", env={})
    assert canal.conf_dir == conf and canal.file_data_dir == conf
    assert canal.instance_file("example") == conf / "example" / "instance.properties"


# --- the shipped conf/ --------------------------------------------------------------------------------------


def test_shipped_conf_points_at_the_private_mariadb() -> None:
    canal = CanalConfig.load(REPO / "conf", env={})
    assert canal.warnings() == [] and canal.ignored_keys() == []
    assert canal.destinations == ("example",) and canal.conf_dir == REPO / "conf"
    assert canal.file_data_dir == REPO / "conf" and canal.meta_mode is MetaMode.FILE_MIXED
    assert (canal.port, canal.auto_scan, canal.auto_scan_interval) == (11111, True, 5)
    (inst,) = canal.instances().values()  # canal.destinations; auto scan adds demo (the pipeline's destination)
    insts = {"example": inst, "demo": canal.instance("demo")}
    assert inst.warnings() == [] and insts["demo"].warnings() == []
    demo = insts["demo"]
    assert demo.filter_regex == "canal_demo\\..*" and demo.meta_flush_period_ms == 0
    assert demo.store_config().buffer_size * demo.store_config().buffer_memunit == 256 << 20
    pc = inst.parser_config()
    assert (pc.master.host, pc.master.port, pc.master.user, pc.master.password) == ("127.0.0.1", 3407,
                                                                                  "canal", "canal")
    assert pc.standby is None and inst.meta_mode is MetaMode.FILE_MIXED
    assert inst.data_dir == REPO / "conf" / "example"
    assert (inst.filter_regex, inst.filter_black_regex) == (".*\\..*", "mysql\\.slave_.*")
    f = inst.event_filter()
    assert f.table("test", "t1") and not f.table("mysql", "slave_master_info")
    assert sorted(scan_destinations(REPO / "conf")) == ["demo", "example"]


# --- canal.auto.scan ----------------------------------------------------------------------------------------


def test_scan_and_diff_destinations(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    _write(conf / "canal.properties", {})
    _write(conf / "a" / "instance.properties", {"canal.instance.master.address": "127.0.0.1:3407"})
    _write(conf / "spring" / "instance.properties", {})  # Canal's spring/ directory is not a destination
    (conf / "empty").mkdir()  # no instance.properties: not a destination
    _write(conf / ".hidden" / "instance.properties", {})

    s0 = scan_destinations(conf)
    assert list(s0) == ["a"] and s0["a"].path == conf / "a" / "instance.properties"
    assert diff_destinations({}, s0).added == ("a",)
    assert not diff_destinations(s0, scan_destinations(conf))  # nothing changed

    _write(conf / "b" / "instance.properties", {})
    s1 = scan_destinations(conf)
    d = diff_destinations(s0, s1)
    assert (d.added, d.changed, d.removed) == (("b",), (), ())

    p = conf / "a" / "instance.properties"
    st = p.stat()
    p.write_text("canal.instance.master.address = 127.0.0.1:3408\n")
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime: the content hash still tells
    s2 = scan_destinations(conf)
    assert diff_destinations(s1, s2).changed == ("a",)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched: Canal reloads on a new mtime
    s3 = scan_destinations(conf)
    assert diff_destinations(s2, s3).changed == ("a",)

    (conf / "b" / "instance.properties").unlink()
    (conf / "b").rmdir()
    d = diff_destinations(s3, scan_destinations(conf))
    assert (d.added, d.changed, d.removed) == ((), (), ("b",))
    assert scan_destinations(tmp_path / "missing") == {}


def test_scope_constants() -> None:
    assert {k.scope for k in KEYS} == {SERVER, INSTANCE, BOTH}
