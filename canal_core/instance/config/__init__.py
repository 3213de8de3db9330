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

Modules: ``properties`` (the file format), ``lookup`` (precedence layers and placeholders), ``keys`` (the key
table and the parsers that validate each value), ``values`` (value types), ``canal`` (canal.properties),
``destination`` (instance.properties), ``scan`` (canal.auto.scan).
"""

from __future__ import annotations

from .canal import CanalConfig
from .destination import GroupSource, InstanceConfig, SourceSettings, StoreSettings
from .errors import ConfigError
from .keys import BOTH, INSTANCE, KEYS, KEYS_BY_NAME, SERVER, Key
from .properties import CANAL_PROPERTIES, INSTANCE_PROPERTIES, Prop, PropertiesFile, load_properties, parse_properties
from .scan import ScanDiff, ScannedDestination, diff_destinations, scan_destinations
from .values import HostPort, InstanceMode, MetaMode, ServerMode, SslMode, meta_mode_for

__all__ = [
    "BOTH", "CANAL_PROPERTIES", "INSTANCE", "INSTANCE_PROPERTIES", "KEYS", "KEYS_BY_NAME", "SERVER", "CanalConfig",
    "ConfigError", "GroupSource", "HostPort", "InstanceConfig", "InstanceMode", "Key", "MetaMode", "Prop",
    "PropertiesFile", "ScanDiff", "ScannedDestination", "ServerMode", "SourceSettings", "SslMode", "StoreSettings",
    "diff_destinations", "load_properties", "meta_mode_for", "parse_properties", "scan_destinations",
]
