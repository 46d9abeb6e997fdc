"""PB+tree (Wang, Zhang, Kitsuregawa): a B+tree-based predicate index per attribute,
followed by a counting phase 2.

Owns one :class:`PBTree` per (attribute, kind). The paper's structure, columnar:

* the *B+tree leaf list*: items keyed by predicate constant whose SidSet holds the
  subscriptions with ``attr = key``, ``attr <= key`` or ``attr >= key``: a
  :class:`psmatch.baselines.sorted_entries.SortedEntries` of (constant, cid), i.e. the leaf
  items in key order with their SidSets flattened. Binary search on the sorted keys
  stands in for the descent from the root (the same O(log n)).
* the *GreaterThan list* (``>`` and ``>=``, ascending key), the *LessThan list*
  (``<`` and ``<=``) and the *Inequality list* (``!=``), each sorted by key. The paper
  reaches them from the leaf through GTPointer/LTPointer/INEQPointer; here each list is
  binary-searched directly for the same position, so an insertion needs no pointer
  fix-up (the paper's O(n) worst case) and costs O(1) until the next build.

Search for a value x (the paper's fig. 8, for a whole batch of values at once): the
leaf SidSet at x, the GreaterThan entries with key < x (the backward scan to the
head), the LessThan entries with key > x (the forward scan to the tail), and the
Inequality list as "every ``!=`` conjunct minus those listed under x" (an
:class:`psmatch.baselines.sorted_entries.ExclusionList`; ``not in`` is one entry with several
points). Each hit is an (event, cid) pair, with multiplicity: ``between`` is ``>=`` plus
``<=`` on one attribute and must count twice, which a set of sids would lose. Phase 2
counts the hits per conjunct (:func:`psmatch.baselines.two_phase.count_complete`) and a
conjunct matches when its count equals its number of paper predicates. Operators the
paper lacks map as in :func:`psmatch.baselines.paper_predicates.decompose` (``in`` = several ``=``
items of one conjunct, at most one of which can hit).

Deletion (the paper: "the reverse procedure of insertion", details skipped): a removed
conjunct's size becomes -1 so its count never completes, and its entries stay in the
lists until removals reach an eighth of the index; then every list drops the entries
of dead conjuncts in one O(n) filter (amortised O(predicates) per removal).

Cost per event pair: O(log n + L) with L the entries satisfied, as in the paper; then
O(hits) counting (one sort of the hits).
Memory O(predicate occurrences).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from psmatch.baselines.paper_predicates import Op, PaperPredicate
from psmatch.baselines.sorted_entries import (
    ExclusionList,
    Keys,
    SortedEntries,
    encode,
    expected_entries,
    owners_found,
)
from psmatch.baselines.two_phase import TwoPhaseMatcher, count_complete
from psmatch.core.columns import group_pairs
from psmatch.events import FlatEvent
from psmatch.language import Kind, Value


class PBTree:
    """The PB+tree of one (attribute, kind): leaf items and the three lists."""

    def __init__(self, kind: Kind) -> None:
        self.kind = kind
        self.leaf = SortedEntries(kind)
        self.greater = SortedEntries(kind)
        self.less = SortedEntries(kind)
        self.inequality = ExclusionList(kind)

    def insert(self, cid: int, predicate: PaperPredicate) -> None:
        """File one predicate of conjunct ``cid``. O(1) until the next build."""
        op, constants = predicate.op, predicate.constants
        if op is Op.NE:
            self.inequality.add(cid, constants)
            return
        for constant in constants:
            if op in (Op.EQ, Op.LE, Op.GE):
                self.leaf.add(constant, cid)
            if op in (Op.GT, Op.GE):
                self.greater.add(constant, cid)
            if op in (Op.LT, Op.LE):
                self.less.add(constant, cid)

    @property
    def structures(self) -> tuple[SortedEntries, SortedEntries, SortedEntries, ExclusionList]:
        return self.leaf, self.greater, self.less, self.inequality

    def build(self, alive: np.ndarray, purge: bool = False) -> None:
        """Merge pending entries; with ``purge``, also drop entries of dead conjuncts."""
        for structure in self.structures:
            if purge:
                structure.mark_dead()
            if structure.dirty:
                structure.build(alive)

    @property
    def dirty(self) -> bool:
        return any(s.dirty for s in self.structures)

    def search(self, values: list[Value]) -> tuple[np.ndarray, np.ndarray]:
        """(value index, cid) for every predicate each value satisfies (fig. 8)."""
        queries: Keys = encode(self.kind, values)
        found = [
            (self.leaf, self.leaf.equal(queries)),
            (self.greater, self.greater.below(queries, inclusive=False)),
            (self.less, self.less.above(queries, inclusive=False)),
        ]
        return owners_found(queries, found, self.inequality)

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.structures)


class PBTreeMatcher(TwoPhaseMatcher):
    """A PB+tree per attribute, then one counter per conjunct."""

    name = "pbtree"

    def __init__(self) -> None:
        super().__init__()
        self.trees: list[PBTree] = []
        self.tree_of: dict[tuple[str, Kind], int] = {}
        self._dirty: set[int] = set()

    def _tree_id(self, predicate: PaperPredicate) -> int:
        key = (predicate.attribute, predicate.kind)
        tid = self.tree_of.get(key)
        if tid is None:
            tid = self.tree_of[key] = len(self.trees)
            self.trees.append(PBTree(predicate.kind))
        return tid

    def _file_predicates(self, cid: int, predicates: list[PaperPredicate]) -> None:
        for predicate in predicates:
            tid = self._tree_id(predicate)
            self.trees[tid].insert(cid, predicate)
            self._dirty.add(tid)

    def _prepare(self) -> None:
        alive = self.registry.alive.data
        for tid in self._dirty:
            self.trees[tid].build(alive)
        self._dirty.clear()

    def _purge(self) -> None:
        self._prepare()
        for tree in self.trees:
            tree.build(self.registry.alive.data, purge=True)

    def _complete(self, events: list[FlatEvent]) -> tuple[np.ndarray, np.ndarray, int]:
        parts_e, parts_c = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
        for tid, (rows, values) in group_pairs(events, self.tree_of).items():
            pair, cids = self.trees[tid].search(values)
            parts_e.append(np.asarray(rows, dtype=np.int64)[pair])
            parts_c.append(cids)
        ev, cids = np.concatenate(parts_e), np.concatenate(parts_c)
        e, c = count_complete(ev, cids, self.size.data)
        return e, c, len(cids)

    def _structure_bytes(self) -> int:
        return self._conjunct_bytes() + sum(t.nbytes for t in self.trees)

    def _check(self) -> None:
        super()._check()
        alive = self.registry.alive.data
        want: dict[tuple[int, str], list[tuple[Value, int]]] = {}
        want_ne: dict[int, Counter[int]] = {}
        for cid, predicates in self.live_conjuncts():
            for predicate in predicates:
                tid = self.tree_of[(predicate.attribute, predicate.kind)]
                op = predicate.op
                lists = (["inequality"] if op is Op.NE else
                         ["leaf"] * (op in (Op.EQ, Op.LE, Op.GE))
                         + ["greater"] * (op in (Op.GT, Op.GE))
                         + ["less"] * (op in (Op.LT, Op.LE)))
                for name in lists:
                    want.setdefault((tid, name), []).extend(
                        (c, cid) for c in predicate.constants)
                if op is Op.NE:
                    want_ne.setdefault(tid, Counter())[cid] += 1
        for tid, tree in enumerate(self.trees):
            for name in ("leaf", "greater", "less"):
                entries: SortedEntries = getattr(tree, name)
                entries.check()
                assert entries.live(alive) == expected_entries(tree.kind,
                                                               want.get((tid, name), []))
            tree.inequality.check()
            owners, points = tree.inequality.live(alive)
            assert owners == want_ne.get(tid, Counter()), "a conjunct twice in a != list"
            assert points == expected_entries(tree.kind, want.get((tid, "inequality"), []))
            assert tid in self._dirty or not tree.dirty
