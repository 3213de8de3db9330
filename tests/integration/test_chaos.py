"""The chaos suite, short: the real main job under a logged workload and one fault of every kind (SIGKILL of the
code server, a run worker, a run's Spark JVM, the daemon, the webserver, the whole process tree; a restart of the
source), then it must converge by itself with nothing lost, doubled or corrupted (tests/chaos; the long run is
scripts/chaos.sh, docs/pipeline.md "Chaos").

The suite runs as its own process (``python -m tests.chaos``), exactly as the command runs it, with a MariaDB
instance of its own on $CANAL_TEST_EXTRA_MARIADB_PORT (else a free port) and everything else under tmp_path.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.chaos.faults import KINDS
from tests.integration.extra_mariadb import extra_port

REPO_ROOT = Path(__file__).resolve().parents[2]
MINUTES = 1.0             # workload (longer when a fault waits for its target); the faults fall inside it
RATE = 6                  # transactions per second
CONVERGE_SECONDS = 360    # bound from the last fault to every check holding (a Spark run: 1-3 min under load)
TIMEOUT_SECONDS = 720     # the whole run: setup, workload, convergence, verification, stop
STOP_SECONDS = 150        # after a SIGTERM: the main job's stop (90 s at most) and the source's


def test_chaos_short(tmp_path: Path) -> None:
    root = tmp_path / "chaos"
    cmd = [sys.executable, "-m", "tests.chaos", "--minutes", str(MINUTES), "--faults", str(len(KINDS)),
           "--seed", "7", "--rate", str(RATE), "--dir", str(root), "--instance", "chaos-ci",
           "--mariadb-port", str(extra_port()), "--converge-seconds", str(CONVERGE_SECONDS)]
    log = tmp_path / "chaos.out"
    t0 = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        rc = None
        try:
            rc = proc.wait(TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            pass
        finally:  # timed out or interrupted: SIGTERM, and the suite stops the main job and the source it started
            if proc.poll() is None:
                proc.terminate()
                proc.wait(STOP_SECONDS)
    took = time.monotonic() - t0
    text = log.read_text(errors="replace")[-8000:]
    assert rc is not None, f"chaos run still going after {TIMEOUT_SECONDS} s, stopped:\n{text}"
    assert rc == 0, f"chaos run failed (exit {rc}, {took:.0f} s):\n{text}"
    report = json.loads((root / "report.json").read_text())
    assert report["passed"] and report["verdicts"] == [], text
    # every kind was injected, and the run exercised the checks on real row changes
    assert set(report["by_kind"]) == {k.value for k in KINDS}, text
    assert report["changelog"]["expected"] > 300 and report["changelog"]["stored"] == report["changelog"]["expected"]
    assert report["lost"] == report["duplicated"] == report["mismatched"] == 0
    assert report["sensor"]["stopped"] == [] and report["unexpected_exits"] == []
    assert report["converged_after_fault"] is not None and report["converged_after_fault"] <= CONVERGE_SECONDS
