"""bench/decode: binlog decoding speed, canal_core vs python-mysql-replication, on one live stream.

    .venv/bin/python bench/decode.py [--rows 150000] [--reuse]

Builds a reference workload on the private MariaDB (scripts/setup.sh starts it) in a binlog file of
its own: inserts, updates and deletes over 14 columns (BIGINT, INT UNSIGNED, DECIMAL x2, DOUBLE,
DATETIME(6), TIMESTAMP(6), DATE, VARCHAR, TEXT, JSON, ENUM, TINYINT, BLOB). Then each decoder streams
that same range from the server over replication in a CPython process of its own, producing full
Python values for every row, and the figures are printed side by side with the ratio. `mariadb-binlog
-v` decoding the same file from disk is timed as the native reference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HOST = os.environ.get("CANAL_TEST_MYSQL_HOST", "127.0.0.1")


def _port() -> int:
    if "CANAL_TEST_MYSQL_PORT" in os.environ:
        return int(os.environ["CANAL_TEST_MYSQL_PORT"])
    out = subprocess.run([str(ROOT / "scripts" / "mariadb.sh"), "port"], capture_output=True, text=True)
    return int(out.stdout.strip() or 3407)


PORT = _port()
ADMIN = {"host": HOST, "port": PORT, "user": "canal_admin", "password": "canal_admin"}
REPL = {"host": HOST, "port": PORT, "user": "canal", "password": "canal"}
STATE = ROOT / ".runtime" / "bench-decode.json"


def build_workload(nrows: int) -> dict:
    import pymysql

    c = pymysql.connect(**ADMIN, autocommit=True)
    cur = c.cursor()
    cur.execute("CREATE DATABASE IF NOT EXISTS bench")
    cur.execute("DROP TABLE IF EXISTS bench.t")
    cur.execute("FLUSH BINARY LOGS")
    cur.execute("SHOW MASTER STATUS")
    start_file, start_pos = cur.fetchone()[:2]
    cur.execute("""CREATE TABLE bench.t (
        id BIGINT PRIMARY KEY, qty INT UNSIGNED, price DECIMAL(12,2), amount DECIMAL(20,6), ratio DOUBLE,
        created DATETIME(6), updated TIMESTAMP(6) NULL, day DATE, name VARCHAR(64), note TEXT, doc JSON,
        state ENUM('new','paid','shipped','done'), flag TINYINT, payload BLOB) DEFAULT CHARSET=utf8mb4""")
    batch = 5000
    for lo in range(1, nrows + 1, batch):
        hi = min(nrows, lo + batch - 1)
        cur.execute(f"""INSERT INTO bench.t SELECT seq, seq % 1000, (seq % 100000) / 100, seq * 1.000001,
            seq / 7, '2026-01-01 00:00:00' + INTERVAL seq SECOND + INTERVAL (seq % 999999) MICROSECOND,
            '2026-01-01 00:00:00' + INTERVAL seq SECOND, '2026-01-01' + INTERVAL (seq % 3000) DAY,
            CONCAT('name-', seq, '-é'), REPEAT(MD5(seq), 2),
            JSON_OBJECT('id', seq, 'tags', JSON_ARRAY('a', 'b', seq % 7), 'price', (seq % 1000) / 10),
            ELT(1 + seq % 4, 'new', 'paid', 'shipped', 'done'), seq % 2, UNHEX(MD5(seq))
            FROM bench.seq_{lo}_to_{hi}""")
    nupd = nrows * 2 // 5
    for lo in range(1, nupd + 1, batch):
        hi = min(nupd, lo + batch - 1)
        cur.execute(f"UPDATE bench.t SET qty = qty + 1, price = price * 2, state = 'done', "
                    f"doc = JSON_SET(doc, '$.price', 1.5), note = CONCAT(note, 'x') WHERE id BETWEEN {lo} AND {hi}")
    ndel = nrows // 4
    for lo in range(nrows - ndel + 1, nrows + 1, batch):
        hi = min(nrows, lo + batch - 1)
        cur.execute(f"DELETE FROM bench.t WHERE id BETWEEN {lo} AND {hi}")
    cur.execute("SHOW MASTER STATUS")
    end_file, end_pos = cur.fetchone()[:2]
    cur.execute("FLUSH BINARY LOGS")
    cur.execute("SELECT @@datadir")
    datadir = cur.fetchone()[0]
    c.close()
    state = {"start_file": start_file, "start_pos": start_pos, "end_file": end_file, "end_pos": end_pos,
             "row_changes": nrows + nupd + ndel, "datadir": datadir, "nrows": nrows}
    STATE.parent.mkdir(parents=True, exist_ok=True)
    STATE.write_text(json.dumps(state))
    return state


def run_ours(start_file: str, start_pos: int, end_file: str, end_pos: int) -> dict:
    from canal_core.binlog import BinlogDecoder
    from canal_core.binlog.events import RowsEvent
    from canal_core.mysql import ReplicationConnection

    rows = values = 0
    t0 = time.perf_counter()
    with ReplicationConnection(**REPL) as rc:
        dec = BinlogDecoder(checksum=True)
        for raw in rc.dump(start_file, start_pos, non_blocking=True):
            ev = dec.decode(raw)
            if type(ev) is RowsEvent and ev.rows is not None:
                for row in ev.rows:
                    rows += 1
                    values += len(row) if ev.kind != "update" else len(row[0]) + len(row[1])
            if dec.file == end_file and ev.log_pos >= end_pos:
                break
    return {"rows": rows, "values": values, "seconds": time.perf_counter() - t0}


def run_peer(start_file: str, start_pos: int, end_file: str, end_pos: int) -> dict:
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    rows = values = 0
    t0 = time.perf_counter()
    stream = BinLogStreamReader(connection_settings=REPL, server_id=4242, blocking=False, resume_stream=True,
                                log_file=start_file, log_pos=start_pos, end_log_pos=end_pos,
                                only_schemas=["bench"],
                                only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
                                enable_logging=False)
    for ev in stream:
        for row in ev.rows:  # decodes every value into Python objects
            rows += 1
            values += len(row.get("values") or {}) + len(row.get("before_values") or {}) \
                + len(row.get("after_values") or {})
        if stream.log_file == end_file and stream.log_pos >= end_pos:
            break
    stream.close()
    return {"rows": rows, "values": values, "seconds": time.perf_counter() - t0}


def run_native(datadir: str, start_file: str) -> dict:
    t0 = time.perf_counter()
    subprocess.run(["mariadb-binlog", "-v", "--base64-output=decode-rows", str(Path(datadir) / start_file)],
                   check=True, stdout=subprocess.DEVNULL)
    return {"seconds": time.perf_counter() - t0}


def _child(side: str, st: dict) -> dict:
    out = subprocess.run([sys.executable, __file__, "--side", side], capture_output=True, text=True,
                         env={**os.environ, "PYTHONHASHSEED": "0"})
    if out.returncode != 0:
        raise SystemExit(f"{side} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=150000, help="rows inserted (updates 40%%, deletes 25%%)")
    ap.add_argument("--reuse", action="store_true", help="reuse the workload of the last run")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--side", choices=["ours", "peer"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        st = json.loads(STATE.read_text())
        fn = run_ours if args.side == "ours" else run_peer
        print(json.dumps(fn(st["start_file"], st["start_pos"], st["end_file"], st["end_pos"])))
        return
    if args.reuse and STATE.exists():
        st = json.loads(STATE.read_text())
    else:
        t0 = time.perf_counter()
        st = build_workload(args.rows)
        print(f"workload: {st['row_changes']} row changes in {st['start_file']} "
              f"(built in {time.perf_counter() - t0:.1f} s)")
    best: dict[str, dict] = {}
    for _ in range(args.repeat):
        for side in ("ours", "peer"):
            r = _child(side, st)
            if side not in best or r["seconds"] < best[side]["seconds"]:
                best[side] = r
    native = run_native(st["datadir"], st["start_file"])
    ours, peer = best["ours"], best["peer"]
    if ours["rows"] != st["row_changes"] or peer["rows"] != st["row_changes"]:
        raise SystemExit(f"row counts differ: workload {st['row_changes']}, ours {ours['rows']}, "
                         f"peer {peer['rows']}")
    o, p = ours["rows"] / ours["seconds"], peer["rows"] / peer["seconds"]
    print(f"canal_core               : {ours['rows']} rows in {ours['seconds']:.2f} s = {o:,.0f} rows/s")
    print(f"python-mysql-replication : {peer['rows']} rows in {peer['seconds']:.2f} s = {p:,.0f} rows/s")
    print(f"mariadb-binlog -v (C)    : {st['row_changes']} rows in {native['seconds']:.2f} s = "
          f"{st['row_changes'] / native['seconds']:,.0f} rows/s")
    print(f"ratio canal_core / python-mysql-replication = {o / p:.1f}x")


if __name__ == "__main__":
    main()
