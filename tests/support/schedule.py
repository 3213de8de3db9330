"""The order the suite's modules start in: the longest first.

scripts/test.sh runs each test module whole on one of two pytest-xdist workers, in collection order
(`--no-loadscope-reorder`), a worker taking the next module when it is done. Started last, a long module
leaves the other worker idle at the end; started first, the many short modules even the two out behind it
(longest-processing-time-first scheduling). The modules below are the longest, by their time in a full run of
the suite on the 2-core machine (seconds, rounded; that run took 25 min, its two workers finished 10 s apart);
any other module follows them in collection order. A stale list costs only balance, never a test."""

from __future__ import annotations

LONGEST_FIRST: dict[str, int] = {
    "tests/integration/test_spark_connect.py": 309,
    "tests/integration/test_lake.py": 296,
    "tests/integration/test_backfill_live.py": 244,
    "tests/integration/test_chaos.py": 241,
    "tests/integration/test_pipeline_e2e.py": 232,
    "tests/integration/test_run_command.py": 144,
    "tests/integration/test_run_launcher.py": 109,
    "tests/integration/test_main_job.py": 108,
    "tests/integration/test_pipeline_keyless.py": 104,
    "tests/integration/test_ui_source_failure.py": 99,
    "tests/integration/test_pipeline_ui_backfill.py": 98,
    "tests/integration/test_lake_keyless.py": 77,
    "tests/integration/test_pipeline_rename.py": 69,
    "tests/integration/test_server_combined_attack.py": 63,
    "tests/integration/test_ha.py": 60,
    "tests/integration/test_pipeline_remote.py": 48,
    "tests/integration/test_pipeline_cluster.py": 44,
    "tests/integration/test_pipeline_materialize.py": 40,
    "tests/integration/test_pipeline_config_edits.py": 34,
    "tests/unit/test_fuzz.py": 31,
}


_RANK = {m: i for i, m in enumerate(sorted(LONGEST_FIRST, key=lambda m: -LONGEST_FIRST[m]))}


def module_rank(nodeid: str) -> int:
    """Sort key of a test by its module: the longest modules first, then every other module."""
    return _RANK.get(nodeid.split("::", 1)[0], len(_RANK))
