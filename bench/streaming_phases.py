"""The phases of ``bench/bench_streaming.py`` and what each measures.

Owns the run's steps against a running query: the warm-up, a backlog drained
(:func:`drain`), the latency phase with its load process (:func:`latency`,
:func:`latency_load`, :func:`sampled_latencies`), the first match of new subscriptions
(:func:`first_match`), Spark's no-matching ceiling (:func:`ceiling`), and the measures
they share: the CPU of each kind of process, the batches' breakdown and Spark's own
timing of its steps. ``bench/bench_spark_latency.py`` uses the latency load and
sampling too.
"""


from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Container
from datetime import datetime
from itertools import pairwise
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from pyspark import cloudpickle

from psmatch.adapters.kafka.admin import ensure_topics
from psmatch.adapters.kafka.producer import JsonProducer
from psmatch.adapters.kafka.reader import TopicReader
from psmatch.service.config import ServiceConfig
from psmatch.service.job import (
    BatchReport,
    kafka_source,
    stop_query,
)

log = logging.getLogger("bench")

log = logging.getLogger("bench")

SPAWN = multiprocessing.get_context("spawn")
"""How the latency phase's load process starts: afresh, not forked from a process that
runs a JVM's gateway and threads."""


SAMPLE_EVERY = 5
"""Every how many notifications of partition 0 the latency is taken of (notifications
are spread over the partitions by the hash of their subscription id, so one partition
is a sample of them all)."""


def sampled_latencies(bootstrap_servers: str, topic: str, start: int
                      ) -> list[tuple[int, float]]:  # fmt: skip
    """``(event timestamp, publish → notification latency)`` (ms) of every
    :data:`SAMPLE_EVERY`-th notification of partition 0 of ``topic`` from offset
    ``start`` to its end: the record's timestamp, the broker's append time
    (``LogAppendTime``), minus its event's Kafka timestamp."""
    latencies = []
    with TopicReader(bootstrap_servers, topic, partitions=[0], offsets={0: start}) as reader:
        while not reader.at_end:
            for record in reader.poll(0.5, max_records=50_000)[::SAMPLE_EVERY]:
                event_ts = json.loads(record.value or b"{}").get("event_timestamp")
                if event_ts:
                    latencies.append((event_ts, record.timestamp_ms - event_ts))
    return latencies


LOAD_TICK_S = 0.005
"""How often the latency phase's producer publishes the events due: a sleep per event
took 0.38 of a core at 5,000 events/s, this 0.14."""


def latency_load(bootstrap_servers: str, events_topic: str, events: list[str], rate: float,
                 duration: float, conn: Connection) -> None:  # fmt: skip
    """The latency phase's load, in a process of its own: ``rate * duration`` events
    published at ``rate``, those due every :data:`LOAD_TICK_S`. Sends the seconds
    publishing took on ``conn``, then the CPU seconds this process used."""
    producer = JsonProducer(bootstrap_servers)
    n = int(rate * duration)
    sent = 0
    t0 = time.monotonic()
    while sent < n:  # each tick, the events due by then
        due = min(n, int((time.monotonic() - t0) * rate) + 1)
        for i in range(sent, due):
            producer.send(events_topic, events[i % len(events)], key=f"l{i}", raw=True)
        sent = due
        time.sleep(LOAD_TICK_S)
    producer.flush(120)
    conn.send(time.monotonic() - t0)
    conn.send(time.process_time())


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def catch_up_sums(reports: list[BatchReport]) -> dict[str, float]:
    """The workers' catch-up seconds over ``reports``, summed over tasks, and the part of
    them spent writing index snapshots."""
    return {"sync_s": sum(r.workers.sync_s for r in reports),
            "snapshot_s": sum(r.workers.snapshot_s for r in reports)}  # fmt: skip


def breakdown(reports: list[BatchReport]) -> dict[str, float]:
    busy = [r for r in reports if r.events]
    n = max(1, len(busy))
    out = {k: sum(getattr(r, k) for r in busy) / n
           for k in ("total_s", "read_s", "state_s", "match_write_s")}  # fmt: skip
    for k in ("sync_s", "snapshot_s", "parse_s", "match_s", "encode_s", "cpu_s",
              "write_s", "commit_s"):  # TaskMetrics
        out[f"worker_{k}"] = sum(getattr(r.workers, k) for r in busy) / n
    out["batches"] = len(busy)
    out["events_per_batch"] = sum(r.events for r in busy) / n
    return out


