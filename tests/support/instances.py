"""Private MariaDB instances per pytest-xdist worker (scripts/test.sh runs the suite in workers).

Tests change global server settings and read the binary log from "now", so no two workers share a MariaDB: the
first worker (gw0, or a run without xdist) uses the instances scripts/setup.sh starts (`primary`, `secondary`);
worker gwN starts fresh instances `primary-gwN` and `secondary-gwN` (scripts/mariadb.sh, free ports) when a test
first needs one, and stops and removes them at its end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.net import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNTIME_DIR = REPO_ROOT / ".runtime"
MARIADB_SCRIPT = str(REPO_ROOT / "scripts" / "mariadb.sh")

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")   # gw0, gw1, ... under pytest-xdist
OWN_INSTANCES = WORKER not in ("", "gw0")
_DEFAULT_IDS = {"primary": (1, 0), "secondary": (2, 1)}  # server_id, gtid_domain_id, as scripts/mariadb.sh has them
_started: list[str] = []


def instance_name(base: str) -> str:
    """This worker's scripts/mariadb.sh instance for ``base`` (primary or secondary)."""
    return f"{base}-{WORKER}" if OWN_INSTANCES else base


def ensure_instance(base: str) -> int:
    """The port of this worker's instance ``base``. A worker with instances of its own starts a fresh one the first
    time; the shared ``secondary`` is started when it is not running; the shared ``primary`` is never started here
    (scripts/setup.sh starts it), so a missing one fails with instructions."""
    name = instance_name(base)
    running = subprocess.run([MARIADB_SCRIPT, "status", name], capture_output=True).returncode == 0
    if not running and (OWN_INSTANCES or base != "primary"):
        env = {k: v for k, v in os.environ.items() if not k.startswith("MARIADB_")}
        if OWN_INSTANCES:
            shutil.rmtree(RUNTIME_DIR / "mariadb" / name, ignore_errors=True)
            server_id, domain = _DEFAULT_IDS[base]
            env.update(MARIADB_PORT=str(free_port()), MARIADB_SERVER_ID=str(server_id),
                       MARIADB_GTID_DOMAIN_ID=str(domain), MARIADB_PORT_AUTO="1")
        out = subprocess.run([MARIADB_SCRIPT, "start", name], capture_output=True, text=True, env=env, timeout=300)
        if out.returncode != 0:
            pytest.fail(f"scripts/mariadb.sh start {name} failed: {out.stderr[-2000:]}", pytrace=False)
        if OWN_INSTANCES:
            _started.append(name)
    got = subprocess.run([MARIADB_SCRIPT, "port", name], capture_output=True, text=True)
    if got.returncode != 0 or not got.stdout.strip().isdigit():
        pytest.fail(f"private MariaDB {name} is not running ({got.stderr.strip()}): run scripts/setup.sh",
                    pytrace=False)
    return int(got.stdout.strip())




def stop_own_instances() -> None:
    """Stop and remove the instances this worker started (each run starts them fresh)."""
    while _started:
        name = _started.pop()
        subprocess.run([MARIADB_SCRIPT, "stop", name], capture_output=True, timeout=300)
        shutil.rmtree(RUNTIME_DIR / "mariadb" / name, ignore_errors=True)
