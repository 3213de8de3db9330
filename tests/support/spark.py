"""The Spark settings of the suite's own Spark sessions (the `spark` fixture, the Connect server of
test_spark_connect).

The tests' windows are a handful of rows, where whole-stage code generation and the compiled expression
classes cost more than the query itself: every query generates Java classes that Janino compiles and the JIT
then compiles again. Spark's interpreted mode gives the same results (Spark's own suites run both modes) at a
quarter less CPU here: tests/integration/test_lake.py alone took 212 s and 350 CPU-s of its JVM with code
generation, 158 s and 259 CPU-s without. The pipeline keeps Spark's defaults (code generation on): a MERGE of
200k rows into a 1M-row table took twice as long interpreted. Runs the suite starts through the pipeline (its
main job, the daemon's run workers, the Connect servers the main job supervises) keep them too, so code
generation stays exercised."""

from __future__ import annotations

INTERPRETED = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
