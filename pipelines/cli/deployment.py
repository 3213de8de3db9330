"""The processes of the main job (pipelines/cli/main.py): Dagster's production topology on one host, each process
supervised (pipelines/cli/supervisor.py).

* ``code server``: ``dagster api grpc -m pipelines.defs.definitions`` on a unix socket. It evaluates the canal sensor,
  so it hosts the destination's embedded Canal instance, and it starts each run in a worker process of its own.
* ``webserver`` (the UI) and ``daemon`` (sensor ticks, the run queue, run monitoring): pointed at the code server by
  a generated workspace file with one ``grpc_server`` entry, named as workspace.yaml's ``python_module`` entry is
  (``pipelines.definitions``), so the sensor's state and the runs' history carry over between the two.
* ``spark``: a Spark Connect server (the config's master, Delta from the jar cache) that every run attaches to, so a
  run starts no JVM of its own and the server's JIT stays warm across windows; with a cluster master it is the
  cluster's application, whose executors stay up between windows. The code server, the daemon and their run
  workers get its URL as CANAL_PIPELINE_SPARK_REMOTE. Left out when the pipeline config names a Spark Connect
  server (spark.remote), or with ``--spark per-run`` (a JVM per run, in the worker).
* ``workload``: the demo workload (pipelines/cli/demo.py); its lines (source outages) are shown on the terminal.

Why not ``dagster dev``: its code server is a proxy that spawns the real one and never restarts it, so after a
SIGKILL of the real one every sensor tick fails until someone reloads the code location.

A killed code server is restarted (backoff 1, 2, 4 ... s) and the canal source comes back with it on the next
tick. The daemon is stopped while the code server or the Spark server is down and started again once both
serve, with the workspace loaded afresh: kept running, it would evaluate the sensor against the dead or still
loading code server, and a failed evaluation puts the next one a whole sensor interval later (bench/recovery.py
compares both). The webserver stays up: it watches the code server and reloads the location itself. A killed
Spark server is restarted the same way; a run that was using it fails as an infrastructure fault and its window
is retried. Run workers survive their code server and finish their run; one whose worker is gone is failed by
run monitoring (pipelines/defs/launcher.py), and a run the daemon could not hand to the code server goes back
into the queue (dagster_home/dagster.yaml).
"""

from __future__ import annotations

import hashlib
import socket
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..engine.config import REPO_ROOT
from .supervisor import Service, Supervisor

# workspace.yaml's location_name: Dagster keys the sensor's state and the run history by it, so it stays put when
# the module moves
LOCATION_NAME = "pipelines.definitions"
CODE_SERVER, WEBSERVER, DAEMON, WORKLOAD, SPARK = "code server", "webserver", "daemon", "workload", "spark"
# stop order: nothing new is launched or written while the code server, its run workers and Spark stop
STOP_STAGES = [[WORKLOAD, DAEMON], [CODE_SERVER, WEBSERVER, SPARK]]
SPARK_REMOTE_VARIABLE = "CANAL_PIPELINE_SPARK_REMOTE"
BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Layout:
    """Where the main job keeps its files: beside the pipeline's state directory (paths.state)."""

    root: Path

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def workspace(self) -> Path:
        return self.root / "workspace.yaml"

    @property
    def spark(self) -> Path:
        return self.root / "spark-connect"

    @property
    def socket(self) -> Path:
        path = self.root / "code-server.sock"
        if len(str(path)) > 100:  # AF_UNIX paths are limited to ~107 bytes
            digest = hashlib.sha1(str(self.root).encode()).hexdigest()[:12]
            path = Path(f"/tmp/canal-code-server-{digest}.sock")
        return path


def write_workspace(layout: Layout) -> Path:
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.workspace.write_text(
        "# Written by the main job (pipelines/cli/deployment.py) at every start: the supervised code server.\n"
        + yaml.safe_dump({"load_from": [{"grpc_server": {"socket": str(layout.socket),
                                                          "location_name": LOCATION_NAME}}]}))
    return layout.workspace


def code_server_serving(socket: Path) -> bool:
    from ..defs.dagster_compat import code_server_answers

    return code_server_answers(str(socket))


