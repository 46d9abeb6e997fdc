"""The Spark Structured Streaming job: one query over both input topics, per micro-batch.

Owns the Spark session settings, the streaming query and the ``foreachBatch`` logic:

1. The batch (records of both topics, read by Spark's Kafka source) is cached on the
   executors; only the subscription records are collected to the driver.
2. They are validated on the driver; valid changes are applied to Redis in offset
   order (idempotent on replay, see :mod:`connectors.state`), giving the batch's
   subscription version. Invalid ones become rejected records.
3. The events are matched on the executors with ``mapInArrow``
   (:func:`streaming.worker.match_batches`), every task at that version; they are never
   collected to the driver.
4. Notifications and rejected records are written with Spark's Kafka sink.

Per batch, one log line tells what happened and where the time went.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from pyspark.accumulators import AccumulatorParam

from connectors.kafka import ensure_topics, service_topics
from connectors.metrics import REJECT_REASONS, reject_reason
from connectors.state import SourceChange, StateStore
from index.errors import PsmatchError
from streaming.config import ServiceConfig
from streaming.records import RecordError, parse_subscription_record, rejected_value
from streaming.worker import (
    M_ENCODE_S,
    M_EVENTS,
    M_INDEX_BYTES,
    M_INDEX_PREDICATES,
    M_INDEX_SPACES,
    M_INDEX_SUBS,
    M_LAG,
    M_MATCH_S,
    M_MAX,
    M_NOTIFICATIONS,
    M_PARSE_S,
    M_REASONS,
    M_REJECTED,
    M_RELOADS,
    M_SYNC_S,
    M_TASKS,
    N_METRICS,
    OUTPUT_DDL,
    WorkerSettings,
    match_batches,
)

log = logging.getLogger("psmatch.job")


class ServiceError(PsmatchError):
    """The streaming service cannot start or run (missing jars, unreachable servers)."""


@dataclass(frozen=True, slots=True)
class BatchReport:
    """What one micro-batch did and where its time went (seconds)."""

    batch_id: int
    version: int
    subscription_records: int
    subscriptions_applied: int
    subscriptions_rejected: int
    events: int
    events_rejected: int
    notifications: int
    read_s: float
    state_s: float
    match_write_s: float
    total_s: float
    worker_sync_s: float
    worker_parse_s: float
    worker_match_s: float
    worker_encode_s: float
    # for the Prometheus metrics (connectors.metrics)
    live_subscriptions: int = 0
    tasks: int = 0
    worker_reloads: int = 0
    worker_lag: int = 0
    index_subscriptions: int = 0
    index_predicates: int = 0
    index_spaces: int = 0
    index_bytes: int = 0
    rejects: tuple[tuple[str, str, int], ...] = ()  # (input, reason, count)

    def line(self) -> str:
        return (
            f"batch {self.batch_id}: {self.subscription_records} subscription records "
            f"({self.subscriptions_applied} applied, {self.subscriptions_rejected} rejected) "
            f"-> version {self.version}; {self.events} events "
            f"({self.events_rejected} rejected) -> {self.notifications} notifications "
            f"in {self.total_s:.2f} s [read+subs {self.read_s:.2f} s, redis {self.state_s:.2f} s, "
            f"match+write {self.match_write_s:.2f} s; in workers: catch-up "
            f"{self.worker_sync_s:.2f} s, parse {self.worker_parse_s:.2f} s, "
            f"match {self.worker_match_s:.2f} s, encode {self.worker_encode_s:.2f} s]"
        )


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
    for key, value in extra.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


class _MetricsParam(AccumulatorParam):  # type: ignore[type-arg]
    """Accumulator of a fixed-length list of floats (summed element-wise; the M_MAX
    entries, lag and index size, by maximum)."""

    def zero(self, value: list[float]) -> list[float]:
        return [0.0] * len(value)

    def addInPlace(self, a: list[float], b: list[float]) -> list[float]:
        for i, x in enumerate(b):
            a[i] = max(a[i], x) if i in M_MAX else a[i] + x
        return a


def _report_to(acc: Any, metrics: list[float]) -> None:
    acc.add(metrics)


def _match_partition(settings: WorkerSettings, version: int, acc: Any, batches: Any) -> Any:
    return match_batches(settings, version, batches, partial(_report_to, acc))


def _rejects(driver: Counter[str], worker: list[float]) -> tuple[tuple[str, str, int], ...]:
    """(input, reason, count) of a batch: subscriptions rejected here, events in tasks."""
    subs = [("subscriptions", reason, n) for reason, n in sorted(driver.items())]
    events = [("events", reason, int(worker[M_REASONS + i]))
              for i, reason in enumerate(REJECT_REASONS) if worker[M_REASONS + i]]  # fmt: skip
    return (*subs, *events)


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
            config.redis_url, config.redis_prefix, config.change_log_retention
        )
        self.settings = WorkerSettings(
            redis_url=config.redis_url,
            redis_prefix=config.redis_prefix,
            retention=config.change_log_retention,
            matcher=config.matcher,
            notifications_topic=config.notifications_topic,
            rejected_topic=config.rejected_topic,
        )
        self.on_report = on_report
        self._param = _MetricsParam()

    def __call__(self, df: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        cfg = self.config
        t0 = time.perf_counter()
        batch = df.select(
            "key", "value", "topic", "partition", "offset",
            F.unix_millis("timestamp").alias("ts"),
        ).persist()  # fmt: skip
        try:
            sub_rows = (
                batch.filter(F.col("topic") == cfg.subscriptions_topic)
                .select("key", "value", "topic", "partition", "offset")
                .collect()
            )
            t1 = time.perf_counter()
            sub_rows.sort(key=lambda r: (r["partition"], r["offset"]))
            changes: list[SourceChange] = []
            rejects: list[tuple[str, bytes | None, bytes]] = []
            reasons: Counter[str] = Counter()
            for row in sub_rows:
                key = None if row["key"] is None else bytes(row["key"])
                value = None if row["value"] is None else bytes(row["value"])
                try:
                    change = parse_subscription_record(key, value)
                except RecordError as exc:
                    log.warning(
                        "rejected subscription record %s/%d/%d: %s",
                        row["topic"], row["partition"], row["offset"], exc,
                    )  # fmt: skip
                    rejects.append(
                        (
                            cfg.rejected_topic,
                            key,
                            rejected_value(
                                str(exc), row["topic"], row["partition"], row["offset"],
                                key, value,
                            ),
                        )
                    )  # fmt: skip
                    reasons[reject_reason(str(exc))] += 1
                    continue
                changes.append(
                    SourceChange(
                        f"{row['topic']}:{row['partition']}",
                        int(row["offset"]),
                        change.sub_id,
                        change.record,
                    )
                )
            result = self.store.apply(changes)
            live = self.store.count()
            t2 = time.perf_counter()

            acc = self.spark.sparkContext.accumulator([0.0] * N_METRICS, self._param)
            events = batch.filter(F.col("topic") == cfg.events_topic)
            out = events.mapInArrow(
                partial(_match_partition, self.settings, result.version, acc), OUTPUT_DDL
            )
            if rejects:
                out = out.unionByName(self.spark.createDataFrame(rejects, OUTPUT_DDL))
            (
                out.write.format("kafka")
                .option("kafka.bootstrap.servers", cfg.bootstrap_servers)
                .option("kafka.linger.ms", "5")
                .save()
            )
            t3 = time.perf_counter()
        finally:
            batch.unpersist()
        m = acc.value
        report = BatchReport(
            batch_id=batch_id,
            version=result.version,
            subscription_records=len(sub_rows),
            subscriptions_applied=result.applied,
            subscriptions_rejected=len(rejects),
            events=int(m[M_EVENTS]),
            events_rejected=int(m[M_REJECTED]),
            notifications=int(m[M_NOTIFICATIONS]),
            read_s=t1 - t0,
            state_s=t2 - t1,
            match_write_s=t3 - t2,
            total_s=t3 - t0,
            worker_sync_s=m[M_SYNC_S],
            worker_parse_s=m[M_PARSE_S],
            worker_match_s=m[M_MATCH_S],
            worker_encode_s=m[M_ENCODE_S],
            live_subscriptions=live,
            tasks=int(m[M_TASKS]),
            worker_reloads=int(m[M_RELOADS]),
            worker_lag=int(m[M_LAG]),
            index_subscriptions=int(m[M_INDEX_SUBS]),
            index_predicates=int(m[M_INDEX_PREDICATES]),
            index_spaces=int(m[M_INDEX_SPACES]),
            index_bytes=int(m[M_INDEX_BYTES]),
            rejects=_rejects(reasons, m),
        )
        if report.subscription_records or report.events:
            log.info(report.line())
        if self.on_report is not None:
            self.on_report(report)


def prepare(config: ServiceConfig) -> None:
    """Check Redis, create missing topics."""
    StateStore.from_url(config.redis_url, config.redis_prefix).ping()
    ensure_topics(
        config.bootstrap_servers,
        service_topics(
            config.subscriptions_topic,
            config.events_topic,
            config.notifications_topic,
            config.rejected_topic,
        ),
        partitions=config.topic_partitions,
    )


def start_query(
    config: ServiceConfig,
    spark: Any,
    on_report: Callable[[BatchReport], None] | None = None,
    query_name: str | None = None,
) -> Any:
    """Create missing topics and start the streaming query; returns the StreamingQuery."""
    prepare(config)
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", config.bootstrap_servers)
        .option("subscribe", f"{config.subscriptions_topic},{config.events_topic}")
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
        "streaming query started: %s + %s -> %s / %s (matcher %s, trigger %.1f s, "
        "checkpoint %s, redis %s%s)",
        config.subscriptions_topic, config.events_topic, config.notifications_topic,
        config.rejected_topic, config.matcher, config.trigger_seconds,
        config.checkpoint_location, config.redis_url, config.redis_prefix,
    )  # fmt: skip
    return query


def stop_query(query: Any, timeout: float = 60.0) -> None:
    with contextlib.suppress(Exception):
        query.stop()
    query.awaitTermination(timeout)
