"""End-to-end benchmark of the streaming service (a script, not a test).

Starts its own Kafka broker and Redis (or uses ``--bootstrap-servers``/``--redis-url``),
generates a BE-Gen workload with ``python -m psmatch.begen``, subscribes all of it, runs
the Spark job in this process and measures:

1. *throughput*: a backlog of events is published at once and drained; events/s in and
   notifications/s out while draining. A backlog of the same size is drained first and
   not measured: the JVMs compile their hot code in their first minute of load, and
   the ceiling, measured after psmatch's backlog, finds them warm;
2. *latency*: events are published at a fixed rate for a while (after ``--warm-up``
   seconds at that rate, whose events are not measured: the benchmark starts the broker
   and Spark, and their JVMs spend the first minute of steady load compiling their hot
   code); publish → notification
   latency (p50, p99) at the configured trigger: the time the broker appended the
   notification, when a consumer can first read it (the benchmark creates the
   notifications topic with ``message.timestamp.type=LogAppendTime``), minus the event
   record's Kafka timestamp, for every 5th notification of the topic's first partition
   (:func:`sampled_latencies`). The notifications are read once the phase is over: no
   consumer takes CPU from the service on the same cores while it runs (a live one
   took 1.4 s of the 12.4 s of CPU of a 20,000-event batch at 100K, and in the latency
   phase about a fifth of a core at 100K, a third at 1M). The phase's producer runs in a
   process of its own (:func:`latency_load`), as a service's producers do: in the
   benchmark's process it held the interpreter lock the query's driver-side Python
   (``foreachBatch``) waits for after each call into the JVM;
3. *the ceiling*, in the same run: a second streaming query drains the same backlog
   (the same events, published the same way, to a topic of its own) through Spark with
   no matching: Kafka -> ``mapInArrow`` with the same event decoding as the workers
   (:func:`psmatch.service.records.events.parse_event`), one output record per event ->
   Kafka; psmatch's events/s are reported as a ratio of its events/s;
4. *where a batch's time goes*: Kafka read + subscription validation, Redis, match +
   write, and inside the workers catch-up, JSON parsing, matching and encoding; the
   workers' peak resident memory; and the CPU time each kind of process (Python
   workers, Spark's JVM, the broker, Redis, this benchmark) used while the backlog
   drained, in psmatch's phase and in the ceiling's; and for the latency phase, Spark's
   own timing of each micro-batch's steps (offsets, planning, the write-ahead log,
   psmatch's ``foreachBatch``, the commit), which bounds how low its latency can go;
5. *churn* (``--churn N``): N live subscriptions replaced, each id given another
   expression of the workload, published as fast as the producer writes; changes/s from
   the first published to the last applied in Redis with the workers caught up;
6. *a new worker* (last): a fresh Python process brings the index to the state's version
   as a Python worker that starts now does (:func:`psmatch.service.index_cache.sync_index`, with the
   job's settings: the snapshot the running workers keep fresh, then the change log
   after it), its wall and CPU time, peak memory and the changes it replayed.

7. *delivery modes* (``--delivery at-least-once,exactly-once``, a mode may come again):
   the backlog and latency phases in each mode in turn, on the same query restarted on
   its checkpoint, with the workers' commit time per batch and Spark's steps
   (:func:`render_delivery`);
8. *first match* (``--first-match-rate N``): new subscriptions at N changes/s and, every
   0.1 s, a probe event that matches each of those published in the 2 s before it;
   publish of a subscription → its first notification (:func:`first_match`).

The full report of a run is printed and kept in the run's work directory
(``results.json``). ``--docs docs`` also records the run's summary in
``docs/bench-streaming-runs.json``, which keeps the latest run of each configuration
(subscriptions, matcher, shards), rewrites from those runs the results table of
``docs/bench-streaming.md`` (between its ``bench_streaming`` markers, each row with the
command that reproduces it) and draws throughput against subscriptions (beside the
ceiling) and the latency distributions.

Long phases log their progress every 10 s. Usage::

    .venv/bin/python bench/bench_streaming.py --subscriptions 100000 \\
        --matching-probability 0.0001 --backlog 40000 --rate 5000 --duration 30 [--docs docs]
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Container, Iterable
from datetime import datetime
from itertools import pairwise
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from bench_worker_reload import worker_step  # noqa: E402 - beside this script
from docsection import replace_section  # noqa: E402
from host import cpu_model  # noqa: E402

from psmatch.adapters.kafka.admin import ensure_topics, service_topics  # noqa: E402
from psmatch.adapters.kafka.producer import JsonProducer  # noqa: E402
from psmatch.adapters.kafka.reader import TopicReader  # noqa: E402
from psmatch.devservers.services import release_shared_services, shared_services  # noqa: E402
from psmatch.service.config import ServiceConfig  # noqa: E402
from psmatch.service.job import (  # noqa: E402
    BatchReport,
    build_spark,
    start_query,
    stop_query,
    worker_settings,
)

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--subscriptions", type=int, default=100_000)
    ap.add_argument("--event-pool", type=int, default=20_000, help="distinct BE-Gen events")
    ap.add_argument("--matching-probability", type=float, default=None,
                    help="BE-Gen matching probability (default: psmatch.begen's)")  # fmt: skip
    ap.add_argument("--backlog", type=int, default=20_000, help="events of the throughput phase")
    ap.add_argument("--rate", type=float, default=1000, help="events/s of the latency phase")
    ap.add_argument("--duration", type=float, default=60, help="seconds of the latency phase")
    ap.add_argument("--warm-up", type=float, default=60,
                    help="seconds of load at --rate before the latency phase, not measured: "
                         "the JVMs the benchmark starts compile their hot code meanwhile")
    ap.add_argument("--trigger", type=float, default=1.0)
    ap.add_argument("--matcher", default=ServiceConfig().matcher,
                    help="the matcher family (default: the service's)")
    ap.add_argument("--shards", type=int, default=1,
                    help="subscription shards (psmatch.service.shards): one index per shard")
    ap.add_argument("--max-offsets-per-trigger", type=int, default=0)
    ap.add_argument("--churn", type=int, default=0,
                    help="last phase: this many live subscriptions replaced (each id given "
                         "another expression of the workload) as fast as they are published; "
                         "0: no such phase")  # fmt: skip
    ap.add_argument("--delivery", default="at-least-once",
                    help="delivery modes, comma-separated (at-least-once, exactly-once; "
                         "one may come again): the backlog and latency phases run in each, "
                         "in this order, the query restarted on its checkpoint between "
                         "them")  # fmt: skip
    ap.add_argument("--first-match-rate", type=float, default=0,
                    help="a phase of new subscriptions at this many changes/s for --duration "
                         "s, each followed by events it matches: publish of a subscription "
                         "-> its first notification; 0: no such phase")  # fmt: skip
    ap.add_argument("--bootstrap-servers")
    ap.add_argument("--redis-url")
    ap.add_argument("--docs", type=Path,
                    help="record the run in <dir>/bench-streaming-runs.json, rewrite the "
                         "results table of <dir>/bench-streaming.md from the recorded runs "
                         "and draw bench-streaming-throughput.png and "
                         "bench-streaming-latency.png there")  # fmt: skip
    args = ap.parse_args()
    modes = args.delivery.split(",")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")  # fmt: skip
    logging.getLogger("py4j").setLevel(logging.WARNING)

    work = Path(tempfile.mkdtemp(prefix="psmatch-bench-"))
    gen = [sys.executable, "-m", "psmatch.begen", "--subscriptions", str(args.subscriptions),
           "--events", str(args.event_pool), "--out", str(work / "workload"),
           "--measure-subscriptions", "0"]  # fmt: skip
    if args.matching_probability is not None:
        gen += ["--matching-probability", str(args.matching_probability)]
    log.info("generating the BE-Gen workload: %s", " ".join(gen[2:]))
    subprocess.run(gen, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    subs = [line.split("\t", 1) for line in
            (work / "workload" / "subscriptions.tsv").read_text().splitlines() if line]  # fmt: skip
    events = (work / "workload" / "events.jsonl").read_text().splitlines()

    started = args.bootstrap_servers is None or args.redis_url is None
    services = shared_services() if started else None
    tag = uuid.uuid4().hex[:6]
    config = ServiceConfig(
        bootstrap_servers=args.bootstrap_servers or services.kafka.bootstrap_servers,  # type: ignore[union-attr]
        redis_url=args.redis_url or services.redis.url,  # type: ignore[union-attr]
        redis_prefix=f"bench{tag}:",
        subscriptions_topic=f"bench{tag}.subscriptions",
        events_topic=f"bench{tag}.events",
        notifications_topic=f"bench{tag}.notifications",
        rejected_topic=f"bench{tag}.rejected",
        checkpoint_location=str(work / "checkpoint"),
        trigger_seconds=args.trigger,
        matcher=args.matcher,
        shards=args.shards,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        spark_master="local[*]",
        delivery=modes[0],
    )
    reports: list[BatchReport] = []
    params = json.loads((work / "workload" / "params.json").read_text())
    results: dict[str, Any] = {
        "subscriptions": len(subs), "matcher": args.matcher, "trigger_s": args.trigger,
        "shards": args.shards, "delivery": modes,
        "matching_probability": params.get("matching_probability", "default"),
    }  # fmt: skip
    # the broker stamps each notification with the time it appended it, when a consumer
    # can first read it: what the latency phase measures (sampled_latencies)
    notifications = service_topics(config.subscriptions_topic, config.events_topic,
                                   config.notifications_topic, config.rejected_topic,
                                   )[config.notifications_topic]  # fmt: skip
    ensure_topics(config.bootstrap_servers, {config.notifications_topic: {
        **notifications, "message.timestamp.type": "LogAppendTime"}},
        partitions=config.topic_partitions)  # fmt: skip
    spark = build_spark(config, app_name="psmatch-bench", **{"spark.ui.enabled": "false"})
    query = start_query(config, spark, on_report=reports.append)
    try:
        producer = JsonProducer(config.bootstrap_servers)

        def subscribe(pairs: Iterable[tuple[str, str]], phase: str) -> float:
            """Publish (id, expression) records as fast as the producer writes; seconds
            until all are applied in Redis and the batch's workers caught up."""
            t0 = time.monotonic()
            target = reports[-1].version if reports else 0
            for sub_id, expr in pairs:
                producer.send(config.subscriptions_topic, {"expr": expr, "subscriber": "bench"},
                              key=f"s{sub_id}")  # fmt: skip
                target += 1
            producer.flush(120)
            wait(lambda: reports and reports[-1].version >= target, 900, query,
                 lambda: f"{phase}: version {reports[-1].version if reports else 0:,} of "
                 f"{target:,}")  # fmt: skip
            return time.monotonic() - t0

        cpu0 = cpu_by_process()
        results["subscribe_s"] = subscribe(subs, "subscribe")
        results["subscribe_workers"] = catch_up_sums(reports)
        results["subscribe_cpu_s"] = cpu_since(cpu0)
        log.info("%d subscriptions applied in %.1f s", len(subs), results["subscribe_s"])

        # warm-up: every Python worker loads the 100K subscriptions once
        t0 = time.monotonic()
        results["first_notification_s"] = warm_up(config, producer, events, reports, query, "w")
        results["warmup_s"] = time.monotonic() - t0
        log.info("warm-up (workers load the index) took %.1f s", results["warmup_s"])

        # 1. throughput: drain a backlog, after one the same size not measured (the JVMs
        # compile in their first minute; the ceiling, measured after, finds them warm)
        drain(config, producer, events, reports, query, args, "j")
        results["throughput"] = drain(config, producer, events, reports, query, args, "t")
        log.info("throughput: %s", results["throughput"])

        # 3. the ceiling: the same backlog through Spark with no matching
        results["ceiling"] = ceiling(spark, config, producer, events, args.backlog, work)
        results["ceiling"]["ratio"] = (results["throughput"]["events_per_s"]
                                       / results["ceiling"]["events_per_s"])  # fmt: skip
        log.info("ceiling: %s", results["ceiling"])

        # 2. latency at a fixed rate, after a warm-up at that rate
        results["latency"], results["latency_quantiles_ms"] = latency(
            config, events, reports, query, args)  # fmt: skip
        log.info("latency: %s", results["latency"])
        results["modes"] = [[modes[0], mode_summary(results["throughput"], results["latency"])]]
        # the same two phases in each other delivery mode, on the same checkpoint
        for mode in modes[1:]:
            stop_query(query)
            config = config.replace(delivery=mode)
            query = start_query(config, spark, on_report=reports.append)
            warm_up(config, producer, events, reports, query, f"w{mode}")
            throughput = drain(config, producer, events, reports, query, args, f"t{mode}")
            lat, _ = latency(config, events, reports, query, args)
            results["modes"].append([mode, mode_summary(throughput, lat)])
            log.info("%s: %s", mode, results["modes"][-1][1])
        if args.first_match_rate:
            results["first_match"] = first_match(config, producer, reports, query,
                                                 args.first_match_rate, args.duration)
            log.info("first match: %s", results["first_match"])
        results["worker_peak_rss_bytes"] = max(r.workers.peak_rss_bytes for r in reports)
        results["index_bytes"] = max(r.workers.index_bytes for r in reports)

        # 4. churn at full size: updates of live subscriptions, as fast as they come
        if args.churn:
            first = len(reports)
            half = len(subs) // 2  # each id gets the expression of the subscription half-way on
            churn_s = subscribe(((subs[j % len(subs)][0], subs[(j + half) % len(subs)][1])
                                 for j in range(args.churn)), "churn")
            results["churn"] = {
                "changes": args.churn, "seconds": churn_s,
                "changes_per_s": args.churn / churn_s,
                "batches": sum(1 for r in reports[first:] if r.subscription_records),
                "workers": catch_up_sums(reports[first:]),
                "worker_peak_rss_bytes": max(r.workers.peak_rss_bytes for r in reports),
            }  # fmt: skip
            log.info("churn: %s", results["churn"])

        # 6. a new worker: a fresh process, as a Python worker that starts now
        results["new_worker"] = worker_step(worker_settings(config), reports[-1].version)
        log.info("a new worker: %s", results["new_worker"])
        results["matches_per_event"] = results["throughput"]["notifications"] / args.backlog
    finally:
        stop_query(query)
        spark.stop()
        if services is not None:
            release_shared_services()

    text = render(results)
    print(text)
    (work / "results.json").write_text(json.dumps(results, indent=2))
    if args.docs:
        runs = record_run(args.docs, results, " ".join(sys.argv[1:]))
        replace_section(args.docs / "bench-streaming.md", "bench_streaming", render_runs(runs))
        if len(modes) > 1 or "first_match" in results:
            replace_section(args.docs / "bench-streaming.md", "bench_streaming_delivery",
                            f"Written by `bench/bench_streaming.py {' '.join(sys.argv[1:])}` "
                            f"on {os.cpu_count()} cores of {cpu_model()}.\n\n"
                            + render_delivery(results))  # fmt: skip
        plot(runs, args.docs)
    return 0


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
        spark.readStream.format("kafka").options(**opts).option("subscribe", source)
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