SPARK_STEPS = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets",
               "triggerExecution")
"""The steps of a micro-batch Spark times (``StreamingQueryProgress.durationMs``), in
order: ``addBatch`` is psmatch's ``foreachBatch``; ``triggerExecution`` the whole batch."""


def spark_steps(progress: list[dict[str, Any]]) -> dict[str, float]:
    """Mean milliseconds of each of :data:`SPARK_STEPS` over the batches in ``progress``
    that read events, their largest ``triggerExecution``, and the mean time from one such
    batch's start to the next one's."""
    busy = [p for p in progress if p.get("numInputRows", 0) > 0]
    n = max(1, len(busy))
    out = {step: sum(p["durationMs"].get(step, 0) for p in busy) / n for step in SPARK_STEPS}
    out["max_triggerExecution"] = max((p["durationMs"].get("triggerExecution", 0)
                                       for p in busy), default=0)  # fmt: skip
    starts = [datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")) for p in busy]
    gaps = [(b - a).total_seconds() * 1000 for a, b in pairwise(starts)]
    out["start_to_start"] = statistics.fmean(gaps) if gaps else float("nan")
    out["batches"] = len(busy)
    return out


WARM_UP_EVENTS = 200


def warm_up(config: ServiceConfig, producer: JsonProducer, events: list[str],
            reports: list[BatchReport], query: Any, key: str) -> float | None:  # fmt: skip
    """A few events, until matched: every Python worker loads the index once. Returns
    the seconds from the first event's publication to the end of the first batch that
    wrote a notification (its records are in Kafka then: an upper bound of the first
    notification's latency); ``None`` if none matched."""
    first = len(reports)
    base = sum(r.events for r in reports)
    t0 = time.monotonic()
    for i in range(WARM_UP_EVENTS):
        producer.send(config.events_topic, events[i % len(events)], key=f"{key}{i}", raw=True)
    producer.flush()
    notified: list[float] = []

    def matched() -> bool:
        if not notified and any(r.notifications for r in reports[first:]):
            notified.append(time.monotonic() - t0)
        return sum(r.events for r in reports) - base >= WARM_UP_EVENTS

    wait(matched, 900, query)
    return notified[0] if notified else None


def drain(config: ServiceConfig, producer: JsonProducer, events: list[str],
          reports: list[BatchReport], query: Any, args: argparse.Namespace,
          key: str) -> dict[str, Any]:  # fmt: skip
    """The throughput phase: ``--backlog`` events published at once and drained."""
    time.sleep(2 * args.trigger)
    first = len(reports)
    base = sum(r.events for r in reports)
    cpu0 = cpu_by_process()
    t0 = time.monotonic()
    for i in range(args.backlog):
        producer.send(config.events_topic, events[i % len(events)], key=f"{key}{i}", raw=True)
    producer.flush(120)
    publish_s = time.monotonic() - t0
    wait(lambda: sum(r.events for r in reports) - base >= args.backlog, 1800, query,
         lambda: f"backlog: {sum(r.events for r in reports) - base:,} of "
         f"{args.backlog:,} events matched")  # fmt: skip
    drain_s = time.monotonic() - t0
    cpu = cpu_since(cpu0)
    time.sleep(3)
    tp = reports[first:]
    produced = sum(r.notifications for r in tp)
    return {"events": args.backlog, "publish_events_per_s": args.backlog / publish_s,
            "drain_s": drain_s, "events_per_s": args.backlog / drain_s,
            "notifications": produced, "notifications_per_s": produced / drain_s,
            "breakdown": breakdown(tp), "cpu_s": cpu}  # fmt: skip


def latency(config: ServiceConfig, events: list[str], reports: list[BatchReport], query: Any,
            args: argparse.Namespace) -> tuple[dict[str, Any], list[float]]:  # fmt: skip
    """The latency phase: events at ``--rate`` for ``--warm-up`` s (matched, not measured),
    then ``--duration`` s measured; the notifications are read once it is over, so that
    no consumer takes CPU from the service on the shared cores while it runs. Returns
    its figures and the latency distribution (200 quantiles, for the plot)."""
    base = sum(r.events for r in reports)
    n_warm, n = int(args.rate * args.warm_up), int(args.rate * args.duration)
    with TopicReader(config.bootstrap_servers, config.notifications_topic,
                     from_beginning=False, partitions=[0]) as reader:  # fmt: skip
        start = reader.end_offsets()[0]
    conn, child_conn = SPAWN.Pipe()
    load = SPAWN.Process(target=latency_load, name="psmatch-bench-load", daemon=True, args=(
        config.bootstrap_servers, config.events_topic, events, args.rate,
        args.warm_up + args.duration, child_conn))  # fmt: skip
    load.start()
    if args.warm_up:
        log.info("latency: %.0f s of warm-up at %.0f events/s", args.warm_up, args.rate)
        time.sleep(args.warm_up)
    first = len(reports)
    last_batch = (query.lastProgress or {"batchId": -1})["batchId"]
    measured_from_ms = time.time() * 1000
    # the load, which ends before the phase's CPU is read, is in no row
    cpu0, started = cpu_by_process(exclude={load.pid or 0}), time.perf_counter()
    sent_s = conn.recv()
    wait(lambda: sum(r.events for r in reports) - base >= n_warm + n, 900, query,
         lambda: f"latency: {sum(r.events for r in reports) - base:,} of "
         f"{n_warm + n:,} events matched")  # fmt: skip
    load_cpu_s = conn.recv()
    load.join()
    latency_cpu_s, latency_phase_s = cpu_since(cpu0), time.perf_counter() - started
    sampled = sampled_latencies(config.bootstrap_servers, config.notifications_topic, start)
    lat = [ms for event_ts, ms in sampled if event_ts >= measured_from_ms]
    warm = [ms for event_ts, ms in sampled if event_ts < measured_from_ms]
    produced = sum(r.notifications for r in reports[first:])
    figures = {
        "rate_target": args.rate, "rate_sent": (n_warm + n) / sent_s, "events": n,
        "warm_up_s": args.warm_up, "warm_up_p50_ms": pct(warm, 0.50),
        "warm_up_p99_ms": pct(warm, 0.99), "notifications": produced,
        "notifications_per_s": produced / latency_phase_s, "latency_samples": len(lat),
        "load_cpu_s": load_cpu_s, "cpu_s": latency_cpu_s, "phase_s": latency_phase_s,
        "p50_ms": pct(lat, 0.50), "p99_ms": pct(lat, 0.99),
        "max_ms": max(lat) if lat else float("nan"),
        "mean_ms": statistics.fmean(lat) if lat else float("nan"),
        "breakdown": breakdown(reports[first:]),
        "spark_ms": spark_steps([p for p in query.recentProgress if p["batchId"] > last_batch]),
    }  # fmt: skip
    return figures, [pct(lat, q / 200) for q in range(201)]


def mode_summary(throughput: dict[str, Any], lat: dict[str, Any]) -> dict[str, Any]:
    """What the delivery modes' table shows of one mode's backlog and latency phases."""
    tb, lb = throughput["breakdown"], lat["breakdown"]
    return {"events_per_s": throughput["events_per_s"],
            "notifications_per_s": throughput["notifications_per_s"],
            "backlog_commit_s": tb["worker_commit_s"], "backlog_write_s": tb["worker_write_s"],
            "backlog_batches": tb["batches"], "p50_ms": lat["p50_ms"], "p99_ms": lat["p99_ms"],
            "rate": lat["rate_target"], "latency_batch_s": lb["total_s"],
            "latency_commit_s": lb["worker_commit_s"],
            "latency_match_write_s": lb["match_write_s"],
            "spark_ms": lat["spark_ms"]}  # fmt: skip


FIRST_MATCH_TICK_S = 0.1
"""How often the first-match phase publishes its probe event: the measure's resolution.
Each subscription is notified once a tick for :data:`FIRST_MATCH_WINDOW_S`: at 1,000
changes/s, 20,000 notifications/s."""


FIRST_MATCH_WINDOW_S = 2.0
"""How long after its publication a subscription of the first-match phase matches the
probe events: a subscription not matched by then counts as unmatched."""


def first_match(config: ServiceConfig, producer: JsonProducer, reports: list[BatchReport],
                query: Any, rate: float, duration: float) -> dict[str, Any]:  # fmt: skip
    """New subscriptions at ``rate`` changes/s for ``duration`` s, the i-th
    ``fm_probe between i and i + w - 1`` (an attribute no workload event has; ``w``
    subscriptions are published in :data:`FIRST_MATCH_WINDOW_S`), and every
    :data:`FIRST_MATCH_TICK_S` a probe event ``{"fm_probe": j}``, ``j`` the newest
    subscription published by then: each probe matches every subscription published
    at most that window before it, none published after it. Per subscription, the
    broker's append time of its first notification less the time its record was
    published."""
    with TopicReader(config.bootstrap_servers, config.notifications_topic,
                     from_beginning=False) as reader:  # fmt: skip
        ends = reader.end_offsets()
    n = int(rate * duration)
    window = max(1, int(rate * FIRST_MATCH_WINDOW_S))
    published: dict[str, float] = {}
    t0 = time.monotonic()
    sent, ticks, publishing_s = 0, 0, 0.0
    while True:
        now = time.monotonic() - t0
        due = min(n, int(now * rate) + 1)
        for i in range(sent, due):
            published[f"fm{i}"] = time.time() * 1000
            publishing_s = now
            producer.send(config.subscriptions_topic,
                          {"expr": f"fm_probe between {i} and {i + window - 1}",
                           "subscriber": "bench"}, key=f"fm{i}")  # fmt: skip
        sent = due
        if now >= ticks * FIRST_MATCH_TICK_S:
            producer.send(config.events_topic, {"fm_probe": sent - 1}, key=f"fm-e{ticks}")
            ticks += 1
        if sent == n and now > publishing_s + FIRST_MATCH_WINDOW_S:
            break
        time.sleep(LOAD_TICK_S)
    producer.flush(120)
    got: dict[str, float] = {}
    deadline = time.monotonic() + 300
    with TopicReader(config.bootstrap_servers, config.notifications_topic,
                     offsets=ends) as reader:  # fmt: skip
        while len(got) < n and time.monotonic() < deadline:
            for r in reader.read_to_end(timeout=120):
                sub = (r.key or b"").decode()
                if sub.startswith("fm"):
                    got[sub] = min(got.get(sub, float("inf")), r.timestamp_ms - published[sub])
            time.sleep(0 if len(got) == n else 2)
    lat = list(got.values())
    return {"changes": n, "rate": rate, "changes_per_s_sent": n / max(publishing_s, 1e-9),
            "matched": len(got), "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99),
            "max_ms": max(lat, default=float("nan"))}  # fmt: skip


PROGRESS_EVERY_S = 10.0


PROCESS_KINDS = (
    ("Python workers", ("pyspark.daemon", "pyspark/daemon.py")),
    ("Spark JVM (driver and executors)", ("org.apache.spark.deploy.SparkSubmit",)),
    ("Kafka broker", ("kafka.Kafka", "KafkaRaftServer")),
    ("Redis", ("redis-server",)),
)
"""Each kind of process the CPU table names, and what its command line holds."""


def cpu_by_process(exclude: Container[int] = ()) -> dict[str, float]:
    """CPU seconds (user + system) used so far by every process of this machine but
    ``exclude``, summed by kind (:data:`PROCESS_KINDS`; this process and its other
    children are the benchmark: its producers and the query's driver-side Python). The
    difference of two calls is what each kind used in between (Linux ``/proc``)."""
    ticks = os.sysconf("SC_CLK_TCK")
    used: dict[str, float] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) in exclude:
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace")  # fmt: skip
        except OSError:  # the process ended meanwhile
            continue
        fields = stat.rsplit(")", 1)[1].split()
        seconds = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        kind = next((name for name, marks in PROCESS_KINDS
                     if any(mark in cmdline for mark in marks)), None)  # fmt: skip
        if kind is None:
            mine = os.getpid() in (int(pid), int(fields[1]))  # fields[1]: the parent's pid
            kind = "this benchmark (producer, driver-side Python)" if mine else "other processes"
        used[kind] = used.get(kind, 0.0) + seconds
    return used


