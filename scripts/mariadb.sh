#!/usr/bin/env bash
# Manage a private MariaDB instance for development and tests.
#
#   scripts/mariadb.sh start|stop|status|restart [NAME]
#   scripts/mariadb.sh port [NAME]                              # the instance's TCP port
#   scripts/mariadb.sh client [NAME] [mariadb client args...]   # root over the unix socket
#
# Everything lives under <repo>/.runtime/mariadb/NAME/ (git-ignored): datadir, my.cnf, socket,
# pid file, error log.  The system service is never used.
#
#   NAME       port  server_id  gtid_domain_id
#   primary    3407  1          0
#   secondary  3408  2          1
#
# Overrides (read by `start`; written into the instance's my.cnf): MARIADB_PORT, MARIADB_SERVER_ID,
# MARIADB_GTID_DOMAIN_ID.  Any other NAME needs MARIADB_PORT and MARIADB_SERVER_ID at its first start; later
# starts (and `restart`) keep the values of its my.cnf unless overridden again.
# MARIADB_LOG_BIN=0 creates an instance with the binary log OFF (e.g. `nobinlog` on 3409, server_id 9, to
# test that error): read when the instance's my.cnf is first created, then kept (a marker line in my.cnf).
# If the default port is taken by something else (e.g. another checkout's instance on the same machine), the
# first start fails with a clear message; with CI=true (or MARIADB_PORT_AUTO=1) it picks the next free port
# (default + 10, + 20, ...) instead.  Once chosen, the port is the instance's: a later start or `restart` finds
# it taken is an error, never a move.  The port in use is always the one in my.cnf: `scripts/mariadb.sh
# port [NAME]` prints it, and tests/conftest.py and the main job (pipelines/cli/main.py) read it from there.
#
# `start` also (idempotently, and with sql_log_bin=0 so the binlog stays clean) ensures:
#   canal@127.0.0.1, canal@localhost        password canal        SELECT, REPLICATION SLAVE, REPLICATION CLIENT
#   canal_admin@127.0.0.1, @localhost       password canal_admin  ALL PRIVILEGES ON *.* WITH GRANT OPTION
#   database canal_test, plugin auth_ed25519
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/service.sh
. "$ROOT/scripts/lib/service.sh"

usage() {
    echo "usage: $0 start|stop|status|restart|port [NAME]    (NAME defaults to primary)" >&2
    echo "       $0 client [NAME] [mariadb args...]" >&2
    exit 2
}

