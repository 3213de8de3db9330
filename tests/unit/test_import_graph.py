"""Canal's layering, checked on the source: which canal_core subpackage may import which.

The imports are read with ``ast`` (nothing is imported), at every level of a module: a lazy import inside a
function or under ``TYPE_CHECKING`` is still a dependency. Each subpackage (or top-level module) of canal_core is
a layer; ``ALLOWED`` lists the layers each may import, and nothing may import in a circle.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "canal_core"

# layer -> the layers it may import (Canal's modules: protocol at the bottom, server and client at the top)
ALLOWED: dict[str, frozenset[str]] = {
    "protocol": frozenset(),
    "binlog": frozenset({"protocol"}),
    "mysql": frozenset({"binlog", "protocol"}),
    "parse": frozenset({"binlog", "mysql", "protocol"}),
    "entry": frozenset({"binlog", "parse", "protocol"}),
    "sink": frozenset({"entry", "parse", "protocol"}),
    "store": frozenset({"entry", "parse", "protocol"}),
    "meta": frozenset({"binlog", "parse", "protocol"}),
    "instance": frozenset({"binlog", "entry", "meta", "mysql", "parse", "protocol", "sink", "store"}),
    "server": frozenset({"instance", "meta", "parse", "protocol", "store"}),
    "client": frozenset({"meta", "protocol"}),  # meta: ZooKeeper discovery and the running node
    "binlog_cli": frozenset({"binlog", "mysql", "protocol"}),
}

# what the engine never imports: the pipeline and its stack are installed on top of it
FORBIDDEN_EXTERNAL = frozenset({"pipelines", "dagster", "dagster_webserver", "pyspark", "delta", "pandas", "pyarrow"})
# a canal_core module allowed one of those (none: Spark setup lives in pipelines/engine/sparkenv.py)
EXTERNAL_EXCEPTIONS: dict[str, frozenset[str]] = {}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, module: str) -> Iterator[tuple[str, int]]:
    """(absolute module name, line) of every import in the file, relative ones resolved."""
    is_package = path.name == "__init__.py"
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                up = package[: len(package) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            if node.module is None:  # from . import x: x is a module of the package
                for alias in node.names:
                    yield f"{base}.{alias.name}", node.lineno
            else:
                yield base, node.lineno


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != PACKAGE or len(parts) < 2:
        return None
    return parts[1]


Edge = tuple[str, str]  # (importing layer, imported layer)


def layer_edges(root: Path) -> dict[Edge, list[str]]:
    """Every import between two layers of canal_core, with where it is ("file:line imports module")."""
    edges: dict[Edge, list[str]] = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        if path.name.endswith("_pb2.py"):
            continue
        module = module_name(path, root)
        src = layer_of(module)
        if src is None:
            continue
        for target, line in imported_modules(path, module):
            dst = layer_of(target)
            if dst is None:
                dst = target.split(".")[0]
                if dst not in FORBIDDEN_EXTERNAL:
                    continue
            if dst != src:
                edges.setdefault((src, dst), []).append(f"{path.relative_to(root)}:{line} imports {target}")
    return edges


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """A cycle of the directed graph as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def as_graph(edges: Mapping[Edge, list[str]]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for src, dst in edges:
        graph.setdefault(src, set()).add(dst)
    return graph


@pytest.fixture(scope="module")
def edges() -> dict[Edge, list[str]]:
    return layer_edges(ROOT)


def test_no_cycle_among_subpackages(edges: dict[Edge, list[str]]) -> None:
    internal = {e: where for e, where in edges.items() if e[1] not in FORBIDDEN_EXTERNAL}
    cycle = find_cycle(as_graph(internal))
    assert cycle is None, "import cycle " + " -> ".join(cycle) + ":\n" + "\n".join(
        f"  {a} -> {b}: {internal[(a, b)][0]}" for a, b in itertools.pairwise(cycle))


def test_every_layer_imports_only_what_the_table_allows(edges: dict[Edge, list[str]]) -> None:
    bad = [f"{src} -> {dst}: {where[0]}" for (src, dst), where in sorted(edges.items())
           if dst not in FORBIDDEN_EXTERNAL and dst not in ALLOWED.get(src, frozenset())]
    assert not bad, "imports the layer table does not allow:\n" + "\n".join(bad)


def test_canal_core_never_imports_the_pipeline_stack(edges: dict[Edge, list[str]]) -> None:
    bad = [f"{src} -> {dst}: {where[0]}" for (src, dst), where in sorted(edges.items())
           if dst in FORBIDDEN_EXTERNAL and dst not in EXTERNAL_EXCEPTIONS.get(src, frozenset())]
    assert not bad, "canal_core imports the pipeline stack:\n" + "\n".join(bad)


def test_every_subpackage_has_a_place_in_the_table() -> None:
    layers = {p.name for p in (ROOT / PACKAGE).iterdir() if p.is_dir() and any(p.glob("*.py"))}
    layers |= {p.stem for p in (ROOT / PACKAGE).glob("*.py") if p.name != "__init__.py"}
    assert layers - ALLOWED.keys() == set(), "add these to ALLOWED"


def test_protocol_imports_nothing_else_of_canal_core(edges: dict[Edge, list[str]]) -> None:
    assert [where for (src, _), where in edges.items() if src == "protocol"] == []


def test_find_cycle_reports_the_cycle_of_a_synthetic_graph() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"x": {"y"}, "y": {"y"}}) == ["y", "y"]


def test_a_lazy_import_that_closes_a_circle_fails_the_check(tmp_path: Path) -> None:
    pkg = tmp_path / PACKAGE
    for sub, text in {"low": "from ..high import thing\n",
                      "high": "def f() -> None:\n    from canal_core.low import other\n"}.items():
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
        (pkg / sub / "mod.py").write_text(text)
    (pkg / "__init__.py").write_text("")
    found = layer_edges(tmp_path)
    assert found[("high", "low")] == [f"{PACKAGE}/high/mod.py:2 imports canal_core.low"]
    assert find_cycle(as_graph(found)) in (["high", "low", "high"], ["low", "high", "low"])
