"""The tests' own layout: no test module imports another test module. What several modules share (staged-window
writers, server processes, browsers, type rows) lives in tests/support/ or in a helper module beside its users
(a name without the ``test_`` prefix), so running, moving or deleting one test module never changes another.
Imports are read with ``ast``, at every level of a module."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
    return out


def _is_test_module(module: str) -> bool:
    """A module pytest collects as tests: its last dotted part starts with test_."""
    return module.rsplit(".", 1)[-1].startswith("test_")


def test_no_test_module_imports_another() -> None:
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        for line, module in _imported(ast.parse(path.read_text(), str(path))):
            if _is_test_module(module):
                offenders.append(f"{path.relative_to(TESTS.parent)}:{line} imports {module}")
    assert not offenders, "move what is shared to tests/support/ or a helper module:\n" + "\n".join(offenders)


def test_the_check_sees_both_import_forms() -> None:
    tree = ast.parse("import tests.integration.test_lake\nfrom test_sink import Stream\n"
                     "def f():\n    from tests.unit.test_sink import feed\n")
    found = [m for _, m in _imported(tree) if _is_test_module(m)]
    assert found == ["tests.integration.test_lake", "test_sink", "tests.unit.test_sink"]


def test_the_schedule_names_modules_that_exist() -> None:
    # a renamed module would silently lose its place at the front of the schedule (tests/support/schedule.py)
    from tests.support.schedule import LONGEST_FIRST, module_rank

    missing = [m for m in LONGEST_FIRST if not (TESTS.parent / m).is_file()]
    assert not missing, f"tests/support/schedule.py names modules that do not exist: {missing}"
    longest = max(LONGEST_FIRST, key=lambda m: LONGEST_FIRST[m])
    assert module_rank(f"{longest}::test_x") == 0 and module_rank(f"{longest}::test_y") == 0
    assert module_rank("tests/unit/test_not_listed.py::test_x") == len(LONGEST_FIRST)
