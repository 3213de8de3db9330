"""bench/snapshot_chunks: a large table's initial load, in chunks (pipelines.engine.chunked_snapshot, ours for tables at
least snapshot.chunked_above_rows large) by one reader and by --readers reader processes, vs the whole-table
consistent snapshot (pipelines.engine.snapshot + lake.write_snapshot, the path small tables keep), side by side in
one run on the private MariaDB and one local Spark.

    .venv/bin/python bench/snapshot_chunks.py [--rows 20000000] [--chunk-rows 500000] [--readers 2] [--port 3407]

The table (BIGINT key, five columns) is made once in schema canal_bench_snap with MariaDB's sequence engine and kept
for later runs of the same size. Each path loads it into a fresh mirror; per path: wall time, rows per second, CPU
per row of this process and its reader processes (the readers), the Spark JVM and this checkout's mariadbd (from
/proc), and the longest read-only transaction the source held, sampled from information_schema.innodb_trx every
0.15 s by the server's clock (whole seconds). The three mirrors are compared at the end (row count and an
order-independent fingerprint). Run it on an
otherwise idle machine: the CPU figures are per process, the wall times are not.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cpu_account import process_cpu  # noqa: E402

SCHEMA, TABLE = "canal_bench_snap", "big"


def _conn_kwargs(port: int, admin: bool = False) -> dict[str, Any]:
    user = "canal_admin" if admin else "canal"
    return {"host": "127.0.0.1", "port": port, "user": user, "password": user, "connect_timeout": 5}


def make_table(port: int, rows: int) -> None:
    import pymysql

    conn = pymysql.connect(**_conn_kwargs(port, admin=True), autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {SCHEMA}")
            cur.execute(f"SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{SCHEMA}' "
                        f"AND TABLE_NAME = '{TABLE}'")
            if cur.fetchone()[0]:
                cur.execute(f"SELECT COUNT(*) FROM {SCHEMA}.{TABLE}")
                if cur.fetchone()[0] == rows:
                    return
                cur.execute(f"DROP TABLE {SCHEMA}.{TABLE}")
            cur.execute(f"CREATE TABLE {SCHEMA}.{TABLE} (id BIGINT PRIMARY KEY, grp INT NOT NULL, name VARCHAR(40), "
                        "amount DECIMAL(12,2), created DATETIME)")
            step = 1_000_000
            for lo in range(1, rows + 1, step):
                hi = min(rows, lo + step - 1)
                cur.execute(f"INSERT INTO {SCHEMA}.{TABLE} SELECT seq, seq % 97, CONCAT('row ', seq), seq / 100, "
                            f"'2026-01-01' + INTERVAL (seq % 86400) SECOND FROM {SCHEMA}.seq_{lo}_to_{hi}")
                print(f"  table: {hi} rows", flush=True)
            cur.execute(f"ANALYZE TABLE {SCHEMA}.{TABLE}")
    finally:
        conn.close()


class TrxSampler(threading.Thread):
    def __init__(self, port: int) -> None:
        import pymysql

        super().__init__(daemon=True)
        self.conn = pymysql.connect(**_conn_kwargs(port, admin=True), autocommit=True)
        self.done = threading.Event()
        self.longest = 0

    def run(self) -> None:
        with self.conn.cursor() as cur:
            while not self.done.is_set():
                cur.execute("SELECT NOW(), trx_started, trx_is_read_only FROM information_schema.innodb_trx")
                for now, started, read_only in cur.fetchall():
                    if read_only:
                        self.longest = max(self.longest, int((now - started).total_seconds()))
                time.sleep(0.15)   # InnoDB refreshes the table only when nobody read it for 100 ms
        self.conn.close()


def _mariadbd_pid() -> int:
    mine = f"{ROOT}/.runtime/mariadb/primary/".encode()   # not another checkout's instance on the machine
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes()
                if b"mariadbd" in cmd and mine in cmd:
                    return int(d.name)
            except OSError:
                continue
    raise SystemExit("no private MariaDB (primary) running: scripts/mariadb.sh start primary")


def _measure(name: str, fn: Any, jvm: int, db: int, port: int, rows: int) -> dict[str, Any]:
    sampler = TrxSampler(port)
    sampler.start()
    # this process and its children that ended (the reader processes end with each load; the Spark JVM lives on)
    def mine() -> float:
        return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                     resource.getrusage(resource.RUSAGE_CHILDREN)))

    me0, jvm0, db0 = mine(), process_cpu(jvm), process_cpu(db)
    t0 = time.monotonic()
    fn()
    wall = time.monotonic() - t0
    me1, jvm1, db1 = mine(), process_cpu(jvm), process_cpu(db)
    sampler.done.set()
    sampler.join()
    reader = me1 - me0
    per_row = {"reader_us_per_row": reader / rows * 1e6, "jvm_us_per_row": (jvm1 - jvm0) / rows * 1e6,
               "mariadb_us_per_row": (db1 - db0) / rows * 1e6}
    out: dict[str, Any] = {"path": name, "wall_s": wall, "rows_per_s": rows / wall, **per_row,
                           "total_us_per_row": sum(per_row.values()), "longest_trx_s": sampler.longest}
    print(f"{name:>20}: {wall:8.1f} s  {out['rows_per_s']:9.0f} rows/s  CPU/row: reader {out['reader_us_per_row']:.2f}"
          f" us, Spark {out['jvm_us_per_row']:.2f} us, MariaDB {out['mariadb_us_per_row']:.2f} us, total "
          f"{out['total_us_per_row']:.2f} us; longest source transaction {sampler.longest} s", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--chunk-rows", type=int, default=500_000)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--port", type=int, default=int(os.environ.get("PRIVATE_MARIADB_PORT") or 3407))
    args = ap.parse_args()

    from pipelines.engine import lake as L
    from pipelines.engine.chunked_snapshot import load_in_chunks
    from pipelines.engine.reconcile import dataframe_fingerprint, table_columns
    from pipelines.engine.snapshot import take_snapshot
    from pipelines.engine.sparkenv import spark_session_builder

    print(f"table {SCHEMA}.{TABLE}: {args.rows} rows", flush=True)
    make_table(args.port, args.rows)
    db = _mariadbd_pid()
    spark = spark_session_builder("bench-snapshot", "local[2]").getOrCreate()
    gateway = spark.sparkContext._jvm
    assert gateway is not None
    jvm = int(gateway.java.lang.ProcessHandle.current().pid())
    kw = _conn_kwargs(args.port)
    tmp = Path(tempfile.mkdtemp(prefix="bench-snap-"))
    try:
        whole, one, many = (L.Lake(str(tmp / d)) for d in ("whole", "one", "many"))
        spark.range(1000).selectExpr("sum(id)").collect()   # the JVM started before either path

        def whole_table() -> None:
            snap = take_snapshot(kw, SCHEMA, TABLE, tmp / "parts")
            L.write_snapshot(spark, whole, SCHEMA, TABLE, snap.path, snap.position_key)
            shutil.rmtree(tmp / "parts", ignore_errors=True)

        def in_chunks(lake: Any, readers: int) -> Any:
            return lambda: load_in_chunks(spark, lake, kw, SCHEMA, TABLE, tmp / "chunks", chunk_rows=args.chunk_rows,
                                          readers=readers)

        results = [_measure("whole table", whole_table, jvm, db, args.port, args.rows),
                   _measure("in chunks, 1 reader", in_chunks(one, 1), jvm, db, args.port, args.rows),
                   _measure(f"in chunks, {args.readers} readers", in_chunks(many, args.readers), jvm, db, args.port,
                            args.rows)]
        cols = table_columns(kw, SCHEMA, TABLE)
        a, b, c = (dataframe_fingerprint(spark.read.format("delta").load(lk.mirror_path(SCHEMA, TABLE)), cols)
                   for lk in (whole, one, many))
        assert (a.count, a.checksum) == (b.count, b.checksum) == (c.count, c.checksum) and a.count == args.rows, \
            (a, b, c)
        w = results[0]
        print(f"mirrors equal ({a.count} rows). Against the whole table (chunks of {args.chunk_rows} rows):")
        for r in results[1:]:
            print(f"  {r['path']:>20}: throughput {r['rows_per_s'] / w['rows_per_s']:.2f}x, CPU per row "
                  f"{r['total_us_per_row'] / w['total_us_per_row']:.2f}x; longest source transaction "
                  f"{r['longest_trx_s']} s vs {w['longest_trx_s']} s", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
