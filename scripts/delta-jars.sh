#!/usr/bin/env bash
# Resolve the Delta Lake jars for pyspark 4.2 / Scala 2.13 once from Maven Central into a cache that
# Spark then loads offline (pipelines/engine/sparkenv.py; never spark.jars.packages / Ivy at run time).
#
#   scripts/delta-jars.sh            # idempotent; instant and offline once the cache is complete
#   scripts/delta-jars.sh --print    # just print the cache directory
#
# Cache: ${CANAL_JAR_CACHE:-$HOME/.cache/canal-core/jars/delta-<delta.version>}, shared by every checkout
# on the machine.  It is complete when .complete holds the sha256 of scripts/delta-jars/pom.xml and every
# jar listed in MANIFEST is present.  Jars that pyspark already ships (same artifactId) are left out.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
POM="$ROOT/scripts/delta-jars/pom.xml"
DELTA_VERSION="$(sed -n 's:.*<delta.version>\(.*\)</delta.version>.*:\1:p' "$POM" | head -n1)"
[[ -n "$DELTA_VERSION" ]] || { echo "delta-jars.sh: no <delta.version> in $POM" >&2; exit 1; }
CACHE="${CANAL_JAR_CACHE:-$HOME/.cache/canal-core/jars/delta-$DELTA_VERSION}"
POM_SHA="$(sha256sum "$POM" | cut -d' ' -f1)"

log() { echo "delta-jars.sh: $*" >&2; }

if [[ "${1:-}" == "--print" ]]; then
    echo "$CACHE"
    exit 0
fi

cache_complete() {
    [[ -f "$CACHE/.complete" && -f "$CACHE/MANIFEST" ]] || return 1
    [[ "$(cat "$CACHE/.complete")" == "$POM_SHA" ]] || return 1
    local sum name
    while read -r sum name; do
        [[ -s "$CACHE/$name" ]] || return 1
    done <"$CACHE/MANIFEST"
    return 0
}

if cache_complete; then
    log "cached: $CACHE ($(wc -l <"$CACHE/MANIFEST") jars, Delta $DELTA_VERSION)"
    exit 0
fi

mkdir -p "$(dirname "$CACHE")"
exec 9>"$CACHE.lock"
flock 9                      # several checkouts may run setup at once
if cache_complete; then
    log "cached: $CACHE (filled by a concurrent run)"
    exit 0
fi

command -v mvn >/dev/null || { log "mvn not found: run scripts/setup.sh"; exit 1; }
command -v java >/dev/null || { log "java not found: run scripts/setup.sh"; exit 1; }

# The pyspark that will load these jars: the project venv, else whatever python3 has.
PY="$ROOT/.venv/bin/python"
[[ -x "$PY" ]] || PY=python3
PYSPARK_JARS="$("$PY" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')" \
    || { log "pyspark is not importable with $PY: run scripts/setup.sh"; exit 1; }
[[ -d "$PYSPARK_JARS" ]] || { log "no pyspark jars directory at $PYSPARK_JARS"; exit 1; }

WORK="$(mktemp -d "$CACHE.tmp.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
log "resolving io.delta:delta-spark_4.2_2.13:$DELTA_VERSION from Maven Central (once) ..."
if ! mvn -B -ntp -f "$POM" dependency:copy-dependencies \
        -DincludeScope=runtime -Dmdep.useRepositoryLayout=true -DoutputDirectory="$WORK/repo" \
        >"$WORK/mvn.log" 2>&1; then
    log "maven failed:"
    tail -n 40 "$WORK/mvn.log" >&2
    exit 1
fi

mkdir -p "$WORK/jars"
while IFS= read -r jar; do
    version_dir="$(dirname "$jar")"
    artifact="$(basename "$(dirname "$version_dir")")"
    if compgen -G "$PYSPARK_JARS/$artifact-[0-9]*.jar" >/dev/null; then
        log "skipping $(basename "$jar"): pyspark ships $(basename "$(compgen -G "$PYSPARK_JARS/$artifact-[0-9]*.jar" | head -n1)")"
        continue
    fi
    cp "$jar" "$WORK/jars/"
done < <(find "$WORK/repo" -name '*.jar' | sort)

compgen -G "$WORK/jars/delta-spark_*.jar" >/dev/null || { log "delta-spark jar missing after resolution"; exit 1; }
(cd "$WORK/jars" && sha256sum -- *.jar >MANIFEST)
printf '%s\n' "$POM_SHA" >"$WORK/jars/.complete"

rm -rf "$CACHE"
mv "$WORK/jars" "$CACHE"
log "cached $(wc -l <"$CACHE/MANIFEST") jars in $CACHE:"
sed 's/^[0-9a-f]*  /  /' "$CACHE/MANIFEST" >&2
