"""The counting algorithm (the baseline of Fabret et al., SIGMOD 2001, section 2).

Owns counting's phase-2 structure on top of Le Subscribe's phase 1
(:class:`index.predicate_index.PredicateIndex`):

* the *association table*: a :class:`index.multimap.MultiMap` from each predicate id to
  the conjuncts that contain it (one entry per occurrence).

Matching a chunk of events: phase 1 gives the satisfied (event, pid) pairs; for each
satisfied predicate the counters of all conjuncts containing it are incremented (one
``bincount`` over the chunk's dense ``events x conjuncts`` counter table); a conjunct
matches when its counter equals its number of paper predicates. ``between`` and
``like 'ab%'`` count as two predicates on one attribute; the counters keep that
multiplicity because hits are (event, conjunct) pairs, not sets. Conjuncts with a
residual condition (see :func:`index.predicate_index.decompose`) are verified after.

Deletion (not in the paper): a removed conjunct's size becomes -1 so its counter never
completes; its predicates lose a reference (the last reference removes the predicate
from phase 1 at the next build); its postings are purged in bulk by
:meth:`MultiMap.compact` once removals reach a quarter of the index.

Cost per event: phase 1 O(pairs x log n + satisfied predicates), then O(sum of the
posting lengths of the satisfied predicates) increments, plus O(conjuncts) to zero the
counter table. Memory O(distinct predicates + predicate occurrences).
"""

from __future__ import annotations

import numpy as np

from index.events import FlatEvent
from index.matcher import MatcherStats
from index.multimap import MultiMap
from index.predicate_index import (
    PaperPredicate,
    PredicateIndex,
    TwoPhaseMatcher,
    count_complete,
)


class CountingMatcher(TwoPhaseMatcher):
    """Phase 1 predicate index, then one counter per conjunct."""

    name = "counting"

    def __init__(self) -> None:
        super().__init__()
        self.predicates = PredicateIndex()
        self.associations = MultiMap()

    def _file(self, cid: int, predicates: list[PaperPredicate]) -> None:
        pids = [self.predicates.acquire(p) for p in predicates]
        self.associations.add(np.asarray(pids, dtype=np.int64),
                              np.full(len(pids), cid, dtype=np.int32))

    def _unfile(self, cid: int, predicates: list[PaperPredicate]) -> None:
        for predicate in predicates:
            self.predicates.release(self.predicates.pid_of[predicate])

    def _prepare(self) -> None:
        self.predicates.refresh()

    def _purge(self) -> None:
        alive = self.table.alive.data
        self.associations.compact(lambda _keys, cids: alive[cids])
        self.predicates.reclaim()

    def _event_cells(self) -> int:
        return len(self.table)

    def _match_chunk(self, events: list[FlatEvent]) -> tuple[np.ndarray, np.ndarray, int]:
        ev, pids = self.predicates.satisfied(events)
        query, cids = self.associations.lookup(pids)
        e, c = count_complete(ev[query], cids.astype(np.int64), len(events), self.table)
        return e, c, len(cids)

    def stats(self) -> MatcherStats:
        total = self.predicates.nbytes + self.associations.nbytes + self.table.nbytes
        return MatcherStats(len(self), self.table.live, self.table.live_predicates,
                            self.predicates.live, int(total))

    def check(self) -> None:
        super().check()
        self.predicates.check(self._live_predicates())
        pids, cids = self.associations.entries()
        alive = self.table.alive.data[cids]
        found = sorted(zip(pids[alive].tolist(), cids[alive].tolist(), strict=True))
        pid_of = self.predicates.pid_of
        expected = sorted((pid_of[p], cid) for cid, ps in enumerate(self.table.predicates)
                          if ps is not None for p in ps)
        assert found == expected, "association table disagrees with the conjuncts"
