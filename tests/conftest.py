"""Shared pytest fixtures.

Integration tests use the private MariaDB that ``scripts/setup.sh`` starts (``scripts/mariadb.sh``).
When it is not reachable the fixtures FAIL with instructions; nothing here ever skips.

Connection settings, first match wins:
  host: $CANAL_TEST_MYSQL_HOST, else 127.0.0.1
  port: $CANAL_TEST_MYSQL_PORT, else the port in .runtime/mariadb/primary/my.cnf (scripts/mariadb.sh
        may have moved it off a busy 3407 under CI), else 3407
  secondary port: $CANAL_TEST_MYSQL_SECONDARY_PORT, else .runtime/mariadb/secondary/my.cnf, else 3408

scripts/test.sh runs the suite in pytest-xdist workers, each module whole on one worker. Tests change global
server settings and read the binary log from "now", so no two workers share a MariaDB: the first worker (gw0, or
a run without xdist) uses the instances above; worker gwN starts fresh instances `primary-gwN` and
`secondary-gwN` of its own (scripts/mariadb.sh, free ports) when a test first needs one, exports the primary's
port as PRIVATE_MARIADB_PORT for the pipeline commands it runs, and stops and removes them at its end.

ZooKeeper tests use the private ZooKeeper that ``scripts/setup.sh`` starts (``scripts/zookeeper.sh``):
  connect string: $CANAL_TEST_ZK, else 127.0.0.1:<clientPort in .runtime/zookeeper/main/zoo.cfg>, else :2281
The ``zookeeper`` fixture fails (never skips) when it does not answer; ``zk_chroot`` gives each test its own
chroot (a connect string ending in /canal-test/<test>-<random>, removed afterwards).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
import pytest

from tests.support.instances import OWN_INSTANCES, ensure_instance, instance_name, stop_own_instances
from tests.support.schedule import module_rank

REPO_ROOT = Path(__file__).resolve().parents[1]
RUNTIME_DIR = REPO_ROOT / ".runtime"


def _instance_port(name: str, env_var: str, default: int) -> int:
    env = os.environ.get(env_var)
    if env:
        return int(env)
    cnf = RUNTIME_DIR / "mariadb" / name / "my.cnf"
    if cnf.is_file():
        m = re.search(r"^port\s*=\s*(\d+)", cnf.read_text(), re.MULTILINE)
        if m:
            return int(m.group(1))
    return default


@dataclass(frozen=True)
class MariaDBSettings:
    host: str
    port: int
    secondary_port: int
    repl_user: str = "canal"
    repl_password: str = "canal"
    admin_user: str = "canal_admin"
    admin_password: str = "canal_admin"
    database: str = "canal_test"

    def admin_kwargs(self, **overrides: Any) -> dict[str, Any]:
        """pymysql.connect() keyword arguments for canal_admin on the primary."""
        kw: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.admin_user,
            "password": self.admin_password,
            "charset": "utf8mb4",
            "autocommit": True,
            "connect_timeout": 5,
        }
        kw.update(overrides)
        return kw

    def repl_kwargs(self, **overrides: Any) -> dict[str, Any]:
        """pymysql.connect() keyword arguments for the replication user canal on the primary."""
        kw = self.admin_kwargs(user=self.repl_user, password=self.repl_password)
        kw.update(overrides)
        return kw


def _settings_from_env() -> MariaDBSettings:
    if OWN_INSTANCES and not os.environ.get("CANAL_TEST_MYSQL_PORT"):
        port = ensure_instance("primary")
        os.environ["PRIVATE_MARIADB_PORT"] = str(port)  # the pipeline commands tests run find this worker's source
        return MariaDBSettings(host="127.0.0.1", port=port, secondary_port=_instance_port(
            instance_name("secondary"), "CANAL_TEST_MYSQL_SECONDARY_PORT", 0))
    return MariaDBSettings(
        host=os.environ.get("CANAL_TEST_MYSQL_HOST", "127.0.0.1"),
        port=_instance_port("primary", "CANAL_TEST_MYSQL_PORT", 3407),
        secondary_port=_instance_port("secondary", "CANAL_TEST_MYSQL_SECONDARY_PORT", 3408),
    )


_probe_error: str | None = None
_probed = False


def _probe(settings: MariaDBSettings) -> str | None:
    """None when canal_admin can log in to the primary, else a description of what went wrong."""
    global _probe_error, _probed
    if not _probed:
        _probed = True
        try:
            with socket.create_connection((settings.host, settings.port), timeout=3):
                pass
            conn = pymysql.connect(**settings.admin_kwargs())
            conn.close()
        except Exception as exc:
            _probe_error = f"{type(exc).__name__}: {exc}"
    return _probe_error


@pytest.fixture(scope="session")
def mariadb_settings() -> MariaDBSettings:
    """Settings of the private MariaDB primary; fails (never skips) if it is not reachable."""
    settings = _settings_from_env()
    err = _probe(settings)
    if err is not None:
        pytest.fail(
            f"private MariaDB not reachable at {settings.host}:{settings.port} ({err}): run scripts/setup.sh",
            pytrace=False,
        )
    return settings


@pytest.fixture
def admin_conn(mariadb_settings: MariaDBSettings) -> Iterator[pymysql.connections.Connection]:
    """A PyMySQL connection as canal_admin (autocommit), closed after the test."""
    try:
        conn = pymysql.connect(**mariadb_settings.admin_kwargs())
    except Exception as exc:
        pytest.fail(
            f"private MariaDB not reachable at {mariadb_settings.host}:{mariadb_settings.port} "
            f"({type(exc).__name__}: {exc}): run scripts/setup.sh",
            pytrace=False,
        )
    try:
        yield conn
    finally:
        conn.close()


def _zookeeper_connect() -> str:
    env = os.environ.get("CANAL_TEST_ZK")
    if env:
        return env
    cfg = RUNTIME_DIR / "zookeeper" / "main" / "zoo.cfg"
    port = 2281
    if cfg.is_file():
        m = re.search(r"^clientPort=(\d+)", cfg.read_text(), re.MULTILINE)
        if m:
            port = int(m.group(1))
    return f"127.0.0.1:{port}"


@pytest.fixture(scope="session")
def zookeeper() -> str:
    """Connect string of the private ZooKeeper; fails (never skips) if it does not answer ruok."""
    connect = _zookeeper_connect()
    host, _, port = connect.split("/", 1)[0].split(",")[0].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=3) as sock:
            sock.sendall(b"ruok")
            sock.settimeout(3)
            reply = sock.recv(16)
        if reply != b"imok":
            raise OSError(f"ruok answered {reply!r}")
    except OSError as exc:
        pytest.fail(f"private ZooKeeper not reachable at {connect} ({type(exc).__name__}: {exc}): run scripts/setup.sh "
                    f"(or scripts/zookeeper.sh start)", pytrace=False)
    return connect


@pytest.fixture
def zk_chroot(zookeeper: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A connect string with a fresh chroot for this test, so tests never see each other's nodes."""
    import uuid

    from kazoo.client import KazooClient

    name = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:60]
    root = f"/canal-test/{name}-{uuid.uuid4().hex[:8]}"
    zk = KazooClient(hosts=zookeeper.split("/", 1)[0])
    zk.start(timeout=10)
    try:
        zk.ensure_path(root)
        yield zookeeper.split("/", 1)[0] + root
        zk.delete(root, recursive=True)
    finally:
        zk.stop()
        zk.close()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One Spark session with Delta, started offline from the jar cache, shared by the run (in Spark's
    interpreted mode; local[2] unless CANAL_TEST_SPARK_MASTER names a cluster: tests/support/spark.py)."""
    from pipelines.engine.sparkenv import spark_session_builder
    from tests.support.spark import INTERPRETED, suite_master

    session = spark_session_builder("canal-core-tests", master=suite_master(), conf=INTERPRETED).getOrCreate()
    try:
        yield session
    finally:
        session.stop()


def pytest_configure(config: pytest.Config) -> None:
    # the Spark JVMs of the suite, and those of the pipeline processes it starts, inherit these (tests/support/spark.py)
    from tests.support.spark import add_jvm_options

    add_jvm_options(os.environ)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    stop_own_instances()  # a worker's own MariaDB instances (tests/support/instances.py)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true",
                     help="also run the tests marked `long` (longer variants of scenarios the default suite covers "
                          "in a shorter form: every interleaving round, every recovery bound)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests under tests/integration/ carry the `integration` marker (for -m selection only). Tests marked `long`
    are deselected (the summary line counts them) unless --long is given. The longest modules come first
    (tests/support/schedule.py), each module's tests in their own order."""
    items.sort(key=lambda item: module_rank(item.nodeid))  # stable: modules and their tests keep their order
    integration_dir = Path(__file__).parent / "integration"
    for item in items:
        if integration_dir in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
    if config.getoption("--long"):
        return
    kept, deselected = [], []
    for item in items:
        (deselected if item.get_closest_marker("long") else kept).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
