#!/usr/bin/env bash
# A long-lived local Spark Connect server with Delta Lake, so pipeline runs start no JVM of their own.
#
#   scripts/spark-connect.sh start [--conf KEY=VALUE ...]   # idempotent; waits until it accepts a session
#   scripts/spark-connect.sh stop                           # SIGTERM, SIGKILL after CANAL_SPARK_CONNECT_STOP_TIMEOUT
#   scripts/spark-connect.sh status                         # exit 0 when it answers
#   scripts/spark-connect.sh url                            # sc://127.0.0.1:PORT (the configured or last port)
#
# The server is pyspark's own spark-submit running org.apache.spark.sql.connect.service.SparkConnectServer
# (pyspark ships the spark-connect jar) with the Delta jars from the offline cache and the settings of
# pipelines/engine/sparkenv.py (local[2], shuffle partitions 2, 127.0.0.1 only, CANAL_SPARK_DRIVER_MEMORY);
# `--conf` adds server-level settings (read at start only, e.g. spark.eventLog.*). Point the pipeline at it
# with `spark.remote: <url>` in conf/pipeline.yaml.
#
# Port: $CANAL_SPARK_CONNECT_PORT, else 15002 (Spark Connect's default) when free, else any free port; the
# one in use is recorded in the state directory. Everything lives under <repo>/.runtime/spark-connect/
# (override: CANAL_SPARK_CONNECT_DIR): pid, port, server.log.
# A fresh server is warmed up before `start` returns (Delta appends and MERGEs on throw-away tables, ~10-20 s),
# so the first pipeline run does not pay the cold JIT; CANAL_SPARK_CONNECT_WARMUP=0 skips that, and
# CANAL_SPARK_CONNECT_WARMUP_ROWS sets the rows of each of its writes (50000).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/service.sh
. "$ROOT/scripts/lib/service.sh"
DIR="${CANAL_SPARK_CONNECT_DIR:-$ROOT/.runtime/spark-connect}"
PIDFILE="$DIR/server.pid"
PORTFILE="$DIR/port"
LOG="$DIR/server.log"
PY="$ROOT/.venv/bin/python"
START_TIMEOUT="${CANAL_SPARK_CONNECT_START_TIMEOUT:-120}"
STOP_TIMEOUT="${CANAL_SPARK_CONNECT_STOP_TIMEOUT:-30}"
DEFAULT_PORT=15002

log() { echo "spark-connect.sh: $*" >&2; }

usage() {
    echo "usage: $0 start [--conf KEY=VALUE ...] | stop | status | url" >&2
    exit 2
}

[[ -x "$PY" ]] || { log "$PY not found: run scripts/setup.sh"; exit 1; }

recorded_port() { [[ -f "$PORTFILE" ]] && tr -dc '0-9' <"$PORTFILE" || true; }

