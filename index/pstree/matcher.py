"""What PSTBloom and PSTHash share: the forest, the conjunct store, batching and upkeep.

Owns the life cycle of a PS-Tree matcher: a subscription's conjuncts go into the
:class:`index.pstree.store.ConjunctStore` (which inserts their bounds into the PS-Trees),
the subclass files them under access predicates, and splits and merges of spaces are
handed to the subclass to keep its posting lists in step. Matching locates the whole
batch once, then works in chunks of events small enough for a dense
``[events, trees]`` position matrix, and groups the verified (event, conjunct) pairs
back into one answer per event. Removed conjuncts are purged from the posting lists in
bulk once they make up a quarter of the index (:meth:`PSTreeMatcher._compact`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable

import numpy as np

from index.core.columns import group_by_event
from index.core.multimap import MultiMap
from index.events import FlatEvent
from index.language import Subscription
from index.matcher import Matcher, MatcherStats
from index.pstree.forest import Forest, LocatedBatch, Split
from index.pstree.store import ConjunctStore, InsertedConjuncts

POSITION_CELLS = 1 << 22
"""Most cells of one chunk's dense position matrix (16 MiB of int32)."""


class PSTreeMatcher(Matcher):
    """Base of the matchers built on PS-Trees."""

    def __init__(self) -> None:
        super().__init__()
        self.forest = Forest()
        self.store = ConjunctStore(self.forest)

    # -- Matcher hooks -----------------------------------------------------------------

    def _insert(self, slot: int, subscription: Subscription) -> None:
        self._insert_many([(slot, subscription)])

    def _insert_many(self, batch: list[tuple[int, Subscription]]) -> None:
        slots, conjuncts = self._conjuncts_of(batch)
        inserted = self.store.insert_many(slots, conjuncts)
        self._on_splits(inserted.splits)
        self._file(inserted)

    def _delete(self, slot: int) -> None:
        for cid in self.store.unlink(slot):
            self._unfile(cid)
            self.store.remove(cid)
        if self.store.awaiting_reclaim > max(1024, self.store.live // 4):
            self._compact()

    def _match_flat(self, events: list[FlatEvent]) -> list[Iterable[int]]:
        located = self.forest.locate_events(events)
        n_trees = max(len(self.forest.trees), 1)
        chunk = max(1, POSITION_CELLS // n_trees)
        found_e, found_c = [], []
        for first in range(0, len(events), chunk):
            last = min(first + chunk, len(events))
            if first == 0 and last == len(events):
                part = located
            else:
                mask = (located.event >= first) & (located.event < last)
                part = LocatedBatch(last - first, located.event[mask] - first,
                                    located.tree[mask], located.position[mask],
                                    located.sid[mask])
            e, c = self._match_chunk(part, events, first)
            found_e.append(e + first)
            found_c.append(c)
        return group_by_event(len(events), np.concatenate(found_e),
                      self.store.slot.data[np.concatenate(found_c)])

    # -- subclass hooks ----------------------------------------------------------------

    @abstractmethod
    def _file(self, inserted: InsertedConjuncts) -> None:
        """Add newly stored conjuncts to the posting lists."""

    def _unfile(self, cid: int) -> None:
        """Note a conjunct's removal; posting lists are purged in bulk."""

    @abstractmethod
    def _on_splits(self, splits: list[Split]) -> None:
        """Copy postings of split spaces to their new space ids."""

    @abstractmethod
    def _match_chunk(self, located: LocatedBatch, events: list[FlatEvent],
                     offset: int) -> tuple[np.ndarray, np.ndarray]:
        """Verified (chunk-local event, cid) pairs for one chunk of located events."""

    @abstractmethod
    def _posting_maps(self) -> list[MultiMap]:
        """The multimaps whose values are cids and whose keys embed space ids."""

    @abstractmethod
    def _extra_bytes(self) -> int:
        """Estimated bytes of subclass structures besides the posting maps."""

    # -- upkeep ------------------------------------------------------------------------

    def _keep_live(self, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Entries to keep at compaction: live conjunct and live space(s) in the key."""
        alive_space = self.forest.spaces.alive
        keep = self.store.alive.data[values].copy()
        low, high = keys & 0xFFFFFFFF, keys >> 32
        keep &= alive_space[low]
        keep &= (high == 0) | alive_space[np.maximum(high - 1, 0)]
        return keep

    def _compact(self) -> None:
        for multimap in self._posting_maps():
            multimap.compact(self._keep_live)
        self.store.reclaim()

    def stats(self) -> MatcherStats:
        forest = self.forest
        spaces = forest.spaces
        forest_bytes = (spaces.tree.nbytes + spaces.predicate_counter.nbytes
                        + spaces.event_counter.nbytes + spaces.alive.nbytes
                        + forest.bound_tree.nbytes + forest.bound_rank.nbytes
                        + sum(t.hi.nbytes + t.lo.nbytes + t.space_ids.nbytes
                              + t.bound_ids.nbytes + 8 * len(t.values) * 5
                              for t in forest.trees))
        total = (forest_bytes + self.store.nbytes + self._extra_bytes()
                 + sum(m.nbytes for m in self._posting_maps()))
        return MatcherStats(len(self), self.store.live, self.store.live_predicates,
                            spaces.live, int(total))

    def check(self) -> None:
        self.forest.check()
        self.store.check()
        for slot in self._slot_of.values():
            assert self.store.cids_of(slot), f"subscription in slot {slot} has no conjunct"


def space_key(sid: int | np.ndarray) -> int | np.ndarray:
    """Posting key of a single space (1-dim predicate space)."""
    return sid


def pair_key(sid_a: np.ndarray, sid_b: np.ndarray) -> np.ndarray:
    """Posting key of a 2-dim predicate space: the two space ids, order-free.

    The larger id is stored plus one in the high half so that a pair key is never
    equal to a single-space key.
    """
    low = np.minimum(sid_a, sid_b).astype(np.int64)
    high = np.maximum(sid_a, sid_b).astype(np.int64)
    return ((high + 1) << 32) | low
