"""PSTHash (Ji & Jacobsen 2018, section 6): two access predicates, a hash table of pairs.

Owns PSTHash's structures on top of the shared PS-Trees:

* the *hash table*: a :class:`index.core.multimap.MultiMap` from a 2-dim predicate space
  (the order-free pair of space ids, one from each access predicate's tree; see
  :func:`pair_key`) to the conjuncts whose two access predicates
  (the first two in access order) cover those spaces;
* the *tree pairs*: the sorted (tree, tree) pairs hashed conjuncts are filed under. An
  event's located spaces are paired only where their trees form such a pair (see
  :meth:`PSTHashMatcher._hashed_pairs`), so a wide event never builds the C(|E|, 2)
  pairs of its spaces, only those that can have a bucket;
* the *access lists*: space id -> conjuncts with an access predicate covering it, used
  when a space splits: the records under the old id are copied to the new ids.
* the *fallback lists*: conjuncts with a single predicate, or whose two access
  predicates would need more than :data:`MAX_KEYS` pairs, or whose second access
  predicate is near-full (:func:`index.pstree.store.near_full`), are filed under each
  space of their first access predicate *and the tree of their second*
  (:func:`fallback_key`; :data:`NO_TREE` for a single predicate). Every predicate
  needs its attribute, so an event looks up only the trees it has: a conjunct whose
  second attribute is absent is never a candidate (at 1M BE-Gen subscriptions, 69 % of
  the candidates were such). The *fallback tree pairs* (first tree, second tree) known
  let an event join its entries with its trees as the tree pairs do for the table;
* the *side lists*: tree id -> conjuncts whose first access predicate is near-full
  (``!=``, ``not in``): filed once, not under nearly every space of the tree, so a
  flood of them stays linear; verification checks all their predicates.

The pairs found are candidates with both access predicates already true; verification
checks the rest exactly. Cost per event: locating O(|E| log m), pairing O(sum over its
entries of min(tree partners, entries)) for the table and the fallback lists each, the
lookups in one vectorised ``searchsorted`` each, then verification of the candidates.
"""

from __future__ import annotations

import numpy as np

from index.core.columns import GrowableArray, expand_ranges, find_sorted
from index.core.multimap import MultiMap
from index.core.pipeline import Batch, Candidates
from index.pstree.forest import Splits
from index.pstree.matcher import ForestBatch, ForestMatcher
from index.pstree.store import InsertedConjuncts

MAX_KEYS = 256
"""Most 2-dim spaces one conjunct may be filed under; beyond it, the fallback path."""
NO_TREE = 0xFFFFFFFF
"""Second tree of a fallback key whose conjunct has a single predicate."""
_LOW = 0xFFFFFFFF


