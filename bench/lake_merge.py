"""bench/lake_merge: one window's mirror MERGE, deletion vectors (ours, `lake.deletion_vectors: true`) vs Delta's
default copy-on-write MERGE, through pipelines.engine.lake.apply_mirror in one local Spark JVM.

    .venv/bin/python bench/lake_merge.py [--table-rows 1700000] [--window-rows 450000] [--windows 2] [--pairs 2]

Each variant loads a fresh mirror of --table-rows rows (one staged window of inserts), then applies --windows
windows of --window-rows changes each: 60% inserts of new ids, 25% updates of random live ids, 15% deletes of
the oldest ids (bench/pipeline_workload's mix), staged per pipelines.engine.window's contract (typed Parquet parts).
Variants alternate --pairs times in one JVM after a small warm-up, so JIT warm-up and the machine's other load
fall on both; the figure is the Spark JVM's CPU time (utime + stime from /proc) per window, with wall time and
Delta's rows-copied metric beside it. The mirror rows of both variants are compared at the end.

    .venv/bin/python bench/lake_merge.py --split-inserts [--table-rows ... --window-rows ... --pairs P]

compares instead, both with deletion vectors: the one MERGE of every change (ours) vs the window's inserts of new
ids appended (one commit, the staged rows projected to the mirror's columns) and only the updates and deletes
MERGEd: what a mirror step could do for keys whose first change in the window is an INSERT.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import statistics
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BINLOG = "mysql-bin.000001"
T0 = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.UTC)
MIX = (0.60, 0.25)  # inserts, updates; the rest deletes


def _columns() -> list[tuple[str, Any, bool]]:
    """bench/pipeline_workload's table as staging types it (docs/type-mapping.md)."""
    import pyarrow as pa

    return [("id", pa.int64(), True), ("qty", pa.int64(), False), ("price", pa.decimal128(12, 2), False),
            ("amount", pa.decimal128(20, 6), False), ("ratio", pa.float64(), False),
            ("created", pa.timestamp("us"), False), ("updated", pa.timestamp("us", tz="UTC"), False),
            ("day", pa.date32(), False), ("name", pa.string(), False), ("note", pa.string(), False),
            ("doc", pa.string(), False), ("state", pa.string(), False), ("flag", pa.int8(), False),
            ("payload", pa.binary(), False)]


def _part(ids: Any, ops: list[str], offset: int) -> Any:
    """A staged part: ten row changes per rows event, events 300 bytes apart from ``offset``; the values are
    derived from the id as bench/pipeline_workload's generator derives them."""
    import hashlib

    import numpy as np
    import pyarrow as pa

    from pipelines.engine.window import order_key

    n = len(ids)
    base = order_key(BINLOG, 0)
    pos = base + offset + np.arange(n, dtype=np.int64) // 10 * 300
    day0, ts0 = dt.date(2026, 1, 1), dt.datetime(2026, 1, 1)
    md5 = [hashlib.md5(str(int(i)).encode()) for i in ids]
    cols = dict(zip([c for c, _, _ in _columns()], [
        ids, ids % 1000, [Decimal(int(i) % 100000).scaleb(-2) for i in ids],
        [(Decimal(int(i)) * Decimal("1.000001")).quantize(Decimal("0.000001")) for i in ids], ids / 7.0,
        [ts0 + dt.timedelta(seconds=int(i), microseconds=int(i) % 999999) for i in ids],
        [T0 + dt.timedelta(seconds=int(i)) for i in ids], [day0 + dt.timedelta(days=int(i) % 3000) for i in ids],
        [f"name-{i}-é" for i in ids], [m.hexdigest() * 2 for m in md5],
        [f'{{"id": {i}, "tags": ["a", "b", {i % 7}], "price": {i % 1000 / 10}}}' for i in ids],
        [("new", "paid", "shipped", "done")[int(i) % 4] for i in ids], ids % 2, [m.digest() for m in md5],
    ], strict=True))
    return pa.table({
        "_canal_op": pa.array(ops, pa.string()), "_canal_pos": pa.array(pos),
        "_canal_row": pa.array(np.arange(n) % 10, pa.int32()), "_canal_sub": pa.array(np.zeros(n, np.int8)),
        "_canal_ts": pa.array([T0] * n, pa.timestamp("us", tz="UTC")),
        **{c: pa.array(cols[c], t) for c, t, _ in _columns()},
    })


