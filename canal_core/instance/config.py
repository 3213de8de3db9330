"""Canal's configuration files: ``canal.properties`` and ``{canal.conf.dir}/{destination}/instance.properties``.

Layout and precedence, as in the Java server (docs/canal-compat.md §5):

* ``CanalConfig.load(conf)`` reads ``conf/canal.properties`` (``conf`` may also name the file itself).
  ``InstanceConfig`` (``canal.instance(name)``) reads ``{canal.conf.dir}/{name}/instance.properties``.
* A value is looked up, first match wins, in: JVM-style ``-D`` overrides (``overrides=``), the environment
  (``env=``, default ``os.environ``, exact key names such as ``canal.instance.master.address`` as Canal's
  docker image passes them), ``instance.properties`` (instance keys only), ``canal.properties``, then
  Canal's default. So instance values override canal.properties values, and ``-D`` overrides both. A ``-D`` or
  environment value of a key that a file also sets is logged as a warning (key, both values, both sources), once
  per process: the file's line is then not what runs.
  Server keys (port, destinations, auto scan, global mode...) are read from canal.properties only, as
  Canal's controller does; the ``canal.instance.*`` keys, ``canal.file.data.dir``, ``canal.file.flush.period``,
  ``canal.zookeeper.flush.period``, ``canal.zookeeper.session.timeout`` (ours, docs/zookeeper.md) and
  ``canal.zkServers`` may be set in either file.
* ``canal.instance.{name}.mode`` / ``.lazy`` / ``.spring.xml`` override the ``canal.instance.global.*``
  value for one destination.
* ``${key}`` and ``${key:default}`` placeholders (nestable) expand through the same chain. Two built-ins:
  ``${canal.conf.dir}`` (the absolute conf directory) and ``${canal.instance.destination}`` (the
  destination being loaded). A placeholder naming a known key that is set nowhere takes Canal's default
  for that key. An unknown placeholder or a cycle is a ``ConfigError`` naming file:line and key.
  Placeholders are expanded only in the values that are used (unknown keys stay raw), so a file copied
  from Canal with e.g. ``canal.instance.global.manager.address = ${canal.admin.manager}`` still loads.

Decisions where Canal's behaviour is loose or Java-specific:

* Files are decoded as UTF-8 (a leading BOM is dropped); a file that is not valid UTF-8 is decoded as
  ISO-8859-1, Java's encoding for ``Properties.load(InputStream)``. ASCII files and ``\\uXXXX`` escapes
  read the same either way; raw non-ASCII UTF-8 text reads as intended here, where Java shows mojibake.
* Values are trimmed (Canal's controller trims what it reads; Spring would keep a trailing blank, which
  is a classic source of "wrong password" reports).
* A blank value of a number, boolean or enum key means "use the default"; a blank text value is a value
  (``canal.instance.filter.regex =`` accepts every table, as in Canal).
* Booleans are ``true`` / ``false`` (any case), integers are plain decimal; anything else is an error,
  where Java's ``Boolean.valueOf`` would silently read ``yes`` as false.
* ``canal.conf.dir``: when set nowhere, the directory holding canal.properties; a relative value (Canal's
  ``../conf``, relative to its ``bin/``) is resolved against that directory, so Canal's layout works.
  Relative ``canal.file.data.dir`` values are resolved the same way.
* Unknown keys are kept (``raw``) and reported by ``warnings()`` with a "did you mean" hint; keys of the
  Java server that canal-core does not act on (MQ, canal-admin, druid, H2/MySQL tsdb, RDS) are accepted
  silently and listed by ``ignored_keys()``.
"""

from __future__ import annotations

import codecs
import difflib
import enum
import hashlib
import logging
import os
import re
import ssl as _ssl
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ..binlog.constants import DEFAULT_MAX_EVENT_SIZE
from ..binlog.gtid import GtidError, MariaGtidPosition, MySQLGtidSet
from ..parse.filter import FilterConfigError, TableFilter, parse_field_filter
from ..store import BatchMode

if TYPE_CHECKING:
    from ..parse.filter import EventFilter
    from ..parse.locator import StartConfig
    from ..parse.parser import ParserConfig, SourceConfig

CANAL_PROPERTIES = "canal.properties"
INSTANCE_PROPERTIES = "instance.properties"

__all__ = [
    "CANAL_PROPERTIES", "INSTANCE_PROPERTIES", "KEYS", "CanalConfig", "ConfigError", "GroupSource",
    "HostPort", "InstanceConfig", "InstanceMode", "Key", "MetaMode", "Prop", "PropertiesFile", "ScanDiff",
    "ScannedDestination", "ServerMode", "SourceSettings", "SslMode", "StoreSettings", "diff_destinations",
    "load_properties", "meta_mode_for", "parse_properties", "scan_destinations",
]


class ConfigError(ValueError):
    """An unusable configuration value. The message names the file (and line), the key, the value and
    what is expected; the parts are also attributes."""

    def __init__(self, message: str, *, file: str | None = None, line: int = 0, key: str | None = None,
                 value: str | None = None) -> None:
        super().__init__(message)
        self.file = file
        self.line = line
        self.key = key
        self.value = value


# --- the .properties format -----------------------------------------------------------------------------

_WS = " \t\f"
_NEWLINES = re.compile(r"\r\n|\r|\n")
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


@dataclass(frozen=True, slots=True)
class Prop:
    """One property value and where it came from. ``raw``: the text before ``${...}`` expansion."""

    value: str
    source: str  # a file path, "-D", "environment", "built-in" or "default"
    line: int = 0
    raw: str | None = None

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}" if self.line else self.source


