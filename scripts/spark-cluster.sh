#!/usr/bin/env bash
# A Spark standalone cluster on this machine: one master and N workers, each a JVM of its own, started from
# pyspark's own `spark-class` (no Spark download). Window runs then drive executors on the workers, as on a
# real cluster: the executors, not the run's driver, read the staged windows and write the Delta tables.
#
#   scripts/spark-cluster.sh start     # idempotent; waits until every worker has registered with the master;
#                                      # starts again a worker or master that died (the master recovers its
#                                      # workers and applications from recovery/: FILESYSTEM recovery mode)
#   scripts/spark-cluster.sh stop      # workers, then the master (SIGTERM, SIGKILL after the stop timeout)
#   scripts/spark-cluster.sh status    # exit 0 when the master answers with every worker ALIVE
#   scripts/spark-cluster.sh url       # spark://127.0.0.1:PORT: put it in conf/pipeline.yaml as spark.master
#
# Everything lives under <repo>/.runtime/spark-cluster/ (override: CANAL_SPARK_CLUSTER_DIR): pid files, ports,
# logs, the workers' directories (executors' stdout/stderr, cleaned by the worker once an application is old).
# Listens on 127.0.0.1 only; Spark's REST submission server is off (it would accept jobs from anyone who can
# reach the port).
#
#   CANAL_SPARK_CLUSTER_PORT         the master's port (else 7077 when free, else any free port)
#   CANAL_SPARK_CLUSTER_UI_PORT      the master's web UI, which also answers `status` (else 8080 when free, else any)
#   CANAL_SPARK_CLUSTER_WORKERS      how many worker JVMs (1)
#   CANAL_SPARK_WORKER_CORES         cores each worker offers (this machine's processors)
#   CANAL_SPARK_WORKER_MEMORY        memory each worker offers to executors (2g; an executor takes 1g by default)
#   CANAL_SPARK_CLUSTER_APP_CORES    cores one application takes when it does not say (spark.deploy.defaultCores;
#                                    default: all). The main job's Connect server is the one application by
#                                    default; with `--spark per-run` each run is one, and half the cores lets a
#                                    reconcile run get executors beside a window run instead of waiting for it
#
# The ports in use are recorded in the state directory; later starts keep them (the master's port taken by another
# process is then an error, never a move: everything configured with it would lose the cluster).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/service.sh
. "$ROOT/scripts/lib/service.sh"
DIR="${CANAL_SPARK_CLUSTER_DIR:-$ROOT/.runtime/spark-cluster}"
PIDFILE="$DIR/master.pid"
PORTFILE="$DIR/port"
UIFILE="$DIR/ui-port"
PY="$ROOT/.venv/bin/python"
START_TIMEOUT="${CANAL_SPARK_CLUSTER_START_TIMEOUT:-120}"
STOP_TIMEOUT="${CANAL_SPARK_CLUSTER_STOP_TIMEOUT:-30}"
WORKERS="${CANAL_SPARK_CLUSTER_WORKERS:-1}"
CORES="${CANAL_SPARK_WORKER_CORES:-$(nproc)}"
MEMORY="${CANAL_SPARK_WORKER_MEMORY:-2g}"

log() { echo "spark-cluster.sh: $*" >&2; }

usage() {
    echo "usage: $0 start|stop|status|url" >&2
    exit 2
}

[[ -x "$PY" ]] || { log "$PY not found: run scripts/setup.sh"; exit 1; }
[[ "$WORKERS" =~ ^[1-9][0-9]*$ ]] || { log "CANAL_SPARK_CLUSTER_WORKERS must be a positive integer, not '$WORKERS'"; exit 2; }
[[ "$CORES" =~ ^[1-9][0-9]*$ ]] || { log "CANAL_SPARK_WORKER_CORES must be a positive integer, not '$CORES'"; exit 2; }

recorded() { [[ -f "$1" ]] && tr -dc '0-9' <"$1" || true; }

