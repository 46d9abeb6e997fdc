"""What crosses between the driver and the tasks it runs on the executors: the settings
shipped to every task (:class:`WorkerSettings`), the metrics each task reports back
(:class:`TaskMetrics`, merged by a Spark accumulator), the samples of rejects the driver's
log quotes (:func:`reject_sample`), and the schema of the records the tasks write to
Kafka (:data:`OUTPUT_SCHEMA`, and the batches of it they assemble).

It loads no matcher and none of the executors' code (:mod:`psmatch.service.tasks`,
:mod:`psmatch.service.index_cache`), so the driver and the command line import it for
these alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from psmatch.adapters.arrow import record_batch
from psmatch.adapters.state import DEFAULT_RETRY_SECONDS
from psmatch.service.records.common import RecordError, RecordLimits

OUTPUT_SCHEMA = pa.schema([("topic", pa.string()), ("key", pa.binary()), ("value", pa.binary())])
OUTPUT_DDL = "topic STRING, key BINARY, value BINARY"
"""The records a task writes (to the Kafka topic of each): its ``mapInArrow`` schema, as
Arrow and as Spark's DDL."""


def output_batches(topics: pa.Array, keys: pa.Array, values: Iterable[pa.Array]
                   ) -> list[pa.RecordBatch]:  # fmt: skip
    """Batches of :data:`OUTPUT_SCHEMA` from whole ``topics`` and ``keys`` columns and
    their records' values in chunks, in order (as ``NotificationHeads.join`` gives
    them): each chunk beside the rows of the columns it continues. O(chunks): the
    columns are sliced, not copied."""
    batches, start = [], 0
    for chunk in values:
        n = len(chunk)
        batches.append(pa.RecordBatch.from_arrays(
            [topics.slice(start, n), keys.slice(start, n), chunk], schema=OUTPUT_SCHEMA))
        start += n
    return batches


def output_records(topic: str, pairs: Sequence[tuple[bytes | None, bytes | None]]
                   ) -> pa.RecordBatch:  # fmt: skip
    """Records ``(key, value)`` of ``topic``, as a batch of :data:`OUTPUT_SCHEMA` (what
    :meth:`psmatch.adapters.kafka.sink.RecordSink.write` takes)."""
    return record_batch({"topic": [topic] * len(pairs), "key": [key for key, _ in pairs],
                         "value": [value for _, value in pairs]}, OUTPUT_SCHEMA)  # fmt: skip


MAX_SAMPLES = 3
"""Rejects described (position, code, reason) per batch in the log; the rest are counted."""
SAMPLE_CHARS = 200
"""Longest reason quoted in a sample."""


@dataclass(slots=True)
class TaskMetrics:
    """What matching tasks report to the driver (a Spark accumulator merges them with
    :meth:`merge`): counts and seconds are summed; ``lag`` and the index figures, the
    same for every task of a batch (of a shard) up to timing, by maximum.
    ``shard_subscriptions`` has the subscriptions of each matched shard's index, so its
    length is the number of shards matched; ``process_indexes`` is the most shard
    indexes one Python worker process held (the memory cost of sharding without
    affinity, see :mod:`psmatch.service.shards`)."""

    tasks: int = 0
    events: int = 0
    rejected: int = 0
    notifications: int = 0
    sync_s: float = 0.0
    snapshot_s: float = 0.0  # of sync_s: writing index snapshots
    parse_s: float = 0.0
    match_s: float = 0.0
    encode_s: float = 0.0
    cpu_s: float = 0.0  # CPU time of parse + match + encode; the rest of their wall: waiting
    write_s: float = 0.0  # queueing the records for Kafka, and waiting for their acks
    commit_s: float = 0.0  # of write_s, exactly-once: opening the transaction, committing it
    replayed: int = 0  # exactly-once: events left out, a committed transaction covers them
    reloads: int = 0
    lag: int = 0
    index_subscriptions: int = 0
    index_predicates: int = 0
    index_spaces: int = 0
    index_bytes: int = 0
    peak_rss_bytes: int = 0  # the most resident memory a worker process had, ever
    process_indexes: int = 0
    shard_subscriptions: dict[int, int] = field(default_factory=dict)  # by shard number
    rejects: dict[str, int] = field(default_factory=dict)  # by reject code
    # by matcher family: the (event, conjunct) candidates its pre-filter handed over and
    # the matches among them (psmatch.core.pipeline.FilterCounts)
    filter_candidates: dict[str, int] = field(default_factory=dict)
    filter_matches: dict[str, int] = field(default_factory=dict)
    samples: list[str] = field(default_factory=list)  # at most MAX_SAMPLES

    def reject(self, error: RecordError, topic: str, partition: int, offset: int) -> None:
        self.rejected += 1
        self.rejects[error.code] = self.rejects.get(error.code, 0) + 1
        if len(self.samples) < MAX_SAMPLES:
            self.samples.append(reject_sample(error, topic, partition, offset))

    def count_filter(self, family: str, candidates: int, matches: int) -> None:
        self.filter_candidates[family] = self.filter_candidates.get(family, 0) + candidates
        self.filter_matches[family] = self.filter_matches.get(family, 0) + matches

    def merge(self, other: TaskMetrics) -> TaskMetrics:
        """Add ``other`` into this one (returns self)."""
        for name in ("tasks", "events", "rejected", "notifications", "sync_s", "snapshot_s",
                     "parse_s", "match_s", "encode_s", "cpu_s", "write_s", "commit_s", "reloads",
                     "replayed"):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("lag", "index_subscriptions", "index_predicates", "index_spaces",
                     "index_bytes", "peak_rss_bytes", "process_indexes"):  # fmt: skip
            setattr(self, name, max(getattr(self, name), getattr(other, name)))
        for shard, n in other.shard_subscriptions.items():
            self.shard_subscriptions[shard] = max(self.shard_subscriptions.get(shard, 0), n)
        for code, n in other.rejects.items():
            self.rejects[code] = self.rejects.get(code, 0) + n
        for family, n in other.filter_candidates.items():
            self.count_filter(family, n, other.filter_matches.get(family, 0))
        self.samples.extend(other.samples[: MAX_SAMPLES - len(self.samples)])
        return self


def reject_sample(error: RecordError, topic: str, partition: int, offset: int) -> str:
    """One rejected record for the log: its position, code and (cut) reason."""
    reason = str(error)
    if len(reason) > SAMPLE_CHARS:
        reason = reason[: SAMPLE_CHARS - 1] + "\u2026"
    return f"{topic}/{partition}/{offset} {error.code}: {reason}"


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """What a task needs to know, shipped from the driver in the closure."""

    redis_url: str
    redis_prefix: str
    retention: int
    matcher: str
    notifications_topic: str
    rejected_topic: str
    limits: RecordLimits = field(default_factory=RecordLimits)
    redis_retry_seconds: float = DEFAULT_RETRY_SECONDS
    snapshot_dir: str | None = None  # index snapshots (psmatch.service.snapshots); None: none
    shards: int = 1  # subscriptions split into this many shards (psmatch.service.shards)
    # psmatch.service.delivery: the mode, and with exactly-once the events topic (whose
    # positions the marker holds) and the query's transactional.id prefix
    delivery: str = "at-least-once"
    events_topic: str = ""
    transactional_prefix: str = ""
    # psmatch.service.records.tenants: with "topics", each tenant's subscriptions come in
    # <subscriptions_topic>.<tenant>, its notifications and rejects go to its own topics
    tenancy: str = "single"
    subscriptions_topic: str = ""
