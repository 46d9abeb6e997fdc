"""The matching tasks: what each Spark task of the events runs in its Python worker.

:func:`match_batches` matches a task's events against the index of its shard, brought
to the batch's version first (:func:`psmatch.service.index_cache.sync_index`). It
decodes and validates each event on its own inside a per-record barrier (whatever one
event raises makes it a rejected record, the others go on), matches the valid, already
flattened events with ``internal.match_flat_slots`` and emits the notification records (written
from the heads by slot and the events' tails,
:meth:`psmatch.service.records.notifications.NotificationHeads.join`) and the rejected
ones, all as Arrow batches of :data:`~psmatch.service.task_contract.OUTPUT_SCHEMA`,
assembled :data:`RECORDS_CHUNK` matches at a time as they are taken.
:func:`match_and_write`, the job's ``mapInArrow`` function, writes them to Kafka in the
job's delivery mode (:mod:`psmatch.service.delivery`). Each task reports a
:class:`~psmatch.service.task_contract.TaskMetrics` to the driver. The I/O is outside
every barrier, in the index's sync (Redis) and in :func:`match_and_write` (Kafka): its
faults fail the task, never a record.
"""

from __future__ import annotations

import itertools
import logging
import resource
import time
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa

from psmatch import Matcher
from psmatch.adapters.arrow import binary_column, repeated_string, values_of
from psmatch.adapters.kafka.sink import SINK_CHUNK, SinkSettings
from psmatch.core.heap import release_free_heap
from psmatch.core.pipeline import IndexedMatcher
from psmatch.errors import PsmatchError
from psmatch.events import FlatEvent
from psmatch.service.connections import record_sink
from psmatch.service.delivery import EXACTLY_ONCE, CoveredEvents, ExactlyOnceTask
from psmatch.service.index_cache import INDEXES, cache_key, sync_index
from psmatch.service.records.common import RecordError, now_iso, record_error
from psmatch.service.records.events import event_id, parse_event
from psmatch.service.records.notifications import notification_tail
from psmatch.service.records.rejected import rejected_key, rejected_value
from psmatch.service.task_contract import (
    TaskMetrics,
    WorkerSettings,
    output_batches,
    output_records,
)
from psmatch.service.tenant_notifications import tenant_notification_records
from psmatch.service.worker_index import WorkerIndex

log = logging.getLogger(__name__)

RECORDS_CHUNK = SINK_CHUNK
"""Matches whose notification records are assembled together (:func:`match_rows`): what
the sink then queues at once."""


class ShardMismatchError(PsmatchError):
    """A matching task was handed events paired with another shard than its own: the
    job's plan no longer partitions events by shard (a bug, never a record's fault)."""


def match_rows(
    index: WorkerIndex,
    settings: WorkerSettings,
    rows: Iterable[tuple[bytes | None, bytes | None, str, int, int, int | None]],
    metrics: TaskMetrics,
    primary: bool = True,
) -> Iterator[pa.RecordBatch]:
    """Match ``(key, value, topic, partition, offset, timestamp_ms)`` rows.

    Each event is decoded and validated on its own, inside a barrier: whatever it raises
    makes it a rejected record and the others go on. The valid ones are matched together
    (:meth:`psmatch.core.matcher.SlotPath.match_flat_slots`). Yields the output records as
    batches of :data:`OUTPUT_SCHEMA`: the notifications, :data:`RECORDS_CHUNK` matches at a time,
    each chunk assembled by Arrow (:func:`notification_records`) only once the one
    before it was taken, then the rejects. So a consumer that writes each batch before
    it asks for the next holds one chunk of records, however many subscriptions the
    events match.

    With several shards every event reaches the task of every shard; only the
    ``primary`` one (shard 0) counts the events and rejects those that cannot be decoded
    (every shard decodes the same bytes alike), so each is counted and rejected once. An
    event the matcher raises on is rejected by the shard whose matcher raised.
    """
    t0 = time.perf_counter()
    cpu0 = time.thread_time()  # read within [t0, t2]: the CPU time never exceeds that wall
    rejects: list[tuple[bytes | None, bytes]] = []
    positions: list[tuple[bytes | None, bytes | None, str, int, int]] = []
    flat_events: list[FlatEvent] = []
    tails: list[bytes] = []
    matched_at = now_iso()
    limits = settings.limits

    def reject(error: RecordError, key: bytes | None, value: bytes | None, topic: str,
               partition: int, offset: int) -> None:  # fmt: skip
        rejects.append((rejected_key(key),
                        rejected_value(error, topic, partition, offset, key, value)))
        metrics.reject(error, topic, partition, offset)

    n = 0
    for key, value, topic, partition, offset, ts in rows:
        n += 1
        try:  # the per-record barrier: no I/O inside
            flat = parse_event(value, limits)
            assert value is not None  # parse_event refuses null
            tail = notification_tail(event_id(key, topic, partition, offset), value, matched_at,
                                     ts)  # fmt: skip
        except Exception as exc:
            if primary:
                reject(record_error(exc), key, value, topic, partition, offset)
            continue
        flat_events.append(flat)
        tails.append(tail)
        positions.append((key, value, topic, partition, offset))
    t1 = time.perf_counter()
    families = filter_families(index.matcher)
    before = [(f.filter_counts.candidates, f.filter_counts.matches) for f in families]
    events, slots, failed = _match(index.matcher, flat_events)
    for family, (candidates, matches) in zip(families, before, strict=True):
        metrics.count_filter(family.name, family.filter_counts.candidates - candidates,
                             family.filter_counts.matches - matches)  # fmt: skip
    for i, exc in failed.items():
        reject(record_error(exc), *positions[i])
    # what matching freed (its candidates' columns) given back before the records are
    # built: the process's peak is then the larger of the two steps, not their sum
    release_free_heap()
    t2 = time.perf_counter()
    metrics.cpu_s += time.thread_time() - cpu0
    metrics.events += n if primary else 0
    metrics.notifications += len(slots)
    metrics.parse_s += t1 - t0
    metrics.match_s += t2 - t1
    for start in range(0, len(slots), RECORDS_CHUNK):
        t3, cpu3 = time.perf_counter(), time.thread_time()
        notifications = notification_records(
            settings.notifications_topic, events[start : start + RECORDS_CHUNK],
            slots[start : start + RECORDS_CHUNK], index, tails, settings.tenancy == "topics",
        )  # fmt: skip
        metrics.cpu_s += time.thread_time() - cpu3
        metrics.encode_s += time.perf_counter() - t3
        yield from notifications
    if rejects:
        yield output_records(settings.rejected_topic, rejects)


