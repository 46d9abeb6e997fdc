#!/usr/bin/env bash
# Install the system packages the streaming service and its tests need, when missing:
# Debian's redis-server, a Java 17 runtime (Kafka, Spark), Maven (fetches the jars) and
# prometheus (the server tests/deploy scrapes the job's metrics with), kcat (the outside
# Kafka client the fault-injection tests produce with) and gcc (the install builds the
# compiled loops, src/psmatch/core/_kernels.c).
# Needs root (or sudo) only when something is missing.
set -euo pipefail
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
command -v gcc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
if [[ ${#missing[@]} -eq 0 ]]; then
    echo "install-system-deps: redis-server, java, mvn, prometheus, kcat and gcc are installed"
    exit 0
fi
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
echo "install-system-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
