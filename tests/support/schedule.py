"""The order the suite's modules start in: the longest first.

scripts/test.sh runs each test module whole on one of two pytest-xdist workers, in collection order
(`--no-loadscope-reorder`), a worker taking the next module when it is done. Started last, a long module
leaves the other worker idle at the end; started first, the many short modules even the two out behind it
(longest-processing-time-first scheduling). The modules below are the longest, by their time in a full run of
the suite on the 2-core machine (seconds, rounded; from a run of 32 min, with the modules added since estimated);
any other module follows them in collection order. A stale list costs only balance, never a test."""

from __future__ import annotations

LONGEST_FIRST: dict[str, int] = {
    "tests/integration/test_backfill_live.py": 378,
    "tests/integration/test_spark_connect.py": 305,
    "tests/integration/test_chaos.py": 298,
    "tests/integration/test_pipeline_e2e.py": 288,
    "tests/integration/test_lake.py": 278,
    "tests/integration/test_run_command.py": 207,
    "tests/integration/test_pipeline_keyless.py": 135,
    "tests/integration/test_ui_source_failure.py": 131,
    "tests/integration/test_pipeline_ui_backfill.py": 120,
    "tests/integration/test_chunked_snapshot.py": 115,
    "tests/integration/test_pipeline_destinations.py": 110,
    "tests/integration/test_pipeline_rename.py": 104,
    "tests/integration/test_run_launcher.py": 87,
    "tests/integration/test_main_job.py": 80,
    "tests/integration/test_pipeline_remote.py": 79,
    "tests/integration/test_server_combined_attack.py": 79,
    "tests/integration/test_lake_keyless.py": 78,
    "tests/integration/test_ha.py": 68,
    "tests/integration/test_pipeline_cluster.py": 61,
    "tests/unit/test_fuzz.py": 51,
    "tests/integration/test_spark_cluster.py": 46,
    "tests/integration/test_dagster_ui.py": 43,
    "tests/integration/test_pipeline_config_edits.py": 42,
    "tests/integration/test_pipeline_materialize.py": 41,
}


_RANK = {m: i for i, m in enumerate(sorted(LONGEST_FIRST, key=lambda m: -LONGEST_FIRST[m]))}


def module_rank(nodeid: str) -> int:
    """Sort key of a test by its module: the longest modules first, then every other module."""
    return _RANK.get(nodeid.split("::", 1)[0], len(_RANK))
