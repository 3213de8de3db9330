"""A chunked load's reader processes (pipelines.engine.chunked_snapshot.reader_pool) when the load's process is
killed: each reader ends within seconds, and its connection to the source with it. A pool's processes otherwise
outlive a parent killed by SIGKILL or the OOM killer, each holding a connection, waiting forever."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

# the load's process: two readers, each reports (pid, its connection's id), then both are busy when it is killed
LOAD = """
import json, sys
sys.path.insert(0, sys.argv[2])
from pipelines.engine.chunked_snapshot import reader_pool
from tests.integration.test_chunk_readers import whoami
pool = reader_pool(2, json.loads(sys.argv[1]), [], "test")
first = [pool.submit(whoami, 1.0) for _ in range(2)]
print(json.dumps([f.result() for f in first]), flush=True)
busy = [pool.submit(whoami, 120.0) for _ in range(2)]
busy[0].result()
"""


def whoami(hold: float) -> tuple[int, int]:
    """Run in a reader: its pid and its connection's id on the server, after ``hold`` seconds."""
    from pipelines.engine import chunked_snapshot as C

    time.sleep(hold)
    return os.getpid(), C._reader.conn.thread_id()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"   # an orphan that ended but nobody reaped is gone for our purpose


def test_readers_end_with_a_killed_load(mariadb_settings: Any, admin_conn: Any) -> None:
    proc = subprocess.Popen([sys.executable, "-c", LOAD, json.dumps(mariadb_settings.repl_kwargs()), str(ROOT)],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout is not None else ""
        readers = [tuple(r) for r in json.loads(line)]
    finally:
        time.sleep(0.5)   # both readers inside their 120 s "read"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    pids, conns = {p for p, _ in readers}, {c for _, c in readers}
    assert len(pids) == 2 and proc.pid not in pids, readers

    def left() -> tuple[list[int], list[int]]:
        with admin_conn.cursor() as cur:
            cur.execute("SELECT ID FROM information_schema.PROCESSLIST")
            ids = {r[0] for r in cur.fetchall()}
        return [p for p in pids if _alive(p)], sorted(conns & ids)

    deadline = time.monotonic() + 5
    while any(left()) and time.monotonic() < deadline:
        time.sleep(0.1)
    alive, open_conns = left()
    for p in alive:   # (the test's own cleanup: a failed run leaves nothing behind)
        os.kill(p, signal.SIGKILL)
    assert (alive, open_conns) == ([], []), "readers outlived the killed load (pids, connections)"