def _stage(root: Path, window: int, part: Any) -> tuple[Path, Any]:
    import pyarrow.parquet as pq

    from pipelines.engine.window import ColumnSpec, Position, TableChanges, TablePart, WindowManifest, split_key

    d = root / f"w{window:012d}-a0"
    (d / "tables" / "bench.t").mkdir(parents=True)
    rel = "tables/bench.t/000.parquet"
    pq.write_table(part, d / rel)
    pos = part.column("_canal_pos").to_numpy()
    lo, hi = int(pos.min()), int(pos.max())
    tc = TableChanges("bench", "t", [TablePart(rel, part.num_rows, lo, hi,
                                               [ColumnSpec(c, "x", key) for c, _, key in _columns()])])
    m = WindowManifest("bench", window, 0, [window], Position(BINLOG, split_key(lo)[1]),
                       Position(BINLOG, split_key(hi)[1]), rows=part.num_rows, changelog=None, tables=[tc], ddl=[])
    (d / "manifest.json").write_text(m.to_json())
    return d, m


class Jvm:
    def __init__(self, spark: Any) -> None:
        self.pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())

    def cpu(self) -> float:
        from cpu_account import process_cpu  # bench/ is on sys.path when run as a script

        return process_cpu(self.pid)


def _split(root: Path, window: int, part: Any) -> tuple[tuple[Path, Any], tuple[Path, Any]]:
    """The window's inserts and the rest of its changes, each staged as a window of its own."""
    import pyarrow.compute as pc

    is_insert = pc.equal(part["_canal_op"], "INSERT")
    return (_stage(root / "s-inserts", window, part.filter(is_insert)),
            _stage(root / "s-rest", window, part.filter(pc.invert(is_insert))))


def _append_then_merge(spark: Any, lake: Any, window: int, inserts: tuple[Path, Any], rest: tuple[Path, Any]) -> Any:
    """The staged inserts appended in one commit, then apply_mirror of the rest; its MirrorResult."""
    from pipelines.engine import lake as L
    from pipelines.engine.lake.delta_sql import _read_staged, _txn
    from pipelines.engine.lake.mirror import _project

    path = lake.mirror_path("bench", "t")
    struct = spark.read.format("delta").load(path).schema
    d, m = inserts
    rows = _project(_read_staged(spark, str(d / m.tables[0].parts[0].file)), struct).drop("_canal_op")
    with _txn(spark, "bench-append", window, "bench:append"):
        rows.write.format("delta").mode("append").save(path)
    d, m = rest
    return L.apply_mirror(spark, lake, d, m, m.tables[0])