def _bd_rows(bd: dict[str, float]) -> str:
    names = [
        ("read_s", "batches with subscription records: Kafka read + cache + validate them "
                   "and apply them to Redis (executors, job 1)"),
        ("state_s", "read the batch's version from Redis (driver)"),
        ("match_write_s", "match and write to Kafka on executors (job 2, wall; reads Kafka "
                          "when job 1 did not run)"),
        ("worker_sync_s", "  in workers: catch up to the batch version (sum over tasks)"),
        ("worker_snapshot_s", "  in workers: of which writing index snapshots"),
        ("worker_parse_s", "  in workers: JSON parse + validate events"),
        ("worker_match_s", "  in workers: match (match_flat_slots)"),
        ("worker_encode_s", "  in workers: build notification records"),
        ("worker_cpu_s", "  in workers: CPU time of the three steps above (the rest: waiting)"),
        ("worker_write_s", "  in workers: write the records to Kafka, until acknowledged"),
        ("total_s", "whole batch (wall)"),
    ]
    return "\n".join(f"| {label} | {bd[k]:.3f} |" for k, label in names)


def _cpu_rows(r: dict[str, Any]) -> str:
    """The CPU table's rows: each kind of process while subscribing, in psmatch's backlog
    phase, in the ceiling's and in the latency phase, then the totals."""
    phases = (r["subscribe_cpu_s"], r["throughput"]["cpu_s"], r["ceiling"]["cpu_s"],
              r["latency"]["cpu_s"])  # fmt: skip
    kinds = sorted(set().union(*phases), key=lambda k: -phases[1].get(k, 0.0))
    rows = [f"| {k} | " + " | ".join(f"{p.get(k, 0.0):.2f}" for p in phases) + " |"
            for k in kinds]  # fmt: skip
    rows.append("| all | " + " | ".join(f"{sum(p.values()):.2f}" for p in phases) + " |")
    return "\n".join(rows)