@dataclass
class PropertiesFile:
    """A parsed .properties file: key -> Prop (last assignment wins), plus the keys assigned twice."""

    path: str
    props: dict[str, Prop] = field(default_factory=dict)
    duplicates: list[tuple[str, int, int]] = field(default_factory=list)  # (key, first line, later line)

    def values(self) -> dict[str, str]:
        return {k: p.value for k, p in self.props.items()}

    def __contains__(self, key: object) -> bool:
        return key in self.props

    def get(self, key: str) -> str | None:
        p = self.props.get(key)
        return None if p is None else p.value


def _unescape(text: str, source: str, line: int) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        i += 1
        if i >= n:  # a lone trailing backslash (only at end of input): dropped, as Java does
            break
        c = text[i]
        if c == "u":
            digits = text[i + 1:i + 5]
            if len(digits) != 4 or not all(ch in "0123456789abcdefABCDEF" for ch in digits):
                raise ConfigError(f"{source}:{line}: malformed \\uXXXX escape {text[i - 1:i + 5]!r}: expected "
                                  f"four hex digits after \\u", file=source, line=line)
            out.append(chr(int(digits, 16)))
            i += 5
            continue
        out.append(_SIMPLE_ESCAPES.get(c, c))  # \t \n \r \f; any other escaped char stands for itself
        i += 1
    return "".join(out)


def _continues(line: str) -> bool:
    """A line continues on the next when it ends in an odd number of backslashes."""
    k = len(line) - len(line.rstrip("\\"))
    return k % 2 == 1


def parse_properties(text: str, source: str = "<string>") -> PropertiesFile:
    """Parse Java .properties text: ``key=value``, ``key:value`` or ``key value``; ``#`` / ``!`` comment
    lines; a trailing backslash continues the logical line (the next line's leading blanks dropped);
    escapes ``\\t \\n \\r \\f \\uXXXX`` and ``\\x`` = x (so ``\\=``, ``\\:``, ``\\ ``, ``\\\\``); keys
    case-sensitive; leading blanks trimmed; the last assignment of a key wins."""
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = _NEWLINES.split(text)
    result = PropertiesFile(path=source)
    i = 0
    while i < len(lines):
        lineno = i + 1
        logical = lines[i].lstrip(_WS)
        i += 1
        if not logical or logical[0] in "#!":
            continue  # blank and comment lines never continue, even when they end in a backslash
        while _continues(logical):
            logical = logical[:-1]
            if i >= len(lines):
                break
            logical += lines[i].lstrip(_WS)
            i += 1
        key, value = _split_entry(logical)
        key = _unescape(key, source, lineno)
        value = _unescape(value, source, lineno)
        prev = result.props.get(key)
        if prev is not None:
            result.duplicates.append((key, prev.line, lineno))
        result.props[key] = Prop(value, source, lineno)
    return result


def _split_entry(logical: str) -> tuple[str, str]:
    n = len(logical)
    key_end = n
    value_start = n
    has_sep = False
    backslash = False
    j = 0
    while j < n:
        c = logical[j]
        if not backslash:
            if c in "=:":
                key_end, value_start, has_sep = j, j + 1, True
                break
            if c in _WS:
                key_end, value_start = j, j + 1
                break
        backslash = (c == "\\") and not backslash
        j += 1
    while value_start < n:
        c = logical[value_start]
        if c in _WS:
            value_start += 1
        elif not has_sep and c in "=:":
            has_sep = True
            value_start += 1
        else:
            break
    return logical[:key_end], logical[value_start:]


