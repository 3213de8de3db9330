"""A server process for test_memory_bound: the instance of conf dir argv[1] with a slow consumer that takes
batches with getWithoutAck and acks them, until argv[2] rows have arrived; then prints a JSON line with the
rows, the peak RSS and how long the parser was blocked by the full store."""

from __future__ import annotations

import json
import sys
import time

from canal_core.protocol.identity import ClientIdentity
from canal_core.server.controller import CanalController


def _status_kb(field: str) -> int:
    # VmHWM/VmRSS belong to this process's address space; getrusage's ru_maxrss survives execve and so would
    # start at the forking parent's peak (pytest's)
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def main() -> None:
    conf, want = sys.argv[1], int(sys.argv[2])
    ctl = CanalController(conf)
    ctl.start()
    client = ClientIdentity("example", 1001, "")
    ctl.server.subscribe(client)
    baseline_kb = _status_kb("VmHWM")
    print("READY", flush=True)
    dest = ctl.server._destinations["example"]
    rows = 0
    deadline = time.monotonic() + 900
    while rows < want and time.monotonic() < deadline:
        msg = ctl.server.get_without_ack(client, 64, 0.5)
        if msg.empty:
            continue
        rows += sum(ev.rows for ev in msg.events if ev.entry_type == 2)
        time.sleep(0.002)  # a consumer slower than the parser: the store fills and blocks it
        ctl.server.ack(client, msg.batch_id)
    stats = dest.store.stats()
    peak_kb = _status_kb("VmHWM")
    print(json.dumps({"rows": rows, "peak_rss_mb": peak_kb / 1024, "baseline_rss_mb": baseline_kb / 1024,
                      "blocking_s": stats.blocking_time,
                      "parser_error": str(dest.parser.last_error) if dest.parser.last_error else None}),
          flush=True)
    ctl.stop()


if __name__ == "__main__":
    main()
