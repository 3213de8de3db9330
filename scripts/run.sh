#!/usr/bin/env bash
# The main job: the Dagster pipeline keeping Delta Lake mirrors of the demo shop (canal_demo on the private
# MariaDB) in step through a canal_core instance, with a steady demo workload.
#
#   scripts/run.sh               the pipeline (UI on http://127.0.0.1:3000), the canal sensor on, every
#                                process supervised; Ctrl-C or SIGTERM stops everything
#   scripts/run.sh --headless    workload for 60 s, then waits until every mirror equals its source and
#                                prints source and mirror row counts side by side (exit 0 when equal)
#   scripts/run.sh --reset ...   drop the demo schema and all pipeline state first
#
# Everything else: python -m pipelines.cli.main --help.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/setup.sh
export DAGSTER_HOME="${DAGSTER_HOME:-$ROOT/dagster_home}"
# exec: the Python process is the one a SIGTERM / Ctrl-C reaches; it stops everything it started. It reads the
# private MariaDB's port from its my.cnf itself (conf/demo/instance.properties: PRIVATE_MARIADB_PORT).
exec .venv/bin/python -m pipelines.cli.main "$@"
