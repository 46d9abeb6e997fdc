"""The counting algorithm (the baseline of Fabret et al., SIGMOD 2001, section 2).

Owns counting's phase-2 structure on top of Le Subscribe's phase 1
(:class:`psmatch.baselines.predicate_index.PredicateIndex`):

* the *association table*: for each predicate id, the conjuncts that contain it (one
  entry per occurrence), a :class:`psmatch.baselines.sorted_entries.SortedEntries` keyed by pid
  whose dense directory finds a pid's conjuncts in O(1).

Matching a chunk of events: phase 1 gives the satisfied (event, pid) pairs; each
satisfied predicate adds one hit to every conjunct containing it, and a conjunct
matches when its hits equal its number of paper predicates
(:func:`psmatch.baselines.two_phase.count_complete`). ``between`` and ``like 'ab%'`` count as
two predicates on one attribute; the count keeps that multiplicity because hits are
(event, conjunct) pairs, not sets. Conjuncts with a residual condition (see
:func:`psmatch.baselines.paper_predicates.decompose`) are verified after.

Deletion (not in the paper): a removed conjunct's size becomes -1 so its count never
completes; its predicates lose a reference (the last one takes the predicate out of
phase 1 at the next build); its associations are purged in bulk once removals reach an
eighth of the index.

Cost per event: phase 1 O(pairs x log n + satisfied predicates), then O(sum of the
association lengths of the satisfied predicates) for the hits and their sort.
Memory O(distinct predicates + predicate occurrences).
"""

from __future__ import annotations

import numpy as np

from psmatch.baselines.paper_predicates import PaperPredicate
from psmatch.baselines.predicate_index import PredicateIndex
from psmatch.baselines.sorted_entries import SortedEntries, expected_entries
from psmatch.baselines.two_phase import TwoPhaseMatcher, count_complete
from psmatch.events import FlatEvent


class CountingMatcher(TwoPhaseMatcher):
    """Phase 1 predicate index, then one counter per conjunct."""

    name = "counting"

    def __init__(self) -> None:
        super().__init__()
        self.predicates = PredicateIndex()
        self.associations = SortedEntries(None)

    def _file_predicates(self, cid: int, predicates: list[PaperPredicate]) -> None:
        for predicate in predicates:
            self.associations.add(self.predicates.acquire(predicate), cid)

    def _unfile_predicates(self, cid: int, predicates: list[PaperPredicate]) -> None:
        for predicate in predicates:
            self.predicates.release(self.predicates.pid_of[predicate])

    def _prepare(self) -> None:
        self.predicates.refresh()
        if self.associations.dirty:
            self.associations.build(self.registry.alive.data)

    def _purge(self) -> None:
        self.associations.mark_dead()
        self._prepare()
        self.predicates.reclaim()

    def _complete(self, events: list[FlatEvent]) -> tuple[np.ndarray, np.ndarray, int]:
        ev, pids = self.predicates.satisfied(events)
        query, position = self.associations.equal((pids,))
        e, c = count_complete(ev[query], self.associations.owners[position], self.size.data)
        return e, c, len(position)

    def _structure_bytes(self) -> int:
        return self.predicates.nbytes + self.associations.nbytes + self._conjunct_bytes()

    def _check(self) -> None:
        super()._check()
        self.predicates.check(self._live_predicates())
        self.associations.check()
        pid_of = self.predicates.pid_of
        expected = expected_entries(None, ((pid_of[p], cid) for cid, ps in
                                           self.live_conjuncts() for p in ps))
        assert self.associations.live(self.registry.alive.data) == expected
