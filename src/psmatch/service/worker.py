"""What runs inside each Spark Python worker: the cached matcher, partition matching and
the writing of its records.

Owns the per-process index cache, and the process's Kafka writer (one
:class:`psmatch.adapters.kafka.RecordSink` per sink setting, opened at first use). A Python
worker (kept alive across tasks and batches by ``spark.python.worker.reuse``) holds one
:class:`WorkerIndex` per (Redis URL, key prefix, matcher kind, shard count, shard) in
module memory: one index per shard it has been handed (:mod:`psmatch.service.shards`; Spark
gives no partition-to-executor affinity, so a process may be handed several shards over
time), each holding only the subscriptions of its shard. For each task the driver names
the subscription version of the batch; :func:`sync_index` brings the cached matcher to
exactly that version by replaying the change log from Redis, or reloads it when the
log no longer reaches back far enough (first use, a worker that missed more than the
retention, state rebuilt): from its snapshot (:mod:`psmatch.service.snapshots`), else by
replaying the whole change log from the empty state while the log still holds every
change (:data:`REPLAY_PER_LIVE`), else from every subscription in Redis (read whole, the
shard's kept); all in bulk, :data:`LOAD_CHUNK` subscriptions at a time, the log read
and the state scanned a chunk at a time, each stored subscription decoded inside a
per-record barrier (one that cannot be decoded is left out and logged): from the change
log, a chunk's normal forms, which the driver wrote beside the records, are read into
columns at once and filed from them (``Matcher.add_columns``), not parsed again; and,
should the matcher's bulk insert itself raise, a rebuild one subscription at a time
that leaves out only the culprits. A worker whose index has moved half the change log's
retention past the newest snapshot of its shard writes a new one after its catch-up
(:func:`_refresh_snapshot`), so that a worker that starts later finds a snapshot the log
still reaches back to, however long the service has run.
:func:`match_batches` matches a task's events: it decodes and validates each event on
its own inside a per-record barrier (whatever one event raises makes it a rejected
record, the others go on), matches the valid, already flattened events with
``match_flat_slots`` and emits notification records (heads by slot,
:mod:`psmatch.service.heads`, and tails, joined by Arrow), all as Arrow batches of ``(topic,
key, value)``, assembled :data:`RECORDS_CHUNK` matches at a time as they are taken,
which :func:`match_and_write` writes to Kafka with the process's
:class:`psmatch.adapters.kafka.RecordSink`. Each task reports a :class:`TaskMetrics` to the
driver. The I/O here is outside every barrier, in :func:`sync_index` (Redis) and
:func:`match_and_write` (Kafka): its faults fail the task, never a record.
"""

from __future__ import annotations

import json
import logging
import resource
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import chain, islice
from typing import Literal

import numpy as np
import pyarrow as pa

from psmatch import Matcher, make_matcher
from psmatch.adapters.arrow import binary_column, record_batch, repeated_string, values_of
from psmatch.adapters.kafka import SINK_CHUNK, RecordSink, SinkSettings
from psmatch.adapters.state import DEFAULT_RETRY_SECONDS, Change, ChangeLogGapError, StateStore
from psmatch.core.heap import gc_paused, release_free_heap
from psmatch.errors import ExpressionError, PsmatchError
from psmatch.events import FlatEvent
from psmatch.language import Subscription
from psmatch.language.encoding import load_normal_forms
from psmatch.service.heads import NotificationHeads
from psmatch.service.records import (
    RecordError,
    RecordLimits,
    check_notification_key,
    event_id,
    load_stored,
    load_stored_head,
    notification_head,
    notification_tail,
    now_iso,
    parse_event,
    record_error,
    rejected_key,
    rejected_value,
)
from psmatch.service.shards import WHOLE, Shard
from psmatch.service.snapshots import (
    SnapshotError,
    change_digest,
    load_snapshot,
    save_snapshot,
    snapshot_state,
)

log = logging.getLogger(__name__)

OUTPUT_SCHEMA = pa.schema([("topic", pa.string()), ("key", pa.binary()), ("value", pa.binary())])
OUTPUT_DDL = "topic STRING, key BINARY, value BINARY"


