"""The pipeline's configuration: ``conf/pipeline.yaml`` as typed, frozen dataclasses.

``load_config()`` reads ``$CANAL_PIPELINE_CONF`` or ``<repo>/conf/pipeline.yaml``. Every key is optional
(defaults below); an unknown key or a bad value is a ``PipelineConfigError`` naming the file and the dotted
key. Relative paths resolve against ``base_dir`` (default: the directory above the one holding the file, so
``conf/pipeline.yaml`` resolves against the project root). The source connection is not repeated here: it
is the Canal destination's own ``instance.properties`` (master address, user, password, filter regex),
read with ``canal_core.instance.config``.

Several destinations in one code location: ``destinations: [primary, secondary]`` instead of ``destination``.
Each gets its own sensor, jobs, assets (keys prefixed by the destination), pool, staging, state and lake
directory (``<lake.root>/<destination>``); ``per_destination()`` gives one PipelineConfig per destination.

Environment overrides (tests, containers), applied after the file:
  CANAL_PIPELINE_CONF          the YAML file
  CANAL_PIPELINE_DESTINATION   destination (one: replaces destinations)
  CANAL_PIPELINE_CANAL_CONF    canal.conf_dir
  CANAL_PIPELINE_STAGING       paths.staging
  CANAL_PIPELINE_STATE         paths.state
  CANAL_PIPELINE_LAKE          lake.root
  CANAL_PIPELINE_SPARK_MASTER  spark.master
  CANAL_PIPELINE_SPARK_REMOTE  spark.remote
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from canal_core.instance.config import CanalConfig, InstanceConfig

    from .replay import ReplaySource

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_FILE = REPO_ROOT / "conf" / "pipeline.yaml"
CANAL_MODES = ("embedded", "remote", "cluster")

ENV_FILE = "CANAL_PIPELINE_CONF"
_ENV_OVERRIDES = {
    "CANAL_PIPELINE_DESTINATION": "destination",
    "CANAL_PIPELINE_CANAL_CONF": "canal.conf_dir",
    "CANAL_PIPELINE_STAGING": "paths.staging",
    "CANAL_PIPELINE_STATE": "paths.state",
    "CANAL_PIPELINE_LAKE": "lake.root",
    "CANAL_PIPELINE_SPARK_MASTER": "spark.master",
    "CANAL_PIPELINE_SPARK_REMOTE": "spark.remote",
}


class PipelineConfigError(ValueError):
    """A bad pipeline.yaml: the message names the file and the dotted key."""

    def __init__(self, file: Path | str, key: str, problem: str) -> None:
        super().__init__(f"{file}: {key}: {problem}")
        self.file = str(file)
        self.key = key


@dataclass(frozen=True, slots=True)
class CanalSettings:
    mode: str = "embedded"            # embedded | remote (canal-server over TCP) | cluster (ZooKeeper discovery)
    conf_dir: Path = Path("conf")     # Canal's conf/: canal.properties + <destination>/instance.properties
    client_id: int = 1001
    address: str = ""                 # remote: host:port of a canal-server
    zk_servers: str = ""              # cluster: ZooKeeper connect string
    zk_allowed: str = ""              # cluster: the only servers discovery may return (networks, addresses, names)
    username: str = ""                # remote/cluster: canal.user
    password: str = ""
    batch_entries: int = 1000         # one getWithoutAck: entries (ITEMSIZE stores) ...
    batch_bytes: int = 1 << 20        # ... or bytes (MEMSIZE stores)


@dataclass(frozen=True, slots=True)
class WindowSettings:
    max_rows: int = 200_000
    max_bytes: int = 128 << 20
    max_wait_seconds: float = 1.0
    stage_ahead: bool = True          # while a window's run is in flight, stage the next one (launched on success)


@dataclass(frozen=True, slots=True)
class SensorSettings:
    interval_seconds: int = 30
    max_failures: int = 5             # consecutive failed attempts of a window before the sensor stops taking windows
    backoff_seconds: float = 30.0     # after the n-th failure: backoff_seconds * 2**(n-1), at most backoff_max_seconds
    backoff_max_seconds: float = 900.0
    deadline_seconds: float = 40.0    # one evaluation's budget (Dagster kills it at 60 s)
    launch_timeout_seconds: float = 600.0  # a requested run that never appears counts as failed after this
    max_run_seconds: int = 3600       # a window/snapshot run going longer is canceled by Dagster's run monitoring
    reconcile_interval_seconds: float = 900.0  # each mirror's reconcile check runs (canal_reconcile) this often
    reconcile_tables_per_run: int = 1  # ... at most this many per run (0 or an interval of 0: only on demand)


@dataclass(frozen=True, slots=True)
class SnapshotSettings:
    chunk_rows: int = 100_000         # a large table's initial load: chunks of this many rows (0: never in chunks)
    chunked_above_rows: int = 1_000_000  # ... for tables InnoDB estimates at least this large
    readers: int = 2                  # ... read by this many reader processes at once (1: a thread of the run)
    chunk_bytes: int = 64 * 1024 * 1024  # ... a chunk also ends at this many bytes of rows (a reader holds one)


@dataclass(frozen=True, slots=True)
class PathSettings:
    staging: Path = Path(".runtime/pipeline/staging")
    state: Path = Path(".runtime/pipeline/state")


@dataclass(frozen=True, slots=True)
class LakeSettings:
    root: str = ".runtime/lake"       # a local path or an object-store URI (s3a://, abfss://, gs://)
    deletion_vectors: bool = True     # new mirrors get delta.enableDeletionVectors (merge-on-read MERGE)


@dataclass(frozen=True, slots=True)
class SparkSettings:
    master: str = "local[2]"
    app_name: str = "canal-pipeline"
    conf: Mapping[str, str] = field(default_factory=dict)
    remote: str = ""                  # sc://host:port of a Spark Connect server (scripts/spark-connect.sh); "": local


@dataclass(frozen=True, slots=True)
class ChangelogSettings:
    start_date: str = ""              # first daily partition of canal/changelog (UTC); "": the destination's first day


@dataclass(frozen=True, slots=True)
class MaintenanceSettings:
    cron: str = "0 3 * * *"
    vacuum_retention_hours: int = 168
    optimize: bool = True


@dataclass(frozen=True, slots=True)
class FreshnessSettings:
    warn_seconds: int = 300           # a mirror not materialized for this long is WARN in the UI ...
    fail_seconds: int = 900           # ... and FAIL after this


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    file: Path | None = None
    base_dir: Path = REPO_ROOT
    destination: str = "example"
    # destinations: [a, b] (several in one code location): all of them, and the namespace the destination's Dagster
    # names, asset keys and lake directory carry. Such a config is its first destination; per_destination() gives
    # each. () and "": the one destination, plain names.
    destinations: tuple[str, ...] = ()
    namespace: str = ""
    timezone: str = "UTC"
    canal: CanalSettings = field(default_factory=CanalSettings)
    window: WindowSettings = field(default_factory=WindowSettings)
    sensor: SensorSettings = field(default_factory=SensorSettings)
    snapshot: SnapshotSettings = field(default_factory=SnapshotSettings)
    paths: PathSettings = field(default_factory=PathSettings)
    lake: LakeSettings = field(default_factory=LakeSettings)
    spark: SparkSettings = field(default_factory=SparkSettings)
    changelog: ChangelogSettings = field(default_factory=ChangelogSettings)
    maintenance: MaintenanceSettings = field(default_factory=MaintenanceSettings)
    freshness: FreshnessSettings = field(default_factory=FreshnessSettings)

    # --- derived locations -----------------------------------------------------------------------------

    @property
    def staging_root(self) -> Path:
        return self.paths.staging

    @property
    def state_dir(self) -> Path:
        """This destination's small state files (table list cache, snapshot registry)."""
        return self.paths.state / self.destination

    @property
    def lake_root(self) -> str:
        """This destination's lake: lake.root, or <lake.root>/<destination> when several share the root."""
        return f"{self.lake.root.rstrip('/')}/{self.lake_subdir}" if self.lake_subdir else self.lake.root

    @property
    def lake_subdir(self) -> str:
        return self.destination if self.namespace else ""

    def per_destination(self) -> list[PipelineConfig]:
        """One config per destination (itself when one destination is configured)."""
        if not self.destinations:
            return [self]
        return [replace(self, destination=d, namespace=dagster_name(d)) for d in self.destinations]

    # --- the Canal destination -------------------------------------------------------------------------

    def canal_config(self) -> CanalConfig:
        """The Canal conf as its files are now (read again after an edit)."""
        # the environment is part of the key: Canal reads keys and ${placeholders} from it (os.environ)
        env = hashlib.sha256(repr(sorted(os.environ.items())).encode()).hexdigest()
        return _canal_config(self.canal.conf_dir, conf_stamp(self.canal.conf_dir, self.destination), env)

    def instance_config(self) -> InstanceConfig:
        return self.canal_config().instance(self.destination)

    def conn_kwargs(self) -> dict[str, Any]:
        """pymysql.connect() arguments of the destination's master (snapshots, reconciliation, table list)."""
        inst = self.instance_config()
        kw: dict[str, Any] = {"host": inst.master_address.host, "port": inst.master_address.port,
                              "user": inst.db_username, "password": inst.db_password, "connect_timeout": 5}
        ssl = inst.ssl_options()
        if ssl:
            kw["ssl"] = ssl
        return kw

    def replay_source(self) -> ReplaySource:
        """What a bounded replay (backfill, snapshot catch-up, reconciliation) reads the binlog with."""
        from .replay import ReplaySource

        return ReplaySource.from_instance(self.instance_config(), timezone=self.timezone)


