"""The key table: every key canal-core reads, with its typed attribute, the parser that validates its text,
Canal's default and where it may be set; and how a key that is not in the table is classified."""

from __future__ import annotations

import codecs
import enum
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...binlog.constants import DEFAULT_MAX_EVENT_SIZE
from ...binlog.gtid import GtidError, MariaGtidPosition, MySQLGtidSet
from ...parse.filter import FilterConfigError, TableFilter, parse_field_filter
from ...store import BatchMode
from .values import SPRING_XML, HostPort, InstanceMode, ServerMode, SslMode, meta_mode_for


class BadValue(Exception):
    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


Parse = Callable[[str], Any]
_INT_RE = re.compile(r"[+-]?[0-9]+")
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1


# parsers for which a blank value is a value (not "use the default"): text, paths, optional addresses
_BLANK_IS_VALUE: set[Parse] = set()


def _text_value(parse: Parse) -> Parse:
    _BLANK_IS_VALUE.add(parse)
    return parse


def _int(lo: int = 0, hi: int = _INT_MAX, *, pow2: bool = False, optional: bool = False) -> Parse:
    if pow2:
        expected = f"a power of two from {lo} to {hi}"
    elif hi >= _LONG_MAX:
        expected = f"an integer >= {lo}"
    else:
        expected = f"an integer from {lo} to {hi}"

    def parse(s: str) -> int | None:
        if optional and not s:
            return None
        if not _INT_RE.fullmatch(s):
            raise BadValue(expected)
        v = int(s)
        if not lo <= v <= hi or (pow2 and v & (v - 1)):
            raise BadValue(expected)
        return v

    return parse


def _bool(s: str) -> bool:
    v = s.lower()
    if v not in ("true", "false"):
        raise BadValue("true or false")
    return v == "true"


def _enum(cls: type[enum.Enum]) -> Parse:
    by_lower = {m.value.lower(): m for m in cls}
    expected = "one of " + "|".join(m.value for m in cls)

    def parse(s: str) -> enum.Enum:
        m = by_lower.get(s.lower())
        if m is None:
            raise BadValue(expected)
        return m

    return parse


def _csv_choice(*choices: str) -> Parse:
    expected = "a comma-separated list of " + ", ".join(choices)

    def parse(s: str) -> tuple[str, ...]:
        items = tuple(x.strip().upper() for x in s.split(",") if x.strip())
        if not items or any(x not in choices for x in items):
            raise BadValue(expected)
        return items

    return parse


_HOST_PORT_RE = re.compile(r"\[([^\]\s]+)\]:([0-9]+)|([^:\s\[\]/,]+):([0-9]+)")


def _host_port_of(s: str) -> HostPort | None:
    m = _HOST_PORT_RE.fullmatch(s)
    if not m:
        return None
    host = m.group(1) or m.group(3)
    port = int(m.group(2) or m.group(4))
    return HostPort(host, port) if 1 <= port <= 65535 else None


def _address(*, optional: bool) -> Parse:
    expected = "host:port with a port from 1 to 65535 (e.g. 127.0.0.1:3306)"
    if optional:
        expected = "empty (no standby) or " + expected

    def parse(s: str) -> HostPort | None:
        if optional and not s:
            return None
        hp = _host_port_of(s)
        if hp is None:
            raise BadValue(expected)
        return hp

    return _text_value(parse) if optional else parse


@_text_value
def _text(s: str) -> str:
    return s


@_text_value
def _path(s: str) -> str:
    if not s:
        raise BadValue("a directory path")
    return s


def _charset(s: str) -> str:
    try:
        codecs.lookup(s)
    except LookupError:
        raise BadValue("a character set name (e.g. UTF-8, GBK, ISO-8859-1)") from None
    return s


@_text_value
def _canal_passwd(s: str) -> str:
    if s and not re.fullmatch(r"[0-9A-Fa-f]{40}", s):
        raise BadValue("empty or 40 hex digits: the scrambled password, upper(sha1(unhex(sha1(password))))")
    return s.upper()


