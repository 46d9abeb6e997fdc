"""Wide access predicates filed in canonical segments of coarse cells, not under each space.

A PS-Tree's spaces lie between the distinct bounds, so on a fine value domain (prices,
timestamps) their number grows with the subscriptions, and a range filed under every
space it covers costs links in proportion to the index: n subscriptions cost O(n^2).
:class:`WideLists` bounds that cost. Per tree it pins *anchors*, every
:data:`CELL_BOUNDS`-th bound, which cut the tree into *cells* of about
``2 x CELL_BOUNDS`` spaces; over the cells it lays a segment tree (the cells padded to
``2**levels`` leaves). A wide predicate's interval is filed under the canonical segments
of the cells it covers whole (at most two per level: O(log cells) entries) and under the
one or two cells it covers in part (*edge* cells). An event probes, per tree, the leaf
of its cell and its ancestors and the edge list of its cell: O(log cells) keys. A
segment's conjuncts have their access predicate true; an edge cell's are candidates
whose access predicate verification checks exactly (exactness never rests on a cell).

Anchors are bound ids with a reference of their own in the forest
(:meth:`psmatch.pstree.forest.Forest.pin_bounds`), so they stay bounds while the
predicates that named them go: a cell is a fixed range of values whatever spaces split
or merge inside it, and a position's cell is one search in the anchors' current
positions. A tree is anchored anew, under a new *slot* (the keys' high half, so that the
old entries are never probed again), when its bounds double since its last anchoring;
its wide conjuncts are then filed again, O(log cells) each, amortised O(1) per bound.
Stale slots' entries and removed conjuncts' are dropped by :meth:`WideLists.compact`,
which runs at the family's purge and when stale entries outnumber live ones.
"""

from __future__ import annotations

import numpy as np

from psmatch.core.columns import GrowableArray, expand_ranges
from psmatch.core.multimap import MultiMap
from psmatch.pstree.forest import Forest
from psmatch.pstree.store import ConjunctStore

WIDE_COVER = 64
"""An access predicate covering more spaces than this, in a tree of more than
:data:`FINE_SPACES`, is filed in segments of cells; below it, its spaces' own lists cost
at most this many entries and decide the predicate exactly."""
FINE_SPACES = 512
"""A tree of at most this many spaces (256 distinct bounds) is *coarse*: its predicates
stay under their spaces, as in the paper, each at most this many entries whatever the
index. BE-Gen's domains of 100 values make trees of at most 201 spaces."""
CELL_BOUNDS = 16
"""Bounds between consecutive anchors when a tree is anchored: an edge cell holds the
ends of at most about this many wide predicates of each of its anchorings' trees, the
candidates an event gets there besides the exact ones."""