def conf_stamp(conf_dir: Path, destination: str) -> str:
    """A digest of canal.properties and the destination's instance.properties: changes with every edit."""
    h = hashlib.sha256()
    for p in (conf_dir / "canal.properties", conf_dir / destination / "instance.properties"):
        h.update(str(p).encode() + b"\0")
        try:
            h.update(p.read_bytes())
        except OSError as e:
            h.update(f"<{type(e).__name__}>".encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=8)
def _canal_config(conf_dir: Path, stamp: str, env: str) -> CanalConfig:
    from canal_core.instance.config import CanalConfig

    return CanalConfig.load(conf_dir)


# --- loading ---------------------------------------------------------------------------------------------

_SECTIONS: dict[str, type] = {
    "canal": CanalSettings, "window": WindowSettings, "sensor": SensorSettings, "snapshot": SnapshotSettings,
    "paths": PathSettings,
    "lake": LakeSettings, "spark": SparkSettings, "changelog": ChangelogSettings,
    "maintenance": MaintenanceSettings, "freshness": FreshnessSettings,
}
_URI = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
_DESTINATION = re.compile(r"^[A-Za-z0-9_.-]+$")


def dagster_name(destination: str) -> str:
    """A destination name as Dagster accepts in job, sensor and asset names (letters, digits, _)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", destination)


def _coerce(value: Any, default: Any, file: Path | str, key: str) -> Any:
    """``value`` as the type of the field's default (YAML already typed most of it)."""
    def bad(expected: str) -> PipelineConfigError:
        return PipelineConfigError(file, key, f"{value!r} is not {expected}")

    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad("a number")
        return float(value)
    if isinstance(default, Path):
        if not isinstance(value, str) or not value:
            raise bad("a path")
        return Path(value)
    if isinstance(default, Mapping):
        if not isinstance(value, Mapping):
            raise bad("a mapping")
        return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
    if isinstance(default, str):
        if isinstance(value, dt.date):  # YAML reads 2024-01-01 as a date
            return value.isoformat()
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise bad("a string")
        return str(value)
    raise AssertionError(f"no coercion for {key}")  # pragma: no cover


