"""The predicate rows of indexed conjuncts and their exact verification.

Owns the part every forest matcher shares: each conjunct's predicates, stored as rows
of numpy columns in *access order* (most selective first, by the event counters of the
spaces they cover, with the paper's operator ranking breaking ties and standing in when
there is no history), the predicate intervals as pairs of bound ids into the
:class:`index.pstree.forest.Forest`, and :meth:`ConjunctStore.verify`, which checks a batch of
(event, conjunct) candidates predicate by predicate with integer comparisons on space
positions, dropping a candidate at its first false predicate (the compiled loop of
:func:`index.pstree.kernels.verify_candidates`).

Conjunct ids (``cid``) come from the :class:`index.core.registry.ConjunctRegistry`;
the store keeps rows per cid and reads liveness and residual conjuncts from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise, repeat

import numpy as np

from index.core.columns import GrowableArray, expand_ranges, set_bits
from index.core.heap import release_free_heap
from index.core.registry import ConjunctRegistry
from index.language import Conjunct, Interval, Kind, Predicate
from index.normal_form import ConjunctColumns
from index.pstree.forest import UNBOUNDED_HI, Forest, Splits
from index.pstree.kernels import ROW_HI, ROW_INTERVALS, ROW_LO, ROW_TREE, verify_candidates

NEAR_FULL_SPACES = 32
"""A predicate covering more spaces than this, and at least 8 times more than it leaves
out, is *near-full* (:func:`near_full`)."""
ROW_BLOCK = 1 << 18
"""Rows :meth:`ConjunctStore.row_table` computes hulls for, and
:meth:`ConjunctStore.compact` moves, at once: their temporaries, a few int64 columns,
are a block's (the whole table's were about 190 MiB at 5M rows, above the 76 MiB table,
at the first match after a bulk load of 1M BE-Gen subscriptions; a compaction's first
block of 2^20 rows took 81 MiB, of 2^18 about a quarter of it)."""
ROW_DTYPE = np.dtype({"names": ["tree", "lo", "hi", "intervals"], "formats": [np.int32] * 4,
                      "offsets": [4 * ROW_TREE, 4 * ROW_LO, 4 * ROW_HI, 4 * ROW_INTERVALS]})
"""A predicate row of :attr:`ConjunctStore.rows`: its tree, the first and last space
position of its hull and its number of intervals, each field at the column of the
verification kernel's ``[rows, 4]`` table (:data:`index.pstree.kernels.ROW_TREE` ..),
so that the rows are that table as they are."""


def operator_ranks(iv_pred: np.ndarray, iv_first: np.ndarray, niv: np.ndarray,
                   lo_bid: np.ndarray, lo_closed: np.ndarray, hi_bid: np.ndarray,
                   hi_closed: np.ndarray) -> np.ndarray:
    """The paper's fallback selectivity order of many predicates (smaller is more
    selective: = , in, between, range, !=, not in, anything), as
    ``rank * 1024 + min(intervals, 1023)``, from their interval columns (intervals
    ``iv_first[p] ..`` of predicate ``p``, ``iv_pred`` the owner of each; bound id -1:
    unbounded). An interval is a point when both ends are the same bound, closed: a
    tree gives equal values one bound id. O(intervals), vectorised."""
    point = (lo_bid >= 0) & (lo_bid == hi_bid) & lo_closed & hi_closed
    all_points = np.bincount(iv_pred, weights=point, minlength=len(niv)) == niv
    last = iv_first + niv - 1
    first_lo = lo_bid[iv_first] >= 0
    one = niv == 1
    rank = np.select(
        [all_points & one, all_points, first_lo & (hi_bid[last] >= 0),
         one & (first_lo | (hi_bid[iv_first] >= 0)), one, niv == 2],
        [0, 1, 2, 3, 6, 4], default=5)
    return rank * 1024 + np.minimum(niv, 1023)


def tree_masks(owner: np.ndarray, tree: np.ndarray, n: int) -> np.ndarray:
    """The tree mask of each of ``n`` conjuncts whose predicates are on trees ``tree``
    (conjunct ``owner``): bit ``t % 64`` set for each tree ``t``.

    Every predicate is false on an event that lacks its tree's attribute (or has it
    with a value of another kind), so a conjunct needing a bit that is not in the mask
    of the trees an event has cannot match it: the verification kernel drops such a
    candidate before it reads the conjunct's rows. A bit shared by two trees only lets a
    candidate through to the exact check. O(predicates).
    """
    masks = np.zeros(n, dtype=np.uint64)
    set_bits(masks, (owner.astype(np.uint64) << np.uint64(6)) | (tree & 63).astype(np.uint64))
    return masks


def near_full(cover: np.ndarray, uncovered: np.ndarray) -> np.ndarray:
    """Whether predicates covering ``cover`` spaces of their tree and leaving out
    ``uncovered`` cover nearly all of it (``!=``, ``not in``, ranges open to almost the
    whole domain).

    Such a predicate holds for almost any value of its attribute, so filing it under
    each of its spaces would cost memory in proportion to the tree (a flood of ``!=``
    would be quadratic) and buy almost no filtering; the families file it once on a
    side list of its tree instead and verify it exactly.
    """
    return (cover > NEAR_FULL_SPACES) & (cover >= 8 * uncovered)


class ConjunctStore:
    """Predicates as rows in access order, per conjunct id of the registry.

    Columns per conjunct: ``pred_start``/``pred_count`` (its predicate rows) and
    ``tree_mask`` (the trees its predicates are on, see :func:`tree_masks`). Per
    predicate row: :attr:`rows` (:data:`ROW_DTYPE`: its tree, :attr:`pred_tree`, its
    number of intervals, :attr:`pred_iv_count`, and the space positions of its hull,
    kept for the verification kernel, :meth:`row_table`) and ``pred_iv_start`` (its
    first interval); the hull of its intervals is read from them (:meth:`hull`).
    Columns per interval:
    ``lo_bid``, ``lo_closed``, ``hi_bid``, ``hi_closed`` (bound id -1 is unbounded).
    Conjuncts with ``like`` suffix/contains patterns, which rows cannot hold, are
    residual in the registry.
    """

    def __init__(self, forest: Forest, registry: ConjunctRegistry) -> None:
        self.forest = forest
        self.registry = registry
        self.pred_start = GrowableArray(np.int32)
        self.pred_count = GrowableArray(np.int32)
        self.tree_mask = GrowableArray(np.uint64)
        self.rows = GrowableArray(ROW_DTYPE)
        self.pred_iv_start = GrowableArray(np.int32)
        self.iv_lo_bid = GrowableArray(np.int32)
        self.iv_lo_closed = GrowableArray(np.bool_)
        self.iv_hi_bid = GrowableArray(np.int32)
        self.iv_hi_closed = GrowableArray(np.bool_)
        self.dead_rows = 0
        # The rows whose hull positions are those of the forest at this version.
        self._hulls_done = 0
        self._hulls_version = -1

    @property
    def pred_tree(self) -> np.ndarray:
        """The tree of each predicate row (a view of :attr:`rows`, valid below
        ``len(rows)``)."""
        return self.rows.data["tree"]

    @property
    def pred_iv_count(self) -> np.ndarray:
        """The number of intervals of each predicate row (a view of :attr:`rows`, valid
        below ``len(rows)``)."""
        return self.rows.data["intervals"]

    # -- insertion and removal ------------------------------------------------------

    def insert_many(self, cids: np.ndarray, conjuncts: ConjunctColumns) -> InsertedConjuncts:
        """Store the rows of new conjuncts, inserting their bounds into the PS-Trees.

        Each conjunct's predicates are put in access order: fewest past events in the
        spaces they cover first (the paper's selectivity), then the operator ranking,
        then fewest spaces covered (the paper's "narrower value sets first").
        Cost: vectorised work proportional to the spaces the predicates cover, plus O(m)
        per tree that gets new bounds, plus one dictionary lookup per predicate for its
        tree.
        """
        forest = self.forest
        n_preds = len(conjuncts.kind)
        p_conj_column = np.repeat(np.arange(len(conjuncts), dtype=np.int64),
                                  conjuncts.predicate_count)
        pred_tree = self._tree_ids(conjuncts.attribute, conjuncts.kind)
        pred_niv = conjuncts.interval_count
        lo_closed, hi_closed = conjuncts.lo_closed, conjuncts.hi_closed
        n = len(lo_closed)
        ends = np.empty(2 * n, dtype=object)
        ends[:n] = conjuncts.lo
        ends[n:] = conjuncts.hi
        iv_pred = np.repeat(np.arange(len(pred_tree)), pred_niv)
        iv_tree = pred_tree[iv_pred]
        lo_bid, hi_bid, splits = self._reference_bounds(iv_tree, ends)
        del ends
        base, sizes, layout = forest.space_layout()
        lo, hi = self._positions(lo_bid, lo_closed, hi_bid, hi_closed)
        hi = np.minimum(hi, sizes[iv_tree] - 1)
        fraction = self._event_fraction(iv_pred, iv_tree, lo, hi, len(pred_tree), base)
        cover = np.bincount(iv_pred, weights=hi - lo + 1, minlength=len(pred_tree))
        iv_first = np.cumsum(pred_niv) - pred_niv
        rank = operator_ranks(iv_pred, iv_first, pred_niv, lo_bid, lo_closed, hi_bid,
                              hi_closed)
        order = np.lexsort((cover, rank, fraction, p_conj_column))
        # Rows are written in access order: predicates, then their intervals.
        _, iv_order = expand_ranges(iv_first[order], pred_niv[order])
        iv_base = len(self.iv_lo_bid)
        pred_base = len(self.rows)
        ordered_niv = pred_niv[order]
        rows = np.zeros(n_preds, dtype=ROW_DTYPE)  # hulls: at the next row_table()
        rows["tree"], rows["intervals"] = pred_tree[order], ordered_niv
        self.rows.extend(rows)
        del rows
        self.pred_iv_start.extend(iv_base + np.cumsum(ordered_niv) - ordered_niv)
        self.iv_lo_bid.extend(lo_bid[iv_order])
        self.iv_lo_closed.extend(lo_closed[iv_order])
        self.iv_hi_bid.extend(hi_bid[iv_order])
        self.iv_hi_closed.extend(hi_closed[iv_order])
        self._count_cover(base[iv_tree] + lo, hi - lo + 1, layout)
        counts = np.bincount(p_conj_column, minlength=len(conjuncts))
        starts = pred_base + np.cumsum(counts) - counts
        self.pred_start.put(cids, starts)
        self.pred_count.put(cids, counts)
        self.tree_mask.put(cids, tree_masks(p_conj_column, pred_tree, len(conjuncts)))
        # Where each stored predicate's covered spaces are, for the matchers' filing.
        rank_in_conj = np.arange(len(order)) - (starts - pred_base)[p_conj_column[order]]
        return InsertedConjuncts(
            cids=cids,
            splits=splits,
            pred_conj=p_conj_column[order],
            pred_k=rank_in_conj,
            pred_iv_first=np.cumsum(ordered_niv) - ordered_niv,
            pred_iv_count=ordered_niv,
            iv_covered_start=(base[iv_tree] + lo)[iv_order],
            iv_covered_count=(hi - lo + 1)[iv_order],
            pred_uncovered=(sizes[pred_tree] - cover)[order].astype(np.int64),
            layout=layout,
            residual=np.bincount(p_conj_column, weights=conjuncts.has_patterns,
                                 minlength=len(conjuncts)) > 0,
        )

    def _tree_ids(self, attribute: list[str], kind: np.ndarray) -> np.ndarray:
        """The tree of each predicate's (attribute, kind), trees created for new ones in
        order of first appearance. O(n) in C loops."""
        tree_of = self.forest.tree_of
        keys = list(zip(attribute, kind.tolist(), strict=True))
        tids = np.fromiter(map(tree_of.get, keys, repeat(-1)), np.int64, len(keys))
        missing = np.flatnonzero(tids < 0)
        if len(missing):
            new = list(map(keys.__getitem__, missing.tolist()))
            for name, k in dict.fromkeys(new):
                self.forest.tree(name, Kind(k))
            tids[missing] = np.fromiter(map(tree_of.__getitem__, new), np.int64, len(new))
        return tids

    def _count_cover(self, first: np.ndarray, count: np.ndarray, layout: np.ndarray,
                     step: int = 1) -> None:
        """Add ``step`` (one, or minus one for released intervals) to the predicate
        counter of every space the intervals cover, once per interval (global layout
        positions ``first .. first + count - 1``).

        Cost O(min(spaces covered, layout + intervals)): intervals covering nearly a
        whole tree (``!=``, ``not in``) are counted by a running sum over the layout, not
        expanded, so a flood of them stays linear.
        """
        counter = self.forest.spaces.predicate_counter
        if int(count.sum()) <= len(layout):
            _, covered = expand_ranges(first, count)
            # the counter's own type: with a Python int, ``np.add.at`` casts each entry
            # (about 30 times slower)
            np.add.at(counter, layout[covered], counter.dtype.type(step))
            return
        delta = np.bincount(first, minlength=len(layout) + 1)
        delta -= np.bincount(first + count, minlength=len(layout) + 1)
        counter[layout] += step * np.cumsum(delta[:-1]).astype(np.int32)

    def _reference_bounds(self, iv_tree: np.ndarray, ends: np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray, Splits]:
        """Reference every bounded interval end in its tree: ``ends`` holds the
        intervals' lower ends, then their upper ends (None: unbounded). Returns the
        bound ids of both (-1: unbounded) and the splits."""
        forest = self.forest
        n = len(iv_tree)
        bounded = np.flatnonzero(ends != None)  # noqa: E711 - elementwise test on objects
        end_tree = np.concatenate([iv_tree, iv_tree])[bounded]
        if not len(bounded) or (end_tree == end_tree[0]).all():
            groups = [bounded]  # one tree (a flood on one attribute): nothing to group
        else:
            order = np.argsort(end_tree, kind="stable")
            groups = np.split(bounded[order], np.flatnonzero(np.diff(end_tree[order])) + 1)
        del end_tree
        bids = np.full(2 * n, -1, dtype=np.int64)
        splits: list[Splits] = []
        for group in groups:
            if not len(group):
                continue
            tree = forest.trees[int(iv_tree[group[0] % n])]
            group_bids, group_splits = forest.add_bounds(tree, ends[group])
            bids[group] = group_bids
            splits.append(group_splits)
        return bids[:n], bids[n:], Splits.join(splits)

    def _event_fraction(self, iv_pred: np.ndarray, iv_tree: np.ndarray, lo: np.ndarray,
                        hi: np.ndarray, n_preds: int, base: np.ndarray) -> np.ndarray:
        """Share of each predicate's tree's past events that fell in its spaces (zero
        before any event, without building the history)."""
        if not self.forest.event_version:
            return np.zeros(n_preds)
        totals, cumulative = self.forest.event_history()
        if not totals.any():
            return np.zeros(n_preds)
        hits = cumulative[base[iv_tree] + hi + 1] - cumulative[base[iv_tree] + lo]
        per_pred = np.bincount(iv_pred, weights=hits, minlength=n_preds)
        pred_tree = np.zeros(n_preds, dtype=np.int64)
        pred_tree[iv_pred] = iv_tree
        return per_pred / np.maximum(totals[pred_tree], 1.0)

    def release(self, cids: np.ndarray) -> None:
        """Release removed conjuncts' rows, all at once: the predicate counter of every
        space their intervals cover goes down by one per interval, and their bounds lose
        a reference each (a bound left with none goes and its spaces merge,
        :meth:`index.pstree.forest.Forest.release_bounds`); the rows stay until
        :meth:`compact`. Cost O(intervals + spaces covered) vectorised (or the layout,
        if smaller), plus O(m) per tree that loses bounds, plus the forest's layout
        (O(spaces)) if spaces split or merged since it was last made."""
        _, pids = expand_ranges(self.pred_start.data[cids], self.pred_count.data[cids])
        iv_pred, iids = expand_ranges(self.pred_iv_start.data[pids], self.pred_iv_count[pids])
        iv_tree = self.pred_tree[pids[iv_pred]].astype(np.int64)
        lo_bid, hi_bid = self.iv_lo_bid.data[iids], self.iv_hi_bid.data[iids]
        base, sizes, layout = self.forest.space_layout()
        lo, hi = self._positions(lo_bid, self.iv_lo_closed.data[iids], hi_bid,
                                 self.iv_hi_closed.data[iids])
        hi = np.minimum(hi, sizes[iv_tree] - 1)
        self._count_cover(base[iv_tree] + lo, hi - lo + 1, layout, -1)
        self.forest.release_bounds(np.concatenate([lo_bid, hi_bid]))
        self.dead_rows += len(pids)

    @property
    def _columns(self) -> tuple[GrowableArray, ...]:
        return (self.pred_start, self.pred_count, self.tree_mask, self.rows,
                self.pred_iv_start, self.iv_lo_bid, self.iv_lo_closed, self.iv_hi_bid,
                self.iv_hi_closed)

    def compact(self) -> None:
        """Drop the rows of removed conjuncts. Called at each purge, which the registry
        makes due after an eighth of the live conjuncts were removed: the dead rows stay
        within about a ninth of the rows, and the O(rows) cost is amortised O(1) per
        removed row.

        In place: the live conjuncts, in the order of their rows, move their rows left
        over the dead ones about :data:`ROW_BLOCK` rows at a time (a row only moves left,
        so no block overwrites rows a later block has still to read), and the columns
        are then shrunk. The temporaries are a block's and a column of the live cids:
        expanded and copied whole, they raised a 1M worker's peak by 230 MiB at each
        purge under churn. What they freed is given back to the system at the end, as
        :meth:`index.core.multimap.MultiMap.compact` does."""
        if not self.dead_rows:
            return
        cids = np.flatnonzero(self.registry.alive.view())
        cids = cids[np.argsort(self.pred_start.view()[cids], kind="stable")]
        ends = np.cumsum(self.pred_count.view()[cids], dtype=np.int64)
        cuts = np.searchsorted(ends, np.arange(ROW_BLOCK, int(ends[-1]) if len(ends) else 0,
                                               ROW_BLOCK), side="right")
        pred_to = iv_to = 0
        for block in np.split(cids, cuts):
            pred_to, iv_to = self._move_rows_left(block, pred_to, iv_to)
        for column in (*self._predicate_columns, self.pred_iv_start):
            column.truncate(pred_to)
        for column in self._interval_columns:
            column.truncate(iv_to)
        self.dead_rows = 0
        self._hulls_version = -1
        release_free_heap()

    @property
    def _predicate_columns(self) -> tuple[GrowableArray, ...]:
        """The per-predicate-row columns a compaction moves as they are."""
        return (self.rows,)

    @property
    def _interval_columns(self) -> tuple[GrowableArray, ...]:
        return (self.iv_lo_bid, self.iv_lo_closed, self.iv_hi_bid, self.iv_hi_closed)

    def _move_rows_left(self, cids: np.ndarray, pred_to: int, iv_to: int) -> tuple[int, int]:
        """Move the rows of ``cids`` (live, in the order of their rows, all after the
        rows already moved) to predicate row ``pred_to`` and interval row ``iv_to`` on;
        returns where the next block's rows go."""
        counts = self.pred_count.view()[cids].astype(np.int64)
        _, pids = expand_ranges(self.pred_start.view()[cids], counts)
        self.pred_start.data[cids] = pred_to + np.cumsum(counts) - counts
        iv_counts = self.pred_iv_count[pids].astype(np.int64)
        _, iids = expand_ranges(self.pred_iv_start.view()[pids], iv_counts)
        moved = slice(pred_to, pred_to + len(pids))
        self.pred_iv_start.data[moved] = iv_to + np.cumsum(iv_counts) - iv_counts
        for column in self._predicate_columns:
            column.data[moved] = column.data[pids]
        for column in self._interval_columns:
            column.data[iv_to : iv_to + len(iids)] = column.data[iids]
        return pred_to + len(pids), iv_to + len(iids)

    # -- queries ---------------------------------------------------------------------

    def hull(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The hull of the intervals of each predicate row of ``rows``: the first
        interval's low end and the last one's high end, as ``(lo_bid, lo_closed,
        hi_bid, hi_closed)`` (bound id -1 is unbounded). O(len(rows)), gathers from the
        interval columns: not stored apart, which cost 10 bytes a row (60 MiB at 1M
        BE-Gen subscriptions, with the columns' spare capacity)."""
        first = self.pred_iv_start.data[rows]
        last = first + self.pred_iv_count[rows] - 1
        return (self.iv_lo_bid.data[first], self.iv_lo_closed.data[first],
                self.iv_hi_bid.data[last], self.iv_hi_closed.data[last])

    def predicate_row(self, cid: int, k: int) -> int:
        """Row of the conjunct's k-th predicate in access order."""
        return int(self.pred_start.data[cid]) + k

    def covered_sids(self, pid: int) -> np.ndarray:
        """Space ids a predicate row covers, in position order. O(spaces covered)."""
        forest = self.forest
        tree = forest.trees[int(self.pred_tree[pid])]
        first = int(self.pred_iv_start.data[pid])
        parts = []
        for iid in range(first, first + int(self.pred_iv_count[pid])):
            lo, hi = forest.covered_positions(
                tree, int(self.iv_lo_bid.data[iid]), bool(self.iv_lo_closed.data[iid]),
                int(self.iv_hi_bid.data[iid]), bool(self.iv_hi_closed.data[iid]))
            parts.append(tree.space_ids[lo : hi + 1])
        return np.concatenate(parts)

    def _positions(self, lo_bid: np.ndarray, lo_closed: np.ndarray, hi_bid: np.ndarray,
                   hi_closed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rank = self.forest.bound_rank
        lo_rank = rank[np.maximum(lo_bid, 0)].astype(np.int64)
        hi_rank = rank[np.maximum(hi_bid, 0)].astype(np.int64)
        lo = np.where(lo_bid < 0, 0, 2 * lo_rank + 2 - lo_closed.astype(np.int64))
        hi = np.where(hi_bid < 0, UNBOUNDED_HI, 2 * hi_rank + hi_closed.astype(np.int64))
        return lo, hi

    def row_table(self) -> np.ndarray:
        """The ``[rows, 4]`` int32 table :func:`index.pstree.kernels.verify_candidates`
        reads: :attr:`rows` as columns (no copy), per predicate row its tree, the first
        and last space position of its hull and its number of intervals, side by side
        so that one cache miss reads them.

        The hull positions depend on the trees' bounds: computed in place (O(rows),
        vectorised, :data:`ROW_BLOCK` rows at a time) for the rows added since the last
        call, or for every row after spaces split or merge or rows are compacted.
        """
        n = len(self.rows)
        table = self.rows.data[:n].view(np.int32).reshape(n, 4)
        done = self._hulls_done if self._hulls_version == self.forest.version else 0
        for begin in range(done, n, ROW_BLOCK):
            end = min(begin + ROW_BLOCK, n)
            table[begin:end, ROW_LO], table[begin:end, ROW_HI] = self._positions(
                *self.hull(np.arange(begin, end)))
        self._hulls_done, self._hulls_version = n, self.forest.version
        return table

    def verify(self, events: np.ndarray, cids: np.ndarray, checked: np.ndarray,
               positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Keep the live (event, conjunct) candidates whose predicates hold, from each
        candidate's ``checked``-th predicate in access order on (those before it are
        known to hold).

        ``positions`` is the chunk's ``[events, trees]`` position matrix (-1: absent).
        One call of the compiled :func:`index.pstree.kernels.verify_candidates`: cost
        O(sum over candidates of the predicates checked until the first false one), in
        memory latency mostly (see :mod:`index.pstree.kernels`). The ``like`` patterns
        rows cannot hold are left to the residual check.
        """
        rows = self.row_table()
        # The dtypes the families' lookups produce (no copy): one compiled signature.
        kept = verify_candidates(
            events.astype(np.int64, copy=False), cids.astype(np.int64, copy=False),
            checked.astype(np.int32, copy=False), positions, self.registry.alive.data,
            self.tree_mask.data, self.pred_start.data, self.pred_count.data, rows,
            self.pred_iv_start.data,
            self.iv_lo_bid.data, self.iv_lo_closed.data, self.iv_hi_bid.data,
            self.iv_hi_closed.data, self.forest.bound_rank)
        return events[kept].astype(np.int64, copy=False), cids[kept].astype(np.int64, copy=False)

    # -- bookkeeping -------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self._columns)

    def conjunct(self, cid: int) -> Conjunct:
        """The live conjunct ``cid`` rebuilt from its rows (values from the trees' bounds).

        Equal to the conjunct that was inserted. Cost O(predicates + intervals).
        """
        residual = self.registry.residual_conjuncts.get(cid)
        if residual is not None:
            return residual
        assert self.registry.alive.data[cid], f"conjunct {cid} is not live"
        forest = self.forest
        predicates = []
        start = int(self.pred_start.data[cid])
        for pid in range(start, start + int(self.pred_count.data[cid])):
            tree = forest.trees[int(self.pred_tree[pid])]
            first = int(self.pred_iv_start.data[pid])
            intervals = []
            for iid in range(first, first + int(self.pred_iv_count[pid])):
                lo_bid, hi_bid = int(self.iv_lo_bid.data[iid]), int(self.iv_hi_bid.data[iid])
                intervals.append(Interval(
                    None if lo_bid < 0 else tree.values[int(forest.bound_rank[lo_bid])],
                    bool(self.iv_lo_closed.data[iid]),
                    None if hi_bid < 0 else tree.values[int(forest.bound_rank[hi_bid])],
                    bool(self.iv_hi_closed.data[iid])))
            predicates.append(Predicate(tree.attribute, tree.kind, tuple(intervals)))
        return Conjunct(tuple(sorted(predicates, key=lambda p: p.attribute)))

    def check(self) -> None:
        """Assert the rows' invariants and that they agree with the trees' counters.

        Every live conjunct has predicates on distinct trees; every interval's bounds
        are live bounds of its predicate's tree and it covers at least one space;
        a predicate's intervals are in order and disjoint and its hull spans them;
        each space's predicate counter equals the number of intervals covering it; the
        hull positions :meth:`row_table` kept for the forest's version are its own.
        """
        forest = self.forest
        expected = np.zeros(forest.spaces.size, dtype=np.int64)
        registry = self.registry
        for cid in np.flatnonzero(registry.alive.view()).tolist():
            start, count = int(self.pred_start.data[cid]), int(self.pred_count.data[cid])
            trees = self.pred_tree[start : start + count]
            assert len(set(trees.tolist())) == count, f"conjunct {cid}: a tree twice"
            assert self.tree_mask.data[cid] == tree_masks(np.zeros(count, np.int64), trees, 1)[0]
            if registry.residual.data[cid]:
                assert any(p.patterns for p in self.conjunct(cid).predicates)
            for pid in range(start, start + count):
                tree = forest.trees[int(self.pred_tree[pid])]
                first, n = int(self.pred_iv_start.data[pid]), int(self.pred_iv_count[pid])
                spans = []
                for iid in range(first, first + n):
                    for bid in (int(self.iv_lo_bid.data[iid]), int(self.iv_hi_bid.data[iid])):
                        assert bid < 0 or (forest.bound_tree[bid] == tree.tree_id
                                           and tree.bound_ids[forest.bound_rank[bid]] == bid)
                    spans.append(forest.covered_positions(
                        tree, int(self.iv_lo_bid.data[iid]), bool(self.iv_lo_closed.data[iid]),
                        int(self.iv_hi_bid.data[iid]), bool(self.iv_hi_closed.data[iid])))
                assert all(lo <= hi for lo, hi in spans), f"predicate row {pid} is empty"
                assert all(a[1] < b[0] for a, b in pairwise(spans)), "intervals overlap"
                expected[self.covered_sids(pid)] += 1
        live = forest.spaces.alive[: forest.spaces.size]
        actual = forest.spaces.predicate_counter[: forest.spaces.size]
        assert (actual[live] == expected[live]).all(), "predicate counters disagree"
        if self._hulls_version == forest.version:  # the kept hull positions are current
            cids = np.flatnonzero(registry.alive.view())
            _, pids = expand_ranges(self.pred_start.data[cids], self.pred_count.data[cids])
            pids = pids[pids < self._hulls_done]
            lo, hi = self._positions(*self.hull(pids))
            rows = self.rows.data[pids]
            assert (rows["lo"] == lo).all() and (rows["hi"] == hi).all(), "a stale hull"
        assert len(self.pred_start) == len(self.pred_count) == len(registry)


@dataclass(slots=True)
class InsertedConjuncts:
    """What :meth:`ConjunctStore.insert_many` stored, for the matchers to file.

    Predicates are listed in storage order; ``pred_conj`` indexes ``cids`` and
    ``pred_k`` is the predicate's place in its conjunct's access order. Each
    predicate's intervals cover ``layout[iv_covered_start : + iv_covered_count]``.
    """

    cids: np.ndarray
    splits: Splits
    pred_conj: np.ndarray
    pred_k: np.ndarray
    pred_iv_first: np.ndarray
    pred_iv_count: np.ndarray
    iv_covered_start: np.ndarray
    iv_covered_count: np.ndarray
    pred_uncovered: np.ndarray
    """Per predicate: the spaces of its tree it does not cover."""
    layout: np.ndarray
    residual: np.ndarray
    """Per conjunct: it has ``like`` suffix/contains patterns the rows cannot hold."""

    def near_full(self, k: int) -> np.ndarray:
        """Per conjunct: its k-th predicate covers nearly its whole tree (False when it
        has no k-th predicate); see :func:`near_full`."""
        preds = self._kth(k)
        mask = np.zeros(len(self.cids), dtype=bool)
        mask[self.pred_conj[preds]] = near_full(self._cover(preds), self.pred_uncovered[preds])
        return mask

    def _kth(self, k: int, among: np.ndarray | None = None) -> np.ndarray:
        """The k-th predicate in access order of each conjunct of the mask ``among``
        (default: all) that has one, in storage order."""
        preds = np.flatnonzero(self.pred_k == k)
        return preds if among is None else preds[among[self.pred_conj[preds]]]

    def _cover(self, preds: np.ndarray) -> np.ndarray:
        owner, ivs = expand_ranges(self.pred_iv_first[preds], self.pred_iv_count[preds])
        return np.bincount(owner, weights=self.iv_covered_count[ivs],
                           minlength=len(preds)).astype(np.int64)

    def covered_count(self, k: int, among: np.ndarray) -> np.ndarray:
        """Per conjunct: how many spaces its k-th predicate covers (0 outside the mask
        ``among``, or without a k-th predicate), the lengths of :meth:`covered`'s runs
        without listing them. O(predicates + intervals)."""
        preds = self._kth(k, among)
        count = np.zeros(len(self.cids), dtype=np.int64)
        count[self.pred_conj[preds]] = self._cover(preds)
        return count

    def covered(self, k: int, among: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
        """(cid, space id) for every space covered by each conjunct's k-th predicate,
        for the conjuncts of the mask ``among`` (default: all): each conjunct's spaces
        in one run, the conjuncts in the order of ``cids``. O(the spaces listed)."""
        preds = self._kth(k, among)
        iv_owner, ivs = expand_ranges(self.pred_iv_first[preds], self.pred_iv_count[preds])
        owner, positions = expand_ranges(self.iv_covered_start[ivs], self.iv_covered_count[ivs])
        return self.cids[self.pred_conj[preds][iv_owner][owner]], self.layout[positions]

