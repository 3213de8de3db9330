# Shared by scripts/mariadb.sh, scripts/zookeeper.sh and scripts/spark-connect.sh (sourced, not run).
# The sourcing script defines log(); PY for free_port and pick_port; PORT for choose_port, STOP_TIMEOUT for await_exit, START_TIMEOUT for
# await_start; PIDFILE for find_server, await_start, stop_server and server_status (the last two also call its
# server_pid()).

# True when something accepts TCP connections on 127.0.0.1:$1.
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port: a TCP port free on 127.0.0.1 right now (the OS picks it); needs $PY.
free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# pick_port VAR DEFAULT: the port named by the variable VAR when set (it must be free: else exit 1), else DEFAULT
# when free, else any free port.
pick_port() {
    local pinned="${!1:-}"
    if [[ -n "$pinned" ]]; then
        if port_busy "$pinned"; then
            log "port $pinned ($1) is taken by another process"
            exit 1
        fi
        echo "$pinned"
    elif ! port_busy "$2"; then
        echo "$2"
    else
        free_port
    fi
}

# choose_port PREFIX CONFIG WHAT [KEPT]: keep $PORT when it is free. KEPT=1 means $PORT is the instance's own (from
# CONFIG, written by an earlier start): every process configured with it expects it there, so a busy port is an
# error, never a reason to move. Otherwise (a first start), unless ${PREFIX}_PORT pins it, take $PORT + 10k
# (k = 1..30) under CI=true or ${PREFIX}_PORT_AUTO=1; else exit 1 saying how to get out of the way.
choose_port() {
    local prefix="$1" config="$2" what="$3" kept="${4:-0}"
    local pinned="${prefix}_PORT" auto="${prefix}_PORT_AUTO"
    port_busy "$PORT" || return 0
    if [[ "$kept" == "1" && -z "${!pinned:-}" ]]; then
        log "port $PORT of this $what (from $config) is taken by another process: it keeps its port across restarts,"
        log "so everything configured with 127.0.0.1:$PORT finds it again. Stop that process, or move the $what"
        log "explicitly with $pinned=<free port> (and update what points at the old port)"
        exit 1
    fi
    if [[ -z "${!pinned:-}" && ( "${CI:-}" == "true" || "${!auto:-}" == "1" ) ]]; then
        local k cand
        for k in $(seq 1 30); do
            cand=$((PORT + 10 * k))
            if ! port_busy "$cand"; then
                log "port $PORT is taken by another process; using $cand (CI=true / $auto=1)"
                PORT="$cand"
                return 0
            fi
        done
    fi
    log "port $PORT on 127.0.0.1 is already taken by another process (another checkout's $what?)."
    log "stop it, or set $pinned=<free port> (tests read the port from $config), or $auto=1"
    exit 1
}

# await_exit PID POLL: wait up to $STOP_TIMEOUT s for PID (already asked to stop) to exit, polling every POLL
# seconds; SIGKILL it after that.
await_exit() {
    local pid="$1" poll="$2"
    local deadline=$((SECONDS + STOP_TIMEOUT))
    while kill -0 "$pid" 2>/dev/null; do
        if (( SECONDS >= deadline )); then
            log "did not stop within ${STOP_TIMEOUT}s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 1
            break
        fi
        sleep "$poll"
    done
}

# find_server TAG: pid of this instance's server: the process in $PIDFILE when its command line contains TAG, else
# (pid file missing or stale) any process whose command line contains TAG; empty when there is none.
find_server() {
    local tag="$1" pid="" f c
    [[ -f "$PIDFILE" ]] && pid="$(tr -dc '0-9' <"$PIDFILE" || true)"
    if [[ -n "$pid" && -r "/proc/$pid/cmdline" ]]; then
        c="$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" || true)"
        if [[ "$c" == *"$tag"* ]]; then
            echo "$pid"
            return 0
        fi
    fi
    for f in /proc/[0-9]*/cmdline; do
        c="$(tr '\0' ' ' 2>/dev/null <"$f" || true)"
        if [[ "$c" == *"$tag"* ]]; then
            f="${f#/proc/}"
            echo "${f%/cmdline}"
            return 0
        fi
    done
    return 0
}

# stop_server POLL [COMMAND...]: stop the server that server_pid() names: with COMMAND when given (SIGTERM when it
# fails), else SIGTERM; wait for it (await_exit PID POLL) and remove $PIDFILE.
stop_server() {
    local poll="$1" pid
    shift
    pid="$(server_pid)"
    if [[ -z "$pid" ]]; then
        rm -f "$PIDFILE"
        log "not running"
        return 0
    fi
    log "stopping (pid $pid)"
    if (( $# == 0 )) || ! "$@" >/dev/null 2>&1; then
        (( $# == 0 )) || log "$* failed; sending SIGTERM"
        kill -TERM "$pid" 2>/dev/null || true
    fi
    await_exit "$pid" "$poll"
    rm -f "$PIDFILE"
    log "stopped"
}

# server_status LABEL WHERE CHECK...: "LABEL: running (pid P, WHERE)" and status 0 when server_pid() names a process
# and the command CHECK succeeds; else "LABEL: not answering (pid P)" or "LABEL: stopped", and status 1.
server_status() {
    local label="$1" where="$2" pid
    shift 2
    pid="$(server_pid)"
    if [[ -n "$pid" ]] && "$@"; then
        echo "$label: running (pid $pid, $where)"
        return 0
    fi
    if [[ -n "$pid" ]]; then
        echo "$label: not answering (pid $pid)"
    else
        echo "$label: stopped"
    fi
    return 1
}

# await_start PID WHAT TAIL POLL CHECK...: wait up to $START_TIMEOUT s, polling every POLL s, for the command CHECK
# to succeed. When PID (the starting server) exits first or the time runs out: say so, run TAIL (a function that
# shows the end of the server's log) and exit 1; a server that died leaves no pid file behind.
await_start() {
    local pid="$1" what="$2" tail="$3" poll="$4"
    shift 4
    local deadline=$((SECONDS + START_TIMEOUT))
    until "$@"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            log "$what (pid $pid) exited during startup"
            "$tail"
            rm -f "$PIDFILE"
            exit 1
        fi
        if (( SECONDS >= deadline )); then
            log "$what did not answer within ${START_TIMEOUT}s (pid $pid still running; stop it with $0 stop${NAME:+ $NAME})"
            "$tail"
            exit 1
        fi
        sleep "$poll"
    done
}