CPU_TABLE = """CPU seconds each kind of process used while subscribing (from the first subscription
published to the last applied, the workers caught up), while the backlog drained (from
the first event published to the last one read) and in the latency phase ({phase_s:.1f} s,
from the end of the warm-up to the end of the load; the load's own CPU, above, is in no
row: it has exited when the phase's figures are read); `/proc`, all processes of the
machine:

| process | subscribing | psmatch's backlog | the ceiling's | the latency phase |
| --- | --- | --- | --- | --- |
{rows}
"""


def _warm_up_row(lat: dict[str, Any]) -> str:
    """The warm-up's latencies, not measured above (no row without a warm-up)."""
    if not lat.get("warm_up_s"):
        return ""
    return (f"| the {lat['warm_up_s']:.0f} s of warm-up before it, at the same rate: p50 / "
            f"p99 | {lat['warm_up_p50_ms']:,.0f} / {lat['warm_up_p99_ms']:,.0f} ms |\n")


def _churn_row(r: dict[str, Any]) -> str:
    """The churn phase's row of a summary table (none without the phase)."""
    if "churn" not in r:
        return ""
    c = r["churn"]
    return (f"| churn: {c['changes']:,} live subscriptions replaced (publish → applied in "
            f"Redis, the workers caught up; {c['batches']} batches) | {c['seconds']:.1f} s → "
            f"**{c['changes_per_s']:,.0f} changes/s** (a worker's peak then "
            f"{c['worker_peak_rss_bytes'] / 2**20:,.0f} MiB)"
            f"{_catch_up_note(c.get('workers'))} |\n")


