"""The Dagster UI in a real browser: Debian's headless Chromium, driven by Playwright,
opens the webserver's global asset lineage and canal/changelog's lineage view and finds the graph
mysql/<schema>/<table> -> canal/changelog -> mirror/<schema>/<table>, read from the rendered SVG (asset
nodes, their group boxes and the edge paths between them), and cross-checked through the webserver's
GraphQL API. The screenshots are kept under .runtime/artifacts/.

The webserver runs from the repository root on a temporary Canal conf (its own replica id, a filter on a
schema of its own), pipeline.yaml and DAGSTER_HOME (SQLite storage in the temporary directory). No daemon:
the sensor never runs, the graph needs only the code location. Without chromium or a server that answers,
the test fails, it never skips.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pymysql
import pytest
from playwright.sync_api import Page, sync_playwright

from pipelines.engine.config import REPO_ROOT
from tests.integration.browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS
from tests.support.net import free_port

pytestmark = pytest.mark.integration

SCHEMA = "canal_uitest"
TABLES = ("customers", "orders")
CHANGELOG = "canal/changelog"
SOURCES = tuple(f"mysql/{SCHEMA}/{t}" for t in TABLES)
MIRRORS = tuple(f"mirror/{SCHEMA}/{t}" for t in TABLES)
EXPECTED_KEYS = {CHANGELOG, *SOURCES, *MIRRORS}
EXPECTED_EDGES = {(s, CHANGELOG) for s in SOURCES} | {(CHANGELOG, m) for m in MIRRORS}
EXPECTED_GROUPS = {CHANGELOG: "canal", **dict.fromkeys(SOURCES, "mysql"), **dict.fromkeys(MIRRORS, "mirror")}

SERVER_START_TIMEOUT = 240.0   # the machine is slow and loaded: the code location alone takes ~20 s there
GRAPH_TIMEOUT = 90.0           # a page until its graph is drawn

# --- the webserver -------------------------------------------------------------------------------------------


@dataclass
class Webserver:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return "(no log)"

    def graphql(self, query: str) -> dict[str, Any]:
        return self.graphql_vars(query, {})

    def graphql_vars(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(f"{self.url}/graphql",
                                     data=json.dumps({"query": query, "variables": variables}).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            body: dict[str, Any] = json.load(resp)
        assert not body.get("errors"), body["errors"]
        data: dict[str, Any] = body["data"]
        return data


LOCATION_QUERY = """{ workspaceOrError { __typename ... on Workspace { locationEntries { name loadStatus
  locationOrLoadError { __typename ... on PythonError { message } } } } } }"""
ASSETS_QUERY = """{ assetNodes { assetKey { path } groupName isMaterializable dependencyKeys { path }
  dependedByKeys { path } } }"""


def _wait_until_serving(server: Webserver) -> None:
    """Until /server_info answers and the code location is LOADED; a crash or a load error fails at once."""
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    last = "no answer yet"
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            pytest.fail(f"dagster-webserver exited with {server.proc.returncode}:\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(f"{server.url}/server_info", timeout=10) as resp:
                last = f"/server_info: {resp.read(200)!r}"
            ws = server.graphql(LOCATION_QUERY)["workspaceOrError"]
            entries = ws.get("locationEntries") or []
            last = f"workspace: {ws}"
            if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                for e in entries:
                    loaded = e["locationOrLoadError"]
                    assert loaded["__typename"] == "RepositoryLocation", \
                        f"code location {e['name']} failed to load: {loaded.get('message')}\n{server.log_tail()}"
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
            last = f"{type(e).__name__}: {e}"
        time.sleep(1.0)
    pytest.fail(f"dagster-webserver not serving at {server.url} after {SERVER_START_TIMEOUT:.0f} s ({last}):\n"
                f"{server.log_tail()}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the webserver's process group (it and its code server), SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    except ProcessLookupError:
        pass
    try:  # the code server may outlive its parent by a moment
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="module")
def source_tables(mariadb_settings: Any) -> Iterator[None]:
    conn = pymysql.connect(**mariadb_settings.admin_kwargs())
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {SCHEMA}")
            cur.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.customers (id INT PRIMARY KEY, name VARCHAR(40))")
            cur.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.orders (id INT PRIMARY KEY, customer_id INT, "
                        "total DECIMAL(10,2))")
        yield
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
    finally:
        conn.close()


@pytest.fixture(scope="module")
def webserver(tmp_path_factory: pytest.TempPathFactory, mariadb_settings: Any,
              source_tables: None) -> Iterator[Webserver]:
    root = tmp_path_factory.mktemp("dagster_ui")
    conf = root / "conf"
    (conf / "example").mkdir(parents=True)
    (conf / "canal.properties").write_text("canal.destinations = example\n")
    # a replica id of its own: two replicas with one id kick each other off the primary
    (conf / "example" / "instance.properties").write_text(
        f"canal.instance.mysql.slaveId = {random.randint(1 << 20, (1 << 31) - 1)}\n"
        f"canal.instance.master.address = {mariadb_settings.host}:{mariadb_settings.port}\n"
        "canal.instance.dbUsername = canal\ncanal.instance.dbPassword = canal\n"
        f"canal.instance.filter.regex = {SCHEMA}\\\\..*\n")
    pipeline_yaml = root / "pipeline.yaml"
    pipeline_yaml.write_text(f"canal: {{conf_dir: {conf}}}\n"
                             f"paths: {{staging: {root / 'staging'}, state: {root / 'state'}}}\n"
                             f"lake: {{root: {root / 'lake'}}}\n")
    home = root / "dagster_home"
    home.mkdir()
    # nux off: no "Join the Dagster community" dialog over the graph
    (home / "dagster.yaml").write_text(f"storage:\n  sqlite:\n    base_dir: {home / 'storage'}\n"
                                       "telemetry:\n  enabled: false\nnux:\n  enabled: false\n")
    webserver_bin = REPO_ROOT / ".venv" / "bin" / "dagster-webserver"
    assert webserver_bin.is_file(), f"{webserver_bin} is missing: run scripts/setup.sh"

    port = free_port()
    log = root / "webserver.log"
    env = {**os.environ, "CANAL_PIPELINE_CONF": str(pipeline_yaml), "DAGSTER_HOME": str(home),
           "DAGSTER_DISABLE_TELEMETRY": "yes"}
    with log.open("wb") as out:
        proc = subprocess.Popen([str(webserver_bin), "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
                                cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    server = Webserver(f"http://127.0.0.1:{port}", proc, log)
    try:
        t0 = time.monotonic()
        _wait_until_serving(server)
        print(f"dagster-webserver serving at {server.url} after {time.monotonic() - t0:.1f} s")
        yield server
    finally:
        _stop(proc)


# --- the graph as the browser draws it ---------------------------------------------------------------------

# Asset nodes and group boxes are SVG <foreignObject>s (x/y/width/height in graph coordinates); an asset
# node's name is the data-tooltip of the element in its name row (the key's last part), a group box's the
# data-tooltip of its header. Edges are <path marker-end="url(#arrow...)"> from the upstream node's side to
# the downstream node's. The screen centre of each name is for clicking.
EXTRACT_JS = """() => {
  const box = (f) => ({x: +f.getAttribute('x'), y: +f.getAttribute('y'),
                       w: +f.getAttribute('width'), h: +f.getAttribute('height')});
  const assets = [], groups = [];
  for (const f of document.querySelectorAll('svg foreignObject')) {
    const a = f.querySelector('[class*="assetName"] [data-tooltip]');
    if (a) {
      const r = a.getBoundingClientRect();
      assets.push({...box(f), name: a.getAttribute('data-tooltip'), cx: r.x + r.width / 2, cy: r.y + r.height / 2});
      continue;
    }
    const g = f.querySelector('[data-tooltip]');
    if (g) groups.push({...box(f), name: g.getAttribute('data-tooltip')});
  }
  const edges = [...document.querySelectorAll('svg path[marker-end^="url(#arrow"]')].map((p) => p.getAttribute('d'));
  const dialogs = [...document.querySelectorAll('[role="dialog"]')].map((d) => d.textContent.slice(0, 80));
  return {assets, groups, edges, dialogs};
}"""
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?")
EDGE_SLACK = 15.0  # px between an edge's end and the node side it touches (the arrow head stops short)


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    w: float
    h: float

    def contains(self, o: Box) -> bool:
        return self.x <= o.x and self.y <= o.y and o.x + o.w <= self.x + self.w and o.y + o.h <= self.y + self.h

    def distance(self, px: float, py: float) -> float:
        dx = max(self.x - px, 0.0, px - (self.x + self.w))
        dy = max(self.y - py, 0.0, py - (self.y + self.h))
        return float((dx * dx + dy * dy) ** 0.5)


@dataclass(frozen=True)
class DrawnNode:
    group: str
    name: str
    box: Box
    cx: float
    cy: float

    @property
    def label(self) -> str:
        return f"{self.group}:{self.name}"


@dataclass
class DrawnGraph:
    nodes: list[DrawnNode]
    edges: set[tuple[str, str]]    # node labels; '?' for an end that touches no node
    dialogs: list[str]

    def summary(self) -> str:
        return f"nodes {sorted(n.label for n in self.nodes)}, edges {sorted(self.edges)}, dialogs {self.dialogs}"


def _read_graph(raw: dict[str, Any]) -> DrawnGraph:
    groups = [(g["name"], Box(g["x"], g["y"], g["w"], g["h"])) for g in raw["groups"]]
    nodes: list[DrawnNode] = []
    for a in raw["assets"]:
        box = Box(a["x"], a["y"], a["w"], a["h"])
        around = sorted((g for g in groups if g[1].contains(box)), key=lambda g: g[1].w * g[1].h)
        nodes.append(DrawnNode(around[0][0] if around else "", a["name"], box, a["cx"], a["cy"]))

    def touching(px: float, py: float) -> str:
        if not nodes:
            return "?"
        best = min(nodes, key=lambda n: n.box.distance(px, py))
        return best.label if best.box.distance(px, py) <= EDGE_SLACK else "?"

    edges: set[tuple[str, str]] = set()
    for d in raw["edges"]:
        nums = [float(v) for v in _NUMBER.findall(d or "")]
        if len(nums) >= 4:
            edges.add((touching(nums[0], nums[1]), touching(nums[-2], nums[-1])))
    return DrawnGraph(nodes, edges, list(raw["dialogs"]))


def _wait_for_graph(page: Page, n_nodes: int, n_edges: int) -> DrawnGraph:
    """The drawn graph once it has the expected number of nodes and edges (edges come from a web worker,
    after the nodes) and is stable, or the last one seen when GRAPH_TIMEOUT passes."""
    deadline = time.monotonic() + GRAPH_TIMEOUT
    graph = DrawnGraph([], set(), [])
    while True:
        try:
            prev, graph = graph, _read_graph(page.evaluate(EXTRACT_JS))
        except Exception as e:  # a navigation in progress destroys the context
            if time.monotonic() > deadline:
                raise
            print(f"(graph not readable yet: {e})")
            time.sleep(0.5)
            continue
        complete = len(graph.nodes) >= n_nodes and len(graph.edges) >= n_edges and not graph.dialogs
        if complete and prev.summary() == graph.summary() and all(n.cx > 0 for n in graph.nodes):
            return graph
        if time.monotonic() > deadline:
            return graph
        time.sleep(0.5)


def _full_keys(asset_nodes: list[dict[str, Any]]) -> dict[str, str]:
    """drawn label (group:last part of the key) -> the asset key; each label must name one asset."""
    keys: dict[str, str] = {}
    for a in asset_nodes:
        key = "/".join(a["assetKey"]["path"])
        label = f"{a['groupName']}:{a['assetKey']['path'][-1]}"
        assert label not in keys, f"{label} names both {keys[label]} and {key}: the drawing would be ambiguous"
        keys[label] = key
    return keys


def _check_drawn(graph: DrawnGraph, keys: dict[str, str], where: str) -> None:
    assert not graph.dialogs, f"{where}: a dialog covers the graph: {graph.dialogs}"
    drawn = sorted(keys.get(n.label, f"?{n.label}") for n in graph.nodes)
    assert drawn == sorted(EXPECTED_KEYS), f"{where}: drawn nodes {drawn}; {graph.summary()}"
    edges = {(keys.get(a, a), keys.get(b, b)) for a, b in graph.edges}
    assert edges == EXPECTED_EDGES, f"{where}: drawn edges {sorted(edges)}; {graph.summary()}"
    # laid out left to right in lineage order: every source, then the changelog, then every mirror
    at = {keys[n.label]: n.box for n in graph.nodes}
    cl = at[CHANGELOG]
    for s in SOURCES:
        assert at[s].x + at[s].w < cl.x, f"{where}: {s} is not drawn left of {CHANGELOG}: {graph.summary()}"
    for m in MIRRORS:
        assert cl.x + cl.w < at[m].x, f"{where}: {m} is not drawn right of {CHANGELOG}: {graph.summary()}"


def _screenshot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    time.sleep(1.0)  # let the viewport's zoom-to-fit animation settle
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


# --- the test ------------------------------------------------------------------------------------------------


def test_asset_lineage_in_the_browser(webserver: Webserver) -> None:
    # the webserver's own view first: the keys, their groups and the edges both ways
    nodes = webserver.graphql(ASSETS_QUERY)["assetNodes"]
    by_key = {"/".join(a["assetKey"]["path"]): a for a in nodes}
    assert set(by_key) == EXPECTED_KEYS
    for key, a in by_key.items():
        assert a["groupName"] == EXPECTED_GROUPS[key]
        assert a["isMaterializable"] == (key not in SOURCES)
        for dep in a["dependencyKeys"]:
            assert ("/".join(dep["path"]), key) in EXPECTED_EDGES
        for down in a["dependedByKeys"]:
            assert (key, "/".join(down["path"])) in EXPECTED_EDGES
    graphql_edges = {("/".join(d["path"]), k) for k, a in by_key.items() for d in a["dependencyKeys"]}
    assert graphql_edges == EXPECTED_EDGES == {
        (k, "/".join(d["path"])) for k, a in by_key.items() for d in a["dependedByKeys"]}
    keys = _full_keys(nodes)

    assert CHROMIUM.is_file(), f"{CHROMIUM} is missing: apt-get install chromium (scripts/setup.sh does)"
    with tempfile.TemporaryDirectory(prefix="canal-ui-chromium-") as profile, sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(profile, executable_path=str(CHROMIUM), headless=True,
                                                    args=CHROMIUM_ARGS, viewport={"width": 1600, "height": 1000})
        try:
            page = ctx.new_page()
            page.set_default_timeout(GRAPH_TIMEOUT * 1000)

            # 1. the global asset lineage: three groups, collapsed at first; "Expand all groups" from the
            # graph's settings menu (the gear in its toolbar) draws every asset and edge
            page.goto(f"{webserver.url}/asset-groups", wait_until="domcontentloaded")
            page.wait_for_selector("svg foreignObject.group")
            assert page.get_by_text("Global asset lineage").first.is_visible()
            page.get_by_role("button", name="settings", exact=True).click()
            page.get_by_role("menuitem", name="Expand all groups").click()
            page.keyboard.press("Escape")  # close the menu's popover
            page.mouse.move(1590, 120)  # off the graph: no node drawn hovered
            graph = _wait_for_graph(page, len(EXPECTED_KEYS), len(EXPECTED_EDGES))
            _screenshot(page, "dagster-asset-graph.png")
            _check_drawn(graph, keys, "global asset lineage")

            # 2. canal/changelog's lineage view, nearest neighbours: its upstream and downstream assets
            lineage = f"{webserver.url}/assets/{CHANGELOG}?view=lineage&lineageScope=neighbors&lineageDepth=1"
            page.goto(lineage, wait_until="domcontentloaded")
            graph = _wait_for_graph(page, len(EXPECTED_KEYS), len(EXPECTED_EDGES))
            _screenshot(page, "dagster-changelog-lineage.png")
            _check_drawn(graph, keys, "canal/changelog lineage")

            # 3. each drawn neighbour is the asset we named it after: clicking it opens that asset's page
            for label in sorted(n.label for n in graph.nodes if keys[n.label] != CHANGELOG):
                node = next(n for n in graph.nodes if n.label == label)
                page.mouse.click(node.cx, node.cy)
                page.wait_for_url(lambda url, key=keys[label]: urlparse(url).path == f"/assets/{key}")
                page.goto(lineage, wait_until="domcontentloaded")
                graph = _wait_for_graph(page, len(EXPECTED_KEYS), len(EXPECTED_EDGES))
                _check_drawn(graph, keys, f"canal/changelog lineage, back from {keys[label]}")
        finally:
            ctx.close()