def cpu_since(before: dict[str, float]) -> dict[str, float]:
    """CPU seconds used by each kind of process since ``before`` (:func:`cpu_by_process`)."""
    return {kind: s - before.get(kind, 0.0) for kind, s in cpu_by_process().items()}


def wait(predicate: Any, timeout: float, query: Any, progress: Any = None) -> None:
    """Wait until ``predicate()``; every :data:`PROGRESS_EVERY_S` seconds, log
    ``progress()`` (a line saying how far the phase is)."""
    start = time.monotonic()
    deadline, shown = start + timeout, start
    while not predicate():
        if query.exception() is not None:
            raise RuntimeError(f"the query failed: {query.exception()}")
        now = time.monotonic()
        if now > deadline:
            raise TimeoutError(f"benchmark step did not finish in {timeout} s")
        if progress is not None and now - shown >= PROGRESS_EVERY_S:
            log.info("%s (%.0f s)", progress(), now - start)
            shown = now
        time.sleep(0.2)


# Spark's Python workers cannot import this module (bench/ is not on their path): the
# functions it hands them (decode_only) travel by value, as a script's own do
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def decode_only(batches: Any) -> Any:
    """The ceiling's ``mapInArrow`` function: each event decoded and validated as the
    workers do (:func:`psmatch.service.records.events.parse_event`), one output record per event."""
    import pyarrow as pa

    from psmatch.service.records.events import parse_event
    from psmatch.service.task_contract import OUTPUT_SCHEMA

    for batch in batches:
        cols = batch.to_pydict()
        for value in cols["value"]:
            parse_event(value)
        yield pa.RecordBatch.from_arrays(
            [batch.column("topic"), batch.column("key"), batch.column("value")],
            schema=OUTPUT_SCHEMA,
        )