[[ $# -ge 1 ]] || usage
CMD="$1"
shift
NAME="${1:-primary}"
if [[ $# -ge 1 ]]; then shift; fi
[[ "$NAME" =~ ^[A-Za-z0-9_-]+$ ]] || { echo "mariadb.sh: bad instance name '$NAME'" >&2; exit 2; }

BASE="$ROOT/.runtime/mariadb/$NAME"
DATADIR="$BASE/data"
CNF="$BASE/my.cnf"
PIDFILE="$BASE/mariadbd.pid"
ERRLOG="$BASE/error.log"
SOCKET="$BASE/mysqld.sock"
# AF_UNIX paths are limited to ~107 bytes; deep checkouts fall back to a per-instance path in /tmp.
if (( ${#SOCKET} > 100 )); then
    SOCKET="/tmp/canal-mariadb-$(printf '%s' "$BASE" | sha1sum | cut -c1-12).sock"
fi
START_TIMEOUT="${MARIADB_START_TIMEOUT:-60}"
STOP_TIMEOUT="${MARIADB_STOP_TIMEOUT:-60}"

log() { echo "mariadb.sh[$NAME]: $*" >&2; }

defaults_for_name() {
    case "$NAME" in
        primary)   DEF_PORT=3407; DEF_SID=1; DEF_DOMAIN=0 ;;
        secondary) DEF_PORT=3408; DEF_SID=2; DEF_DOMAIN=1 ;;
        *)         DEF_PORT="";   DEF_SID="";  DEF_DOMAIN=0 ;;
    esac
    # An existing instance keeps its port, server_id and gtid_domain_id (its my.cnf) unless overridden explicitly:
    # whatever was configured with its address finds it again after a stop + start or a restart.
    KEPT_PORT=0
    local cnf_port cnf_sid cnf_domain
    cnf_port="$(configured_port)"
    cnf_sid="$(cnf_value server_id)"
    cnf_domain="$(cnf_value gtid_domain_id)"
    [[ -n "$cnf_port" && -z "${MARIADB_PORT:-}" ]] && KEPT_PORT=1
    PORT="${MARIADB_PORT:-${cnf_port:-$DEF_PORT}}"
    SERVER_ID="${MARIADB_SERVER_ID:-${cnf_sid:-$DEF_SID}}"
    GTID_DOMAIN="${MARIADB_GTID_DOMAIN_ID:-${cnf_domain:-$DEF_DOMAIN}}"
    # The binlog switch belongs to the instance: read when its my.cnf is first written, kept afterwards.
    if [[ -f "$CNF" ]]; then
        if grep -q '^# canal: log_bin=0$' "$CNF"; then LOG_BIN=0; else LOG_BIN=1; fi
    else
        LOG_BIN="${MARIADB_LOG_BIN:-1}"
    fi
    if [[ "$LOG_BIN" != "0" && "$LOG_BIN" != "1" ]]; then
        log "MARIADB_LOG_BIN must be 0 or 1, not '$LOG_BIN'"
        exit 2
    fi
    if [[ -z "$PORT" || -z "$SERVER_ID" ]]; then
        log "instance '$NAME' has no default port/server_id: set MARIADB_PORT and MARIADB_SERVER_ID"
        exit 2
    fi
}


# A [mysqld] setting of an existing instance's my.cnf (the first assignment of the key), or nothing.
cnf_value() {
    if [[ -f "$CNF" ]]; then
        sed -n "s/^$1[[:space:]]*=[[:space:]]*\([0-9]*\).*/\1/p" "$CNF" | head -n1
    fi
}

# Port of an existing instance, from its my.cnf (stop/status must not depend on the environment).
configured_port() { cnf_value port; }

# The log-bin lines of my.cnf; with LOG_BIN=0 a marker instead, and the server runs with log_bin=OFF.
log_bin_lines() {
    if [[ "$LOG_BIN" == "0" ]]; then
        echo "# canal: log_bin=0"
        echo "# (instance created with MARIADB_LOG_BIN=0: no binary log; the binlog settings below are inert)"
        return 0
    fi
    echo "# relative names resolve inside datadir (= $DATADIR/mysql-bin); the index then holds ./mysql-bin.NNNNNN,"
    echo "# so the instance survives the checkout moving; relay-log is fixed so it does not follow the hostname."
    echo "log-bin                     = mysql-bin"
    echo "log-bin-index               = mysql-bin.index"
}

# A private CA and a server certificate for 127.0.0.1/localhost, made once per instance, so clients
# can test TLS (verify against $BASE/tls/ca.pem).
ensure_tls() {
    local dir="$BASE/tls"
    [[ -f "$dir/server-key.pem" && -f "$dir/server-cert.pem" && -f "$dir/ca.pem" ]] && return 0
    mkdir -p "$dir"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=canal-core test CA ($NAME)" \
        -keyout "$dir/ca-key.pem" -out "$dir/ca.pem" >/dev/null 2>&1
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
        -keyout "$dir/server-key.pem" -out "$dir/server.csr" >/dev/null 2>&1
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$dir/san.ext"
    openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" -CAcreateserial \
        -days 3650 -extfile "$dir/san.ext" -out "$dir/server-cert.pem" >/dev/null 2>&1
    rm -f "$dir/server.csr" "$dir/san.ext"
}

write_cnf() {
    mkdir -p "$BASE" "$DATADIR" "$BASE/tmp"
    ensure_tls
    local tmp="$CNF.tmp.$$"
    cat >"$tmp" <<EOF
# Generated by scripts/mariadb.sh for instance '$NAME'; rewritten on every start.
[mysqld]
user                        = root
basedir                     = /usr
datadir                     = $DATADIR
# temporary tables of its own: instances bootstrapping side by side never meet in a shared /tmp
tmpdir                      = $BASE/tmp
socket                      = $SOCKET
pid-file                    = $PIDFILE
log-error                   = $ERRLOG
port                        = $PORT
bind-address                = 127.0.0.1
skip-name-resolve
skip-external-locking
server_id                   = $SERVER_ID

# binlog, as Canal needs it
$(log_bin_lines)
relay-log                   = relay-bin
relay-log-index             = relay-bin.index
binlog_format               = ROW
binlog_checksum             = CRC32
binlog_row_image            = FULL
binlog_row_metadata         = FULL
binlog_annotate_row_events  = ON
binlog_expire_logs_seconds  = 604800
max_binlog_size             = 256M
gtid_domain_id              = $GTID_DOMAIN
gtid_strict_mode            = ON
log_slave_updates           = ON

# TLS is offered, not required: replication clients choose (see tests/integration/test_connection.py)
ssl-ca                      = $BASE/tls/ca.pem
ssl-cert                    = $BASE/tls/server-cert.pem
ssl-key                     = $BASE/tls/server-key.pem

max_allowed_packet          = 1G
character-set-server        = utf8mb4
collation-server            = utf8mb4_general_ci

innodb_buffer_pool_size     = 256M
innodb_log_file_size        = 256M
# A test server: durability of the last second is not worth the fsyncs on a shared 2-core machine.
innodb_flush_log_at_trx_commit = 2
sync_binlog                 = 0
performance_schema          = OFF
max_connections             = 200

[client]
socket                      = $SOCKET
port                        = $PORT
default-character-set       = utf8mb4
EOF
    mv -f "$tmp" "$CNF"
}

# pid of the running server for this instance, or empty.
server_pid() { find_server "mariadbd --defaults-file=$CNF "; }

admin() { mariadb-admin --defaults-file="$CNF" --protocol=socket -uroot "$@"; }
client() { mariadb --defaults-file="$CNF" --protocol=socket -uroot "$@"; }

ping_ok() { admin --connect-timeout=2 ping >/dev/null 2>&1; }

error_tail() {
    if [[ -f "$ERRLOG" ]]; then
        log "last lines of $ERRLOG:"
        tail -n 40 "$ERRLOG" >&2
    else
        log "no error log at $ERRLOG"
    fi
}

install_db() {
    if [[ -f "$BASE/.installed" && -d "$DATADIR/mysql" ]]; then
        return 0
    fi
    log "initializing datadir $DATADIR"
    rm -rf "$DATADIR"
    mkdir -p "$DATADIR"
    if ! mariadb-install-db --defaults-file="$CNF" --user=root \
            --auth-root-authentication-method=socket --skip-test-db \
            >"$BASE/install.log" 2>&1; then
        log "mariadb-install-db failed:"
        tail -n 40 "$BASE/install.log" >&2
        exit 1
    fi
    touch "$BASE/.installed"
}

ensure_accounts() {
    local have_ed25519
    have_ed25519="$(client -N -B -e \
        "SELECT COUNT(*) FROM information_schema.PLUGINS WHERE PLUGIN_NAME='ed25519'")"
    local sql="SET SESSION sql_log_bin = 0;"
    if [[ "$have_ed25519" == "0" ]]; then
        sql+=" INSTALL SONAME 'auth_ed25519';"
    fi
    local host
    for host in 127.0.0.1 localhost; do
        sql+="
CREATE USER IF NOT EXISTS 'canal'@'$host' IDENTIFIED BY 'canal';
ALTER USER 'canal'@'$host' IDENTIFIED BY 'canal';
REVOKE ALL PRIVILEGES, GRANT OPTION FROM 'canal'@'$host';
GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'canal'@'$host';
CREATE USER IF NOT EXISTS 'canal_admin'@'$host' IDENTIFIED BY 'canal_admin';
ALTER USER 'canal_admin'@'$host' IDENTIFIED BY 'canal_admin';
GRANT ALL PRIVILEGES ON *.* TO 'canal_admin'@'$host' WITH GRANT OPTION;"
    done
    sql+="
CREATE DATABASE IF NOT EXISTS canal_test CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci;
FLUSH PRIVILEGES;"
    client -e "$sql"
}

do_start() {
    local pid
    pid="$(server_pid)"
    if [[ -n "$pid" ]] && ping_ok; then
        ensure_accounts
        log "already running (pid $pid, port $(configured_port), socket $SOCKET)"
        return 0
    fi
    if [[ -n "$pid" ]]; then
        # Process exists but does not answer: maybe still starting; give it the usual time below.
        log "server process $pid exists but does not answer yet; waiting"
    else
        defaults_for_name
        choose_port MARIADB "$CNF" "instance" "$KEPT_PORT"
        # Stale state from a crash or another machine must not block the start.
        rm -f "$PIDFILE" "$SOCKET" "$SOCKET.lock"
        write_cnf
        install_db
        : >>"$ERRLOG"
        local errlog_lines
        errlog_lines="$(wc -l <"$ERRLOG")"
        log "starting on 127.0.0.1:$PORT (server_id $SERVER_ID, gtid_domain_id $GTID_DOMAIN)"
        # setsid + closed stdio: the server outlives this script and any job/process group around it.
        setsid mariadbd --defaults-file="$CNF" </dev/null >>"$BASE/mariadbd.out" 2>&1 &
        pid=$!
    fi
    await_start "$pid" mariadbd error_tail 0.3 ping_ok
    ensure_accounts
    log "running (pid $pid, port $(configured_port), socket $SOCKET)"
}

do_stop() { stop_server 0.2 admin shutdown; }

do_status() { server_status "$NAME" "port $(configured_port), socket $SOCKET" ping_ok; }

command -v mariadbd >/dev/null || { log "mariadbd not found: run scripts/setup.sh"; exit 1; }

case "$CMD" in
    start)   do_start ;;
    stop)    do_stop ;;
    status)  do_status ;;
    restart) do_stop; do_start ;;
    port)    p="$(configured_port)"; [[ -n "$p" ]] || { defaults_for_name; p="$PORT"; }; echo "$p" ;;
    client)  [[ -f "$CNF" ]] || { log "no instance at $BASE: run start first"; exit 1; }
             exec mariadb --defaults-file="$CNF" --protocol=socket -uroot "$@" ;;
    *)       usage ;;
esac
