#!/usr/bin/env bash
# A Spark standalone master and workers from the venv's pyspark, in the foreground
# (Ctrl-C stops them); then submit the job with
#   SPARK_LOCAL_IP=127.0.0.1 .venv/bin/psmatch run --spark-master spark://127.0.0.1:7077
#   scripts/spark-standalone.sh [--port 7077] [--webui-port 8080] [--workers N] [--cores N] [--memory 2g] [--dir var/spark]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
exec "$root/.venv/bin/python" -m psmatch.devservers.standalone "$@"
