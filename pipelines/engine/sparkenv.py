"""Local Spark + Delta Lake, started offline from the jar cache that ``scripts/delta-jars.sh`` fills.

Spark never resolves packages at run time here (no ``spark.jars.packages``, no Ivy): the Delta jars come
from ``delta_jar_dir()``, which ``scripts/delta-jars.sh`` (run by ``scripts/setup.sh``) populates once
from Maven Central.  pyspark is imported lazily so importing this module stays cheap.

The same settings start a long-lived Spark Connect server (``connect_server_argv``, used by
``scripts/spark-connect.sh``): clients then use ``SparkSession.builder.remote("sc://127.0.0.1:PORT")`` and
start no JVM of their own.

Environment:
  CANAL_JAR_CACHE             the jar cache directory (default ~/.cache/canal-core/jars/delta-<version>)
  CANAL_SPARK_DRIVER_MEMORY   driver memory for local sessions and the Connect server (default 1g)
  CANAL_SPARK_WAREHOUSE       spark.sql.warehouse.dir (default <repo>/.runtime/spark-warehouse)
"""

from __future__ import annotations

import os
import re
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

__all__ = [
    "CONNECT_SERVER_CLASS",
    "DELTA_JARS_VERSION",
    "DeltaJarsMissingError",
    "connect_server_argv",
    "connect_warm_up",
    "delta_jar_dir",
    "delta_jars",
    "is_connect",
    "spark_session_builder",
    "spark_settings",
]

# The Delta build in the cache: <delta.version> in scripts/delta-jars/pom.xml (keep the two in step).
# The pip package is delta-spark 4.4.1, but io.delta:delta-spark_4.2_2.13:4.4.1 is not on Maven Central;
# 4.4.0 is the newest Spark 4.2 build there.
DELTA_JARS_VERSION = "4.4.0"

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
# pyspark ships jars/spark-connect_2.13-<version>.jar on its own classpath: no extra jar for the server
CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


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


def _loopback_master(master: str) -> bool:
    """A standalone master on this machine (spark://127.0.0.1:7077, spark://localhost:7077)."""
    if not master.startswith("spark://"):
        return False
    hosts = [h.strip().rsplit(":", 1)[0] for h in master[len("spark://"):].split(",")]
    return bool(hosts) and all(h in ("localhost", "[::1]") or h.startswith("127.") for h in hosts)


def spark_settings(master: str = "local[2]", conf: dict[str, Any] | None = None) -> dict[str, str]:
    """The Spark settings of a Delta session (or Connect server) started offline from the jar cache.

    ``conf`` entries override the defaults below. For a local master this also sets SPARK_LOCAL_IP and
    PYSPARK_PYTHON in os.environ (the JVM that getOrCreate() launches inherits them).
    """
    jars = delta_jars()
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
    if master.startswith("local") or _loopback_master(master):
        # No hostname lookups / external interfaces: works on a machine without DNS or network. A cluster on this
        # machine (scripts/spark-cluster.sh) reaches the driver on loopback too; a remote cluster needs
        # spark.driver.host set to an address its executors can reach (spark.conf).
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
    return {k: str(v) for k, v in settings.items()}


