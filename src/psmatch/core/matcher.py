"""The ``Matcher`` interface every index implements, and the bookkeeping they share.

The library's face is :class:`Matcher`'s public methods (``add``, ``add_many``,
``remove``, ``remove_many``, ``match``, ``match_batch``, ``stats``, ``check``, ``len``,
``in`` and ``iter``). The service's batch path, which works by slot on flattened events
and normal-form columns, is :class:`SlotPath` (``matcher.internal``): not part of the
library's face.

A matcher stores subscriptions (Boolean expressions in the text form of
:mod:`psmatch.language`, each under a caller-chosen id) and answers, for an event or a
batch of events, which subscriptions the event satisfies under the semantics of
:mod:`psmatch.language` and :mod:`psmatch.events`. Subclasses implement the ``_``-prefixed
hooks (the indexes through :class:`psmatch.core.pipeline.IndexedMatcher`); the public
methods here parse, validate and keep the id mapping so that every matcher reports
errors and replacements identically.

Single adds and removes are *staged*: ``add`` parses and claims the id at once (a bad
expression raises there, and ``len`` and ``in`` see the id), ``remove`` gives the id up
at once (``len``, ``in`` and every later read see it gone), and the staged changes are
filed together at the next read (``match``, ``match_batch``, ``add_many``,
``remove_many``, ``stats``, ``check``): the removals in one bulk removal, then the adds in
one bulk insert. Filing has a fixed cost per call (a few hundred numpy calls in the
indexed matchers) that a batch pays once, so a run of adds costs about what one
``add_many`` of them does, and a run of removes (or of replacements) what one
``remove_many`` and one ``add_many`` do. Removing an id whose add is still staged files
the staged changes first.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np

from psmatch.core.bulk_scan import scan_columns
from psmatch.core.heap import gc_paused, release_free_heap
from psmatch.core.slot_ids import SlotIds
from psmatch.events import FlatEvent, flatten_event
from psmatch.language import Conjunct, Subscription, parse_subscription
from psmatch.language.columns import SubscriptionColumns


@dataclass(frozen=True, slots=True)
class MatcherStats:
    """Size of an index: what ``Matcher.stats()`` returns, the same for every matcher.

    ``subscriptions``
        Live subscription ids.
    ``conjuncts``
        Live conjuncts: the disjuncts of the subscriptions' normal forms
        (:class:`psmatch.language.Conjunct`), each stored once per subscription.
    ``predicates``
        Predicates of the live conjuncts in the normal form, one per attribute a
        conjunct constrains (``a > 1 and a < 5`` is one predicate, ``a = 1 or a = 2``
        one per conjunct), counted once per conjunct that holds them. The same
        expressions give the same count in every matcher, whatever the matcher files
        (paper predicates, intervals, entries).
    ``spaces``
        Live predicate spaces of the PS-Tree forest (the ``2m + 1`` cells that the
        ``m`` distinct bounds of an (attribute, kind) cut its domain into, see
        :mod:`psmatch.pstree.tree`) for the matchers built on it (``pstbloom``,
        ``psthash``, ``opindex``, ``betree``); 0 for the others.
    ``estimated_bytes``
        Estimated memory of the matcher's structures: the exact ``nbytes`` of every
        numpy column plus a documented per-object estimate for what is kept as Python
        objects; the subscription id map every matcher shares is not included.
    ``placement``
        For a matcher that files conjuncts in several families (``auto``): by
        ``family``, the subscriptions with a conjunct there, and by ``family/reason``,
        the live conjuncts its rule filed there for that reason
        (:mod:`psmatch.auto.routing`); empty for the others. Not in :meth:`as_dict`,
        which holds the counts every matcher has.
    """

    subscriptions: int
    conjuncts: int
    predicates: int
    spaces: int
    estimated_bytes: int
    placement: Mapping[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, int]:
        return {
            "subscriptions": self.subscriptions,
            "conjuncts": self.conjuncts,
            "predicates": self.predicates,
            "spaces": self.spaces,
            "estimated_bytes": self.estimated_bytes,
        }


class Matcher(ABC):
    """Stores subscriptions by id and finds those an event satisfies.

    Subscription ids are strings (``TypeError`` for another type). Internally each
    matcher works with dense integer *slots*; an id map
    (:class:`psmatch.core.slot_ids.SlotIds`) maps ids to slots and back, and
    :attr:`internal` is the service's path by slot.
    """

    name: str = ""

    def __init__(self) -> None:
        self._ids = SlotIds()
        self._slot_count = 0  # slots ever used
        self._free_slots: list[int] = []  # reusable: their removal is filed
        self._staged: list[tuple[int, Subscription]] = []
        self._staged_slots: set[int] = set()  # the slots of the staged adds
        self._staged_removals: list[int] = []  # slots given up, their removal not filed

    # -- public API ---------------------------------------------------------------

    def add(self, sub_id: str, expr: str | Subscription) -> None:
        """Add the subscription ``expr`` under ``sub_id``, replacing any with that id.

        Raises :class:`psmatch.errors.ExpressionError` (a ``ValueError``) for a bad
        expression; the index is then unchanged. The subscription is staged and filed
        with the others staged at the next read (see the module docstring): cost one
        parse now, and a share of one bulk insert later.
        """
        subscription = expr if isinstance(expr, Subscription) else parse_subscription(expr)
        slot = self._claim_slot(sub_id)  # may file the staged ones (a replacement)
        self._staged.append((slot, subscription))
        self._staged_slots.add(slot)
        if len(self._staged) >= self.bulk_size:
            self._file_staged()

    def add_many(self, items: Iterable[tuple[str, str | Subscription]]) -> None:
        """Add many subscriptions: the same as ``add`` on each in turn, but in bulk.

        On a bad expression the items before it are added and the error is raised.
        Unlike ``add``, the subscriptions are filed before it returns. For a matcher
        that files normal-form columns, the texts that are conjunctions of integer
        comparisons are scanned together into columns
        (:func:`psmatch.core.bulk_scan.scan_columns`), with no object per predicate; the
        others are parsed one by one.

        Python's cyclic garbage collector is paused meanwhile
        (:func:`psmatch.core.heap.gc_paused`).
        """
        with self._bulk():
            batch: list[tuple[str, str | Subscription]] = []
            pending: set[str] = set()
            try:
                for sub_id, expr in items:
                    if sub_id in pending or len(batch) >= self.bulk_size:
                        batch, done = [], batch
                        pending = set()
                        self._add_batch(done)
                    pending.add(sub_id)
                    batch.append((sub_id, expr))
            finally:
                if batch:
                    self._add_batch(batch)

    def _add_batch(self, batch: list[tuple[str, str | Subscription]]) -> None:
        """Parse and file a batch of items under distinct ids, in one bulk insert after
        one bulk removal of what the ids held; on a bad expression, the items before it
        are filed and the error is raised."""
        if not batch:
            return
        ids, exprs = (list(column) for column in zip(*batch, strict=True))
        fast, columns = np.empty(0, dtype=np.int64), None
        if type(self)._insert_columns is not Matcher._insert_columns:  # files columns
            is_text = np.fromiter(map(str.__instancecheck__, exprs), bool, len(exprs))
            texts_at = np.flatnonzero(is_text)
            texts = exprs if len(texts_at) == len(exprs) else [exprs[i] for i in texts_at]
            accepted, columns, _ = scan_columns(texts)
            fast = texts_at[accepted]
        slow = np.ones(len(batch), dtype=bool)
        slow[fast] = False
        slow_at = np.flatnonzero(slow).tolist()
        subscriptions: list[Subscription] = []
        for i in slow_at:
            expr = exprs[i]
            try:
                subscriptions.append(
                    expr if isinstance(expr, Subscription) else parse_subscription(expr))
            except BaseException:
                self._add_batch(batch[:i])
                raise
        slots = self._replace_ids(ids)
        if columns is not None and len(fast):
            self._insert_columns(slots[fast], columns)
        if slow_at:
            self._insert_many(list(zip(slots[slow_at].tolist(), subscriptions, strict=True)))

    bulk_size = 16384
    """Subscriptions inserted together by ``add_many``."""

    @contextmanager
    def _bulk(self) -> Iterator[None]:
        """A bulk add: the cyclic collector paused, the staged changes filed first, and
        at the end, however it ends, the family's bulk hook and the freed heap given
        back."""
        with gc_paused():
            self._file_staged()
            try:
                yield
            finally:
                self._finish_bulk()
                release_free_heap()

    def _replace_ids(self, ids: list[str]) -> np.ndarray:
        """Slots for ``ids`` (distinct), after one bulk removal of the subscriptions
        they held."""
        held = self._ids.find(ids) >= 0
        if held.any():
            self.remove_many([sub_id for sub_id, h in zip(ids, held.tolist(), strict=True) if h])
        return self._claim_slots(ids)

    def _file_staged(self) -> None:
        """File the staged removals, in one bulk removal (their slots become reusable),
        then the staged subscriptions, in one bulk insert."""
        if self._staged_removals:
            slots, self._staged_removals = self._staged_removals, []
            self._delete_many(slots)
            self._free_slots.extend(slots)
        if self._staged:
            batch, self._staged = self._staged, []
            self._staged_slots.clear()
            self._insert_many(batch)

    def _claim_slot(self, sub_id: str) -> int:
        if sub_id in self:
            self.remove(sub_id)
        return int(self._claim_slots([sub_id])[0])

    def _claim_slots(self, ids: list[str]) -> np.ndarray:
        """Slots for ``ids`` (distinct, none held): reused ones first, then new ones."""
        kept = len(self._free_slots) - min(len(ids), len(self._free_slots))
        fresh = len(ids) - (len(self._free_slots) - kept)
        slots = np.concatenate((np.array(self._free_slots[kept:], dtype=np.int64),
                                np.arange(self._slot_count, self._slot_count + fresh)))
        self._ids.put_many(slots, ids)  # first: TypeError for an id not a str
        del self._free_slots[kept:]
        self._slot_count += fresh
        return slots

    def remove(self, sub_id: str) -> None:
        """Remove the subscription ``sub_id``; ``KeyError`` if there is none.

        The id is gone at once, and the removal is staged and filed with the other
        staged changes at the next read (see the module docstring): cost O(1) now, and a
        share of one bulk removal later.
        """
        if self._ids.get(sub_id) in self._staged_slots:  # its add is not filed yet
            self._file_staged()
        self._give_up([sub_id])
        if len(self._staged_removals) >= self.bulk_size:
            self._file_staged()

    def remove_many(self, sub_ids: Iterable[str]) -> None:
        """Remove many subscriptions: the same as ``remove`` on each, but in bulk.

        ``KeyError`` if one is not held or is given twice, before anything is removed.
        Unlike ``remove``, the removals are filed before it returns. The indexed
        matchers unfile the conjuncts of all of them together, as column operations, and
        check once whether a purge is due: cost O(their predicates) vectorised, plus the
        amortised purge.
        """
        self._file_staged()
        self._give_up(list(sub_ids))
        self._file_staged()

    def _give_up(self, ids: list[str]) -> None:
        """Take the held ``ids`` out of the id map and stage their slots' removal;
        ``KeyError`` (nothing changed) if one is not held or comes twice."""
        slots = self._slots_of(ids)
        if len(np.unique(slots)) < len(slots):
            raise KeyError(next(sub_id for sub_id, n in Counter(ids).items() if n > 1))
        self._ids.clear_many(slots)
        self._staged_removals.extend(slots.tolist())

    def __contains__(self, sub_id: object) -> bool:
        return isinstance(sub_id, str) and self._ids.get(sub_id) >= 0

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[str]:
        """The ids of the subscriptions held, in no particular order (a list taken
        now)."""
        return iter(self._ids)

    def _slots_of(self, ids: Sequence[str]) -> np.ndarray:
        """The slots of ``ids``, as int64; ``KeyError`` naming the first not held."""
        slots = self._ids.find(ids)
        if (slots < 0).any():
            raise KeyError(ids[int(np.argmax(slots < 0))])
        return slots

    def match(self, event: Mapping[str, Any]) -> set[str]:
        """The ids of the subscriptions ``event`` satisfies.

        Raises :class:`psmatch.errors.EventError` (a ``ValueError``) for an invalid event.
        """
        return self._match_sets([flatten_event(event)])[0]

    def match_batch(self, events: Sequence[Mapping[str, Any]]) -> list[set[str]]:
        """One set of matching ids per event, in order.

        The whole batch is validated first: one invalid event raises
        :class:`psmatch.errors.EventError` naming its position and attribute, and no
        event of the batch is matched (callers that must keep going validate events
        one by one with :func:`psmatch.events.flatten_event` first).
        """
        return self._match_sets(
            [flatten_event(event, position=i) for i, event in enumerate(events)]
        )

    @property
    def internal(self) -> SlotPath:
        """The service's batch path into this matcher (:class:`SlotPath`): not part of the
        library's face. O(1)."""
        return SlotPath(self)

    def _match_sets(self, flat_events: Sequence[FlatEvent]) -> list[set[str]]:
        """One set of matching ids per flat event: the matches by event, cut into sets."""
        events, slots = self._match_slots(flat_events)
        ids = self._ids.ids_at(slots)
        bounds = np.searchsorted(events, np.arange(len(flat_events) + 1)).tolist()
        return [set(ids[a:b]) for a, b in pairwise(bounds)]

    def _match_slots(self, flat_events: Sequence[FlatEvent]
                     ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """The (event index, slot) of every match of flat events, by event, each pair
        once, as int64 columns; the staged changes filed first."""
        if not flat_events:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        self._file_staged()
        events, slots = self._match_flat_pairs(list(flat_events))
        return events, slots.astype(np.int64, copy=False)

    def stats(self) -> MatcherStats:
        """Counts and estimated memory of the index (staged adds filed first)."""
        self._file_staged()
        return self._stats()

    def check(self) -> None:
        """File the staged adds, then assert every invariant of the index; raises
        ``AssertionError`` on a breach: the id map's too (:meth:`SlotIds.check`), and
        that the free slots and the held ones are apart and below the slots ever used."""
        self._file_staged()
        self._ids.check()
        free, held = set(self._free_slots), set(self._ids.held_slots().tolist())
        assert len(free) == len(self._free_slots) and not free & held, "a slot both free and held"
        assert max(free | held, default=-1) < self._slot_count
        self._check()

    # -- hooks for subclasses -----------------------------------------------------

    def _insert_many(self, batch: list[tuple[int, Subscription]]) -> None:
        """Index each subscription under its free slot; override to do it in bulk."""
        for slot, subscription in batch:
            self._insert(slot, subscription)

    def _insert_columns(self, slots: np.ndarray, columns: SubscriptionColumns) -> None:
        """Index the subscriptions of ``columns``, each under its free slot of ``slots``;
        override to file the columns as they are (here: their objects, by
        ``_insert_many``)."""
        self._insert_many(list(zip(slots.tolist(), columns.subscriptions(), strict=True)))

    def _delete_many(self, slots: list[int]) -> None:
        """Remove everything indexed under each of the distinct ``slots``; override to
        do it in bulk."""
        for slot in slots:
            self._delete(slot)

    def _finish_bulk(self) -> None:  # noqa: B027 - a hook; most matchers need nothing
        """Called at the end of ``add_many``: compact what a bulk load left loose."""

    @staticmethod
    def _conjuncts_of(batch: list[tuple[int, Subscription]]) -> tuple[list[int], list[Conjunct]]:
        """Every conjunct of a batch, with the slot of its subscription, in order."""
        slots: list[int] = []
        conjuncts: list[Conjunct] = []
        for slot, subscription in batch:
            slots.extend([slot] * len(subscription.conjuncts))
            conjuncts.extend(subscription.conjuncts)
        return slots, conjuncts

    @abstractmethod
    def _stats(self) -> MatcherStats:
        """Counts and estimated memory of the index."""

    @abstractmethod
    def _check(self) -> None:
        """Assert every invariant of the index."""

    @abstractmethod
    def _insert(self, slot: int, subscription: Subscription) -> None:
        """Index ``subscription`` under the free ``slot``."""

    @abstractmethod
    def _delete(self, slot: int) -> None:
        """Remove everything indexed under ``slot``."""

    @abstractmethod
    def _match_flat_pairs(self, events: list[FlatEvent]) -> tuple[np.ndarray, np.ndarray]:
        """The (event index, slot) of every match of the validated, flattened events,
        by event, each pair once."""


class SlotPath:
    """The service's batch path into a matcher: not part of the library's face.

    The streaming worker keeps what it needs per subscription in columns by *slot* (the
    dense number the matcher files a subscription under), loads subscriptions from their
    normal forms' columns, and matches events it has already validated and flattened;
    these are its entry points. Got from :attr:`Matcher.internal`; it holds nothing of
    its own.
    """

    __slots__ = ("_matcher",)

    def __init__(self, matcher: Matcher) -> None:
        self._matcher = matcher

    def add_columns(self, ids: Sequence[str], columns: SubscriptionColumns) -> None:
        """Add the subscriptions whose normal forms ``columns`` holds
        (:mod:`psmatch.service.records.normal_forms`), the i-th under ``ids[i]``, replacing any held
        under those ids: what :meth:`Matcher.add_many` of their objects does, in one bulk
        insert. The ids must be distinct, one per subscription (``ValueError`` before
        anything changes).

        A PS-Tree matcher files the columns as they are, with no object per predicate or
        interval; the others build the subscriptions' objects first.
        """
        if len(ids) != len(columns) or len(set(ids)) != len(ids):
            raise ValueError(f"add_columns takes one distinct id per subscription: "
                             f"{len(set(ids))} distinct of {len(ids)} for {len(columns)}")
        if not ids:
            return
        matcher = self._matcher
        with matcher._bulk():
            matcher._insert_columns(matcher._replace_ids(list(ids)), columns)

    def slot_of(self, sub_id: str) -> int:
        """The slot of ``sub_id`` (``KeyError`` if there is none): the number
        :meth:`match_flat_slots` gives for its matches, fixed until it is removed or
        replaced, and reused after that. Cost O(1)."""
        return int(self._matcher._slots_of([sub_id])[0])

    def slots_of(self, ids: Sequence[str]) -> np.ndarray:
        """:meth:`slot_of` of each of ``ids``, as int64; ``KeyError`` naming the first
        not held. Cost O(len(ids) + their bytes), one compiled probe each."""
        return self._matcher._slots_of(ids)

    def ids_utf8(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ids at ``slots`` (:meth:`slot_of`, each held) in UTF-8, back to back: int64
        offsets (``len(slots) + 1``, from 0) and uint8 data, for callers that build
        columns of them with no ``str`` per id. Cost O(len(slots) + their bytes), one
        compiled copy."""
        return self._matcher._ids.utf8(slots)

    def match_flat_batch(self, flat_events: Sequence[FlatEvent]) -> list[set[str]]:
        """:meth:`Matcher.match_batch` for events already validated and flattened.

        Each item must be what :func:`psmatch.events.flatten_event` returned for an
        event; a caller that validates events one by one (to reject the bad ones and
        keep going) matches its flat results here, so no event is flattened twice.
        """
        return self._matcher._match_sets(flat_events)

    def match_flat_pairs(self, flat_events: Sequence[FlatEvent]
                         ) -> tuple[np.ndarray, list[str]]:  # fmt: skip
        """Every match of a batch of flat events as two columns, for callers that
        process matches in bulk: the event's index in ``flat_events`` (non-decreasing)
        and the subscription's id; each (event, subscription) pair once.

        Cost: the matching, then O(matches) in C loops; no set per event.
        """
        events, slots = self._matcher._match_slots(flat_events)
        return events, self._matcher._ids.ids_at(slots)

    def match_flat_slots(self, flat_events: Sequence[FlatEvent]
                         ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """:meth:`match_flat_pairs` with each match's subscription as its slot
        (:meth:`slot_of`) in an int64 array: nothing per match in Python, for callers
        that keep what they need per subscription in columns by slot.
        """
        return self._matcher._match_slots(flat_events)