def load_properties(path: str | os.PathLike[str]) -> PropertiesFile:
    """Read and parse a .properties file (UTF-8, falling back to ISO-8859-1 for non-UTF-8 bytes)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such file", file=str(p)) from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read ({e.strerror or e})", file=str(p)) from e
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("iso-8859-1")
    return parse_properties(text, str(p))


# --- ${...} placeholders ---------------------------------------------------------------------------------


def _brace_end(text: str, start: int) -> int:
    """Index of the "}" closing the placeholder whose name starts at ``start``; -1 when unterminated."""
    depth = 0
    for k in range(start, len(text)):
        c = text[k]
        if c == "{":
            depth += 1
        elif c == "}":
            if depth == 0:
                return k
            depth -= 1
    return -1


def _split_default(inner: str) -> tuple[str, str | None]:
    """``name:default`` at the first top-level colon (a colon inside a nested ${...} does not count)."""
    depth = 0
    for k, c in enumerate(inner):
        if c == "{":
            depth += 1
        elif c == "}":
            depth = max(0, depth - 1)
        elif c == ":" and depth == 0:
            return inner[:k], inner[k + 1:]
    return inner, None


class _Resolver:
    """Looks keys up through the layers (highest precedence first) and expands placeholders."""

    def __init__(self, layers: Sequence[Mapping[str, Prop]], builtins: Mapping[str, str],
                 defaults: Mapping[str, str]) -> None:
        self.layers = layers
        self.builtins = builtins
        self.defaults = defaults
        self._cache: dict[str, Prop] = {}

    def raw(self, key: str) -> Prop | None:
        if key in self.builtins:
            return Prop(self.builtins[key], "built-in")
        for layer in self.layers:
            p = layer.get(key)
            if p is not None:
                return p
        return None

    def get(self, key: str) -> Prop | None:
        """The value set for ``key`` (expanded), or None when it is set nowhere."""
        return self._resolve(key, ())

    def expand_default(self, key: str) -> Prop:
        text = self.defaults[key]
        origin = Prop(text, "default")
        return Prop(self._expand(text, origin, key, (key,)), "default", raw=text)

    def _resolve(self, key: str, stack: tuple[str, ...]) -> Prop | None:
        if key in self._cache:
            return self._cache[key]
        p = self.raw(key)
        if p is None:
            return None
        if "${" in p.value:
            p = Prop(self._expand(p.value, p, key, (*stack, key)), p.source, p.line, raw=p.value)
        self._cache[key] = p
        return p

    def _expand(self, text: str, origin: Prop, key: str, stack: tuple[str, ...]) -> str:
        out: list[str] = []
        i = 0
        while True:
            j = text.find("${", i)
            if j < 0:
                out.append(text[i:])
                return "".join(out)
            out.append(text[i:j])
            end = _brace_end(text, j + 2)
            if end < 0:  # unterminated: left as written, as Spring does
                out.append(text[j:])
                return "".join(out)
            name_text, default = _split_default(text[j + 2:end])
            name = self._expand(name_text, origin, key, stack).strip()
            if name in stack:
                chain = " -> ".join((*stack[stack.index(name):], name))
                raise ConfigError(f"{origin.where}: {key}: placeholder cycle {chain}", file=origin.source,
                                  line=origin.line, key=key, value=origin.value)
            found = self._resolve(name, stack)
            if found is not None:
                out.append(found.value)
            elif default is not None:
                out.append(self._expand(default, origin, key, stack))
            elif name in self.defaults:
                out.append(self._expand(self.defaults[name], origin, key, (*stack, name)))
            else:
                raise ConfigError(
                    f"{origin.where}: {key}: unknown placeholder ${{{name}}}: define {name} in canal.properties "
                    f"or instance.properties, pass it as an override (-D), or write ${{{name}:default}}",
                    file=origin.source, line=origin.line, key=key, value=origin.value)
            i = end + 1


# --- value types -----------------------------------------------------------------------------------------


class ServerMode(enum.StrEnum):
    TCP = "tcp"
    KAFKA = "kafka"
    ROCKETMQ = "rocketMQ"
    RABBITMQ = "rabbitMQ"
    PULSARMQ = "pulsarMQ"


class InstanceMode(enum.StrEnum):
    SPRING = "spring"
    MANAGER = "manager"


class SslMode(enum.StrEnum):
    DISABLED = "DISABLED"
    PREFERRED = "PREFERRED"
    REQUIRED = "REQUIRED"
    VERIFY_CA = "VERIFY_CA"
    VERIFY_IDENTITY = "VERIFY_IDENTITY"


class MetaMode(enum.StrEnum):
    """Which meta manager canal.instance.global.spring.xml (or canal.instance.{name}.spring.xml) selects."""

    MEMORY = "memory"  # memory-instance.xml
    FILE_MIXED = "file-mixed"  # file-instance.xml: memory + meta.dat flushed every canal.file.flush.period ms
    PERIOD_MIXED = "period-mixed"  # default-instance.xml: memory + ZooKeeper every canal.zookeeper.flush.period
    GROUP = "group"  # group-instance.xml: several sources (canal.instance.masterN.*) merged into one


_SPRING_XML = {
    "memory-instance.xml": MetaMode.MEMORY,
    "file-instance.xml": MetaMode.FILE_MIXED,
    "default-instance.xml": MetaMode.PERIOD_MIXED,
    "group-instance.xml": MetaMode.GROUP,
}


def meta_mode_for(spring_xml: str) -> MetaMode | None:
    """``classpath:spring/file-instance.xml`` (or just the file name) -> MetaMode; None if unknown."""
    name = spring_xml.strip()
    if name.startswith("classpath:"):
        name = name[len("classpath:"):]
    return _SPRING_XML.get(name.replace("\\", "/").rsplit("/", 1)[-1])


class HostPort(NamedTuple):
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


class _Bad(Exception):
    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


Parse = Callable[[str], Any]
_INT_RE = re.compile(r"[+-]?[0-9]+")
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1


def _text_value(parse: Parse) -> Parse:
    parse.blank_is_value = True  # type: ignore[attr-defined]
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
            raise _Bad(expected)
        v = int(s)
        if not lo <= v <= hi or (pow2 and v & (v - 1)):
            raise _Bad(expected)
        return v

    return parse


def _bool(s: str) -> bool:
    v = s.lower()
    if v not in ("true", "false"):
        raise _Bad("true or false")
    return v == "true"


def _enum(cls: type[enum.Enum]) -> Parse:
    by_lower = {m.value.lower(): m for m in cls}
    expected = "one of " + "|".join(m.value for m in cls)

    def parse(s: str) -> enum.Enum:
        m = by_lower.get(s.lower())
        if m is None:
            raise _Bad(expected)
        return m

    return parse


def _csv_choice(*choices: str) -> Parse:
    expected = "a comma-separated list of " + ", ".join(choices)

    def parse(s: str) -> tuple[str, ...]:
        items = tuple(x.strip().upper() for x in s.split(",") if x.strip())
        if not items or any(x not in choices for x in items):
            raise _Bad(expected)
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
            raise _Bad(expected)
        return hp

    return _text_value(parse) if optional else parse


@_text_value
def _text(s: str) -> str:
    return s


@_text_value
def _path(s: str) -> str:
    if not s:
        raise _Bad("a directory path")
    return s


def _charset(s: str) -> str:
    try:
        codecs.lookup(s)
    except LookupError:
        raise _Bad("a character set name (e.g. UTF-8, GBK, ISO-8859-1)") from None
    return s


@_text_value
def _canal_passwd(s: str) -> str:
    if s and not re.fullmatch(r"[0-9A-Fa-f]{40}", s):
        raise _Bad("empty or 40 hex digits: the scrambled password, upper(sha1(unhex(sha1(password))))")
    return s.upper()


@_text_value
def _zk_auth(s: str) -> str:
    user, sep, password = s.partition(":")
    if s and (not sep or not user or not password):
        raise _Bad("empty, or user:password (ZooKeeper digest credentials)")
    return s


@_text_value
def _zk_servers(s: str) -> str:
    if not s:
        return s
    hosts, _, chroot = s.partition("/")
    ok = all(_host_port_of(h.strip()) is not None for h in hosts.split(","))
    if not ok or (chroot and chroot.endswith("/")):
        raise _Bad("host:port[,host:port...][/chroot] (e.g. 127.0.0.1:2181)")
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
    raise _Bad("a MySQL GTID set (uuid:1-100[,...]) or a MariaDB GTID position (domain-server-seq[,...])")


_DEST_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")


@_text_value
def _destinations(s: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in s.split(",") if x.strip())
    expected = ("a comma-separated list of distinct destination names (letters, digits, _ . -; each the name "
                "of a directory under canal.conf.dir)")
    if any(not _DEST_RE.fullmatch(n) or n in (".", "..") for n in names) or len(set(names)) != len(names):
        raise _Bad(expected)
    return names


def _spring_xml(s: str) -> str:
    if meta_mode_for(s) is None:
        raise _Bad("classpath:spring/<name> with <name> one of " + ", ".join(_SPRING_XML))
    return s


def _regex(key: str, *, white: bool) -> Parse:
    @_text_value
    def parse(s: str) -> str:
        try:
            TableFilter(s, empty_accepts=white, key=key)
        except FilterConfigError as e:
            raise _Bad(f"comma-separated regular expressions over schema.table ({e.__cause__ or e})") from None
        return s

    return parse


def _field_filter(key: str) -> Parse:
    @_text_value
    def parse(s: str) -> str:
        try:
            parse_field_filter(s, key)
        except FilterConfigError:
            raise _Bad("schema.table:col1/col2[,schema.table:col...] (empty: none)") from None
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
        return bool(getattr(self.parse, "blank_is_value", False))


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
_DEFAULTS = {k.name: k.default for k in KEYS if k.default is not None}

# per-destination overrides of canal.instance.global.{mode,lazy,spring.xml}
_OVERRIDE_RE = re.compile(r"canal\.instance\.([^.]+)\.(mode|lazy|spring\.xml|manager\.address)")
_OVERRIDE_OF = {"mode": "canal.instance.global.mode", "lazy": "canal.instance.global.lazy",
                "spring.xml": "canal.instance.global.spring.xml"}
# group-instance.xml sources: canal.instance.master1.address, canal.instance.standby2.position, ...
_GROUP_RE = re.compile(
    r"canal\.instance\.(master|standby)([1-9][0-9]*)\.(address|journal\.name|position|timestamp|gtid)")
_GROUP_PARSE: dict[str, Parse] = {
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


def _classify(key: str) -> str | None:
    """server | instance | both | java | override | group, or None for an unknown key."""
    k = KEYS_BY_NAME.get(key)
    if k is not None:
        return k.scope
    if key in _JAVA_ONLY or key.startswith(_JAVA_ONLY_PREFIXES):
        return "java"
    if _GROUP_RE.fullmatch(key):
        return "group"
    if _OVERRIDE_RE.fullmatch(key):
        return "override"
    return None


def _unknown_warning(prop: Prop, key: str) -> str:
    close = difflib.get_close_matches(key, list(KEYS_BY_NAME), n=1, cutoff=0.8)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"{prop.where}: unknown key {key} (kept, not used){hint}"


def _value(resolver: _Resolver, key: Key, name: str | None = None) -> Any:
    """The typed value of ``key`` (looked up as ``name`` when given); Canal's default when unset."""
    lookup = name or key.name
    prop = resolver.get(lookup)
    if prop is not None and not prop.value.strip() and not key.blank_is_value:
        prop = None  # blank number / boolean / enum: the default
    if prop is None:
        if name is not None or key.default is None:
            return None
        prop = resolver.expand_default(key.name)
    text = prop.value.strip()
    try:
        return key.parse(text)
    except _Bad as e:
        secret = lookup.endswith(".auth")  # a credential is never echoed
        shown = "'***'" if secret else repr(text)
        if prop.raw is not None and prop.raw.strip() != text and not secret:
            shown += f" (from {prop.raw.strip()!r})"
        raise ConfigError(f"{prop.where}: {lookup} = {shown} is invalid: expected {e.expected}",
                          file=prop.source, line=prop.line, key=lookup, value="***" if secret else text) from None


