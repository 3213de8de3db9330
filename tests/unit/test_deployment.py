"""pipelines.cli.deployment: the main job refuses to start over another one's code server socket or a taken UI or
Spark port (before it resets anything), clears the socket file a killed code server left, and supervises a Spark
Connect server for its runs unless the pipeline config gives them their Spark."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from pipelines.cli.deployment import (
    CODE_SERVER,
    DAEMON,
    SPARK,
    SPARK_REMOTE_VARIABLE,
    STOP_STAGES,
    WEBSERVER,
    DeploymentError,
    Layout,
    SparkServer,
    build,
    check_free,
)
from pipelines.cli.main import spark_server_for
from pipelines.cli.supervisor import Supervisor
from pipelines.engine.config import load_config
from tests.support.net import free_port


def test_a_live_code_server_socket_means_another_main_job(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "pipeline")
    layout.root.mkdir()
    with socket.socket(socket.AF_UNIX) as live:
        live.bind(str(layout.socket))
        live.listen(1)
        with pytest.raises(DeploymentError, match=r"code-server\.sock answers: another main job runs"):
            check_free(layout, free_port())
        assert layout.socket.exists()


def test_a_dead_code_server_socket_is_cleared(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "pipeline")
    layout.root.mkdir()
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(layout.socket))  # never listening: what a SIGKILLed server leaves
    check_free(layout, free_port())
    assert not layout.socket.exists()


def test_a_taken_ui_port_is_refused(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(DeploymentError, match=rf"port {port} on 127\.0\.0\.1 \(the UI\) is taken.*--port"):
            check_free(Layout(tmp_path / "pipeline"), port)


# ---- the main job's Spark: its own Connect server unless the config says otherwise ----

def _cfg(tmp_path: Path, spark: str) -> Any:
    (tmp_path / "pipeline.yaml").write_text(f"destination: demo\nspark: {spark}\n")
    return load_config(tmp_path / "pipeline.yaml", env={}, check_canal=False)


def test_the_main_job_supervises_a_spark_server_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CANAL_SPARK_DRIVER_MEMORY", raising=False)
    server = spark_server_for(_cfg(tmp_path, "{master: 'local[2]', conf: {spark.sql.ansi.enabled: 'false'}}"), "server")
    assert server is not None and server.master == "local[2]" and server.url == f"sc://127.0.0.1:{server.port}"
    assert server.conf == {"spark.driver.memory": "2g", "spark.sql.ansi.enabled": "false"}
    monkeypatch.setenv("CANAL_SPARK_DRIVER_MEMORY", "3g")
    server = spark_server_for(_cfg(tmp_path, "{master: 'local[2]'}"), "server")
    assert server is not None and server.conf["spark.driver.memory"] == "3g"
    server = spark_server_for(_cfg(tmp_path, "{master: 'local[2]', conf: {spark.driver.memory: 4g}}"), "server")
    assert server is not None and server.conf["spark.driver.memory"] == "4g"


@pytest.mark.parametrize(("spark", "mode"), [
    ("{master: 'local[2]'}", "per-run"),                          # asked for
    ("{master: 'local[2]', remote: 'sc://10.0.0.5:15002'}", "server"),  # a server of the user's own
    ("{master: 'spark://10.0.0.5:7077'}", "per-run"),             # a cluster, each run its own application
])
def test_no_spark_server_when_the_runs_have_their_spark(tmp_path: Path, spark: str, mode: str) -> None:
    assert spark_server_for(_cfg(tmp_path, spark), mode) is None


def test_with_a_cluster_master_the_spark_server_is_the_clusters_application(tmp_path: Path) -> None:
    server = spark_server_for(_cfg(tmp_path, "{master: 'spark://10.0.0.5:7077', conf: {spark.cores.max: '4'}}"),
                              "server")
    assert server is not None and server.master == "spark://10.0.0.5:7077"
    assert server.conf["spark.cores.max"] == "4"


def test_the_spark_server_is_a_supervised_service_the_daemon_waits_for(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "pipeline")
    sup = Supervisor(lambda _: None, tmp_path)
    server = SparkServer(free_port(), "local[2]", {"spark.driver.memory": "2g"})
    build(sup, layout, {"PATH": "/usr/bin", SPARK_REMOTE_VARIABLE: "sc://elsewhere:1"}, free_port(), None, False,
          spark=server)
    spark = sup.services[SPARK]
    assert "org.apache.spark.sql.connect.service.SparkConnectServer" in spark.argv
    assert f"spark.connect.grpc.binding.port={server.port}" in spark.argv and "2g" in spark.argv
    assert spark.env is not None and SPARK_REMOTE_VARIABLE not in spark.env
    assert "-Dlog4j2.configurationFile=" in spark.env["SPARK_SUBMIT_OPTS"]
    assert (layout.spark / "log4j2.properties").read_text().count("DeltaParquetFileFormat") == 1
    for name in (CODE_SERVER, DAEMON, WEBSERVER):  # every Dagster process and its runs get the server's URL
        assert sup.services[name].env is not None and sup.services[name].env[SPARK_REMOTE_VARIABLE] == server.url
    assert sup.services[DAEMON].after == (CODE_SERVER, SPARK) and sup.services[DAEMON].stops_with
    assert SPARK in [n for stage in STOP_STAGES for n in stage]
    # without a server: a JVM per run, the daemon waits for the code server only
    sup2 = Supervisor(lambda _: None, tmp_path)
    build(sup2, Layout(tmp_path / "other"), {"PATH": "/usr/bin"}, free_port(), None, False)
    assert SPARK not in sup2.services and sup2.services[DAEMON].after == (CODE_SERVER,)
    assert SPARK_REMOTE_VARIABLE not in (sup2.services[CODE_SERVER].env or {})


def test_a_taken_spark_port_is_refused(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(DeploymentError, match=rf"port {port} on 127\.0\.0\.1 \(the Spark Connect server\)"):
            build(Supervisor(lambda _: None, tmp_path), Layout(tmp_path / "p"), {}, free_port(), None, False,
                  spark=SparkServer(port, "local[2]", {}))