def spark_session_builder(
    app_name: str,
    master: str = "local[2]",
    conf: dict[str, Any] | None = None,
) -> SparkSession.Builder:
    """A SparkSession.Builder for Delta Lake that starts offline from the jar cache.

    ``conf`` entries override the defaults of ``spark_settings``.  Call ``.getOrCreate()`` on the result.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in spark_settings(master, conf).items():
        builder = builder.config(key, value)
    return builder


# Delta logs an ERROR on every scan of a table with both column mapping and deletion vectors (the mirrors): it
# cannot translate its internal skip-deleted-rows filter to physical column names for Parquet pushdown, so Spark
# applies that filter itself. Nothing is wrong and nothing can be done about it in a query; the line only alarms.
DELTA_SCAN_NOISE = "org.apache.spark.sql.delta.DeltaParquetFileFormat"


def quiet_delta_scan_noise(spark: SparkSession) -> None:
    """Raise DELTA_SCAN_NOISE's log level to FATAL in this classic session's JVM (a Spark Connect server gets the
    same from CONNECT_LOG4J2)."""
    jvm = spark._jvm
    if jvm is None:
        raise TypeError("quiet_delta_scan_noise: a Spark Connect session has no JVM in this process "
                        "(the server's log4j2 configuration, CONNECT_LOG4J2, quiets it instead)")
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        DELTA_SCAN_NOISE, jvm.org.apache.logging.log4j.Level.FATAL)


# The Connect server's log4j2 configuration: Spark's default logging to stderr, less two false alarms: every read
# of a file that may be absent (a table's _delta_log/_last_checkpoint, read by pipelines/engine/lake/delta_log.py on
# Connect) logs a stack trace from FileStreamSink, and every scan of a mirror logs DELTA_SCAN_NOISE.
CONNECT_LOG4J2 = f"""rootLogger.level = info
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
logger.filestreamsink.name = org.apache.spark.sql.execution.streaming.sinks.FileStreamSink
logger.filestreamsink.level = error
logger.deltascan.name = {DELTA_SCAN_NOISE}
logger.deltascan.level = fatal
"""


def connect_server_env(log_conf: Path, tag: str = "") -> dict[str, str]:
    """Environment additions for the Connect server's spark-submit: loopback only, this interpreter for Python
    workers, the log4j2 file ``log_conf`` (written with CONNECT_LOG4J2), and ``tag`` (JVM options that let a
    script recognise its own server in /proc)."""
    log_conf.parent.mkdir(parents=True, exist_ok=True)
    log_conf.write_text(CONNECT_LOG4J2)
    opts = f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} -Dlog4j2.configurationFile={log_conf} {tag}".strip()
    return {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable, "SPARK_SUBMIT_OPTS": opts}


def connect_server_argv(port: int, master: str = "local[2]", conf: dict[str, Any] | None = None,
                        app_name: str = "canal-spark-connect") -> list[str]:
    """The spark-submit command line of a Spark Connect server on 127.0.0.1:``port`` with the settings of
    ``spark_settings`` (Delta from the jar cache, offline). pyspark's own spark-submit runs it; the JVM is
    the server (spark-submit execs it), so its pid is the command's."""
    import pyspark

    settings = spark_settings(master, conf)
    memory = settings.pop("spark.driver.memory")
    settings.update({
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
    })
    submit = Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit"
    argv = [str(submit), "--master", master, "--name", app_name, "--driver-memory", memory,
            "--class", CONNECT_SERVER_CLASS]
    for key, value in settings.items():
        argv += ["--conf", f"{key}={value}"]
    return [*argv, "spark-internal"]   # spark-submit's placeholder resource for a class on its own classpath


def connect_warm_up(url: str, scratch: Path, rows: int = 50_000, rounds: int = 3) -> float:
    """Run the kinds of Delta work a pipeline run does (partitioned append with map columns and txn confs, MERGE
    with conditions, log reads) a few times through a session of the Connect server at ``url``, on throw-away
    tables under ``scratch``: the server's JIT and Delta code paths are warm before the first real run. Returns the
    seconds it took."""
    import shutil
    import time

    from pyspark.sql.connect.session import SparkSession as RemoteSession

    t0 = time.monotonic()
    shutil.rmtree(scratch, ignore_errors=True)
    log_t, mirror_t = scratch / "log", scratch / "mirror"
    spark = RemoteSession.builder.remote(url).create()
    try:
        spark.sql(f"CREATE TABLE delta.`{log_t}` (id BIGINT, d DATE, img MAP<STRING, STRING>, s STRING) USING delta "
                  "PARTITIONED BY (d)")
        spark.sql(f"CREATE TABLE delta.`{mirror_t}` (id BIGINT, v STRING, n BIGINT, p BIGINT) USING delta "
                  "TBLPROPERTIES ('delta.columnMapping.mode' = 'name', 'delta.enableTypeWidening' = 'true')")
        for i in range(rounds):
            src = spark.range(i * rows, (i + 1) * rows).selectExpr(
                "id", "date_add(DATE'2024-01-01', CAST(id % 2 AS INT)) AS d",
                "map('k', CAST(id AS STRING), 'v', uuid()) AS img", "uuid() AS s")
            spark.conf.set("spark.databricks.delta.write.txnAppId", "warm-up")
            spark.conf.set("spark.databricks.delta.write.txnVersion", str(i))
            src.write.format("delta").mode("append").save(str(log_t))
            spark.conf.unset("spark.databricks.delta.write.txnAppId")
            spark.conf.unset("spark.databricks.delta.write.txnVersion")
            spark.range(rows // 2 * i, rows // 2 * i + rows).selectExpr(
                "id", "CAST(id AS STRING) AS v", "id * 2 AS n", f"{i} AS p",
                "IF(id % 7 = 0, 'D', 'U') AS op").createOrReplaceTempView("warm_src")
            spark.sql(f"MERGE INTO delta.`{mirror_t}` t USING warm_src s ON t.id = s.id "
                      "WHEN MATCHED AND s.op = 'D' AND t.p <= s.p THEN DELETE "
                      "WHEN MATCHED AND s.op <> 'D' AND t.p <= s.p THEN UPDATE SET t.v = s.v, t.n = s.n, t.p = s.p "
                      "WHEN NOT MATCHED AND s.op <> 'D' THEN INSERT (id, v, n, p) VALUES (s.id, s.v, s.n, s.p)"
                      ).collect()
            spark.sql(f"DESCRIBE HISTORY delta.`{log_t}` LIMIT 1").collect()
            spark.read.text(f"{log_t}/_delta_log/*.json").selectExpr(
                "from_json(value, 'txn STRUCT<appId: STRING, version: BIGINT>') AS a"
            ).where("a.txn IS NOT NULL").collect()
        spark.read.format("delta").load(str(mirror_t)).groupBy("p").count().collect()
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return time.monotonic() - t0