def filter_families(matcher: Matcher) -> list[IndexedMatcher]:
    """The indexed families whose pre-filter ``matcher`` runs: itself, or each family
    of ``auto`` (its ``families``); none for ``scan``, which has no pre-filter."""
    members = getattr(matcher, "families", [matcher])
    return [m for m in members if isinstance(m, IndexedMatcher)]


def notification_records(
    topic: str, events: np.ndarray, slots: np.ndarray, index: WorkerIndex, tails: list[bytes],
    tenants: bool = False,
) -> list[pa.RecordBatch]:
    """The notification records of matches ``(events[i], slots[i])`` of ``index``
    (:mod:`psmatch.service.records.notifications`: key the subscription's id, value its
    id, head and the event's tail), in record batches of :data:`OUTPUT_SCHEMA` (one but
    for enormous batches: see ``NotificationHeads.join``).

    Cost O(matches), nothing per match in Python: the keys copied by slot from the
    matcher's ids (:meth:`psmatch.core.matcher.SlotPath.ids_utf8`) and the values written
    from them by ``NotificationHeads.join``. With ``tenants``, each to its tenant's topic
    (:mod:`psmatch.service.tenant_notifications`).
    """
    if tenants:
        return tenant_notification_records(topic, events, slots, index, tails)
    ids = index.matcher.internal.ids_utf8(slots)
    return output_batches(repeated_string(topic, len(slots)), binary_column(*ids),
                          index.heads.join(slots, ids, tails, events))  # fmt: skip


def _match(
    matcher: Matcher, flat_events: list[FlatEvent]
) -> tuple[np.ndarray, np.ndarray, dict[int, Exception]]:
    """The matches of a batch, as :meth:`psmatch.core.matcher.SlotPath.match_flat_slots`
    gives them, and the events the matcher raised on (by index). Should it raise on the
    batch (a bug, or an event it cannot handle), each event is matched alone, so only
    the events that raise are rejected."""
    try:
        events, slots = matcher.internal.match_flat_slots(flat_events)
        return events, slots, {}
    except Exception:  # the per-record barrier: find the culprits
        log.exception("matching a batch of %d events failed; matching them one by one",
                      len(flat_events))  # fmt: skip
    rows: list[np.ndarray] = [np.empty(0, dtype=np.int64)]
    matched: list[np.ndarray] = [np.empty(0, dtype=np.int64)]
    failed: dict[int, Exception] = {}
    for i, flat in enumerate(flat_events):
        try:
            _, slots = matcher.internal.match_flat_slots([flat])
        except Exception as exc:
            failed[i] = exc
            continue
        rows.append(np.full(len(slots), i, dtype=np.int64))
        matched.append(slots)
    return np.concatenate(rows), np.concatenate(matched), failed