def output_records(topic: str, pairs: Sequence[tuple[bytes | None, bytes | None]]
                   ) -> pa.RecordBatch:  # fmt: skip
    """Records ``(key, value)`` of ``topic``, as a batch of :data:`OUTPUT_SCHEMA` (what
    :meth:`psmatch.adapters.kafka.RecordSink.write` takes)."""
    return record_batch({"topic": [topic] * len(pairs), "key": [key for key, _ in pairs],
                         "value": [value for _, value in pairs]}, OUTPUT_SCHEMA)  # fmt: skip


MAX_SAMPLES = 3
"""Rejects described (position, code, reason) per batch in the log; the rest are counted."""
SAMPLE_CHARS = 200
"""Longest reason quoted in a sample."""

RECORDS_CHUNK = SINK_CHUNK
"""Matches whose notification records are assembled together (:func:`match_rows`): what
the sink then queues at once."""

REPLAY_PER_LIVE = 2
"""A reload replays the whole change log from the empty state, rather than parsing every
live subscription, when the log still holds every change and at most this many per live
subscription: a put replayed loads the normal form logged beside it, at about half the
cost of a parse or less (:func:`psmatch.language.encoding.load_normal_form`), and a delete costs
less still. A fresh worker's PSTHash index of 100,000 BE-Gen subscriptions took 5.4-5.8 s
of CPU from the log against 9.2-9.7 s from ``subs`` (docs/bench-streaming.md, stop 35)."""

LOAD_CHUNK = 2_500
"""Subscriptions per bulk insert of a reload, and changes per group of a catch-up. A
group's changes (their stored texts and normal forms) and a bulk build's new columns are
held beside the index; in groups that is one group's (1M BE-Gen PSTHash built in one
call: peak 1,480 MiB; in chunks of 100,000: 1,351 MiB). Their objects, a few KiB of
small Python objects per change, live in pymalloc's arenas of 1 MiB, and an arena goes
back to the system only when all of it is free: the few objects that outlive a group
(a new array's header, a cache entry) keep the arenas its objects filled. A process
replaying a 1M BE-Gen change log into PSTBloom (stop 43, scratch ``frag4.py``, the log
read and the state scanned in chunks of the same size):
groups of 10,000 peaked at 361 MiB and held 331 after it (38 arenas more than before
it, 56, with 1.3 MB more in them) in 20.4 s; of 2,500 322 and 305 MiB (11 more) in
22.1 s; of 1,000 310 and 300 MiB in 26.1 s. A full reload parsing the million: 355 and
325 MiB in 41.2 s against 311 and 304 MiB in 44.2 s."""
PROGRESS_SECONDS = 5.0
"""A long catch-up logs its progress at most this often, and once at its end."""


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
    samples: list[str] = field(default_factory=list)  # at most MAX_SAMPLES

    def reject(self, error: RecordError, topic: str, partition: int, offset: int) -> None:
        self.rejected += 1
        self.rejects[error.code] = self.rejects.get(error.code, 0) + 1
        if len(self.samples) < MAX_SAMPLES:
            self.samples.append(reject_sample(error, topic, partition, offset))

    def merge(self, other: TaskMetrics) -> TaskMetrics:
        """Add ``other`` into this one (returns self)."""
        for name in ("tasks", "events", "rejected", "notifications", "sync_s", "snapshot_s",
                     "parse_s", "match_s", "encode_s", "cpu_s", "write_s", "reloads"):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("lag", "index_subscriptions", "index_predicates", "index_spaces",
                     "index_bytes", "peak_rss_bytes", "process_indexes"):  # fmt: skip
            setattr(self, name, max(getattr(self, name), getattr(other, name)))
        for shard, n in other.shard_subscriptions.items():
            self.shard_subscriptions[shard] = max(self.shard_subscriptions.get(shard, 0), n)
        for code, n in other.rejects.items():
            self.rejects[code] = self.rejects.get(code, 0) + n
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


class ShardMismatchError(PsmatchError):
    """A matching task was handed events paired with another shard than its own: the
    job's plan no longer partitions events by shard (a bug, never a record's fault)."""


def _log_left_out(sub_id: str, exc: Exception) -> None:
    """Log a stored subscription the index leaves out, and why."""
    log.error("leaving out stored subscription %r: %s", sub_id[:100], record_error(exc))


