"""PSTHash (Ji & Jacobsen 2018, section 6): two access predicates, a hash table of pairs.

Owns PSTHash's structures on top of the shared PS-Trees:

* the *hash table*: a :class:`psmatch.core.multimap.MultiMap` from a 2-dim predicate space
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
  predicate is near-full (:func:`psmatch.pstree.store.near_full`), are filed under each
  space of their first access predicate *and the tree of their second*
  (:func:`fallback_key`; :data:`NO_TREE` for a single predicate). Every predicate
  needs its attribute, so an event reads, of the keys of each of its spaces, only those
  of trees it has (one range lookup per space, keys checked against the chunk's
  position matrix before their conjuncts are read): a conjunct whose second attribute
  is absent is never a candidate (at 1M BE-Gen subscriptions, 69 % of the candidates
  were such), nor is one whose tree mask needs another tree the event lacks (nine in
  ten of the rest, at a low matching probability);
* the *side lists*: tree id -> conjuncts whose first access predicate is near-full
  (``!=``, ``not in``): filed once, not under nearly every space of the tree, so a
  flood of them stays linear; verification checks all their predicates;
* the *cells* (:class:`psmatch.pstree.cells.WideLists`): fallback conjuncts whose first
  access predicate is wide in a fine tree (a fine value domain), in O(log cells)
  canonical segments instead of under each space. A hashed conjunct whose pairs later
  splits grow past :data:`GROWN_KEYS` moves to the fallback lists or the cells, and a
  fallback conjunct whose first predicate grows wide to the cells, so that what any
  conjunct costs stays bounded however many bounds later conjuncts bring.

The pairs found are candidates with both access predicates already true; verification
checks the rest exactly. Cost per event: locating O(|E| log m), pairing O(sum over its
entries of min(tree partners, entries)), the lookups through the multimaps' key
directories (the fallback lists: the keys of the event's spaces, read in ranges by the
compiled :func:`psmatch.pstree.kernels.fallback_candidates`), then verification of the
candidates.
"""

from __future__ import annotations

import numpy as np

from psmatch.core.columns import GrowableArray, distinct_sorted, expand_ranges, find_sorted
from psmatch.core.multimap import MultiMap
from psmatch.core.pipeline import Batch, Candidates
from psmatch.pstree.cells import (
    FINE_SPACES,
    WideLists,
    any_fine,
    row_cover,
    row_spaces,
    wide_mask,
)
from psmatch.pstree.kernels import (
    fallback_candidates,
    hashed_pair_entries,
    space_pair_keys,
)
from psmatch.pstree.matcher import ForestBatch, ForestMatcher
from psmatch.pstree.spaces import Splits
from psmatch.pstree.store import InsertedConjuncts

