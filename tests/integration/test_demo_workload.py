"""The demo workload (`python -m pipelines.cli.demo workload`) across a restart of its MariaDB (scripts/mariadb.sh
restart on an instance of the test's own): it says the source is unreachable, reconnects, says when it writes
again, and goes on at its rate from there (no burst making up for the outage)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pymysql
import pytest

from pipelines.cli import demo
from tests.integration.extra_mariadb import extra_instance
from tests.support.instances import REPO_ROOT, script

pytestmark = pytest.mark.integration

NAME, SERVER_ID = "workload-restart-it", 24
RATE = 10.0
AFTER = 12.0  # seconds of writing measured after the reconnection


def _orders(settings: Any) -> int:
    conn = pymysql.connect(**settings.admin_kwargs())
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*), COALESCE(MAX(id), 0) FROM {demo.SCHEMA}.orders")
            return int(cur.fetchone()[1])
    finally:
        conn.close()


def _wait_line(log: Path, pattern: str, timeout: float, proc: subprocess.Popen[bytes]) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(pattern, log.read_text())
        if m:
            return m
        assert proc.poll() is None, f"the workload exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
        time.sleep(0.1)
    pytest.fail(f"no line matching {pattern!r} within {timeout:.0f} s:\n{log.read_text()[-3000:]}")


@pytest.mark.timeout(600)
def test_the_workload_keeps_its_rate_across_a_restart_of_its_mariadb(mariadb_settings: Any, tmp_path: Path) -> None:
    with extra_instance(NAME, SERVER_ID, mariadb_settings) as db:
        conn = pymysql.connect(**db.admin_kwargs())
        try:
            demo.create(conn, customers=20)
        finally:
            conn.close()
        log = tmp_path / "workload.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli.demo", "workload", "--port", str(db.port),
                                     "--rate", str(RATE), "--seed", "3"], cwd=REPO_ROOT, stdout=out,
                                    stderr=subprocess.STDOUT)
        try:
            first = _orders(db)
            deadline = time.monotonic() + 60
            while _orders(db) < first + 5:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.5)

            out = script("restart", NAME)
            assert out.returncode == 0, out.stderr
            before_restart = _orders(db)
            _wait_line(log, rf"source 127\.0\.0\.1:{db.port} unreachable \(", 5, proc)
            back = _wait_line(log, r"back after ([\d.]+) s: writing again at 10 transactions/s \((\d+) so far\)",
                              60, proc)
            t_back, n_back = time.monotonic(), int(back.group(2))
            time.sleep(AFTER)
            assert proc.poll() is None, log.read_text()
            assert _orders(db) > before_restart  # it writes to the restarted server
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0, log.read_text()
            t_end = time.monotonic()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        text = log.read_text()
        n_end = int(re.search(r"^done: (\d+) transactions", text, re.MULTILINE).group(1))  # type: ignore[union-attr]
        rate_after = (n_end - n_back) / (t_end - t_back)
        print(f"outage {float(back.group(1)):.1f} s; {n_end - n_back} transactions in {t_end - t_back:.1f} s after "
              f"it: {rate_after:.1f}/s (rate {RATE:g})")
        assert 0.75 * RATE <= rate_after <= 1.15 * RATE, (rate_after, text[-2000:])
