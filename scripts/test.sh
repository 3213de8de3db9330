#!/usr/bin/env bash
# The project's test command (README.md, .ci/run): setup, lint, type check, then the whole pytest suite.
#   scripts/test.sh [pytest args...]
# Fails on any lint or type error, test failure or error, and when pytest collects nothing (exit code 5).
# The 25 slowest tests are listed at the end, to keep an eye on the suite time.
# The tests run in CANAL_TEST_WORKERS (default 2) pytest-xdist workers, each test module whole on one worker, each
# worker with MariaDB instances of its own (tests/support/instances.py), the longest modules first
# (tests/support/schedule.py); `-n 0` runs them in this process.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

scripts/setup.sh
.venv/bin/ruff check .
# the type checker: its settings and the checked packages are in pyproject.toml ([tool.mypy]); 0 errors is green
.venv/bin/mypy

rc=0
.venv/bin/python -m pytest -q --durations=25 -n "${CANAL_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@" || rc=$?
if (( rc == 5 )); then
    echo "test.sh: pytest collected no tests (exit code 5): that is a failure" >&2
elif (( rc != 0 )); then
    echo "test.sh: pytest failed (exit code $rc)" >&2
fi
exit "$rc"
