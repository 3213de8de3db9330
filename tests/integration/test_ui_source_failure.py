"""A source that stops is a failure the Dagster UI shows where users look, and it clears by itself: the main job's
own processes (pipelines/cli/deployment.py: the supervised code server, webserver, daemon and Spark Connect
server; the canal sensor evaluating every INTERVAL seconds and launching real runs), a private MariaDB of the
test's own, and Debian's headless Chromium driven by Playwright. Screenshots are kept under .runtime/artifacts/.

1. Healthy: the mirror's ``lag`` check passes.
2. The source's MariaDB stopped: a failed tick whose error says "CANNOT READ THE SOURCE" with the connection
   error, shown on the sensor page (the tick's error opened as a user opens it); the mirror's page shows the
   ``lag`` check failed with the same cause.
3. The source started again: within two ticks the sensor's ticks are no longer failures and the ``lag`` check
   passes again, without anyone touching the pipeline.
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from dagster import AssetCheckKey, AssetKey, DagsterInstance
from dagster._core.definitions.run_request import InstigatorType
from dagster._core.scheduler.instigation import TickStatus
from playwright.sync_api import Page, sync_playwright

from pipelines.cli import deployment
from pipelines.cli.supervisor import Supervisor
from tests.integration.browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS
from tests.integration.dagster_services import REPO_ROOT, instance_home
from tests.integration.extra_mariadb import extra_instance
from tests.support.instances import script
from tests.support.net import free_port

pytestmark = pytest.mark.integration

SCHEMA = "canal_uifail"
DEST = "uifail"
INSTANCE = "uifail"          # the test's own MariaDB (scripts/mariadb.sh), stopped and started by it
# the sensor's interval: two ticks (the bound for clearing) outlast the parser's longest reconnect backoff (30 s
# +20% jitter), which a source down for a minute reaches
INTERVAL = 20
SENSOR = f"canal_{DEST}"


@pytest.fixture(scope="module")
def source(mariadb_settings: Any) -> Iterator[Any]:
    with extra_instance(INSTANCE, 71, mariadb_settings) as settings:
        conn = pymysql.connect(**settings.admin_kwargs(autocommit=True))
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {SCHEMA}")
            cur.execute(f"CREATE TABLE {SCHEMA}.items (id INT PRIMARY KEY, name VARCHAR(32))")
            cur.executemany(f"INSERT INTO {SCHEMA}.items VALUES (%s, %s)", [(i, f"item {i}") for i in range(20)])
        conn.close()
        yield settings


class Pipeline:
    """The main job's services for a pipeline config of the test's own, supervised in this process."""

    def __init__(self, root: Path, settings: Any) -> None:
        conf = root / "conf"
        (conf / DEST).mkdir(parents=True)
        (conf / "canal.properties").write_text(f"canal.destinations = {DEST}\ncanal.file.flush.period = 0\n")
        (conf / DEST / "instance.properties").write_text(
            f"canal.instance.mysql.slaveId = {random.randint(1 << 20, (1 << 31) - 1)}\n"
            f"canal.instance.master.address = 127.0.0.1:{settings.port}\n"
            "canal.instance.dbUsername = canal\ncanal.instance.dbPassword = canal\n"
            f"canal.instance.filter.regex = {SCHEMA}\\\\..*\n")
        (root / "pipeline.yaml").write_text(
            f"destination: {DEST}\ncanal: {{conf_dir: {conf}}}\n"
            f"paths: {{staging: {root / 'staging'}, state: {root / 'state'}}}\nlake: {{root: {root / 'lake'}}}\n"
            f"sensor: {{interval_seconds: {INTERVAL}, backoff_seconds: 1, backoff_max_seconds: 5, "
            "reconcile_interval_seconds: 0}\n")
        self.home = instance_home(root / "dagster")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CANAL_PIPELINE_", "DAGSTER_HOME"))}
        env.update(CANAL_PIPELINE_CONF=str(root / "pipeline.yaml"), DAGSTER_HOME=str(self.home),
                   DAGSTER_DISABLE_TELEMETRY="yes")
        self.instance = DagsterInstance.from_config(str(self.home))  # the storage, before three processes race
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.lines: list[str] = []
        self.sup = Supervisor(self.lines.append, REPO_ROOT)
        # the main job's default: runs attach to its supervised Spark Connect server
        deployment.build(self.sup, deployment.Layout(root / "job"), env, self.port, [sys.executable, "-c", "pass"],
                         workload_ends=True, spark=deployment.SparkServer(free_port(), "local[2]", {}))
        self.sup.start()

    def stop(self) -> None:
        left = self.sup.shutdown(deployment.STOP_STAGES)
        self.instance.dispose()
        assert not left, f"processes left behind: {left}"

    def ticks(self, limit: int = 5) -> list[Any]:
        for st in self.instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
            if st.instigator_name == SENSOR:
                return list(self.instance.get_ticks(st.instigator_origin_id, st.selector_id, limit=limit))
        return []

    def lag(self) -> tuple[bool, str] | None:
        rec = self.instance.get_latest_asset_check_evaluation_record(
            AssetCheckKey(AssetKey(["mirror", SCHEMA, "items"]), "lag"))
        if rec is None or rec.event is None:
            return None
        ev = rec.event.dagster_event.event_specific_data  # type: ignore[union-attr]
        return ev.passed, ev.description or ""


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, source: Any) -> Iterator[Pipeline]:
    p = Pipeline(tmp_path_factory.mktemp("ui_failure"), source)
    try:
        yield p
    finally:
        p.stop()


def _wait(what: str, fn: Any, timeout: float, p: Pipeline) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(1.0)
    pytest.fail(f"{what}: not within {timeout:.0f} s (last {last!r}); job lines: {p.lines[-20:]}")


def _shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    time.sleep(1.0)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def _error_text(tick: Any) -> str:
    out, err = [], tick.error
    while err is not None:
        out.append(err.message)
        err = err.cause
    return " ".join(out)


@pytest.mark.timeout(1500)
def test_a_stopped_source_shows_on_the_sensor_and_the_mirror_and_clears(pipeline: Pipeline, source: Any) -> None:
    p = pipeline
    sensor_url = f"{p.url}/locations/{deployment.LOCATION_NAME}/sensors/{SENSOR}"
    asset_url = f"{p.url}/assets/mirror/{SCHEMA}/items?view=checks"

    # 1. healthy: the mirror's snapshot loaded, the destination caught up, the lag check passing
    _wait("the lag check passing", lambda: (p.lag() or (False, ""))[0], 900, p)

    assert CHROMIUM.is_file(), f"{CHROMIUM} is missing: apt-get install chromium (scripts/setup.sh does)"
    with tempfile.TemporaryDirectory(prefix="canal-ui-chromium-") as profile, sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(profile, executable_path=str(CHROMIUM), headless=True,
                                                    args=CHROMIUM_ARGS, viewport={"width": 1600, "height": 1000})
        try:
            page = ctx.new_page()
            page.set_default_timeout(90_000)
            page.goto(asset_url, wait_until="domcontentloaded")
            page.get_by_text("every change up to").first.wait_for()
            _shot(page, "ui-source-healthy-mirror.png")

            # 2. the source stops
            out = script("stop", INSTANCE)
            assert out.returncode == 0, out.stderr
            stopped_at = time.time()
            failed = _wait("a failed tick", lambda: next((t for t in p.ticks() if t.status == TickStatus.FAILURE
                                                          and t.timestamp > stopped_at), None), 6 * INTERVAL + 300, p)
            text = _error_text(failed)
            assert "CANNOT READ THE SOURCE" in text and f"127.0.0.1:{source.port}" in text, text
            lag = _wait("the lag check failing", lambda: (lag := p.lag()) and not lag[0] and lag, 120, p)
            assert "cannot read the source" in lag[1], lag

            page.goto(sensor_url, wait_until="domcontentloaded")
            page.get_by_text("Failure").first.wait_for()
            _shot(page, "ui-source-down-sensor.png")
            page.get_by_text("View", exact=True).first.click()   # the latest tick's error, as a user opens it
            page.get_by_text("CANNOT READ THE SOURCE").first.wait_for()
            _shot(page, "ui-source-down-sensor-error.png")
            page.keyboard.press("Escape")

            page.goto(asset_url, wait_until="domcontentloaded")
            page.get_by_text("cannot read the source").first.wait_for()
            _shot(page, "ui-source-down-mirror.png")

            # 3. the source is back: cleared within two ticks, without anyone touching the pipeline
            out = script("start", INSTANCE)
            assert out.returncode == 0, out.stderr
            back = time.time()
            cleared = _wait("a tick after the restart that is not a failure",
                            lambda: next((t for t in p.ticks() if t.timestamp > back
                                          and t.status != TickStatus.FAILURE), None), 2 * INTERVAL + 30, p)
            assert cleared.timestamp - back <= 2 * INTERVAL + 15, (cleared.timestamp - back)
            _wait("the lag check passing again", lambda: (p.lag() or (False, ""))[0], 2 * INTERVAL + 30, p)
            print(f"cleared {cleared.timestamp - back:.1f} s after the source was back")
            page.goto(asset_url, wait_until="domcontentloaded")
            page.get_by_text("every change up to").first.wait_for()
            _shot(page, "ui-source-back-mirror.png")
            page.goto(sensor_url, wait_until="domcontentloaded")
            page.wait_for_timeout(2000)
            _shot(page, "ui-source-back-sensor.png")
        finally:
            ctx.close()
