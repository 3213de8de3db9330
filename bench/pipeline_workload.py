"""bench/pipeline's source workload: bench/decode.py's 14-column table in a schema of its own, preloaded, then
driven at a fixed rate of row changes in multi-row transactions by a writer process that records each commit.

    .venv/bin/python bench/pipeline_workload.py --port 3407 --rate 20000 --seconds 180 --tx-rows 2000 \\
        --next-id 100001 --out commits.jsonl [--workload cdc]

Each transaction changes exactly --tx-rows rows, inserts first (new ids, generated server-side from MariaDB's
sequence engine so the writer itself costs little CPU), then updates, then deletes of live rows:
- ``growth`` (default): 60% inserts, 25% updates and 15% deletes of the oldest live rows (bench/decode.py's
  150k/60k/37.5k mix): the table grows fast, and the changes outnumber its rows within minutes.
- ``cdc``: 15% inserts, 70% updates and 15% deletes of live rows drawn at random over the whole table (the writer
  keeps the live ids): what most CDC sources look like, a large table of which a small share changes.
Transaction k is committed at start + k * tx_rows / rate (at once when behind). One JSON line per commit: the
transaction's GTID (@@last_gtid), the wall-clock time COMMIT returned and its row changes; a last line
{"done": ...} sums it up.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import time
from typing import Any

SCHEMA = "canal_bench"
TABLE = "t"
DDL = f"""CREATE TABLE {SCHEMA}.{TABLE} (
    id BIGINT PRIMARY KEY, qty INT UNSIGNED, price DECIMAL(12,2), amount DECIMAL(20,6), ratio DOUBLE,
    created DATETIME(6), updated TIMESTAMP(6) NULL, day DATE, name VARCHAR(64), note TEXT, doc JSON,
    state ENUM('new','paid','shipped','done'), flag TINYINT, payload BLOB) DEFAULT CHARSET=utf8mb4"""
# bench/decode.py's row generator: every type of the reference shape, values derived from the id
_SELECT = """SELECT seq, seq % 1000, (seq % 100000) / 100, seq * 1.000001, seq / 7,
    '2026-01-01 00:00:00' + INTERVAL seq SECOND + INTERVAL (seq % 999999) MICROSECOND,
    '2026-01-01 00:00:00' + INTERVAL seq SECOND, '2026-01-01' + INTERVAL (seq % 3000) DAY,
    CONCAT('name-', seq, '-é'), REPEAT(MD5(seq), 2),
    JSON_OBJECT('id', seq, 'tags', JSON_ARRAY('a', 'b', seq % 7), 'price', (seq % 1000) / 10),
    ELT(1 + seq % 4, 'new', 'paid', 'shipped', 'done'), seq % 2, UNHEX(MD5(seq))"""
# inserts, updates (the rest deletes); random: updates and deletes hit live rows anywhere in the table
WORKLOADS = {"growth": ((0.60, 0.25), False), "cdc": ((0.15, 0.70), True)}


def admin_kwargs(host: str, port: int) -> dict[str, Any]:
    return {"host": host, "port": port, "user": "canal_admin", "password": "canal_admin", "charset": "utf8mb4"}


def insert_sql(lo: int, hi: int) -> str:
    return f"INSERT INTO {SCHEMA}.{TABLE} {_SELECT} FROM {SCHEMA}.seq_{lo}_to_{hi}"


def create_table(host: str, port: int, preload: int, chunk: int = 50_000) -> None:
    """Drop and recreate the schema with the table holding ids 1..preload."""
    import pymysql

    conn = pymysql.connect(**admin_kwargs(host, port), autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
            cur.execute(f"CREATE DATABASE {SCHEMA}")
            cur.execute(DDL)
            for lo in range(1, preload + 1, chunk):
                cur.execute(insert_sql(lo, min(preload, lo + chunk - 1)))
    finally:
        conn.close()


def drop_schema(host: str, port: int) -> None:
    import pymysql

    conn = pymysql.connect(**admin_kwargs(host, port), autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
    finally:
        conn.close()


def split(n: int, workload: str = "growth") -> tuple[int, int, int]:
    mix = WORKLOADS[workload][0]
    ins, upd = round(n * mix[0]), round(n * mix[1])
    return ins, upd, n - ins - upd


_UPDATE = (f"UPDATE {SCHEMA}.{TABLE} SET qty = qty + 1, price = price * 2, state = 'done', "
           f"doc = JSON_SET(doc, '$.price', 1.5), note = CONCAT(note, 'x') WHERE ")


class LiveIds:
    """The ids of the table's live rows, for updates and deletes at random: an array with swap-removal (8 bytes
    per row: 40 MB for 5M rows), sampled without replacement per transaction."""

    def __init__(self, top: int, seed: int) -> None:
        from array import array

        self.ids = array("q", range(1, top + 1))
        self.rng = random.Random(seed)

    def add(self, lo: int, hi: int) -> None:
        self.ids.extend(range(lo, hi + 1))

    def pick(self, upd: int, dele: int) -> tuple[list[int], list[int]]:
        """``upd`` ids to update and ``dele`` other ids to delete (removed from the live set)."""
        at = self.rng.sample(range(len(self.ids)), upd + dele)
        updates, gone = [self.ids[i] for i in at[:upd]], sorted(at[upd:], reverse=True)
        deletes = [self.ids[i] for i in gone]
        for i in gone:   # highest first, so each index still points where it did
            self.ids[i] = self.ids[-1]
            self.ids.pop()
        return updates, deletes


def _in(ids: list[int]) -> str:
    return "id IN (" + ",".join(map(str, ids)) + ")"


def write(host: str, port: int, rate: float, seconds: float, tx_rows: int, next_id: int, out: Any,
          workload: str = "growth", seed: int = 7) -> dict[str, Any]:
    import pymysql

    conn = pymysql.connect(**admin_kwargs(host, port), autocommit=False)
    cur = conn.cursor()
    ins, upd, dele = split(tx_rows, workload)
    top, upd_at, del_at = next_id - 1, 0, 0   # highest id, last updated id, last deleted id
    if top < upd + dele:
        raise SystemExit(f"preload at least {upd + dele} rows: updates and deletes need live rows")
    live = LiveIds(top, seed) if WORKLOADS[workload][1] else None
    period = tx_rows / rate
    start = time.time()
    k = rows = late = 0
    while True:
        due = start + k * period
        if due >= start + seconds:
            break
        wait = due - time.time()
        if wait > 0:
            time.sleep(wait)
        elif wait < -period:
            late += 1
        cur.execute(insert_sql(top + 1, top + ins))
        n = cur.rowcount
        if live is not None:
            live.add(top + 1, top + ins)
            updates, deletes = live.pick(upd, dele)
            n += cur.execute(_UPDATE + _in(updates)) if updates else 0
            n += cur.execute(f"DELETE FROM {SCHEMA}.{TABLE} WHERE {_in(deletes)}") if deletes else 0
        else:
            upd_at = max(upd_at, del_at)   # live rows only: every statement changes exactly its count
            n += cur.execute(_UPDATE + f"id BETWEEN {upd_at + 1} AND {upd_at + upd}")
            upd_at += upd
            n += cur.execute(f"DELETE FROM {SCHEMA}.{TABLE} WHERE id BETWEEN {del_at + 1} AND {del_at + dele}")
            del_at += dele
        top += ins
        conn.commit()
        committed = time.time()
        cur.execute("SELECT @@last_gtid")
        gtid = cur.fetchone()[0]
        out.write(json.dumps({"gtid": gtid, "t": committed, "rows": n}) + "\n")
        rows += n
        k += 1
    end = time.time()
    conn.close()
    return {"done": True, "transactions": k, "rows": rows, "start": start, "end": end, "late": late,
            "rate": rows / (end - start) if end > start else 0.0, "next_id": top + 1}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rate", type=float, required=True, help="row changes per second")
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--tx-rows", type=int, required=True, help="row changes per transaction")
    ap.add_argument("--next-id", type=int, required=True, help="first id to insert (the preload is 1..next-id-1)")
    ap.add_argument("--out", required=True, help="JSON lines, one per commit")
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="growth")
    ap.add_argument("--seed", type=int, default=7, help="the random keys of --workload cdc")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with open(args.out, "w", buffering=1) as out:
        summary = write(args.host, args.port, args.rate, args.seconds, args.tx_rows, args.next_id, out,
                        args.workload, args.seed)
        out.write(json.dumps(summary) + "\n")


if __name__ == "__main__":
    main()
