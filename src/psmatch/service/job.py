"""The Spark Structured Streaming job: one query over both input topics, per micro-batch.

Owns the Spark session settings, the streaming query and the ``foreachBatch`` logic:

1. The batch's subscription records (records of both topics, read by Spark's Kafka
   source) are decoded, validated and applied to Redis in offset order (idempotent on
   replay, see :mod:`psmatch.adapters.state`), each record inside the per-record barrier
   (whatever one record raises makes it a rejected record, see
   :mod:`psmatch.service.subscriptions`). A Redis fault is never a record's: it fails the
   batch. Where, depends on their offset ranges in the query's offset log
   (:func:`psmatch.service.checkpoint.subscription_ranges`):

   - none (most batches): nothing to do;
   - at most :data:`DRIVER_APPLY_RECORDS`: the driver reads those ranges from Kafka
     itself (:class:`psmatch.adapters.kafka.reader.RangeReader`) and applies them, so
     that the batch runs one Spark job, the matching, and a new subscription waits for
     no other;
   - more, or ranges the log cannot tell: the batch is cached on the executors and a
     Spark job applies them there, a task per partition of the topic; only the counts
     and the rejects are collected to the driver.

   Without that Spark job the batch is not cached: its one job reads the events straight
   from Kafka.
2. The driver reads the batch's subscription version (and the live count) from Redis.
3. The events are matched on the executors with ``mapInArrow``
   (:func:`psmatch.service.tasks.match_batches`), every task at that version; they are never
   collected to the driver. With ``shards`` > 1 (:mod:`psmatch.service.shards`) each event is
   first paired with every shard id (:func:`by_shard`) and the pairs are partitioned by
   shard id, so task i matches every event against the index of shard i alone; the
   notifications are the union. With one shard the plan has no product and no shuffle.
4. The matching tasks write their notifications and rejected events to Kafka
   themselves (:func:`psmatch.service.tasks.match_and_write`, with librdkafka), every
   record acknowledged before a task ends; the driver writes the rejected subscription
   records the same way (:class:`psmatch.adapters.kafka.sink.RecordSink`). Spark's Kafka
   sink is not used: it turns each record into a Spark row in the JVM, several times the
   CPU per notification record that librdkafka takes.

Per batch, one log line tells what happened and where the time went, and one WARNING
line summarises the rejects, if any (counts by code, a few samples).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from pyspark.accumulators import AccumulatorParam

from psmatch.adapters.kafka.admin import ensure_topics, service_topics
from psmatch.adapters.kafka.reader import RangeReader
from psmatch.adapters.kafka.security import spark_kafka_options
from psmatch.adapters.kafka.sink import RecordSink, SinkSettings
from psmatch.adapters.state import StateStore
from psmatch.errors import PsmatchError
from psmatch.service.checkpoint import snapshot_dir, subscription_ranges
from psmatch.service.config import ServiceConfig
from psmatch.service.delivery import transactional_prefix
from psmatch.service.records.common import RecordLimits
from psmatch.service.records.tenants import tenant_of_topic, topic_pattern
from psmatch.service.spark_rpc import spark_rpc_conf, warn_if_unprotected
from psmatch.service.subscriptions import (
    APPLIED_DDL,
    Tenancy,
    ValidatedSubscriptions,
    apply_batches,
    apply_records,
    gather,
)
from psmatch.service.task_contract import (
    MAX_SAMPLES,
    OUTPUT_DDL,
    TaskMetrics,
    WorkerSettings,
    output_records,
)
from psmatch.service.tasks import match_and_write

log = logging.getLogger("psmatch.job")


class ServiceError(PsmatchError):
    """The streaming service cannot start or run (missing jars, unreachable servers)."""


@dataclass(frozen=True, slots=True)
class BatchReport:
    """What one micro-batch did and where its time went (seconds): the driver's own
    figures, and ``workers``, those its matching tasks reported."""

    batch_id: int
    version: int
    subscription_records: int
    subscriptions_applied: int
    read_s: float  # reading the batch, and its subscription records validated and applied
    state_s: float  # the driver reading the version and the live count from Redis
    match_write_s: float
    total_s: float
    subscriptions_validate_s: float = 0.0  # of read_s (the driver's, or summed over tasks)
    subscriptions_apply_s: float = 0.0  # of read_s (the driver's, or summed over tasks)
    subscriptions_on_driver: bool = False  # applied by the driver, not by a Spark job
    live_subscriptions: int = 0
    shards: int = 1
    workers: TaskMetrics = field(default_factory=TaskMetrics)
    subscription_rejects: tuple[tuple[str, int], ...] = ()  # (code, count)
    samples: tuple[str, ...] = ()  # a few rejects, for the log

    @property
    def subscriptions_rejected(self) -> int:
        return sum(n for _, n in self.subscription_rejects)

    @property
    def events(self) -> int:
        return self.workers.events

    @property
    def events_rejected(self) -> int:
        return self.workers.rejected

    @property
    def notifications(self) -> int:
        return self.workers.notifications

    @property
    def rejects(self) -> tuple[tuple[str, str, int], ...]:
        """(input, code, count) of every reject of the batch."""
        events = tuple(sorted(self.workers.rejects.items()))
        return (*(("subscriptions", code, n) for code, n in self.subscription_rejects),
                *(("events", code, n) for code, n in events))  # fmt: skip

    def line(self) -> str:
        w = self.workers
        subscribing = ""
        if self.subscription_records:
            where = "on the driver" if self.subscriptions_on_driver else "in tasks"
            subscribing = (f" ({where}: validate {self.subscriptions_validate_s:.2f} s, "
                           f"apply {self.subscriptions_apply_s:.2f} s)")  # fmt: skip
        snapshots = ""
        if w.snapshot_s:
            snapshots = f" (of which writing index snapshots {w.snapshot_s:.2f} s)"
        sharding = ""
        if self.shards > 1:
            counts = ", ".join(f"{i}: {n}" for i, n in sorted(w.shard_subscriptions.items()))
            sharding = (f"; {len(w.shard_subscriptions)} of {self.shards} shards matched "
                        f"(subscriptions per shard {counts}; at most {w.process_indexes} "
                        "shard indexes in one worker process)")  # fmt: skip
        return (
            f"batch {self.batch_id}: {self.subscription_records} subscription records "
            f"({self.subscriptions_applied} applied, {self.subscriptions_rejected} rejected) "
            f"-> version {self.version}; {self.events} events "
            f"({self.events_rejected} rejected) -> {self.notifications} notifications "
            f"in {self.total_s:.2f} s [read+subs {self.read_s:.2f} s{subscribing}, "
            f"redis {self.state_s:.2f} s, "
            f"match+write {self.match_write_s:.2f} s; in workers: catch-up "
            f"{w.sync_s:.2f} s{snapshots}, parse {w.parse_s:.2f} s, "
            f"match {w.match_s:.2f} s, encode {w.encode_s:.2f} s (CPU {w.cpu_s:.2f} s of "
            f"these three), write {w.write_s:.2f} s; worker peak RSS "
            f"{w.peak_rss_bytes / 2**20:,.0f} MiB]{sharding}"
        )

    def rejects_line(self) -> str | None:
        """The batch's rejects in one line (counts by input and code, a few samples), or
        ``None`` when there were none; the rejected topic has every record in full."""
        if not self.rejects:
            return None
        counts = ", ".join(f"{name} {code} {n}" for name, code, n in self.rejects)
        return (f"batch {self.batch_id}: rejected {self.subscriptions_rejected} subscription "
                f"records and {self.events_rejected} events ({counts}); e.g. "
                + "; ".join(self.samples))  # fmt: skip


def connector_jars(config: ServiceConfig) -> list[str]:
    jars = sorted(str(p) for p in Path(config.spark_jars_dir).glob("*.jar"))
    if not any("spark-sql-kafka" in j for j in jars):
        raise ServiceError(
            f"Spark's Kafka connector is not in {config.spark_jars_dir}: "
            "run scripts/fetch-jars.sh (or make jars)"
        )
    return jars


def build_spark(config: ServiceConfig, app_name: str = "psmatch", **extra: str) -> Any:
    """The SparkSession the job runs in (created, or the running one reconfigured)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if config.spark_master.startswith(("local", "spark://127.", "spark://localhost:")):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # stay on loopback
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName(app_name)
        .master(config.spark_master)
        .config("spark.jars", ",".join(connector_jars(config)))
        .config("spark.sql.shuffle.partitions", str(config.shuffle_partitions))
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(config.match_batch_size))
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
        .config("spark.driver.memory", "4g")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "false")
    )
    for key, value in {**spark_rpc_conf(config.spark_master), **extra}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    warn_if_unprotected(config.spark_master, spark.sparkContext.getConf().get)
    spark.sparkContext.setLogLevel("WARN")
    if config.log_level.upper() != "DEBUG":
        # A failed query is reported by psmatch run in one line (psmatch.service.supervisor);
        # Spark's own report of it is a stack trace of hundreds of lines: the query's, and
        # for a failed task the executor's ("Exception in task") and the scheduler's ("Lost
        # task", with the Python worker's traceback inside), each with its Java frames.
        jvm = spark.sparkContext._jvm
        for logger in ("org.apache.spark.sql.execution.streaming",
                       "org.apache.spark.executor.Executor",
                       "org.apache.spark.scheduler.TaskSetManager"):  # fmt: skip
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
                logger, jvm.org.apache.logging.log4j.Level.OFF
            )
    return spark


