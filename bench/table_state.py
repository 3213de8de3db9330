"""bench/table_state: a Delta table's state (version, txn versions, properties) read from its log files by this
process (ours, pipelines.engine.lake.delta_log) vs Delta's own snapshot through py4j (``DeltaLog.forTableWithSnapshot``,
what a classic session read before), on one mirror-like table in one local Spark JVM.

    .venv/bin/python bench/table_state.py [--commits 30] [--rows 2000]

The table has the mirrors' properties (column mapping, deletion vectors). Each commit is a MERGE of --rows changes
(half updates of existing ids, half new ids) recording a txn version, as a window's mirror commit does; after each
commit both readers read the new version once, alternating which goes first, and must agree (version, every
txn, the properties). Delta checkpoints every 10 commits, so the log-file reader crosses checkpoints. Printed:
median wall per read and the Spark JVM's CPU (utime + stime from /proc) per read of each, and the ratio.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cpu_account import process_cpu  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=30)
    ap.add_argument("--rows", type=int, default=2000)
    args = ap.parse_args()

    from pipelines.engine.lake import delta_log
    from pipelines.engine.lake.delta_sql import _txn
    from pipelines.engine.lake.layout import DELETION_VECTORS, MIRROR_PROPERTIES
    from pipelines.engine.sparkenv import spark_session_builder

    spark = spark_session_builder("bench-table-state").getOrCreate()
    jvm: Any = spark._jvm
    pid = int(jvm.java.lang.ProcessHandle.current().pid())
    root = Path(tempfile.mkdtemp(prefix="bench-table-state-"))
    path = str(root / "t")
    props = ", ".join(f"'{k}' = '{v}'" for k, v in {**MIRROR_PROPERTIES, **DELETION_VECTORS}.items())
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT, v STRING, p BIGINT) USING delta TBLPROPERTIES ({props})")
    app = "canal:mirror:bench.t"
    cost: dict[str, list[tuple[float, float]]] = {"log files (ours)": [], "Delta snapshot (py4j)": []}
    try:
        for i in range(1, args.commits + 1):
            lo = (i - 1) * args.rows // 2
            spark.range(lo, lo + args.rows).selectExpr("id", "uuid() AS v", f"{i} AS p").createOrReplaceTempView("s")
            with _txn(spark, app, i, f"bench:{i}"):   # as a window's mirror commit records its txn
                spark.sql(f"MERGE INTO delta.`{path}` t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET * "
                          "WHEN NOT MATCHED THEN INSERT *").collect()
            readers = [("log files (ours)", lambda: delta_log._read_local_log(f"{path}/_delta_log")),
                       ("Delta snapshot (py4j)", lambda: delta_log._jvm_snapshot(spark, path))]
            got = {}
            for name, read in (readers if i % 2 else readers[::-1]):
                c0, t0 = process_cpu(pid), time.perf_counter()
                got[name] = read()
                cost[name].append((time.perf_counter() - t0, process_cpu(pid) - c0))
            a, b = got.values()
            assert a is not None and a == b and a.txns[app] == i, (i, a, b)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"{args.commits} commits of {args.rows} row changes; one read of each after every commit (equal answers)")
    med = {n: (statistics.median(w for w, _ in c), statistics.median(j for _, j in c)) for n, c in cost.items()}
    for n, (w, j) in med.items():
        print(f"  {n:24s} median {w * 1000:8.1f} ms wall, {j * 1000:8.1f} ms Spark JVM CPU per read")
    (ow, _), (pw, pj) = med.values()
    print(f"  ratio (Delta snapshot / ours, wall): {pw / ow:.0f}x; the JVM CPU ours saves per read: {pj * 1000:.0f} ms")


if __name__ == "__main__":
    main()