def ceiling(spark: Any, config: ServiceConfig, producer: JsonProducer, events: list[str],
            backlog: int, work: Path) -> dict[str, float]:  # fmt: skip
    """Drain ``backlog`` events through Spark with no matching, measured as psmatch's
    backlog phase is: the query runs (warmed up by a first few events), the backlog is
    published, and the clock stops when the query has read all of it."""
    from pyspark.sql import functions as F

    from psmatch.adapters.kafka.security import spark_kafka_options
    from psmatch.adapters.kafka.sink import sink_settings

    source, sink = f"{config.events_topic}.ceiling", f"{config.events_topic}.ceiling-out"
    ensure_topics(config.bootstrap_servers, {source: {}, sink: {}},
                  partitions=config.topic_partitions, security=config.kafka_security)  # fmt: skip
    opts = spark_kafka_options(config.bootstrap_servers, config.kafka_security)
    sink_opts = {f"kafka.{k}": v for k, v in sink_settings(config.sink_compression).items()}
    query = (
        kafka_source(spark, config).option("subscribe", source)
        .option("startingOffsets", "earliest").load()
        .select("key", "value", F.lit(sink).alias("topic"))
        .mapInArrow(decode_only, "topic STRING, key BINARY, value BINARY")
        .writeStream.format("kafka").options(**opts).options(**sink_opts)
        .option("checkpointLocation", str(work / "checkpoint-ceiling"))
        .trigger(processingTime=f"{config.trigger_seconds} seconds").start()
    )  # fmt: skip

    def read() -> int:
        return sum(p.get("numInputRows", 0) for p in query.recentProgress)

    try:
        n_warm = 200
        for i in range(n_warm):
            producer.send(source, events[i % len(events)], key=f"w{i}", raw=True)
        producer.flush()
        wait(lambda: read() >= n_warm, 900, query)
        time.sleep(2 * config.trigger_seconds)
        base = read()
        cpu0 = cpu_by_process()
        t0 = time.monotonic()
        for i in range(backlog):
            producer.send(source, events[i % len(events)], key=f"t{i}", raw=True)
        producer.flush(120)
        wait(lambda: read() - base >= backlog, 1800, query,
             lambda: f"ceiling: {read() - base:,} of {backlog:,} events")  # fmt: skip
        drain_s = time.monotonic() - t0
        cpu = cpu_since(cpu0)
    finally:
        stop_query(query)
    return {"events": backlog, "drain_s": drain_s, "events_per_s": backlog / drain_s,
            "cpu_s": cpu}  # fmt: skip
