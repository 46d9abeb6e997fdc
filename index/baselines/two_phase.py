"""What counting, Propagation and PB+tree share: the two-phase life cycle and counting.

The three matchers are *two-phase* (Fabret et al., "Filtering Algorithms and
Implementation for Very Fast Publish/Subscribe Systems", SIGMOD 2001; Wang, Zhang and
Kitsuregawa, "Design of B+tree-Based Predicate Index for Efficient Event Matching",
APWeb 2003): phase 1 finds the
predicates an event satisfies with one index per attribute, phase 2 derives the matching
conjuncts from them. Owns :class:`TwoPhaseMatcher`, which files a conjunct's paper
predicates (:func:`index.baselines.paper_predicates.decompose`) and unfiles them, and
:func:`count_complete`, the counting phase 2 shared by ``counting`` and ``pbtree``.

Deletion, which neither paper specifies: a removed conjunct is marked dead at once (its
size becomes -1, so its count can never complete) and its predicates lose a reference.
Entries that name conjuncts (associations, clusters, PB+tree lists) are dropped in bulk
by the purge the shared pipeline schedules (:mod:`index.core.pipeline`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections import Counter
from collections.abc import Hashable, Iterable

import numpy as np

from index.baselines.paper_predicates import PaperPredicate, decompose_conjunct
from index.core.columns import GrowableArray, group_by_event
from index.events import FlatEvent
from index.language import Conjunct, Subscription
from index.matcher import Matcher
from index.pstree.store import evaluate_flagged

HIT_BUDGET = 1 << 22
"""Most (event, owner) hits one chunk of a batch should produce (32 MiB per column)."""
FIRST_CHUNK = 16
"""Events in a matcher's first chunk, before it knows its hits per event."""

class ConjunctTable:
    """Conjuncts as columns: ``slot``, ``size`` (paper predicates; -1 when dead, so a
    count can never complete), ``residual``, ``alive``; plus the conjunct objects, for
    residual verification and for unfiling."""

    def __init__(self) -> None:
        self.slot = GrowableArray(np.int64)
        self.size = GrowableArray(np.int32)
        self.residual = GrowableArray(np.bool_)
        self.alive = GrowableArray(np.bool_)
        self.conjuncts: list[Conjunct | None] = []
        self.removed: list[int] = []
        self._free: list[int] = []
        self.live = 0

    def __len__(self) -> int:
        """Cids ever handed out."""
        return len(self.conjuncts)

    def add(self, slot: int, conjunct: Conjunct, size: int, residual: bool) -> int:
        row = (slot, size, residual, True)
        columns = (self.slot, self.size, self.residual, self.alive)
        if self._free:
            cid = self._free.pop()
            self.conjuncts[cid] = conjunct
            for column, value in zip(columns, row, strict=True):
                column.data[cid] = value
        else:
            cid = len(self.conjuncts)
            self.conjuncts.append(conjunct)
            for column, value in zip(columns, row, strict=True):
                column.append(value)
        self.live += 1
        return cid

    def remove(self, cid: int) -> None:
        self.alive.data[cid] = False
        self.size.data[cid] = -1
        self.conjuncts[cid] = None
        self.removed.append(cid)
        self.live -= 1

    def reclaim(self) -> None:
        """Make removed cids reusable; call once no structure refers to them."""
        self._free.extend(self.removed)
        self.removed.clear()

    @property
    def nbytes(self) -> int:
        columns = (self.slot, self.size, self.residual, self.alive)
        # The Conjunct objects are kept for verification and unfiling: ~8 bytes a pointer.
        return sum(c.nbytes for c in columns) + 8 * len(self.conjuncts)

    @property
    def live_predicates(self) -> int:
        return int(self.size.view()[self.alive.view()].sum())

    def predicates(self) -> Iterable[tuple[int, list[PaperPredicate]]]:
        """(cid, paper predicates) of every live conjunct; for checks. O(predicates)."""
        for cid, conjunct in enumerate(self.conjuncts):
            if conjunct is not None:
                yield cid, decompose_conjunct(conjunct)[0]

    def check(self) -> None:
        alive = self.alive.view()
        assert int(alive.sum()) == self.live
        assert not alive[self.removed + self._free].any()
        for cid, conjunct in enumerate(self.conjuncts):
            assert bool(alive[cid]) == (conjunct is not None)
            if conjunct is not None:
                predicates, residual = decompose_conjunct(conjunct)
                assert int(self.size.data[cid]) == len(predicates)
                assert bool(self.residual.data[cid]) == residual