@_text_value
def _zk_auth(s: str) -> str:
    user, sep, password = s.partition(":")
    if s and (not sep or not user or not password):
        raise BadValue("empty, or user:password (ZooKeeper digest credentials)")
    return s


@_text_value
def _zk_servers(s: str) -> str:
    if not s:
        return s
    hosts, _, chroot = s.partition("/")
    ok = all(_host_port_of(h.strip()) is not None for h in hosts.split(","))
    if not ok or (chroot and chroot.endswith("/")):
        raise BadValue("host:port[,host:port...][/chroot] (e.g. 127.0.0.1:2181)")
    return s


@_text_value
def _gtid(s: str) -> str:
    if not s:
        return s
    for cls in (MariaGtidPosition, MySQLGtidSet):
        try:
            cls.parse(s)
            return s
        except GtidError:
            continue
    raise BadValue("a MySQL GTID set (uuid:1-100[,...]) or a MariaDB GTID position (domain-server-seq[,...])")


DEST_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")


@_text_value
def _destinations(s: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in s.split(",") if x.strip())
    expected = ("a comma-separated list of distinct destination names (letters, digits, _ . -; each the name "
                "of a directory under canal.conf.dir)")
    if any(not DEST_RE.fullmatch(n) or n in (".", "..") for n in names) or len(set(names)) != len(names):
        raise BadValue(expected)
    return names


def _spring_xml(s: str) -> str:
    if meta_mode_for(s) is None:
        raise BadValue("classpath:spring/<name> with <name> one of " + ", ".join(SPRING_XML))
    return s


def _regex(key: str, *, white: bool) -> Parse:
    @_text_value
    def parse(s: str) -> str:
        try:
            TableFilter(s, empty_accepts=white, key=key)
        except FilterConfigError as e:
            raise BadValue(f"comma-separated regular expressions over schema.table ({e.__cause__ or e})") from None
        return s

    return parse


def _field_filter(key: str) -> Parse:
    @_text_value
    def parse(s: str) -> str:
        try:
            parse_field_filter(s, key)
        except FilterConfigError:
            raise BadValue("schema.table:col1/col2[,schema.table:col...] (empty: none)") from None
        return s

    return parse


# --- the key table ---------------------------------------------------------------------------------------

SERVER, INSTANCE, BOTH = "server", "instance", "both"


@dataclass(frozen=True)
class Key:
    """One configuration key: its typed attribute, parser, Canal's default (as property text; None = unset)
    and where it may be set (server: canal.properties only; instance/both: either file)."""

    name: str
    attr: str
    parse: Parse
    default: str | None
    scope: str
    doc: str = ""

    @property
    def blank_is_value(self) -> bool:
        return self.parse in _BLANK_IS_VALUE


def _k(name: str, attr: str, parse: Parse, default: str | None, scope: str = INSTANCE, doc: str = "") -> Key:
    return Key(name, attr, parse, default, scope, doc)


_I = "canal.instance."
_port = _int(1, 65535)
_pos_int = _int(1)