BuiltFrom = Literal["snapshot", "change log", "subscriptions"]
"""Where a reload started from: an index snapshot, the empty state (the whole change log
replayed), or every live subscription read from Redis."""


@dataclass
class WorkerIndex:
    """A matcher at a known version plus each subscription's notification key and head
    by slot, holding the subscriptions of ``shard`` only; ``replayed`` counts the changes
    replayed into it from the log since ``built_from``; ``snapshot_version`` is the
    version of the newest snapshot of its shard it knows of (loaded, written or read from
    the file's header) or of its last failed attempt to write one, ``None`` before
    either; ``snapshot_write_s`` the seconds spent writing its snapshots."""

    matcher: Matcher
    version: int = 0
    heads: NotificationHeads = field(default_factory=NotificationHeads)
    reloads: int = 0
    replayed: int = 0
    shard: Shard = WHOLE
    built_from: BuiltFrom = "change log"
    snapshot_version: int | None = None
    snapshot_write_s: float = 0.0

    def apply(self, changes: Iterable[tuple[str, str | None, str | None]]) -> None:
        """Apply stored subscriptions and deletions (``(id, stored text, normal form)``,
        the text ``None`` for a delete), in order, in bulk: changes of other shards are
        skipped (one CRC-32 of the id each, none with one shard); only each id's last
        change counts; the deletions are one bulk removal, and the puts go to
        :meth:`load`. Raises whatever the matcher's bulk insert raised: it may then be half
        updated, and the caller discards it.

        Cost: one JSON decode and normal-form load (or expression parse) per put, the
        matcher's bulk removal of the deleted and replaced subscriptions, and its bulk
        insert.
        """
        holds = self.shard.holds
        latest = {sub_id: (stored, form) for sub_id, stored, form in changes if holds(sub_id)}
        self.delete([sub_id for sub_id, (stored, _) in latest.items() if stored is None])
        self.load((sub_id, stored, form) for sub_id, (stored, form) in latest.items()
                  if stored is not None)  # fmt: skip

    def load(self, stored: Iterable[tuple[str, str, str | None]]) -> None:
        """Index stored subscriptions (``(id, stored text, normal form or None)``, see
        :func:`psmatch.service.records.load_stored`) as they come, :data:`LOAD_CHUNK` at a
        time (:meth:`_load_chunk`): those of other shards are skipped, and an id given
        twice keeps its last text (within a chunk the last is kept, across chunks the
        matcher replaces it). Raises whatever the matcher's bulk insert raised, as
        :meth:`apply` does.

        Memory: one chunk's texts and columns and its heads (written to the heads'
        columns after each chunk), not the input (a full reload streams it from Redis,
        :meth:`psmatch.adapters.state.StateStore.scan`).
        """
        holds = self.shard.holds
        left_out: list[str] = []
        mine = (item for item in stored if holds(item[0]))
        with gc_paused():  # a chunk's decoded forms are many lists: see psmatch.core.heap
            for first in mine:
                chunk = {sub_id: (text, form)
                         for sub_id, text, form in chain([first], islice(mine, LOAD_CHUNK - 1))}
                self._load_chunk(chunk, left_out)
        self.delete(left_out)

    def _load_chunk(self, chunk: dict[str, tuple[str, str | None]], left_out: list[str]
                    ) -> None:  # fmt: skip
        """Index a chunk of distinct ids' stored subscriptions: those with a normal form
        read into columns all at once and added from them (``Matcher.add_columns``,
        no object per predicate), the others parsed (``add_many``). Each record is
        decoded inside the per-record barrier: one that cannot be (the driver validated
        it, so only a hand-edited Redis or a bug) is logged and its id put in
        ``left_out``, for the caller to remove any previous version: the index never
        holds a stale one. A malformed normal form fails the chunk's batch read, and the
        chunk's forms are then read one by one to find it."""
        heads: dict[str, str] = {}
        parsed: list[tuple[str, Subscription]] = []
        ids, texts, forms = [], [], []
        for sub_id, (stored, form) in chunk.items():
            try:  # the per-record barrier; no I/O inside
                check_notification_key(sub_id)
                if form is None:
                    record = load_stored(stored)
                    heads[sub_id] = notification_head(sub_id, record)
                    parsed.append((sub_id, record.subscription))
                else:
                    expr, heads[sub_id] = load_stored_head(sub_id, stored)
                    ids.append(sub_id)
                    texts.append(expr)
                    forms.append(form)
            except Exception as exc:
                left_out.append(sub_id)
                _log_left_out(sub_id, exc)
        try:
            columns = load_normal_forms(texts, forms)
        except ExpressionError:  # a malformed form: the chunk's read one by one to find it
            for sub_id in ids:
                try:  # the per-record barrier; no I/O inside
                    parsed.append((sub_id, load_stored(*chunk[sub_id]).subscription))
                except Exception as exc:
                    del heads[sub_id]
                    left_out.append(sub_id)
                    _log_left_out(sub_id, exc)
        else:
            self.matcher.add_columns(ids, columns)
        self.matcher.add_many(parsed)
        self.heads.put_many(self.matcher.slots_of(list(heads)), list(heads.values()))

    def put(self, sub_id: str, stored: str) -> None:
        """Index one stored subscription, inside the per-record barrier: one the matcher
        cannot take is logged and left out, its previous version removed. The slow path
        that finds the culprit when a bulk :meth:`apply` raised."""
        try:
            check_notification_key(sub_id)
            record = load_stored(stored)
            head = notification_head(sub_id, record)
            # add_many files before it returns (add would stage): a culprit raises here
            self.matcher.add_many([(sub_id, record.subscription)])
        except Exception as exc:  # the per-record barrier; no I/O inside
            self.delete([sub_id])
            _log_left_out(sub_id, exc)
            return
        self.heads.put(self.matcher.slot_of(sub_id), head)

    def delete(self, sub_ids: list[str]) -> None:
        """Remove those of ``sub_ids`` the matcher holds (an id may come twice), with
        their heads, in one bulk removal (``Matcher.remove_many``)."""
        held = [sub_id for sub_id in dict.fromkeys(sub_ids) if sub_id in self.matcher]
        self.heads.clear_many(self.matcher.slots_of(held))
        self.matcher.remove_many(held)

    def check(self) -> None:
        """Assert the matcher's and the heads' invariants, and that every subscription the
        matcher holds has its head at its slot; ``AssertionError`` on a breach.
        Cost O(subscriptions)."""
        self.matcher.check()
        self.heads.check()
        for sub_id in self.matcher:
            head = self.heads.get(self.matcher.slot_of(sub_id))
            assert head is not None, sub_id
            assert json.loads("{" + head.strip(",") + "}").keys() <= {"subscriber", "extra"}