def count_complete(events: np.ndarray, cids: np.ndarray,
                   table: ConjunctTable) -> tuple[np.ndarray, np.ndarray]:
    """The counting algorithm's phase 2: a conjunct matches an event when its hits on
    the event (its satisfied predicates, with multiplicity) reach its size.

    The counters are the run lengths of the sorted (event, cid) keys: one ``np.sort``
    (a SIMD radix/quick sort on int64, a few ns per hit) and O(hits) passes, where a
    dense ``events x conjuncts`` counter table would cost O(conjuncts) per event.
    Dead conjuncts have size -1 and never complete.
    """
    width = max(len(table), 1)
    keys = events * width + cids
    if len(keys) and (int(events.max()) + 1) * width < 2**31:
        keys = keys.astype(np.int32)  # half the bytes to sort
    keys.sort()
    if not len(keys):
        return keys, keys
    first = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    runs = np.diff(np.append(first, len(keys)))
    unique = keys[first]
    done = unique[runs == table.size.data[unique % width]].astype(np.int64)
    return done // width, done % width


class TwoPhaseMatcher(Matcher):
    """Base of counting, Propagation and PB+tree: conjunct table, life cycle, batching.

    Subclasses file a conjunct's paper predicates in their structures and, per chunk of
    events, return the (event, cid) pairs phase 2 found complete; this class verifies
    residual conjuncts and groups the answer. Chunks are sized so that the hits of a
    chunk, estimated from the previous one, stay near :data:`HIT_BUDGET`.
    """

    PURGE_MIN = 1024
    """Removals that always wait for a bulk purge (else a quarter of the live ones)."""

    def __init__(self) -> None:
        super().__init__()
        self.table = ConjunctTable()
        self._cids_of: dict[int, list[int]] = {}
        self._hits_per_event = HIT_BUDGET / FIRST_CHUNK

    # -- Matcher hooks -----------------------------------------------------------------

    def _insert(self, slot: int, subscription: Subscription) -> None:
        cids = []
        for conjunct in subscription.conjuncts:
            predicates, residual = decompose_conjunct(conjunct)
            cid = self.table.add(slot, conjunct, len(predicates), residual)
            self._file(cid, predicates)
            cids.append(cid)
        self._cids_of[slot] = cids

    def _delete(self, slot: int) -> None:
        for cid in self._cids_of.pop(slot):
            conjunct = self.table.conjuncts[cid]
            assert conjunct is not None
            self.table.remove(cid)
            self._unfile(cid, decompose_conjunct(conjunct)[0])
        if len(self.table.removed) > max(self.PURGE_MIN, self.table.live // 4):
            self._purge()
            self.table.reclaim()

    def add_many(self, items: Iterable[tuple[Hashable, str | Subscription]]) -> None:
        """Add many subscriptions, then build the structures (so build time is paid
        here rather than by the first match)."""
        super().add_many(items)
        self._prepare()

    def _match_flat(self, events: list[FlatEvent]) -> list[Iterable[int]]:
        self._prepare()
        found_e, found_c = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
        first = 0
        while first < len(events):
            size = max(1, int(HIT_BUDGET / self._hits_per_event))
            chunk = events[first : first + size]
            e, c, hits = self._match_chunk(chunk)
            self._hits_per_event = max(hits / len(chunk), 1.0)
            e, c = evaluate_flagged(e, c, self.table.residual.data,
                                    self.table.conjuncts.__getitem__, chunk)
            found_e.append(e + first)
            found_c.append(c)
            first += len(chunk)
        cids = np.concatenate(found_c)
        return group_by_event(len(events), np.concatenate(found_e), self.table.slot.data[cids])

    # -- subclass hooks ----------------------------------------------------------------

    @abstractmethod
    def _file(self, cid: int, predicates: list[PaperPredicate]) -> None:
        """Index a new conjunct's paper predicates."""

    def _unfile(self, cid: int, predicates: list[PaperPredicate]) -> None:
        """Release what a removed conjunct holds besides entries purged in bulk."""

    @abstractmethod
    def _prepare(self) -> None:
        """Bring the structures a match reads up to date (build pending additions)."""

    @abstractmethod
    def _purge(self) -> None:
        """Drop every entry of removed cids (and dead pids) from all structures."""

    @abstractmethod
    def _match_chunk(self, events: list[FlatEvent]
                     ) -> tuple[np.ndarray, np.ndarray, int]:
        """(chunk event, cid) pairs found complete, and the number of hits handled."""

    def check(self) -> None:
        self.table.check()
        assert sum(len(c) for c in self._cids_of.values()) == self.table.live
        for slot, cids in self._cids_of.items():
            assert self._ids[slot] is not None
            for cid in cids:
                assert self.table.alive.data[cid] and self.table.slot.data[cid] == slot

    def _live_predicates(self) -> Counter[PaperPredicate]:
        """Each paper predicate with the number of live conjuncts that contain it."""
        return Counter(p for _, ps in self.table.predicates() for p in ps)
