"""The Spark settings of the suite's own Spark sessions (the `spark` fixture, the Connect server of
test_spark_connect).

The tests' windows are a handful of rows, where whole-stage code generation and the compiled expression
classes cost more than the query itself: every query generates Java classes that Janino compiles and the JIT
then compiles again. Spark's interpreted mode gives the same results (Spark's own suites run both modes) at a
quarter less CPU here: tests/integration/test_lake.py alone took 212 s and 350 CPU-s of its JVM with code
generation, 158 s and 259 CPU-s without. The pipeline keeps Spark's defaults (code generation on): a MERGE of
200k rows into a 1M-row table took twice as long interpreted. Runs the suite starts through the pipeline (its
main job, the daemon's run workers, the Connect servers the main job supervises) keep them too, so code
generation stays exercised.

For the same reason the suite's sessions plan without adaptive query execution and broadcast joins: on a window
of a few rows each re-planned stage and each broadcast is a Spark job of its own. A six-row MERGE into a small
mirror-like table ran 8 Spark jobs instead of 15-21 and took 3.4 s instead of 3.8-4.0 s (mean of 10, one JVM,
idle machine); tests/integration/test_lake.py alone 207 s instead of 223 s. Both change the plan, never the
result; the pipeline's own sessions keep Spark's defaults.

Every Spark JVM the suite starts, its own sessions and those the pipeline starts for it alike, also gets
JVM_OPTIONS (through SPARK_SUBMIT_OPTS, which spark-submit adds to the JVM it launches): the suite is CPU-bound on
two cores and its JVMs are short-lived or run small queries, where HotSpot's JIT compiler threads took 42% of a
session JVM's CPU and G1's concurrent threads another 10%. The serial collector and methods compiled at four times
the default invocation counts took tests/integration/test_lake.py's JVM from 361 to 292 CPU-s at the same wall
time. Neither changes what Spark computes; production JVMs keep the JVM's defaults."""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import Any

INTERPRETED = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.autoBroadcastJoinThreshold": "-1",
}


JVM_OPTIONS = "-XX:+UseSerialGC -XX:CompileThresholdScaling=4"

# The master of the suite's `spark` session and of the test pipelines' config (pipeline_driver.config_data):
# local[2] unless this names another, e.g. the standalone cluster of tests/integration/test_spark_cluster.py.
MASTER_ENV = "CANAL_TEST_SPARK_MASTER"


def suite_master() -> str:
    return os.environ.get(MASTER_ENV) or "local[2]"


def add_jvm_options(environ: MutableMapping[str, str]) -> None:
    """Add JVM_OPTIONS to ``environ``'s SPARK_SUBMIT_OPTS (once)."""
    opts = environ.get("SPARK_SUBMIT_OPTS", "")
    if JVM_OPTIONS not in opts:
        environ["SPARK_SUBMIT_OPTS"] = f"{opts} {JVM_OPTIONS}".strip()


def table_with_txns(spark: Any, path: str) -> None:
    """A Delta table at ``path`` past a checkpoint (Delta checkpoints every 10 commits): created with property
    canal.x = a, then 12 one-row appends recording txn versions 101..112 under appIds "odd" and "even" in turn
    (odd ends at 111, even at 112), then canal.x = b and canal.y = c: version 13. On a classic or Connect session."""
    from pipelines.engine.lake.delta_sql import _txn

    spark.sql(f"CREATE TABLE delta.`{path}` (id INT) USING delta TBLPROPERTIES ('canal.x' = 'a')")
    for i in range(1, 13):
        with _txn(spark, "odd" if i % 2 else "even", 100 + i, f"test:{i}"):
            spark.createDataFrame([(i,)], "id INT").write.format("delta").mode("append").save(path)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('canal.x' = 'b', 'canal.y' = 'c')")
