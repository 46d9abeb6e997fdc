"""PSTHash (Ji & Jacobsen 2018, section 6): two access predicates, a hash table of pairs.

Owns PSTHash's structures on top of the shared PS-Trees:

* the *hash table*: a :class:`index.core.multimap.MultiMap` from a 2-dim predicate space
  (the order-free pair of space ids, one from each access predicate's tree; see
  :func:`pair_key`) to the conjuncts whose two access predicates
  (the first two in access order) cover those spaces. An event builds the C(|E|, 2)
  pairs of its located spaces and looks all of them up at once.
* the *access lists*: space id -> conjuncts with an access predicate covering it, used
  when a space splits: the records under the old id are copied to the new ids.
* the *fallback lists*: conjuncts with a single predicate, or whose two access
  predicates would need more than :data:`MAX_KEYS` pairs (``!=`` against ``not in``,
  say), are filed PSTBloom's way: under the spaces of their first access predicate.

The pairs found are candidates with both access predicates already true; verification
checks the rest exactly. Cost per event: locating O(|E| log m), C(|E|, 2) lookups in
one vectorised ``searchsorted``, then verification of the candidates.
"""

from __future__ import annotations

import numpy as np

from index.core.columns import GrowableArray, expand_ranges
from index.core.multimap import MultiMap
from index.core.pipeline import Batch, Candidates
from index.pstree.forest import Split
from index.pstree.matcher import ForestBatch, ForestMatcher
from index.pstree.store import InsertedConjuncts

MAX_KEYS = 256
"""Most 2-dim spaces one conjunct may be filed under; beyond it, the fallback path."""


class PSTHashMatcher(ForestMatcher):
    """PS-Tree index keyed by pairs of predicate spaces."""

    name = "psthash"

    def __init__(self) -> None:
        super().__init__()
        self.table = MultiMap()
        self.access = MultiMap()
        self.fallback = MultiMap()
        self.hashed = GrowableArray(np.bool_)

    def _file_rows(self, inserted: InsertedConjuncts) -> None:
        self._on_splits(inserted.splits)
        cids = inserted.cids
        first_cid, first_sid = inserted.covered(0)
        second_cid, second_sid = inserted.covered(1)
        # covered() lists conjuncts in storage order, so each conjunct's spaces are
        # contiguous: count them per conjunct to form the cross products.
        n_first = _count_per(first_cid, cids)
        n_second = _count_per(second_cid, cids)
        hashed = (n_second > 0) & (n_first * n_second <= MAX_KEYS)
        self.hashed.put(cids, hashed)
        start_first = np.cumsum(n_first) - n_first
        start_second = np.cumsum(n_second) - n_second
        h = np.flatnonzero(hashed)
        owner, index = expand_ranges(np.zeros(len(h), np.int64), n_first[h] * n_second[h])
        i, j = np.divmod(index, n_second[h][owner])
        keys = pair_key(first_sid[start_first[h][owner] + i],
                        second_sid[start_second[h][owner] + j])
        self.table.add(keys, cids[h][owner].astype(np.int32))
        in_hash = hashed[_position_in(first_cid, cids)]
        in_hash_second = hashed[_position_in(second_cid, cids)]
        self.access.add(np.concatenate([first_sid[in_hash], second_sid[in_hash_second]]),
                        np.concatenate([first_cid[in_hash],
                                        second_cid[in_hash_second]]).astype(np.int32))
        self.fallback.add(first_sid[~in_hash], first_cid[~in_hash].astype(np.int32))

    def _on_splits(self, splits: list[Split]) -> None:
        store = self.store
        for split in splits:
            new = np.array(split.new_sids, dtype=np.int64)
            fallback = self.fallback.values_of(split.sid)
            for sid in new:
                self.fallback.add(np.full(len(fallback), sid, dtype=np.int64), fallback)
            cids = np.unique(self.access.values_of(split.sid))
            cids = cids[self.registry.alive.data[cids] & self.hashed.data[cids]]
            for cid in cids.tolist():
                first = store.predicate_row(cid, 0)
                k_other = 1 if store.pred_tree.data[first] == split.tree else 0
                other = store.covered_sids(store.predicate_row(cid, k_other))
                keys = pair_key(np.repeat(new, len(other)), np.tile(other, len(new)))
                self.table.add(keys, np.full(len(keys), cid, dtype=np.int32))
                self.access.add(new, np.full(len(new), cid, dtype=np.int32))

    def _posting_maps(self) -> list[MultiMap]:
        return [self.table, self.access, self.fallback]

    def _unfile_rows(self, cids: list[int]) -> None:
        """Nothing to do at once: the purge drops the removed conjuncts' entries."""

    def _family_bytes(self) -> int:
        return self.hashed.nbytes

    def _candidates(self, batch: Batch, first: int, last: int) -> Candidates:
        """The hash table's conjuncts under the pairs of the event's spaces (both access
        predicates hold) and the fallback lists' under its spaces (the first holds)."""
        assert isinstance(batch, ForestBatch)
        located, _ = batch.chunk(first, last)
        ev, sids = located.event, located.sid  # ordered by event
        event_end = np.searchsorted(ev, ev, side="right")
        here = np.arange(len(ev), dtype=np.int64)
        owner, partner = expand_ranges(here + 1, event_end - here - 1)
        query, hashed_cids = self.table.lookup(pair_key(sids[owner], sids[partner]))
        pair, fallback_cids = self.fallback.lookup(sids)
        checked = np.repeat(np.array([2, 1], dtype=np.int32), [len(query), len(pair)])
        return Candidates(np.concatenate([ev[owner[query]], ev[pair]]),
                          np.concatenate([hashed_cids, fallback_cids]).astype(np.int64),
                          len(owner) + len(query) + len(pair), checked)


def _position_in(values: np.ndarray, cids: np.ndarray) -> np.ndarray:
    """Index in ``cids`` (distinct) of each of ``values``."""
    order = np.argsort(cids)
    return order[np.searchsorted(cids[order], values)]


def _count_per(values: np.ndarray, cids: np.ndarray) -> np.ndarray:
    """How many times each of ``cids`` (distinct) occurs in ``values``."""
    return np.bincount(_position_in(values, cids), minlength=len(cids))


def pair_key(sid_a: np.ndarray, sid_b: np.ndarray) -> np.ndarray:
    """Posting key of a 2-dim predicate space: the two space ids, order-free.

    The larger id is stored plus one in the high half so that a pair key is never
    equal to a single-space key.
    """
    low = np.minimum(sid_a, sid_b).astype(np.int64)
    high = np.maximum(sid_a, sid_b).astype(np.int64)
    return ((high + 1) << 32) | low