def _layers(overrides: Mapping[str, str] | None, env: Mapping[str, str] | None) -> list[dict[str, Prop]]:
    env_map = os.environ if env is None else env
    return [{k: Prop(str(v), "-D") for k, v in (overrides or {}).items()},
            {k: Prop(str(v), "environment") for k, v in env_map.items()}]


def _resolve_dir(base: Path, value: str) -> Path:
    p = Path(value).expanduser()
    return Path(os.path.normpath(p if p.is_absolute() else base / p))


log = logging.getLogger(__name__)
_overrides_logged: set[tuple[str, str, str, str]] = set()


def _log_overrides(layers: Sequence[Mapping[str, Prop]], pf: PropertiesFile) -> None:
    """Warn (once per process) about each key of ``pf`` that a -D or environment value overrides: the file's
    line is not what the process uses, and nothing else would say so."""
    for key, prop in pf.props.items():
        for layer in layers:
            over = layer.get(key)
            if over is None:
                continue
            seen = (prop.where, key, over.source, over.value)
            if seen not in _overrides_logged:
                _overrides_logged.add(seen)
                log.warning("%s: %r (%s) is used instead of %r (%s)", key, over.value, over.source, prop.value,
                            prop.where)
            break


def _duplicate_warnings(pf: PropertiesFile) -> list[str]:
    return [f"{pf.path}:{later}: {key} is assigned again (line {first}); the later value wins"
            for key, first, later in pf.duplicates]


