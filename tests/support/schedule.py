"""The order the suite's modules start in: the longest first.

scripts/test.sh runs each test module whole on one of two pytest-xdist workers, in collection order
(`--no-loadscope-reorder`), a worker taking the next module when it is done. Started last, a long module
leaves the other worker idle at the end; started first, the many short modules even the two out behind it
(longest-processing-time-first scheduling). The modules below are the longest, by their time in a full run of
the suite on the 2-core machine (seconds, rounded; both workers busy); any other module follows them in
collection order. A stale list costs only balance, never a test."""

from __future__ import annotations

LONGEST_FIRST: dict[str, int] = {
    "tests/integration/test_lake.py": 691,
    "tests/integration/test_spark_connect.py": 541,
    "tests/integration/test_pipeline_e2e.py": 385,
    "tests/integration/test_chaos.py": 247,
    "tests/integration/test_backfill_live.py": 243,
    "tests/integration/test_pipeline_keyless.py": 212,
    "tests/integration/test_run_command.py": 179,
    "tests/integration/test_lake_keyless.py": 142,
    "tests/integration/test_main_job.py": 129,
    "tests/integration/test_pipeline_ui_backfill.py": 127,
    "tests/integration/test_ui_source_failure.py": 122,
    "tests/integration/test_pipeline_rename.py": 118,
    "tests/unit/test_fuzz.py": 99,
    "tests/integration/test_pipeline_cluster.py": 98,
    "tests/integration/test_pipeline_remote.py": 89,
    "tests/integration/test_run_launcher.py": 83,
    "tests/integration/test_ha.py": 59,
    "tests/integration/test_delta_smoke.py": 57,
    "tests/integration/test_pipeline_materialize.py": 54,
    "tests/integration/test_server_combined_attack.py": 52,
}


def module_rank(nodeid: str) -> int:
    """Sort key of a test by its module: the longest modules first, in LONGEST_FIRST's order."""
    module = nodeid.split("::", 1)[0]
    ranked = sorted(LONGEST_FIRST, key=lambda m: -LONGEST_FIRST[m])
    return ranked.index(module) if module in LONGEST_FIRST else len(ranked)