class _MetricsParam(AccumulatorParam):  # type: ignore[type-arg]
    """Accumulator of the tasks' :class:`TaskMetrics`."""

    def zero(self, value: TaskMetrics) -> TaskMetrics:
        return TaskMetrics()

    def addInPlace(self, a: TaskMetrics, b: TaskMetrics) -> TaskMetrics:
        return a.merge(b)


def _report_to(acc: Any, metrics: TaskMetrics) -> None:
    acc.add(metrics)


def _match_partition(
    settings: WorkerSettings, sink: SinkSettings, version: int, acc: Any, batch_id: int,
    batches: Any,
) -> Any:  # fmt: skip
    """The ``mapInArrow`` function: with several shards, the task's partition is its
    shard (the events were partitioned by shard id, see :func:`by_shard`)."""
    shard = 0
    if settings.shards > 1:
        from pyspark import TaskContext

        shard = TaskContext.get().partitionId()
    return match_and_write(settings, sink, version, batches, partial(_report_to, acc), shard,
                           batch_id)  # fmt: skip


def by_shard(events: Any, shards: int) -> Any:
    """``events`` paired with every shard id (column ``shard``) and partitioned by it:
    partition i holds every event, with shard id i. The product is an ``explode`` of the
    ids ``0 .. shards - 1`` on each row (a cross join with a range, without the broadcast
    a join would run per batch), then one shuffle of ``shards`` times the events into
    ``shards`` partitions (``repartitionById``: the id is the partition, no hashing that
    could put two shards in one partition)."""
    from pyspark.sql import functions as F

    ids = F.explode(F.sequence(F.lit(0), F.lit(shards - 1))).alias("shard")
    return events.select("*", ids).repartitionById(shards, "shard")


