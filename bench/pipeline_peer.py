"""bench/pipeline's peer: the usual non-CDC mirror, a periodic full reload. Every interval (never two at once: a
cycle due while one runs starts at the next interval boundary after it, as a sensor or schedule would), SELECT *
of the source table in a consistent snapshot, then overwrite the Delta table with it through Spark.

The read is the project's own snapshot reader (pipelines.engine.snapshot: pymysql server-side cursor, typed Arrow
columns, Parquet; the project has no JDBC driver), the write a Delta overwrite from that Parquet with the same
Spark settings as the pipeline. Two modes:

* cold (default): each reload is a process of its own with its own SparkSession, started after the read, as a
  periodic Dagster job would run under the pipeline's one-session-per-run rule (without Dagster's run launch);
* warm: one SparkSession kept for the whole run in the bench process (no per-cycle JVM start), the peer's best case.

A row committed at t is visible at the end of the first reload whose snapshot began after t.

    .venv/bin/python bench/pipeline_peer.py '{"conn": {...}, "schema": ..., ...}'   (one cold reload, JSON out)
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Cycle:
    due: float           # the interval boundary it ran for
    snapshot: float      # START TRANSACTION WITH CONSISTENT SNAPSHOT done: commits before this are in
    read_end: float      # source rows read and staged as Parquet
    spark_ready: float   # SparkSession up (= read_end when warm)
    end: float           # Delta overwrite committed: visible
    rows: int            # source rows read

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "read_s": round(self.read_end - self.snapshot, 3),
                "spark_s": round(self.spark_ready - self.read_end, 3), "write_s": round(self.end - self.spark_ready, 3)}


def reload(job: dict[str, Any], due: float, spark: Any = None) -> Cycle:
    """One full reload; a SparkSession of its own (started after the read, stopped after) unless ``spark``."""
    from pipelines.engine.snapshot import take_snapshot

    scratch = Path(job["scratch"])
    seen: list[float] = []
    shutil.rmtree(scratch, ignore_errors=True)
    snap = take_snapshot(job["conn"], job["schema"], job["table"], scratch,
                         on_position=lambda _p: seen.append(time.time()))
    read_end = time.time()
    own = spark is None
    if own:
        from pipelines.engine.sparkenv import spark_session_builder

        spark = spark_session_builder("bench-pipeline-peer", "local[2]", job["spark_conf"]).getOrCreate()
    ready = time.time()
    try:
        spark.read.parquet(str(scratch)).write.format("delta").mode("overwrite").save(job["lake_path"])
        end = time.time()
    finally:
        if own:
            spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return Cycle(due=due, snapshot=seen[0], read_end=read_end, spark_ready=ready, end=end, rows=snap.rows)


def reload_cold(job: dict[str, Any], due: float) -> Cycle:
    out = subprocess.run([sys.executable, __file__, json.dumps({**job, "due": due})], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"peer reload failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return Cycle(**json.loads(out.stdout.strip().splitlines()[-1]))


def reload_loop(job: dict[str, Any], interval: float, start: float, stop_after: Callable[[], float | None],
                spark: Any = None, log: Callable[[str], None] = print) -> list[Cycle]:
    """Reload at start, start + interval, ... until ``stop_after()`` returns a time T (the last commit; None while
    the writer runs) and a reload whose snapshot began after T has finished. Warm when ``spark`` is given."""
    cycles: list[Cycle] = []
    due = start
    while True:
        wait = due - time.time()
        if wait > 0:
            time.sleep(wait)
        c = reload(job, due, spark) if spark is not None else reload_cold(job, due)
        cycles.append(c)
        log(f"peer reload {len(cycles)}: {c.rows} rows, read {c.read_end - c.snapshot:.1f} s, spark "
            f"{c.spark_ready - c.read_end:.1f} s, write {c.end - c.spark_ready:.1f} s")
        last = stop_after()
        if last is not None and c.snapshot > last:
            return cycles
        due = start + interval * math.ceil((c.end - start) / interval)  # the next boundary, skipping missed ones


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    job = json.loads(sys.argv[1])
    print(json.dumps(asdict(reload(job, job.pop("due")))))