KEYS: tuple[Key, ...] = (
    # canal.properties: the server
    _k("canal.ip", "ip", _text, "", SERVER, "address to bind; empty = all"),
    # ours (Canal binds its metrics on every interface): docs/metrics.md "Bind address"
    _k("canal.metrics.pull.ip", "metrics_pull_ip", _text, "${canal.ip}", SERVER,
       "address the metrics endpoint binds; default canal.ip; canal-core extension"),
    _k("canal.register.ip", "register_ip", _text, "", SERVER, "address registered in ZooKeeper"),
    _k("canal.port", "port", _port, "11111", SERVER),
    _k("canal.metrics.pull.port", "metrics_pull_port", _port, "11112", SERVER),
    _k("canal.user", "user", _text, "", SERVER, "client user; empty = no authentication"),
    _k("canal.passwd", "passwd", _canal_passwd, "", SERVER),
    # ours: what one client connection may cost the server (docs/tcp-server.md "Limits")
    _k("canal.tcp.max.connections", "tcp_max_connections", _pos_int, "1000", SERVER,
       "canal-core extension; also bounded by the open-files limit"),
    _k("canal.tcp.max.request.bytes", "tcp_max_request_bytes", _int(1024), "1048576", SERVER,
       "bytes; canal-core extension"),
    _k("canal.tcp.auth.timeout", "tcp_auth_timeout", _pos_int, "30", SERVER, "seconds; canal-core extension"),
    _k("canal.tcp.auth.backoff", "tcp_auth_backoff", _int(0), "250", SERVER, "ms; 0 = none; canal-core extension"),
    _k("canal.tcp.auth.backoff.max", "tcp_auth_backoff_max", _int(0), "10000", SERVER,
       "ms; canal-core extension"),
    _k("canal.log.file.max.bytes", "log_file_max_bytes", _int(1024), "104857600", SERVER,
       "bytes; canal-core extension"),
    _k("canal.log.file.backups", "log_file_backups", _int(0), "5", SERVER, "canal-core extension"),
    _k("canal.zkServers", "zk_servers", _zk_servers, "", BOTH),
    _k("canal.zookeeper.flush.period", "zookeeper_flush_period", _pos_int, "1000", BOTH, "ms"),
    # ours (Canal fixes 90 s in ZkClientx): a dead active is replaced this long + 5 s after it died
    _k("canal.zookeeper.session.timeout", "zookeeper_session_timeout", _int(1000), "90000", BOTH,
       "ms; canal-core extension"),
    # ours: digest credentials; every node canal-server creates is then writable only with them (world-readable)
    _k("canal.zookeeper.auth", "zookeeper_auth", _zk_auth, "", BOTH, "user:password; canal-core extension"),
    _k("canal.serverMode", "server_mode", _enum(ServerMode), "tcp", SERVER),
    _k("canal.file.data.dir", "file_data_dir", _path, "${canal.conf.dir}", BOTH),
    # 0 (ours, Canal requires > 0): every cursor update is written before the ack returns
    _k("canal.file.flush.period", "file_flush_period", _int(0), "1000", BOTH, "ms"),
    _k("canal.destinations", "destinations", _destinations, "example", SERVER),
    _k("canal.conf.dir", "conf_dir", _path, None, SERVER, "default: the directory of canal.properties"),
    _k("canal.auto.scan", "auto_scan", _bool, "true", SERVER),
    _k("canal.auto.scan.interval", "auto_scan_interval", _pos_int, "5", SERVER, "seconds"),
    _k("canal.instance.global.mode", "global_mode", _enum(InstanceMode), "spring", SERVER),
    _k("canal.instance.global.lazy", "global_lazy", _bool, "false", SERVER),
    _k("canal.instance.global.spring.xml", "global_spring_xml", _spring_xml, "classpath:spring/file-instance.xml",
       SERVER),
    # canal.instance.*: either file, instance.properties wins
    _k(_I + "memory.buffer.size", "memory_buffer_size", _int(1, 2**30, pow2=True), "16384"),
    _k(_I + "memory.buffer.memunit", "memory_buffer_memunit", _pos_int, "1024", doc="bytes"),
    _k(_I + "memory.batch.mode", "memory_batch_mode", _enum(BatchMode), "MEMSIZE"),
    _k(_I + "memory.rawEntry", "memory_raw_entry", _bool, "true"),
    _k(_I + "detecting.enable", "detecting_enable", _bool, "false"),
    _k(_I + "detecting.sql", "detecting_sql", _text, "select 1"),
    _k(_I + "detecting.interval.time", "detecting_interval_time", _pos_int, "3", doc="seconds"),
    _k(_I + "detecting.retry.threshold", "detecting_retry_threshold", _int(0), "3"),
    _k(_I + "detecting.heartbeatHaEnable", "detecting_heartbeat_ha_enable", _bool, "false"),
    _k(_I + "transaction.size", "transaction_size", _pos_int, "1024"),
    _k(_I + "fallbackIntervalInSeconds", "fallback_interval_in_seconds", _int(0), "60"),
    _k(_I + "network.receiveBufferSize", "network_receive_buffer_size", _pos_int, "16384"),
    _k(_I + "network.sendBufferSize", "network_send_buffer_size", _pos_int, "16384"),
    _k(_I + "network.soTimeout", "network_so_timeout", _pos_int, "30", doc="seconds"),
    _k(_I + "filter.druid.ddl", "filter_druid_ddl", _bool, "true"),
    _k(_I + "filter.query.dcl", "filter_query_dcl", _bool, "false"),
    _k(_I + "filter.query.dml", "filter_query_dml", _bool, "false"),
    _k(_I + "filter.query.ddl", "filter_query_ddl", _bool, "false"),
    _k(_I + "filter.table.error", "filter_table_error", _bool, "false"),
    _k(_I + "filter.rows", "filter_rows", _bool, "false"),
    _k(_I + "filter.transaction.entry", "filter_transaction_entry", _bool, "false"),
    _k(_I + "filter.dml.insert", "filter_dml_insert", _bool, "false"),
    _k(_I + "filter.dml.update", "filter_dml_update", _bool, "false"),
    _k(_I + "filter.dml.delete", "filter_dml_delete", _bool, "false"),
    _k(_I + "binlog.format", "binlog_format", _csv_choice("ROW", "STATEMENT", "MIXED"), "ROW,STATEMENT,MIXED"),
    _k(_I + "binlog.image", "binlog_image", _csv_choice("FULL", "MINIMAL", "NOBLOB"), "FULL,MINIMAL,NOBLOB"),
    _k(_I + "get.ddl.isolation", "get_ddl_isolation", _bool, "false"),
    _k(_I + "parser.parallel", "parser_parallel", _bool, "true"),
    _k(_I + "parser.parallelBufferSize", "parser_parallel_buffer_size", _int(1, 2**30, pow2=True), "256"),
    # ours: the largest binlog event (or inflated compressed event) accepted; beyond it the parser stops with an
    # error naming the position, instead of taking whatever memory a corrupt or crafted length asks for
    _k(_I + "parser.maxEventSize", "parser_max_event_size", _int(1024, 2**32 - 1), str(DEFAULT_MAX_EVENT_SIZE),
       doc="bytes; canal-core extension"),
    _k(_I + "tsdb.enable", "tsdb_enable", _bool, "true"),
    _k(_I + "tsdb.snapshot.interval", "tsdb_snapshot_interval", _int(0), "24", doc="hours; 0 = no snapshots"),
    _k(_I + "tsdb.snapshot.expire", "tsdb_snapshot_expire", _int(0), "360", doc="hours"),
    _k(_I + "mysql.slaveId", "mysql_slave_id", _int(0, 2**32 - 1), "0", doc="0 = derive a stable one"),
    _k(_I + "gtidon", "gtidon", _bool, "false"),
    _k(_I + "master.address", "master_address", _address(optional=False), "127.0.0.1:3306"),
    _k(_I + "master.journal.name", "master_journal_name", _text, ""),
    _k(_I + "master.position", "master_position", _int(0, _LONG_MAX, optional=True), None),
    _k(_I + "master.timestamp", "master_timestamp", _int(0, _LONG_MAX, optional=True), None, doc="ms"),
    _k(_I + "master.gtid", "master_gtid", _gtid, ""),
    _k(_I + "master.sslMode", "master_ssl_mode", _enum(SslMode), "DISABLED"),
    _k(_I + "standby.address", "standby_address", _address(optional=True), None),
    _k(_I + "standby.journal.name", "standby_journal_name", _text, ""),
    _k(_I + "standby.position", "standby_position", _int(0, _LONG_MAX, optional=True), None),
    _k(_I + "standby.timestamp", "standby_timestamp", _int(0, _LONG_MAX, optional=True), None, doc="ms"),
    _k(_I + "standby.gtid", "standby_gtid", _gtid, ""),
    _k(_I + "dbUsername", "db_username", _text, "canal"),
    _k(_I + "dbPassword", "db_password", _text, "canal"),
    _k(_I + "connectionCharset", "connection_charset", _charset, "UTF-8"),
    _k(_I + "defaultDatabaseName", "default_database_name", _text, ""),
    _k(_I + "filter.regex", "filter_regex", _regex(_I + "filter.regex", white=True), ".*\\..*"),
    _k(_I + "filter.black.regex", "filter_black_regex", _regex(_I + "filter.black.regex", white=False),
       "mysql\\.slave_.*"),
    _k(_I + "filter.field", "filter_field", _field_filter(_I + "filter.field"), ""),
    _k(_I + "filter.black.field", "filter_black_field", _field_filter(_I + "filter.black.field"), ""),
)
KEYS_BY_NAME: dict[str, Key] = {k.name: k for k in KEYS}
SERVER_KEYS = tuple(k for k in KEYS if k.scope in (SERVER, BOTH))
INSTANCE_KEYS = tuple(k for k in KEYS if k.scope in (INSTANCE, BOTH))
DEFAULTS = {k.name: k.default for k in KEYS if k.default is not None}

