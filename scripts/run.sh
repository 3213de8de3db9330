#!/usr/bin/env bash
# The main job: the Dagster pipeline keeping Delta Lake mirrors of the demo shop (canal_demo on the private
# MariaDB) in step through a canal_core instance, with a steady demo workload.
#
#   scripts/run.sh               dagster dev on http://127.0.0.1:3000, the canal sensor on; Ctrl-C stops
#   scripts/run.sh --headless    workload for 60 s, then waits until every mirror equals its source and
#                                prints source and mirror row counts side by side (exit 0 when equal)
#   scripts/run.sh --reset ...   drop the demo schema and all pipeline state first
#
# Everything else: python -m pipelines.main --help.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/setup.sh
export DAGSTER_HOME="${DAGSTER_HOME:-$ROOT/dagster_home}"
# the private MariaDB's port (scripts/mariadb.sh may have moved it off a busy 3407 under CI): Canal's config
# takes exact key names from the environment, so every process of the pipeline sees the same source
PORT="$(scripts/mariadb.sh port primary)"
exec env "canal.instance.master.address=127.0.0.1:$PORT" .venv/bin/python -m pipelines.main "$@"
