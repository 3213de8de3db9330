"""A source that stops is a failure the Dagster UI shows where users look, and it clears by itself: a real
webserver and daemon (the canal sensor evaluating every 5 s, launching real runs), a private MariaDB of the
test's own, and Debian's headless Chromium driven by Playwright. Screenshots are kept under .runtime/artifacts/.

1. Healthy: the sensor page's latest tick is not failed; the mirror's ``lag`` check passes.
2. The source's MariaDB stopped: the sensor page shows the failed tick and, in its error, "CANNOT READ THE
   SOURCE" with the connection error; the mirror's page shows the ``lag`` check failed with the same cause.
3. The source started again: within two ticks the sensor's ticks are no longer failures and the ``lag`` check
   passes again; the changes written before the stop are in the mirror.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest
from playwright.sync_api import Page, sync_playwright

from pipelines.config import REPO_ROOT
from tests.integration.test_dagster_ui import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    Webserver,
    _stop,
    _wait_until_serving,
)

pytestmark = pytest.mark.integration

SCHEMA = "canal_uifail"
DEST = "uifail"
INSTANCE = "uifail"          # a private MariaDB of this test's own (scripts/mariadb.sh), stopped and started by it
MARIADB_SH = REPO_ROOT / "scripts" / "mariadb.sh"
INTERVAL = 5                 # sensor.interval_seconds
LOCATION = "pipelines.definitions"
TICK_QUERY = """query($name: String!) { sensorOrError(sensorSelector: {repositoryName: "__repository__",
  repositoryLocationName: "%s", sensorName: $name}) { __typename ... on Sensor { sensorState { status
  ticks(limit: 3) { status timestamp error { message } skipReason } } } ... on PythonError { message } } }"""
CHECK_QUERY = """query($path: [String!]!) { assetCheckExecutions(assetKey: {path: $path}, checkName: "lag", limit: 1) {
  status evaluation { success severity description } } }"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _mariadb(cmd: str, port: int | None = None) -> None:
    env = {**os.environ, "MARIADB_SERVER_ID": "71", **({"MARIADB_PORT": str(port)} if port else {})}
    out = subprocess.run([str(MARIADB_SH), cmd, INSTANCE], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, f"scripts/mariadb.sh {cmd} {INSTANCE}: {out.stderr}"


@pytest.fixture(scope="module")
def source() -> Iterator[int]:
    """The test's own MariaDB (on a free port), with the demo-like table; stopped (not removed) at the end."""
    port = _free_port()
    _mariadb("start", port)
    port = int(subprocess.run([str(MARIADB_SH), "port", INSTANCE], cwd=REPO_ROOT, capture_output=True, text=True,
                              check=True).stdout.strip())
    conn = pymysql.connect(host="127.0.0.1", port=port, user="canal_admin", password="canal_admin", autocommit=True)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
        cur.execute(f"CREATE DATABASE {SCHEMA}")
        cur.execute(f"CREATE TABLE {SCHEMA}.items (id INT PRIMARY KEY, name VARCHAR(32))")
        cur.executemany(f"INSERT INTO {SCHEMA}.items VALUES (%s, %s)", [(i, f"item {i}") for i in range(20)])
    conn.close()
    try:
        yield port
    finally:
        _mariadb("stop")


@pytest.fixture(scope="module")
def dagster(tmp_path_factory: pytest.TempPathFactory, source: int) -> Iterator[Webserver]:
    root = tmp_path_factory.mktemp("ui_failure")
    conf = root / "conf"
    (conf / DEST).mkdir(parents=True)
    (conf / "canal.properties").write_text(f"canal.destinations = {DEST}\ncanal.file.flush.period = 0\n")
    (conf / DEST / "instance.properties").write_text(
        f"canal.instance.mysql.slaveId = {random.randint(1 << 20, (1 << 31) - 1)}\n"
        f"canal.instance.master.address = 127.0.0.1:{source}\n"
        "canal.instance.dbUsername = canal\ncanal.instance.dbPassword = canal\n"
        f"canal.instance.filter.regex = {SCHEMA}\\\\..*\n")
    (root / "pipeline.yaml").write_text(
        f"destination: {DEST}\ncanal: {{conf_dir: {conf}}}\n"
        f"paths: {{staging: {root / 'staging'}, state: {root / 'state'}}}\nlake: {{root: {root / 'lake'}}}\n"
        f"sensor: {{interval_seconds: {INTERVAL}, backoff_seconds: 1, backoff_max_seconds: 5, "
        "reconcile_interval_seconds: 0}\nspark: {master: 'local[1]'}\n")
    home = root / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(
        f"storage:\n  sqlite:\n    base_dir: {home / 'storage'}\ntelemetry:\n  enabled: false\nnux:\n  enabled: false\n"
        "run_coordinator:\n  module: dagster._core.run_coordinator\n  class: QueuedRunCoordinator\n"
        "  config:\n    dequeue_interval_seconds: 1\nsensors:\n  use_threads: true\n")
    env = {**os.environ, "CANAL_PIPELINE_CONF": str(root / "pipeline.yaml"), "DAGSTER_HOME": str(home),
           "DAGSTER_DISABLE_TELEMETRY": "yes"}
    bin_dir = REPO_ROOT / ".venv" / "bin"
    port = _free_port()
    procs: list[subprocess.Popen[bytes]] = []
    with (root / "webserver.log").open("wb") as wlog, (root / "daemon.log").open("wb") as dlog:
        procs.append(subprocess.Popen([str(bin_dir / "dagster-webserver"), "-w", "workspace.yaml", "-h", "127.0.0.1",
                                       "-p", str(port)], cwd=REPO_ROOT, env=env, stdout=wlog,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))
        procs.append(subprocess.Popen([str(bin_dir / "dagster-daemon"), "run", "-w", "workspace.yaml"],
                                      cwd=REPO_ROOT, env=env, stdout=dlog, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True))
    server = Webserver(f"http://127.0.0.1:{port}", procs[0], root / "webserver.log")
    try:
        _wait_until_serving(server)
        yield server
    finally:
        for p in procs:
            _stop(p)


def _ticks(server: Webserver) -> list[dict[str, Any]]:
    data = server.graphql_vars(TICK_QUERY % LOCATION, {"name": f"canal_{DEST}"})["sensorOrError"]
    assert data["__typename"] == "Sensor", data
    ticks: list[dict[str, Any]] = data["sensorState"]["ticks"]
    return ticks


def _lag(server: Webserver) -> str | None:
    """The latest lag check execution's status (SUCCEEDED, FAILED, ...), None before the first."""
    runs = server.graphql_vars(CHECK_QUERY, {"path": ["mirror", SCHEMA, "items"]})["assetCheckExecutions"]
    return runs[0]["status"] if runs else None


def _wait(what: str, fn: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(1.0)
    pytest.fail(f"{what}: not within {timeout:.0f} s (last {last!r})")


def _shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    time.sleep(1.0)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


@pytest.mark.timeout(1200)
def test_a_stopped_source_shows_on_the_sensor_and_the_mirror_and_clears(dagster: Webserver, source: int) -> None:
    sensor_url = f"{dagster.url}/locations/{LOCATION}/sensors/canal_{DEST}"
    asset_url = f"{dagster.url}/assets/mirror/{SCHEMA}/items?view=checks"

    # 1. healthy: the destination has caught up once (its snapshot loaded, a tick found no new changes)
    _wait("the first tick with no new changes",
          lambda: any("no new changes" in (t["skipReason"] or "") for t in _ticks(dagster)), 600)
    _wait("the lag check passing", lambda: _lag(dagster) == "SUCCEEDED", 120)

    assert CHROMIUM.is_file(), f"{CHROMIUM} is missing: apt-get install chromium (scripts/setup.sh does)"
    with tempfile.TemporaryDirectory(prefix="canal-ui-chromium-") as profile, sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(profile, executable_path=str(CHROMIUM), headless=True,
                                                    args=CHROMIUM_ARGS, viewport={"width": 1600, "height": 1000})
        try:
            page = ctx.new_page()
            page.set_default_timeout(60_000)
            page.goto(sensor_url, wait_until="domcontentloaded")
            page.get_by_text(f"canal_{DEST}").first.wait_for()
            _shot(page, "ui-source-healthy-sensor.png")

            # 2. the source stops
            _mariadb("stop")
            failed = _wait("a failed tick",
                           lambda: next((t for t in _ticks(dagster) if t["status"] == "FAILURE"), None),
                           6 * INTERVAL + 60)
            assert "CANNOT READ THE SOURCE" in failed["error"]["message"], failed
            _wait("the lag check failing", lambda: _lag(dagster) == "FAILED", 60)

            page.goto(sensor_url, wait_until="domcontentloaded")
            page.get_by_text("Failure").first.wait_for()
            page.get_by_text("View error").first.click()   # the tick's error, as a user opens it
            page.get_by_text("CANNOT READ THE SOURCE").first.wait_for()
            _shot(page, "ui-source-down-sensor.png")
            page.keyboard.press("Escape")

            page.goto(asset_url, wait_until="domcontentloaded")
            page.get_by_text("cannot read the source").first.wait_for()
            _shot(page, "ui-source-down-mirror.png")

            # 3. the source is back: cleared within two ticks, without anyone touching the pipeline
            _mariadb("start", source)
            back = time.monotonic()
            _wait("a tick that is not a failure", lambda: _ticks(dagster)[0]["status"] != "FAILURE" or None,
                  2 * INTERVAL + 30)
            _wait("the lag check passing again", lambda: _lag(dagster) == "SUCCEEDED", 2 * INTERVAL + 30)
            print(f"cleared {time.monotonic() - back:.1f} s after the source was back")
            page.goto(asset_url, wait_until="domcontentloaded")
            page.wait_for_timeout(2000)
            _shot(page, "ui-source-back-mirror.png")
            page.goto(sensor_url, wait_until="domcontentloaded")
            page.wait_for_timeout(2000)
            _shot(page, "ui-source-back-sensor.png")
        finally:
            ctx.close()