# --- canal.properties ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CanalConfig:
    """canal.properties, typed. ``instance_defaults``: the canal.instance.* values it sets for every
    destination (validated at load, so a bad global value is reported against canal.properties)."""

    conf_file: Path
    ip: str
    metrics_pull_ip: str
    register_ip: str
    port: int
    metrics_pull_port: int
    user: str
    passwd: str
    tcp_max_connections: int
    tcp_max_request_bytes: int
    tcp_auth_timeout: int
    tcp_auth_backoff: int
    tcp_auth_backoff_max: int
    log_file_max_bytes: int
    log_file_backups: int
    zk_servers: str
    zookeeper_flush_period: int
    zookeeper_session_timeout: int
    zookeeper_auth: str
    server_mode: ServerMode
    file_data_dir: Path
    file_flush_period: int
    destinations: tuple[str, ...]
    conf_dir: Path
    auto_scan: bool
    auto_scan_interval: int
    global_mode: InstanceMode
    global_lazy: bool
    global_spring_xml: str
    instance_defaults: InstanceConfig = field(repr=False)
    raw: dict[str, str] = field(repr=False, compare=False)  # canal.properties as read (unexpanded)
    _props: PropertiesFile = field(repr=False, compare=False)
    _layers: list[dict[str, Prop]] = field(repr=False, compare=False)
    _warnings: tuple[str, ...] = field(repr=False, compare=False)

    @classmethod
    def load(cls, conf: str | os.PathLike[str] = "conf", *, overrides: Mapping[str, str] | None = None,
             env: Mapping[str, str] | None = None) -> CanalConfig:
        """Load ``conf/canal.properties`` (``conf`` is the conf directory or the file). ``overrides``: the
        JVM -D style values that win over everything; ``env``: environment (default ``os.environ``)."""
        path = Path(conf)
        if path.is_dir() or not path.suffix:
            path = path / CANAL_PROPERTIES
        path = Path(os.path.abspath(path))
        props = load_properties(path)
        layers = _layers(overrides, env)
        base = path.parent

        # canal.conf.dir first: every ${canal.conf.dir} sees the resolved absolute directory
        pre = _Resolver([*layers, props.props], {}, {})
        conf_dir_text = _value(pre, KEYS_BY_NAME["canal.conf.dir"])
        conf_dir = base if conf_dir_text is None else _resolve_dir(base, conf_dir_text)
        builtins = {"canal.conf.dir": str(conf_dir)}
        resolver = _Resolver([*layers, props.props], builtins, _DEFAULTS)

        values: dict[str, Any] = {}
        for key in SERVER_KEYS:
            if key.name != "canal.conf.dir":
                values[key.attr] = _value(resolver, key)
        values["file_data_dir"] = _resolve_dir(base, values["file_data_dir"])

        _log_overrides(layers, props)
        warnings = _duplicate_warnings(props)
        for name, prop in props.props.items():
            kind = _classify(name)
            if kind is None:
                warnings.append(_unknown_warning(prop, name))
            elif kind == "override":
                m = _OVERRIDE_RE.fullmatch(name)
                assert m is not None
                target = _OVERRIDE_OF.get(m.group(2))
                if target is not None:  # validate now, against canal.properties
                    _value(resolver, KEYS_BY_NAME[target], name)
        if values["global_mode"] is InstanceMode.MANAGER:
            warnings.append(f"{path}: canal.instance.global.mode = manager (canal-admin) is not supported by "
                            f"canal-core; instances are read from {conf_dir}")
        if values["server_mode"] is not ServerMode.TCP:
            warnings.append(f"{path}: canal.serverMode = {values['server_mode']}: canal-core serves tcp only")

        partial = cls(conf_file=path, conf_dir=conf_dir, **values, instance_defaults=None,  # type: ignore[arg-type]
                      raw=props.values(), _props=props, _layers=layers, _warnings=tuple(warnings))
        defaults = InstanceConfig._load(partial, "", None)
        object.__setattr__(partial, "instance_defaults", defaults)
        return partial

    # -- instances --
    def instance_file(self, destination: str) -> Path:
        return self.conf_dir / destination / INSTANCE_PROPERTIES

    def instance(self, destination: str) -> InstanceConfig:
        """Load ``{canal.conf.dir}/{destination}/instance.properties`` over this canal.properties."""
        if not _DEST_RE.fullmatch(destination) or destination in (".", ".."):
            raise ConfigError(f"invalid destination name {destination!r}: expected letters, digits, _ . -",
                              file=str(self.conf_file), key="canal.destinations", value=destination)
        return InstanceConfig._load(self, destination, load_properties(self.instance_file(destination)))

    def instances(self) -> dict[str, InstanceConfig]:
        """Every destination in canal.destinations."""
        return {d: self.instance(d) for d in self.destinations}

    @property
    def meta_mode(self) -> MetaMode:
        mode = meta_mode_for(self.global_spring_xml)
        assert mode is not None
        return mode

    def warnings(self) -> list[str]:
        """Unknown keys (kept but unused), keys assigned twice, settings canal-core does not support."""
        return list(self._warnings)

    def ignored_keys(self) -> list[str]:
        """Keys of the Java server that canal-core accepts without acting on them (MQ, admin, druid...)."""
        return sorted(k for k in self._props.props if _classify(k) == "java")


# --- instance.properties ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceSettings:
    """One source's address and configured start (canal.instance.master.* / .standby.* / .masterN.*)."""

    address: HostPort
    journal_name: str = ""
    position: int | None = None
    timestamp: int | None = None
    gtid: str = ""