def _section(cls: type, data: Any, file: Path | str, prefix: str) -> Any:
    if data is None:
        return cls()
    if not isinstance(data, Mapping):
        raise PipelineConfigError(file, prefix, f"expected a mapping, got {type(data).__name__}")
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    replaced = {"sensor.reconcile_every": "sensor.reconcile_interval_seconds (seconds between two reconciliations "
                "of a mirror)"}
    for k in unknown:
        if f"{prefix}.{k}" in replaced:
            raise PipelineConfigError(file, f"{prefix}.{k}", f"no longer read: use {replaced[prefix + '.' + k]}")
    if unknown:
        raise PipelineConfigError(file, f"{prefix}.{unknown[0]}", f"unknown key (known: {', '.join(sorted(names))})")
    defaults = cls()
    return replace(defaults, **{k: _coerce(v, getattr(defaults, k), file, f"{prefix}.{k}") for k, v in data.items()})


def _set_dotted(data: dict[str, Any], dotted: str, value: str) -> None:
    head, _, tail = dotted.partition(".")
    if not tail:
        data[head] = value
        return
    section = data.get(head)
    data[head] = {**(section if isinstance(section, Mapping) else {}), tail: value}


def parse_config(data: Mapping[str, Any] | None, file: Path | str = "<dict>", *, base_dir: Path | None = None,
                 env: Mapping[str, str] | None = None) -> PipelineConfig:
    """Build and validate a PipelineConfig from parsed YAML (``env``: the override variables to apply)."""
    raw: dict[str, Any] = dict(data or {})
    if env and env.get("CANAL_PIPELINE_DESTINATION"):
        raw.pop("destinations", None)   # the environment names the one destination to run
    for var, dotted in _ENV_OVERRIDES.items():
        if env and env.get(var):
            _set_dotted(raw, dotted, env[var])
    top = {"base_dir", "destination", "destinations", "timezone", *_SECTIONS}
    unknown = sorted(set(raw) - top)
    if unknown:
        raise PipelineConfigError(file, unknown[0], f"unknown key (known: {', '.join(sorted(top))})")

    if "base_dir" in raw:
        base = Path(_coerce(raw["base_dir"], Path("."), file, "base_dir"))
        if not base.is_absolute():
            base = (base_dir or Path.cwd()) / base
    else:
        base = base_dir or REPO_ROOT
    base = base.resolve()

    destinations = _destinations(raw, file)
    cfg = PipelineConfig(
        file=Path(file) if file != "<dict>" else None, base_dir=base,
        destination=destinations[0] if destinations else _coerce(raw.get("destination", "example"), "", file,
                                                                 "destination"),
        destinations=destinations, namespace=dagster_name(destinations[0]) if destinations else "",
        timezone=_coerce(raw.get("timezone", "UTC"), "", file, "timezone"),
        **{name: _section(cls, raw.get(name), file, name) for name, cls in _SECTIONS.items()},
    )
    return _validate(cfg, file)


