"""scripts/mariadb.sh keeps an instance's port (and server_id) from its my.cnf across `restart` and stop + start,
with no MARIADB_* in the environment and under CI=true: everything configured with the instance's address finds
it again. Only a first start may pick another port under CI; finding the instance's own port taken is an error."""

from __future__ import annotations

import socket
from typing import Any

import pymysql
import pytest

from tests.integration.extra_mariadb import extra_instance
from tests.support.instances import instance_dir, script

pytestmark = pytest.mark.integration

NAME, SERVER_ID = "port-keep-it", 23


def _server_id(settings: Any) -> int:
    conn = pymysql.connect(**settings.admin_kwargs())
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@server_id, @@port")
            sid, port = cur.fetchone()
    finally:
        conn.close()
    assert port == settings.port
    return int(sid)


@pytest.mark.timeout(600)
def test_restart_and_stop_start_keep_the_instance_port(mariadb_settings: Any) -> None:
    with extra_instance(NAME, SERVER_ID, mariadb_settings) as db:
        cnf = instance_dir(NAME) / "my.cnf"
        assert f"port                        = {db.port}\n" in cnf.read_text()

        out = script("restart", NAME, env={"CI": "true"})
        assert out.returncode == 0, out.stderr
        assert script("port", NAME).stdout.strip() == str(db.port)
        assert _server_id(db) == SERVER_ID

        assert script("stop", NAME).returncode == 0
        out = script("start", NAME, env={"CI": "true"})
        assert out.returncode == 0, out.stderr
        assert _server_id(db) == SERVER_ID and script("port", NAME).stdout.strip() == str(db.port)

        # the instance's port taken by someone else while it was down: a loud error, not a silent move
        assert script("stop", NAME).returncode == 0
        with socket.socket() as squatter:
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            squatter.bind(("127.0.0.1", db.port))
            squatter.listen(1)
            for cmd in ("start", "restart"):
                out = script(cmd, NAME, env={"CI": "true"})
                assert out.returncode == 1, (cmd, out.stderr)
                assert f"port {db.port} of this instance" in out.stderr and "taken by another process" in out.stderr
                assert f"port                        = {db.port}\n" in cnf.read_text()
                assert script("status", NAME).returncode != 0
        out = script("start", NAME)
        assert out.returncode == 0, out.stderr
        assert _server_id(db) == SERVER_ID
