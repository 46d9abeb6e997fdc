"""The conjunct store: predicate rows filed against the forest, and their exact verification.

Owns the part every forest matcher shares: each conjunct's predicates, stored as
:class:`psmatch.pstree.rows.PredicateRows` in *access order* (most selective first, by the
event counters of the spaces they cover, with the paper's operator ranking breaking ties
and standing in when there is no history), their bounds referenced in the
:class:`psmatch.pstree.forest.Forest` and the spaces they cover counted there; and
:meth:`ConjunctStore.verify`, which checks a batch of (event, conjunct) candidates
predicate by predicate with integer comparisons on space positions, dropping a candidate
at its first false predicate (the compiled loop of
:func:`psmatch.pstree.kernels.verify_candidates`). What an insert stored is handed to the
matchers as :class:`InsertedConjuncts`.

Conjunct ids (``cid``) come from the :class:`psmatch.core.registry.ConjunctRegistry`;
the store keeps rows per cid and reads liveness and residual conjuncts from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise, repeat

import numpy as np

from psmatch.core.columns import expand_ranges
from psmatch.core.registry import ConjunctRegistry
from psmatch.language import Conjunct, Interval, Kind, Predicate
from psmatch.language.columns import ConjunctColumns
from psmatch.pstree.forest import UNBOUNDED_HI, Forest
from psmatch.pstree.kernels import verify_candidates
from psmatch.pstree.rows import (
    ROW_DTYPE,
    PredicateRows,
    bound_codes,
    run_field,
    run_starts,
    tree_masks,
)
from psmatch.pstree.spaces import Splits

NEAR_FULL_SPACES = 32
"""A predicate covering more spaces than this, and at least 8 times more than it leaves
out, is *near-full* (:func:`near_full`)."""

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


def tree_ids(forest: Forest, attribute: list[str], kind: np.ndarray) -> np.ndarray:
    """The tree of each predicate's (attribute, kind), trees created for new ones in
    order of first appearance. O(n) in C loops."""
    tree_of = forest.tree_of
    keys = list(zip(attribute, kind.tolist(), strict=True))
    tids = np.fromiter(map(tree_of.get, keys, repeat(-1)), np.int64, len(keys))
    missing = np.flatnonzero(tids < 0)
    if len(missing):
        new = list(map(keys.__getitem__, missing.tolist()))
        for name, k in dict.fromkeys(new):
            forest.tree(name, Kind(k))
        tids[missing] = np.fromiter(map(tree_of.__getitem__, new), np.int64, len(new))
    return tids

def count_cover(forest: Forest, first: np.ndarray, count: np.ndarray, layout: np.ndarray,
                step: int = 1) -> None:
    """Add ``step`` (one, or minus one for released intervals) to the predicate
    counter of every space the intervals cover, once per interval (global layout
    positions ``first .. first + count - 1``).

    Cost O(min(spaces covered, layout + intervals)): intervals covering nearly a
    whole tree (``!=``, ``not in``) are counted by a running sum over the layout, not
    expanded, so a flood of them stays linear.
    """
    counter = forest.spaces.predicate_counter
    if int(count.sum()) <= len(layout):
        _, covered = expand_ranges(first, count)
        # the counter's own type: with a Python int, ``np.add.at`` casts each entry
        # (many times slower)
        np.add.at(counter, layout[covered], counter.dtype.type(step))
        return
    delta = np.bincount(first, minlength=len(layout) + 1)
    delta -= np.bincount(first + count, minlength=len(layout) + 1)
    counter[layout] += step * np.cumsum(delta[:-1]).astype(np.int32)

def reference_bounds(forest: Forest, iv_tree: np.ndarray, ends: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, Splits]:
    """Reference every bounded interval end in its tree: ``ends`` holds the
    intervals' lower ends, then their upper ends (None: unbounded). Returns the
    bound ids of both (-1: unbounded) and the splits."""
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

def event_fraction(forest: Forest, iv_pred: np.ndarray, iv_tree: np.ndarray, lo: np.ndarray,
                   hi: np.ndarray, n_preds: int, base: np.ndarray) -> np.ndarray:
    """Share of each predicate's tree's past events that fell in its spaces (zero
    before any event, without building the history)."""
    if not forest.event_version:
        return np.zeros(n_preds)
    totals, cumulative = forest.event_history()
    if not totals.any():
        return np.zeros(n_preds)
    hits = cumulative[base[iv_tree] + hi + 1] - cumulative[base[iv_tree] + lo]
    per_pred = np.bincount(iv_pred, weights=hits, minlength=n_preds)
    pred_tree = np.zeros(n_preds, dtype=np.int64)
    pred_tree[iv_pred] = iv_tree
    return per_pred / np.maximum(totals[pred_tree], 1.0)


class ConjunctStore(PredicateRows):
    """The predicate rows of the registry's conjuncts, filed against the forest.

    Inserting conjuncts puts their predicates in access order, references their bounds
    in the PS-Trees and counts the spaces they cover; releasing them undoes both. At 1M
    BE-Gen subscriptions (5M rows, 7M intervals) the rows take 84 MB. Conjuncts with
    ``like`` suffix/contains patterns, which rows cannot hold, are residual in the
    registry.
    """

    def __init__(self, forest: Forest, registry: ConjunctRegistry) -> None:
        super().__init__()
        self.forest = forest
        self.registry = registry

    # -- insertion and removal ------------------------------------------------------

    def insert_many(self, cids: np.ndarray, conjuncts: ConjunctColumns) -> InsertedConjuncts:
        """Store the rows of new conjuncts, inserting their bounds into the PS-Trees.

        Each conjunct's predicates are put in access order: fewest past events in the
        spaces they cover first (the paper's selectivity), then the operator ranking,
        then the smallest share of their tree's spaces covered (the paper's "narrower
        value sets first", read against each domain, so that before any event
        ``dest = 'LAX'`` among a hundred destinations comes before ``carrier = 'UA'``
        among sixteen carriers, not after it by the attributes' names).
        Cost: vectorised work proportional to the spaces the predicates cover, plus O(m)
        per tree that gets new bounds, plus one dictionary lookup per predicate for its
        tree.
        """
        forest = self.forest
        n_preds = len(conjuncts.kind)
        p_conj_column = np.repeat(np.arange(len(conjuncts), dtype=np.int64),
                                  conjuncts.predicate_count)
        pred_tree = tree_ids(forest, conjuncts.attribute, conjuncts.kind)
        pred_niv = conjuncts.interval_count
        lo_closed, hi_closed = conjuncts.lo_closed, conjuncts.hi_closed
        n = len(lo_closed)
        ends = np.empty(2 * n, dtype=object)
        ends[:n] = conjuncts.lo
        ends[n:] = conjuncts.hi
        iv_pred = np.repeat(np.arange(len(pred_tree)), pred_niv)
        iv_tree = pred_tree[iv_pred]
        lo_bid, hi_bid, splits = reference_bounds(forest, iv_tree, ends)
        del ends
        base, sizes, layout = forest.space_layout()
        lo, hi = self.positions(lo_bid, lo_closed, hi_bid, hi_closed)
        hi = np.minimum(hi, sizes[iv_tree] - 1)
        fraction = event_fraction(forest, iv_pred, iv_tree, lo, hi, len(pred_tree), base)
        cover = np.bincount(iv_pred, weights=hi - lo + 1, minlength=len(pred_tree))
        iv_first = np.cumsum(pred_niv) - pred_niv
        rank = operator_ranks(iv_pred, iv_first, pred_niv, lo_bid, lo_closed, hi_bid,
                              hi_closed)
        order = np.lexsort((cover / sizes[pred_tree], rank, fraction, p_conj_column))
        # Rows are written in access order, and the runs of their intervals with them.
        _, iv_order = expand_ranges(iv_first[order], pred_niv[order])
        pred_base = len(self.rows)
        ordered_niv = pred_niv[order]
        lo_code, hi_code = bound_codes(lo_bid, lo_closed), bound_codes(hi_bid, hi_closed)
        rows = np.empty(n_preds, dtype=ROW_DTYPE)
        rows["tree"] = pred_tree[order]
        rows["lo"] = lo_code[iv_first[order]]
        rows["hi"] = hi_code[iv_first[order] + ordered_niv - 1]
        multi = np.flatnonzero(ordered_niv > 1)
        run_length = 1 + 2 * ordered_niv[multi]
        run_start = np.cumsum(run_length) - run_length
        rows["lo"][multi] = run_field(len(self.runs) + run_start)
        runs = np.empty(int(run_length.sum()), dtype=np.int32)
        runs[run_start] = ordered_niv[multi]
        run_owner, ivs = expand_ranges(iv_first[order][multi], ordered_niv[multi])
        at = run_start[run_owner] + 1 + 2 * (ivs - iv_first[order][multi][run_owner])
        runs[at], runs[at + 1] = lo_code[ivs], hi_code[ivs]
        self.rows.extend(rows)
        self.runs.extend(runs)
        del rows, runs
        count_cover(forest, base[iv_tree] + lo, hi - lo + 1, layout)
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

    def release(self, cids: np.ndarray) -> None:
        """Release removed conjuncts' rows, all at once: the predicate counter of every
        space their intervals cover goes down by one per interval, and their bounds lose
        a reference each (a bound left with none goes and its spaces merge,
        :meth:`psmatch.pstree.forest.Forest.release_bounds`); the rows stay until
        :meth:`compact`. Cost O(intervals + spaces covered) vectorised (or the layout,
        if smaller), plus O(m) per tree that loses bounds, plus the forest's layout
        (O(spaces)) if spaces split or merged since it was last made."""
        _, pids = expand_ranges(self.pred_start.data[cids], self.pred_count.data[cids])
        iv_pred, lo_bid, lo_closed, hi_bid, hi_closed = self.intervals(pids)
        iv_tree = self.pred_tree[pids[iv_pred]].astype(np.int64)
        base, sizes, layout = self.forest.space_layout()
        lo, hi = self.positions(lo_bid, lo_closed, hi_bid, hi_closed)
        hi = np.minimum(hi, sizes[iv_tree] - 1)
        count_cover(self.forest, base[iv_tree] + lo, hi - lo + 1, layout, -1)
        self.forest.release_bounds(np.concatenate([lo_bid, hi_bid]))
        self.dead_rows += len(pids)

    def compact(self) -> None:
        """Drop the rows of removed conjuncts (:meth:`compact_rows` of the live ones).
        Called at each purge, which the registry makes due after an eighth of the live
        conjuncts were removed: the dead rows stay within about a ninth of the rows, and
        the O(rows) cost is amortised O(1) per removed row."""
        if self.dead_rows:
            self.compact_rows(np.flatnonzero(self.registry.alive.view()))

    # -- queries ---------------------------------------------------------------------

    def covered_sids(self, pid: int) -> np.ndarray:
        """Space ids a predicate row covers, in position order. O(spaces covered)."""
        forest = self.forest
        tree = forest.trees[int(self.pred_tree[pid])]
        _, *bounds = self.intervals(np.array([pid]))
        parts = []
        for lo_bid, lo_closed, hi_bid, hi_closed in zip(*map(np.ndarray.tolist, bounds),
                                                        strict=True):
            lo, hi = forest.covered_positions(tree, lo_bid, lo_closed, hi_bid, hi_closed)
            parts.append(tree.space_ids[lo : hi + 1])
        return np.concatenate(parts)

    def positions(self, lo_bid: np.ndarray, lo_closed: np.ndarray, hi_bid: np.ndarray,
                  hi_closed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The first and last space positions intervals cover in their trees (their
        bound ids and closed flags; the last is :data:`UNBOUNDED_HI` for an unbounded
        high end). O(n), vectorised."""
        rank = self.forest.bound_rank
        lo_rank = rank[np.maximum(lo_bid, 0)].astype(np.int64)
        hi_rank = rank[np.maximum(hi_bid, 0)].astype(np.int64)
        lo = np.where(lo_bid < 0, 0, 2 * lo_rank + 2 - lo_closed.astype(np.int64))
        hi = np.where(hi_bid < 0, UNBOUNDED_HI, 2 * hi_rank + hi_closed.astype(np.int64))
        return lo, hi

    def verify(self, events: np.ndarray, cids: np.ndarray, checked: np.ndarray,
               positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Keep the live (event, conjunct) candidates whose predicates hold, from each
        candidate's ``checked``-th predicate in access order on (those before it are
        known to hold).

        ``positions`` is the chunk's ``[events, trees]`` position matrix (-1: absent).
        One call of the compiled :func:`psmatch.pstree.kernels.verify_candidates`: cost
        O(sum over candidates of the predicates checked until the first false one), in
        memory latency mostly (see :mod:`psmatch.pstree.kernels`). The ``like`` patterns
        rows cannot hold are left to the residual check.
        """
        rows = self.row_table()
        # The dtypes the families' lookups produce (no copy): one compiled signature.
        kept = verify_candidates(
            events.astype(np.int64, copy=False), cids.astype(np.int64, copy=False),
            checked.astype(np.int32, copy=False), positions, self.registry.alive.data,
            self.tree_mask.data, self.pred_start.data, self.pred_count.data, rows,
            self.runs.data, self.forest.bound_rank)
        return events[kept].astype(np.int64, copy=False), cids[kept].astype(np.int64, copy=False)

    # -- bookkeeping -------------------------------------------------------------------

    def conjunct(self, cid: int) -> Conjunct:
        """The live conjunct ``cid`` rebuilt from its rows (values from the trees' bounds).

        Equal to the conjunct that was inserted. Cost O(predicates + intervals).
        """
        residual = self.registry.residual_conjuncts.get(cid)
        if residual is not None:
            return residual
        assert self.registry.alive.data[cid], f"conjunct {cid} is not live"
        forest = self.forest
        start = int(self.pred_start.data[cid])
        pids = np.arange(start, start + int(self.pred_count.data[cid]))
        intervals: list[list[Interval]] = [[] for _ in pids]
        owner, lo_bid, lo_closed, hi_bid, hi_closed = map(np.ndarray.tolist, self.intervals(pids))
        for k, lo, lo_c, hi, hi_c in zip(owner, lo_bid, lo_closed, hi_bid, hi_closed,
                                         strict=True):
            values = forest.trees[int(self.pred_tree[pids[k]])].values
            intervals[k].append(Interval(
                None if lo < 0 else values[int(forest.bound_rank[lo])], lo_c,
                None if hi < 0 else values[int(forest.bound_rank[hi])], hi_c))
        predicates = [Predicate(forest.trees[int(self.pred_tree[pid])].attribute,
                                forest.trees[int(self.pred_tree[pid])].kind, tuple(ivs))
                      for pid, ivs in zip(pids.tolist(), intervals, strict=True)]
        return Conjunct(tuple(sorted(predicates, key=lambda p: p.attribute)))

    def check(self) -> None:
        """Assert the rows' invariants and that they agree with the trees' counters.

        Every live conjunct has predicates on distinct trees; every interval's bounds
        are live bounds of its predicate's tree and it covers at least one space;
        a predicate's intervals are in order and disjoint and its row's hull spans them;
        a row has a run exactly when it has several intervals, and the runs of the live
        rows are disjoint and in the order of their rows (what compaction relies on);
        each space's predicate counter equals the number of intervals covering it.
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
            pids = np.arange(start, start + count)
            owner, *bounds = self.intervals(pids)
            spans: list[list[tuple[int, int]]] = [[] for _ in pids]
            for k, lo_bid, lo_closed, hi_bid, hi_closed in zip(
                    *map(np.ndarray.tolist, (owner, *bounds)), strict=True):
                tree = forest.trees[int(trees[k])]
                for bid in (lo_bid, hi_bid):
                    assert bid < 0 or (forest.bound_tree[bid] == tree.tree_id
                                       and tree.bound_ids[forest.bound_rank[bid]] == bid)
                spans[k].append(forest.covered_positions(tree, lo_bid, lo_closed, hi_bid,
                                                         hi_closed))
            has_run = (run_starts(self.rows.data["lo"][pids]) >= 0).tolist()
            for k, pid in enumerate(pids.tolist()):
                assert all(lo <= hi for lo, hi in spans[k]), f"predicate row {pid} is empty"
                assert all(a[1] < b[0] for a, b in pairwise(spans[k])), "intervals overlap"
                assert has_run[k] == (len(spans[k]) > 1), "a run"
                expected[self.covered_sids(pid)] += 1
            last = np.cumsum(np.bincount(owner, minlength=count)) - 1
            first = np.concatenate(([0], last[:-1] + 1))
            ends = (bounds[0][first], bounds[1][first], bounds[2][last], bounds[3][last])
            assert all(map(np.array_equal, ends, self.hull(pids))), "a hull"
        live = forest.spaces.alive[: forest.spaces.size]
        actual = forest.spaces.predicate_counter[: forest.spaces.size]
        assert (actual[live] == expected[live]).all(), "predicate counters disagree"
        cids = np.flatnonzero(registry.alive.view())
        cids = cids[np.argsort(self.pred_start.data[cids], kind="stable")]
        _, pids = expand_ranges(self.pred_start.data[cids], self.pred_count.data[cids])
        run = run_starts(self.rows.data["lo"][pids])
        run = run[run >= 0]
        run_end = run + 1 + 2 * self.runs.data[run].astype(np.int64)
        assert (run_end[:-1] <= run[1:]).all() and (run_end <= len(self.runs)).all(), "runs"
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

