"""The CDC engine installs and runs without the pipeline's stack.

``pip install <repo>`` with no extras, into a fresh virtual environment: Dagster, Spark, Delta, pandas and
pyarrow are not installed, every ``canal_core`` module imports, and the engine's three faces work from that
environment alone: ``canal-binlog`` decodes a binlog file, ``canal-server`` serves a real change to a
``canal_core.client`` connector, and the embedded server hands one to an in-process client. A lazy import of
one of those libraries anywhere in ``canal_core`` is caught by reading the source.

Cost: about 30 s (20 s of it creating the venv and installing the engine's dependencies, from pip's cache once
setup.sh has run); the venv is shared by the tests of this module.
"""

from __future__ import annotations

import ast
import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.server_process import PASSWORD, USER, destination_running, write_conf
from tests.unit.fixture_support import fixture_path

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# libraries only the pipeline (the `pipeline` extra) may use
PIPELINE_ONLY = ("dagster", "dagster_webserver", "dagster_graphql", "pyspark", "pandas", "delta", "pyarrow")
TABLE = "canal_test.engine_install_t"
# an environment without the checkout: the child imports what the install put into its venv, nothing else
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


def _run(argv: list[str], *, timeout: float, cwd: Path, env: dict[str, str] | None = None,
         ) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env or CLEAN_ENV)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}",
                    pytrace=False)
    return done


@pytest.fixture(scope="module")
def engine_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with ``pip install <copy of the repo>`` (no extras). The copy keeps build files out of the
    checkout; it holds what the package is built from (pyproject.toml, README.md, the packages)."""
    root = tmp_path_factory.mktemp("engine")
    src = root / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for pkg in ("canal_core", "pipelines"):
        shutil.copytree(REPO / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], timeout=120, cwd=root)
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(src)],
         timeout=900, cwd=root)
    return venv


def _script(venv: Path, tmp: Path, code: str, *args: str, timeout: float = 120) -> Any:
    """Run ``code`` with the venv's interpreter, outside the checkout; its last stdout line is JSON."""
    path = tmp / "probe.py"
    path.write_text(code)
    out = _run([str(venv / "bin" / "python"), str(path), *args], timeout=timeout, cwd=tmp)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_canal_core_source_imports_no_pipeline_library() -> None:
    """Read, not run: a lazy import inside a function is found too (so is importlib.import_module("...")."""
    found = []
    for path in sorted((REPO / "canal_core").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                  and isinstance(node.args[0].value, str)
                  and (getattr(node.func, "attr", None) or getattr(node.func, "id", None))
                  in ("import_module", "__import__")):
                names = [node.args[0].value]
            found += [f"{path.relative_to(REPO)}:{node.lineno}: {n}" for n in names
                      if n.split(".")[0] in PIPELINE_ONLY]
    assert found == [], "canal_core imports libraries of the pipeline extra:\n" + "\n".join(found)


PROBE_IMPORTS = """
import importlib, importlib.util, json, pkgutil, sys
import canal_core
missing = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]
failed = {}
for info in pkgutil.walk_packages(canal_core.__path__, "canal_core."):
    if info.name.endswith(".__main__"):  # runs its command when imported
        continue
    try:
        importlib.import_module(info.name)
    except Exception as e:
        failed[info.name] = f"{type(e).__name__}: {e}"
loaded = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[1:]))
print(json.dumps({"file": canal_core.__file__, "missing": missing, "failed": failed, "loaded": loaded}))
"""


def test_engine_installs_without_the_pipeline_stack(engine_venv: Path, tmp_path: Path) -> None:
    got = _script(engine_venv, tmp_path, PROBE_IMPORTS, *PIPELINE_ONLY)
    assert Path(got["file"]).is_relative_to(engine_venv), got["file"]  # the installed copy, not the checkout
    installed = sorted(set(PIPELINE_ONLY) - set(got["missing"]))
    assert installed == [], f"installed with the engine: {installed}"
    assert got["failed"] == {}
    assert got["loaded"] == []


def test_canal_binlog_decodes_a_file(engine_venv: Path, tmp_path: Path) -> None:
    # MANIFEST.md: 13 events, one WRITE_ROWS_V2; its ROWS_QUERY is INSERT INTO `boxercrab` (`title`) VALUES ('abcde');
    # without column metadata the title's VARCHAR is bytes, which canal-binlog prints as "base64:..."
    binlog = fixture_path("mysql-cdc-rs/tests/events/5.7/30_write_rows_v2/log.bin")
    out = _run([str(engine_venv / "bin" / "canal-binlog"), str(binlog)], timeout=60, cwd=tmp_path)
    events = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(events) == 13
    rows = [e for e in events if e["name"] == "WRITE_ROWS_V2"]
    assert len(rows) == 1 and rows[0]["table"] == "boxercrab"
    assert "base64:" + base64.b64encode(b"abcde").decode() in [v for row in rows[0]["rows"] for v in row.values()]


