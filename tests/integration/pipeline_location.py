"""A code location for Dagster workspaces in tests (GraphQL as the UI sends it, the backfill daemon, runs and
their step processes): ``defs`` is built from the pipeline config (JSON, as ``conf/pipeline.yaml`` would hold
it) named by ``$CANAL_TEST_PIPELINE_JSON``, the way ``pipelines.definitions`` builds them from
``$CANAL_PIPELINE_CONF``. Dagster loads it by module and attribute; a step's child process imports it afresh and
finds the same config through its inherited environment.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

ENV = "CANAL_TEST_PIPELINE_JSON"
_built: dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    if name != "defs":
        raise AttributeError(name)
    path = os.environ.get(ENV)
    if not path:
        raise AttributeError(f"{__name__}.defs: set ${ENV} to a pipeline config (JSON) first")
    if path not in _built:
        from pipelines.config import parse_config
        from pipelines.definitions import build_definitions

        _built[path] = build_definitions(parse_config(json.loads(Path(path).read_text()), base_dir=Path(path).parent))
    return _built[path]
