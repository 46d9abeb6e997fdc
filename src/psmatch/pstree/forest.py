"""The PS-Tree forest: every tree of an index, the global bound table, and event lookup.

:class:`Forest` owns the trees (:class:`psmatch.pstree.tree.PSTree`, one per (attribute,
value kind)), the space table they share (:class:`psmatch.pstree.spaces.SpaceTable`) and
the global bound ids interval rows refer to: per bound its tree, its rank among the
tree's bounds and its reference count. It references and releases bounds
(:meth:`Forest.add_bounds`, :meth:`Forest.release_bounds`), lays all trees' spaces end to
end for the matchers (:meth:`Forest.space_layout`) and locates a whole batch of events at
once (:meth:`Forest.locate_events`). Ids of freed spaces and released bounds are reused
after :meth:`Forest.reclaim` (once no structure names them), so ids, memory and the cost
of adds follow the live index, not its history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from psmatch.core.columns import group_pairs, grown_capacity, zero_padded
from psmatch.language import Kind, Value
from psmatch.pstree.spaces import MAX_IDS, SpaceTable, Splits, check_capacity
from psmatch.pstree.tree import PSTree

UNBOUNDED_HI = np.int32(2**30)
"""The position given to an interval's +inf end: above every real space position."""
_ONE = np.int32(1)
"""A reference, of the int32 counters' own type: given a Python int, ``np.add.at`` takes
a casting path many times slower."""
VALUE_BYTES = 40
"""Estimated bytes of one bound value in a tree's list: the pointer and a small int,
float or str object."""



