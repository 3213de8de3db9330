"""Dagster resources: Spark (lazy, one session per run process), the lake location, and the per-run inputs
the sensor passes through run config (the staged window and snapshot catch-ups).

The Canal connection is not a run resource: it lives in the code server with the sensor
(``pipelines.source``); runs only read what the sensor staged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dagster import ConfigurableResource, InitResourceContext
from pydantic import Field, PrivateAttr

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

    from .config import PipelineConfig
    from .lake import Lake


class SparkResource(ConfigurableResource):
    """A SparkSession built on first use (never at import or in the sensor) and stopped after the run.
    The window job runs in process, so all its assets share this one session."""

    master: str = "local[2]"
    app_name: str = "canal-pipeline"
    conf: dict[str, str] = Field(default_factory=dict)

    _session: Any = PrivateAttr(default=None)
    _owned: bool = PrivateAttr(default=False)

    def session(self) -> SparkSession:
        if self._session is None:
            from pyspark import SparkContext

            from canal_core.sparkenv import spark_session_builder

            # a session the process already has (a test's, an in-process run's host) is used and left running
            self._owned = SparkContext._active_spark_context is None
            self._session = spark_session_builder(self.app_name, self.master, dict(self.conf)).getOrCreate()
        return self._session

    @property
    def started(self) -> bool:
        return self._session is not None

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        if self._session is not None and self._owned:
            self._session.stop()
        self._session = None


class LakeResource(ConfigurableResource):
    """Where the Delta tables live: a local path or an object-store URI."""

    root: str

    def lake(self) -> Lake:
        from .lake import Lake

        return Lake(self.root)


class CanalWindowResource(ConfigurableResource):
    """The staged window a canal_window run applies (set by the sensor in run config, shown in the Launchpad).

    ``catch_up``: tables whose initial snapshot just landed -> the snapshot's binlog position; the run
    replays the binlog from there to the window's start for those tables before applying the window (with no
    window: up to ``catch_up_end``, the last applied position)."""

    path: str = Field(default="", description="the staged window directory (its manifest.json)")
    catch_up: dict[str, str] = Field(default_factory=dict,
                                     description="schema.table -> snapshot binlog position file:offset")
    catch_up_end: str = Field(default="", description="without a window: replay the catch-up up to here")


def resources_for(config: PipelineConfig) -> dict[str, Any]:
    return {
        "spark": SparkResource(master=config.spark.master, app_name=config.spark.app_name,
                               conf=dict(config.spark.conf)),
        "lake": LakeResource(root=config.lake_root),
        "canal_window": CanalWindowResource(),
    }