_CACHE: dict[tuple[str, str, str, int, int], WorkerIndex] = {}
_STORES: dict[tuple[str, str, int, float], StateStore] = {}
_SINKS: dict[SinkSettings, RecordSink] = {}
_LOCK = threading.Lock()


def state_store(settings: WorkerSettings) -> StateStore:
    """This process's state store for ``settings``'s Redis, opened at first use."""
    key = (settings.redis_url, settings.redis_prefix, settings.retention,
           settings.redis_retry_seconds)  # fmt: skip
    store = _STORES.get(key)
    if store is None:
        store = StateStore.from_url(*key)
        _STORES[key] = store
    return store


def _cache_key(settings: WorkerSettings, shard: int) -> tuple[str, str, str, int, int]:
    return (settings.redis_url, settings.redis_prefix, settings.matcher, settings.shards, shard)


def build_index(
    matcher: str, version: int, read: Callable[[], Iterable[tuple[str, str]]],
    shard: Shard = WHOLE,
) -> WorkerIndex:  # fmt: skip
    """An index of every stored subscription of ``shard`` that ``read()`` gives (id,
    stored text), labelled ``version``: in bulk (:meth:`WorkerIndex.load`); should the
    bulk insert raise, a fresh matcher is built one subscription at a time from a second
    ``read()``, so that only the culprits are left out."""
    index = WorkerIndex(make_matcher(matcher), version, shard=shard, built_from="subscriptions")
    try:
        index.load((sub_id, stored, None) for sub_id, stored in read())
        return index
    except Exception:  # the per-record barrier of the bulk path: find the culprits
        log.exception("indexing the stored subscriptions of version %d in bulk failed; "
                      "indexing them one by one", version)  # fmt: skip
    index = WorkerIndex(make_matcher(matcher), version, shard=shard, built_from="subscriptions")
    for sub_id, stored in read():
        if shard.holds(sub_id):
            index.put(sub_id, stored)
    return index