def _destinations(raw: Mapping[str, Any], file: Path | str) -> tuple[str, ...]:
    if "destinations" not in raw:
        return ()
    if "destination" in raw:
        raise PipelineConfigError(file, "destinations", "give either destination (one) or destinations (a list)")
    value = raw["destinations"]
    if not isinstance(value, list) or not value:
        raise PipelineConfigError(file, "destinations", f"{value!r} is not a non-empty list of destination names")
    names: list[str] = []
    for i, d in enumerate(value):
        if not isinstance(d, str) or not _DESTINATION.match(d):
            raise PipelineConfigError(file, f"destinations[{i}]", f"{d!r} is not a Canal destination name "
                                      "(letters, digits, _ . -)")
        same = [n for n in names if dagster_name(n) == dagster_name(d)]
        if same:
            raise PipelineConfigError(file, f"destinations[{i}]", f"{d!r} and {same[0]!r} give the same Dagster "
                                      f"name {dagster_name(d)!r}: rename one")
        names.append(d)
    return tuple(names)


def _abs(base: Path, p: Path) -> Path:
    return p if p.is_absolute() else base / p


def _validate(cfg: PipelineConfig, file: Path | str) -> PipelineConfig:
    def err(key: str, problem: str) -> PipelineConfigError:
        return PipelineConfigError(file, key, problem)

    if not _DESTINATION.match(cfg.destination):
        raise err("destination", f"{cfg.destination!r} is not a Canal destination name (letters, digits, _ . -)")
    if cfg.timezone != "UTC":
        # the embedded instance renders TIMESTAMP text in UTC and the changelog partitions by UTC date
        raise err("timezone", f"{cfg.timezone!r}: only UTC is supported")
    c = cfg.canal
    if c.mode not in CANAL_MODES:
        raise err("canal.mode", f"{c.mode!r}: expected one of {', '.join(CANAL_MODES)}")
    if c.mode == "remote" and not c.address:
        raise err("canal.address", "mode remote needs the canal-server's host:port")
    if c.mode == "cluster" and not c.zk_servers:
        raise err("canal.zk_servers", "mode cluster needs the ZooKeeper connect string")
    if c.zk_allowed:
        from canal_core.client.zookeeper import parse_allowed

        try:
            parse_allowed(c.zk_allowed.split(","))
        except ValueError as e:
            raise err("canal.zk_allowed", f"{e} (comma-separated, e.g. 10.0.0.0/8,canal-1.example)") from None
    if not -32768 <= c.client_id <= 32767:
        raise err("canal.client_id", f"{c.client_id} is outside Canal's 16-bit client id range")
    for key, v in (("canal.batch_entries", c.batch_entries), ("canal.batch_bytes", c.batch_bytes),
                   ("window.max_rows", cfg.window.max_rows), ("window.max_bytes", cfg.window.max_bytes),
                   ("sensor.interval_seconds", cfg.sensor.interval_seconds),
                   ("sensor.max_failures", cfg.sensor.max_failures)):
        if v <= 0:
            raise err(key, f"{v} must be positive")
    s = cfg.sensor
    if not 0 < cfg.window.max_wait_seconds <= s.deadline_seconds / 2:
        raise err("window.max_wait_seconds", f"{cfg.window.max_wait_seconds} must be positive and at most half of "
                  f"sensor.deadline_seconds ({s.deadline_seconds}): staging and the run request need the rest")
    if not 0 < s.deadline_seconds <= 50:
        raise err("sensor.deadline_seconds", f"{s.deadline_seconds}: must be in (0, 50], below Dagster's 60 s limit")
    if s.backoff_seconds < 0 or s.backoff_max_seconds < s.backoff_seconds:
        raise err("sensor.backoff_seconds", "needs 0 <= backoff_seconds <= backoff_max_seconds")
    if s.reconcile_interval_seconds < 0:
        raise err("sensor.reconcile_interval_seconds", f"{s.reconcile_interval_seconds} must be >= 0 (0: on demand)")
    if s.reconcile_tables_per_run < 0:
        raise err("sensor.reconcile_tables_per_run", f"{s.reconcile_tables_per_run} must be >= 0")
    if cfg.snapshot.chunk_rows < 0 or cfg.snapshot.chunked_above_rows < 0:
        raise err("snapshot.chunk_rows", "chunk_rows and chunked_above_rows must be >= 0 (chunk_rows 0: never)")
    if cfg.snapshot.chunk_bytes < 1024 * 1024:
        raise err("snapshot.chunk_bytes", f"{cfg.snapshot.chunk_bytes} must be at least 1048576 (1 MiB): a reader "
                  "holds one chunk's rows in memory, at most this many bytes of them")
    if not 1 <= cfg.snapshot.readers <= 64:
        raise err("snapshot.readers", f"{cfg.snapshot.readers} must be in [1, 64] (each reader is a process with "
                  "its own connection to the source)")
    if s.max_run_seconds <= 0:
        raise err("sensor.max_run_seconds", f"{s.max_run_seconds} must be positive")
    try:
        if cfg.changelog.start_date:
            dt.date.fromisoformat(cfg.changelog.start_date)
    except ValueError:
        raise err("changelog.start_date", f"{cfg.changelog.start_date!r} is not a date (YYYY-MM-DD)") from None
    if len(cfg.maintenance.cron.split()) != 5:
        raise err("maintenance.cron", f"{cfg.maintenance.cron!r} is not a 5-field cron expression")
    if cfg.maintenance.vacuum_retention_hours < 0:
        raise err("maintenance.vacuum_retention_hours", "must be >= 0")
    f = cfg.freshness
    if not 0 < f.warn_seconds <= f.fail_seconds:
        raise err("freshness.warn_seconds", "needs 0 < warn_seconds <= fail_seconds")
    if "spark.jars.packages" in cfg.spark.conf:
        raise err("spark.conf.spark.jars.packages", "Spark starts offline from the jar cache (scripts/delta-jars.sh)")
    if cfg.spark.remote and not re.match(r"^sc://[^/\s]+", cfg.spark.remote):
        raise err("spark.remote", f"{cfg.spark.remote!r} is not a Spark Connect URL (sc://host:port)")

    base = cfg.base_dir
    lake_root = cfg.lake.root if _URI.match(cfg.lake.root) else str(_abs(base, Path(cfg.lake.root)))
    return replace(
        cfg,
        canal=replace(c, conf_dir=_abs(base, c.conf_dir)),
        paths=PathSettings(staging=_abs(base, cfg.paths.staging), state=_abs(base, cfg.paths.state)),
        lake=replace(cfg.lake, root=lake_root),
    )


