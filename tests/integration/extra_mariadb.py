"""Extra private MariaDB instances for tests that stop, restart or block their server (never the shared
``primary``): ``scripts/mariadb.sh`` with an instance name of the test's own, a fresh datadir, removed afterwards.

Port: $CANAL_TEST_EXTRA_MARIADB_PORT when set (a checkout sharing the machine keeps to its own range), else a free
port the OS hands out."""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.support.instances import instance_dir, script
from tests.support.net import free_port


def extra_port() -> int:
    return int(os.environ.get("CANAL_TEST_EXTRA_MARIADB_PORT") or free_port())


@contextmanager
def extra_instance(name: str, server_id: int, settings: Any) -> Iterator[Any]:
    """A fresh instance ``name`` started on extra_port(); yields ``settings`` (MariaDBSettings) with its port."""
    script("stop", name)
    shutil.rmtree(instance_dir(name), ignore_errors=True)
    port = extra_port()
    out = script("start", name, env={"MARIADB_PORT": str(port), "MARIADB_SERVER_ID": str(server_id)})
    if out.returncode != 0:
        pytest.fail(f"scripts/mariadb.sh start {name} on port {port} failed: {out.stderr[-2000:]}", pytrace=False)
    try:
        yield dataclasses.replace(settings, port=port)
    finally:
        script("stop", name)
        shutil.rmtree(instance_dir(name), ignore_errors=True)