def _reload(
    settings: WorkerSettings, store: StateStore, version: int, shard: Shard
) -> WorkerIndex:
    """An index of ``shard`` brought to ``version`` from its snapshot, else by replaying
    the whole change log (:func:`_from_change_log`), else from every subscription in
    Redis (:func:`_from_subscriptions`); the last two are then saved as the new
    snapshot."""
    index = _from_snapshot(settings, store, version, shard)
    if index is not None:
        return index
    index = _from_change_log(settings, store, version, shard)
    if index is None:  # not `or`: an index's truth must not decide how it is built
        index = _from_subscriptions(settings, store, shard)
    if settings.snapshot_dir is not None:
        _save_snapshot(settings, store, index)
    return index


def _from_subscriptions(settings: WorkerSettings, store: StateStore, shard: Shard
                        ) -> WorkerIndex:  # fmt: skip
    """The index of ``shard`` built from every subscription in Redis, at the state's
    version. The subscriptions are streamed from Redis (:meth:`StateStore.scan`) into the
    matcher, never all held at once; what changed during the scan is then replayed from
    the change log. Should the log no longer reach back to the scan's start, the state
    is read whole and atomically instead."""
    index = build_index(settings.matcher, store.version(), partial(store.scan, LOAD_CHUNK),
                        shard)  # fmt: skip
    try:
        caught_up = _catch_up(index, store, store.version())
    except ChangeLogGapError:
        caught_up = False
    if caught_up:
        return index
    log.info("the subscription state changed too much while it was read; reading it "
             "again, whole")  # fmt: skip
    del index  # never two indexes at once
    state_version, subs = store.snapshot()
    return build_index(settings.matcher, state_version, subs.items, shard)


def _from_change_log(
    settings: WorkerSettings, store: StateStore, version: int, shard: Shard
) -> WorkerIndex | None:
    """The index of ``shard`` at ``version`` built by replaying the change log from
    version 0, whose state is empty (no state starts elsewhere: ``rebuild-state`` moves
    the version on and empties the log). ``None`` when the log no longer holds the first
    change (trimmed, or emptied by a rebuild), when it holds more than
    :data:`REPLAY_PER_LIVE` changes per live subscription (a churned state, cheaper to
    read whole), or when the matcher raised. Cost: one ``HLEN`` and one single-entry
    ``XRANGE`` to decide, then that of a catch-up of ``version`` changes."""
    if version > REPLAY_PER_LIVE * store.count():
        return None
    index = WorkerIndex(make_matcher(settings.matcher), 0, shard=shard)
    try:
        if version:
            _change_at(store, 1)  # the first change, or ChangeLogGapError
        if not _catch_up(index, store, version):
            return None
    except ChangeLogGapError:
        return None
    log.info("built the index of %s by replaying the %d changes of the change log",
             shard, version)  # fmt: skip
    return index


def _from_snapshot(
    settings: WorkerSettings, store: StateStore, version: int, shard: Shard
) -> WorkerIndex | None:
    """The index of the snapshot of ``shard``, caught up to ``version``; ``None`` (and why, in the
    log) when there is none, or it is unusable: corrupt or foreign, newer than the state,
    older than the change log reaches, or of another state (its last change is not the
    log's entry at its version)."""
    if settings.snapshot_dir is None:
        return None
    try:
        snap = load_snapshot(settings.snapshot_dir, settings.redis_prefix, settings.matcher,
                             shard)  # fmt: skip
    except SnapshotError as exc:
        log.info("reloading every subscription: %s", exc)
        return None
    except Exception as exc:  # a checksummed pickle of another code version
        log.warning("reloading every subscription: the index snapshot cannot be loaded (%s)",
                    record_error(exc))  # fmt: skip
        return None
    if snap.version > version:
        log.warning("ignoring the index snapshot at version %d: the state is at %d (rebuilt?)",
                    snap.version, version)  # fmt: skip
        return None
    index = WorkerIndex(snap.matcher, snap.version, snap.heads, shard=shard,
                        built_from="snapshot", snapshot_version=snap.version)  # fmt: skip
    try:
        last = _change_at(store, snap.version)
        if last is not None and change_digest(last) != snap.last_change:
            log.warning("ignoring the index snapshot at version %d: it is of another "
                        "state (its last change differs from the change log's)",
                        snap.version)  # fmt: skip
            return None
        if not _catch_up(index, store, version):
            return None
    except ChangeLogGapError:
        log.info("ignoring the index snapshot at version %d: the change log no longer "
                 "reaches back to it", snap.version)  # fmt: skip
        return None
    log.info("loaded the index snapshot of %s at version %d and replayed %d changes",
             shard, snap.version, index.replayed)  # fmt: skip
    return index


