"""End-to-end benchmark of the streaming service (a script, not a test).

Starts its own Kafka broker and Redis (or uses ``--bootstrap-servers``/``--redis-url``),
generates a workload (BE-Gen's, ``python -m psmatch.begen``, or with ``--workload flights``
watches over real flights, ``bench/flights_workload.py``), subscribes all of it, runs
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
   (:func:`streaming_phases.sampled_latencies`). The notifications are read once the
   phase is over: no consumer takes CPU from the service on the same cores while it runs (a live one
   took 1.4 s of the 12.4 s of CPU of a 20,000-event batch at 100K, and in the latency
   phase about a fifth of a core at 100K, a third at 1M). The phase's producer runs in a
   process of its own (:func:`streaming_phases.latency_load`), as a service's producers do: in the
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
   (:func:`streaming_report.render_delivery`);
8. *first match* (``--first-match-rate N``): new subscriptions at N changes/s and, every
   0.1 s, a probe event that matches each of those published in the 2 s before it;
   publish of a subscription → its first notification (:func:`streaming_phases.first_match`).

The full report of a run is printed and kept in the run's work directory
(``results.json``). ``--docs docs`` also records the run's summary in
``docs/bench-streaming-runs.json``, which keeps the latest run of each configuration
(subscriptions, matcher, shards), rewrites from those runs the results table of
``docs/bench-streaming.md`` (between its ``bench_streaming`` markers, each row with the
command that reproduces it) and draws throughput against subscriptions (beside the
ceiling) and the latency distributions.

The phases live in ``bench/streaming_phases.py``, the report in
``bench/streaming_report.py``. Long phases log their progress every 10 s. Usage::

    .venv/bin/python bench/bench_streaming.py --subscriptions 100000 \\
        --matching-probability 0.0001 --backlog 40000 --rate 5000 --duration 30 [--docs docs]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from bench_worker_reload import worker_step  # noqa: E402 - beside this script
from docsection import replace_section  # noqa: E402
from host import cpu_model  # noqa: E402

from psmatch.adapters.kafka.admin import ensure_topics, service_topics  # noqa: E402
from psmatch.adapters.kafka.producer import JsonProducer  # noqa: E402
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
from streaming_phases import (  # noqa: E402
    catch_up_sums,
    ceiling,
    cpu_by_process,
    cpu_since,
    drain,
    first_match,
    latency,
    mode_summary,
    wait,
    warm_up,
)
from streaming_report import (  # noqa: E402
    BEGEN,
    plot,
    record_run,
    render,
    render_delivery,
    render_runs,
)

log = logging.getLogger("bench")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--workload", choices=("begen", "flights"), default="begen",
                    help="the subscriptions and events: BE-Gen's (python -m psmatch.begen) or "
                         "watches of routes and days over real flights "
                         "(bench/flights_workload.py)")  # fmt: skip
    ap.add_argument("--subscriptions", type=int, default=100_000)
    ap.add_argument("--event-pool", type=int, default=20_000, help="distinct events")
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
    workload = work / "workload"
    sizes = ["--subscriptions", str(args.subscriptions), "--events", str(args.event_pool),
             "--out", str(workload)]  # fmt: skip
    if args.workload == "begen":
        gen = [sys.executable, "-m", "psmatch.begen", *sizes, "--measure-subscriptions", "0"]
        if args.matching_probability is not None:
            gen += ["--matching-probability", str(args.matching_probability)]
    else:
        gen = [sys.executable, str(ROOT / "bench" / "flights_workload.py"), *sizes]
    log.info("generating the workload: %s", " ".join(gen[1:]))
    subprocess.run(gen, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    subs = [line.split("\t", 1) for line in
            (workload / "subscriptions.tsv").read_text().splitlines() if line]  # fmt: skip
    events = (workload / "events.jsonl").read_text().splitlines()

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
    params = json.loads((workload / "params.json").read_text())
    results: dict[str, Any] = {
        "workload": params.get("workload", BEGEN), "subscriptions": len(subs),
        "matcher": args.matcher, "trigger_s": args.trigger, "shards": args.shards,
        "delivery": modes,
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


if __name__ == "__main__":
    sys.exit(main())
