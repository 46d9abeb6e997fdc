"""The PS-Tree: one attribute's value domain cut into disjoint predicate spaces.

Owns the predicate-space structure of Ji & Jacobsen's PS-Tree (PVLDB 2018, section 4):

* :class:`PSTree` indexes one (attribute, value kind). The distinct bounds named by
  its predicates, ``b_0 < ... < b_{m-1}``, cut the domain into ``2m + 1`` disjoint
  predicate spaces ``(-inf, b_0), [b_0], (b_0, b_1), [b_1], ..., (b_{m-1}, +inf)``;
  space *position* ``2i`` is the open gap below ``b_i`` and ``2i + 1`` the point
  ``[b_i]``. Every space has a stable *space id* (``sid``), a predicate counter (how
  many predicate intervals cover it) and an event counter (how many past events fell
  into it, the selectivity statistics). Inserting a bound splits the gap that holds it
  into three spaces (the left part keeps the id, the two new ones copy its counters);
  releasing the last reference to a bound merges the three spaces back (keeping the
  largest of their event counters).
  The paper locates a value's space with a digit trie; here the bounds are numpy arrays
  and a batch of values is located with one ``searchsorted``, the columnar equivalent.
* :class:`Forest` owns every tree, the global space and bound tables, and locates a
  whole batch of events at once. Ids of freed spaces and released bounds are reused
  after :meth:`Forest.reclaim` (once no structure names them), so ids, memory and the
  cost of adds follow the live index, not its history.

Numbers are compared exactly: each is stored as a double-double ``(hi, lo)`` with
``hi = float(v)`` and ``lo = v - hi`` (zero for floats and for ints within 2**53), so
that ints beyond 2**53 compare exactly although the arrays are float64. Strings use
numpy object arrays (code-point order, as Python compares them). Booleans are the
numbers 0 and 1 in a tree of their own.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress, pairwise

import numpy as np

from psmatch.core.columns import group_pairs, grown_capacity, insert_sorted, zero_padded
from psmatch.errors import PsmatchError
from psmatch.language import Kind, Value

UNBOUNDED_HI = np.int32(2**30)
"""The position given to an interval's +inf end: above every real space position."""
MAX_IDS = 2**31 - 1
"""Space ids and bound ids stay below this: rows hold bound ids as int32 and a pair key
(:func:`psmatch.pstree.psthash.pair_key`) holds two space ids in 32 bits each."""
_ONE = np.int32(1)
"""A reference, of the int32 counters' own type: given a Python int, ``np.add.at`` takes
a casting path about 30 times slower (160 against 5 µs for 3,000 entries)."""
_BISECT_MAX = 8
"""Up to this many values, :meth:`PSTree.locate` bisects in Python instead of calling
numpy, whose fixed cost per call dominated single adds."""
VALUE_BYTES = 40
"""Estimated bytes of one bound value in a tree's list: the pointer and a small int,
float or str object."""


