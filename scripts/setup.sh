#!/usr/bin/env bash
# One-stop, idempotent setup (run as root from anywhere; fast when nothing changed):
#   1. system packages (MariaDB server/client, Maven, JDK 17, ZooKeeper, python3-venv) when missing
#   2. .venv with `pip install -e '.[dev,pipeline]'` (only when new or pyproject.toml changed)
#   3. the private MariaDB `primary` (scripts/mariadb.sh start)
#   4. the private ZooKeeper `main` (scripts/zookeeper.sh start)
#   5. the Delta Lake jar cache for offline Spark (scripts/delta-jars.sh)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export DEBIAN_FRONTEND=noninteractive
START=$SECONDS

log() { echo "setup.sh: $*" >&2; }

# ---- 1. system packages -------------------------------------------------------------------------
java_major() {
    command -v java >/dev/null || { echo 0; return; }
    java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1
}

pkgs=()
command -v mariadbd >/dev/null || pkgs+=(mariadb-server)
command -v mariadb-admin >/dev/null && command -v mariadb >/dev/null || pkgs+=(mariadb-client)
[[ "$(java_major)" -ge 17 ]] 2>/dev/null || pkgs+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || pkgs+=(maven)
command -v openssl >/dev/null || pkgs+=(openssl)  # the private MariaDB's TLS certificates
command -v python3 >/dev/null || pkgs+=(python3)
command -v chromium >/dev/null || pkgs+=(chromium)  # the Dagster UI browser test (driven by playwright)
# ZooKeeper 3.8 for Canal's HA and ZooKeeper meta; only its jar is used (scripts/zookeeper.sh), never the service
[[ -f /usr/share/java/zookeeper.jar ]] || pkgs+=(zookeeper)
if [[ ! -x .venv/bin/python ]] && ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    pkgs+=(python3-venv)
fi
if (( ${#pkgs[@]} > 0 )); then
    [[ $EUID -eq 0 ]] || { log "need root to apt-get install ${pkgs[*]}"; exit 1; }
    log "installing ${pkgs[*]}"
    apt-get update -qq
    # policy-rc.d may forbid starting the system mariadb service: fine, it is never used.
    apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi

# ---- 2. Python venv -----------------------------------------------------------------------------
mkdir -p .runtime
STAMP=.runtime/venv.stamp
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [[ -x .venv/bin/python ]] && ! .venv/bin/python -c 'import sys' >/dev/null 2>&1; then
    log ".venv is broken (interpreter moved?): recreating"
    rm -rf .venv
fi
if [[ ! -x .venv/bin/python ]]; then
    log "creating .venv"
    python3 -m venv .venv
    rm -f "$STAMP"
fi
if [[ ! -f "$STAMP" || "$(cat "$STAMP")" != "$want" ]]; then
    log "pip install -e '.[dev,pipeline]'"
    .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev,pipeline]'
    echo "$want" >"$STAMP"
fi

# ---- 3. private MariaDB -------------------------------------------------------------------------
scripts/mariadb.sh start primary

# ---- 4. private ZooKeeper -----------------------------------------------------------------------
scripts/zookeeper.sh start main

# ---- 5. Delta jars for offline Spark ------------------------------------------------------------
scripts/delta-jars.sh

log "ready in $((SECONDS - START))s"
