"""The index a worker holds of one shard of the subscriptions: a matcher at a known
state version, and the notification head of each subscription it holds, by slot
(:class:`psmatch.service.records.notifications.NotificationHeads`).

Owns :class:`WorkerIndex` and how stored subscriptions go into it (no I/O: the caller,
:mod:`psmatch.service.index_cache`, reads them from Redis): in bulk, :data:`LOAD_CHUNK` at a
time, each stored subscription decoded inside a per-record barrier (one that cannot be
decoded is left out and logged). A chunk's normal forms, which the driver wrote beside
the records in the change log, are read into columns at once and filed from them
(``matcher.internal.add_columns``), not parsed again; should the matcher's bulk insert itself
raise, :meth:`WorkerIndex.put` files one subscription at a time, so that only the
culprits are left out.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import chain, islice
from typing import Literal

from psmatch import Matcher
from psmatch.adapters.state import ChangeRun
from psmatch.core.heap import gc_paused
from psmatch.errors import ExpressionError
from psmatch.language import Subscription
from psmatch.service.records.common import record_error
from psmatch.service.records.normal_forms import load_normal_forms
from psmatch.service.records.notifications import (
    NotificationHeads,
    check_head,
    check_notification_key,
    load_stored_head,
    notification_head,
)
from psmatch.service.records.subscriptions import load_stored
from psmatch.service.shards import WHOLE, Shard

log = logging.getLogger(__name__)

LOAD_CHUNK = 10_000
"""Subscriptions per bulk insert of a reload, and changes per group of a catch-up (and
per read of the state or the change log, :mod:`psmatch.service.index_cache`). A group's
changes (their stored texts and normal forms) and a bulk build's new columns are held
beside the index, so a chunk bounds the memory a reload or a catch-up adds to the
index's. Each chunk costs the matcher's bulk insert its fixed overhead (the sorts and
merges of its posting lists and trees), so larger chunks file faster: about a quarter
less CPU in filing 200,000 BE-Gen subscriptions in chunks of 10,000 than of 2,500, and
no less in chunks of 20,000. Smaller chunks do not lower the peak without end either:
a chunk's small Python objects live in pymalloc's arenas of 1 MiB, and an arena goes
back to the system only when all of it is free, so the few objects that outlive a
chunk (a new array's header, a cache entry) keep the arenas it filled."""


def _text(data: str | bytes) -> str:
    """A stored text, given as text or as its UTF-8 bytes."""
    return data.decode() if data.__class__ is bytes else data  # type: ignore[union-attr]


def _log_left_out(sub_id: str, exc: Exception) -> None:
    """Log a stored subscription the index leaves out, and why."""
    log.error("leaving out stored subscription %r: %s", sub_id[:100], record_error(exc))


BuiltFrom = Literal["snapshot", "change log", "subscriptions"]
"""Where a reload started from: an index snapshot, the empty state (the whole change log
replayed), or every live subscription read from Redis."""


@dataclass
class WorkerIndex:
    """A matcher at a known version plus each subscription's notification head by slot (its
    key, the id, is the matcher's own), holding the subscriptions of ``shard`` only;
    ``replayed`` counts the changes replayed into it from the log since ``built_from``;
    ``snapshot_version`` is the version of the newest snapshot of its shard it knows of
    (loaded, written or read from the file's header) or of its last failed attempt to
    write one, ``None`` before either; ``snapshot_write_s`` the seconds spent writing
    its snapshots."""

    matcher: Matcher
    version: int = 0
    heads: NotificationHeads = field(default_factory=NotificationHeads)
    reloads: int = 0
    replayed: int = 0
    shard: Shard = WHOLE
    built_from: BuiltFrom = "change log"
    snapshot_version: int | None = None
    snapshot_write_s: float = 0.0

    def apply(self, run: ChangeRun) -> None:
        """Apply a run of the change log (:meth:`psmatch.adapters.state.StateStore
        .change_runs`: stored subscriptions and deletions, in order) in bulk: changes of
        other shards are skipped (one CRC-32 of the id each, none with one shard); only
        each id's last change counts; the deletions are one bulk removal, and the puts
        are filed as one chunk (:meth:`_load_chunk`). Raises whatever the matcher's bulk
        insert raised: it may then be half updated, and the caller discards it.

        Cost: one JSON decode of each put's record, its normal form read into columns
        with the others' (or its expression parsed), the matcher's bulk removal of the
        deleted and replaced subscriptions and its bulk insert.
        """
        holds = self.shard.holds
        latest = {sub_id: (stored, form)
                  for sub_id, stored, form in zip(run.ids, run.records, run.forms, strict=True)
                  if holds(sub_id)}  # fmt: skip
        self.delete([sub_id for sub_id, (stored, _) in latest.items() if stored is None])
        left_out: list[str] = []
        with gc_paused():  # a chunk's decoded forms are many lists: see psmatch.core.heap
            self._load_chunk({sub_id: change for sub_id, change in latest.items()
                              if change[0] is not None}, left_out)  # fmt: skip
        self.delete(left_out)

    def load(self, stored: Iterable[tuple[str, str, str | None]]) -> None:
        """Index stored subscriptions (``(id, stored text, normal form or None)``, see
        :func:`psmatch.service.records.subscriptions.load_stored`) as they come,
        :data:`LOAD_CHUNK` at a time (:meth:`_load_chunk`): those of other shards are
        skipped, and an id given twice keeps its last text (within a chunk the last is
        kept, across chunks the matcher replaces it). Raises whatever the matcher's bulk
        insert raised, as :meth:`apply` does.

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

    def _load_chunk(self, chunk: Mapping[str, tuple[str | bytes, str | bytes | None]],
                    left_out: list[str]) -> None:  # fmt: skip
        """Index a chunk of distinct ids' stored subscriptions (texts, or their UTF-8
        bytes as the change log gives them): those with a normal form read into columns
        all at once and added from them (``matcher.internal.add_columns``, no object per
        predicate), the others parsed (``add_many``). Each record is decoded inside the
        per-record barrier: one that cannot be (the driver validated it, so only a
        hand-edited Redis or a bug) is logged and its id put in ``left_out``, for the
        caller to remove any previous version: the index never holds a stale one. A
        malformed normal form fails the chunk's batch read, and the chunk's forms are
        then read one by one to find it."""
        heads: dict[str, str] = {}
        parsed: list[tuple[str, Subscription]] = []
        ids, texts, forms = [], [], []
        for sub_id, (stored, form) in chunk.items():
            try:  # the per-record barrier; no I/O inside
                check_notification_key(sub_id)
                text = _text(stored)
                if form is None:
                    record = load_stored(text)
                    heads[sub_id] = notification_head(sub_id, record)
                    parsed.append((sub_id, record.subscription))
                else:
                    expr, heads[sub_id] = load_stored_head(sub_id, text)
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
                stored, form = chunk[sub_id]
                try:  # the per-record barrier; no I/O inside
                    parsed.append((sub_id, load_stored(_text(stored), _text(form)).subscription))
                except Exception as exc:
                    del heads[sub_id]
                    left_out.append(sub_id)
                    _log_left_out(sub_id, exc)
        else:
            self.matcher.internal.add_columns(ids, columns)
        self.matcher.add_many(parsed)
        self.heads.put_many(self.matcher.internal.slots_of(list(heads)), list(heads.values()))

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
        self.heads.put(self.matcher.internal.slot_of(sub_id), head)

    def delete(self, sub_ids: list[str]) -> None:
        """Remove those of ``sub_ids`` the matcher holds (an id may come twice), with
        their heads, in one bulk removal (``Matcher.remove_many``)."""
        held = [sub_id for sub_id in dict.fromkeys(sub_ids) if sub_id in self.matcher]
        self.heads.clear_many(self.matcher.internal.slots_of(held))
        self.matcher.remove_many(held)

    def check(self) -> None:
        """Assert the matcher's and the heads' invariants, and that every subscription the
        matcher holds has its head at its slot; ``AssertionError`` on a breach.
        Cost O(subscriptions)."""
        self.matcher.check()
        self.heads.check()
        for sub_id in self.matcher:
            head = self.heads.get(self.matcher.internal.slot_of(sub_id))
            assert head is not None, sub_id
            check_head(head)