class WideLists:
    """Wide access predicates of a forest family, filed per tree in segments of cells.

    ``anchors[t]``: the pinned bound ids of tree ``t`` in rank order (cell ``c`` holds
    the positions from anchor ``c - 1``'s point up to anchor ``c``'s, excluded);
    ``slot[t]`` the current high half of its keys (-1: not anchored), ``levels[t]`` its
    segment tree's height and ``anchored_bounds[t]`` its bound count when anchored.
    A key is ``slot << 32 | node``: node ``(1 << levels) + c >> l`` is the segment at
    level ``l`` above cell ``c`` (heap order, the root is 1) and ``(2 << levels) + c``
    the edge list of cell ``c``. ``wide`` marks the conjuncts filed here.
    """

    def __init__(self) -> None:
        self.map = MultiMap()
        self.wide = GrowableArray(np.bool_)
        self.anchors: list[np.ndarray] = []
        self.slot = np.zeros(0, dtype=np.int64)
        self.levels = np.zeros(0, dtype=np.int64)
        self.anchored_bounds = np.zeros(0, dtype=np.int64)
        self._next_slot = 0
        self._current_entries = 0  # entries under the trees' current slots
        self._positions_key = -1
        self._positions: list[np.ndarray] = []
        self._flat: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def active(self) -> bool:
        """Whether any tree was ever anchored (no conjunct is wide before)."""
        return self._next_slot > 0

    # -- filing ------------------------------------------------------------------------

    def file(self, forest: Forest, store: ConjunctStore, cids: np.ndarray,
             is_wide: np.ndarray, grown_trees: np.ndarray) -> None:
        """Mark the conjuncts ``cids[is_wide]`` wide and file their access predicates
        (their first row); first anchor anew the trees of ``grown_trees`` (trees that
        got bounds) whose bounds doubled since their anchoring, and the new wide
        predicates' trees never anchored. Cost O(log cells) per interval filed, plus
        the refiled conjuncts of re-anchored trees (amortised O(1) per bound)."""
        self.wide.put(cids, is_wide)
        if not self._next_slot and not is_wide.any():
            return  # no tree has cells yet (a coarse index): nothing to anchor or file
        new = cids[is_wide]
        self._grow(len(forest.trees))
        trees = store.pred_tree[store.pred_start.data[new]].astype(np.int64)
        candidates = np.union1d(np.unique(trees), grown_trees.astype(np.int64))
        candidates = candidates[candidates < len(self.slot)]
        anchored = self.slot[candidates] >= 0
        bounds = np.array([len(forest.trees[t].bound_ids) for t in candidates.tolist()],
                          dtype=np.int64)
        due = candidates[(~anchored & np.isin(candidates, trees))
                         | (anchored & (bounds > 2 * self.anchored_bounds[candidates]))]
        refiled, released = [], []
        for t in due.tolist():
            old_slot = int(self.slot[t])
            if old_slot >= 0:
                _, _, old = self.map.lookup_ranges(np.array([old_slot << 32]),
                                                   np.array([(old_slot + 1) << 32]))
                refiled.append(np.unique(old).astype(np.int64))
                self._current_entries -= self._entries_of(t)
                released.append(self.anchors[t])
            self._anchor(forest, t)
        if refiled:
            moved = np.concatenate(refiled)
            moved = moved[store.registry.alive.data[moved] & self.wide.data[moved]]
            new = np.concatenate([moved, new])
        self._add(forest, store, new)
        if released:
            forest.release_bounds(np.concatenate(released).astype(np.int64))
        if len(self.map) - self._current_entries > max(4096, self._current_entries):
            self.compact(store.registry.alive.data)

    def _grow(self, n_trees: int) -> None:
        extra = n_trees - len(self.slot)
        if extra > 0:
            self.slot = np.concatenate([self.slot, np.full(extra, -1, dtype=np.int64)])
            self.levels = np.concatenate([self.levels, np.zeros(extra, dtype=np.int64)])
            self.anchored_bounds = np.concatenate([self.anchored_bounds,
                                                   np.zeros(extra, dtype=np.int64)])
            self.anchors.extend(np.zeros(0, dtype=np.int32) for _ in range(extra))

    def _anchor(self, forest: Forest, t: int) -> None:
        """Pin every :data:`CELL_BOUNDS`-th bound of tree ``t`` as its anchors, under a
        new slot."""
        bound_ids = forest.trees[t].bound_ids
        anchors = bound_ids[CELL_BOUNDS - 1 :: CELL_BOUNDS].copy()
        forest.pin_bounds(anchors)
        self.anchors[t] = anchors
        self.anchored_bounds[t] = len(bound_ids)
        self.levels[t] = len(anchors).bit_length()  # 2**levels > len(anchors) cells
        self.slot[t] = self._next_slot
        self._next_slot += 1
        self._positions_key = -1

    def _entries_of(self, t: int) -> int:
        slot = int(self.slot[t])
        owner, _, _ = self.map.lookup_ranges(np.array([slot << 32]),
                                             np.array([(slot + 1) << 32]))
        return len(owner)

    def _add(self, forest: Forest, store: ConjunctStore, cids: np.ndarray) -> None:
        """File the first rows of ``cids`` under their trees' current slots."""
        if not len(cids):
            return
        keys, owners = self.keys_of(forest, store, cids)
        self.map.add(keys, cids[owners].astype(np.int32))
        self._current_entries += len(keys)

    def keys_of(self, forest: Forest, store: ConjunctStore,
                cids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The keys the first rows of ``cids`` (on anchored trees) are filed under, and
        the index in ``cids`` of each. O(intervals x levels), vectorised."""
        pids = store.pred_start.data[cids].astype(np.int64)
        iv_owner, *bounds = store.intervals(pids)
        tree = store.pred_tree[pids][iv_owner].astype(np.int64)
        lo, hi = store.positions(*bounds)
        sizes = np.array([len(t) for t in forest.trees], dtype=np.int64)
        hi = np.minimum(hi, sizes[tree] - 1)
        keys, owners = [], []
        for t in np.unique(tree).tolist():
            at = np.flatnonzero(tree == t)
            k, o = self._interval_keys(forest, t, lo[at], hi[at], int(sizes[t]))
            keys.append(k)
            owners.append(iv_owner[at][o])
        return np.concatenate(keys), np.concatenate(owners)

    def _interval_keys(self, forest: Forest, t: int, lo: np.ndarray, hi: np.ndarray,
                       size: int) -> tuple[np.ndarray, np.ndarray]:
        """Keys of intervals covering positions ``lo .. hi`` of tree ``t``: the
        canonical segments of the cells they cover whole, the edge cells of those they
        cover in part; with the interval of each."""
        points = self.anchor_positions(forest)[t]
        levels = int(self.levels[t])
        starts = np.concatenate([[0], points])
        ends = np.concatenate([points - 1, [size - 1]])
        c_lo = np.searchsorted(points, lo, side="right")
        c_hi = np.searchsorted(points, hi, side="right")
        part_lo = lo != starts[c_lo]
        part_hi = hi != ends[c_hi]
        full_lo, full_hi = c_lo + part_lo, c_hi - part_hi
        edge_cell = np.concatenate([c_lo[part_lo], c_hi[part_hi & ~(part_lo & (c_lo == c_hi))]])
        edge_of = np.concatenate([np.flatnonzero(part_lo),
                                  np.flatnonzero(part_hi & ~(part_lo & (c_lo == c_hi)))])
        nodes, node_of = canonical_segments(full_lo, full_hi, levels)
        slot = int(self.slot[t]) << 32
        keys = np.concatenate([slot | nodes, slot | ((2 << levels) + edge_cell)])
        return keys, np.concatenate([node_of, edge_of])

    def anchor_positions(self, forest: Forest) -> list[np.ndarray]:
        """Per tree, its anchors' (point) positions, ascending; cached until spaces
        split or merge. O(anchors)."""
        if self._positions_key != forest.version:
            rank = forest.bound_rank
            self._positions = [2 * rank[a].astype(np.int64) + 1 for a in self.anchors]
            self._positions_key = forest.version
            self._flat = None
        return self._positions

    # -- matching ----------------------------------------------------------------------

    def candidates(self, forest: Forest, tree: np.ndarray, position: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """The conjuncts filed under the located entries ``(tree[i], position[i])``:
        ``(entry index, cid, checked, keys probed)``, ``checked`` 1 where the access
        predicate is known to hold (a segment), 0 where verification must check it (an
        edge cell). O(entries x levels) plus the entries found, vectorised over all
        trees (one search of the entries' cells in every tree's anchors at once)."""
        empty = np.empty(0, dtype=np.int64)
        if not self._next_slot:
            return empty, empty, empty.astype(np.int32), 0
        tree = tree.astype(np.int64, copy=False)
        entries = np.flatnonzero(tree < len(self.slot))
        entries = entries[self.slot[tree[entries]] >= 0]
        if not len(entries):
            return empty, empty, empty.astype(np.int32), 0
        points, first = self._flat_anchors(forest)
        t = tree[entries]
        cell = np.searchsorted(points, (t << 32) | position[entries], side="right") - first[t]
        levels = self.levels[t]
        slot = self.slot[t] << 32
        owner, level = expand_ranges(np.zeros(len(t), dtype=np.int64), levels + 1)
        query = np.concatenate([slot[owner] | (((1 << levels) + cell)[owner] >> level),
                                slot | ((2 << levels) + cell)])
        found, cids = self.map.lookup(query)
        checked = (found < len(owner)).astype(np.int32)
        at = np.concatenate([entries[owner], entries])[found]
        return at, cids.astype(np.int64), checked, len(query)

    def _flat_anchors(self, forest: Forest) -> tuple[np.ndarray, np.ndarray]:
        """Every tree's anchor positions as one sorted column of ``tree << 32 |
        position``, and where each tree's start in it (cached with
        :meth:`anchor_positions`)."""
        if self._positions_key != forest.version or self._flat is None:
            positions = self.anchor_positions(forest)
            counts = np.array([len(p) for p in positions], dtype=np.int64)
            owner = np.repeat(np.arange(len(positions), dtype=np.int64), counts)
            flat = np.concatenate([np.zeros(0, np.int64), *positions])
            self._flat = ((owner << 32) | flat, np.cumsum(counts) - counts)
        return self._flat

    # -- bookkeeping -------------------------------------------------------------------

    def compact(self, alive: np.ndarray) -> None:
        """Drop the entries of removed conjuncts and of stale slots. O(entries)."""
        current = self.slot[self.slot >= 0]
        self.map.compact(lambda keys, cids: alive[cids] & np.isin(keys >> 32, current))
        self._current_entries = len(self.map)

    @property
    def nbytes(self) -> int:
        return int(self.map.nbytes + self.wide.nbytes + self.slot.nbytes + self.levels.nbytes
                   + self.anchored_bounds.nbytes + sum(a.nbytes for a in self.anchors))

    def check(self, forest: Forest, store: ConjunctStore) -> None:
        """Assert that the live wide conjuncts are filed exactly under their keys in
        their trees' current slots, and that every anchor is a pinned bound of its tree.
        O(entries log entries)."""
        self.map.check()
        for t, anchors in enumerate(self.anchors):
            if len(anchors):
                assert (forest.bound_tree[anchors] == t).all(), "an anchor of another tree"
                assert (np.diff(forest.bound_rank[anchors]) > 0).all(), "anchors out of order"
        alive = store.registry.alive.view()
        wide = np.flatnonzero(alive & self.wide.view()[: len(alive)])
        keys, cids = self.map.entries()
        live = np.isin(keys >> 32, self.slot[self.slot >= 0]) & store.registry.alive.data[cids]
        if len(wide):
            expected_keys, owners = self.keys_of(forest, store, wide)
            expected = sorted(zip(expected_keys.tolist(), wide[owners].tolist(), strict=True))
        else:
            expected = []
        actual = sorted(zip(keys[live].tolist(), cids[live].astype(np.int64).tolist(),
                            strict=True))
        assert actual == expected, "a wide conjunct is filed under wrong keys"


def row_spaces(forest: Forest, store: ConjunctStore, cids: np.ndarray,
               k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The spaces the k-th rows of ``cids`` cover now: ``(first layout position, count)``
    per interval, the index in ``cids`` of each interval, and per conjunct the spaces of
    its row's tree. O(intervals), vectorised."""
    pids = store.pred_start.data[cids].astype(np.int64) + k
    iv_owner, *bounds = store.intervals(pids)
    tree = store.pred_tree[pids].astype(np.int64)
    base, sizes, _ = forest.space_layout()
    lo, hi = store.positions(*bounds)
    iv_tree = tree[iv_owner]
    hi = np.minimum(hi, sizes[iv_tree] - 1)
    return base[iv_tree] + lo, hi - lo + 1, iv_owner, sizes[tree]


