#!/usr/bin/env bash
# The chaos suite: the main job (python -m pipelines.cli.main) on a MariaDB instance of its own, under a logged
# workload and seeded faults (SIGKILL of the code server, a run worker, a run's Spark JVM, the daemon, the
# webserver, the whole process tree; restarts of the source); then it waits for the pipeline to converge by itself
# and checks that nothing was lost, doubled or corrupted (docs/pipeline.md, "Chaos").
#
#   scripts/chaos.sh [--minutes 10] [--faults 20] [--seed S] [--rate 8] [--kinds k1,k2] [--dir .runtime/chaos]
#                    [--instance chaos] [--mariadb-port P] [--converge-seconds 600]
#
# Exit 0 only when every check holds. Everything else: python -m tests.chaos --help.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/setup.sh
exec .venv/bin/python -m tests.chaos "$@"