class PSTHashMatcher(ForestMatcher):
    """PS-Tree index keyed by pairs of predicate spaces."""

    name = "psthash"

    def __init__(self) -> None:
        super().__init__()
        self.table = MultiMap()
        self.access = MultiMap()
        self.fallback = MultiMap()
        self.hashed = GrowableArray(np.bool_)
        self.side = MultiMap()  # tree id -> conjuncts whose access predicate is near-full
        self._tree_pairs = np.empty(0, dtype=np.int64)  # sorted (low tree << 32 | high tree)
        # sorted (first tree << 32 | second tree or NO_TREE) of the fallback conjuncts
        self._fallback_pairs = np.empty(0, dtype=np.int64)

    def _file_rows(self, inserted: InsertedConjuncts) -> None:
        self._on_splits(inserted.splits)
        cids, store = inserted.cids, self.store
        side = inserted.near_full(0)
        self.side.add(store.pred_tree.data[store.pred_start.data[cids[side]]].astype(np.int64),
                      cids[side].astype(np.int32))
        first_cid, first_sid = inserted.covered(0, ~side)
        second_cid, second_sid = inserted.covered(1, ~side & ~inserted.near_full(1))
        # covered() lists conjuncts in storage order, so each conjunct's spaces are
        # contiguous: count them per conjunct to form the cross products.
        n_first = _count_per(first_cid, cids)
        n_second = _count_per(second_cid, cids)
        hashed = (n_second > 0) & (n_first * n_second <= MAX_KEYS)
        self.hashed.put(cids, hashed)
        start = store.pred_start.data[cids[hashed]]
        self._tree_pairs = _with_keys(self._tree_pairs, _tree_pair(store.pred_tree.data[start],
                                                                   store.pred_tree.data[start + 1]))
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
        fallback = cids[~hashed & ~side]
        self._fallback_pairs = _with_keys(self._fallback_pairs, self._fallback_pair(fallback))
        fallback_cid = first_cid[~in_hash]
        self.fallback.add(fallback_key(first_sid[~in_hash], self._second_tree(fallback_cid)),
                          fallback_cid.astype(np.int32))

    def _second_tree(self, cids: np.ndarray) -> np.ndarray:
        """Tree of each conjunct's second access predicate, :data:`NO_TREE` without."""
        store = self.store
        start = store.pred_start.data[cids]
        second = store.pred_tree.data[np.minimum(start + 1, len(store.pred_tree) - 1)]
        return np.where(store.pred_count.data[cids] > 1, second.astype(np.int64), NO_TREE)

    def _fallback_pair(self, cids: np.ndarray) -> np.ndarray:
        """Fallback tree pair of each conjunct: first tree << 32 | second tree."""
        first = self.store.pred_tree.data[self.store.pred_start.data[cids]].astype(np.int64)
        return (first << 32) | self._second_tree(cids)

    def _purge(self) -> None:
        """Besides the posting lists: the side lists, the fallback lists (whose keys
        hold a tree besides a space, which the shared filter cannot read) and the tree
        pairs of live hashed and fallback conjuncts."""
        alive = self.registry.alive.data
        self.side.compact(lambda _, cids: alive[cids])
        alive_space = self.forest.spaces.alive
        self.fallback.compact(lambda keys, cids: alive[cids] & alive_space[keys >> 32])
        live = np.flatnonzero(self.registry.alive.view() & self.hashed.view())
        start = self.store.pred_start.data[live]
        self._tree_pairs = _with_keys(np.empty(0, dtype=np.int64),
                                      _tree_pair(self.store.pred_tree.data[start],
                                                 self.store.pred_tree.data[start + 1]))
        self._fallback_pairs = _with_keys(np.empty(0, dtype=np.int64),
                                          self._fallback_pair(self._fallback_cids()))
        super()._purge()

    def _fallback_cids(self) -> np.ndarray:
        """Live conjuncts filed on the fallback lists: neither hashed nor on a side list.
        O(conjuncts)."""
        filed = self.registry.alive.view() & ~self.hashed.view()
        filed[self.side.entries()[1]] = False
        return np.flatnonzero(filed)

    def _on_splits(self, splits: Splits) -> None:
        """The new spaces of a batch's splits inherit their gap's fallback entries and
        hash records; the gaps are looked up all at once (they existed before the
        batch, so none is a new space), then each hashed conjunct found is re-paired."""
        if not len(splits):
            return
        store = self.store
        parents = splits.sid
        new_sids = splits.new_sids
        # A fallback key of a gap names its tree's space and a partner in the fallback
        # tree pairs: look up each (gap, partner), copy what is found to the new spaces.
        pairs = self._fallback_pairs
        first = np.searchsorted(pairs, splits.tree.astype(np.int64) << 32)
        count = np.searchsorted(pairs, (splits.tree.astype(np.int64) + 1) << 32) - first
        split, at = expand_ranges(first, count)
        second = pairs[at] & _LOW
        found, fallback = self.fallback.lookup(fallback_key(parents[split], second))
        self.fallback.add(fallback_key(new_sids[split[found]].ravel(),
                                       np.repeat(second[found], 2)),
                          np.repeat(fallback, 2))
        owner, cids = self.access.lookup(parents)
        keep = self.registry.alive.data[cids] & self.hashed.data[cids]
        pairs = zip(owner[keep].tolist(), cids[keep].tolist(), strict=True)
        for s, cid in sorted(set(pairs)):
            new = new_sids[s]
            first = store.predicate_row(cid, 0)
            k_other = 1 if store.pred_tree.data[first] == splits.tree[s] else 0
            other = store.covered_sids(store.predicate_row(cid, k_other))
            keys = pair_key(np.repeat(new, len(other)), np.tile(other, len(new)))
            self.table.add(keys, np.full(len(keys), cid, dtype=np.int32))
            self.access.add(new, np.full(len(new), cid, dtype=np.int32))

    def _posting_maps(self) -> list[MultiMap]:
        """The table and the access lists; the fallback lists are purged by
        :meth:`_purge` and counted by :meth:`_family_bytes`."""
        return [self.table, self.access]

    def _unfile_rows(self, cids: list[int]) -> None:
        """Nothing to do at once: the purge drops the removed conjuncts' entries."""

    def _family_bytes(self) -> int:
        return (self.hashed.nbytes + self.side.nbytes + self.fallback.nbytes
                + self._tree_pairs.nbytes + self._fallback_pairs.nbytes)

    def _check(self) -> None:
        """Besides the shared structures: each live fallback conjunct is filed under
        every space its first access predicate covers with its second tree, and only
        under spaces of its first tree; its tree pair is known. O(entries) plus a
        Python step per fallback conjunct."""
        super()._check()
        self.fallback.check()
        store, spaces = self.store, self.forest.spaces
        keys, cids = self.fallback.entries()
        live = self.registry.alive.data[cids]
        keys, cids = keys[live], cids[live].astype(np.int64)
        assert not self.hashed.data[cids].any(), "a hashed conjunct on the fallback lists"
        assert ((keys & _LOW) == self._second_tree(cids)).all(), "a wrong second tree"
        sid = keys >> 32
        first_tree = store.pred_tree.data[store.pred_start.data[cids]]
        assert (spaces.tree[sid] == first_tree).all(), "a space not of the first tree"
        _, known = find_sorted(self._fallback_pairs, self._fallback_pair(cids))
        assert known.all(), "a fallback tree pair missing"
        filed_cids = self._fallback_cids()
        order = np.argsort(cids, kind="stable")
        bounds = np.searchsorted(cids[order], filed_cids, side="left"), np.searchsorted(
            cids[order], filed_cids, side="right")
        for cid, lo, hi in zip(filed_cids.tolist(), *bounds, strict=True):
            covered = store.covered_sids(store.predicate_row(cid, 0))
            assert np.isin(covered, sid[order[lo:hi]]).all(), f"conjunct {cid} not filed"

    def _candidates(self, batch: Batch, first: int, last: int) -> Candidates:
        """The hash table's conjuncts under the event's pairs of spaces (both access
        predicates hold), the fallback lists' under its spaces (the first holds) and the
        side lists' under its trees (none checked yet)."""
        assert isinstance(batch, ForestBatch)
        located, _ = batch.chunk(first, last)
        ev, sids = located.event, located.sid
        owner, partner = self._hashed_pairs(ev, located.tree)
        query, hashed_cids = self.table.lookup(pair_key(sids[owner], sids[partner]))
        entry, keys = self._fallback_keys(ev, located.tree, sids)
        pair, fallback_cids = self.fallback.lookup(keys)
        side_pair, side_cids = self.side.lookup(located.tree)
        checked = np.repeat(np.array([2, 1, 0], dtype=np.int32),
                            [len(query), len(pair), len(side_pair)])
        return Candidates(np.concatenate([ev[owner[query]], ev[entry[pair]], ev[side_pair]]),
                          np.concatenate([hashed_cids, fallback_cids, side_cids]
                                         ).astype(np.int64),
                          len(ev) + len(owner) + len(query) + len(keys) + len(pair)
                          + len(side_pair), checked)

    def _hashed_pairs(self, ev: np.ndarray, tree: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The pairs (i, j) of located entries of one event whose trees some hashed
        conjunct is filed under: only these can have a bucket in the table.

        Entry ``i`` is joined (:func:`_join`) with the entries of its event on trees above
        its own: never the C(|E|, 2) of a wide event unless the index has as many tree
        pairs.
        """
        empty = np.empty(0, dtype=np.int64)
        if not len(self._tree_pairs) or not len(ev):
            return empty, empty
        order = np.lexsort((tree, ev))
        key = (ev[order] << 32) | tree[order]  # sorted: by event, then tree
        end = np.searchsorted(key, (ev[order] + 1) << 32)
        owner, partner = _join(tree[order], ev[order], key, np.arange(1, len(key) + 1), end,
                               self._tree_pairs)
        return order[owner], order[partner]

    def _fallback_keys(self, ev: np.ndarray, tree: np.ndarray, sids: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
        """The fallback keys located entries can have, as (entry, key) columns: each
        entry's space with :data:`NO_TREE`, and with each tree of its event that a
        fallback conjunct pairs with the entry's tree (:func:`_join` over the fallback
        tree pairs). Cost O(sum over entries of min(tree partners, entries of the event))
        plus logarithmic searches; a tree the event lacks is never asked for.
        """
        order = np.lexsort((tree, ev))
        key = (ev[order] << 32) | tree[order]  # sorted: by event, then tree
        owner, partner = _join(tree, ev, key, np.searchsorted(key, ev << 32),
                               np.searchsorted(key, (ev + 1) << 32), self._fallback_pairs)
        entry = np.concatenate([np.arange(len(ev)), owner])
        second = np.concatenate([np.full(len(ev), NO_TREE, dtype=np.int64), key[partner] & _LOW])
        return entry, fallback_key(sids[entry], second)


def _join(tree: np.ndarray, ev: np.ndarray, targets: np.ndarray, lo: np.ndarray,
          hi: np.ndarray, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Join entries with the trees of their events along known tree pairs.

    Entry ``k`` (on tree ``tree[k]`` of event ``ev[k]``) may pair with the targets
    ``targets[lo[k]:hi[k]]`` (sorted keys ``event << 32 | tree``, all of ``k``'s event);
    ``pairs`` holds sorted keys ``tree << 32 | partner tree``. Returns ``(k, j)`` for each
    target ``j`` whose tree is a partner of ``tree[k]``. Per entry, walks whichever is
    shorter: its tree's partners, each looked up among the targets, or its targets, each
    looked up among the pairs. Cost O(sum over entries of min(partners, targets)) plus
    logarithmic searches, vectorised.
    """
    up_start = np.searchsorted(pairs, tree << 32)
    up_count = np.searchsorted(pairs, (tree + 1) << 32) - up_start
    span = hi - lo
    walk = up_count <= span
    # Through the tree's partners: look each one up among the event's targets. A
    # partner found is in the event, hence among k's targets (all of them, or those on
    # trees above k's when the pairs are ordered low << 32 | high).
    w = np.flatnonzero(walk)
    o, p = expand_ranges(up_start[w], up_count[w])
    at, hit = find_sorted(targets, (ev[w[o]] << 32) | (pairs[p] & _LOW))
    # Through the targets: look each (tree, target's tree) up among the pairs.
    s = np.flatnonzero(~walk)
    o_s, j = expand_ranges(lo[s], span[s])
    _, hit_s = find_sorted(pairs, (tree[s[o_s]] << 32) | (targets[j] & _LOW))
    return (np.concatenate([w[o[hit]], s[o_s[hit_s]]]),
            np.concatenate([at[hit], j[hit_s]]))


