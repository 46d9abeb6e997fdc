"""Columnar storage of indexed conjuncts and their exact, vectorised verification.

Owns the part every PS-Tree matcher shares: each conjunct's predicates, stored as rows
of numpy columns in *access order* (most selective first, by the event counters of the
spaces they cover, with the paper's operator ranking breaking ties and standing in when
there is no history), the predicate intervals as pairs of bound ids into the
:class:`index.pstree.Forest`, and :meth:`ConjunctStore.verify`, which checks a batch of
(event, conjunct) candidates predicate by predicate with integer comparisons on space
positions, dropping a candidate at its first false predicate.

Conjunct ids (``cid``) are dense and reused only after :meth:`ConjunctStore.reclaim`,
which the matchers call after purging their posting lists, so a stale posting can
never point at another conjunct.
"""

from __future__ import annotations

import numpy as np

from index.columns import GrowableArray, expand_ranges
from index.language import Conjunct, Predicate, Value
from index.pstree import UNBOUNDED_HI, Forest, Merge, PSTree, Split


class ConjunctStore:
    """Conjuncts as columns; predicates as rows in access order.

    Columns per conjunct: ``slot`` (the subscription), ``pred_start``/``pred_count``
    (its predicate rows), ``alive``, ``has_patterns`` (needs the Python fallback for
    ``like`` suffix/contains). Columns per predicate row: ``pred_tree``,
    ``iv_start``/``iv_count`` (its intervals) and the hull of its intervals
    (``lo_bid``, ``lo_closed``, ``hi_bid``, ``hi_closed``; bound id -1 is unbounded).
    """

    def __init__(self, forest: Forest) -> None:
        self.forest = forest
        self.slot = GrowableArray(np.int64)
        self.pred_start = GrowableArray(np.int64)
        self.pred_count = GrowableArray(np.int32)
        self.alive = GrowableArray(np.bool_)
        self.has_patterns = GrowableArray(np.bool_)
        self.conjuncts: list[Conjunct | None] = []
        self.pred_tree = GrowableArray(np.int32)
        self.pred_iv_start = GrowableArray(np.int64)
        self.pred_iv_count = GrowableArray(np.int32)
        self.pred_lo_bid = GrowableArray(np.int64)
        self.pred_lo_closed = GrowableArray(np.bool_)
        self.pred_hi_bid = GrowableArray(np.int64)
        self.pred_hi_closed = GrowableArray(np.bool_)
        self.iv_lo_bid = GrowableArray(np.int64)
        self.iv_lo_closed = GrowableArray(np.bool_)
        self.iv_hi_bid = GrowableArray(np.int64)
        self.iv_hi_closed = GrowableArray(np.bool_)
        self._free: list[int] = []
        self._removed: list[int] = []
        self.live = 0
        self.dead_rows = 0

    # -- insertion and removal ------------------------------------------------------

    def insert(self, slot: int, conjunct: Conjunct) -> tuple[int, list[Split], list[np.ndarray]]:
        """Store a conjunct, inserting its bounds into the PS-Trees.

        Returns its cid, the splits caused and, per predicate in access order, the
        space ids it covers. Cost O(p log m) plus O(m) per new bound.
        """
        forest = self.forest
        splits: list[Split] = []
        staged = []
        for predicate in conjunct.predicates:
            tree = forest.tree(predicate.attribute, predicate.kind)
            bounds = []
            for interval in predicate.intervals:
                lo_bid, hi_bid, new_splits = forest.add_interval(tree, interval)
                splits.extend(new_splits)
                bounds.append((lo_bid, interval.lo_closed, hi_bid, interval.hi_closed))
            staged.append((predicate, tree, bounds))
        staged.sort(key=lambda item: self._selectivity(item[0], item[1], item[2]))
        cid = self._free.pop() if self._free else len(self.conjuncts)
        start = len(self.pred_tree)
        covered = []
        for _predicate, tree, bounds in staged:
            self.pred_tree.append(tree.tree_id)
            self.pred_iv_start.append(len(self.iv_lo_bid))
            self.pred_iv_count.append(len(bounds))
            self.pred_lo_bid.append(bounds[0][0])
            self.pred_lo_closed.append(bounds[0][1])
            self.pred_hi_bid.append(bounds[-1][2])
            self.pred_hi_closed.append(bounds[-1][3])
            sids = []
            for lo_bid, lo_closed, hi_bid, hi_closed in bounds:
                self.iv_lo_bid.append(lo_bid)
                self.iv_lo_closed.append(lo_closed)
                self.iv_hi_bid.append(hi_bid)
                self.iv_hi_closed.append(hi_closed)
                lo, hi = forest.covered_positions(tree, lo_bid, lo_closed, hi_bid, hi_closed)
                sids.append(tree.space_ids[lo : hi + 1])
                forest.spaces.predicate_counter[sids[-1]] += 1
            covered.append(sids[0] if len(sids) == 1 else np.concatenate(sids))
        values = (slot, start, len(staged), True, any(p.patterns for p in conjunct.predicates))
        if cid == len(self.conjuncts):
            self.conjuncts.append(conjunct)
            for column, value in zip(self._conjunct_columns, values, strict=True):
                column.append(value)
        else:
            self.conjuncts[cid] = conjunct
            for column, value in zip(self._conjunct_columns, values, strict=True):
                column.data[cid] = value
        self.live += 1
        return cid, splits, covered

    @property
    def _conjunct_columns(self) -> tuple[GrowableArray, ...]:
        return (self.slot, self.pred_start, self.pred_count, self.alive, self.has_patterns)

    def _selectivity(self, predicate: Predicate, tree: PSTree,
                     bounds: list[tuple[int, bool, int, bool]]) -> tuple[float, tuple[int, int]]:
        """Fraction of past events on this tree the predicate matched; then op rank."""
        fraction = 0.0
        if tree.total_events:
            hits = 0
            for lo_bid, lo_closed, hi_bid, hi_closed in bounds:
                lo, hi = self.forest.covered_positions(tree, lo_bid, lo_closed, hi_bid,
                                                       hi_closed)
                hits += int(self.forest.spaces.event_counter[tree.space_ids[lo : hi + 1]].sum())
            fraction = hits / tree.total_events
        return fraction, predicate.operator_rank

    def remove(self, cid: int) -> list[Merge]:
        """Drop a conjunct: counters down, bounds released (spaces merge). O(p m)."""
        forest = self.forest
        merges: list[Merge] = []
        start = int(self.pred_start.data[cid])
        for pid in range(start, start + int(self.pred_count.data[cid])):
            tree = forest.trees[int(self.pred_tree.data[pid])]
            first = int(self.pred_iv_start.data[pid])
            for iid in range(first, first + int(self.pred_iv_count.data[pid])):
                lo_bid, hi_bid = int(self.iv_lo_bid.data[iid]), int(self.iv_hi_bid.data[iid])
                lo, hi = forest.covered_positions(
                    tree, lo_bid, bool(self.iv_lo_closed.data[iid]),
                    hi_bid, bool(self.iv_hi_closed.data[iid]))
                forest.spaces.predicate_counter[tree.space_ids[lo : hi + 1]] -= 1
                merges.extend(forest.release_interval(tree, lo_bid, hi_bid))
        self.alive.data[cid] = False
        self.conjuncts[cid] = None
        self._removed.append(cid)
        self.live -= 1
        self.dead_rows += int(self.pred_count.data[cid])
        return merges

    def reclaim(self) -> None:
        """Make removed cids reusable; call once no posting list refers to them."""
        self._free.extend(self._removed)
        self._removed.clear()
        if self.dead_rows > len(self.pred_tree) // 2:
            self._compact_rows()

    def _compact_rows(self) -> None:
        cids = np.flatnonzero(self.alive.view())
        pred_owner, pids = expand_ranges(self.pred_start.view()[cids],
                                         self.pred_count.view()[cids])
        iv_owner, iids = expand_ranges(self.pred_iv_start.view()[pids],
                                       self.pred_iv_count.view()[pids])
        new_pred_start = np.zeros(len(self.pred_start), dtype=np.int64)
        counts = self.pred_count.view()[cids].astype(np.int64)
        new_pred_start[cids] = np.cumsum(counts) - counts
        iv_counts = self.pred_iv_count.view()[pids].astype(np.int64)
        new_iv_start = np.cumsum(iv_counts) - iv_counts
        for column in (self.pred_tree, self.pred_iv_count, self.pred_lo_bid,
                       self.pred_lo_closed, self.pred_hi_bid, self.pred_hi_closed):
            column.replace(column.view()[pids])
        self.pred_iv_start.replace(new_iv_start)
        for column in (self.iv_lo_bid, self.iv_lo_closed, self.iv_hi_bid, self.iv_hi_closed):
            column.replace(column.view()[iids])
        self.pred_start.replace(new_pred_start)
        self.dead_rows = 0
        del pred_owner, iv_owner

    # -- queries ---------------------------------------------------------------------

    def predicate_row(self, cid: int, k: int) -> int:
        """Row of the conjunct's k-th predicate in access order."""
        return int(self.pred_start.data[cid]) + k

    def covered_sids(self, pid: int) -> np.ndarray:
        """Space ids a predicate row covers, in position order. O(spaces covered)."""
        forest = self.forest
        tree = forest.trees[int(self.pred_tree.data[pid])]
        first = int(self.pred_iv_start.data[pid])
        parts = []
        for iid in range(first, first + int(self.pred_iv_count.data[pid])):
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

    def verify(self, events: np.ndarray, cids: np.ndarray, start: int,
               positions: np.ndarray, flat_events: list[dict[str, Value]],
               event_offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Keep the (event, conjunct) candidates whose predicates from ``start`` on hold.

        ``positions`` is the chunk's ``[events, trees]`` position matrix (-1: absent).
        Works predicate by predicate over all candidates at once, so the cost is
        O(sum over candidates of the predicates checked until the first false one).
        Conjuncts with ``like`` suffix/contains patterns are finished in Python.
        """
        keep = self.alive.data[cids]
        events, cids = events[keep], cids[keep]
        done_e, done_c = [], []
        k = start
        pred_start, pred_count = self.pred_start.data, self.pred_count.data
        n_trees = positions.shape[1]
        flat_positions = positions.ravel()
        while len(cids):
            finished = pred_count[cids] <= k
            if finished.any():
                done_e.append(events[finished])
                done_c.append(cids[finished])
                events, cids = events[~finished], cids[~finished]
                if not len(cids):
                    break
            pid = pred_start[cids] + k
            pos = flat_positions[events * n_trees + self.pred_tree.data[pid]]
            lo, hi = self._positions(self.pred_lo_bid.data[pid], self.pred_lo_closed.data[pid],
                                     self.pred_hi_bid.data[pid], self.pred_hi_closed.data[pid])
            ok = (pos >= lo) & (pos <= hi)
            multi = np.flatnonzero(ok & (self.pred_iv_count.data[pid] > 1))
            if len(multi):
                ok[multi] = self._inside_any_interval(pid[multi], pos[multi])
            events, cids = events[ok], cids[ok]
            k += 1
        if not done_e:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty
        events, cids = np.concatenate(done_e), np.concatenate(done_c)
        patterned = np.flatnonzero(self.has_patterns.data[cids])
        if len(patterned):
            keep = np.ones(len(cids), dtype=bool)
            for i in patterned:
                conjunct = self.conjuncts[int(cids[i])]
                assert conjunct is not None
                keep[i] = conjunct.evaluate(flat_events[int(events[i]) + event_offset])
            events, cids = events[keep], cids[keep]
        return events, cids

    def _inside_any_interval(self, pids: np.ndarray, pos: np.ndarray) -> np.ndarray:
        owner, iids = expand_ranges(self.pred_iv_start.data[pids], self.pred_iv_count.data[pids])
        lo, hi = self._positions(self.iv_lo_bid.data[iids], self.iv_lo_closed.data[iids],
                                 self.iv_hi_bid.data[iids], self.iv_hi_closed.data[iids])
        inside = (pos[owner] >= lo) & (pos[owner] <= hi)
        return np.bincount(owner, weights=inside, minlength=len(pids)) > 0

    # -- bookkeeping -------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        columns = (self.slot, self.pred_start, self.pred_count, self.alive, self.has_patterns,
                   self.pred_tree, self.pred_iv_start, self.pred_iv_count, self.pred_lo_bid,
                   self.pred_lo_closed, self.pred_hi_bid, self.pred_hi_closed, self.iv_lo_bid,
                   self.iv_lo_closed, self.iv_hi_bid, self.iv_hi_closed)
        # The Conjunct objects are kept for patterns and re-selection: ~8 bytes a pointer.
        return sum(c.nbytes for c in columns) + 8 * len(self.conjuncts)

    @property
    def live_predicates(self) -> int:
        cids = np.flatnonzero(self.alive.view())
        return int(self.pred_count.view()[cids].sum())

    def check(self) -> None:
        """Assert that rows match the stored conjuncts and the trees' counters."""
        forest = self.forest
        expected = np.zeros(forest.spaces.size, dtype=np.int64)
        for cid, conjunct in enumerate(self.conjuncts):
            assert bool(self.alive.data[cid]) == (conjunct is not None)
            if conjunct is None:
                continue
            count = int(self.pred_count.data[cid])
            assert count == len(conjunct.predicates)
            attributes = set()
            for k in range(count):
                pid = self.predicate_row(cid, k)
                tree = forest.trees[int(self.pred_tree.data[pid])]
                attributes.add((tree.attribute, tree.kind))
                expected[self.covered_sids(pid)] += 1
            assert attributes == {(p.attribute, p.kind) for p in conjunct.predicates}
        live = forest.spaces.alive[: forest.spaces.size]
        actual = forest.spaces.predicate_counter[: forest.spaces.size]
        assert (actual[live] == expected[live]).all(), "predicate counters disagree"