def row_cover(forest: Forest, store: ConjunctStore, cids: np.ndarray,
              k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per conjunct: the spaces its k-th row covers now, and the spaces of its tree."""
    _, count, owner, spaces = row_spaces(forest, store, cids, k)
    return np.bincount(owner, weights=count, minlength=len(cids)).astype(np.int64), spaces


def any_fine(forest: Forest) -> bool:
    """Whether some tree of ``forest`` is fine (over :data:`FINE_SPACES` spaces): until
    then no predicate goes to the cells, and a coarse index skips their bookkeeping."""
    _, sizes, _ = forest.space_layout()
    return len(sizes) > 0 and int(sizes.max()) > FINE_SPACES


def wide_mask(cover: np.ndarray, tree_spaces: np.ndarray) -> np.ndarray:
    """Whether access predicates covering ``cover`` of their tree's ``tree_spaces``
    spaces go to the cells (:data:`WIDE_COVER`, :data:`FINE_SPACES`)."""
    return (cover > WIDE_COVER) & (tree_spaces > FINE_SPACES)


def canonical_segments(first: np.ndarray, last: np.ndarray,
                       levels: int) -> tuple[np.ndarray, np.ndarray]:
    """The nodes of the segment tree over ``2**levels`` leaves (heap order, root 1)
    whose leaves are exactly cells ``first[i] .. last[i]`` (nothing where ``first[i] >
    last[i]``), at most two per level, with the index ``i`` of each.
    O(len(first) x levels), vectorised."""
    lo = first.astype(np.int64) + (1 << levels)
    hi = last.astype(np.int64) + (1 << levels) + 1  # exclusive
    which = np.arange(len(lo))
    nodes, owners = [], []
    while len(which):
        open_ = lo < hi
        lo, hi, which = lo[open_], hi[open_], which[open_]
        left = (lo & 1).astype(bool)
        nodes.append(lo[left])
        owners.append(which[left])
        lo = lo + left
        right = (hi & 1).astype(bool)
        hi = hi - right
        nodes.append(hi[right])
        owners.append(which[right])
        lo, hi = lo >> 1, hi >> 1
    if not nodes:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    return np.concatenate(nodes), np.concatenate(owners)