def subscription_topics(config: ServiceConfig) -> Callable[[str], bool]:
    """Whether a topic the query reads is a subscriptions topic: the job's, or with
    ``tenancy = "topics"`` a tenant's (:mod:`psmatch.service.records.tenants`)."""
    if config.tenancy == "topics":
        return lambda topic: tenant_of_topic(topic, config.subscriptions_topic) is not None
    return lambda topic: topic == config.subscriptions_topic


DRIVER_APPLY_RECORDS = 5_000
"""A batch with at most this many subscription records has them read, validated and
applied by the driver (with no Spark job: a new subscription's first match waits for
one job, the matching, not two); more, by a Spark job over the partitions in parallel
(:mod:`psmatch.service.subscriptions`). Validating costs tens of microseconds a record,
so this many take about as long as the job's own fixed cost."""


def worker_settings(config: ServiceConfig) -> WorkerSettings:
    """What the matching tasks of a job with ``config`` are told
    (:mod:`psmatch.service.task_contract`)."""
    return WorkerSettings(
        redis_url=config.redis_connection_url,
        redis_prefix=config.redis_prefix,
        retention=config.change_log_retention,
        matcher=config.matcher,
        notifications_topic=config.notifications_topic,
        rejected_topic=config.rejected_topic,
        limits=RecordLimits.from_config(config),
        redis_retry_seconds=config.redis_retry_seconds,
        snapshot_dir=snapshot_dir(config.checkpoint_location),
        shards=config.shards,
        delivery=config.delivery,
        events_topic=config.events_topic,
        transactional_prefix=transactional_prefix(config.checkpoint_location,
                                                  config.notifications_topic),
        tenancy=config.tenancy,
        subscriptions_topic=config.subscriptions_topic,
    )