def load_config(path: str | os.PathLike[str] | None = None, *, env: Mapping[str, str] | None = None,
                check_canal: bool = True) -> PipelineConfig:
    """Read the pipeline's YAML: ``path``, else $CANAL_PIPELINE_CONF, else conf/pipeline.yaml. A missing
    default file means all defaults. ``check_canal``: also load the destination's Canal conf, so a wrong
    conf_dir or destination fails here, naming pipeline.yaml."""
    import yaml

    env = os.environ if env is None else env
    explicit = path or env.get(ENV_FILE)
    file = Path(explicit).expanduser() if explicit else DEFAULT_FILE
    data: Any = None
    if file.is_file():
        try:
            data = yaml.safe_load(file.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            raise PipelineConfigError(file, "(file)", f"not valid YAML: {e}") from None
    elif explicit:
        raise PipelineConfigError(file, "(file)", "no such file" + (f" (from ${ENV_FILE})" if not path else ""))
    if data is not None and not isinstance(data, Mapping):
        raise PipelineConfigError(file, "(file)", "the top level must be a mapping")
    cfg = parse_config(data, file, base_dir=file.resolve().parent.parent, env=env)
    if check_canal:
        check_canal_conf(cfg)
    return cfg


def check_canal_conf(config: PipelineConfig) -> None:
    """Load each destination's Canal conf, turning its errors into errors about pipeline.yaml's keys."""
    for cfg in config.per_destination():
        _check_canal_conf(cfg, "destinations" if cfg.namespace else "destination")


def _check_canal_conf(cfg: PipelineConfig, key: str) -> None:
    from canal_core.instance.config import ConfigError

    if cfg.canal.mode != "embedded":
        return  # a remote server reads its own conf
    where = cfg.file or "<config>"
    if not (cfg.canal.conf_dir / "canal.properties").is_file():
        raise PipelineConfigError(where, "canal.conf_dir", f"{cfg.canal.conf_dir} has no canal.properties")
    if not (cfg.canal.conf_dir / cfg.destination / "instance.properties").is_file():
        raise PipelineConfigError(where, key, f"{cfg.destination!r}: no "
                                  f"{cfg.canal.conf_dir / cfg.destination / 'instance.properties'}")
    try:
        cfg.instance_config()
    except ConfigError as e:
        raise PipelineConfigError(where, "canal.conf_dir", f"the Canal conf does not load: {e}") from e
