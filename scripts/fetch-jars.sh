#!/usr/bin/env bash
# Fetch the Kafka broker classpath and Spark's Kafka connector with Maven into the cache
# directory (default .cache/, outside git). Idempotent: does nothing when already fetched.
#   scripts/fetch-jars.sh [CACHE_DIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${1:-${PSMATCH_CACHE_DIR:-$root/.cache}}"
mkdir -p "$cache"

fetch() {  # fetch NAME POM OUTDIR
    local name="$1" pom="$2" out="$3"
    local stamp="$out/.complete-$(sha1sum "$pom" | cut -c1-12)"
    if [[ -f "$stamp" ]]; then
        echo "fetch-jars: $name already in $out"
        return
    fi
    echo "fetch-jars: resolving $name with Maven into $out"
    rm -rf "$out"
    mkdir -p "$out"
    mvn --batch-mode --quiet -f "$pom" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$out"
    touch "$stamp"
    echo "fetch-jars: $name: $(ls "$out"/*.jar | wc -l) jars"
}

fetch "Kafka broker" "$root/deploy/kafka/pom.xml" "$cache/kafka/libs"
fetch "Spark Kafka connector" "$root/deploy/spark-kafka/pom.xml" "$cache/spark-kafka/jars"
