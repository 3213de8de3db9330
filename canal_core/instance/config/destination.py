"""One destination's instance.properties over canal.properties, typed, and the settings the
parser, store and filters are built from."""

from __future__ import annotations

import re
import ssl as _ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...store import BatchMode
from .errors import ConfigError
from .keys import (
    DEFAULTS,
    GROUP_PARSE,
    GROUP_RE,
    INSTANCE,
    INSTANCE_KEYS,
    KEYS_BY_NAME,
    OVERRIDE_OF,
    SERVER,
    Key,
    classify_key,
)
from .lookup import Resolver, duplicate_warnings, log_overrides, resolve_dir, unknown_warning, value_of
from .properties import Prop, PropertiesFile
from .values import HostPort, InstanceMode, MetaMode, SslMode, meta_mode_for

if TYPE_CHECKING:
    from ...parse.filter import EventFilter
    from ...parse.locator import StartConfig
    from ...parse.parser import ParserConfig, SourceConfig
    from .canal import CanalConfig


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
        resolver = Resolver(layers, builtins, DEFAULTS)
        values: dict[str, Any] = {k.attr: value_of(resolver, k) for k in INSTANCE_KEYS}
        values["file_data_dir"] = resolve_dir(canal.conf_file.parent, values["file_data_dir"])

        # canal.instance.{destination}.mode / .lazy / .spring.xml, else canal.instance.global.* (both read
        # from canal.properties and overrides only, as Canal's controller does)
        server = Resolver([*canal._layers, canal._props.props], builtins, DEFAULTS)
        chosen: dict[str, Any] = {}
        for suffix, target in OVERRIDE_OF.items():
            key = KEYS_BY_NAME[target]
            own = value_of(server, key, f"canal.instance.{destination}.{suffix}") if destination else None
            chosen[suffix] = own if own is not None else value_of(server, key)
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
            log_overrides(canal._layers, props)
            warnings += duplicate_warnings(props)
            for name, prop in props.props.items():
                kind = classify_key(name)
                if kind is None:
                    warnings.append(unknown_warning(prop, name))
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
    def _group_sources(resolver: Resolver, layers: Iterable[Mapping[str, Prop]]) -> tuple[GroupSource, ...]:
        indexes = sorted({int(m.group(2)) for layer in layers for k in layer if (m := GROUP_RE.fullmatch(k))})
        out: list[GroupSource] = []
        for n in indexes:
            roles: dict[str, SourceSettings | None] = {}
            for role in ("master", "standby"):
                got: dict[str, Any] = {}
                for attr, parse in GROUP_PARSE.items():
                    name = f"canal.instance.{role}{n}.{attr}"
                    got[attr] = value_of(resolver, Key(name, attr, parse, None, INSTANCE), name)
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
            "canal.instance.filter.regex": self.filter_regex,
            "canal.instance.filter.black.regex": self.filter_black_regex,
            "canal.instance.filter.field": self.filter_field,
            "canal.instance.filter.black.field": self.filter_black_field,
            "canal.instance.filter.query.dml": b(self.filter_query_dml),
            "canal.instance.filter.query.dcl": b(self.filter_query_dcl),
            "canal.instance.filter.query.ddl": b(self.filter_query_ddl),
            "canal.instance.filter.dml.insert": b(self.filter_dml_insert),
            "canal.instance.filter.dml.update": b(self.filter_dml_update),
            "canal.instance.filter.dml.delete": b(self.filter_dml_delete),
            "canal.instance.filter.table.error": b(self.filter_table_error),
            "canal.instance.filter.rows": b(self.filter_rows),
            "canal.instance.filter.transaction.entry": b(self.filter_transaction_entry),
        }

    def event_filter(self) -> EventFilter:
        from ...parse.filter import EventFilter

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
        from ...parse.locator import StartConfig

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
        from ...parse.parser import SourceConfig

        s = self.source_settings(role)
        if s is None:
            return None
        return SourceConfig(s.address.host, s.address.port, self.db_username, self.db_password, self.ssl_options())

    def parser_config(self, role_suffix: str = "") -> ParserConfig:
        """The ParserConfig of this destination (``role_suffix`` "N": source N of a group instance)."""
        from ...parse.parser import ParserConfig

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

