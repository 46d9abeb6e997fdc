"""The latency floor of a Spark micro-batch with a Python stage, on this machine: what the
service's publish → notification latency cannot go below (a script, not a test).

A streaming query with no matching: Kafka → ``mapInArrow`` decoding each event as the
workers do (:func:`psmatch.service.records.events.parse_event`) and writing one record
per event that carries the event's Kafka timestamp → Spark's Kafka sink, at the
service's trigger. Events are published at ``--rate`` for ``--warm-up`` seconds (not
measured), then ``--duration`` seconds; the latency of a record is the broker's append
time of it (the output topic is created with ``message.timestamp.type=LogAppendTime``)
less its event's timestamp, as ``bench/bench_streaming.py`` measures the service's
(:func:`streaming_phases.sampled_latencies`, the same load process). Also timed, in the
same session: one batch job of ``mapInArrow`` over a cached DataFrame of as many
partitions as the events topic has, with a function that does nothing (Spark's own cost
of a Python stage), and the same job with no Python stage.

``--docs docs`` writes the table, with the command, to ``docs/bench-streaming.md``
(between its ``bench_spark_latency`` markers).

Usage::

    .venv/bin/python bench/bench_spark_latency.py --rate 5000 --duration 20 \\
        --warm-up 60 --trigger 0.25 [--docs docs]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench"), str(ROOT)]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from docsection import replace_section  # noqa: E402
from host import cpu_model  # noqa: E402
from streaming_phases import (  # noqa: E402 - beside this script
    SPAWN,
    latency_load,
    pct,
    sampled_latencies,
    spark_steps,
)

from psmatch.adapters.kafka.admin import ensure_topics  # noqa: E402
from psmatch.adapters.kafka.reader import TopicReader  # noqa: E402
from psmatch.adapters.kafka.security import spark_kafka_options  # noqa: E402
from psmatch.devservers.services import release_shared_services, shared_services  # noqa: E402
from psmatch.service.config import ServiceConfig  # noqa: E402
from psmatch.service.job import build_spark, kafka_source, stop_query  # noqa: E402

log = logging.getLogger("bench")
JOB_REPEATS = 15


def stamp_only(batches: Any) -> Any:
    """The query's ``mapInArrow`` function: each event decoded as the workers do, one
    record per event whose value carries the event's timestamp (``event_timestamp``, as
    a notification does)."""
    import pyarrow as pa

    from psmatch.service.records.events import parse_event

    for batch in batches:
        cols = batch.to_pydict()
        values = []
        for value, ts in zip(cols["value"], cols["ts"], strict=True):
            parse_event(value)
            values.append(b'{"event_timestamp": %d}' % ts)
        yield pa.RecordBatch.from_arrays(
            [batch.column("topic"), batch.column("key"), pa.array(values, pa.binary())],
            names=["topic", "key", "value"],
        )


def job_floor(spark: Any, partitions: int) -> dict[str, float]:
    """Median milliseconds of one batch job over a cached DataFrame of ``partitions``
    partitions: with a ``mapInArrow`` stage that does nothing, and with none."""

    def nothing(batches: Any) -> Any:
        for _ in batches:
            pass
        return iter(())

    df = spark.range(0, 4000, numPartitions=partitions).selectExpr("id", "cast(id as string) s")
    df = df.persist()
    df.count()
    timings: dict[str, list[float]] = {"python_stage_ms": [], "jvm_only_ms": []}
    for _ in range(JOB_REPEATS):
        t = time.perf_counter()
        df.mapInArrow(nothing, "id long").collect()
        timings["python_stage_ms"].append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        df.selectExpr("id + 1 as x").limit(1).collect()
        timings["jvm_only_ms"].append((time.perf_counter() - t) * 1000)
    df.unpersist()
    return {k: statistics.median(v[2:]) for k, v in timings.items()}  # the first ones warm up


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from pyspark.sql import functions as F

    services = shared_services()
    tag = uuid.uuid4().hex[:6]
    config = ServiceConfig(bootstrap_servers=services.kafka.bootstrap_servers,
                           trigger_seconds=args.trigger, spark_master="local[*]",
                           checkpoint_location=str(work / "checkpoint"))  # fmt: skip
    source, sink = f"floor{tag}.events", f"floor{tag}.out"
    ensure_topics(config.bootstrap_servers, {source: {},
                  sink: {"message.timestamp.type": "LogAppendTime"}},
                  partitions=config.topic_partitions)  # fmt: skip
    gen = [sys.executable, "-m", "psmatch.begen", "--subscriptions", "1", "--events", "20000",
           "--out", str(work / "workload"), "--measure-subscriptions", "0"]  # fmt: skip
    subprocess.run(gen, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    events = (work / "workload" / "events.jsonl").read_text().splitlines()
    spark = build_spark(config, app_name="psmatch-bench-floor", **{"spark.ui.enabled": "false"})
    floor = job_floor(spark, config.topic_partitions)
    log.info("one batch job: %s", floor)
    opts = spark_kafka_options(config.bootstrap_servers, config.kafka_security)
    query = (
        kafka_source(spark, config).option("subscribe", source)
        .option("startingOffsets", "earliest").load()
        .select("key", "value", F.unix_millis("timestamp").alias("ts"),
                F.lit(sink).alias("topic"))
        .mapInArrow(stamp_only, "topic STRING, key BINARY, value BINARY")
        .writeStream.format("kafka").options(**opts)
        .option("checkpointLocation", config.checkpoint_location)
        .trigger(processingTime=f"{config.trigger_seconds} seconds").start()
    )  # fmt: skip
    try:
        with TopicReader(config.bootstrap_servers, sink, from_beginning=False,
                         partitions=[0]) as reader:  # fmt: skip
            start = reader.end_offsets()[0]
        conn, child_conn = SPAWN.Pipe()
        load = SPAWN.Process(target=latency_load, name="psmatch-bench-load", daemon=True,
                             args=(config.bootstrap_servers, source, events, args.rate,
                                   args.warm_up + args.duration, child_conn))  # fmt: skip
        load.start()
        time.sleep(args.warm_up)
        last_batch = (query.lastProgress or {"batchId": -1})["batchId"]
        measured_from_ms = time.time() * 1000
        sent_s = conn.recv()
        conn.recv()
        load.join()
        time.sleep(5 * args.trigger + 2)  # the last events written
        progress = [p for p in query.recentProgress if p["batchId"] > last_batch]
    finally:
        stop_query(query)
    sampled = sampled_latencies(config.bootstrap_servers, sink, start)
    lat = [ms for event_ts, ms in sampled if event_ts >= measured_from_ms]
    n = int(args.rate * (args.warm_up + args.duration))
    return {"rate": args.rate, "rate_sent": n / sent_s, "trigger_s": args.trigger,
            "samples": len(lat), "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99),
            "max_ms": max(lat, default=float("nan")), "spark_ms": spark_steps(progress),
            "job_floor_ms": floor, "partitions": config.topic_partitions}  # fmt: skip


def render(r: dict[str, Any], command: str) -> str:
    s, f = r["spark_ms"], r["job_floor_ms"]
    return f"""<!-- not executed: starts Kafka and Spark and runs for minutes -->
