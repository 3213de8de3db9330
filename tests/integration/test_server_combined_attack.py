"""The combined attack (hostile_attack.py) in its CI size: 2,000 idle connections, 10,000 failed logins with
random destination names, a catastrophic-backtracking subscription filter, a blocking GET on a full store and
100 slow /metrics scrapers, while an honest client streams rows from MariaDB (about a minute)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.hostile_attack import BAD_FILTER, Sizes, run_attack

pytestmark = pytest.mark.integration

RSS_BOUND_MB = 300  # measured: ~60 MB at start, ~100 MB at the peak of the attack
METRICS_BOUND = 100_000  # bytes of one /metrics page


def test_combined_attack_leaves_the_honest_client_served(mariadb_settings: Any, tmp_path: Path) -> None:
    fig = run_attack(mariadb_settings.port, mariadb_settings.admin_kwargs(), tmp_path, Sizes())
    print(fig)
    assert not fig.errors, f"with {BAD_FILTER} subscribed and the rest: {fig.errors}"
    assert fig.server_alive
    assert fig.rows_got == fig.rows_expected >= 5000 and fig.in_order, "the honest client missed rows"
    assert fig.get_p99_ms < 1000, f"honest get p99 {fig.get_p99_ms} ms"
    assert fig.rss_max_mb < RSS_BOUND_MB, f"server RSS peaked at {fig.rss_max_mb} MB"
    assert 0 < fig.metrics_max_bytes < METRICS_BOUND, f"/metrics reached {fig.metrics_max_bytes} bytes"
    assert fig.failed_logins == 10_000 and fig.idle_opened == 2000
    assert fig.stuck_get_batches >= 1  # the full store answered the first blocking GET, then it waits
