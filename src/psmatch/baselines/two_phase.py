"""What counting, Propagation and PB+tree share: the two-phase life cycle and counting.

The three matchers are *two-phase* (Fabret et al., "Filtering Algorithms and
Implementation for Very Fast Publish/Subscribe Systems", SIGMOD 2001; Wang, Zhang and
Kitsuregawa, "Design of B+tree-Based Predicate Index for Efficient Event Matching",
APWeb 2003): phase 1 finds the
predicates an event satisfies with one index per attribute, phase 2 derives the matching
conjuncts from them. Owns :class:`TwoPhaseMatcher`, which files a conjunct's paper
predicates (:func:`psmatch.baselines.paper_predicates.decompose`) and unfiles them, and
:func:`count_complete`, the counting phase 2 shared by ``counting`` and ``pbtree``.

Deletion, which neither paper specifies: a removed conjunct is marked dead at once (its
size becomes -1, so its count can never complete) and its predicates lose a reference.
Entries that name conjuncts (associations, clusters, PB+tree lists) are dropped in bulk
by the purge the shared pipeline schedules (:mod:`psmatch.core.pipeline`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections import Counter
from collections.abc import Iterable, Iterator

import numpy as np

from psmatch.baselines.paper_predicates import PaperPredicate, decompose_conjunct
from psmatch.core.columns import GrowableArray
from psmatch.core.pipeline import Batch, Candidates, IndexedMatcher
from psmatch.events import FlatEvent
from psmatch.language import Conjunct, Subscription


def count_complete(events: np.ndarray, cids: np.ndarray,
                   size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The counting algorithm's phase 2: a conjunct matches an event when its hits on
    the event (its satisfied predicates, with multiplicity) reach its ``size`` (number
    of paper predicates; -1 for a removed conjunct, which never completes).

    The counters are the run lengths of the sorted (event, cid) keys: one ``np.sort``
    (a SIMD radix/quick sort on int64, a few ns per hit) and O(hits) passes, where a
    dense ``events x conjuncts`` counter table would cost O(conjuncts) per event.
    """
    width = max(len(size), 1)
    keys = events * width + cids
    if len(keys) and (int(events.max()) + 1) * width < 2**31:
        keys = keys.astype(np.int32)  # half the bytes to sort
    keys.sort()
    if not len(keys):
        return keys, keys
    first = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    runs = np.diff(np.append(first, len(keys)))
    unique = keys[first]
    done = unique[runs == size[unique % width]].astype(np.int64)
    return done // width, done % width


class TwoPhaseMatcher(IndexedMatcher):
    """Base of counting, Propagation and PB+tree: paper predicates per conjunct.

    Keeps per cid the conjunct (to unfile its paper predicates) and ``size``, its number
    of paper predicates (-1 once removed, so a count never completes); subclasses file
    the paper predicates in their structures and, per chunk of events, return the
    (event, cid) pairs phase 2 found complete, which are exact but for the residual
    conjuncts the pipeline then verifies.
    """

    def __init__(self) -> None:
        super().__init__()
        self.size = GrowableArray(np.int32)
        self.conjuncts: list[Conjunct | None] = []

    # -- life cycle --------------------------------------------------------------------

    def _file(self, cids: np.ndarray, conjuncts: list[Conjunct]) -> np.ndarray:
        residual = np.zeros(len(cids), dtype=bool)
        sizes = np.zeros(len(cids), dtype=np.int32)
        self.conjuncts.extend([None] * (len(self.registry) - len(self.conjuncts)))
        for i, (cid, conjunct) in enumerate(zip(cids.tolist(), conjuncts, strict=True)):
            predicates, residual[i] = decompose_conjunct(conjunct)
            sizes[i] = len(predicates)
            self.conjuncts[cid] = conjunct
            self._file_predicates(cid, predicates)
        self.size.put(cids, sizes)
        return residual

    def _unfile(self, cids: np.ndarray) -> None:
        for cid in cids.tolist():
            conjunct = self.conjuncts[cid]
            assert conjunct is not None
            self.conjuncts[cid] = None
            self.size.data[cid] = -1
            self._unfile_predicates(cid, decompose_conjunct(conjunct)[0])

    def add_many(self, items: Iterable[tuple[str, str | Subscription]]) -> None:
        """Add many subscriptions, then build the structures (so build time is paid
        here rather than by the first match)."""
        super().add_many(items)
        self._prepare()

    def _begin(self, events: list[FlatEvent]) -> Batch:
        self._prepare()
        return Batch(events, 0)

    def _candidates(self, batch: Batch, first: int, last: int) -> Candidates:
        e, c, hits = self._complete(batch.events[first:last])
        return Candidates(e, c, hits)

    # -- subclass hooks ----------------------------------------------------------------

    @abstractmethod
    def _file_predicates(self, cid: int, predicates: list[PaperPredicate]) -> None:
        """Index a new conjunct's paper predicates."""

    def _unfile_predicates(self, cid: int, predicates: list[PaperPredicate]) -> None:
        """Release what a removed conjunct holds besides entries purged in bulk."""

    @abstractmethod
    def _prepare(self) -> None:
        """Bring the structures a match reads up to date (build pending additions)."""

    @abstractmethod
    def _complete(self, events: list[FlatEvent]) -> tuple[np.ndarray, np.ndarray, int]:
        """(chunk event, cid) pairs found complete, and the number of hits handled."""

    # -- bookkeeping -------------------------------------------------------------------

    def _conjunct_bytes(self) -> int:
        """The size column and the conjunct pointers (the objects are the parser's)."""
        return self.size.nbytes + 8 * len(self.conjuncts)

    def live_conjuncts(self) -> Iterator[tuple[int, list[PaperPredicate]]]:
        """(cid, paper predicates) of every live conjunct; for checks. O(predicates)."""
        for cid, conjunct in enumerate(self.conjuncts):
            if conjunct is not None:
                yield cid, decompose_conjunct(conjunct)[0]

    def _check(self) -> None:
        super()._check()
        alive = self.registry.alive.view()
        size = self.size.view()
        assert len(self.conjuncts) == len(alive) == len(size)
        for cid, conjunct in enumerate(self.conjuncts):
            assert bool(alive[cid]) == (conjunct is not None)
            if conjunct is None:
                assert size[cid] == -1, "a removed conjunct could still complete"
                continue
            predicates, residual = decompose_conjunct(conjunct)
            assert int(size[cid]) == len(predicates)
            assert bool(self.registry.residual.data[cid]) == residual

    def _live_predicates(self) -> Counter[PaperPredicate]:
        """Each paper predicate with the number of live conjuncts that contain it."""
        return Counter(p for _, ps in self.live_conjuncts() for p in ps)