```sh
{command}
```

On {os.cpu_count()} cores of {cpu_model()} ({platform.machine()}), trigger {r['trigger_s']} s,
{r['partitions']} events partitions:

| what | figure |
| --- | --- |
| publish → record, p50 / p99 / max, at {r['rate']:,.0f} events/s | {r['p50_ms']:,.0f} / **{r['p99_ms']:,.0f}** / {r['max_ms']:,.0f} ms |
| Spark per batch: latestOffset / queryPlanning / walCommit / addBatch / commitOffsets | {s['latestOffset']:.0f} / {s['queryPlanning']:.0f} / {s['walCommit']:.0f} / {s['addBatch']:.0f} / {s['commitOffsets']:.0f} ms |
| a batch's start to the next one's | {s['start_to_start']:.0f} ms ({s['batches']} batches) |
| one batch job with a `mapInArrow` stage that does nothing / with no Python stage (median) | {f['python_stage_ms']:.0f} / {f['jvm_only_ms']:.0f} ms |
"""  # noqa: E501


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=5000, help="events/s")
    ap.add_argument("--duration", type=float, default=20, help="seconds measured")
    ap.add_argument("--warm-up", type=float, default=60, help="seconds at the rate first")
    ap.add_argument("--trigger", type=float, default=0.25)
    ap.add_argument("--docs", type=Path, default=None,
                    help="write the table to <dir>/bench-streaming.md")  # fmt: skip
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="psmatch-bench-floor-") as tmp:
        try:
            r = measure(args, Path(tmp))
        finally:
            release_shared_services()
    print(json.dumps(r, indent=2))
    if args.docs:
        argv = " ".join(sys.argv[1:])
        command = f".venv/bin/python bench/bench_spark_latency.py {argv}"
        replace_section(args.docs / "bench-streaming.md", "bench_spark_latency", render(r, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
