"""OpIndex (Zhang, Chan & Tan, PVLDB 7(8), 2014): pivot attributes, operator lists, counting.

Owns the OpIndex matcher of "An Efficient Publish/Subscribe Index for E-Commerce
Databases" (Zhang, Chan & Tan, PVLDB 7(8), 2014): level 1, the counting and the
deletion here; level 2's lists and directory in :mod:`psmatch.baselines.opindex_lists`.
Its two levels map onto the paper's sections 4-6:

* *Level 1, subscription partitioning*: every conjunct (a DNF conjunct is a subscription
  of its own, section 6.1) gets one *pivot attribute* ``delta_S``, the attribute of its
  predicates that is least frequent in the event stream (equation 1). The frequencies are
  the per-(attribute, kind) event counts the forest keeps while locating events; before
  any event has been seen they are all zero and the number of indexed conjuncts with a
  predicate on the attribute stands in for them (the paper's "using the subscription
  database to approximate"). A conjunct keeps its pivot for life.
* *Level 2, predicate partitioning*: within a pivot's subscription list, every predicate
  goes into one of three operator lists, ``=``, ``>=`` and ``<=``, sorted by
  (attribute, operand). All of them are stored as one sorted run of ``int64`` keys
  ``block << 32 | threshold`` where a *block* is (pivot, attribute, operator). The
  directory from (pivot, attribute) to its blocks is a sorted array of
  ``pivot << 32 | attribute`` keys, so a pivot's rows are one range of it.

The value domain of each (attribute, kind) is the order-preserving encoding of the
PS-Tree forest (:class:`psmatch.pstree.forest.Forest`): the distinct operands ``b_0 < ... <
b_{m-1}`` of all predicates give positions ``2i`` (the gap below ``b_i``) and ``2i + 1``
(``b_i`` itself), so ints beyond 2**53, floats, strings and booleans all compare as
small integers. An operand is stored as its bound id and turned into a position
threshold through the forest's current ranks, hence strict ``<`` and ``>`` live in the
``<=`` and ``>=`` lists (``x > b`` is ``pos >= 2 rank(b) + 2``, ``x < b`` is ``pos <= 2
rank(b)``). The ``<=`` list is scanned from the event's position *up* to the end of the
block (``A <= c`` holds for ``x`` when ``c >= x``; the paper prints the direction
reversed), the ``>=`` list from the block start up to the event's position, ``=`` is an
equal range.

Every predicate of the language is a union of ``k`` disjoint intervals. Each bounded
interval end becomes one ``>=`` or ``<=`` entry and a point interval one ``=`` entry;
for a present value at most one interval holds, and exactly ``need = k + 1 - points -
unbounded ends`` entries match when one does (``k - points - unbounded ends`` when
none does). So ``in`` is the paper's disjunction of ``=`` sharing one counter slot,
``between`` is ``>=`` and ``<=``, and ``!=`` / ``not in`` need no special case. A
predicate with no bounded end (``like '%x'`` alone) gets one always-true ``<=`` entry
so that the attribute must be present. A conjunct matches when its counter reaches the
sum of its predicates' ``need``; ``like`` suffix/contains patterns, which are not
intervals, are then checked exactly in Python (the paper's section 6.2 plugs a trie
per extra operator into its lists; here ``like 'ab%'`` is already a string interval,
i.e. a range of the sorted list, which is what the paper's trie over "A#o" returns).

Matching (Algorithm 2), vectorised over a batch: locate every pair, take each pair
whose attribute is a pivot, combine it with the pairs of its event that have a
(pivot, attribute) block (walking the pivot's directory rows or the event's pairs,
whichever is shorter, so a wide event costs its pairs, not their square), test the ``=`` blocks'
64-bit signatures, binary-search all ranges at once, and count. The counters are the
paper's per-pivot counter arrays ``V_A`` (one slot per conjunct of the pivot's list),
allocated per (event, pivot present) for the work at hand, so only the counters of
pivots present in the event are ever touched, and counting is one ``bincount``.

Deviations, and why:

* *Segments and signatures*: the paper hashes attributes into ``b = 32`` segments per
  list, each with a 64-bit signature. The directory here is exact per (pivot,
  attribute), so every segment holds one attribute; the ``<=`` / ``>=`` signatures,
  which hash the attribute only, would always be set and are omitted; the ``=``
  segments keep their signature over the operand (the operand's point-space id).
* *Deletion*, which the paper leaves out: a removed conjunct is tombstoned (its entries
  stay in the lists and are dropped when counted) and the lists are rebuilt without the
  dead entries once they exceed an eighth of the index, so a remove costs O(p) plus
  amortised O(log n) per entry; the conjunct's bounds leave the forest at once.
* *Insertion*: new entries go to a small sorted *delta* run next to the *main* run and
  are merged into it once they exceed an eighth of it (amortised O(log n) per entry),
  instead of the paper's in-place sorted insert (O(eta) moves in a C array). When
  operands are added or released, main's thresholds are recomputed from the new ranks in
  O(n) before the next match (their order cannot change).

Costs: insert O(p log m) plus O(m) per new operand value; match per event
O(sum over pivots present of min(directory rows, m_E) log n) for the block searches
plus O(matched entries + counter slots of the pivots present).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from psmatch.baselines.opindex_lists import (
    EQ,
    GE,
    LE,
    Directory,
    EntryRun,
    OperatorLists,
    signature_bit,
)
from psmatch.core.columns import GrowableArray, expand_ranges, zero_padded
from psmatch.core.pipeline import Batch, Candidates
from psmatch.events import FlatEvent
from psmatch.pstree.matcher import ForestBatch, ForestMatcher
from psmatch.pstree.store import InsertedConjuncts


class OpIndexMatcher(ForestMatcher):
    """Two-level OpIndex: pivot subscription lists, then sorted operator lists."""

    name = "opindex"

    def __init__(self) -> None:
        super().__init__()
        # Level 1: per conjunct its pivot tree, counter slot in V_pivot and target count.
        self.pivot = GrowableArray(np.int64)
        self.counter_slot = GrowableArray(np.int64)
        self.need = GrowableArray(np.int64)
        self.list_size = np.zeros(0, dtype=np.int64)  # per tree: |V_A|, dead slots included
        self.attribute_use = np.zeros(0, dtype=np.int64)  # per tree: live conjuncts on it
        # Level 2: the directory (pivot, attribute) -> row, and the operator lists.
        self.directory = Directory()
        self.lists = OperatorLists(self.forest.version)

    # -- insertion ---------------------------------------------------------------------

    def _grow_tree_columns(self) -> None:
        n = len(self.forest.trees)
        if n > len(self.list_size):
            grow = max(n, 2 * len(self.list_size), 16)
            self.list_size = zero_padded(self.list_size, grow)
            self.attribute_use = zero_padded(self.attribute_use, grow)

    def _file_rows(self, inserted: InsertedConjuncts) -> None:
        """Algorithm 1 for a batch of new conjuncts, vectorised: choose each pivot, take a
        counter slot in its ``V_pivot``, append the entries to the delta run."""
        store, cids = self.store, inserted.cids
        self._grow_tree_columns()
        owner, pids = expand_ranges(store.pred_start.data[cids], store.pred_count.data[cids])
        trees = store.pred_tree[pids].astype(np.int64)
        np.add.at(self.attribute_use, trees, 1)
        # Pivot: the predicate tree with the fewest past events, then the fewest conjuncts.
        frequency = np.array([t.total_events for t in self.forest.trees], dtype=np.int64)
        order = np.lexsort((trees, self.attribute_use[trees], frequency[trees], owner))
        first = np.flatnonzero(np.diff(owner[order], prepend=-1))
        pivots = trees[order[first]]
        # Counter slots: appended to each pivot's counter array in cid order.
        by_pivot = np.argsort(pivots, kind="stable")
        sorted_pivots = pivots[by_pivot]
        group_start = np.searchsorted(sorted_pivots, sorted_pivots)
        counter_slot = np.empty(len(cids), dtype=np.int64)
        counter_slot[by_pivot] = (self.list_size[sorted_pivots]
                                  + np.arange(len(cids)) - group_start)
        np.add.at(self.list_size, pivots, 1)
        # Entries, one row of the directory per (pivot, predicate attribute).
        rows = self.directory.rows_of((pivots[owner] << 32) | trees)
        iv_owner, lo, lo_closed, hi, hi_closed = store.intervals(pids)
        point = (lo >= 0) & (lo == hi)
        ge = ~point & (lo >= 0)
        le = ~point & (hi >= 0)
        unbounded = (~point & (lo < 0)).astype(np.int64) + (~point & (hi < 0))
        n_preds = len(pids)
        need = (store.interval_counts(pids) + 1
                - np.bincount(iv_owner, weights=point + unbounded, minlength=n_preds)
                ).astype(np.int64)
        presence = np.flatnonzero(need == 0)  # no bounded end: the value must be present
        need[presence] = 1
        pred_cid = cids[owner]
        parts = (
            (iv_owner[point], EQ, lo[point], np.ones(int(point.sum()), np.int64)),
            (iv_owner[ge], GE, lo[ge], 2 - lo_closed[ge]),
            (iv_owner[le], LE, hi[le], hi_closed[le].astype(np.int64)),
            (presence, LE, np.full(len(presence), -1), np.zeros(len(presence), np.int64)),
        )
        for pred, op, bid, offset in parts:
            self.lists.append(3 * rows[pred] + op, bid, offset.astype(np.int64), pred_cid[pred])
        eq_pred = iv_owner[point]
        np.bitwise_or.at(self.directory.signature.data, rows[eq_pred],
                         signature_bit(self._point_sids(trees[eq_pred], lo[point])))
        conj_need = np.bincount(owner, weights=need, minlength=len(cids)).astype(np.int64)
        self.pivot.put(cids, pivots)
        self.counter_slot.put(cids, counter_slot)
        self.need.put(cids, conj_need)

    def _point_sids(self, trees: np.ndarray, bids: np.ndarray) -> np.ndarray:
        """Ids of the point spaces of bounds (stable while the bound is referenced)."""
        base, _, layout = self.forest.space_layout()
        rank = self.forest.bound_rank[bids].astype(np.int64)
        return layout[base[trees] + 2 * rank + 1]

    # -- deletion ----------------------------------------------------------------------

    def _unfile_rows(self, cids: np.ndarray) -> None:
        """The conjuncts leave the attribute counts; their entries are tombstones until
        the purge (dead conjuncts are dropped when counted)."""
        store = self.store
        _, pids = expand_ranges(store.pred_start.data[cids], store.pred_count.data[cids])
        np.subtract.at(self.attribute_use, store.pred_tree[pids], 1)

    def _purge(self) -> None:
        """Rebuild lists, signatures and counter slots without the removed conjuncts.
        O(n log n)."""
        alive = self.registry.alive
        self.lists.rebuild(alive.data[self.lists.entries()[3]], self.forest.bound_rank,
                           self.forest.version)
        self.directory.signature.replace(self._signatures())
        live = np.flatnonzero(alive.view())
        pivots = self.pivot.data[live]
        by_pivot = np.argsort(pivots, kind="stable")
        sorted_pivots = pivots[by_pivot]
        slots = np.empty(len(live), dtype=np.int64)
        slots[by_pivot] = np.arange(len(live)) - np.searchsorted(sorted_pivots, sorted_pivots)
        self.counter_slot.data[live] = slots
        self.list_size = np.bincount(pivots, minlength=len(self.list_size)).astype(np.int64)
        super()._purge()

    def _signatures(self) -> np.ndarray:
        """Every '=' segment's signature, from the entries of the main and delta runs."""
        block, bid, _, cid = self.lists.entries()
        eq = np.flatnonzero((block % 3 == EQ) & self.registry.alive.data[cid])
        rows = block[eq] // 3
        signature = np.zeros(len(self.directory.signature), dtype=np.uint64)
        sids = self._point_sids(self.directory.row_tree.data[rows], bid[eq])
        np.bitwise_or.at(signature, rows, signature_bit(sids))
        return signature

    # -- matching ----------------------------------------------------------------------

    def _begin(self, events: list[FlatEvent]) -> OpIndexBatch:
        located = super()._begin(events)
        tree = located.located.tree
        return OpIndexBatch(located.events, 0, located.located, located.pair_start,
                            runs=self.lists.runs(self.forest.bound_rank,
                                                 self.forest.version, self.registry.alive.data),
                            pivots=np.flatnonzero(self.list_size[tree] > 0) if len(tree) else tree)

    def _candidates(self, batch: Batch, first: int, last: int) -> Candidates:
        """Algorithm 2 for the pivot attributes present in events ``first .. last - 1``:
        the conjuncts whose counters reach their targets, exact."""
        assert isinstance(batch, OpIndexBatch)
        located, pair_start = batch.located, batch.pair_start
        pivots = batch.pivots[np.searchsorted(batch.pivots, pair_start[first]) :
                              np.searchsorted(batch.pivots, pair_start[last])]
        if not len(pivots):
            empty = np.empty(0, dtype=np.int64)
            return Candidates(empty, empty, 0)
        e, c, work = self._count(batch.runs, pivots, located.event, located.tree,
                                 located.position, located.sid, pair_start)
        return Candidates(e - first, c, work)

    def _count(self, runs: list[EntryRun], pivots: np.ndarray, ev: np.ndarray, tree: np.ndarray,
               pos: np.ndarray, sid: np.ndarray,
               pair_start: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """Count matched entries for a group of (event, pivot present) counter arrays.

        Returns the (event, cid) pairs whose counter reached the conjunct's target, and
        the work: counter slots plus (pivot, pair) combinations.
        """
        pivot_tree = tree[pivots]
        sizes = self.list_size[pivot_tree]
        base = np.cumsum(sizes) - sizes
        pivot_event = ev[pivots]
        owner, pair, rows = self._blocks(pivot_tree, pivot_event, ev, tree, pair_start)
        p = pos[pair]
        is_point = (p & 1) == 1
        signature = self.directory.signature.data
        eq = np.flatnonzero(is_point & ((signature[rows] & signature_bit(sid[pair])) != 0))
        counter, cids = [], []
        for run in runs:
            for op, sel in ((EQ, eq), (GE, slice(None)), (LE, slice(None))):
                start, count = run.ranges(op, rows[sel], p[sel])
                which, entry = expand_ranges(start, count)
                entry_cid = run.cid[entry]
                counter.append(base[owner[sel][which]] + self.counter_slot.data[entry_cid])
                cids.append(entry_cid)
        counter_cells = np.concatenate(counter)
        cid = np.concatenate(cids)
        live = self.registry.alive.data[cid]
        counter_cells, cid = counter_cells[live], cid[live]
        total = int(sizes.sum())
        counts = np.bincount(counter_cells, minlength=total)
        cell_cid = np.zeros(total, dtype=np.int64)
        cell_cid[counter_cells] = cid
        hit = np.flatnonzero(counts)
        hit = hit[counts[hit] == self.need.data[cell_cid[hit]]]
        owner_of_hit = np.searchsorted(base, hit, side="right") - 1
        return pivot_event[owner_of_hit], cell_cid[hit], total + len(pivots) + len(owner)

    def _blocks(self, pivot_tree: np.ndarray, pivot_event: np.ndarray, ev: np.ndarray,
                tree: np.ndarray, pair_start: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The (pivot present, located pair, directory row) combinations whose
        (pivot, attribute) has a directory row.

        Each pivot either walks its directory rows and finds their attributes among its
        event's pairs, or walks its event's pairs and finds them in the directory,
        whichever is shorter: cost O(sum over pivots of min(rows, event pairs)) plus
        logarithmic searches, never pivots x pairs for a wide event.
        """
        keys, key_rows = self.directory.sorted()
        first = pair_start[pivot_event]
        n_pairs = pair_start[pivot_event + 1] - first
        row_start = np.searchsorted(keys, pivot_tree << 32)
        n_rows = np.searchsorted(keys, (pivot_tree + 1) << 32) - row_start
        walk = n_rows <= n_pairs
        # Through the pivot's rows: find each row's attribute among the event's pairs.
        w = np.flatnonzero(walk)
        o, r = expand_ranges(row_start[w], n_rows[w])
        event_key = (ev << 32) | tree
        by_key = np.argsort(event_key, kind="stable")
        want = (pivot_event[w[o]] << 32) | (keys[r] & 0xFFFFFFFF)
        at = by_key[np.minimum(np.searchsorted(event_key[by_key], want), len(ev) - 1)]
        hit = event_key[at] == want
        owner_a, pair_a, rows_a = w[o[hit]], at[hit], key_rows[r[hit]]
        # Through the event's pairs: find each (pivot, attribute) in the directory.
        s = np.flatnonzero(~walk)
        o, pair = expand_ranges(first[s], n_pairs[s])
        want = (pivot_tree[s[o]] << 32) | tree[pair]
        at = np.minimum(np.searchsorted(keys, want), max(len(keys) - 1, 0))
        hit = keys[at] == want if len(keys) else np.zeros(len(want), bool)
        return (np.concatenate([owner_a, s[o[hit]]]), np.concatenate([pair_a, pair[hit]]),
                np.concatenate([rows_a, key_rows[at[hit]]]))

    # -- bookkeeping -------------------------------------------------------------------

    def _family_bytes(self) -> int:
        level1 = (self.pivot.nbytes + self.counter_slot.nbytes + self.need.nbytes
                  + self.list_size.nbytes + self.attribute_use.nbytes)
        return int(self.lists.nbytes + level1 + self.directory.nbytes)

    def _check(self) -> None:
        super()._check()
        store, alive = self.store, self.registry.alive
        self.lists.check()
        self.directory.check()
        row_tree = self.directory.row_tree.data
        block, _, _, cid = self.lists.entries()
        live_entry = alive.data[cid]
        rows = block // 3
        row_pivot = self.directory.pivots()
        entries_of: dict[int, list[int]] = {}
        for i in np.flatnonzero(live_entry).tolist():
            entries_of.setdefault(int(cid[i]), []).append(i)
        counter_slots: set[tuple[int, int]] = set()
        use = np.zeros(len(self.list_size), dtype=np.int64)
        for c in np.flatnonzero(alive.view()).tolist():
            conjunct = store.conjunct(c)
            trees = {self.forest.tree_of[(p.attribute, p.kind)] for p in conjunct.predicates}
            use[list(trees)] += 1
            pivot = int(self.pivot.data[c])
            assert pivot in trees, "the pivot is not one of the conjunct's attributes"
            counter_slot = int(self.counter_slot.data[c])
            assert 0 <= counter_slot < self.list_size[pivot]
            assert (pivot, counter_slot) not in counter_slots, "counter slot shared"
            counter_slots.add((pivot, counter_slot))
            mine = rows[entries_of[c]]
            assert (row_pivot[mine] == pivot).all(), "entry outside the pivot's lists"
            assert set(row_tree[mine].tolist()) == trees, "predicate not listed"
            assert len(trees) <= self.need.data[c] <= len(mine)
        assert (use == self.attribute_use[: len(use)]).all(), "attribute use counts disagree"
        signature = self.directory.signature.view()
        assert not (self._signatures() & ~signature).any(), "'=' operand missing in signature"


@dataclass(slots=True, kw_only=True)
class OpIndexBatch(ForestBatch):
    """A located batch with the sorted runs to search and its pivot pairs."""

    runs: list[EntryRun]
    pivots: np.ndarray
    """Indexes of the located pairs whose tree is some conjunct's pivot, by event."""
