"""A consumer takes batches ahead and acks them in order; the server process is
killed with SIGKILL and restarted; over the whole run every committed row arrives at least once, in
commit order, and only batches that were not acked come again (canal.file.flush.period=0: every ack is on
disk before it returns)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.conf import source, write_conf
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

HERE = Path(__file__).resolve().parent
N1, N2 = 120, 180  # rows before the kill, rows in all


def _conf(tmp: Path, port: int) -> Path:
    return write_conf(tmp, "canal.destinations = example\ncanal.auto.scan = false\n"
                      f"canal.file.data.dir = {tmp / 'data'}\ncanal.file.flush.period = 0\n"
                      "canal.instance.memory.buffer.size = 1024\ncanal.instance.memory.batch.mode = ITEMSIZE\n",
                      {"example": source(port, "canal_test\\\\.k9_.*")})


def _start(conf: Path, log: Path, ack_delay: float = 0.0) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(HERE.parents[1]), "K9_ACK_DELAY": str(ack_delay)}
    return subprocess.Popen([sys.executable, str(HERE / "kill9_consumer.py"), str(conf), str(log)], env=env,
                            stdout=subprocess.DEVNULL, stderr=open(log.with_suffix(".err"), "ab"))


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def _wait(pred: Any, timeout: float = 30) -> None:
    wait_until(pred, timeout, step=0.05)


def _writer(admin_kwargs: dict[str, Any], ids: range) -> None:
    import pymysql

    conn = pymysql.connect(**admin_kwargs, autocommit=True)
    try:
        with conn.cursor() as cur:
            i = ids.start
            while i < ids.stop:
                n = 1 + i % 3  # transactions of 1..3 rows
                chunk = list(range(i, min(i + n, ids.stop)))
                cur.execute("INSERT INTO canal_test.k9_t VALUES " + ", ".join(f"({x})" for x in chunk))
                i += len(chunk)
                time.sleep(0.01)
    finally:
        conn.close()


def test_sigkill_and_restart_lose_nothing(mariadb_settings: Any, admin_conn: Any, tmp_path: Path) -> None:
    with admin_conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS canal_test.k9_t")
        cur.execute("CREATE TABLE canal_test.k9_t (id INT PRIMARY KEY)")
    conf = _conf(tmp_path, mariadb_settings.port)
    log = tmp_path / "consumer.log"
    admin = mariadb_settings.admin_kwargs()
    admin.pop("autocommit", None)
    proc = _start(conf, log, ack_delay=0.15)
    try:
        _wait(lambda: any(x.startswith("START") for x in _lines(log)))
        time.sleep(0.7)  # the parser has located the current end
        writer = threading.Thread(target=_writer, args=(admin, range(1, N1 + 1)))
        writer.start()
        # kill -9 in the middle of the stream, with batches outstanding or in flight
        _wait(lambda: sum(x.startswith("ACK") for x in _lines(log)) >= 12 and _lines(log)[-1].startswith("GOT"))
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        writer.join()
        _writer(admin, range(N1 + 1, N2 + 1))  # committed while the server is down
        proc = _start(conf, log)

        def seen() -> set[int]:
            return {int(t[1:]) for x in _lines(log) if x.startswith("GOT") for t in x.split()[2:] if t[0] == "R"}

        _wait(lambda: seen() >= set(range(1, N2 + 1)), timeout=60)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        with admin_conn.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS canal_test.k9_t")
    runs: list[list[tuple[str, int, list[str]]]] = []
    for line in _lines(log):
        kind, *rest = line.split()
        if kind == "START":
            runs.append([])
        else:
            runs[-1].append((kind, int(rest[0]), rest[1:]))
    assert len(runs) == 2
    first, second = runs
    for run in runs:  # commit order within each run
        ids = [int(t[1:]) for kind, _, toks in run if kind == "GOT" for t in toks if t[0] == "R"]
        assert ids == sorted(ids) and len(ids) == len(set(ids))
    # an ack moves the cursor to the last transaction END in the batch: a row is acked when the END of its
    # transaction came in an acked batch; a batch ending inside a transaction leaves that transaction open
    acked_batches = {bid for kind, bid, _ in first if kind == "ACK"}
    acked_ids: set[int] = set()
    delivered_first: set[int] = set()
    open_rows: list[int] = []
    for kind, bid, toks in first:
        if kind != "GOT":
            continue
        for t in toks:
            if t == "B":
                open_rows = []
            elif t[0] == "R":
                open_rows.append(int(t[1:]))
                delivered_first.add(int(t[1:]))
            elif t == "E":
                if bid in acked_batches:
                    acked_ids.update(open_rows)
                open_rows = []
    again = {int(t[1:]) for kind, _, toks in second if kind == "GOT" for t in toks if t[0] == "R"} & delivered_first
    # acked transactions never come again; the unacked ones (outstanding at the kill) all do
    assert not again & acked_ids, sorted(again & acked_ids)
    assert again == delivered_first - acked_ids, (sorted(again), sorted(delivered_first - acked_ids))
    assert again  # the kill found rows outstanding
    print(f"kill -9 after {len(acked_batches)} acked batches; {len(again)} unacked rows redelivered")