def run_variant(spark: Any, jvm: Jvm, root: Path, label: str, dv: bool, split: bool, table_rows: int,
                window_rows: int, windows: int, seed: int) -> list[dict[str, float]]:
    import numpy as np

    from pipelines.engine import lake as L

    shutil.rmtree(root, ignore_errors=True)
    lake = L.Lake(str(root / "lake"), deletion_vectors=dv)
    offset = 1000
    d, m = _stage(root / "s", 1, _part(np.arange(1, table_rows + 1), ["INSERT"] * table_rows, offset))
    L.apply_mirror(spark, lake, d, m, m.tables[0])
    offset += table_rows * 30 + 1000
    rng = np.random.default_rng(seed)
    nxt, oldest, out = table_rows + 1, 1, []
    path = lake.mirror_path("bench", "t")
    for w in range(windows):
        ins, upd = round(window_rows * MIX[0]), round(window_rows * MIX[1])
        dele = window_rows - ins - upd
        live = np.arange(oldest + dele, nxt)
        ids = np.concatenate([np.arange(nxt, nxt + ins), rng.choice(live, upd, replace=False),
                              np.arange(oldest, oldest + dele)])
        nxt, oldest = nxt + ins, oldest + dele
        part = _part(ids, ["INSERT"] * ins + ["UPDATE"] * upd + ["DELETE"] * dele, offset)
        offset += window_rows * 30 + 1000
        if split:
            inserts, rest = _split(root, 2 + w, part)
            t0, c0 = time.monotonic(), jvm.cpu()
            res = _append_then_merge(spark, lake, 2 + w, inserts, rest)
        else:
            d, m = _stage(root / "s", 2 + w, part)
            t0, c0 = time.monotonic(), jvm.cpu()
            res = L.apply_mirror(spark, lake, d, m, m.tables[0])
        wall, cpu = time.monotonic() - t0, jvm.cpu() - c0
        metrics = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()["operationMetrics"]
        if (res.inserted + (ins if split else 0), res.updated, res.deleted) != (ins, upd, dele):
            raise SystemExit(f"window {w}: applied +{res.inserted} ~{res.updated} -{res.deleted}, "
                             f"expected +{ins} ~{upd} -{dele}")
        out.append({"cpu": cpu, "wall": wall, "copied": int(metrics["numTargetRowsCopied"])})
        print(f"  {label} window {w}: cpu {cpu:5.1f} s  wall {wall:5.1f} s  "
              f"rows copied {out[-1]['copied']:,}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table-rows", type=int, default=1_700_000)
    ap.add_argument("--window-rows", type=int, default=450_000)
    ap.add_argument("--windows", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--split-inserts", action="store_true",
                    help="ours vs the inserts appended and only the updates and deletes MERGEd (both deletion vectors)")
    ap.add_argument("--materialize", default=None, help="spark.databricks.delta.merge.materializeSource for both "
                    "variants (default: what pipelines.engine.lake sets)")
    args = ap.parse_args()
    if args.materialize:
        from pipelines.engine import lake as L

        L.MERGE_SOURCE_MATERIALIZE = args.materialize

    from pipelines.engine.sparkenv import quiet_delta_scan_noise, spark_session_builder

    spark = spark_session_builder("bench-lake-merge", "local[2]").getOrCreate()
    quiet_delta_scan_noise(spark)
    jvm = Jvm(spark)
    work = Path(tempfile.mkdtemp(prefix="bench-lake-merge-"))
    try:
        # name -> (deletion vectors, inserts appended); the first is ours
        variants = {"merge": (True, False), "split": (True, True)} if args.split_inserts else \
            {"deletion_vectors": (True, False), "copy_on_write": (False, False)}
        names = list(variants)
        print("warm-up (both variants, 200k rows, 50k changes)", flush=True)
        for name in names:
            run_variant(spark, jvm, work / "warm", name, *variants[name], 200_000, 50_000, 1, 0)
        results: dict[str, list[dict[str, float]]] = {name: [] for name in names}
        for pair in range(args.pairs):
            for name in (names if pair % 2 == 0 else names[::-1]):   # alternate who goes first
                results[name] += run_variant(spark, jvm, work / name, name, *variants[name], args.table_rows,
                                             args.window_rows, args.windows, pair)
        # same seeds, same changes: the last pair's mirrors must hold the same rows
        hashed = ("count(*) AS n", "sum(CAST(xxhash64(*) AS DECIMAL(38,0))) AS h")
        fp = {name: spark.read.format("delta").load(str(work / name / "lake/mirror/bench/t"))
              .selectExpr(*hashed).first() for name in names}
        same = tuple(fp[names[0]]) == tuple(fp[names[1]])
        summary = {}
        for name, rs in results.items():
            cpu = statistics.mean(r["cpu"] for r in rs)
            summary[name] = {
                "cpu_s_mean": round(cpu, 1), "cpu_s": [round(r["cpu"], 1) for r in rs],
                "wall_s_mean": round(statistics.mean(r["wall"] for r in rs), 1),
                "wall_s": [round(r["wall"], 1) for r in rs],
                "us_per_change": round(cpu / args.window_rows * 1e6, 1),
                "rows_copied_mean": round(statistics.mean(r["copied"] for r in rs))}
        ratio = summary[names[1]]["cpu_s_mean"] / summary[names[0]]["cpu_s_mean"]
        from pipelines.engine import lake as L

        print(json.dumps({"table_rows": args.table_rows, "window_rows": args.window_rows,
                          "materialize_source": L.MERGE_SOURCE_MATERIALIZE, **summary,
                          f"{names[1]}_over_{names[0]}_cpu": round(ratio, 2), "same_rows": same}, indent=2))
        if not same:
            raise SystemExit(f"the two mirrors differ: {fp}")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
