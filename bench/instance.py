"""bench/instance: rows/s from MariaDB through parser, sink and ring store to a getWithoutAck consumer
that acks, beside python-mysql-replication's bare decoder on the same stream, in one run.

    .venv/bin/python bench/instance.py [--rows 150000] [--reuse]

Uses bench/decode.py's workload (a binlog file of its own: inserts, updates, deletes over 14 columns).
Ours: a CanalInstance configured at that file's start (journal + position), the embedded server, and a
consumer taking batches with getWithoutAck (MEMSIZE, 1 MB batches) and acking each: every entry is
converted to Canal's Entry with its text values and serialized. The peer only decodes rows to Python
values (its `event.rows`), no Entry model, no store: the comparison favours the peer.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import decode as D  # noqa: E402  (bench/decode.py: workload and the peer run)


def run_ours(st: dict) -> dict:
    from canal_core.instance.config import CanalConfig
    from canal_core.instance.instance import CanalInstance
    from canal_core.protocol.identity import ClientIdentity
    from canal_core.server.embedded import CanalServerWithEmbedded

    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp) / "conf"
        (conf / "bench").mkdir(parents=True)
        (conf / "canal.properties").write_text(f"canal.destinations = bench\ncanal.file.data.dir = {tmp}/data\n")
        (conf / "bench" / "instance.properties").write_text(
            f"canal.instance.master.address = {D.HOST}:{D.PORT}\n"
            "canal.instance.dbUsername = canal\ncanal.instance.dbPassword = canal\n"
            f"canal.instance.master.journal.name = {st['start_file']}\n"
            f"canal.instance.master.position = {st['start_pos']}\n"
            "canal.instance.filter.regex = bench\\\\..*\n")
        canal = CanalConfig.load(conf)
        inst = CanalInstance.from_config(canal, canal.instance("bench"))
        server = CanalServerWithEmbedded()
        client = ClientIdentity("bench", 1001, "")
        t0 = time.perf_counter()
        server.start(inst)
        server.subscribe(client)
        rows = 0
        try:
            while rows < st["row_changes"]:
                msg = server.get_without_ack(client, 1024, 1.0)
                if msg.empty:
                    if not inst.parser.running:
                        raise SystemExit(f"parser stopped: {inst.parser.last_error}")
                    continue
                rows += sum(ev.rows for ev in msg.events if ev.entry_type == 2)
                server.ack(client, msg.batch_id)
            elapsed = time.perf_counter() - t0
        finally:
            server.stop_all()
    return {"rows": rows, "seconds": elapsed}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=150000)
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--side", choices=["ours", "peer"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        st = json.loads(D.STATE.read_text())
        r = run_ours(st) if args.side == "ours" else D.run_peer(st["start_file"], st["start_pos"], st["end_file"],
                                                                  st["end_pos"])
        print(json.dumps(r))
        return
    st = json.loads(D.STATE.read_text()) if args.reuse and D.STATE.exists() else D.build_workload(args.rows)
    res = {}
    for side in ("ours", "peer"):
        out = subprocess.run([sys.executable, __file__, "--side", side], capture_output=True, text=True,
                             env={**os.environ, "PYTHONHASHSEED": "0"})
        if out.returncode != 0:
            raise SystemExit(f"{side} failed:\n{out.stderr[-3000:]}")
        res[side] = json.loads(out.stdout.strip().splitlines()[-1])
    o, p = res["ours"], res["peer"]
    if o["rows"] != st["row_changes"] or p["rows"] != st["row_changes"]:
        raise SystemExit(f"row counts differ: workload {st['row_changes']}, ours {o['rows']}, peer {p['rows']}")
    ro, rp = o["rows"] / o["seconds"], p["rows"] / p["seconds"]
    for label, r, rate in (("canal_core instance -> store -> getWithoutAck/ack", o, ro),
                           ("python-mysql-replication bare decoder", p, rp)):
        print(f"{label:50}: {r['rows']} rows in {r['seconds']:.2f} s = {rate:,.0f} rows/s")
    print(f"ratio = {ro / rp:.1f}x")


if __name__ == "__main__":
    main()