# per-destination overrides of canal.instance.global.{mode,lazy,spring.xml}
OVERRIDE_RE = re.compile(r"canal\.instance\.([^.]+)\.(mode|lazy|spring\.xml|manager\.address)")
OVERRIDE_OF = {"mode": "canal.instance.global.mode", "lazy": "canal.instance.global.lazy",
                "spring.xml": "canal.instance.global.spring.xml"}
# group-instance.xml sources: canal.instance.master1.address, canal.instance.standby2.position, ...
GROUP_RE = re.compile(
    r"canal\.instance\.(master|standby)([1-9][0-9]*)\.(address|journal\.name|position|timestamp|gtid)")
GROUP_PARSE: dict[str, Parse] = {
    "address": _address(optional=True), "journal.name": _text,
    "position": _int(0, _LONG_MAX, optional=True), "timestamp": _int(0, _LONG_MAX, optional=True), "gtid": _gtid,
}
# keys of the Java server that canal-core accepts without acting on them
_JAVA_ONLY = frozenset({
    "canal.id", "canal.withoutNetty", "canal.auto.reset.latest.pos.mode", "canal.instance.global.manager.address",
    "canal.instance.tsdb.dir", "canal.instance.tsdb.url", "canal.instance.tsdb.dbUsername",
    "canal.instance.tsdb.dbPassword", "canal.instance.tsdb.spring.xml", "canal.instance.parser.parallelThreadSize",
    "canal.instance.enableDruid", "canal.instance.pwdPublicKey", "canal.instance.multi.stream.on",
    "canal.instance.connectionCharsetNumber",
})
_JAVA_ONLY_PREFIXES = ("canal.mq.", "canal.admin.", "canal.aliyun.", "canal.instance.rds.", "kafka.", "rocketmq.",
                       "rabbitmq.", "pulsarmq.")


def classify_key(key: str) -> str | None:
    """server | instance | both | java | override | group, or None for an unknown key."""
    k = KEYS_BY_NAME.get(key)
    if k is not None:
        return k.scope
    if key in _JAVA_ONLY or key.startswith(_JAVA_ONLY_PREFIXES):
        return "java"
    if GROUP_RE.fullmatch(key):
        return "group"
    if OVERRIDE_RE.fullmatch(key):
        return "override"
    return None

