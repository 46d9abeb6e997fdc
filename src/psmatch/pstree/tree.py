"""The PS-Tree: one attribute's value domain cut into disjoint predicate spaces.

Owns the predicate-space structure of one tree of Ji & Jacobsen's PS-Tree (PVLDB 2018,
section 4). A :class:`PSTree` indexes one (attribute, value kind). The distinct bounds
named by its predicates, ``b_0 < ... < b_{m-1}``, cut the domain into ``2m + 1`` disjoint
predicate spaces ``(-inf, b_0), [b_0], (b_0, b_1), [b_1], ..., (b_{m-1}, +inf)``; space
*position* ``2i`` is the open gap below ``b_i`` and ``2i + 1`` the point ``[b_i]``. Every
space has a stable id in the forest's :class:`psmatch.pstree.spaces.SpaceTable`.
Inserting a bound splits the gap that holds it into three spaces (the left part keeps the
id, the two new ones copy its counters); releasing the last reference to a bound merges
the three spaces back (keeping the largest of their event counters). The paper locates a
value's space with a digit trie; here the bounds are numpy arrays and a batch of values
is located with one ``searchsorted`` (:meth:`PSTree.locate`), the columnar equivalent.

Numbers are compared exactly: each is stored as a double-double ``(hi, lo)`` with
``hi = float(v)`` and ``lo = v - hi`` (zero for floats and for ints within 2**53), so
that ints beyond 2**53 compare exactly although the arrays are float64. Strings use
numpy object arrays (code-point order, as Python compares them). Booleans are the
numbers 0 and 1 in a tree of their own.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from itertools import compress, pairwise

import numpy as np

from psmatch.core.columns import insert_sorted
from psmatch.language import Kind, Value
from psmatch.pstree.spaces import SpaceTable, Splits

_BISECT_MAX = 8
"""Up to this many values, :meth:`PSTree.locate` bisects in Python instead of calling
numpy, whose fixed cost per call dominated single adds."""

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