class Forest:
    """All PS-Trees of an index, keyed by (attribute, kind), plus the global tables.

    ``bound_tree[b]`` and ``bound_rank[b]`` give, for a global bound id, its tree and
    its current index among that tree's bounds (kept up to date on every insert and
    removal, O(m) for the tree concerned); ``bound_refs[b]`` how many interval ends use
    it. Interval rows refer to bound ids, so a row stays valid while spaces split and
    merge around it.
    """

    def __init__(self) -> None:
        self.spaces = SpaceTable()
        self.trees: list[PSTree] = []
        self.tree_of: dict[tuple[str, Kind], int] = {}
        self.bound_tree = np.zeros(64, dtype=np.int32)
        self.bound_rank = np.zeros(64, dtype=np.int32)
        self.bound_refs = np.zeros(64, dtype=np.int32)  # interval ends using each bound
        self._bound_count = 0  # bound ids handed out so far
        self._dead_bounds: list[int] = []  # released, reusable after reclaim
        self._free_bounds: list[int] = []
        self.version = 0  # bumped whenever spaces split or merge
        self.event_version = 0  # bumped whenever events are counted
        self._layout_key: tuple[int, ...] = ()
        self._layout: tuple[np.ndarray, np.ndarray, np.ndarray]
        self._history_key: tuple[int, ...] = ()
        self._history: tuple[np.ndarray, np.ndarray]

    def tree(self, attribute: str, kind: Kind) -> PSTree:
        """The tree for (attribute, kind), created empty when missing."""
        key = (attribute, kind)
        tid = self.tree_of.get(key)
        if tid is None:
            tid = len(self.trees)
            self.tree_of[key] = tid
            self.trees.append(PSTree(tid, attribute, kind, self.spaces))
        return self.trees[tid]

    def _new_bound_ids(self, tree: int, n: int) -> np.ndarray:
        """``n`` bound ids for ``tree``, reclaimed ones first."""
        reused = self._free_bounds[len(self._free_bounds) - min(n, len(self._free_bounds)):]
        del self._free_bounds[len(self._free_bounds) - len(reused):]
        fresh = n - len(reused)
        if self._bound_count + fresh > len(self.bound_tree):
            check_capacity(self._bound_count + fresh, "bounds")
            grow = grown_capacity(self._bound_count + fresh, len(self.bound_tree))
            self.bound_tree = zero_padded(self.bound_tree, grow)
            self.bound_rank = zero_padded(self.bound_rank, grow)
            self.bound_refs = zero_padded(self.bound_refs, grow)
        bids = np.concatenate([np.array(reused, dtype=np.int64),
                               np.arange(self._bound_count, self._bound_count + fresh)])
        self._bound_count += fresh
        self.bound_tree[bids] = tree
        self.bound_refs[bids] = 0
        return bids

    def _rerank(self, tree: PSTree) -> None:
        self.bound_rank[tree.bound_ids] = np.arange(len(tree.bound_ids), dtype=np.int32)

    def add_bounds(self, tree: PSTree, values: Sequence[Value]) -> tuple[np.ndarray, Splits]:
        """Reference each of ``values`` once as a bound of ``tree``.

        The new distinct values are inserted first, all in one sorted merge
        (:meth:`PSTree.insert_bounds`), each splitting a gap. Returns the bound ids of
        ``values`` and the splits. Cost O(n log n + m), vectorised: no Python object
        per value or per split.
        """
        if not isinstance(values, np.ndarray):
            column = np.empty(len(values), dtype=object)
            column[:] = values
            values = column
        index = tree.locate(values)
        new_at = np.flatnonzero(index % 2 == 0)
        index //= 2  # bound index of the present values, gap index of the new ones
        splits = Splits.join([])
        if len(new_at):
            first, rank = tree.sorted_distinct(values[new_at])
            first = new_at[first]
            below = index[first]
            bids = self._new_bound_ids(tree.tree_id, len(first))
            splits = tree.insert_bounds(values[first], below, bids)
            self._rerank(tree)
            self.version += 1
            # Where the values are now, without locating them again: a present bound
            # moves right by the new ones inserted at or below it, and the r-th new
            # value (in order) lands after its ``below`` bounds and the r new before it.
            index += np.searchsorted(below, index, side="right")
            index[new_at] = below[rank] + rank
        bids = tree.bound_ids[index]
        np.add.at(self.bound_refs, bids, _ONE)
        return bids, splits

    def pin_bounds(self, bids: np.ndarray) -> None:
        """Reference present bounds once more, so that they stay bounds (and keep their
        spaces) until :meth:`release_bounds` drops the reference. O(len(bids))."""
        np.add.at(self.bound_refs, bids, _ONE)

    def release_bounds(self, bids: np.ndarray) -> None:
        """Drop one reference to each bound of ``bids`` (a bound may come more than once;
        -1, an unbounded end, is skipped). Bounds left with none are removed and their
        spaces merge (:meth:`PSTree.remove_bounds`). Cost O(n log n) vectorised, plus
        O(m) for each tree that loses bounds, however many it loses.
        """
        bids = bids[bids >= 0]
        np.subtract.at(self.bound_refs, bids, _ONE)
        gone = bids[self.bound_refs[bids] == 0]
        if not len(gone):
            return
        gone = np.unique(gone)
        trees = self.bound_tree[gone]
        for tid in np.unique(trees).tolist():
            tree = self.trees[tid]
            ranks = np.sort(self.bound_rank[gone[trees == tid]])
            self._dead_bounds.extend(tree.bound_ids[ranks].tolist())
            tree.remove_bounds(ranks)
            self._rerank(tree)
            self.version += 1

    def reclaim(self) -> None:
        """Make the ids of freed spaces and released bounds reusable.

        The owner calls it once every structure keyed by space ids has been purged of
        dead ones and every row naming a released bound belongs to a removed conjunct
        (never read again); until then freed ids wait, so a stale entry can never name a
        new space. Ids then stay below what is live plus what was freed since the last
        purge: memory and the cost of adds follow the live index, not its history.
        """
        self.spaces.reclaim()
        self._free_bounds.extend(self._dead_bounds)
        self._dead_bounds.clear()

    def space_layout(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All trees' spaces end to end: (first global position per tree, tree sizes,
        space id per global position). Cost O(total spaces), cached until spaces
        split or merge or a tree is added."""
        key = (self.version, len(self.trees))
        if self._layout_key != key:
            sizes = np.array([len(t) for t in self.trees], dtype=np.int64)
            base = np.cumsum(sizes) - sizes
            sids = (np.concatenate([t.space_ids for t in self.trees]) if self.trees
                    else np.zeros(0, np.int64))
            self._layout = (base, sizes, sids)
            self._layout_key = key
        return self._layout

    def event_history(self) -> tuple[np.ndarray, np.ndarray]:
        """(events seen per tree, running sum of the event counters over the layout).

        A range of global positions ``[a, b]`` saw ``cumulative[b + 1] - cumulative[a]``
        events. Cost O(total spaces), cached until the next batch or structural change.
        """
        key = (self.version, len(self.trees), self.event_version)
        if self._history_key != key:
            _, _, layout = self.space_layout()
            totals = np.array([t.total_events for t in self.trees], dtype=np.float64)
            cumulative = np.concatenate([[0], np.cumsum(self.spaces.event_counter[layout])])
            self._history = (totals, cumulative)
            self._history_key = key
        return self._history

    def covered_positions(self, tree: PSTree, lo_bid: int, lo_closed: bool, hi_bid: int,
                          hi_closed: bool) -> tuple[int, int]:
        """First and last positions of an interval given by bound ids."""
        lo = 0 if lo_bid < 0 else 2 * int(self.bound_rank[lo_bid]) + (1 if lo_closed else 2)
        hi = len(tree) - 1 if hi_bid < 0 else 2 * int(self.bound_rank[hi_bid]) + (
            1 if hi_closed else 0
        )
        return lo, hi

    def locate_events(self, events: Sequence[dict[str, Value]]) -> LocatedBatch:
        """Locate every (attribute, value) pair of a batch in its tree: the pairs come
        by tree (ascending), each tree's in event order, so that a stable sort by event
        orders them by event, then tree.

        Pairs whose (attribute, kind) has no tree can satisfy no predicate and are
        skipped. Updates the event counters (the selectivity history). Cost: the pairs
        grouped by tree (:func:`psmatch.core.columns.group_pairs`, O(pairs) with no
        Python frame per pair), then one vectorised locate per tree present in the batch.
        """
        grouped = group_pairs(events, self.tree_of)
        parts_e, parts_t, parts_p, parts_s = [], [], [], []
        for tid, (rows, values) in grouped.items():
            tree = self.trees[tid]
            positions = tree.locate(values)
            sids = tree.space_ids[positions]
            tree.total_events += len(values)
            np.add.at(self.spaces.event_counter, sids, 1)
            self.event_version += 1
            parts_e.append(np.asarray(rows, dtype=np.int64))
            parts_t.append(np.full(len(rows), tid, dtype=np.int64))
            parts_p.append(positions)
            parts_s.append(sids)
        if not parts_e:
            empty = np.empty(0, dtype=np.int64)
            return LocatedBatch(len(events), empty, empty, empty, empty)
        return LocatedBatch(
            len(events),
            np.concatenate(parts_e),
            np.concatenate(parts_t),
            np.concatenate(parts_p),
            np.concatenate(parts_s),
        )

    @property
    def nbytes(self) -> int:
        """Estimated bytes: every numpy column, plus :data:`VALUE_BYTES` per bound value
        kept as a Python object (the list ``bisect`` searches)."""
        return int(self.spaces.nbytes + self.bound_tree.nbytes + self.bound_rank.nbytes
                   + self.bound_refs.nbytes
                   + 8 * (len(self._dead_bounds) + len(self._free_bounds))
                   + sum(t.hi.nbytes + t.lo.nbytes + t.keys.nbytes
                         + t.bound_ids.nbytes + t.space_ids.nbytes
                         + VALUE_BYTES * len(t.values) for t in self.trees))

    def check(self) -> None:
        """Assert the invariants of every tree and of the global tables."""
        live = 0
        for tree in self.trees:
            tree.check()
            live += len(tree)
            if len(tree.bound_ids):
                assert (self.bound_rank[tree.bound_ids] == np.arange(len(tree.bound_ids))).all()
                assert (self.bound_tree[tree.bound_ids] == tree.tree_id).all()
                assert (self.bound_refs[tree.bound_ids] > 0).all(), "an unused bound"
        assert live == self.spaces.live
        self.spaces.check()
        assert self._bound_count < MAX_IDS, "bound ids overflow"
        idle = self._dead_bounds + self._free_bounds
        in_use = [bid for tree in self.trees for bid in tree.bound_ids.tolist()]
        assert len(set(idle)) == len(idle) and not set(idle) & set(in_use), (
            "a released bound id is in use or listed twice")
        assert len(in_use) + len(idle) == self._bound_count, "a bound id is lost"


@dataclass(slots=True)
class LocatedBatch:
    """The located pairs of a batch, columnar: event index, tree, position, space id."""

    n_events: int
    event: np.ndarray
    tree: np.ndarray
    position: np.ndarray
    sid: np.ndarray

    def position_matrix(self, n_trees: int) -> np.ndarray:
        """Dense ``[n_events, n_trees]`` positions, -1 where the event lacks the tree.

        Cost O(n_events x n_trees) memory; callers chunk sparse workloads.
        """
        matrix = np.full((self.n_events, max(n_trees, 1)), -1, dtype=np.int32)
        matrix[self.event, self.tree] = self.position
        return matrix