def check_connect_reachable(url: str, timeout: float = 5.0) -> None:
    """Fail fast when nothing listens at a Spark Connect URL: the client would retry for minutes."""
    m = re.match(r"^sc://(\[[^\]]+\]|[^:/]+)(?::(\d+))?", url)
    if m is None:
        raise ValueError(f"spark.remote {url!r} is not a Spark Connect URL (sc://host:port)")
    host, port = m.group(1).strip("[]"), int(m.group(2) or 15002)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        raise ConnectionError(f"no Spark Connect server answers at {url} ({e}): the main job restarts the server it "
                              "supervises (its log: logs/spark-connect.log beside paths.state); a server named by "
                              "spark.remote: start it (scripts/spark-connect.sh start) or remove spark.remote") from e


def is_connect(spark: Any) -> bool:
    """True for a Spark Connect session (no py4j, no SparkContext in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _main(argv: list[str] | None = None) -> int:
    """``python -m pipelines.engine.sparkenv connect-argv --port N [--conf K=V ...]``: the Connect server's command
    line, one argument per line; ``connect-log-conf --out FILE``: its log4j2 file; ``connect-warm-up``: see
    connect_warm_up (all three for scripts/spark-connect.sh)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m pipelines.engine.sparkenv")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("connect-argv", help="print the Spark Connect server's spark-submit command line")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--master", default="local[2]")
    c.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    lg = sub.add_parser("connect-log-conf", help="write the Connect server's log4j2 configuration")
    lg.add_argument("--out", type=Path, required=True)
    w = sub.add_parser("connect-warm-up", help="warm a Spark Connect server's JIT and Delta paths up")
    w.add_argument("--url", required=True)
    w.add_argument("--scratch", type=Path, required=True, help="a directory for throw-away tables")
    w.add_argument("--rows", type=int, default=50_000, help="rows of each write (default 50000)")
    args = ap.parse_args(argv)
    if args.cmd == "connect-log-conf":
        args.out.write_text(CONNECT_LOG4J2)
        return 0
    if args.cmd == "connect-warm-up":
        print(f"{connect_warm_up(args.url, args.scratch.resolve(), rows=args.rows):.1f}")
        return 0
    if any("=" not in kv for kv in args.conf):
        ap.error("--conf takes KEY=VALUE")
    try:
        cmd = connect_server_argv(args.port, args.master, dict(kv.split("=", 1) for kv in args.conf))
    except DeltaJarsMissingError as e:
        print(f"sparkenv: {e}", file=sys.stderr)
        return 1
    if any("\n" in a for a in cmd):
        print("sparkenv: a setting holds a newline", file=sys.stderr)
        return 1
    print("\n".join(cmd))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