MAX_KEYS = 32
"""Most 2-dim spaces one conjunct may be filed under; beyond it, the fallback path.

A conjunct's keys are the product of its two access predicates' space counts, so a few
wide conjuncts hold most of the table: on BE-Gen workloads the few hashed conjuncts over
64 keys hold most of its entries. With the fallback lists keyed by the second tree, those
conjuncts cost an event little there, and a cap of 32 rather than 256 keeps a fraction of
the entries: the index about half the memory and matching faster (docs/matching.md,
PSTHash)."""
GROWN_KEYS = 4 * MAX_KEYS
"""A hashed conjunct whose pairs splits grew beyond this many leaves the table for the
fallback lists or the cells: later bounds keep splitting the spaces of early conjuncts
(on a fine domain, without end), whose pairs would otherwise grow with the square of
the spaces they cover."""
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
        self.cells = WideLists()  # fallback conjuncts whose first access predicate is wide
        self._tree_pairs = np.empty(0, dtype=np.int64)  # sorted (low tree << 32 | high tree)
        self._stale_table = 0  # table and access entries of conjuncts no longer hashed
        self._stale_fallback = 0  # fallback entries of conjuncts since moved to the cells

    def _file_rows(self, inserted: InsertedConjuncts) -> None:
        grown = self._on_splits(inserted.splits)
        cids, store = inserted.cids, self.store
        side = inserted.near_full(0)
        self.side.add(store.pred_tree[store.pred_start.data[cids[side]]].astype(np.int64),
                      cids[side].astype(np.int32))
        # Counted first, so that only the hashed conjuncts' second spaces are listed (at
        # most MAX_KEYS each): listing every conjunct's, wide ranges bound for the
        # fallback lists included, only to count them was a bulk insert's memory peak.
        n_first = inserted.covered_count(0, ~side)
        n_second = inserted.covered_count(1, ~side & ~inserted.near_full(1))
        hashed = (n_second > 0) & (n_first * n_second <= MAX_KEYS)
        if any_fine(self.forest):
            _, sizes, _ = self.forest.space_layout()
            wide = ~hashed & wide_mask(n_first,
                                       sizes[store.pred_tree[store.pred_start.data[cids]]])
        else:
            wide = np.zeros(len(cids), dtype=bool)
        n_first[wide] = 0
        self.hashed.put(cids, hashed)
        first_cid, first_sid = inserted.covered(0, ~side & ~wide)
        second_cid, second_sid = inserted.covered(1, hashed)
        start = store.pred_start.data[cids[hashed]]
        self._add_tree_pairs(store.pred_tree[start], store.pred_tree[start + 1])
        h = np.flatnonzero(hashed)
        n_second_h = n_second[h]
        # covered() lists each conjunct's spaces in one run, the conjuncts in cids' order.
        start_first = (np.cumsum(n_first) - n_first)[h]
        start_second = np.cumsum(n_second_h) - n_second_h
        owner, index = expand_ranges(np.zeros(len(h), np.int64), n_first[h] * n_second_h)
        i, j = np.divmod(index, n_second_h[owner])
        keys = pair_key(first_sid[start_first[owner] + i], second_sid[start_second[owner] + j])
        self.table.add(keys, cids[h][owner].astype(np.int32))
        in_hash = np.repeat(hashed, n_first)
        self.access.add(np.concatenate([first_sid[in_hash], second_sid]),
                        np.concatenate([first_cid[in_hash], second_cid]).astype(np.int32))
        fallback_cid = first_cid[~in_hash]
        self.fallback.add(fallback_key(first_sid[~in_hash], self._second_tree(fallback_cid)),
                          fallback_cid.astype(np.int32))
        # last: re-anchoring a tree may merge spaces, which the entries above were filed by
        if len(grown):
            self.cells.file(self.forest, store, np.concatenate([cids, grown]),
                            np.concatenate([wide, np.ones(len(grown), dtype=bool)]),
                            inserted.splits.tree)
        else:
            self.cells.file(self.forest, store, cids, wide, inserted.splits.tree)
        self._compact_stale()

    def _compact_stale(self) -> None:
        """Compact the maps once their stale entries (of conjuncts filed elsewhere
        since) are a quarter of them: memory stays within a third above the live
        entries, at amortised O(1) per stale entry."""
        if self._stale_table > max(4096, len(self.table) // 4):
            for multimap in self._posting_maps():
                multimap.compact(self._keep_live)
            self._stale_table = 0
        if self._stale_fallback > max(4096, len(self.fallback) // 4):
            self.fallback.compact(self._fallback_keep)
            self._stale_fallback = 0

    def _keep_live(self, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Besides live conjuncts and spaces: a conjunct still hashed."""
        return super()._keep_live(keys, values) & self.hashed.data[values]

    def _fallback_keep(self, keys: np.ndarray, cids: np.ndarray) -> np.ndarray:
        return (self.registry.alive.data[cids] & self.forest.spaces.alive[keys >> 32]
                & ~self.cells.wide.data[cids])

    def _second_tree(self, cids: np.ndarray) -> np.ndarray:
        """Tree of each conjunct's second access predicate, :data:`NO_TREE` without."""
        store = self.store
        start = store.pred_start.data[cids]
        second = store.pred_tree[np.minimum(start + 1, len(store.rows) - 1)]
        return np.where(store.pred_count.data[cids] > 1, second.astype(np.int64), NO_TREE)

    def _add_tree_pairs(self, tree_a: np.ndarray, tree_b: np.ndarray) -> None:
        """Note the (tree, tree) pairs hashed conjuncts are filed under.

        Cost O(k log k + k log P) for k new conjuncts and P known pairs; the sorted array
        is copied only when a pair is new, which is rare once the attributes are known
        (a single add must not pay O(P), as a union of the two arrays would)."""
        if not len(tree_a):
            return
        keys = distinct_sorted(_tree_pair(tree_a, tree_b))
        _, known = find_sorted(self._tree_pairs, keys)
        if not known.all():
            new = keys[~known]
            self._tree_pairs = np.insert(self._tree_pairs,
                                         np.searchsorted(self._tree_pairs, new), new)

    def _purge(self) -> None:
        """Besides the posting lists: the side lists, the fallback lists (their keys
        hold a tree besides a space, which the shared filter cannot read) and the tree
        pairs of live hashed conjuncts."""
        alive = self.registry.alive.data
        self.side.compact(lambda _, cids: alive[cids])
        self.cells.compact(alive)
        self.fallback.compact(self._fallback_keep)
        self._stale_table = self._stale_fallback = 0
        live = np.flatnonzero(self.registry.alive.view() & self.hashed.view())
        start = self.store.pred_start.data[live]
        self._tree_pairs = np.empty(0, dtype=np.int64)
        self._add_tree_pairs(self.store.pred_tree[start],
                             self.store.pred_tree[start + 1])
        super()._purge()

    def _on_splits(self, splits: Splits) -> np.ndarray:
        """The new spaces of a batch's splits inherit their gap's fallback entries and
        hash records; the gaps are looked up all at once (they existed before the
        batch, so none is a new space), then each hashed conjunct found is re-paired.

        The hashed conjuncts whose pairs grew beyond :data:`GROWN_KEYS` leave the table
        (:meth:`_unhash`); returns the conjuncts whose first access
        predicate grew wide (:func:`psmatch.pstree.cells.wide_mask`), for the cells.
        Their old entries stay, true but stale, until the maps are next compacted."""
        if not len(splits):
            return np.empty(0, dtype=np.int64)
        store = self.store
        parents = splits.sid
        new_sids = splits.new_sids
        _, sizes, _ = self.forest.space_layout()
        alive = self.registry.alive.data
        owner, keys, fallback = self.fallback.lookup_ranges(*_space_range(parents))
        if self.cells.active:
            at_home = ~self.cells.wide.data[fallback]
            owner, keys, fallback = owner[at_home], keys[at_home], fallback[at_home]
        self.fallback.add(fallback_key(new_sids[owner].ravel(), np.repeat(keys & _LOW, 2)),
                          np.repeat(fallback, 2))
        grown = np.empty(0, dtype=np.int64)
        if any_fine(self.forest):
            grown = np.unique(fallback[(sizes[splits.tree[owner]] > FINE_SPACES)
                                       & alive[fallback]]).astype(np.int64)
        if len(grown):
            cover, spaces = row_cover(self.forest, store, grown, 0)
            moved = wide_mask(cover, spaces)
            self._stale_fallback += int(cover[moved].sum())
            grown = grown[moved]
        owner, cids = self.access.lookup(parents)
        keep = alive[cids] & self.hashed.data[cids]
        if keep.any():
            grown = np.concatenate([grown, self._unhash(np.unique(cids[keep]).astype(np.int64))])
            keep &= self.hashed.data[cids]
        pairs = zip(owner[keep].tolist(), cids[keep].tolist(), strict=True)
        for s, cid in sorted(set(pairs)):
            new = new_sids[s]
            first = store.predicate_row(cid, 0)
            k_other = 1 if store.pred_tree[first] == splits.tree[s] else 0
            other = store.covered_sids(store.predicate_row(cid, k_other))
            keys = pair_key(np.repeat(new, len(other)), np.tile(other, len(new)))
            self.table.add(keys, np.full(len(keys), cid, dtype=np.int32))
            self.access.add(new, np.full(len(new), cid, dtype=np.int32))
        return grown

    def _unhash(self, cids: np.ndarray) -> np.ndarray:
        """Take the hashed conjuncts ``cids`` whose pairs now exceed :data:`GROWN_KEYS`
        out of the table: onto the fallback lists, or, those whose first access
        predicate is wide, returned for the cells. O(their spaces), vectorised."""
        first, spaces = row_cover(self.forest, self.store, cids, 0)
        second, _ = row_cover(self.forest, self.store, cids, 1)
        over = first * second > GROWN_KEYS
        cids, first, spaces = cids[over], first[over], spaces[over]
        if not len(cids):
            return cids
        self.hashed.data[cids] = False
        self._stale_table += int((first * second[over] + first + second[over]).sum())
        wide = wide_mask(first, spaces)
        listed = cids[~wide]
        start, count, owner, _ = row_spaces(self.forest, self.store, listed, 0)
        iv, position = expand_ranges(start, count)
        cid = listed[owner[iv]]
        _, _, layout = self.forest.space_layout()
        self.fallback.add(fallback_key(layout[position], self._second_tree(cid)),
                          cid.astype(np.int32))
        return cids[wide]

    def _posting_maps(self) -> list[MultiMap]:
        """The table and the access lists; the fallback lists are purged by
        :meth:`_purge` and counted by :meth:`_family_bytes`."""
        return [self.table, self.access]

    def _unfile_rows(self, cids: np.ndarray) -> None:
        """Nothing to do at once: the purge drops the removed conjuncts' entries."""

    def _family_bytes(self) -> int:
        return (self.hashed.nbytes + self.side.nbytes + self.fallback.nbytes
                + self._tree_pairs.nbytes + self.cells.nbytes)

    def _check(self) -> None:
        """Besides the shared structures: each live fallback conjunct is filed under
        every space its first access predicate covers, with its second tree, and only
        under spaces of its first tree. O(entries) plus a Python step per fallback
        conjunct."""
        super()._check()
        self.cells.check(self.forest, self.store)
        self.fallback.check()
        store = self.store
        keys, cids = self.fallback.entries()
        live = self.registry.alive.data[cids]
        keys, cids = keys[live], cids[live].astype(np.int64)
        assert not self.hashed.data[cids].any(), "a hashed conjunct on the fallback lists"
        assert ((keys & _LOW) == self._second_tree(cids)).all(), "a wrong second tree"
        sid = keys >> 32
        first_tree = store.pred_tree[store.pred_start.data[cids]]
        assert (self.forest.spaces.tree[sid] == first_tree).all(), "a space of another tree"
        filed = self.registry.alive.view() & ~self.hashed.view()
        filed[self.side.entries()[1]] = False  # on a side list instead
        filed &= ~self.cells.wide.view()[: len(filed)]  # in the cells instead
        filed_cids = np.flatnonzero(filed)
        order = np.argsort(cids, kind="stable")
        lows = np.searchsorted(cids[order], filed_cids, side="left")
        highs = np.searchsorted(cids[order], filed_cids, side="right")
        for cid, lo, hi in zip(filed_cids.tolist(), lows, highs, strict=True):
            covered = store.covered_sids(store.predicate_row(cid, 0))
            assert np.isin(covered, sid[order[lo:hi]]).all(), f"conjunct {cid} not filed"

    def _candidates(self, batch: Batch, first: int, last: int) -> Candidates:
        """The hash table's conjuncts under the event's pairs of spaces (both access
        predicates hold), the fallback lists' under its spaces with a second tree it has
        (the first holds) and the side lists' under its trees (none checked yet)."""
        assert isinstance(batch, ForestBatch)
        located, positions = batch.chunk(first, last)
        ev, sids = located.event, located.sid
        pair_events, keys = self._hashed_pairs(ev, located.tree, sids)
        query, hashed_cids = self.table.lookup(keys)
        # A key's conjunct needs its second tree: the kernel reads the chunk's dense
        # position matrix (cache-resident), not the conjunct's rows (a cache miss each).
        # It also drops a conjunct needing any tree its event lacks, on its tree mask:
        # most fallback conjuncts under an event's spaces do (on BE-Gen workloads, 9 in
        # 10 of what the kernel would hand on).
        tree_mask = self.store.tree_mask.data
        pair, fallback_cids = (np.concatenate(column) for column in zip(
            *(fallback_candidates(*part, ev, positions, tree_mask, NO_TREE)
              for part in self.fallback.key_ranges(*_space_range(sids))), strict=True))
        side_pair, side_cids = self.side.lookup(located.tree)
        wide_pair, wide_cids, wide_checked, probed = self.cells.candidates(
            self.forest, located.tree, located.position)
        checked = np.concatenate([
            np.repeat(np.array([2, 1, 0], dtype=np.int32), [len(query), len(pair),
                                                            len(side_pair)]),
            wide_checked])
        return Candidates(np.concatenate([pair_events[query], ev[pair], ev[side_pair],
                                          ev[wide_pair]]),
                          np.concatenate([hashed_cids, fallback_cids, side_cids, wide_cids]
                                         ).astype(np.int64),
                          len(ev) + len(keys) + len(query) + len(pair) + len(side_pair)
                          + len(wide_pair) + probed, checked)

    def _hashed_pairs(self, ev: np.ndarray, tree: np.ndarray,
                      sid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """The pairs of located entries of one event whose trees some hashed conjunct is
        filed under (only these can have a bucket in the table), as their event and
        their bucket's key (:func:`pair_key` of their spaces). The entries come sorted by
        event, then tree (:class:`psmatch.pstree.matcher.ForestBatch`), as the compiled
        :func:`psmatch.pstree.kernels.hashed_pair_entries` that pairs them needs. Cost:
        the kernel's (sorting the entries again here would add a few percent to an
        event's matching).
        """
        empty = np.empty(0, dtype=np.int64)
        if not len(self._tree_pairs) or not len(ev):
            return empty, empty
        owner, keys = hashed_pair_entries(ev, tree, sid, self._tree_pairs)
        return ev[owner], keys


def _tree_pair(tree_a: np.ndarray, tree_b: np.ndarray) -> np.ndarray:
    """Key of an order-free pair of distinct trees: ``low << 32 | high``."""
    low = np.minimum(tree_a, tree_b).astype(np.int64)
    return (low << 32) | np.maximum(tree_a, tree_b).astype(np.int64)


def pair_key(sid_a: np.ndarray, sid_b: np.ndarray) -> np.ndarray:
    """Posting key of each 2-dim predicate space ``(sid_a[i], sid_b[i])``, order-free
    (:func:`psmatch.pstree.kernels.space_pair_keys`, the key's layout): int64."""
    return space_pair_keys(np.asarray(sid_a, dtype=np.int64), np.asarray(sid_b, dtype=np.int64))


def fallback_key(sid: np.ndarray, second_tree: np.ndarray) -> np.ndarray:
    """Posting key of a fallback entry: ``space id << 32 | second tree`` (:data:`NO_TREE`
    for a single predicate), so that a space's keys are one range (:func:`_space_range`)."""
    return (np.asarray(sid).astype(np.int64) << 32) | np.asarray(second_tree).astype(np.int64)


def _space_range(sids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The range ``[low, high)`` of the fallback keys of each space."""
    low = np.asarray(sids).astype(np.int64) << 32
    return low, low + (1 << 32)
