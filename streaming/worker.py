"""What runs inside each Spark Python worker: the cached matcher and partition matching.

Owns the per-process index cache. A Python worker (kept alive across tasks and batches
by ``spark.python.worker.reuse``) holds one :class:`WorkerIndex` per (Redis URL, key
prefix, matcher kind) in module memory. For each task the driver names the
subscription version of the batch; :func:`sync_index` brings the cached matcher to
exactly that version by replaying the change log from Redis, or reloads every
subscription from Redis when the log no longer reaches back far enough (first use,
retention exceeded, state rebuilt). :func:`match_batches` is the ``mapInArrow``
function: it validates each event on its own (bad ones become rejected records),
matches the valid ones with ``match_batch`` and emits notification records, all as
Arrow batches of ``(topic, key, value)`` for Spark's Kafka sink.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from connectors.metrics import REJECT_REASONS, reject_reason
from connectors.state import ChangeLogGapError, StateStore
from index import Matcher, make_matcher
from streaming.records import RecordError, event_id, now_iso, parse_event, rejected_value

log = logging.getLogger(__name__)

OUTPUT_SCHEMA = pa.schema([("topic", pa.string()), ("key", pa.binary()), ("value", pa.binary())])
OUTPUT_DDL = "topic STRING, key BINARY, value BINARY"

# Indices into the metrics list a task reports (see streaming.job.BatchMetrics).
M_EVENTS, M_REJECTED, M_NOTIFICATIONS, M_SYNC_S, M_PARSE_S, M_MATCH_S, M_ENCODE_S = range(7)
# For connectors.metrics: tasks and index reloads (summed), then the worker's lag behind
# the batch's version and its index size (merged by maximum), then rejects per reason.
M_TASKS, M_RELOADS, M_LAG = 7, 8, 9
M_INDEX_SUBS, M_INDEX_PREDICATES, M_INDEX_SPACES, M_INDEX_BYTES = 10, 11, 12, 13
M_MAX = frozenset(range(M_LAG, M_INDEX_BYTES + 1))
M_REASONS = 14  # M_REASONS + i counts REJECT_REASONS[i]
N_METRICS = M_REASONS + len(REJECT_REASONS)


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """What a task needs to know, shipped from the driver in the closure."""

    redis_url: str
    redis_prefix: str
    retention: int
    matcher: str
    notifications_topic: str
    rejected_topic: str


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass
class WorkerIndex:
    """A matcher at a known version plus each subscription's notification prefix."""

    matcher: Matcher
    version: int = 0
    heads: dict[str, bytes] = field(default_factory=dict)
    reloads: int = 0
    replayed: int = 0

    def put(self, sub_id: str, record_json: str) -> None:
        record = json.loads(record_json)
        self.matcher.add(sub_id, record["expr"])
        sid, who, extra = _json(sub_id), _json(record["subscriber"]), _json(record.get("extra", {}))
        self.heads[sub_id] = (
            f'{{"subscription_id":{sid},"subscriber":{who},"extra":{extra},'.encode()
        )

    def delete(self, sub_id: str) -> None:
        if sub_id in self.matcher:
            self.matcher.remove(sub_id)
        self.heads.pop(sub_id, None)


_CACHE: dict[tuple[str, str, str], WorkerIndex] = {}
_STORES: dict[tuple[str, str, int], StateStore] = {}
_LOCK = threading.Lock()


def _store(settings: WorkerSettings) -> StateStore:
    key = (settings.redis_url, settings.redis_prefix, settings.retention)
    store = _STORES.get(key)
    if store is None:
        store = StateStore.from_url(*key)
        _STORES[key] = store
    return store


def _reload(settings: WorkerSettings, store: StateStore) -> WorkerIndex:
    version, subs = store.snapshot()
    index = WorkerIndex(make_matcher(settings.matcher), version)
    for sub_id, record_json in subs.items():
        try:
            index.put(sub_id, record_json)
        except (ValueError, KeyError) as exc:  # validated by the driver; defensive
            log.error("skipping stored subscription %s: %s", sub_id, exc)
    return index


