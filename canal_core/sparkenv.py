"""Local Spark + Delta Lake, started offline from the jar cache that ``scripts/delta-jars.sh`` fills.

Spark never resolves packages at run time here (no ``spark.jars.packages``, no Ivy): the Delta jars come
from ``delta_jar_dir()``, which ``scripts/delta-jars.sh`` (run by ``scripts/setup.sh``) populates once
from Maven Central.  pyspark is imported lazily so importing this module stays cheap.

Environment:
  CANAL_JAR_CACHE             the jar cache directory (default ~/.cache/canal-core/jars/delta-<version>)
  CANAL_SPARK_DRIVER_MEMORY   driver memory for local sessions (default 1g)
  CANAL_SPARK_WAREHOUSE       spark.sql.warehouse.dir (default <repo>/.runtime/spark-warehouse)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

__all__ = [
    "DELTA_JARS_VERSION",
    "DeltaJarsMissingError",
    "delta_jar_dir",
    "delta_jars",
    "spark_session_builder",
]

# The Delta build in the cache: <delta.version> in scripts/delta-jars/pom.xml (keep the two in step).
# The pip package is delta-spark 4.4.1, but io.delta:delta-spark_4.2_2.13:4.4.1 is not on Maven Central;
# 4.4.0 is the newest Spark 4.2 build there.
DELTA_JARS_VERSION = "4.4.0"

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


class DeltaJarsMissingError(RuntimeError):
    """The Delta jar cache is missing or incomplete."""


def delta_jar_dir() -> Path:
    """The directory holding the cached Delta jars (it may not exist yet)."""
    env = os.environ.get("CANAL_JAR_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "canal-core" / "jars" / f"delta-{DELTA_JARS_VERSION}"


def delta_jars() -> list[Path]:
    """The cached Delta jars, sorted; raises DeltaJarsMissingError if the cache is not complete."""
    d = delta_jar_dir()
    hint = "run scripts/delta-jars.sh (or scripts/setup.sh) to fetch them once from Maven Central"
    manifest = d / "MANIFEST"
    if not (d / ".complete").is_file() or not manifest.is_file():
        raise DeltaJarsMissingError(f"Delta jar cache {d} is missing or incomplete: {hint}")
    jars: list[Path] = []
    for line in manifest.read_text().splitlines():
        parts = line.split(maxsplit=1)
        if len(parts) != 2:
            continue
        jar = d / parts[1].lstrip("*")
        if not jar.is_file():
            raise DeltaJarsMissingError(f"Delta jar {jar} listed in {manifest} is missing: {hint}")
        jars.append(jar)
    if not any(j.name.startswith("delta-spark_") for j in jars):
        raise DeltaJarsMissingError(f"no delta-spark jar in {d}: {hint}")
    return sorted(jars)


def _default_warehouse() -> Path | None:
    """$CANAL_SPARK_WAREHOUSE, else <repo>/.runtime/spark-warehouse in a source checkout.

    Spark creates its warehouse directory at session start; without this it would litter the cwd.
    """
    env = os.environ.get("CANAL_SPARK_WAREHOUSE")
    if env:
        return Path(env).expanduser().resolve()
    repo = Path(__file__).resolve().parents[1]
    if (repo / "pyproject.toml").is_file():
        return repo / ".runtime" / "spark-warehouse"
    return None


def spark_session_builder(
    app_name: str,
    master: str = "local[2]",
    conf: dict[str, Any] | None = None,
) -> SparkSession.Builder:
    """A SparkSession.Builder for Delta Lake that starts offline from the jar cache.

    ``conf`` entries override the defaults below.  Call ``.getOrCreate()`` on the result.
    """
    from pyspark.sql import SparkSession

    jars = delta_jars()
    local = master.startswith("local")
    settings: dict[str, Any] = {
        "spark.jars": ",".join(str(j) for j in jars),
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": os.environ.get("CANAL_SPARK_DRIVER_MEMORY", "1g"),
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.catalogImplementation": "in-memory",
        # Delta's snapshot reconstruction defaults to 50 partitions: far too many for local tables.
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.log.level": "WARN",
    }
    if local:
        # No hostname lookups / external interfaces: works on a machine without DNS or network.
        # SPARK_LOCAL_IP is read by the JVM that getOrCreate() launches (it inherits os.environ).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # Python workers (UDFs) run this interpreter, with this environment's packages, not the system python3
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        settings.update(
            {
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
            }
        )
    warehouse = _default_warehouse()
    if warehouse is not None:
        settings["spark.sql.warehouse.dir"] = str(warehouse)
    if conf:
        settings.update(conf)
    if "spark.jars.packages" in settings:
        raise ValueError("spark.jars.packages would resolve jars with Ivy at run time; use the jar cache")

    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in settings.items():
        builder = builder.config(key, str(value))
    return builder
