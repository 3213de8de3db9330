"""The layout of pipelines/: the engine package (Delta Lake writes, staging, replay, the sensor's state machine)
runs without Dagster, so it imports neither dagster nor the Dagster definitions nor the command-line entry points;
and no two modules share a name. Imports are read with ast, so an import inside a function counts too."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

PIPELINES = Path(__file__).resolve().parents[2] / "pipelines"
ENGINE = PIPELINES / "engine"
FORBIDDEN = ("dagster", "dagster_", "pipelines.defs", "pipelines.cli")


def module_name(path: Path) -> str:
    parts = path.relative_to(PIPELINES.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, relative imports resolved against its package."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.add(target)
            out.update(f"{target}.{alias.name}" for alias in node.names)
    return out


def forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") or (f.endswith("_") and name.startswith(f)) for f in FORBIDDEN)


def test_imported_modules_resolves_relative_imports() -> None:
    # the reading the rule below depends on, on a module whose relative imports are known
    got = imported_modules(ENGINE / "lake" / "mirror.py")
    assert "pipelines.engine.lake.layout" in got
    assert "pipelines.engine.keyless" in got
    assert forbidden("dagster._core.storage") and forbidden("pipelines.defs.sensor") and forbidden("dagster_webserver")
    assert not forbidden("pipelines.engine.lake") and not forbidden("dagsterish")


def test_engine_imports_neither_dagster_nor_definitions_nor_cli() -> None:
    files = sorted(ENGINE.rglob("*.py"))
    assert len(files) > 10, f"no engine modules under {ENGINE}"
    bad = {f"{f.relative_to(PIPELINES.parent)}: {name}"
           for f in files for name in imported_modules(f) if forbidden(name)}
    assert not bad, "the engine must run without Dagster:\n" + "\n".join(sorted(bad))


def test_no_two_pipeline_modules_share_a_name() -> None:
    names = Counter(p.stem for p in PIPELINES.rglob("*.py") if p.name != "__init__.py")
    assert [n for n, c in names.items() if c > 1] == []