def sync_index(settings: WorkerSettings, version: int) -> WorkerIndex:
    """The cached index of this process, brought to ``version``."""
    key = (settings.redis_url, settings.redis_prefix, settings.matcher)
    with _LOCK:
        store = _store(settings)
        index = _CACHE.get(key)
        if index is not None and index.version < version:
            try:
                changes = store.changes(index.version, version)
            except ChangeLogGapError:
                changes = None
            if changes is not None:
                for change in changes:
                    if change.record is None:
                        index.delete(change.sub_id)
                    else:
                        index.put(change.sub_id, change.record)
                    index.version = change.version
                index.replayed += len(changes)
                return index
        if index is None or index.version != version:
            reloads = index.reloads + 1 if index is not None else 1
            index = _reload(settings, store)
            index.reloads = reloads
            if index.version != version:
                log.warning(
                    "subscription state in Redis is at version %d, the batch expects %d "
                    "(another writer on prefix %r?)",
                    index.version,
                    version,
                    settings.redis_prefix,
                )
            _CACHE[key] = index
        return index


def match_rows(
    index: WorkerIndex,
    settings: WorkerSettings,
    rows: Iterable[tuple[bytes | None, bytes | None, str, int, int, int | None]],
    metrics: list[float],
) -> tuple[list[str], list[bytes | None], list[bytes]]:
    """Match ``(key, value, topic, partition, offset, timestamp_ms)`` rows.

    Returns the columns ``topic, key, value`` of the output records.
    """
    t0 = time.perf_counter()
    topics: list[str] = []
    keys: list[bytes | None] = []
    values: list[bytes] = []
    good_events: list[dict[str, Any]] = []
    tails: list[bytes] = []
    matched_at = _json(now_iso())
    n = 0
    for key, value, topic, partition, offset, ts in rows:
        n += 1
        try:
            event = parse_event(value)
        except RecordError as exc:
            topics.append(settings.rejected_topic)
            keys.append(key)
            values.append(rejected_value(str(exc), topic, partition, offset, key, value))
            metrics[M_REASONS + REJECT_REASONS.index(reject_reason(str(exc)))] += 1
            continue
        good_events.append(event)
        assert value is not None
        ev_id = event_id(key, topic, partition, offset)
        tails.append(
            b'"event_id":%s,"event":%s,"matched_at":%s,"event_timestamp":%s}'
            % (
                _json(ev_id).encode(),
                value.strip(),
                matched_at.encode(),
                b"null" if ts is None else str(ts).encode(),
            )
        )
    t1 = time.perf_counter()
    matches = index.matcher.match_batch(good_events) if good_events else []
    t2 = time.perf_counter()
    heads = index.heads
    notifications = 0
    nt = settings.notifications_topic
    for tail, ids in zip(tails, matches, strict=True):
        for sub_id in ids:
            topics.append(nt)
            keys.append(str(sub_id).encode())
            values.append(heads[sub_id] + tail)
        notifications += len(ids)
    t3 = time.perf_counter()
    metrics[M_EVENTS] += n
    metrics[M_REJECTED] += n - len(good_events)
    metrics[M_NOTIFICATIONS] += notifications
    metrics[M_PARSE_S] += t1 - t0
    metrics[M_MATCH_S] += t2 - t1
    metrics[M_ENCODE_S] += t3 - t2
    return topics, keys, values


def match_batches(
    settings: WorkerSettings,
    version: int,
    batches: Iterator[pa.RecordBatch],
    report: Callable[[list[float]], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The body of the ``mapInArrow`` function for one partition of events.

    Input batches have the columns ``key, value, topic, partition, offset, ts``.
    """
    metrics = [0.0] * N_METRICS
    t0 = time.perf_counter()
    before = _CACHE.get((settings.redis_url, settings.redis_prefix, settings.matcher))
    before_version = before.version if before is not None else 0
    index = sync_index(settings, version)
    metrics[M_SYNC_S] += time.perf_counter() - t0
    stats = index.matcher.stats()
    metrics[M_TASKS] = 1
    metrics[M_RELOADS] = float(index is not before)
    metrics[M_LAG] = max(0, version - before_version)
    metrics[M_INDEX_SUBS] = stats.subscriptions
    metrics[M_INDEX_PREDICATES] = stats.predicates
    metrics[M_INDEX_SPACES] = stats.spaces
    metrics[M_INDEX_BYTES] = stats.estimated_bytes
    for batch in batches:
        cols = batch.to_pydict()
        rows = zip(
            cols["key"], cols["value"], cols["topic"], cols["partition"], cols["offset"],
            cols["ts"], strict=True,
        )  # fmt: skip
        topics, keys, values = match_rows(index, settings, rows, metrics)
        if topics:
            yield pa.RecordBatch.from_arrays(
                [pa.array(topics, pa.string()), pa.array(keys, pa.binary()),
                 pa.array(values, pa.binary())],
                schema=OUTPUT_SCHEMA,
            )  # fmt: skip
    if report is not None:
        report(metrics)
