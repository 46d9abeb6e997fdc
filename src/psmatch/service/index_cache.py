"""The per-process cache of worker indexes, and how each is brought to the version a task
asks for (:func:`sync_index`).

A Spark Python worker (kept alive across tasks and batches by
``spark.python.worker.reuse``) holds one :class:`psmatch.service.worker_index.WorkerIndex`
per (Redis URL, key prefix, matcher kind, shard count, shard) in module memory
(:data:`INDEXES`): one per shard it has been handed (:mod:`psmatch.service.shards`; Spark
gives no partition-to-executor affinity, so a process may be handed several shards over
time). For each task the driver names the subscription version of the batch;
:func:`sync_index` brings the cached index to exactly that version by replaying the
change log from Redis, or reloads it when the log no longer reaches back far enough
(first use, a worker that missed more than the retention, state rebuilt): from its
snapshot (:mod:`psmatch.service.snapshots`), else by replaying the whole change log from
the empty state while the log still holds every change (:data:`REPLAY_PER_LIVE`), else
from every subscription in Redis (read whole, the shard's kept); all in bulk, the log
read and the state scanned :data:`~psmatch.service.worker_index.LOAD_CHUNK` at a time.
A worker whose index has moved half the change log's retention past the newest snapshot
of its shard writes a new one after its catch-up (:func:`_refresh_snapshot`), so that a
worker that starts later finds a snapshot the log still reaches back to, however long
the service has run. The Redis I/O here is outside every per-record barrier: its faults
fail the task, never a record.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import NamedTuple

from psmatch import make_matcher
from psmatch.adapters.state import Change, ChangeLogGapError, StateStore
from psmatch.core.heap import gc_paused
from psmatch.service.connections import state_store
from psmatch.service.records.common import record_error
from psmatch.service.shards import WHOLE, Shard
from psmatch.service.snapshots import (
    SnapshotError,
    change_digest,
    load_snapshot,
    save_snapshot,
    snapshot_state,
)
from psmatch.service.task_contract import WorkerSettings
from psmatch.service.worker_index import LOAD_CHUNK, WorkerIndex

log = logging.getLogger(__name__)

REPLAY_PER_LIVE = 2
"""A reload replays the whole change log from the empty state, rather than parsing every
live subscription, when the log still holds every change and at most this many per live
subscription: a put replayed loads the normal form logged beside it, at about half the
cost of a parse or less (:func:`psmatch.service.records.normal_forms.load_normal_form`), and a
delete costs less still."""
PROGRESS_SECONDS = 5.0
"""A long catch-up logs its progress at most this often, and once at its end."""


class CacheKey(NamedTuple):
    """What a cached index is of: a state (Redis URL, key prefix), a matcher kind and a
    shard of a shard count."""

    redis_url: str
    redis_prefix: str
    matcher: str
    shards: int
    shard: int


def cache_key(settings: WorkerSettings, shard: int) -> CacheKey:
    """The key of the index of ``shard`` a task with ``settings`` uses."""
    return CacheKey(settings.redis_url, settings.redis_prefix, settings.matcher,
                    settings.shards, shard)  # fmt: skip


INDEXES: dict[CacheKey, WorkerIndex] = {}
"""This process's indexes: module memory, kept across the tasks and batches the process
serves (emptied, it stands for a new process)."""
_LOCK = threading.Lock()


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
    except Exception as exc:  # a barrier: a snapshot is an optimisation, never fatal
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
    the retention, every new worker would parse every subscription again (what
    ``bench/bench_worker_reload.py`` times as a full reload, against a start from the
    snapshot).

    A snapshot another worker of the shard wrote counts when its header names a version
    this state's change log identifies (:func:`snapshot_state`, one line read, and one
    log entry), even one past this index (a task of an earlier batch run late never
    writes over a newer snapshot): workers that keep up with the log write about one
    snapshot per half retention between them, not one each. Cost when none is due:
    nothing, or that header and entry while the worker has not written one itself; when
    one is due, a snapshot write (:func:`psmatch.service.snapshots.save_snapshot`, O(the
    index's size)), in the task, before it matches.
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
    bulk :data:`LOAD_CHUNK` changes at a time (:meth:`StateStore.change_runs`), the
    index's version noted after each group: a catch-up of any length holds one such
    group of changes, and in between the index is whole at its version.
    False (the index is then unusable) if the matcher raised; :class:`ChangeLogGapError`
    if the log no longer reaches back to the index's version (the index stays whole at
    its version). A catch-up of more than one group logs its progress after a group once
    :data:`PROGRESS_SECONDS` passed since the last line, and after the last group."""
    start = index.version
    logged = time.monotonic()
    with gc_paused():  # the changes read and decoded: see psmatch.core.heap
        for run in store.change_runs(start, upto, LOAD_CHUNK):
            try:
                index.apply(run)
            except Exception:
                log.exception("replaying %d changes in bulk failed; reloading every "
                              "subscription", len(run))  # fmt: skip
                return False
            index.version = run.last
            index.replayed += len(run)
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
    key = cache_key(settings, shard)
    with _LOCK:
        for stale in [k for k in INDEXES if k[:3] == key[:3] and k.shards != settings.shards]:
            del INDEXES[stale]
        store = state_store(settings)
        index = INDEXES.get(key)
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
            INDEXES.pop(key, None)
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
            INDEXES[key] = index
            _refresh_snapshot(settings, store, index)  # one loaded and replayed far
        return index
