"""pipelines.engine.lake.delta_log: reading the Delta log through py4j on a session that has no py4j gateway."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from pipelines.engine.lake.delta_log import _delta_log
from pipelines.engine.lake.layout import LakeError


def test_reading_the_log_through_py4j_without_a_gateway_is_a_lake_error() -> None:
    session: Any = SimpleNamespace(_jvm=None, _jsparkSession=None)
    with pytest.raises(LakeError, match="/lake/mirror/s/t: no py4j gateway"):
        _delta_log(session, "/lake/mirror/s/t")