def match_batches(
    settings: WorkerSettings,
    version: int,
    batches: Iterator[pa.RecordBatch],
    report: Callable[[TaskMetrics], None] | None = None,
    shard: int = 0,
) -> Iterator[pa.RecordBatch]:
    """The body of the ``mapInArrow`` function for one partition of events, matched
    against the index of ``shard``.

    Input batches have the columns ``key, value, topic, partition, offset, ts``, and
    with several shards ``shard``, which must be ``shard`` on every row (else
    :class:`ShardMismatchError`: the plan is wrong, and matching other shards' events
    here would lose their notifications).
    """
    metrics = TaskMetrics(tasks=1)
    t0 = time.perf_counter()
    key = cache_key(settings, shard)
    before = INDEXES.get(key)
    before_version = before.version if before is not None else 0
    written = before.snapshot_write_s if before is not None else 0.0
    index = sync_index(settings, version, shard)
    metrics.sync_s += time.perf_counter() - t0
    metrics.snapshot_s += index.snapshot_write_s - (written if index is before else 0.0)
    stats = index.matcher.stats()
    metrics.reloads = int(index is not before)
    metrics.lag = max(0, version - before_version)
    metrics.index_subscriptions = stats.subscriptions
    metrics.index_predicates = stats.predicates
    metrics.index_spaces = stats.spaces
    metrics.index_bytes = stats.estimated_bytes
    metrics.shard_subscriptions[shard] = stats.subscriptions
    metrics.process_indexes = sum(1 for k in list(INDEXES) if k[:4] == key[:4])
    for batch in batches:
        if settings.shards > 1:
            handed = np.unique(values_of(batch.column("shard"))).tolist()
            if handed != [shard]:
                raise ShardMismatchError(f"the task of shard {shard} was handed events of "
                                         f"shards {handed}")  # fmt: skip
        cols = batch.to_pydict()
        rows = zip(
            cols["key"], cols["value"], cols["topic"], cols["partition"], cols["offset"],
            cols["ts"], strict=True,
        )  # fmt: skip
        yield from match_rows(index, settings, rows, metrics, shard == 0)
    release_free_heap()  # what matching freed: the worker's resident size between batches
    # ru_maxrss is in KiB on Linux (the platform the service runs on)
    metrics.peak_rss_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if report is not None:
        report(metrics)


def match_and_write(
    settings: WorkerSettings,
    sink: SinkSettings,
    version: int,
    batches: Iterator[pa.RecordBatch],
    report: Callable[[TaskMetrics], None] | None = None,
    shard: int = 0,
    batch_id: int = 0,
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function of the job: :func:`match_batches`, each batch of its
    records written to Kafka as it is made, in ``settings.delivery``'s mode
    (:mod:`psmatch.service.delivery`). At least once: by this process's
    :class:`psmatch.adapters.kafka.sink.RecordSink`, all acknowledged before the task
    ends (a record that could not be written fails the task, and Spark runs it again,
    as Spark's own Kafka sink would). Exactly once: in one transaction of the task's
    :class:`~psmatch.service.delivery.ExactlyOnceTask`, committed before the task ends,
    the events a committed transaction covers left out. Returns no rows.

    The records go out from the Python worker, not through Spark's Kafka sink: that
    sink turns each Arrow record into a Spark row and produces it from the JVM, which
    costs several times the CPU per notification record that librdkafka takes here.
    """
    reported: list[TaskMetrics] = []
    if settings.delivery == EXACTLY_ONCE:
        task = ExactlyOnceTask(sink, settings.transactional_prefix, settings.events_topic,
                               batch_id, shard, settings.shards)  # fmt: skip

        def deliver(inputs: Iterator[pa.RecordBatch]) -> tuple[float, float]:
            write_s = _write_all(task.write, match_batches(
                settings, version, task.unseen(inputs), reported.append, shard))  # fmt: skip
            t = time.perf_counter()
            task.commit()
            return write_s, time.perf_counter() - t

        try:
            try:
                write_s, commit_s = deliver(batches)
            except CoveredEvents as covered:  # a task run again: its first events anew
                write_s, commit_s = deliver(itertools.chain(covered.batches, batches))
        finally:
            task.close()
        (metrics,) = reported
        # every shard's task reads every event: the first shard's counts them, as events
        metrics.replayed = task.replayed if shard == 0 else 0
        metrics.commit_s = commit_s
        metrics.write_s = write_s + commit_s
    else:
        writer = record_sink(sink)
        write_s = _write_all(writer.write, match_batches(settings, version, batches,
                                                         reported.append, shard))  # fmt: skip
        t = time.perf_counter()
        writer.flush()
        (metrics,) = reported
        metrics.write_s = write_s + time.perf_counter() - t
    if report is not None:
        report(metrics)
    return iter(())


def _write_all(write: Callable[[pa.RecordBatch], None], outputs: Iterator[pa.RecordBatch]
               ) -> float:  # fmt: skip
    """Each of ``outputs`` written as it is made; the seconds spent writing."""
    write_s = 0.0
    for records in outputs:
        t = time.perf_counter()
        write(records)
        write_s += time.perf_counter() - t
    return write_s
