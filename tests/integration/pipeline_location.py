"""A code location for Dagster workspaces in tests (GraphQL as the UI sends it, the backfill daemon, runs and
their step processes): ``defs`` is built from the pipeline config (JSON, as ``conf/pipeline.yaml`` would hold
it) named by ``$CANAL_TEST_PIPELINE_JSON``, the way ``pipelines.defs.definitions`` builds them from
``$CANAL_PIPELINE_CONF``. Dagster loads it by module and attribute; a step's child process imports it afresh and
finds the same config through its inherited environment.

Dagster caches what it loaded by module and attribute within a process, so each config is served under an
attribute of its own (``attribute(path)``: ``defs_<digest of the path>``): a run executed in this process by a
later test gets that test's definitions, not the first test's.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

ENV = "CANAL_TEST_PIPELINE_JSON"
_built: dict[str, Any] = {}


def attribute(path: str | os.PathLike[str]) -> str:
    """The attribute that serves the config at ``path``."""
    return "defs_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]


def __getattr__(name: str) -> Any:
    if name != "defs" and not name.startswith("defs_"):
        raise AttributeError(name)
    path = os.environ.get(ENV)
    if not path:
        raise AttributeError(f"{__name__}.{name}: set ${ENV} to a pipeline config (JSON) first")
    if name != "defs" and name != attribute(path):
        raise AttributeError(f"{__name__}.{name} does not serve ${ENV}={path} (that is {attribute(path)})")
    if path not in _built:
        from pipelines.defs.definitions import build_definitions
        from pipelines.engine.config import parse_config

        _built[path] = build_definitions(parse_config(json.loads(Path(path).read_text()), base_dir=Path(path).parent))
    return _built[path]