def _with_keys(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``sorted_keys`` with ``keys`` added (a set). Cost O(k log k + k log P) for k keys
    and P known; the array is copied only when a key is new, which is rare once the
    attributes are known (a single add must not pay O(P), as a union would)."""
    if not len(keys):
        return sorted_keys
    keys = np.unique(keys)
    _, known = find_sorted(sorted_keys, keys)
    if known.all():
        return sorted_keys
    new = keys[~known]
    return np.insert(sorted_keys, np.searchsorted(sorted_keys, new), new)


def _position_in(values: np.ndarray, cids: np.ndarray) -> np.ndarray:
    """Index in ``cids`` (distinct) of each of ``values``."""
    order = np.argsort(cids)
    return order[np.searchsorted(cids[order], values)]


def _count_per(values: np.ndarray, cids: np.ndarray) -> np.ndarray:
    """How many times each of ``cids`` (distinct) occurs in ``values``."""
    return np.bincount(_position_in(values, cids), minlength=len(cids))


def _tree_pair(tree_a: np.ndarray, tree_b: np.ndarray) -> np.ndarray:
    """Key of an order-free pair of distinct trees: ``low << 32 | high``."""
    low = np.minimum(tree_a, tree_b).astype(np.int64)
    return (low << 32) | np.maximum(tree_a, tree_b).astype(np.int64)


def pair_key(sid_a: np.ndarray, sid_b: np.ndarray) -> np.ndarray:
    """Posting key of a 2-dim predicate space: the two space ids, order-free.

    The larger id is stored plus one in the high half so that a pair key is never
    equal to a single-space key.
    """
    low = np.minimum(sid_a, sid_b).astype(np.int64)
    high = np.maximum(sid_a, sid_b).astype(np.int64)
    return ((high + 1) << 32) | low


def fallback_key(sid: np.ndarray, second_tree: np.ndarray) -> np.ndarray:
    """Posting key of a fallback entry: ``space id << 32 | second tree`` (:data:`NO_TREE`
    for a single predicate), so a space's keys are contiguous, its trees in order."""
    return (np.asarray(sid).astype(np.int64) << 32) | np.asarray(second_tree).astype(np.int64)