# pid of our JVM with role $1 (master, worker-1, ...) from its pid file: only when its command line carries this
# directory's tag, so a recycled pid is never taken for ours
role_pid() {
    local pid cmdline
    [[ -f "$DIR/$1.pid" ]] || return 0
    pid="$(tr -dc '0-9' <"$DIR/$1.pid" || true)"
    [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 0
    cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
    if [[ "$cmdline" == *"-Dcanal.spark-cluster.role=$1 "* && "$cmdline" == *"-Dcanal.spark-cluster.dir=$DIR "* ]]; then
        echo "$pid"
    fi
}
server_pid() { role_pid master; }

# How many workers the master's JSON status lists as ALIVE (its web UI on port $1); 0 while the master itself is not
# ALIVE (RECOVERING after a restart), empty when it does not answer.
alive_workers() {
    timeout 10 "$PY" - "$1" <<'EOF' 2>/dev/null || true
import json, sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/json/", timeout=5) as r:
    status = json.load(r)
alive = sum(1 for w in status.get("workers", []) if w.get("state") == "ALIVE")
print(alive if status.get("status") == "ALIVE" else 0)
EOF
}

# True when the master on UI port $1 lists at least $WORKERS live workers
cluster_ready() {
    local n
    n="$(alive_workers "$1")"
    [[ -n "$n" && "$n" -ge "$WORKERS" ]]
}

log_tail() {
    local f
    for f in "$DIR"/master.log "$DIR"/worker-*.log; do
        [[ -f "$f" ]] || continue
        log "last lines of $f:"
        tail -n 25 "$f" >&2
    done
}

# launch ROLE CLASS ARGS...: a JVM of pyspark's spark-class, detached (setsid, stdin closed), tagged with ROLE and
# DIR so stop/status recognise it; spark-class execs java, so $! is the JVM's pid
launch() {
    local role="$1"
    shift
    (
        cd "$DIR"
        # executors inherit SPARK_LOCAL_DIRS (their shuffle and block files) from the worker
        export SPARK_HOME="$SPARK_HOME" SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON="$PY" SPARK_LOG_DIR="$DIR" \
            SPARK_LOCAL_DIRS="$DIR/local"
        export SPARK_DAEMON_JAVA_OPTS="${SPARK_DAEMON_JAVA_OPTS:-} -Dcanal.spark-cluster.role=$role \
-Dcanal.spark-cluster.dir=$DIR "
        exec setsid "$SPARK_HOME/bin/spark-class" "$@" </dev/null >>"$DIR/$role.log" 2>&1
    ) &
    echo "$!" >"$DIR/$role.pid"
}

do_start() {
    local pid port ui i
    SPARK_HOME="$("$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
    mkdir -p "$DIR/work" "$DIR/local" "$DIR/recovery"
    pid="$(role_pid master)"
    port="$(recorded "$PORTFILE")"
    ui="$(recorded "$UIFILE")"
    if [[ -z "$pid" ]]; then
        if [[ -n "$port" && -z "${CANAL_SPARK_CLUSTER_PORT:-}" ]] && port_busy "$port"; then
            # workers, executors and spark.master in the pipeline's config all name this port: never move silently
            log "port $port of this cluster (from $PORTFILE) is taken by another process: stop that process, or"
            log "move the cluster explicitly with CANAL_SPARK_CLUSTER_PORT=<free port> (and update spark.master)"
            exit 1
        fi
        if [[ -z "$port" || -n "${CANAL_SPARK_CLUSTER_PORT:-}" ]]; then
            port="$(pick_port CANAL_SPARK_CLUSTER_PORT 7077)"
        fi
        if [[ -z "$ui" ]] || port_busy "$ui"; then ui="$(pick_port CANAL_SPARK_CLUSTER_UI_PORT 8080)"; fi
        printf '%s\n' "$port" >"$PORTFILE"
        printf '%s\n' "$ui" >"$UIFILE"
        {
            echo "spark.master.rest.enabled false"
            [[ -z "${CANAL_SPARK_CLUSTER_APP_CORES:-}" ]] || echo "spark.deploy.defaultCores $CANAL_SPARK_CLUSTER_APP_CORES"
            echo "spark.worker.cleanup.enabled true"
            # a master started again (start after it died) recovers its workers and running applications from here
            echo "spark.deploy.recoveryMode FILESYSTEM"
            echo "spark.deploy.recoveryDirectory $DIR/recovery"
            echo "spark.ui.showConsoleProgress false"
        } >"$DIR/cluster.properties"
        log "starting the master on 127.0.0.1:$port (web UI 127.0.0.1:$ui, log: $DIR/master.log)"
        launch master org.apache.spark.deploy.master.Master --host 127.0.0.1 --port "$port" --webui-port "$ui" \
            --properties-file "$DIR/cluster.properties"
        pid="$(recorded "$DIR/master.pid")"
    fi
    for i in $(seq 1 "$WORKERS"); do
        [[ -z "$(role_pid "worker-$i")" ]] || continue
        log "starting worker $i: $CORES cores, $MEMORY (log: $DIR/worker-$i.log)"
        mkdir -p "$DIR/work/worker-$i"
        launch "worker-$i" org.apache.spark.deploy.worker.Worker --host 127.0.0.1 --cores "$CORES" \
            --memory "$MEMORY" --webui-port 0 --work-dir "$DIR/work/worker-$i" \
            --properties-file "$DIR/cluster.properties" "spark://127.0.0.1:$port"
    done
    await_start "$pid" "the Spark master" log_tail 1 cluster_ready "$ui"
    log "running (master pid $pid, $WORKERS worker(s), spark://127.0.0.1:$port, web UI http://127.0.0.1:$ui)"
    echo "spark://127.0.0.1:$port"
}

# stop ROLE: SIGTERM that JVM, SIGKILL after STOP_TIMEOUT
stop_role() {
    local pid
    pid="$(role_pid "$1")"
    rm -f "$DIR/$1.pid"
    [[ -n "$pid" ]] || return 0
    log "stopping $1 (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    await_exit "$pid" 0.3
}

do_stop() {
    local f role any=""
    for f in "$DIR"/worker-*.pid "$DIR"/master.pid; do
        [[ -f "$f" ]] || continue
        role="$(basename "$f" .pid)"
        [[ -z "$(role_pid "$role")" ]] || any=1
        stop_role "$role"
    done
    # stopped on purpose: nothing to recover at the next start (a stale record would hold the new master in
    # RECOVERING until the worker timeout)
    rm -rf "${DIR:?}/recovery"
    if [[ -n "$any" ]]; then log "stopped"; else log "not running"; fi
}

recorded_ready() {
    local ui
    ui="$(recorded "$UIFILE")"
    [[ -n "$ui" ]] && cluster_ready "$ui"
}

[[ $# -eq 1 ]] || usage
case "$1" in
    start)  do_start ;;
    stop)   do_stop ;;
    status) server_status spark-cluster "spark://127.0.0.1:$(recorded "$PORTFILE"), $WORKERS worker(s)" recorded_ready ;;
    url)    p="$(recorded "$PORTFILE")"; echo "spark://127.0.0.1:${p:-${CANAL_SPARK_CLUSTER_PORT:-7077}}" ;;
    *)      usage ;;
esac