def _catch_up_note(sums: dict[str, float] | None) -> str:
    """The workers' catch-up of a phase, in words (none in runs recorded before it)."""
    if sums is None:
        return ""
    return (f" (the workers' catch-up {sums['sync_s']:.1f} s summed over tasks, of which "
            f"writing index snapshots {sums['snapshot_s']:.1f} s)")


def _new_worker_row(r: dict[str, Any]) -> str:
    """The new worker's row of a summary table (none in runs recorded before it)."""
    if "new_worker" not in r:
        return ""
    w = r["new_worker"]
    return (f"| a new worker ready at the end (a fresh process; built from the {w['built_from']}, "
            f"{w['replayed']:,} changes replayed) | {w['wall_s']:.1f} s ({w['cpu_s']:.1f} s of "
            f"CPU, peak {w['peak_rss'] / 2**20:,.0f} MiB) |\n")


def _spark_rows(ms: dict[str, float]) -> str:
    rows = [f"| {step} | {ms[step]:,.0f} |" for step in SPARK_STEPS]
    rows += [f"| the longest batch (triggerExecution) | {ms['max_triggerExecution']:,.0f} |",
             f"| from one batch's start to the next | {ms['start_to_start']:,.0f} |"]
    return "\n".join(rows)


RUN_FIELDS = ("subscriptions", "matcher", "shards")
"""What makes a configuration: the runs file keeps the latest run of each."""