# pid of our running server, or empty: the pid file's process must be a SparkConnectServer tagged with DIR
server_pid() {
    local pid cmdline
    [[ -f "$PIDFILE" ]] || return 0
    pid="$(tr -dc '0-9' <"$PIDFILE" || true)"
    [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 0
    cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
    if [[ "$cmdline" == *SparkConnectServer* && "$cmdline" == *"-Dcanal.spark-connect.dir=$DIR "* ]]; then
        echo "$pid"
    fi
}

# A real session round trip (gRPC handshake, session, a query through the Delta-extended session), not just
# an open port: the port opens before the server can serve.
session_ok() {
    timeout 60 "$PY" - "sc://127.0.0.1:$1" <<'EOF' >/dev/null 2>&1
import sys
from pyspark.sql.connect.session import SparkSession
spark = SparkSession.builder.remote(sys.argv[1]).create()
try:
    assert spark.sql("SELECT 1").collect()[0][0] == 1
    assert "Delta" in spark.conf.get("spark.sql.extensions")
finally:
    spark.stop()
EOF
}

log_tail() {
    if [[ -f "$LOG" ]]; then
        log "last lines of $LOG:"
        tail -n 40 "$LOG" >&2
    fi
}

# Spark's default logging, less two false alarms (pipelines/engine/sparkenv.py CONNECT_LOG4J2 says which)
write_log_conf() { "$PY" -m pipelines.engine.sparkenv connect-log-conf --out "$DIR/log4j2.properties"; }

# True when the server on port $1 listens and opens a session.
port_answers() { port_busy "$1" && session_ok "$1"; }

do_start() {
    local pid port
    pid="$(server_pid)"
    port="$(recorded_port)"
    if [[ -n "$pid" && -n "$port" ]] && session_ok "$port"; then
        [[ $# -eq 0 ]] || log "already running: $* not applied (stop it first)"
        log "already running (pid $pid, sc://127.0.0.1:$port)"
        echo "sc://127.0.0.1:$port"
        return 0
    fi
    local fresh=""
    if [[ -n "$pid" ]]; then
        log "server process $pid exists but does not answer yet; waiting"
    else
        fresh=1
        mkdir -p "$DIR"
        port="$(pick_port CANAL_SPARK_CONNECT_PORT "$DEFAULT_PORT")"
        local -a argv=()
        local -a extra=()
        while [[ $# -gt 0 ]]; do
            case "$1" in
                --conf) [[ $# -ge 2 ]] || usage; extra+=(--conf "$2"); shift 2 ;;
                *) usage ;;
            esac
        done
        mapfile -t argv < <("$PY" -m pipelines.engine.sparkenv connect-argv --port "$port" "${extra[@]}") \
            || { log "could not build the server's command line"; exit 1; }
        [[ ${#argv[@]} -gt 0 && -x "${argv[0]}" ]] || { log "could not build the server's command line"; exit 1; }
        printf '%s\n' "$port" >"$PORTFILE"
        write_log_conf
        : >>"$LOG"
        log "starting on 127.0.0.1:$port (log: $LOG)"
        # setsid + closed stdin: the server outlives this script and any job/process group around it.
        # The -D tag lets stop/status recognise our JVM (spark-submit execs it, so $! is the JVM's pid).
        (
            cd "$DIR"
            export SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON="$PY"
            export SPARK_SUBMIT_OPTS="${SPARK_SUBMIT_OPTS:-} -Dlog4j2.configurationFile=$DIR/log4j2.properties \
-Dcanal.spark-connect.dir=$DIR "
            exec setsid "${argv[@]}" </dev/null >>"$LOG" 2>&1
        ) &
        pid=$!
        echo "$pid" >"$PIDFILE"
    fi
    await_start "$pid" "the Spark Connect server" log_tail 1 port_answers "$port"
    if [[ -n "$fresh" && "${CANAL_SPARK_CONNECT_WARMUP:-1}" != "0" ]]; then
        local took
        took="$("$PY" -m pipelines.engine.sparkenv connect-warm-up --url "sc://127.0.0.1:$port" --scratch "$DIR/warm-up" \
                --rows "${CANAL_SPARK_CONNECT_WARMUP_ROWS:-50000}" \
                2>>"$LOG")" || { log "warm-up failed (see $LOG)"; exit 1; }
        log "warmed up in ${took}s"
    fi
    log "running (pid $pid, sc://127.0.0.1:$port)"
    echo "sc://127.0.0.1:$port"
}

do_stop() { stop_server 0.3; }

# True when a session opens on the recorded port.
recorded_session_ok() {
    local port
    port="$(recorded_port)"
    [[ -n "$port" ]] && session_ok "$port"
}

do_status() { server_status spark-connect "sc://127.0.0.1:$(recorded_port)" recorded_session_ok; }

[[ $# -ge 1 ]] || usage
CMD="$1"
shift
case "$CMD" in
    start)  do_start "$@" ;;
    stop)   [[ $# -eq 0 ]] || usage; do_stop ;;
    status) [[ $# -eq 0 ]] || usage; do_status ;;
    url)    [[ $# -eq 0 ]] || usage
            p="$(recorded_port)"; echo "sc://127.0.0.1:${p:-${CANAL_SPARK_CONNECT_PORT:-$DEFAULT_PORT}}" ;;
    *)      usage ;;
esac