def webserver_serving(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=3) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def port_listens(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass(frozen=True)
class SparkServer:
    """The supervised Spark Connect server: its port on 127.0.0.1, master and extra settings (spark.conf)."""

    port: int
    master: str
    conf: dict[str, str]

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"


def spark_service(layout: Layout, server: SparkServer, env: dict[str, str]) -> Service:
    """The Connect server as a supervised service: pyspark's spark-submit in the foreground (it execs the JVM), its
    console in logs/spark-connect.log, ready once its gRPC port accepts connections (the server opens it after
    its SparkSession is up; a run that still finds it not serving fails as an infrastructure fault and is
    retried)."""
    from ..engine.sparkenv import connect_server_argv, connect_server_env

    layout.spark.mkdir(parents=True, exist_ok=True)
    argv = connect_server_argv(server.port, server.master, server.conf, app_name="canal-pipeline-connect")
    spark_env = {**env, **connect_server_env(layout.spark / "log4j2.properties")}
    spark_env.pop(SPARK_REMOTE_VARIABLE, None)
    return Service(SPARK, argv, layout.logs / "spark-connect.log", spark_env, ready=lambda: port_listens(server.port),
                   stop_seconds=15.0)


class DeploymentError(RuntimeError):
    """The main job cannot start its processes here: the message says what is in the way."""


def check_free(layout: Layout, ui_port: int) -> None:
    """Nothing else serves the code server's socket (another main job on the same pipeline config) or the UI port."""
    sock = layout.socket
    if sock.exists():
        with socket.socket(socket.AF_UNIX) as s:
            if s.connect_ex(str(sock)) == 0:
                raise DeploymentError(f"{sock} answers: another main job runs with this pipeline configuration "
                                      f"(paths.state {layout.root / 'state'}); stop it first")
        sock.unlink()  # left by a code server that was killed
    if port_listens(ui_port):
        raise DeploymentError(f"port {ui_port} on 127.0.0.1 (the UI) is taken by another process: "
                              "choose another with --port")


def build(sup: Supervisor, layout: Layout, env: dict[str, str], ui_port: int, workload: list[str] | None,
          workload_ends: bool, spark: SparkServer | None = None) -> None:
    """The pipeline's services on ``sup`` (not started). ``workload``: None for none (another writer feeds the
    source). ``workload_ends``: the workload stops by itself (--seconds); its clean exit is then not restarted.
    ``spark``: a Spark Connect server to supervise for the runs; None: each run starts its own Spark (or attaches
    to the config's spark.remote). DeploymentError when check_free fails."""
    check_free(layout, ui_port)
    if spark is not None and port_listens(spark.port):
        raise DeploymentError(f"port {spark.port} on 127.0.0.1 (the Spark Connect server) is taken by another "
                              "process")
    write_workspace(layout)
    daemon_after: tuple[str, ...] = (CODE_SERVER,)
    if spark is not None:
        sup.add(spark_service(layout, spark, env))
        env = {**env, SPARK_REMOTE_VARIABLE: spark.url}
        daemon_after = (CODE_SERVER, SPARK)
    sock = layout.socket
    ws = str(layout.workspace)
    sup.add(Service(CODE_SERVER, [str(BIN / "dagster"), "api", "grpc", "-m", "pipelines.defs.definitions",
                                  "-d", str(REPO_ROOT), "--socket", str(sock), "--location-name", LOCATION_NAME],
                    layout.logs / "code-server.log", env, ready=lambda: code_server_serving(sock)))
    sup.add(Service(WEBSERVER, [str(BIN / "dagster-webserver"), "-w", ws, "-h", "127.0.0.1", "-p", str(ui_port)],
                    layout.logs / "webserver.log", env, ready=lambda: webserver_serving(ui_port), after=(CODE_SERVER,)))
    sup.add(Service(DAEMON, [str(BIN / "dagster-daemon"), "run", "-w", ws], layout.logs / "daemon.log", env,
                    after=daemon_after, stops_with=True))
    if workload is None:
        return
    sup.add(Service(WORKLOAD, workload, layout.logs / "workload.log", env, echo=True, done_on_success=workload_ends,
                    stop_seconds=10.0))
