"""Spark + Delta start offline from the jar cache, write a Delta table, read it back.

Fails (never skips) when the jar cache is missing: run scripts/setup.sh (or scripts/delta-jars.sh).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipelines.engine import sparkenv

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_jar_cache_matches_pom() -> None:
    pom = (REPO_ROOT / "scripts" / "delta-jars" / "pom.xml").read_text()
    m = re.search(r"<delta.version>([^<]+)</delta.version>", pom)
    assert m is not None
    assert m.group(1) == sparkenv.DELTA_JARS_VERSION
    jars = sparkenv.delta_jars()  # raises (-> test failure) when the cache is missing
    names = [j.name for j in jars]
    assert f"delta-spark_4.2_2.13-{sparkenv.DELTA_JARS_VERSION}.jar" in names
    assert f"delta-storage-{sparkenv.DELTA_JARS_VERSION}.jar" in names
    assert not any(n.startswith(("spark-", "scala-library")) for n in names), names


def test_missing_cache_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CANAL_JAR_CACHE", str(tmp_path / "nowhere"))
    with pytest.raises(sparkenv.DeltaJarsMissingError, match=r"scripts/delta-jars\.sh"):
        sparkenv.delta_jars()
    with pytest.raises(sparkenv.DeltaJarsMissingError):
        sparkenv.spark_session_builder("x")


def test_delta_roundtrip_offline(spark, tmp_path: Path) -> None:
    from delta.tables import DeltaTable

    conf = spark.sparkContext.getConf()
    assert not conf.contains("spark.jars.packages")
    cached = {str(j) for j in sparkenv.delta_jars()}
    assert set(conf.get("spark.jars").split(",")) == cached
    assert conf.get("spark.sql.extensions") == sparkenv.DELTA_EXTENSION

    path = str(tmp_path / "people")
    spark.createDataFrame([(1, "ann"), (2, "bob"), (3, "cyd")], "id INT, name STRING").write.format(
        "delta"
    ).save(path)

    assert (tmp_path / "people" / "_delta_log").is_dir()
    rows = sorted((r.id, r.name) for r in spark.read.format("delta").load(path).collect())
    assert rows == [(1, "ann"), (2, "bob"), (3, "cyd")]

    # The pip package's Python API against the cached jars: a MERGE, as the mirror assets do.
    updates = spark.createDataFrame([(2, "bea"), (4, "dan")], "id INT, name STRING")
    (
        DeltaTable.forPath(spark, path)
        .alias("t")
        .merge(updates.alias("u"), "t.id = u.id")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    rows = sorted((r.id, r.name) for r in spark.read.format("delta").load(path).collect())
    assert rows == [(1, "ann"), (2, "bea"), (3, "cyd"), (4, "dan")]

    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
    assert [h.version for h in history] == [0, 1]
    assert history[0].operation == "WRITE"
    assert history[1].operation == "MERGE"


def test_the_suite_s_spark_jvm_runs_with_its_jvm_options(spark) -> None:
    """The JVM flags the suite's time depends on (tests/support/spark.py) reach the JVM spark-submit launched."""
    from tests.support.spark import JVM_OPTIONS

    bean = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    args = [str(a) for a in bean.getInputArguments()]
    assert all(opt in args for opt in JVM_OPTIONS.split()), args