# Connects, creates the table, then inserts a row a second until one arrives: the row the server delivers is one
# this probe wrote after the destination started (whenever its parser located the binlog end); it acks that batch.
PROBE_CLIENT = """
import json, sys, time
import pymysql
from canal_core.client import SimpleConnector, TimeUnit
from canal_core.protocol.proto import EntryProtocol_pb2 as pb

port, user, password, admin, table = int(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), sys.argv[5]
conn = SimpleConnector(("127.0.0.1", port), "example", user, password)
conn.connect()
conn.subscribe("")
db = pymysql.connect(**admin)
db.cursor().execute(f"CREATE OR REPLACE TABLE {table} (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(20))")
written, got, deadline = [], [], time.monotonic() + 60
while not got and time.monotonic() < deadline:
    with db.cursor() as cur:
        cur.execute(f"INSERT INTO {table} (v) VALUES ('engine')")
        written.append(cur.lastrowid)
    msg = conn.get_without_ack(100, 1000, TimeUnit.MILLISECONDS)
    for e in msg.entries:
        if e.entryType == pb.ROWDATA:
            rc = pb.RowChange.FromString(e.storeValue)
            got += [int(c.value) for rd in rc.rowDatas for c in rd.afterColumns if c.name == "id"]
    conn.ack(msg.batch_id)
conn.disconnect()
db.cursor().execute(f"DROP TABLE {table}")
print(json.dumps({"written": written, "got": got}))
"""


def test_canal_server_serves_a_connector(engine_venv: Path, mariadb_settings: Any, tmp_path: Path) -> None:
    conf = write_conf(tmp_path, mariadb_settings.port,
                      {"example": "canal.instance.filter.regex = canal_test\\\\.engine_install_t\n"})
    run = tmp_path / "run"
    run.mkdir()
    log = open(run / "canal.out", "ab")
    server = subprocess.Popen([str(engine_venv / "bin" / "canal-server"), "run", "--conf", str(conf),
                               "--run-dir", str(run)], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                              cwd=tmp_path, env=CLEAN_ENV, start_new_session=True)
    log.close()
    try:
        assert destination_running(run, "example", timeout=60), (run / "canal.out").read_text()[-3000:]
        port = next(int(line.split("=")[1]) for line in (conf / "canal.properties").read_text().splitlines()
                    if line.startswith("canal.port ="))
        got = _script(engine_venv, tmp_path, PROBE_CLIENT, str(port), USER, PASSWORD,
                      json.dumps(mariadb_settings.admin_kwargs()), TABLE)
        assert got["got"] and set(got["got"]) <= set(got["written"]), got
    finally:
        server.terminate()
        assert server.wait(30) == 0, (run / "canal.out").read_text()[-3000:]


PROBE_EMBEDDED = """
import json, sys, time
from pathlib import Path
import pymysql
from canal_core.protocol.proto import EntryProtocol_pb2 as pb
from canal_core.instance.config import CanalConfig
from canal_core.instance.instance import CanalInstance
from canal_core.protocol.identity import ClientIdentity
from canal_core.server.embedded import CanalServerWithEmbedded

conf, admin, table = Path(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
canal = CanalConfig.load(conf)
server = CanalServerWithEmbedded()
server.start(CanalInstance.from_config(canal, canal.instance("example")))
client = ClientIdentity("example", 1001, "")
server.subscribe(client)
db = pymysql.connect(**admin)
db.cursor().execute(f"CREATE OR REPLACE TABLE {table} (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(20))")
written, got, deadline = [], [], time.monotonic() + 60
try:
    while not got and time.monotonic() < deadline:
        with db.cursor() as cur:
            cur.execute(f"INSERT INTO {table} (v) VALUES ('embedded')")
            written.append(cur.lastrowid)
        msg = server.get_without_ack(client, 100, 1.0)
        for raw in msg.raw_entries:
            e = pb.Entry.FromString(raw)
            if e.entryType == pb.ROWDATA:
                rc = pb.RowChange.FromString(e.storeValue)
                got += [int(c.value) for rd in rc.rowDatas for c in rd.afterColumns if c.name == "id"]
        if not msg.empty:
            server.ack(client, msg.batch_id)
finally:
    server.stop_all()
    db.cursor().execute(f"DROP TABLE {table}")
print(json.dumps({"written": written, "got": got}))
"""


def test_embedded_server_hands_a_change_to_its_client(engine_venv: Path, mariadb_settings: Any,
                                                      tmp_path: Path) -> None:
    conf = write_conf(tmp_path, mariadb_settings.port,
                      {"example": "canal.instance.filter.regex = canal_test\\\\.engine_install_t\n"})
    got = _script(engine_venv, tmp_path, PROBE_EMBEDDED, str(conf), json.dumps(mariadb_settings.admin_kwargs()),
                  TABLE)
    assert got["got"] and set(got["got"]) <= set(got["written"]), got
