"""Dagster resources: Spark (lazy, one session per run process), the lake location, and the per-run inputs
the sensor passes through run config (the staged window and snapshot catch-ups).

The Canal connection is not a run resource: it lives in the code server with the sensor
(``pipelines.engine.source``); runs only read what the sensor staged.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from dagster import ConfigurableResource, InitResourceContext
from pydantic import Field, PrivateAttr

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

    from ..engine.config import PipelineConfig
    from ..engine.lake import Lake


class SparkResource(ConfigurableResource):
    """A SparkSession built on first use (never at import or in the sensor) and stopped after the run.
    The window job runs in process, so all its assets share this one session.

    ``remote`` (spark.remote): a Spark Connect URL; the session is then a Connect client of that long-lived server
    (no JVM in the run process, the server's warm Delta caches and JIT), ``master`` is the server's business and
    only runtime SQL settings of ``conf`` apply (per session). Stopping it releases the server-side session and
    leaves the server running."""

    master: str = "local[2]"
    app_name: str = "canal-pipeline"
    conf: dict[str, str] = Field(default_factory=dict)
    remote: str = ""

    _session: Any = PrivateAttr(default=None)
    _owned: bool = PrivateAttr(default=False)
    _started_at: float = PrivateAttr(default=0.0)

    def session(self) -> SparkSession:
        if self._session is None:
            if self.remote:
                self._session = self._remote_session()
            else:
                from pyspark import SparkContext

                from pipelines.engine.sparkenv import quiet_delta_scan_noise, spark_session_builder

                # a session the process already has (a test's, an in-process run's host) is used and left running
                self._owned = SparkContext._active_spark_context is None
                self._session = spark_session_builder(self.app_name, self.master, dict(self.conf)).getOrCreate()
                quiet_delta_scan_noise(self._session)
                self._started_at = self._session.sparkContext.startTime / 1000
        return self._session

    def _remote_session(self) -> SparkSession:
        import logging

        from pyspark.sql import SparkSession
        from pyspark.sql.connect.session import SparkSession as RemoteSession

        from pipelines.engine.sparkenv import check_connect_reachable

        check_connect_reachable(self.remote)
        self._owned = RemoteSession.getActiveSession() is None
        # (the classic builder with .remote() also switches pyspark.sql.functions to their Connect versions)
        session = SparkSession.builder.remote(self.remote).getOrCreate()
        session.version   # noqa: B018 - the first round trip: the server-side session exists from here on
        server_level = []
        for key, value in self.conf.items():
            if session.conf.isModifiable(key):
                session.conf.set(key, value)
            else:
                server_level.append(key)
        if server_level:
            logging.getLogger(__name__).info(
                "spark.conf %s: server-level settings, fixed when the Spark Connect server started (the main job "
                "starts its server with spark.conf; scripts/spark-connect.sh start --conf KEY=VALUE), not per "
                "session", ", ".join(sorted(server_level)))
        self._started_at = time.time()
        return session

    @property
    def started(self) -> bool:
        return self._session is not None

    @property
    def started_at(self) -> float:
        """When this run's Spark became usable (epoch seconds): the SparkContext's start on a classic session,
        the session's creation on Spark Connect."""
        self.session()
        return self._started_at

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        if self._session is not None and self._owned:
            self._session.stop()   # on Connect: releases this session only, the server keeps running
        self._session = None


class LakeResource(ConfigurableResource):
    """Where the Delta tables live: a local path or an object-store URI."""

    root: str
    deletion_vectors: bool = Field(default=True, description="new mirrors get Delta deletion vectors")

    def lake(self, subdir: str = "") -> Lake:
        """The lake at ``root``, or at ``root``/``subdir``: a destination's own when several share the code
        location (PipelineConfig.lake_subdir), so one resource serves them all."""
        from ..engine.lake import Lake

        return Lake(f"{self.root.rstrip('/')}/{subdir}" if subdir else self.root, self.deletion_vectors)


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
                               conf=dict(config.spark.conf), remote=config.spark.remote),
        "lake": LakeResource(root=config.lake.root, deletion_vectors=config.lake.deletion_vectors),
        "canal_window": CanalWindowResource(),
    }
