#!/usr/bin/env bash
# Fetch the Kafka broker classpath and Spark's Kafka connector with Maven into the cache
# directory (default .cache/, outside git). Idempotent: does nothing when already fetched.
#   scripts/fetch-jars.sh [CACHE_DIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${1:-${PSMATCH_CACHE_DIR:-$root/.cache}}"
mkdir -p "$cache"

fetch() {  # fetch NAME POM OUTDIR [extra mvn args...]
    local name="$1" pom="$2" out="$3"
    shift 3
    local stamp="$out/.complete-$(sha1sum "$pom" "$0" | sha1sum | cut -c1-12)"
    if [[ -f "$stamp" ]]; then
        echo "fetch-jars: $name already in $out"
        return
    fi
    echo "fetch-jars: resolving $name with Maven into $out"
    rm -rf "$out"
    mkdir -p "$out"
    mvn --batch-mode --quiet -f "$pom" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$out" "$@"
    touch "$stamp"
    echo "fetch-jars: $name: $(ls "$out"/*.jar | wc -l) jars"
}

fetch "Kafka broker" "$root/deploy/kafka/pom.xml" "$cache/kafka/libs"
# Only the jars pyspark does not ship already (its own Spark, Scala, Hadoop, lz4, snappy,
# zstd and slf4j jars must not be duplicated on the classpath).
fetch "Spark Kafka connector" "$root/deploy/spark-kafka/pom.xml" "$cache/spark-kafka/jars" \
    -DincludeArtifactIds=spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2