class BatchProcessor:
    """The ``foreachBatch`` function, with the driver-side state it needs."""

    def __init__(
        self,
        config: ServiceConfig,
        spark: Any,
        on_report: Callable[[BatchReport], None] | None = None,
    ) -> None:
        self.config = config
        self.spark = spark
        self.store = StateStore.from_url(
            config.redis_connection_url, config.redis_prefix, config.change_log_retention,
            config.redis_retry_seconds,
        )  # fmt: skip
        self.settings = worker_settings(config)
        self.sink_settings = SinkSettings(config.bootstrap_servers, config.kafka_security,
                                          config.sink_compression)  # fmt: skip
        self._sink: RecordSink | None = None
        self._reader: RangeReader | None = None
        self.on_report = on_report
        self._param = _MetricsParam()
        self.is_subscriptions = subscription_topics(config)

    @property
    def sink(self) -> RecordSink:
        """The driver's record sink, for the subscription rejects: opened at first use."""
        if self._sink is None:
            self._sink = RecordSink(self.sink_settings)
        return self._sink

    @property
    def reader(self) -> RangeReader:
        """The driver's reader of the subscription records it applies: opened at first
        use."""
        if self._reader is None:
            self._reader = RangeReader(self.config.bootstrap_servers, self.config.kafka_security)
        return self._reader

    def __call__(self, df: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        cfg = self.config
        t0 = time.perf_counter()
        batch = df.select(
            "key", "value", "topic", "partition", "offset",
            F.unix_millis("timestamp").alias("ts"),
        )  # fmt: skip
        # A batch without subscription records (most of them), or with a few that the
        # driver applies, runs one job, which reads the events straight from Kafka; with
        # more, the batch is cached, so that the validation job and the matching job read
        # Kafka once.
        ranges = subscription_ranges(cfg.checkpoint_location, batch_id, self.is_subscriptions)
        in_tasks = ranges is None or sum(  # a Spark job validates and applies them
            end - start for start, end in ranges.values()) > DRIVER_APPLY_RECORDS
        if in_tasks:
            batch = batch.persist()
        try:
            validated = ValidatedSubscriptions()
            if ranges and not in_tasks:
                validated = apply_records(self.store, self.store.version(), (
                    (r.key, r.value, r.topic, r.partition, r.offset)
                    for r in self.reader.read(ranges)), self.settings.limits,
                    Tenancy.of(self.settings))  # fmt: skip
            elif in_tasks:  # validated and applied on the executors, in parallel
                floor = self.store.version()
                validated = gather(
                    batch.filter(F.col("topic") != cfg.events_topic)
                    .select("key", "value", "topic", "partition", "offset")
                    .mapInArrow(partial(apply_batches, self.settings.limits, self.settings, floor),
                                APPLIED_DDL)
                    .toArrow()
                )  # fmt: skip
            t1 = time.perf_counter()
            version = self.store.version()
            live = self.store.count()
            t2 = time.perf_counter()

            for topic, pairs in validated.rejects_by_topic(cfg.rejected_topic).items():
                self.sink.write(output_records(topic, pairs))
            acc = self.spark.sparkContext.accumulator(TaskMetrics(), self._param)
            events = batch.filter(F.col("topic") == cfg.events_topic)
            if cfg.shards > 1:
                events = by_shard(events, cfg.shards)
            # the tasks write their records themselves and return none: collect() only
            # runs them
            events.mapInArrow(
                partial(_match_partition, self.settings, self.sink_settings, version,
                        acc, batch_id), OUTPUT_DDL,
            ).collect()  # fmt: skip
            if validated.rejects:
                self.sink.flush()
            t3 = time.perf_counter()
        finally:
            if in_tasks:
                batch.unpersist()
        workers: TaskMetrics = acc.value
        report = BatchReport(
            batch_id=batch_id,
            version=version,
            subscription_records=validated.records,
            subscriptions_applied=validated.applied,
            read_s=t1 - t0,
            state_s=t2 - t1,
            match_write_s=t3 - t2,
            total_s=t3 - t0,
            subscriptions_validate_s=validated.validate_s,
            subscriptions_apply_s=validated.apply_s,
            subscriptions_on_driver=bool(ranges) and not in_tasks,
            live_subscriptions=live,
            shards=cfg.shards,
            workers=workers,
            subscription_rejects=tuple(sorted(validated.codes.items())),
            samples=(*validated.samples, *workers.samples)[:MAX_SAMPLES],
        )
        if report.subscription_records or report.events:
            log.info(report.line())
        rejects_line = report.rejects_line()
        if rejects_line is not None:
            log.warning(rejects_line)
        if self.on_report is not None:
            self.on_report(report)


def prepare(config: ServiceConfig) -> None:
    """Check Redis and Kafka (and their credentials) at once, create missing topics.

    Fails fast, without the outage wait: at start-up an unreachable server is more often
    a wrong setting than an outage.
    """
    StateStore.from_url(config.redis_connection_url, config.redis_prefix).ping()
    topics = service_topics(config.subscriptions_topic, config.events_topic,
                            config.notifications_topic, config.rejected_topic)  # fmt: skip
    if config.tenancy == "topics":  # the tenants' own topics are psmatch tenants add's
        topics = {name: topics[name] for name in (config.events_topic, config.rejected_topic)}
    ensure_topics(
        config.bootstrap_servers,
        topics,
        partitions=config.topic_partitions,
        security=config.kafka_security,
    )


FETCH_MAX_WAIT_MS = 20
"""How long the broker may hold a fetch of Spark's Kafka source that finds no new record
(``fetch.max.wait.ms``; Kafka's default is 500). The consumer sends its next fetch
before it hands over what it read, and a task of the next batch waits for that parked
fetch: at the default, about one batch in three that applied new subscriptions spent
0.45-0.6 s waiting outside the workers' steps (``bench/bench_streaming.py
--first-match-rate``, docs/bench-streaming.md); at this value the wait is gone. The
consumers poll only inside tasks, so a short wait costs the broker no fetches between
batches."""


def kafka_source(spark: Any, config: ServiceConfig) -> Any:
    """Spark's Kafka source with the client options of every query here: the security
    settings and :data:`FETCH_MAX_WAIT_MS`. The caller adds what to read."""
    return (
        spark.readStream.format("kafka")
        .options(**spark_kafka_options(config.bootstrap_servers, config.kafka_security))
        .option("kafka.fetch.max.wait.ms", str(FETCH_MAX_WAIT_MS))
    )


def start_query(
    config: ServiceConfig,
    spark: Any,
    on_report: Callable[[BatchReport], None] | None = None,
    query_name: str | None = None,
) -> Any:
    """Create missing topics and start the streaming query; returns the StreamingQuery."""
    prepare(config)
    if config.tenancy == "topics":  # every tenant's, those added later too
        inputs = ("subscribePattern", f"{topic_pattern(config.subscriptions_topic)}|"
                  f"{re.escape(config.events_topic)}")  # fmt: skip
    else:
        inputs = ("subscribe", f"{config.subscriptions_topic},{config.events_topic}")
    reader = (
        kafka_source(spark, config)
        .option(*inputs)
        .option("startingOffsets", config.starting_offsets)
        # compaction of the subscriptions topic removes offsets: not a loss
        .option("failOnDataLoss", "false")
    )
    if config.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(config.max_offsets_per_trigger))
    writer = (
        reader.load()
        .writeStream.foreachBatch(BatchProcessor(config, spark, on_report))
        .option("checkpointLocation", config.checkpoint_location)
        .trigger(processingTime=f"{config.trigger_seconds} seconds")
    )
    if query_name:
        writer = writer.queryName(query_name)
    query = writer.start()
    log.info(
        "streaming query started: %s + %s -> %s / %s (matcher %s, shards %d, trigger %.1f s, "
        "checkpoint %s, Redis %s with key prefix %r, Kafka %s over %s)",
        *((f"{config.subscriptions_topic}.<tenant>", config.events_topic,
           f"{config.notifications_topic}.<tenant>", f"{config.rejected_topic}(.<tenant>)")
          if config.tenancy == "topics" else
          (config.subscriptions_topic, config.events_topic, config.notifications_topic,
           config.rejected_topic)),
        config.matcher, config.shards, config.trigger_seconds,
        config.checkpoint_location, config.redis_display_url, config.redis_prefix,
        config.bootstrap_servers, config.kafka_security_protocol,
    )  # fmt: skip
    return query


def stop_query(query: Any, timeout: float = 60.0) -> None:
    with contextlib.suppress(Exception):
        query.stop()
    query.awaitTermination(timeout)