def _change_at(store: StateStore, version: int) -> Change | None:
    """The change log's entry at ``version``, what identifies the state a snapshot is of
    (None at version 0: right after ``rebuild-state`` there is none);
    :class:`ChangeLogGapError` if the log no longer holds it."""
    return store.changes(version - 1, version)[0] if version else None


def _save_snapshot(settings: WorkerSettings, store: StateStore, index: WorkerIndex) -> None:
    """Save ``index`` as the snapshot, identified by the change log's entry at its
    version (none right after ``rebuild-state``: then no snapshot is written), and note
    its version in ``index.snapshot_version``, also when the write fails (a directory
    that cannot take it, full or read-only, then costs one attempt per half retention,
    not one per batch); nothing when another worker is writing the snapshot of the shard
    (it notes none)."""
    assert settings.snapshot_dir is not None
    try:
        last = _change_at(store, index.version)
    except ChangeLogGapError:
        log.info("no index snapshot written: the change log has no entry at version %d",
                 index.version)  # fmt: skip
        return
    t, cpu = time.perf_counter(), time.process_time()
    try:
        path = save_snapshot(settings.snapshot_dir, settings.redis_prefix, index.version,
                             index.matcher, index.heads,
                             None if last is None else change_digest(last),
                             index.shard)  # fmt: skip
    except OSError as exc:  # a snapshot is an optimisation: the worker goes on without
        log.warning("could not write the index snapshot in %s: %s", settings.snapshot_dir, exc)
        index.snapshot_version = index.version
        return
    finally:
        index.snapshot_write_s += time.perf_counter() - t
    if path is None:
        log.info("no index snapshot written at version %d: another worker is writing the "
                 "snapshot of %s", index.version, index.shard)  # fmt: skip
        return
    index.snapshot_version = index.version
    log.info("wrote the index snapshot of %s at version %d to %s (%.0f MiB in %.1f s, "
             "%.1f s of CPU)", index.shard, index.version, path, path.stat().st_size / 2**20,
             time.perf_counter() - t, time.process_time() - cpu)  # fmt: skip


