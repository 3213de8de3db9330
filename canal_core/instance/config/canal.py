"""canal.properties, typed."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .destination import InstanceConfig
from .errors import ConfigError
from .keys import DEFAULTS, DEST_RE, KEYS_BY_NAME, OVERRIDE_OF, OVERRIDE_RE, SERVER_KEYS, classify_key
from .lookup import Resolver, duplicate_warnings, log_overrides, override_layers, resolve_dir, unknown_warning, value_of
from .properties import CANAL_PROPERTIES, INSTANCE_PROPERTIES, Prop, PropertiesFile, load_properties
from .values import InstanceMode, MetaMode, ServerMode, meta_mode_for


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
        layers = override_layers(overrides, env)
        base = path.parent

        # canal.conf.dir first: every ${canal.conf.dir} sees the resolved absolute directory
        pre = Resolver([*layers, props.props], {}, {})
        conf_dir_text = value_of(pre, KEYS_BY_NAME["canal.conf.dir"])
        conf_dir = base if conf_dir_text is None else resolve_dir(base, conf_dir_text)
        builtins = {"canal.conf.dir": str(conf_dir)}
        resolver = Resolver([*layers, props.props], builtins, DEFAULTS)

        values: dict[str, Any] = {}
        for key in SERVER_KEYS:
            if key.name != "canal.conf.dir":
                values[key.attr] = value_of(resolver, key)
        values["file_data_dir"] = resolve_dir(base, values["file_data_dir"])

        log_overrides(layers, props)
        warnings = duplicate_warnings(props)
        for name, prop in props.props.items():
            kind = classify_key(name)
            if kind is None:
                warnings.append(unknown_warning(prop, name))
            elif kind == "override":
                m = OVERRIDE_RE.fullmatch(name)
                assert m is not None
                target = OVERRIDE_OF.get(m.group(2))
                if target is not None:  # validate now, against canal.properties
                    value_of(resolver, KEYS_BY_NAME[target], name)
        if values["global_mode"] is InstanceMode.MANAGER:
            warnings.append(f"{path}: canal.instance.global.mode = manager (canal-admin) is not supported by "
                            f"canal-core; instances are read from {conf_dir}")
        if values["server_mode"] is not ServerMode.TCP:
            warnings.append(f"{path}: canal.serverMode = {values['server_mode']}: canal-core serves tcp only")

        # instance_defaults are read through this config itself: set once it exists
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
        if not DEST_RE.fullmatch(destination) or destination in (".", ".."):
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
        return sorted(k for k in self._props.props if classify_key(k) == "java")