@dataclass(frozen=True)
class GroupSource:
    """Source N of a group instance (group-instance.xml): canal.instance.masterN.* / standbyN.*."""

    index: int
    master: SourceSettings
    standby: SourceSettings | None = None


@dataclass(frozen=True)
class StoreSettings:
    """What the ring store needs (docs/canal-compat.md §3)."""

    buffer_size: int
    buffer_memunit: int
    batch_mode: BatchMode
    ddl_isolation: bool
    raw_entry: bool

    @property
    def memory_limit(self) -> int:
        """MEMSIZE bound on put - ack: buffer.size x memunit bytes (16 MB by default)."""
        return self.buffer_size * self.buffer_memunit


@dataclass(frozen=True, kw_only=True)
class InstanceConfig:
    """One destination: canal.instance.* from instance.properties over canal.properties over defaults."""

    destination: str
    conf_file: Path | None  # instance.properties; None for CanalConfig.instance_defaults
    # per-destination overrides of canal.instance.global.*
    mode: InstanceMode
    lazy: bool
    spring_xml: str
    meta_mode: MetaMode
    # keys that either file may set
    zk_servers: str
    zookeeper_flush_period: int
    zookeeper_session_timeout: int
    zookeeper_auth: str
    file_data_dir: Path
    file_flush_period: int
    memory_buffer_size: int
    memory_buffer_memunit: int
    memory_batch_mode: BatchMode
    memory_raw_entry: bool
    detecting_enable: bool
    detecting_sql: str
    detecting_interval_time: int
    detecting_retry_threshold: int
    detecting_heartbeat_ha_enable: bool
    transaction_size: int
    fallback_interval_in_seconds: int
    network_receive_buffer_size: int
    network_send_buffer_size: int
    network_so_timeout: int
    filter_druid_ddl: bool
    filter_query_dcl: bool
    filter_query_dml: bool
    filter_query_ddl: bool
    filter_table_error: bool
    filter_rows: bool
    filter_transaction_entry: bool
    filter_dml_insert: bool
    filter_dml_update: bool
    filter_dml_delete: bool
    binlog_format: tuple[str, ...]
    binlog_image: tuple[str, ...]
    get_ddl_isolation: bool
    parser_parallel: bool
    parser_parallel_buffer_size: int
    parser_max_event_size: int
    tsdb_enable: bool
    tsdb_snapshot_interval: int
    tsdb_snapshot_expire: int
    mysql_slave_id: int
    gtidon: bool
    master_address: HostPort
    master_journal_name: str
    master_position: int | None
    master_timestamp: int | None
    master_gtid: str
    master_ssl_mode: SslMode
    standby_address: HostPort | None
    standby_journal_name: str
    standby_position: int | None
    standby_timestamp: int | None
    standby_gtid: str
    db_username: str
    db_password: str
    connection_charset: str
    default_database_name: str
    filter_regex: str
    filter_black_regex: str
    filter_field: str
    filter_black_field: str
    group_sources: tuple[GroupSource, ...] = ()
    raw: dict[str, str] = field(default_factory=dict, repr=False, compare=False)  # instance.properties as read
    _warnings: tuple[str, ...] = field(default=(), repr=False, compare=False)
    _ignored: tuple[str, ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def load(cls, canal: CanalConfig, destination: str) -> InstanceConfig:
        return canal.instance(destination)

    @classmethod
    def _load(cls, canal: CanalConfig, destination: str, props: PropertiesFile | None) -> InstanceConfig:
        file_layer = props.props if props is not None else {}
        layers = [*canal._layers, file_layer, canal._props.props]
        builtins = {"canal.conf.dir": str(canal.conf_dir), "canal.instance.destination": destination}
        resolver = _Resolver(layers, builtins, _DEFAULTS)
        values: dict[str, Any] = {k.attr: _value(resolver, k) for k in INSTANCE_KEYS}
        values["file_data_dir"] = _resolve_dir(canal.conf_file.parent, values["file_data_dir"])

        # canal.instance.{destination}.mode / .lazy / .spring.xml, else canal.instance.global.* (both read
        # from canal.properties and overrides only, as Canal's controller does)
        server = _Resolver([*canal._layers, canal._props.props], builtins, _DEFAULTS)
        chosen: dict[str, Any] = {}
        for suffix, target in _OVERRIDE_OF.items():
            key = KEYS_BY_NAME[target]
            own = _value(server, key, f"canal.instance.{destination}.{suffix}") if destination else None
            chosen[suffix] = own if own is not None else _value(server, key)
        meta_mode = meta_mode_for(chosen["spring.xml"])
        assert meta_mode is not None

        if meta_mode is MetaMode.PERIOD_MIXED and not values["zk_servers"]:
            # Canal would silently try 127.0.0.1:2181 (its spring default); an explicit error is kinder
            origin = props.path if props is not None else str(canal.conf_file)
            raise ConfigError(f"{origin}: {chosen['spring.xml']} keeps the meta in ZooKeeper but canal.zkServers "
                              f"is not set: set canal.zkServers = host:port[,host:port...][/chroot]",
                              file=origin, key="canal.zkServers")
        group = cls._group_sources(resolver, layers)
        warnings: list[str] = []
        ignored: list[str] = []
        if props is not None:
            _log_overrides(canal._layers, props)
            warnings += _duplicate_warnings(props)
            for name, prop in props.props.items():
                kind = _classify(name)
                if kind is None:
                    warnings.append(_unknown_warning(prop, name))
                elif kind in (SERVER, "override"):
                    warnings.append(f"{prop.where}: {name} is read from canal.properties only; ignored here")
                elif kind == "java":
                    ignored.append(name)
            if meta_mode is MetaMode.GROUP and not group:
                raise ConfigError(
                    f"{props.path}: destination {destination!r} uses {chosen['spring.xml']} but sets no "
                    f"canal.instance.master1.address (a group instance reads canal.instance.masterN.*)",
                    file=props.path, key="canal.instance.master1.address")
            if values["detecting_heartbeat_ha_enable"] and values["standby_address"] is None and not group:
                warnings.append(f"{props.path}: canal.instance.detecting.heartbeatHaEnable = true but no "
                                f"canal.instance.standby.address: there is nothing to switch to")
        return cls(destination=destination, conf_file=Path(props.path) if props is not None else None,
                   mode=chosen["mode"], lazy=chosen["lazy"], spring_xml=chosen["spring.xml"], meta_mode=meta_mode,
                   group_sources=group, raw=props.values() if props is not None else {},
                   _warnings=tuple(warnings), _ignored=tuple(sorted(ignored)), **values)

    @staticmethod
    def _group_sources(resolver: _Resolver, layers: Iterable[Mapping[str, Prop]]) -> tuple[GroupSource, ...]:
        indexes = sorted({int(m.group(2)) for layer in layers for k in layer if (m := _GROUP_RE.fullmatch(k))})
        out: list[GroupSource] = []
        for n in indexes:
            roles: dict[str, SourceSettings | None] = {}
            for role in ("master", "standby"):
                got: dict[str, Any] = {}
                for attr, parse in _GROUP_PARSE.items():
                    name = f"canal.instance.{role}{n}.{attr}"
                    got[attr] = _value(resolver, Key(name, attr, parse, None, INSTANCE), name)
                if got["address"] is None:
                    if any(got[a] for a in ("journal.name", "position", "timestamp", "gtid")):
                        prop = next(p for layer in layers for k, p in layer.items()
                                    if k.startswith(f"canal.instance.{role}{n}."))
                        raise ConfigError(f"{prop.where}: canal.instance.{role}{n}.address is missing: the start "
                                          f"position of source {role}{n} needs its address",
                                          file=prop.source, line=prop.line, key=f"canal.instance.{role}{n}.address")
                    roles[role] = None
                    continue
                roles[role] = SourceSettings(got["address"], got["journal.name"] or "", got["position"],
                                             got["timestamp"], got["gtid"] or "")
            master = roles["master"]
            if master is None:
                continue
            out.append(GroupSource(n, master, roles["standby"]))
        return tuple(out)

    # -- derived settings --
    @property
    def data_dir(self) -> Path:
        """``{canal.file.data.dir}/{destination}``: where meta.dat and the schema history live."""
        return self.file_data_dir / self.destination

    @property
    def meta_file(self) -> Path:
        return self.data_dir / "meta.dat"

    @property
    def meta_flush_period_ms(self) -> int:
        """How often the mixed meta managers flush: file (file-mixed) or ZooKeeper (period-mixed)."""
        return self.zookeeper_flush_period if self.meta_mode is MetaMode.PERIOD_MIXED else self.file_flush_period

    @property
    def is_group(self) -> bool:
        return self.meta_mode is MetaMode.GROUP

    def warnings(self) -> list[str]:
        return list(self._warnings)

    def ignored_keys(self) -> list[str]:
        return list(self._ignored)

    def store_config(self) -> StoreSettings:
        return StoreSettings(self.memory_buffer_size, self.memory_buffer_memunit, self.memory_batch_mode,
                             self.get_ddl_isolation, self.memory_raw_entry)

    def filter_config(self) -> dict[str, str]:
        """The canal.instance.filter.* strings, for ``EventFilter.from_config``."""
        def b(v: bool) -> str:
            return "true" if v else "false"

        return {
            _I + "filter.regex": self.filter_regex,
            _I + "filter.black.regex": self.filter_black_regex,
            _I + "filter.field": self.filter_field,
            _I + "filter.black.field": self.filter_black_field,
            _I + "filter.query.dml": b(self.filter_query_dml),
            _I + "filter.query.dcl": b(self.filter_query_dcl),
            _I + "filter.query.ddl": b(self.filter_query_ddl),
            _I + "filter.dml.insert": b(self.filter_dml_insert),
            _I + "filter.dml.update": b(self.filter_dml_update),
            _I + "filter.dml.delete": b(self.filter_dml_delete),
            _I + "filter.table.error": b(self.filter_table_error),
            _I + "filter.rows": b(self.filter_rows),
            _I + "filter.transaction.entry": b(self.filter_transaction_entry),
        }

    def event_filter(self) -> EventFilter:
        from ..parse.filter import EventFilter

        return EventFilter.from_config(self.filter_config())

    def source_settings(self, role: str = "master") -> SourceSettings | None:
        """``master`` / ``standby``, or ``masterN`` / ``standbyN`` of a group instance; None if unset."""
        if role == "master":
            return SourceSettings(self.master_address, self.master_journal_name, self.master_position,
                                  self.master_timestamp, self.master_gtid)
        if role == "standby":
            if self.standby_address is None:
                return None
            return SourceSettings(self.standby_address, self.standby_journal_name, self.standby_position,
                                  self.standby_timestamp, self.standby_gtid)
        m = re.fullmatch(r"(master|standby)([1-9][0-9]*)", role)
        if not m:
            raise ValueError(f"role {role!r}: expected master, standby, masterN or standbyN")
        for g in self.group_sources:
            if g.index == int(m.group(2)):
                return g.master if m.group(1) == "master" else g.standby
        return None

    def start_config(self, role: str = "master") -> StartConfig:
        """The configured start of one source, for the start-position locator."""
        from ..parse.locator import StartConfig

        s = self.source_settings(role)
        if s is None:
            return StartConfig(gtid_on=self.gtidon, fallback_interval=self.fallback_interval_in_seconds)
        return StartConfig(gtid_on=self.gtidon, journal_name=s.journal_name, position=s.position,
                           timestamp=s.timestamp, gtid=s.gtid, fallback_interval=self.fallback_interval_in_seconds)

    def ssl_options(self) -> dict[str, Any] | None:
        """canal.instance.master.sslMode as PyMySQL ``ssl`` options (None: no TLS requested)."""
        mode = self.master_ssl_mode
        if mode in (SslMode.DISABLED, SslMode.PREFERRED):
            return None
        if mode is SslMode.REQUIRED:
            return {"verify_mode": "none", "check_hostname": False}
        opts: dict[str, Any] = {"verify_mode": "required", "check_hostname": mode is SslMode.VERIFY_IDENTITY}
        paths = _ssl.get_default_verify_paths()
        if paths.cafile:
            opts["ca"] = paths.cafile
        elif paths.capath:
            opts["capath"] = paths.capath
        return opts

    def source_config(self, role: str = "master") -> SourceConfig | None:
        from ..parse.parser import SourceConfig

        s = self.source_settings(role)
        if s is None:
            return None
        return SourceConfig(s.address.host, s.address.port, self.db_username, self.db_password, self.ssl_options())

    def parser_config(self, role_suffix: str = "") -> ParserConfig:
        """The ParserConfig of this destination (``role_suffix`` "N": source N of a group instance)."""
        from ..parse.parser import ParserConfig

        if self.is_group and not role_suffix:
            raise ConfigError(f"destination {self.destination!r} is a group instance: use parser_configs()",
                              file=str(self.conf_file), key="canal.instance.global.spring.xml")
        master = self.source_config("master" + role_suffix)
        if master is None:
            raise ConfigError(f"destination {self.destination!r}: no canal.instance.master{role_suffix}.address",
                              file=str(self.conf_file), key=f"canal.instance.master{role_suffix}.address")
        extra: dict[str, Any] = {
            "connection_charset": self.connection_charset,
            "default_database_name": self.default_database_name,
            "receive_buffer_size": self.network_receive_buffer_size,
            "send_buffer_size": self.network_send_buffer_size,
            "so_timeout": self.network_so_timeout,
            "transaction_size": self.transaction_size,
            "binlog_format": self.binlog_format,
            "binlog_image": self.binlog_image,
            "parallel": self.parser_parallel,
            "parallel_buffer_size": self.parser_parallel_buffer_size,
            "ssl_mode": str(self.master_ssl_mode),
            "tsdb_enable": self.tsdb_enable,
        }
        if role_suffix:
            extra["group_index"] = int(role_suffix)
        return ParserConfig(
            destination=self.destination,
            master=master,
            standby=self.source_config("standby" + role_suffix),
            slave_id=self.mysql_slave_id,
            detecting_enable=self.detecting_enable,
            detecting_sql=self.detecting_sql,
            detecting_interval=float(self.detecting_interval_time),
            detecting_retry_threshold=self.detecting_retry_threshold,
            heartbeat_ha_enable=self.detecting_heartbeat_ha_enable,
            master_start=self.start_config("master" + role_suffix),
            standby_start=self.start_config("standby" + role_suffix),
            max_event_size=self.parser_max_event_size,
            extra=extra,
        )

    def parser_configs(self) -> list[ParserConfig]:
        """One ParserConfig, or one per source (masterN) of a group instance."""
        if not self.is_group:
            return [self.parser_config()]
        return [self.parser_config(str(g.index)) for g in self.group_sources]


# --- canal.auto.scan -------------------------------------------------------------------------------------

_SCAN_SKIP = frozenset({"spring", "metrics"})  # directories of Canal's conf/ that are not destinations


class ScannedDestination(NamedTuple):
    path: Path  # the destination's instance.properties
    mtime_ns: int
    sha256: str


@dataclass(frozen=True)
class ScanDiff:
    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed)


