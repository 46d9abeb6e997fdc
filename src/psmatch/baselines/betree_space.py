"""BE-Tree's discrete domains over the PS-Tree forest's encoding: cuts, hulls, midpoints.

BE-Tree assumes discrete finite domains; here each (attribute, kind) has the forest's
positions ``0 .. 2m`` (:class:`psmatch.pstree.forest.Forest`). The domain grows as values
arrive, so a bucket's bounds are *cuts* anchored to values ("just before v", "just after
v", or the domain's ends), not positions: a cut's position is recomputed from the current
bounds when a bucket splits (:func:`boundary`), and an event value is compared with cuts
directly. A conjunct's *hull* on an attribute (Table 1 of the paper) is the pair of cuts
enclosing its predicate there, read from the store's predicate rows by
:class:`HullReader`, one conjunct at a time or as numbered cuts in bulk (:class:`HullRows`).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass

import numpy as np

from psmatch.core.columns import expand_ranges
from psmatch.language import Value
from psmatch.pstree.forest import Forest
from psmatch.pstree.store import ConjunctStore

Cut = tuple
"""A bucket bound: ``(0,)`` below everything, ``(2,)`` above everything, ``(1, v, 0)``
just before ``v``, ``(1, v, 2)`` just after ``v``; an event value ``x`` is ``(1, x, 1)``."""
LOWEST: Cut = (0,)
HIGHEST: Cut = (2,)
Hull = tuple[Cut, Cut]


@dataclass(slots=True)
class HullRows:
    """The hulls of some conjuncts as numbers: row ``r`` is the predicate of conjunct
    ``owner[r]`` (an index into ``cids``) on ``tree[r]``, its hull running from cut
    ``lo[r]`` to cut ``hi[r]`` of the tree's current domain (cut ``k`` separates
    positions ``k - 1`` and ``k``; 0 is below everything, ``2m + 1`` above). Rows are
    grouped by conjunct: conjunct ``i`` has rows ``first[i] .. first[i] + count[i] - 1``."""

    cids: np.ndarray
    first: np.ndarray
    count: np.ndarray
    owner: np.ndarray
    tree: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    def on(self, members: np.ndarray, tree: int) -> tuple[np.ndarray, np.ndarray]:
        """The hull cuts on ``tree`` of ``members`` (indices into ``cids``, each with a
        predicate on ``tree``), in the order of ``members``. O(their predicates)."""
        _, rows = expand_ranges(self.first[members], self.count[members])
        rows = rows[self.tree[rows] == tree]
        return self.lo[rows], self.hi[rows]


class HullReader:
    """The hulls of the store's conjuncts, and the cuts of the trees' current domains."""

    def __init__(self, store: ConjunctStore, forest: Forest) -> None:
        self.store = store
        self.forest = forest

    def values(self, tree: int) -> list[Value]:
        """The sorted bound values of ``tree``: its domain's cuts are anchored to them."""
        return self.forest.trees[tree].values

    def hulls(self, cid: int) -> dict[int, Hull]:
        """The conjunct's hull per attribute tree (Table 1 of the paper), read from the
        store's predicate rows (:meth:`psmatch.pstree.store.ConjunctStore.hull`).
        O(predicates)."""
        store, forest = self.store, self.forest
        start = int(store.pred_start.data[cid])
        rank = forest.bound_rank
        hulls = {}
        rows = np.arange(start, start + int(store.pred_count.data[cid]))
        for tree, lo, lo_closed, hi, hi_closed in zip(
                store.pred_tree[rows].tolist(), *(end.tolist() for end in store.hull(rows)),
                strict=True):  # fmt: skip
            values = forest.trees[tree].values
            hulls[tree] = (LOWEST if lo < 0 else (1, values[rank[lo]], 0 if lo_closed else 2),
                           HIGHEST if hi < 0 else (1, values[rank[hi]], 2 if hi_closed else 0))
        return hulls

    def trees(self, cid: int) -> list[int]:
        """The attribute trees of the conjunct's predicates. O(predicates)."""
        start = int(self.store.pred_start.data[cid])
        return self.store.pred_tree[start : start + int(self.store.pred_count.data[cid])
                                         ].tolist()

    def rows(self, cids: np.ndarray) -> HullRows:
        """The hulls of ``cids`` as cuts of the current domains (the same cuts as
        :meth:`hulls`, numbered). O(their predicates), vectorised."""
        store, rank = self.store, self.forest.bound_rank
        count = store.pred_count.data[cids].astype(np.int64)
        owner, rows = expand_ranges(store.pred_start.data[cids], count)
        tree = store.pred_tree[rows].astype(np.int64)
        lo_bid, lo_closed, hi_bid, hi_closed = store.hull(rows)
        lo_rank = 2 * rank[np.maximum(lo_bid, 0)].astype(np.int64)
        hi_rank = 2 * rank[np.maximum(hi_bid, 0)].astype(np.int64)
        lo = np.where(lo_bid < 0, 0, lo_rank + np.where(lo_closed, 1, 2))
        _, sizes, _ = self.forest.space_layout()  # a tree of m values has 2m + 1 spaces
        hi = np.where(hi_bid < 0, sizes[tree], hi_rank + np.where(hi_closed, 2, 1))
        return HullRows(cids, np.cumsum(count) - count, count, owner, tree, lo, hi)

    def midpoint(self, tree: int, lo: Cut, hi: Cut) -> Cut | None:
        """The cut splitting the bucket ``[lo, hi)`` of ``tree`` into ``[lo, m]`` and
        ``[m + 1, hi]``; None if atomic (one position). O(log m)."""
        values = self.values(tree)
        k = middle(boundary(values, lo), boundary(values, hi))
        return None if k is None else cut_at(values, k)


def middle(lo: float, hi: float) -> int | None:
    """The middle cut ``k`` of a bucket between cuts ``lo`` and ``hi`` (fractional when
    their value is no longer a bound): the bucket's positions split into ``[.., k - 1]``
    and ``[k, ..]``; None when the bucket holds one position."""
    first, last = math.floor(lo) + 1, math.ceil(hi) - 1
    return None if first > last else (first + last + 1) // 2


def cut_at(values: list[Value], k: int) -> Cut:
    """Cut ``k`` (between positions ``k - 1`` and ``k``) of the sorted bound ``values``."""
    return (1, values[(k - 1) // 2], 0 if k % 2 else 2)


def boundary(values: list[Value], cut: Cut) -> float:
    """Where a cut lies among the positions ``0 .. 2m`` of the sorted bound ``values``:
    an integer k between positions k - 1 and k, or ``2i + 0.5`` inside gap ``2i`` when
    its value is no longer a bound."""
    if cut[0] == 0:
        return 0.0
    if cut[0] == 2:
        return 2.0 * len(values) + 1
    i = bisect_left(values, cut[1])
    if i < len(values) and values[i] == cut[1]:
        return 2.0 * i + (2 if cut[2] == 2 else 1)
    return 2.0 * i + 0.5
