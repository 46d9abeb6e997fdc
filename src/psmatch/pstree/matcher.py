"""What every matcher built on the PS-Tree forest shares: set-up, batches, verification.

Owns :class:`ForestMatcher`, the base of PSTBloom, PSTHash, OpIndex and BE-Tree on
top of the shared pipeline (:class:`psmatch.core.pipeline.ColumnarMatcher`): the forest of
PS-Trees (:class:`psmatch.pstree.forest.Forest`) is their value encoding and the
:class:`psmatch.pstree.store.ConjunctStore` holds their conjuncts' predicate rows.
Filing stores the rows (inserting bounds, which may split spaces) and hands them to the
family; unfiling lets the family take the conjunct out, then releases its rows (which
may merge spaces). A batch is located in the trees once, its pairs ordered by event so
that a chunk is a slice; a chunk's candidates are verified from their first unchecked
predicate on by :meth:`psmatch.pstree.store.ConjunctStore.verify` against the chunk's
dense ``[events, trees]`` position matrix. The purge compacts the family's posting
multimaps (keys made of space ids) and the store's rows.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

import numpy as np

from psmatch.core.multimap import MultiMap
from psmatch.core.pipeline import Batch, Candidates, ColumnarMatcher
from psmatch.events import FlatEvent
from psmatch.language.columns import ConjunctColumns
from psmatch.pstree.forest import Forest, LocatedBatch
from psmatch.pstree.store import ConjunctStore, InsertedConjuncts


@dataclass(slots=True)
class ForestBatch(Batch):
    """A batch located in the forest, its pairs ordered by event, then tree (an event
    has at most one pair per tree)."""

    located: LocatedBatch
    pair_start: np.ndarray
    """The located pairs of event ``e`` are ``pair_start[e] .. pair_start[e + 1] - 1``."""
    _chunk: tuple[int, int, LocatedBatch, np.ndarray] | None = None

    def chunk(self, first: int, last: int) -> tuple[LocatedBatch, np.ndarray]:
        """The located pairs of events ``first .. last - 1`` (events renumbered from 0)
        and their dense position matrix; computed once per chunk."""
        if self._chunk is None or self._chunk[:2] != (first, last):
            located = self.located
            a, b = int(self.pair_start[first]), int(self.pair_start[last])
            part = LocatedBatch(last - first, located.event[a:b] - first, located.tree[a:b],
                                located.position[a:b], located.sid[a:b])
            self._chunk = (first, last, part, part.position_matrix(self.cells_per_event))
        return self._chunk[2], self._chunk[3]


class ForestMatcher(ColumnarMatcher):
    """Base of the matchers whose conjuncts are rows over the PS-Tree forest."""

    def __init__(self) -> None:
        super().__init__()
        self.forest = Forest()
        self.store = ConjunctStore(self.forest, self.registry)

    # -- life cycle --------------------------------------------------------------------

    def _file_columns(self, cids: np.ndarray, conjuncts: ConjunctColumns) -> np.ndarray:
        """File new conjuncts given as columns; returns the mask of residual ones."""
        inserted = self.store.insert_many(cids, conjuncts)
        self._file_rows(inserted)
        return inserted.residual

    def _unfile(self, cids: np.ndarray) -> None:
        self._unfile_rows(cids)
        self.store.release(cids)

    def _purge(self) -> None:
        for multimap in self._posting_maps():
            multimap.compact(self._keep_live)
        self.store.compact()
        self.forest.reclaim()  # no posting names a dead space now

    def _keep_live(self, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Entries to keep at a purge: live conjunct and live space(s) in the key (a
        single space id, or a pair as :func:`psmatch.pstree.psthash.pair_key` makes)."""
        alive_space = self.forest.spaces.alive
        keep = self.registry.alive.data[values].copy()
        low, high = keys & 0xFFFFFFFF, keys >> 32
        keep &= alive_space[low]
        keep &= (high == 0) | alive_space[np.maximum(high - 1, 0)]
        return keep

    # -- matching ----------------------------------------------------------------------

    def _begin(self, events: list[FlatEvent]) -> ForestBatch:
        located = self.forest.locate_events(events)
        # stable: the pairs come by tree, so they end up by event, then tree
        order = np.argsort(located.event, kind="stable")
        located = LocatedBatch(len(events), located.event[order], located.tree[order],
                               located.position[order], located.sid[order])
        return ForestBatch(events, max(len(self.forest.trees), 1), located,
                           np.searchsorted(located.event, np.arange(len(events) + 1)))

    def _verify(self, batch: Batch, first: int, last: int,
                found: Candidates) -> tuple[np.ndarray, np.ndarray]:
        assert isinstance(batch, ForestBatch) and found.checked is not None
        _, positions = batch.chunk(first, last)
        return self.store.verify(found.events, found.cids, found.checked, positions)

    # -- bookkeeping -------------------------------------------------------------------

    def _spaces(self) -> int:
        return self.forest.spaces.live

    def _structure_bytes(self) -> int:
        return (self.forest.nbytes + self.store.nbytes + self._family_bytes()
                + sum(m.nbytes for m in self._posting_maps()))

    def _check(self) -> None:
        super()._check()
        self.forest.check()
        self.store.check()
        for multimap in self._posting_maps():
            multimap.check()

    # -- what a family supplies --------------------------------------------------------

    @abstractmethod
    def _file_rows(self, inserted: InsertedConjuncts) -> None:
        """File newly stored conjuncts (and follow the spaces their bounds split)."""

    @abstractmethod
    def _unfile_rows(self, cids: np.ndarray) -> None:
        """Take removed conjuncts out while their rows and bounds are still intact."""

    def _posting_maps(self) -> list[MultiMap]:
        """The multimaps whose values are cids and whose keys are made of space ids."""
        return []

    @abstractmethod
    def _family_bytes(self) -> int:
        """Estimated bytes of the family's structures besides the posting maps."""
