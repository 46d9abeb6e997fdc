"""Prometheus metrics of the streaming job: what is exported, and the endpoint serving it.

This module owns every metric the service exports — names (``psmatch_`` prefix, ``_total``
for counters, seconds and bytes as base units), help texts, labels and buckets — in
one :class:`ServiceMetrics` (its own ``CollectorRegistry``), the HTTP endpoint the
driver serves them on (:meth:`ServiceMetrics.serve`), and :class:`BatchFigures`, what
one micro-batch tells them, in plain values. The ``reason`` label of rejected records
is the record's reject code, from the closed set
:data:`psmatch.service.records.common.REJECT_CODES`, so its cardinality is bounded whatever the
records contain.

Where the figures come from, all on the driver:

* :meth:`ServiceMetrics.observe_batch` takes a :class:`BatchFigures`, which ``psmatch
  run`` makes of the job's per-batch report. Its executor-side figures (events
  matched, time in the matcher, rejects per code, how far each worker's cached index
  was behind the batch's change-log version, index size) were added by each
  ``mapInArrow`` task to a Spark accumulator, whose updates travel back with the task
  results: a task whose worker process dies reports nothing, its retry reports once,
  so nothing is kept in, or lost with, an executor or Python worker process.
* :meth:`ServiceMetrics.observe_progress` takes Spark's ``StreamingQueryProgress``
  (as its JSON dict): input and processing rate, offsets behind the latest per input
  topic.
* the Redis retries are read at each scrape from
  :func:`psmatch.adapters.redis_retry.redis_retry_stats`.

``docs/operations.md`` has the table of metrics; ``deploy/grafana`` the dashboard.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from psmatch.adapters.redis_retry import redis_retry_stats
from psmatch.errors import PsmatchError
from psmatch.service.records.common import REJECT_CODES
from psmatch.service.records.tenants import tenant_of_topic

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

log = logging.getLogger(__name__)

INPUTS = ("subscriptions", "events")
PHASES = (
    "read", "state", "match_write",  # driver: wall-clock seconds of the batch's steps
    "subscriptions_validate", "subscriptions_apply",  # the driver's, or summed over tasks
    # summed over tasks, disjoint (for a stacked chart): worker_sync is the catch-up
    # without its snapshot writes, worker_snapshot
    "worker_sync", "worker_snapshot", "worker_parse", "worker_match", "worker_encode",
    "worker_write",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class BatchFigures:
    """What one micro-batch tells the metrics, in plain values.

    ``rejects`` are ``(input, reject code, count)``; ``phase_seconds`` maps names of
    :data:`PHASES` to seconds. ``tasks`` is the number of matching tasks: without any,
    the index gauges (``lag`` to ``peak_rss_bytes``) keep the last batch's values.
    """

    subscription_records: int
    events: int
    events_rejected: int
    notifications: int
    changes_applied: int
    total_s: float
    live_subscriptions: int
    version: int
    rejects: tuple[tuple[str, str, int], ...] = ()
    phase_seconds: Mapping[str, float] = field(default_factory=dict)
    tasks: int = 0
    match_s: float = 0.0
    reloads: int = 0
    lag: int = 0
    shard_subscriptions: Mapping[int, int] = field(default_factory=dict)  # by shard
    index_predicates: int = 0
    index_spaces: int = 0
    index_bytes: int = 0
    peak_rss_bytes: int = 0
    filter_candidates: Mapping[str, int] = field(default_factory=dict)  # by matcher family
    filter_matches: Mapping[str, int] = field(default_factory=dict)  # by matcher family
    replayed: int = 0


class MetricsError(PsmatchError):
    """The metrics endpoint cannot be served (e.g. its port is taken)."""


@dataclass
class MetricsServer:
    """The running HTTP endpoint; ``url`` is where Prometheus scrapes."""

    httpd: WSGIServer
    host: str
    port: int

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_ROWS_BUCKETS = (1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000)


class _RedisRetries(Collector):
    """``psmatch_redis_retries_total``: read from
    :func:`psmatch.adapters.redis_retry.redis_retry_stats` at each scrape (the retries
    happen in the state store, not in this module)."""

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "psmatch_redis_retries",
            "Redis calls of the driver retried after a connection error or timeout.",
            value=redis_retry_stats().retries,
        )


class ServiceMetrics:
    """Every metric of the service, in a registry of its own."""

    def __init__(
        self,
        subscriptions_topic: str = "psmatch.subscriptions",
        events_topic: str = "psmatch.events",
        registry: CollectorRegistry | None = None,
        tenants: bool = False,
    ) -> None:
        self.registry = CollectorRegistry() if registry is None else registry
        self._inputs = {subscriptions_topic: "subscriptions", events_topic: "events"}
        # tenancy topics: every tenant's subscriptions topic counts as the subscriptions
        self._tenants_of = subscriptions_topic if tenants else None
        r = self.registry
        # -- counters (the client appends _total) ---------------------------------------
        self.batches = Counter(
            "psmatch_batches", "Micro-batches processed by the streaming job.", registry=r
        )
        self.input_records = Counter(
            "psmatch_input_records",
            "Kafka records read by the job, by input topic (subscriptions or events).",
            ["input"], registry=r,
        )  # fmt: skip
        self.events_matched = Counter(
            "psmatch_events_matched",
            "Valid events matched against the subscription index on the executors.",
            registry=r,
        )
        self.notifications = Counter(
            "psmatch_notifications",
            "Notifications written to the notifications topic (one per subscription-event match).",
            registry=r,
        )
        self.rejected = Counter(
            "psmatch_rejected_records",
            "Records written to the rejected topic, by input topic and reason (the reject "
            "code).",
            ["input", "reason"], registry=r,
        )  # fmt: skip
        self.changes_applied = Counter(
            "psmatch_subscription_changes_applied",
            "Subscription changes (puts and deletes) applied to the Redis state.",
            registry=r,
        )
        self.phase_seconds = Counter(
            "psmatch_batch_phase_seconds",
            "Seconds spent per batch phase: driver wall clock (read, state, match_write) "
            "and executor time summed over tasks (subscriptions_*, worker_*).",
            ["phase"], registry=r,
        )  # fmt: skip
        self.worker_tasks = Counter(
            "psmatch_worker_tasks", "Matching tasks run by executor Python workers.", registry=r
        )
        self.worker_reloads = Counter(
            "psmatch_worker_index_reloads",
            "Times a worker built its index again (from its snapshot, the whole change log "
            "or every subscription in Redis) instead of catching up from the change log "
            "(first use, a new executor, a worker that missed more than the retention, state "
            "rebuilt).",
            registry=r,
        )
        self.filter_candidates = Counter(
            "psmatch_filter_candidates",
            "(event, conjunct) candidates a matcher family's pre-filter handed over for "
            "checking, by family; with psmatch_filter_matches_total, the pre-filter's "
            "precision.",
            ["family"], registry=r,
        )  # fmt: skip
        self.filter_matches = Counter(
            "psmatch_filter_matches",
            "Candidates of psmatch_filter_candidates_total that matched, by family.",
            ["family"], registry=r,
        )  # fmt: skip
        self.events_replayed = Counter(
            "psmatch_events_replayed",
            "Events of a batch run again that exactly-once delivery left out: a committed "
            "transaction had written their notifications.",
            registry=r,
        )
        # -- histograms --------------------------------------------------------------
        self.batch_duration = Histogram(
            "psmatch_batch_duration_seconds",
            "Wall-clock duration of a micro-batch on the driver, from read to Kafka write.",
            buckets=_SECONDS_BUCKETS, registry=r,
        )  # fmt: skip
        self.match_duration = Histogram(
            "psmatch_match_duration_seconds",
            "Time in the matcher per micro-batch, summed over the batch's executor tasks.",
            buckets=_SECONDS_BUCKETS, registry=r,
        )  # fmt: skip
        self.batch_rows = Histogram(
            "psmatch_batch_input_rows",
            "Input records (subscriptions and events) per micro-batch.",
            buckets=_ROWS_BUCKETS, registry=r,
        )  # fmt: skip
        # -- gauges ------------------------------------------------------------------
        self.subscriptions = Gauge(
            "psmatch_subscriptions", "Live subscriptions in the Redis state.", registry=r
        )
        self.state_version = Gauge(
            "psmatch_state_version",
            "Version of the subscription state (number of changes in the Redis change log).",
            registry=r,
        )
        self.worker_lag = Gauge(
            "psmatch_worker_version_lag",
            "Most changes any worker's cached index was behind the change-log version at "
            "the start of the last batch's tasks.",
            registry=r,
        )
        self.index_subscriptions = Gauge(
            "psmatch_index_subscriptions",
            "Subscriptions in the executors' index of each shard at the last batch that "
            "matched it (shard 0 alone with one shard).", ["shard"], registry=r,
        )  # fmt: skip
        self.index_predicates = Gauge(
            "psmatch_index_predicates",
            "Normal-form predicates of the live conjuncts in the executors' index at the "
            "last batch (MatcherStats.predicates).", registry=r,
        )  # fmt: skip
        self.index_spaces = Gauge(
            "psmatch_index_spaces",
            "Live predicate spaces of the PS-Tree forest in the executors' index at the last "
            "batch (0 for counting, propagation and pbtree).", registry=r,
        )  # fmt: skip
        self.index_bytes = Gauge(
            "psmatch_index_estimated_bytes",
            "Estimated memory of one worker's index at the last batch.", registry=r,
        )  # fmt: skip
        self.worker_peak_rss = Gauge(
            "psmatch_worker_peak_resident_bytes",
            "The most resident memory any Python worker process that matched the last "
            "batch has had since it started (its index, parsing and matching included).",
            registry=r,
        )  # fmt: skip
        self.last_batch_time = Gauge(
            "psmatch_last_batch_timestamp_seconds",
            "Unix time at which the last micro-batch with input finished.", registry=r,
        )  # fmt: skip
        self.input_rate = Gauge(
            "psmatch_input_rows_per_second",
            "Rate at which data arrived, from Spark's streaming query progress.", registry=r,
        )  # fmt: skip
        self.processing_rate = Gauge(
            "psmatch_processed_rows_per_second",
            "Rate at which Spark processed data, from the streaming query progress.", registry=r,
        )  # fmt: skip
        self.offsets_behind = Gauge(
            "psmatch_input_offsets_behind_latest",
            "Records not yet read, summed over partitions, by input topic (latest offset "
            "minus the end offset of the last batch, from the streaming query progress).",
            ["input"], registry=r,
        )  # fmt: skip
        # -- outages (psmatch.adapters.redis_retry, psmatch.service.supervisor) ------
        self.query_restarts = Counter(
            "psmatch_query_restarts",
            "Times psmatch run restarted the streaming query from its checkpoint after it "
            "failed on an infrastructure fault.",
            registry=r,
        )
        self.redis_unavailable = Gauge(
            "psmatch_redis_unavailable_seconds",
            "How long the driver has been waiting for an unreachable Redis (0 when it answers).",
            registry=r,
        )
        self.redis_unavailable.set_function(lambda: redis_retry_stats().waiting_seconds)
        r.register(_RedisRetries())
        # Every labelled series exists from the start, at 0.
        for name in INPUTS:
            self.input_records.labels(name)
            self.offsets_behind.labels(name)
            for code in REJECT_CODES:
                self.rejected.labels(name, code)
        for phase in PHASES:
            self.phase_seconds.labels(phase)

    # -- feeding ---------------------------------------------------------------------

    def observe_batch(self, batch: BatchFigures) -> None:
        """Record one micro-batch."""
        self.batches.inc()
        self.input_records.labels("subscriptions").inc(batch.subscription_records)
        self.input_records.labels("events").inc(batch.events)
        self.events_matched.inc(batch.events - batch.events_rejected)
        self.notifications.inc(batch.notifications)
        self.changes_applied.inc(batch.changes_applied)
        self.events_replayed.inc(batch.replayed)
        for family, n in batch.filter_candidates.items():
            self.filter_candidates.labels(family).inc(n)
            self.filter_matches.labels(family).inc(batch.filter_matches.get(family, 0))
        for input_name, code, count in batch.rejects:
            self.rejected.labels(input_name, code).inc(count)
        for phase, seconds in batch.phase_seconds.items():
            self.phase_seconds.labels(phase).inc(max(0.0, seconds))
        self.batch_duration.observe(batch.total_s)
        self.batch_rows.observe(batch.subscription_records + batch.events)
        self.subscriptions.set(batch.live_subscriptions)
        self.state_version.set(batch.version)
        if batch.tasks:
            self.match_duration.observe(batch.match_s)
            self.worker_tasks.inc(batch.tasks)
            self.worker_reloads.inc(batch.reloads)
            self.worker_lag.set(batch.lag)
            for shard, subscriptions in batch.shard_subscriptions.items():
                self.index_subscriptions.labels(str(shard)).set(subscriptions)
            self.index_predicates.set(batch.index_predicates)
            self.index_spaces.set(batch.index_spaces)
            self.index_bytes.set(batch.index_bytes)
            self.worker_peak_rss.set(batch.peak_rss_bytes)
        if batch.subscription_records or batch.events:
            self.last_batch_time.set_to_current_time()

    def observe_progress(self, progress: Mapping[str, Any] | None) -> None:
        """Record Spark's last ``StreamingQueryProgress`` (a dict, as its JSON)."""
        if not progress:
            return
        for gauge, key in ((self.input_rate, "inputRowsPerSecond"),
                           (self.processing_rate, "processedRowsPerSecond")):  # fmt: skip
            value = progress.get(key)
            if isinstance(value, int | float) and value == value:  # NaN before any data
                gauge.set(value)
        behind = dict.fromkeys(INPUTS, 0)
        seen = False
        for source in progress.get("sources") or ():
            latest = _offsets(source.get("latestOffset"))
            end = _offsets(source.get("endOffset"))
            for topic, partitions in latest.items():
                name = self._inputs.get(topic)
                if name is None and self._tenants_of is not None and tenant_of_topic(
                        topic, self._tenants_of) is not None:  # fmt: skip
                    name = "subscriptions"
                if name is None:
                    continue
                seen = True
                done = end.get(topic, {})
                behind[name] += sum(
                    max(0, int(off) - int(done.get(p, off))) for p, off in partitions.items()
                )
        if seen:
            for name, value in behind.items():
                self.offsets_behind.labels(name).set(value)

    # -- serving ---------------------------------------------------------------------

    def serve(self, port: int, host: str = "127.0.0.1") -> MetricsServer:
        """Serve ``/metrics`` on ``host:port`` (port 0: any free port) in a daemon thread."""
        try:
            httpd, _thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise MetricsError(
                f"cannot serve metrics on {host}:{port}: {exc.strerror or exc} "
                "(choose another --metrics-port, or 0 for none)"
            ) from exc
        server = MetricsServer(httpd, host, int(httpd.server_address[1]))
        log.info("Prometheus metrics on %s", server.url)
        return server

    def exported_names(self) -> set[str]:
        """Every sample name a scrape can show (``_total``, ``_bucket``... included)."""
        return exported_names(self.registry)


def exported_names(registry: CollectorRegistry) -> set[str]:
    suffixes = {
        "counter": ("_total", "_created"),
        "gauge": ("",),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
    }
    return {
        family.name + suffix
        for family in registry.collect()
        for suffix in suffixes.get(family.type, ("",))
    }


def _offsets(value: Any) -> dict[str, dict[str, int]]:
    """A Kafka source offset (``{"topic": {"0": 12}}``, or its JSON text) as a dict."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, Mapping):
        return {}
    return {
        str(topic): {str(p): int(o) for p, o in parts.items()}
        for topic, parts in value.items()
        if isinstance(parts, Mapping)
    }