def record_run(directory: Path, r: dict[str, Any], command: str) -> list[dict[str, Any]]:
    """Record this run's summary in ``<directory>/bench-streaming-runs.json`` in place of
    the earlier run of its configuration (:data:`RUN_FIELDS`); returns every recorded run.
    Fields a run did not measure (no ``--churn``) are ``None``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "bench-streaming-runs.json"
    runs = json.loads(path.read_text()) if path.exists() else []
    mib = 2**20
    churn, worker = r.get("churn"), r["new_worker"]
    run = {
        "subscriptions": r["subscriptions"], "matcher": r["matcher"], "shards": r["shards"],
        "command": command,
        "notifications_per_event": r["matches_per_event"],
        "subscribe_s": r["subscribe_s"],
        "first_notification_s": r.get("first_notification_s"),
        "events_per_s": r["throughput"]["events_per_s"],
        "ceiling_events_per_s": r["ceiling"]["events_per_s"],
        "rate": r["latency"]["rate_target"],
        "warm_up_s": r["latency"]["warm_up_s"],
        "p50_ms": r["latency"]["p50_ms"], "p99_ms": r["latency"]["p99_ms"],
        "churn_changes": churn["changes"] if churn else None,
        "churn_changes_per_s": churn["changes_per_s"] if churn else None,
        "churn_peak_mib": churn["worker_peak_rss_bytes"] / mib if churn else None,
        "new_worker_s": worker["wall_s"], "new_worker_replayed": worker["replayed"],
        "new_worker_peak_mib": worker["peak_rss"] / mib,
        "worker_peak_mib": r["worker_peak_rss_bytes"] / mib,
        "index_mib": r["index_bytes"] / mib,
        "latency_quantiles_ms": r["latency_quantiles_ms"],
    }  # fmt: skip
    runs = [x for x in runs if any(x[k] != run[k] for k in RUN_FIELDS)] + [run]
    runs.sort(key=lambda x: (x["matcher"], x["shards"], x["subscriptions"]))
    path.write_text(json.dumps(runs, indent=1) + "\n")
    return runs


TABLE_HEAD = ("| subscriptions, matcher | notifications per event | subscribing all of them | "
              "first notification then | backlog drained | ceiling (no matching) | "
              "psmatch / ceiling | p50 / p99 publish → notification | replacing live "
              "subscriptions | a new worker ready (a fresh process) | a worker's peak RSS | "
              "index (`stats()`) |\n" + "| --- " * 12 + "|")


def _seconds(s: float | None) -> str:
    return "–" if s is None else f"{s:.1f} s"


def render_runs(runs: list[dict[str, Any]]) -> str:
    """docs/bench-streaming.md's results table: a row per recorded configuration."""
    rows = []
    for x in sorted(runs, key=lambda x: (x["subscriptions"], x["matcher"] != "psthash",
                                         x["shards"])):  # fmt: skip
        shards = f" in {x['shards']} shards" if x["shards"] > 1 else ""
        churn = ("–" if x["churn_changes"] is None else
                 f"{x['churn_changes']:,} at **{x['churn_changes_per_s']:,.0f} changes/s** "
                 f"(a worker's peak then {x['churn_peak_mib']:,.0f} MiB)")  # fmt: skip
        replayed = ("" if not x["new_worker_replayed"] else
                    f", {x['new_worker_replayed']:,} changes replayed")  # fmt: skip
        rows.append(
            f"| {x['subscriptions']:,}, {x['matcher']}{shards} | "
            f"{x['notifications_per_event']:,.3g} | {x['subscribe_s']:.1f} s | "
            f"{_seconds(x.get('first_notification_s'))} | "
            f"**{x['events_per_s']:,.0f} events/s** | {x['ceiling_events_per_s']:,.0f} events/s | "
            f"{100 * x['events_per_s'] / x['ceiling_events_per_s']:.0f} % | "
            f"{x['p50_ms']:,.0f} / {x['p99_ms']:,.0f} ms at {x['rate']:,.0f} events/s | "
            f"{churn} | {x['new_worker_s']:.1f} s{replayed} (peak "
            f"{x['new_worker_peak_mib']:,.0f} MiB) | **{x['worker_peak_mib']:,.0f} MiB** | "
            f"{x['index_mib']:,.0f} MiB |")
    commands = [f".venv/bin/python bench/bench_streaming.py {x['command']}"
                for x in sorted(runs, key=lambda x: (x["subscriptions"], x["matcher"],
                                                     x["shards"]))]  # fmt: skip
    return f"""\
Written by `bench/bench_streaming.py --docs docs` from its latest run of each
configuration (`docs/bench-streaming-runs.json`), each run by one of these commands:

<!-- not executed: each starts Kafka, Redis and Spark and runs for many minutes -->
```sh
{chr(10).join(commands)}
```

{TABLE_HEAD}
{chr(10).join(rows)}"""