def _refresh_snapshot(settings: WorkerSettings, store: StateStore, index: WorkerIndex) -> None:
    """Write a new snapshot of ``index`` when the newest one of its shard is half the
    change log's retention or more behind it, so that the log always reaches back to a
    snapshot: a worker that starts then loads it and replays at most about that many
    changes (plus the latest batch's), where without it, once the service had run past
    the retention, every new worker would parse every subscription again (80 s of CPU
    at 1M BE-Gen subscriptions, docs/bench-streaming.md, stop 38).

    A snapshot another worker of the shard wrote counts when its header names a version
    this state's change log identifies (:func:`snapshot_state`, one line read, and one
    log entry), even one past this index (a task of an earlier batch run late never
    writes over a newer snapshot): workers that keep up with the log write about one
    snapshot per half retention between them, not one each. Cost when none is due:
    nothing, or that header and entry while the worker has not written one itself; when
    one is due, a snapshot write (:func:`psmatch.service.snapshots.save_snapshot`, about 2 s at
    1M PSTHash subscriptions), in the task, before it matches.
    """
    if settings.snapshot_dir is None:
        return
    due = index.version - max(settings.retention // 2, 1)
    if index.snapshot_version is not None and index.snapshot_version > due:
        return
    written = snapshot_state(settings.snapshot_dir, settings.redis_prefix, settings.matcher,
                             index.shard)  # fmt: skip
    if written is not None and written[0] > due:
        try:
            last = _change_at(store, written[0])
        except ChangeLogGapError:
            last = None
        if last is not None and change_digest(last) == written[1]:
            index.snapshot_version = written[0]
            return
    _save_snapshot(settings, store, index)


def _catch_up(index: WorkerIndex, store: StateStore, upto: int) -> bool:
    """Replay the change log into ``index`` up to version ``upto``, read and applied in
    bulk :data:`LOAD_CHUNK` changes at a time (:meth:`StateStore.change_chunks`), the
    index's version noted after each group: a catch-up of any length holds one such
    group of changes, and in between the index is whole at its version.
    False (the index is then unusable) if the matcher raised; :class:`ChangeLogGapError`
    if the log no longer reaches back to the index's version (the index stays whole at
    its version). A catch-up of more than one group logs its progress after a group once
    :data:`PROGRESS_SECONDS` passed since the last line, and after the last group (at 1M
    subscriptions a group takes about 0.25 s)."""
    start = index.version
    logged = time.monotonic()
    with gc_paused():  # the changes read and decoded: see psmatch.core.heap
        for group in store.change_chunks(start, upto, LOAD_CHUNK):
            try:
                index.apply((change.sub_id, change.record, change.normal_form)
                            for change in group)  # fmt: skip
            except Exception:
                log.exception("replaying %d changes in bulk failed; reloading every "
                              "subscription", len(group))  # fmt: skip
                return False
            index.version = group[-1].version
            index.replayed += len(group)
            if upto - start > LOAD_CHUNK and (
                    index.version == upto or time.monotonic() - logged >= PROGRESS_SECONDS):
                logged = time.monotonic()
                log.info("%s: replayed %d of the %d changes after version %d (now at %d)",
                         index.shard, index.version - start, upto - start, start,
                         index.version)  # fmt: skip
    return True


def sync_index(settings: WorkerSettings, version: int, shard: int = 0) -> WorkerIndex:
    """The cached index of ``shard`` (of ``settings.shards``) of this process, brought to
    ``version``. Indexes of the same state cached for another shard count (the job was
    restarted with another ``--shards``) are dropped: no task will ask for them again."""
    key = _cache_key(settings, shard)
    with _LOCK:
        for stale in [k for k in _CACHE if k[:3] == key[:3] and k[3] != settings.shards]:
            del _CACHE[stale]
        store = state_store(settings)
        index = _CACHE.get(key)
        if index is not None and index.version < version:
            try:
                caught_up = _catch_up(index, store, version)
            except ChangeLogGapError:  # the log no longer reaches back to the index: reload
                caught_up = False
            if caught_up:
                _refresh_snapshot(settings, store, index)
                return index
            # else the matcher raised, and the index is half updated: reload
        if index is None or index.version != version:
            reloads = index.reloads + 1 if index is not None else 1
            # both references dropped before the reload starts (``index`` is rebound only
            # once it returns): a worker never holds the old and the new index at once
            _CACHE.pop(key, None)
            index = None
            index = _reload(settings, store, version, Shard(shard, settings.shards))
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
            _refresh_snapshot(settings, store, index)  # one loaded and replayed far
        return index


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
    (:meth:`index.Matcher.match_flat_slots`). Yields the output records as batches of
    :data:`OUTPUT_SCHEMA`: the notifications, :data:`RECORDS_CHUNK` matches at a time,
    each chunk assembled by Arrow (:func:`notification_records`) only once the one
    before it was taken, then the rejects. So a consumer that writes each batch before
    it asks for the next holds one chunk of records, however many subscriptions the
    events match (at 1M BE-Gen subscriptions, 2,000 events make about 250,000
    notifications, 110 MB of values).

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
    events, slots, failed = _match(index.matcher, flat_events)
    for i, exc in failed.items():
        reject(record_error(exc), *positions[i])
    # what matching freed (its candidates' columns) given back before the records are
    # built: matching 2,000 events (250,000 notifications) at 1M BE-Gen subscriptions in
    # PSTBloom, a process peaked at 342-347 MiB, against 357-362 from its second batch
    # on (342 the first; stop 43, scratch)
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
            slots[start : start + RECORDS_CHUNK], index, tails,
        )  # fmt: skip
        metrics.cpu_s += time.thread_time() - cpu3
        metrics.encode_s += time.perf_counter() - t3
        yield from notifications
    if rejects:
        yield output_records(settings.rejected_topic, rejects)


