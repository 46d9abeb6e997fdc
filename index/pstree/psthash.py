"""PSTHash (Ji & Jacobsen 2018, section 6): two access predicates, a hash table of pairs.

Owns PSTHash's structures on top of the shared PS-Trees:

* the *hash table*: a :class:`index.core.multimap.MultiMap` from a 2-dim predicate space
  (the order-free pair of space ids, one from each access predicate's tree; see
  :func:`index.pstree.matcher.pair_key`) to the conjuncts whose two access predicates
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
from index.events import FlatEvent
from index.pstree.forest import LocatedBatch, Split
from index.pstree.matcher import PSTreeMatcher, pair_key
from index.pstree.store import InsertedConjuncts

MAX_KEYS = 256
"""Most 2-dim spaces one conjunct may be filed under; beyond it, the fallback path."""


class PSTHashMatcher(PSTreeMatcher):
    """PS-Tree index keyed by pairs of predicate spaces."""

    name = "psthash"

    def __init__(self) -> None:
        super().__init__()
        self.table = MultiMap()
        self.access = MultiMap()
        self.fallback = MultiMap()
        self.hashed = GrowableArray(np.bool_)

    def _file(self, inserted: InsertedConjuncts) -> None:
        cids = inserted.cids
        grow = int(cids.max()) + 1 - len(self.hashed)
        if grow > 0:
            self.hashed.extend(np.zeros(grow, dtype=bool))
        first_cid, first_sid = inserted.covered(0)
        second_cid, second_sid = inserted.covered(1)
        # covered() lists conjuncts in storage order, so each conjunct's spaces are
        # contiguous: count them per conjunct to form the cross products.
        n_first = _count_per(first_cid, cids)
        n_second = _count_per(second_cid, cids)
        hashed = (n_second > 0) & (n_first * n_second <= MAX_KEYS)
        self.hashed.data[cids] = hashed
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
            cids = cids[store.alive.data[cids] & self.hashed.data[cids]]
            for cid in cids.tolist():
                first = store.predicate_row(cid, 0)
                k_other = 1 if store.pred_tree.data[first] == split.tree else 0
                other = store.covered_sids(store.predicate_row(cid, k_other))
                keys = pair_key(np.repeat(new, len(other)), np.tile(other, len(new)))
                self.table.add(keys, np.full(len(keys), cid, dtype=np.int32))
                self.access.add(new, np.full(len(new), cid, dtype=np.int32))

    def _posting_maps(self) -> list[MultiMap]:
        return [self.table, self.access, self.fallback]

    def _extra_bytes(self) -> int:
        return self.hashed.nbytes

    def _match_chunk(self, located: LocatedBatch, events: list[FlatEvent],
                     offset: int) -> tuple[np.ndarray, np.ndarray]:
        positions = located.position_matrix(max(len(self.forest.trees), 1))
        order = np.argsort(located.event, kind="stable")
        ev, sids = located.event[order], located.sid[order]
        event_end = np.searchsorted(ev, ev, side="right")
        here = np.arange(len(ev), dtype=np.int64)
        owner, partner = expand_ranges(here + 1, event_end - here - 1)
        query, hashed_cids = self.table.lookup(pair_key(sids[owner], sids[partner]))
        hashed_ev = ev[owner[query]]
        pair, fallback_cids = self.fallback.lookup(located.sid)
        fallback_ev = located.event[pair]
        he, hc = self.store.verify(hashed_ev, hashed_cids.astype(np.int64), 2, positions,
                                   events, offset)
        fe, fc = self.store.verify(fallback_ev, fallback_cids.astype(np.int64), 1, positions,
                                   events, offset)
        return np.concatenate([he, fe]), np.concatenate([hc, fc])


def _position_in(values: np.ndarray, cids: np.ndarray) -> np.ndarray:
    """Index in ``cids`` (distinct) of each of ``values``."""
    order = np.argsort(cids)
    return order[np.searchsorted(cids[order], values)]


def _count_per(values: np.ndarray, cids: np.ndarray) -> np.ndarray:
    """How many times each of ``cids`` (distinct) occurs in ``values``."""
    return np.bincount(_position_in(values, cids), minlength=len(cids))