def plot(runs: list[dict[str, Any]], directory: Path) -> None:
    """Throughput against subscriptions (psmatch and the ceiling of the same runs) and
    the latency distribution of each recorded run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def label(x: dict[str, Any]) -> str:
        return f"{x['matcher']}, {x['shards']} shard(s)"

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for name in sorted({label(x) for x in runs}):
        line = [x for x in runs if label(x) == name]
        n = [x["subscriptions"] for x in line]
        ax.plot(n, [x["events_per_s"] for x in line], "o-", label=f"psmatch ({name})")
        ax.plot(n, [x["ceiling_events_per_s"] for x in line], "s--", alpha=0.6,
                label=f"ceiling, same runs ({name})")  # fmt: skip
    ax.set(xscale="log", yscale="log", xlabel="live subscriptions",
           ylabel="events/s drained (backlog)",
           title=f"Throughput against subscriptions ({os.cpu_count()} cores)")  # fmt: skip
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(directory / "bench-streaming-throughput.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for x in runs:
        if not (q := x["latency_quantiles_ms"]):  # a run recorded without its distribution
            continue
        ax.plot([v / 1000 for v in q], [i / (len(q) - 1) for i in range(len(q))],
                label=f"{x['subscriptions']:,} subs, {label(x)}, {x['rate']:,.0f} events/s "
                      f"offered, after {x['warm_up_s']:.0f} s of warm-up")  # fmt: skip
    ax.set(xlabel="publish → notification latency (s)", ylabel="share of notifications",
           title="Latency distribution (latency phase, 1 s trigger)")  # fmt: skip
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(directory / "bench-streaming-latency.png", dpi=110)
    plt.close(fig)


def render_delivery(r: dict[str, Any]) -> str:
    """The delivery modes side by side (each mode's backlog and latency phases, in the
    order run, on one query's checkpoint: a mode given twice, first and last, shows how
    much of a difference is the order's) and the first-match phase, if run."""
    modes = r.get("modes", [])
    plain = [m["events_per_s"] for mode, m in modes if mode == "at-least-once"]
    base = statistics.fmean(plain) if plain else float("nan")
    rows = []
    for mode, m in modes:
        spark = m["spark_ms"]
        rows.append(
            f"| {mode} | {m['events_per_s']:,.0f} ({100 * m['events_per_s'] / base:.0f} %) | "
            f"{m['backlog_commit_s']:.3f} of {m['backlog_write_s']:.3f} s | "
            f"{m['p50_ms']:,.0f} / **{m['p99_ms']:,.0f} ms** at {m['rate']:,.0f} events/s | "
            f"{1000 * m['latency_batch_s']:,.0f} ms ({1000 * m['latency_match_write_s']:,.0f} "
            f"match+write, {1000 * m['latency_commit_s']:,.0f} commit) | "
            f"{spark['latestOffset']:,.0f} / {spark['queryPlanning']:,.0f} / "
            f"{spark['walCommit']:,.0f} / {spark['addBatch']:,.0f} / "
            f"{spark['commitOffsets']:,.0f} / {spark['start_to_start']:,.0f} ms |")
    fm = r.get("first_match")
    first_row = "" if fm is None else (
        f"\nNew subscriptions at {fm['rate']:,.0f} changes/s ({fm['changes']:,}, sent at "
        f"{fm['changes_per_s_sent']:,.0f}/s), a probe event every "
        f"{FIRST_MATCH_TICK_S} s matching those of the last {FIRST_MATCH_WINDOW_S:.0f} s: "
        f"publish of a subscription → its first notification p50 / p99 / max "
        f"{fm['p50_ms']:,.0f} / **{fm['p99_ms']:,.0f}** / {fm['max_ms']:,.0f} ms "
        f"({fm['matched']:,} matched; delivery {modes[-1][0]}).\n")
    return f"""\
Delivery modes, in the order run on the same query (trigger {r["trigger_s"]} s):

| delivery | backlog events/s (% of at-least-once's, the mean of its rows) | \
backlog: commit of the workers' write, per batch | p50 / p99 publish → notification | \
latency phase: a batch (driver) | \
Spark per batch: latestOffset / queryPlanning / walCommit / addBatch / commitOffsets / \
start to start |
| --- | --- | --- | --- | --- | --- |
{chr(10).join(rows)}
{first_row}"""


def render(r: dict[str, Any]) -> str:
    tp, lat = r["throughput"], r["latency"]
    return f"""\
Measured with `bench/bench_streaming.py` on {os.cpu_count()} cores of {cpu_model()} (Spark
local[*], one Kafka broker, one Redis, all on loopback), {r["subscriptions"]:,} BE-Gen subscriptions
(matching probability {r["matching_probability"]}, i.e. ~{r["matches_per_event"]:,.0f} notifications
per event), matcher `{r["matcher"]}` in {r["shards"]} shard(s), trigger {r["trigger_s"]} s.
Latency: every {SAMPLE_EVERY}th notification of partition 0, the broker's append time less
its event's timestamp, after {lat["warm_up_s"]:.0f} s of warm-up at the same rate.

| phase | figure |
| --- | --- |
| subscribe {r["subscriptions"]:,} (publish → applied in Redis, the batch's workers caught \
up) | {r["subscribe_s"]:.1f} s{_catch_up_note(r.get("subscribe_workers"))} |
| first notification after subscribing (first event published → end of the batch \
that wrote one) | {_seconds(r.get("first_notification_s"))} |
| warm-up: each Python worker loads the index once | {r["warmup_s"]:.1f} s |
| throughput: backlog of {tp["events"]:,} events drained | {tp["drain_s"]:.1f} s |
| events/s in (backlog) | {tp["events_per_s"]:,.0f} |
| notifications/s out (backlog) | {tp["notifications_per_s"]:,.0f} \
({tp["notifications"]:,} in all) |
| ceiling: the same backlog with no matching, events/s | {r["ceiling"]["events_per_s"]:,.0f} \
(psmatch at {100 * r["ceiling"]["ratio"]:.0f} % of it) |
| latency phase: events/s offered (target {lat["rate_target"]:,.0f}) | {lat["rate_sent"]:,.0f} |
| notifications/s out (latency phase) | {lat["notifications_per_s"]:,.0f} |
| publish → notification latency p50 / p99 / max | {lat["p50_ms"]:,.0f} / \
{lat["p99_ms"]:,.0f} / {lat["max_ms"]:,.0f} ms |
{_warm_up_row(lat)}{_churn_row(r)}{_new_worker_row(r)}
Where a batch's time goes (mean per batch with events; backlog phase:
{tp["breakdown"]["batches"]:.0f} batches of {tp["breakdown"]["events_per_batch"]:,.0f} events;
latency phase:
{lat["breakdown"]["batches"]:.0f} batches of {lat["breakdown"]["events_per_batch"]:,.0f} events):

| step (backlog phase) | seconds |
| --- | --- |
{_bd_rows(tp["breakdown"])}

| step (latency phase) | seconds |
| --- | --- |
{_bd_rows(lat["breakdown"])}

{CPU_TABLE.format(rows=_cpu_rows(r), phase_s=r["latency"]["phase_s"])}
{render_delivery(r)}"""


if __name__ == "__main__":
    sys.exit(main())