def scan_destinations(conf_dir: str | os.PathLike[str]) -> dict[str, ScannedDestination]:
    """Every ``{conf_dir}/{name}/instance.properties`` (Canal's auto scan: a directory holding an
    instance.properties is a destination; ``spring/``, ``metrics/`` and hidden directories are not)."""
    out: dict[str, ScannedDestination] = {}
    try:
        entries = sorted(os.scandir(conf_dir), key=lambda e: e.name)
    except FileNotFoundError:
        return out
    for entry in entries:
        name = entry.name
        if name.startswith(".") or name in _SCAN_SKIP or not _DEST_RE.fullmatch(name):
            continue
        try:
            if not entry.is_dir():
                continue
            path = Path(entry.path) / INSTANCE_PROPERTIES
            st = path.stat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:  # not a destination, or removed while scanning
            continue
        out[name] = ScannedDestination(path, st.st_mtime_ns, digest)
    return out


def diff_destinations(old: Mapping[str, ScannedDestination], new: Mapping[str, ScannedDestination]) -> ScanDiff:
    """Destinations added, changed (instance.properties rewritten or touched: Canal reloads on a new
    modification time; the hash also catches edits within the file system's timestamp granularity) and
    removed between two scans."""
    added = tuple(sorted(n for n in new if n not in old))
    removed = tuple(sorted(n for n in old if n not in new))
    changed = tuple(sorted(n for n in new if n in old and (new[n].mtime_ns != old[n].mtime_ns
                                                           or new[n].sha256 != old[n].sha256
                                                           or new[n].path != old[n].path)))
    return ScanDiff(added, changed, removed)