def notification_records(
    topic: str, events: np.ndarray, slots: np.ndarray, index: WorkerIndex, tails: list[bytes],
) -> list[pa.RecordBatch]:
    """The notification records of matches ``(events[i], slots[i])`` of ``index``: key
    the subscription's id, value its id, head and the event's tail (:mod:`psmatch.service.records`),
    in record batches of :data:`OUTPUT_SCHEMA` (one but for enormous batches: see
    :meth:`NotificationHeads.join`).

    Cost O(matches), nothing per match in Python: the keys copied by slot from the
    matcher's ids (:meth:`psmatch.core.matcher.Matcher.ids_utf8`) and the values joined from
    them by :meth:`NotificationHeads.join`.
    """
    ids = index.matcher.ids_utf8(slots)
    keys = binary_column(*ids)
    batches = []
    start = 0
    for values in index.heads.join(slots, ids, tails, events):
        n = len(values)
        batches.append(pa.RecordBatch.from_arrays(
            [repeated_string(topic, n), keys.slice(start, n), values],
            schema=OUTPUT_SCHEMA,
        ))  # fmt: skip
        start += n
    return batches


def _match(
    matcher: Matcher, flat_events: list[FlatEvent]
) -> tuple[np.ndarray, np.ndarray, dict[int, Exception]]:
    """The matches of a batch, as :meth:`index.Matcher.match_flat_slots` gives them, and
    the events the matcher raised on (by index). Should it raise on the batch (a bug, or
    an event it cannot handle), each event is matched alone, so only the events that
    raise are rejected."""
    try:
        events, slots = matcher.match_flat_slots(flat_events)
        return events, slots, {}
    except Exception:  # the per-record barrier: find the culprits
        log.exception("matching a batch of %d events failed; matching them one by one",
                      len(flat_events))  # fmt: skip
    rows: list[np.ndarray] = [np.empty(0, dtype=np.int64)]
    matched: list[np.ndarray] = [np.empty(0, dtype=np.int64)]
    failed: dict[int, Exception] = {}
    for i, flat in enumerate(flat_events):
        try:
            _, slots = matcher.match_flat_slots([flat])
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
    key = _cache_key(settings, shard)
    before = _CACHE.get(key)
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
    metrics.process_indexes = sum(1 for k in list(_CACHE) if k[:4] == key[:4])
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


def _sink(settings: SinkSettings) -> RecordSink:
    with _LOCK:
        sink = _SINKS.get(settings)
        if sink is None:
            sink = _SINKS[settings] = RecordSink(settings)
        return sink


def match_and_write(
    settings: WorkerSettings,
    sink: SinkSettings,
    version: int,
    batches: Iterator[pa.RecordBatch],
    report: Callable[[TaskMetrics], None] | None = None,
    shard: int = 0,
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function of the job: :func:`match_batches`, each batch of its
    records written to Kafka by this process's :class:`psmatch.adapters.kafka.RecordSink` as
    it is made, all acknowledged before the task ends (a record that could not be
    written fails the task, and Spark runs it again: at least once, as Spark's own
    Kafka sink). Returns no rows.

    The records go out from the Python worker, not through Spark's Kafka sink: that
    sink turned each Arrow record into a Spark row and produced it from the JVM, about
    7 µs of CPU per notification record, where librdkafka takes about 2.5 µs here
    (docs/bench-streaming.md).
    """
    writer = _sink(sink)
    reported: list[TaskMetrics] = []
    write_s = 0.0
    for records in match_batches(settings, version, batches, reported.append, shard):
        t = time.perf_counter()
        writer.write(records)
        write_s += time.perf_counter() - t
    t = time.perf_counter()
    writer.flush()
    (metrics,) = reported
    metrics.write_s = write_s + time.perf_counter() - t
    if report is not None:
        report(metrics)
    return iter(())
