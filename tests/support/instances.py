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
MARIADB_SCRIPT = str(REPO_ROOT / "scripts" / "mariadb.sh")

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")   # gw0, gw1, ... under pytest-xdist
OWN_INSTANCES = WORKER not in ("", "gw0")
_DEFAULT_IDS = {"primary": (1, 0), "secondary": (2, 1)}  # server_id, gtid_domain_id, as scripts/mariadb.sh has them
_started: list[str] = []


def instance_dir(name: str) -> Path:
    return REPO_ROOT / ".runtime" / "mariadb" / name


def script(*args: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """scripts/mariadb.sh with ``env`` over an environment without MARIADB_* settings (and without CI, which would
    let a first start move off a busy port)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MARIADB_") and k != "CI"}
    return subprocess.run([MARIADB_SCRIPT, *args], capture_output=True, text=True, env={**base, **(env or {})},
                          timeout=timeout)


def instance_name(base: str) -> str:
    """This worker's scripts/mariadb.sh instance for ``base`` (primary or secondary)."""
    return f"{base}-{WORKER}" if OWN_INSTANCES else base


def ensure_instance(base: str) -> int:
    """The port of this worker's instance ``base``. A worker with instances of its own starts a fresh one the first
    time; the shared ``secondary`` is started when it is not running; the shared ``primary`` is never started here
    (scripts/setup.sh starts it), so a missing one fails with instructions."""
    name = instance_name(base)
    if script("status", name).returncode != 0 and (OWN_INSTANCES or base != "primary"):
        if OWN_INSTANCES:
            shutil.rmtree(instance_dir(name), ignore_errors=True)
            server_id, domain = _DEFAULT_IDS[base]
            env = {"MARIADB_PORT": str(free_port()), "MARIADB_SERVER_ID": str(server_id),
                   "MARIADB_GTID_DOMAIN_ID": str(domain)}
        else:  # the shared secondary at its usual port; under CI=true a first start may move off a busy one
            env = {"CI": os.environ["CI"]} if "CI" in os.environ else {}
        out = script("start", name, env=env, timeout=300)
        if out.returncode != 0:
            pytest.fail(f"scripts/mariadb.sh start {name} failed: {out.stderr[-2000:]}", pytrace=False)
        if OWN_INSTANCES:
            _started.append(name)
    got = script("port", name)
    if got.returncode != 0 or not got.stdout.strip().isdigit():
        pytest.fail(f"private MariaDB {name} is not running ({got.stderr.strip()}): run scripts/setup.sh",
                    pytrace=False)
    return int(got.stdout.strip())


def stop_own_instances() -> None:
    """Stop and remove the instances this worker started (each run starts them fresh)."""
    while _started:
        name = _started.pop()
        script("stop", name, timeout=300)
        shutil.rmtree(instance_dir(name), ignore_errors=True)