def split_number(value: int | float) -> tuple[float, float]:
    """The exact double-double ``(hi, lo)`` of a number; ``hi + lo == value`` exactly."""
    hi = float(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return hi, float(value - int(hi))
    return hi, 0.0


def number_columns(values: Sequence[Value]) -> tuple[np.ndarray, np.ndarray]:
    """Double-double columns of a sequence of numbers (or booleans, as 0 and 1).

    Cost O(n); the ``lo`` column is computed in Python only for ints beyond 2**53 (and
    for a handful of values, where it is cheaper than finding those).
    """
    hi = np.fromiter(values, dtype=np.float64, count=len(values))  # float(v) each, in C
    lo = np.zeros(len(values), dtype=np.float64)
    big = (range(len(values)) if len(values) <= _BISECT_MAX  # numpy's fixed costs dominate
           else np.flatnonzero(np.abs(hi) >= 2.0**53).tolist())
    for i in big:
        lo[i] = split_number(values[i])[1]
    return hi, lo


@dataclass(slots=True)
class Splits:
    """Gap spaces cut by new bounds, as columns: gap ``sid[i]`` of tree ``tree[i]`` was
    cut into itself and the two new spaces ``new_sids[i]`` (the new point and the part
    right of it).

    The splits of one :meth:`Forest.add_bounds` all name gaps that existed before it
    (several new bounds in one gap give several splits of that gap), so a family can
    copy every gap's entries to its new spaces in one batched lookup. Columns rather
    than an object per split: a bulk build of many new values makes hundreds of
    thousands of splits, and objects would cost far more time and memory than the tree.
    """

    tree: np.ndarray
    sid: np.ndarray
    new_sids: np.ndarray
    """Shape ``(n, 2)``."""

    def __len__(self) -> int:
        return len(self.sid)

    @staticmethod
    def join(parts: Sequence[Splits]) -> Splits:
        """The splits of several trees as one table. O(total)."""
        if not parts:
            return Splits(np.empty(0, dtype=np.int32), np.empty(0, dtype=np.int64),
                          np.empty((0, 2), dtype=np.int64))
        if len(parts) == 1:
            return parts[0]
        return Splits(np.concatenate([p.tree for p in parts]),
                      np.concatenate([p.sid for p in parts]),
                      np.concatenate([p.new_sids for p in parts]))


class SpaceTable:
    """Per-space columns shared by all trees, indexed by space id.

    A freed id is *dead*: structures keyed by space ids (posting lists, pair tables,
    signatures) may still name it, so it is reused only after :meth:`reclaim`, which
    the owner calls once those structures were purged of dead ids. Ids therefore stay
    below the live spaces plus those freed since the last purge, whatever the history.
    ``alive`` tells live ids; the arrays grow geometrically (:func:`grown_capacity`).
    """

    def __init__(self) -> None:
        self.size = 0  # ids handed out so far (the columns' used length)
        self.tree = np.zeros(64, dtype=np.int32)
        self.predicate_counter = np.zeros(64, dtype=np.int32)
        self.event_counter = np.zeros(64, dtype=np.int64)
        self.alive = np.zeros(64, dtype=bool)
        self.live = 0
        self.dead: list[int] = []  # freed, not yet reusable
        self.free_ids: list[int] = []  # reusable

    def new(self, tree: int, like: np.ndarray | None = None, count: int = 1) -> np.ndarray:
        """``count`` space ids for ``tree`` (reclaimed ones first), each with the
        counters of its space in ``like`` (zero without). O(count) vectorised."""
        n = count if like is None else len(like)
        reused = self.free_ids[len(self.free_ids) - min(n, len(self.free_ids)):]
        del self.free_ids[len(self.free_ids) - len(reused):]
        fresh = n - len(reused)
        if self.size + fresh > len(self.tree):
            _check_capacity(self.size + fresh, "spaces")
            grow = grown_capacity(self.size + fresh, len(self.tree))
            self.tree = zero_padded(self.tree, grow)
            self.predicate_counter = zero_padded(self.predicate_counter, grow)
            self.event_counter = zero_padded(self.event_counter, grow)
            self.alive = zero_padded(self.alive, grow)
        sids = np.concatenate([np.array(reused, dtype=np.int64),
                               np.arange(self.size, self.size + fresh)])
        self.size += fresh
        self.tree[sids] = tree
        self.alive[sids] = True
        self.live += n
        self.predicate_counter[sids] = 0 if like is None else self.predicate_counter[like]
        self.event_counter[sids] = 0 if like is None else self.event_counter[like]
        return sids

    def free(self, sids: np.ndarray) -> None:
        """Free live space ids (distinct): dead until :meth:`reclaim`."""
        self.alive[sids] = False
        self.predicate_counter[sids] = 0
        self.live -= len(sids)
        self.dead.extend(sids.tolist())

    def reclaim(self) -> None:
        """Make the dead ids reusable; call once no structure names them."""
        self.free_ids.extend(self.dead)
        self.dead.clear()

    @property
    def nbytes(self) -> int:
        return int(self.tree.nbytes + self.predicate_counter.nbytes + self.event_counter.nbytes
                   + self.alive.nbytes + 8 * (len(self.dead) + len(self.free_ids)))

    def check(self) -> None:
        """Assert that live, dead and reusable ids partition the ids handed out."""
        assert self.size < MAX_IDS, "space ids overflow"
        idle = self.dead + self.free_ids
        assert len(set(idle)) == len(idle) and not self.alive[idle].any(), (
            "a dead or reusable space id is alive or listed twice")
        assert self.live == int(self.alive[: self.size].sum())
        assert self.live + len(idle) == self.size, "a space id is neither live nor freed"


def _check_capacity(size: int, what: str) -> None:
    if size >= MAX_IDS:
        raise PsmatchError(f"the index holds {size:,} {what}, the most its 32-bit ids "
                           "can name: split the subscriptions over several matchers")


class PSTree:
    """The predicate spaces of one attribute and value kind.

    Bounds are kept sorted in numpy arrays (``hi``/``lo`` for numbers and booleans,
    ``keys`` for strings) beside a Python list of the exact values for ``bisect``.
    ``space_ids[p]`` is the id of the space at position ``p``; ``bound_ids[i]`` the
    global id of bound ``b_i`` (its reference count is the forest's, by bound id).
    """

    def __init__(self, tree_id: int, attribute: str, kind: Kind, spaces: SpaceTable) -> None:
        self.tree_id = tree_id
        self.attribute = attribute
        self.kind = kind
        self.spaces = spaces
        self.values: list[Value] = []
        self.hi = np.empty(0, dtype=np.float64)
        self.lo = np.empty(0, dtype=np.float64)
        self.keys = np.empty(0, dtype=object)
        self.bound_ids = np.empty(0, dtype=np.int32)
        self.space_ids = spaces.new(tree_id)
        self.total_events = 0

    def __len__(self) -> int:
        """Number of predicate spaces, ``2m + 1``."""
        return len(self.space_ids)

    def _sort_key(self, value: Value) -> Value:
        return value if self.kind is Kind.STRING else split_number(value)  # type: ignore[arg-type]

    def insert_bounds(self, values: np.ndarray, below: np.ndarray,
                      new_bound_ids: np.ndarray) -> Splits:
        """Insert new bounds in one sorted merge: ``values`` (an object array) distinct,
        absent and sorted, ``below[j]`` the number of present bounds below ``values[j]``.

        Each splits the open gap that holds it: the gap keeps its id and the new point
        and right spaces copy its counters, as one split after another would. Cost
        O(m + k) for k new bounds, whatever k; no per-value array insert.
        """
        k = len(values)
        if self.kind is Kind.STRING:
            self.keys = insert_sorted(self.keys, below, values)
        else:
            hi, lo = number_columns(values)
            self.hi = insert_sorted(self.hi, below, hi)
            self.lo = insert_sorted(self.lo, below, lo)
        if k <= 8:  # a few list inserts (C memmoves) beat rebuilding the list
            for shift, (i, value) in enumerate(zip(below.tolist(), values, strict=True)):
                self.values.insert(i + shift, value)
        else:
            present = np.empty(len(self.values), dtype=object)
            present[:] = self.values
            self.values = insert_sorted(present, below, values).tolist()
        self.bound_ids = insert_sorted(self.bound_ids, below, new_bound_ids)
        gaps = self.space_ids[2 * below]
        new = self.spaces.new(self.tree_id, like=np.repeat(gaps, 2))
        self.space_ids = insert_sorted(self.space_ids, np.repeat(2 * below + 1, 2), new)
        return Splits(np.full(k, self.tree_id, dtype=np.int32), gaps, new.reshape(k, 2))

    def sorted_distinct(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The distinct values of an object array (numbers equal as numbers, 1 == 1.0)
        in value order: (the index of one occurrence of each, the rank of each value
        among them). O(k log k) vectorised; a handful (a single add) is sorted in Python,
        which compares ints and floats exactly, where numpy's fixed costs would dominate."""
        if len(values) <= _BISECT_MAX:
            listed = values.tolist()
            distinct = sorted(set(listed))
            return (np.array([listed.index(v) for v in distinct], dtype=np.int64),
                    np.array([distinct.index(v) for v in listed], dtype=np.int64))
        if self.kind is Kind.STRING:
            order = np.argsort(values, kind="stable")
            keys = values[order]
            first = np.ones(len(order), dtype=bool)
            first[1:] = keys[1:] != keys[:-1]
        else:
            hi, lo = number_columns(values)
            order = np.lexsort((lo, hi))
            hi, lo = hi[order], lo[order]
            first = np.ones(len(order), dtype=bool)
            first[1:] = (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.cumsum(first) - 1
        return order[first], rank

    def bound_index(self, values: Sequence[Value]) -> np.ndarray:
        """Indices of values that are all bounds of this tree. Cost O(n log m)."""
        positions = self.locate(values)
        assert (positions % 2 == 1).all(), "not all values are bounds"
        return positions // 2

    def remove_bounds(self, gone: np.ndarray) -> None:
        """Remove the bounds at indexes ``gone`` (sorted, distinct), which no interval
        references any more. Each merges the three spaces around it into the gap below
        it, which keeps its id; the point and the gap above are freed.

        A merged space keeps the largest event counter of the spaces it absorbs: a split
        copied the gap's counter into both new spaces, so adding them up would count the
        gap's history three times and grow without bound under churn; the largest stays
        within the events the tree has seen. Cost O(m), however many bounds go.
        """
        kept = np.ones(len(self.bound_ids), dtype=bool)
        kept[gone] = False
        self.values = list(compress(self.values, kept.tolist()))
        if self.kind is Kind.STRING:
            self.keys = self.keys[kept]
        else:
            self.hi = self.hi[kept]
            self.lo = self.lo[kept]
        self.bound_ids = self.bound_ids[kept]
        kept_space = np.ones(len(self.space_ids), dtype=bool)
        kept_space[2 * gone + 1] = False
        kept_space[2 * gone + 2] = False
        # each kept space absorbs the freed ones that follow it, up to the next kept one
        starts = np.flatnonzero(kept_space)
        counters = self.spaces.event_counter
        counters[self.space_ids[starts]] = np.maximum.reduceat(counters[self.space_ids], starts)
        self.spaces.free(self.space_ids[~kept_space])
        self.space_ids = self.space_ids[kept_space]

    def locate(self, values: Sequence[Value]) -> np.ndarray:
        """Space positions of a batch of values of this tree's kind.

        Position ``2i + eq`` where ``i`` counts the bounds below the value and ``eq``
        tells whether it equals ``b_i``. Cost O(n log m), vectorised; a handful of values
        (a single add) is bisected in Python, where numpy's fixed cost per call would
        dominate (Python compares ints and floats exactly, so no column split is needed).
        """
        m = len(self.values)
        n = len(values)
        if m == 0:
            return np.zeros(n, dtype=np.int64)
        if n <= _BISECT_MAX:
            bounds = self.values
            located = np.empty(n, dtype=np.int64)
            for j, value in enumerate(values):
                i = bisect_left(bounds, value)
                located[j] = 2 * i + (i < m and bounds[i] == value)
            return located
        if self.kind is Kind.STRING:
            column = np.empty(n, dtype=object)
            column[:] = values
            below = np.searchsorted(self.keys, column, side="left")
            clipped = np.minimum(below, m - 1)
            eq = (below < m) & (self.keys[clipped] == column)
            return 2 * below + eq.astype(np.int64)
        hi, lo = number_columns(values)
        below = np.searchsorted(self.hi, hi, side="left")
        upto = np.searchsorted(self.hi, hi, side="right")
        # Bounds whose hi equals the value's hi are ordered by lo (exact beyond 2**53).
        # One such bound is the common case (the value is a bound or rounds to one);
        # several only happen for ints beyond 2**53 that share a float.
        single = np.flatnonzero(upto - below == 1)
        below[single] += self.lo[below[single]] < lo[single]
        for t in np.flatnonzero(upto - below > 1):
            below[t] += int(np.searchsorted(self.lo[below[t] : upto[t]], lo[t], side="left"))
        clipped = np.minimum(below, m - 1)
        eq = (below < m) & (self.hi[clipped] == hi) & (self.lo[clipped] == lo)
        return 2 * below + eq.astype(np.int64)

    def check(self) -> None:
        """Assert the tree's invariants."""
        m = len(self.values)
        assert len(self.space_ids) == 2 * m + 1
        assert m == len(self.bound_ids)
        keys = [self._sort_key(v) for v in self.values]
        assert all(a < b for a, b in pairwise(keys)), "bounds not sorted"
        if self.kind is Kind.STRING:
            assert list(self.keys) == self.values
        else:
            assert [split_number(v) for v in self.values] == list(  # type: ignore[arg-type]
                zip(self.hi.tolist(), self.lo.tolist(), strict=True)
            )
        assert len(set(self.space_ids.tolist())) == len(self.space_ids)
        assert self.spaces.alive[self.space_ids].all()
        assert (self.spaces.tree[self.space_ids] == self.tree_id).all()
        assert (self.spaces.event_counter[self.space_ids] <= self.total_events).all(), (
            "a space counts more events than its tree saw")


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
            _check_capacity(self._bound_count + fresh, "bounds")
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
