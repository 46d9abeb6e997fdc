"""BE-Tree (Sadoghi & Jacobsen, SIGMOD 2011): space partitioning and space clustering.

Owns the BE-Tree matcher of "BE-Tree: An Index Structure to Efficiently Match Boolean
Expressions over High-dimensional Discrete Space" (Sadoghi & Jacobsen, SIGMOD 2011,
sections 4-6), with the paper's errors corrected where they apply below. The
structure is the paper's:

* a *c-node* holds an *l-node* (the conjuncts stored there, with its capacity
  ``max_cap^j``) and a *p-directory* (a dict attribute -> p-node); the root is a c-node;
* a *p-node* (one attribute, never used twice on a path) owns a *c-directory*: a binary
  grid of *buckets* over the attribute's domain, each bucket being a c-node again;
* every conjunct lives in the smallest existing bucket enclosing the *hull* of its
  predicate on the bucket's attribute (the insertion rule). Predicates map to hulls
  as in Table 1: ``!=`` and ``not in`` (and ``like '%x'``) to the whole domain, ``in``
  to ``[v_1, v_k]``, ranges and ``between`` to themselves; the leaf check re-evaluates
  every predicate exactly, so hulls only have to contain the true value sets.

Insertion (Alg. 3, 4) follows one path, choosing at each c-node the p-node of highest
score (the number of conjuncts below it, the paper's optimistic popularity ranking)
among the conjunct's unused attributes; an overflowing l-node triggers the two-phase
space cutting. A batch (``add_many``) is inserted as a whole, the paper's algorithms
applied to groups rather than one conjunct at a time (issue 9: 100,000 ``a = i`` were
100,000 walks and 25,000 one-bucket splits re-reading every moved conjunct): the batch
walks down together, split with numpy at each node by the scores the p-nodes had
before the batch, and an overflowing bucket is clustered level by level down to
buckets that fit, its conjuncts placed once at the end. Batches of a few conjuncts
(single adds) walk one at a time, as the paper does.
*Space partitioning* (Alg. 5) repeatedly takes the most frequent unused
attribute of the l-node's conjuncts that at least ``MIN_SIZE`` of them share, creates
its p-node and moves them; when no attribute is eligible the l-node's capacity grows
(``max_cap^j = ceil(|l| / max_cap) max_cap``) instead of looping. *Space clustering*
(Alg. 6) splits an overflowing non-atomic leaf bucket ``[lo, hi]`` at ``m = (lo + hi) //
2`` into ``[lo, m]`` and ``[m + 1, hi]`` (the paper's ``end/2`` is wrong for buckets not
starting at 0) and moves the conjuncts a child encloses; a non-leaf or atomic bucket is
partitioned instead. Both phases run on one work list rather than by recursion.
Matching (Alg. 1, 2) walks from the root: at each c-node its l-node is a candidate
list, and for each event attribute with a p-node the walk descends the c-directory
into the one child whose range holds the event's value ("IsEnclosed(event, child)").

Patterns. ``like '%x%'`` and ``like '%x'`` have no hull narrower than the whole
domain, so 20,000 contains patterns on one attribute share one l-node that every event
carrying the attribute reaches. An l-node therefore keeps a conjunct that has an
*access pattern* (:func:`psmatch.core.patterns.access_pattern`, the pattern the registry
files in its :class:`psmatch.core.patterns.PatternIndex`) under that pattern, its
*gate*: an event reaches only the gates whose pattern holds on it, found by the
pattern index once per event, so the leaf check sees the pattern's candidates only.
The access pattern is a necessary condition of its conjunct, so no match is lost.

Domains. BE-Tree assumes discrete finite domains ``[v_min, v_max]``; here each
(attribute, kind) has the PS-Tree forest's order-preserving encoding
(:class:`psmatch.pstree.forest.Forest`): the distinct operand values ``b_0 < ... < b_{m-1}`` of
the stored predicates give the finite discrete domain of positions ``0 .. 2m``
(``2i`` the gap below ``b_i``, ``2i + 1`` the value ``b_i``), which takes unbounded
numbers, floats, ints beyond 2**53, strings and booleans alike. The domain grows as
values arrive, so bucket bounds are not stored as positions but as *cuts* anchored to
values ("just before v" / "just after v", or the domain's ends); a cut's position is
recomputed from the current bounds when a bucket splits, and an event value is
compared with cuts directly (Python's exact int/float comparison). Growth never moves
a value across a cut, so the enclosure relations the tree relies on are stable; a
bucket atomic today (one position) may become divisible later, and is then split when
it next overflows.

Deletion, which the paper leaves out ("conceptually similar to matching"): the conjunct
leaves its l-node (each conjunct records its c-node), p-node scores on its path drop,
the l-node capacity is re-evaluated, a pair of leaf buckets whose conjuncts, with their
open parent's, are fewer than its capacity folds back into it (the merge rule), and an empty
p-node's c-directory is removed, propagating upward. Each bucket on the way up first
tries to fold its own children: they may have emptied while a p-directory below the
bucket kept them apart, and would otherwise stay (churn left such empty buckets behind:
1.57 x a fresh build's bytes after 15,000 replacements at 1,000 live).

The walk is a Python loop per event (the nature of the structure); the leaf scans are
vectorised: all (event, conjunct) candidates of a batch are checked together, predicate
by predicate, by :meth:`psmatch.pstree.store.ConjunctStore.verify`. Not implemented: the
cost-based ranking with loss over event windows and l-node recycling (section 5); the
paper's own experiments set their weights so that popularity decides.

Costs: a batch of n conjuncts, O(c-nodes visited or made) in Python plus O(n x
predicates x depth) vectorised; match per event
O(visited nodes) in Python plus O(candidates x predicates) vectorised.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass
from itertools import chain

import numpy as np

from psmatch.core.columns import distinct_sorted, expand_ranges, find_sorted
from psmatch.core.patterns import PatternKey, access_pattern
from psmatch.core.pipeline import Batch, Candidates
from psmatch.events import FlatEvent
from psmatch.language import Conjunct, Value, kind_of
from psmatch.pstree.matcher import ForestMatcher
from psmatch.pstree.store import InsertedConjuncts

MAX_CAP = 5
"""``max_cap``: the paper's leaf capacity for matching probabilities below 1% (Table 4)."""
MIN_SIZE = 3
"""``min_size``: conjuncts that must share an attribute for it to partition an l-node."""
SMALL_BATCH = 8
"""Batches up to this size are filed one conjunct at a time (numpy's fixed cost per call
exceeds a Python walk's for a handful of conjuncts)."""

Cut = tuple
"""A bucket bound: ``(0,)`` below everything, ``(2,)`` above everything, ``(1, v, 0)``
just before ``v``, ``(1, v, 2)`` just after ``v``; an event value ``x`` is ``(1, x, 1)``."""
LOWEST: Cut = (0,)
HIGHEST: Cut = (2,)
Hull = tuple[Cut, Cut]


class CNode:
    """A c-node: l-node, p-directory and, unless it is the root, its bucket.

    The l-node's conjuncts are split by their access pattern (see the module
    docstring): ``lnode`` holds those without one, ``gates`` (None until needed) maps
    an access pattern to the conjuncts filed under it; ``size`` counts both.
    """

    __slots__ = ("attrs", "capacity", "gates", "hi", "left", "lnode", "lo", "pdir", "pnode",
                 "right", "size", "up", "used")

    def __init__(self, used: frozenset[int], pnode: PNode | None = None,
                 lo: Cut = LOWEST, hi: Cut = HIGHEST, up: CNode | None = None) -> None:
        self.lnode: set[int] = set()
        self.gates: dict[PatternKey, set[int]] | None = None
        self.size = 0
        self.attrs: dict[int, int] = {}  # attribute -> l-node conjuncts with a predicate on it
        self.capacity = MAX_CAP
        self.pdir: dict[int, PNode] = {}
        self.used = used  # attributes of the p-nodes on the path from the root
        self.pnode = pnode  # the p-node whose c-directory holds this bucket (None: root)
        self.lo, self.hi = lo, hi  # the bucket [lo, hi) between two cuts
        self.up = up  # parent bucket in the c-directory
        self.left: CNode | None = None
        self.right: CNode | None = None

    def encloses(self, hull: Hull) -> bool:
        return self.lo <= hull[0] and hull[1] <= self.hi

    def members(self) -> list[int]:
        """Every conjunct of the l-node. O(size)."""
        if not self.gates:
            return list(self.lnode)
        return [*self.lnode, *chain.from_iterable(self.gates.values())]


class PNode:
    """A p-node: one attribute, its score and the root bucket of its c-directory."""

    __slots__ = ("parent", "root", "score", "tree")

    def __init__(self, tree: int, parent: CNode) -> None:
        self.tree = tree
        self.parent = parent
        self.score = 0
        self.root = CNode(parent.used | {tree}, self)


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


class BETreeMatcher(ForestMatcher):
    """BE-Tree over the PS-Tree forest's value encoding, with exact leaf checks."""

    name = "betree"

    def __init__(self) -> None:
        super().__init__()
        self.root = CNode(frozenset())
        self._node_of: dict[int, CNode] = {}
        self._gate_of: dict[int, PatternKey] = {}  # cid -> its access pattern, if any

    # -- hulls and cuts ----------------------------------------------------------------

    def _hulls(self, cid: int) -> dict[int, Hull]:
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

    def _trees(self, cid: int) -> list[int]:
        """The attribute trees of the conjunct's predicates. O(predicates)."""
        start = int(self.store.pred_start.data[cid])
        return self.store.pred_tree[start : start + int(self.store.pred_count.data[cid])
                                         ].tolist()

    def _hull_rows(self, cids: np.ndarray) -> HullRows:
        """The hulls of ``cids`` as cuts of the current domains (the same cuts as
        :meth:`_hulls`, numbered). O(their predicates), vectorised."""
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

    def _midpoint(self, bucket: CNode) -> Cut | None:
        """The cut splitting a bucket into ``[lo, m]`` and ``[m + 1, hi]``; None if atomic.

        Positions are the current domain's ``0 .. 2m``; cut ``k`` separates positions
        ``k - 1`` and ``k``. O(log m).
        """
        assert bucket.pnode is not None
        values = self.forest.trees[bucket.pnode.tree].values
        k = _middle(_boundary(values, bucket.lo), _boundary(values, bucket.hi))
        return None if k is None else _cut(values, k)

    # -- insertion ---------------------------------------------------------------------

    def _file(self, cids: np.ndarray, conjuncts: list[Conjunct]) -> np.ndarray:
        """Note each new conjunct's access pattern (the registry files the same one in
        its pattern index), then file the batch."""
        for cid, conjunct in zip(cids.tolist(), conjuncts, strict=True):
            access = access_pattern(conjunct)
            if access is not None:
                attribute, pattern = access
                self._gate_of[cid] = (attribute, pattern.form, pattern.text)
        return super()._file(cids, conjuncts)

    def _file_rows(self, inserted: InsertedConjuncts) -> None:
        """InsertBETree / InsertCDir for a whole batch, then the space cutting of every
        l-node that overflowed.

        The batch walks down together: at each c-node each conjunct takes the p-node of
        highest score among its attributes (scores as they were before the batch), and
        in each c-directory the smallest existing bucket enclosing its hull; a group is
        split with numpy at each node it passes. Cost O(nodes visited) in Python plus
        O(predicates x depth) vectorised, plus the space cutting. A batch of at most
        :data:`SMALL_BATCH` conjuncts (single adds) walks one conjunct at a time in
        Python instead, where numpy's fixed cost per call would dominate.
        """
        if len(inserted.cids) <= SMALL_BATCH:
            placed = [self._walk(cid) for cid in inserted.cids.tolist()]
            self._settle(placed)
            return
        rows = self._hull_rows(inserted.cids.astype(np.int64))
        work = [(self.root, np.arange(len(rows.cids)))]
        placed: list[CNode] = []
        while work:
            node, group = work.pop()
            choice = self._choose(node, group, rows)
            if (choice < 0).any():
                self._place([node], np.zeros(int((choice < 0).sum()), np.int64),
                            group[choice < 0], rows)
                placed.append(node)
            for tree in distinct_sorted(choice[choice >= 0]).tolist():
                members = group[choice == tree]
                pnode = node.pdir[tree]
                pnode.score += len(members)
                work.extend(self._descend_cdir(pnode, members, rows))
        self._settle(placed)

    def _walk(self, cid: int) -> CNode:
        """InsertBETree / InsertCDir for one conjunct: down one path, choosing at each
        c-node the p-node of highest score, into the smallest enclosing bucket; puts the
        conjunct there and returns that c-node. O(depth + predicates) in Python."""
        hulls = self._hulls(cid)
        node = self.root
        while True:
            best: PNode | None = None
            for tree in hulls:
                pnode = node.pdir.get(tree)
                if pnode is not None and (best is None or pnode.score > best.score):
                    best = pnode
            if best is None:
                break
            best.score += 1
            node = _home(best.root, hulls[best.tree])
        self._put(cid, node, list(hulls))
        return node

    def _choose(self, node: CNode, group: np.ndarray, rows: HullRows) -> np.ndarray:
        """Per conjunct of ``group`` at ``node``: the tree of its p-node of highest score
        (its first such predicate on ties), -1 when none of its attributes has one."""
        choice = np.full(len(group), -1, np.int64)
        if not node.pdir:
            return choice
        trees = np.array(sorted(node.pdir), dtype=np.int64)
        scores = np.array([node.pdir[t].score for t in trees.tolist()], dtype=np.int64)
        owner, at = expand_ranges(rows.first[group], rows.count[group])
        row_tree = rows.tree[at]
        slot, known = find_sorted(trees, row_tree)
        score = np.where(known, scores[slot], -1)
        best = np.full(len(group), -1, np.int64)
        np.maximum.at(best, owner, score)
        hit = np.flatnonzero((score >= 0) & (score == best[owner]))
        owners, first = np.unique(owner[hit], return_index=True)
        choice[owners] = row_tree[hit[first]]
        return choice

    def _descend_cdir(self, pnode: PNode, members: np.ndarray,
                      rows: HullRows) -> list[tuple[CNode, np.ndarray]]:
        """InsertCDir for a group: each member's smallest existing enclosing bucket.
        Returns the (bucket, members) pairs reached."""
        values = self.forest.trees[pnode.tree].values
        lo, hi = rows.on(members, pnode.tree)
        reached = []
        stack = [(pnode.root, members, lo, hi)]
        while stack:
            bucket, members, lo, hi = stack.pop()
            left, right = bucket.left, bucket.right
            if left is None or right is None:
                reached.append((bucket, members))
                continue
            k = _boundary(values, left.hi)
            go_left, go_right = hi <= k, lo >= k
            stay = ~(go_left | go_right)
            if stay.any():
                reached.append((bucket, members[stay]))
            for child, go in ((left, go_left), (right, go_right)):
                if go.any():
                    stack.append((child, members[go], lo[go], hi[go]))
        return reached

    def _place(self, nodes: list[CNode], at: np.ndarray, members: np.ndarray,
               rows: HullRows) -> None:
        """Put ``members`` (indices into ``rows.cids``) into the l-nodes ``nodes[at]``.
        O(members + their predicates): a dict or set step each (numpy's fixed cost per
        call would dominate the many small groups of a deep tree)."""
        cids = rows.cids[members].tolist()
        targets = [nodes[i] for i in at.tolist()]
        self._node_of.update(zip(cids, targets, strict=True))
        gate_of = self._gate_of
        if len(nodes) == 1 and not gate_of:
            nodes[0].lnode.update(cids)
            nodes[0].size += len(cids)
        else:
            for cid, node in zip(cids, targets, strict=True):
                self._enter(cid, node)
        _, pred = expand_ranges(rows.first[members], rows.count[members])
        for i, tree in zip(np.repeat(at, rows.count[members]).tolist(),
                           rows.tree[pred].tolist(), strict=True):
            attrs = nodes[i].attrs
            attrs[tree] = attrs.get(tree, 0) + 1

    def _enter(self, cid: int, node: CNode) -> None:
        """Put ``cid`` in ``node``'s l-node, under its access pattern's gate if it has one."""
        gate = self._gate_of.get(cid)
        if gate is None:
            node.lnode.add(cid)
        else:
            node.gates = node.gates or {}
            node.gates.setdefault(gate, set()).add(cid)
        node.size += 1

    def _put(self, cid: int, node: CNode, trees: list[int]) -> None:
        self._enter(cid, node)
        for tree in trees:
            node.attrs[tree] = node.attrs.get(tree, 0) + 1
        self._node_of[cid] = node

    def _take(self, cid: int, node: CNode, trees: list[int]) -> None:
        gate = self._gate_of.get(cid)
        if gate is None:
            node.lnode.remove(cid)
        else:
            assert node.gates is not None
            gated = node.gates[gate]
            gated.remove(cid)
            if not gated:
                del node.gates[gate]
        node.size -= 1
        for tree in trees:
            left = node.attrs[tree] - 1
            if left:
                node.attrs[tree] = left
            else:
                del node.attrs[tree]

    def _take_many(self, node: CNode, members: np.ndarray, rows: HullRows) -> None:
        """Take ``members`` (indices into ``rows.cids``) out of ``node``'s l-node.
        O(members + their predicates)."""
        cids = rows.cids[members].tolist()
        _, pred = expand_ranges(rows.first[members], rows.count[members])
        trees = rows.tree[pred].tolist()
        if node.gates:
            for cid in cids:
                self._take(cid, node, [])
        else:
            node.lnode.difference_update(cids)
            node.size -= len(cids)
        if len(cids) > len(node.lnode):
            # A set keeps its table after removals and iterating it walks the whole
            # table: rebuild it at the size it holds (O(what is left) < O(what left)).
            node.lnode = set(node.lnode)
        attrs = node.attrs
        for tree in trees:
            left = attrs[tree] - 1
            if left:
                attrs[tree] = left
            else:
                del attrs[tree]

    def _settle(self, start: list[CNode]) -> None:
        """The two-phase space cutting (Alg. 5 and 6) until no l-node overflows."""
        work = list({id(node): node for node in start}.values())
        while work:
            node = work.pop()
            if node.size <= node.capacity:
                continue
            if node.pnode is None or node.left is not None or self._midpoint(node) is None:
                work.extend(self._partition(node))  # the root, a non-leaf or atomic bucket
            else:
                work.extend(self._cluster(node))

    def _partition(self, node: CNode) -> list[CNode]:
        """SpacePartitioning: new p-nodes until the l-node fits; returns their buckets.
        O(l-node conjuncts x their predicates) vectorised per p-node made, plus one
        Python step per conjunct moved."""
        created = []
        rows: HullRows | None = None
        staying = np.empty(0, bool)
        while node.size > node.capacity:
            eligible = [(count, -tree) for tree, count in node.attrs.items()
                        if tree not in node.used and tree not in node.pdir]
            count, negated = max(eligible, default=(0, 0))
            if count < MIN_SIZE:
                break  # no attribute to partition on: the l-node's capacity grows
            tree = -negated
            pnode = PNode(tree, node)
            node.pdir[tree] = pnode
            if rows is None:
                rows = self._hull_rows(np.array(node.members(), dtype=np.int64))
                staying = np.ones(len(rows.cids), bool)
            moving = np.zeros(len(rows.cids), bool)
            moving[rows.owner[rows.tree == tree]] = True
            moving &= staying
            staying &= ~moving
            members = np.flatnonzero(moving)
            self._take_many(node, members, rows)
            self._place([pnode.root], np.zeros(len(members), np.int64), members, rows)
            pnode.score += len(members)
            created.append(pnode.root)
        node.capacity = _capacity(node.size)
        return created

    def _cluster(self, bucket: CNode) -> list[CNode]:
        """SpaceClustering of an overflowing leaf bucket, down to buckets that fit.

        Level by level: every bucket of the level holding more than its capacity is
        split at its middle cut into ``[lo, m]`` and ``[m + 1, hi]``, and its conjuncts
        move into the child enclosing their hull, if one does; the conjuncts are then
        put into their final l-nodes at once. The result is what splitting one bucket
        at a time gives. Returns the buckets that still overflow (atomic ones, or ones
        whose unmoved conjuncts exceed their capacity), to be partitioned. Cost
        O(conjuncts x depth) vectorised plus O(buckets made) in Python.
        """
        pnode = bucket.pnode
        assert pnode is not None
        values = self.forest.trees[pnode.tree].values
        rows = self._hull_rows(np.array(bucket.members(), dtype=np.int64))
        self._take_many(bucket, np.arange(len(rows.cids)), rows)
        lo, hi = rows.on(np.arange(len(rows.cids)), pnode.tree)
        nodes = [bucket]
        cuts = [(_boundary(values, bucket.lo), _boundary(values, bucket.hi))]
        capacity = [bucket.capacity]
        at = np.zeros(len(rows.cids), np.int64)
        moving = np.ones(len(rows.cids), bool)
        level = [0]
        while level:
            counts = np.bincount(at[moving], minlength=len(nodes))
            split = np.full(len(nodes), -1, np.int64)  # the cut k of a node split now
            child = np.zeros(len(nodes), np.int64)  # its left child (the right is next)
            below = []
            for i in level:
                k = _middle(*cuts[i]) if counts[i] > capacity[i] else None
                if k is None:
                    continue
                node, cut = nodes[i], _cut(values, k)
                node.left = CNode(node.used, pnode, node.lo, cut, node)
                node.right = CNode(node.used, pnode, cut, node.hi, node)
                split[i], child[i] = k, len(nodes)
                below += [len(nodes), len(nodes) + 1]
                nodes += [node.left, node.right]
                cuts += [(cuts[i][0], k), (k, cuts[i][1])]
                capacity += [MAX_CAP, MAX_CAP]
            k = split[at]
            go_left, go_right = moving & (k >= 0) & (hi <= k), moving & (k >= 0) & (lo >= k)
            at = np.where(go_left, child[at], np.where(go_right, child[at] + 1, at))
            moving = go_left | go_right
            level = below
        self._place(nodes, at, np.arange(len(rows.cids)), rows)
        return [node for node in nodes if node.size > node.capacity]

    # -- deletion ----------------------------------------------------------------------

    def _unfile_rows(self, cids: np.ndarray) -> None:
        for cid in cids.tolist():
            node = self._node_of.pop(cid)
            self._take(cid, node, self._trees(cid))
            self._gate_of.pop(cid, None)
            above = node
            while above.pnode is not None:
                above.pnode.score -= 1
                above = above.pnode.parent
            node.capacity = _capacity(node.size)
            self._tidy(node)

    def _tidy(self, node: CNode) -> None:
        """Merge rule and removal of empty directories, from ``node`` upward. A bucket
        first folds its own children (they may have emptied while it still had a
        p-directory, which kept them apart), then its parent tries to fold it."""
        while node.pnode is not None:
            self._fold(node)
            parent = node.up
            if parent is None:  # the root bucket of a p-node: drop the p-node when empty
                if node.size or node.pdir or node.left is not None:
                    return
                pnode = node.pnode
                del pnode.parent.pdir[pnode.tree]
                node = pnode.parent
                continue
            if not self._fold(parent):
                return
            node = parent

    def _fold(self, bucket: CNode) -> bool:
        """The merge rule: two leaf buckets without p-directories whose conjuncts, with
        their parent's, number less than its capacity move back into it, if it has no
        p-directory either (two below the split at capacity + 1, so a bucket does not
        split and fold by turns; half the capacity left churned trees 1.5 x the
        c-nodes of a fresh build). Returns whether ``bucket`` is a leaf now.
        O(conjuncts moved)."""
        left, right = bucket.left, bucket.right
        if left is None or right is None:
            return True
        if bucket.pdir or any(c.left is not None or c.pdir for c in (left, right)):
            return False
        if bucket.size + left.size + right.size >= bucket.capacity:
            return False
        for child in (left, right):
            for cid in child.members():
                trees = self._trees(cid)
                self._take(cid, child, trees)
                self._put(cid, bucket, trees)
        bucket.left = bucket.right = None
        return True

    # -- matching ----------------------------------------------------------------------

    def _candidates(self, batch: Batch, first: int, last: int) -> Candidates:
        """The conjuncts of the l-nodes each event reaches, less those whose access
        pattern fails on it; none of their predicates is checked yet (the leaf check is
        the verification)."""
        lists, owners = [], []
        for e in range(first, last):
            reached = self._reach(batch.events[e])
            lists.extend(reached)
            owners.append(np.full(sum(len(r) for r in reached), e - first, np.int64))
        cids = np.fromiter(chain.from_iterable(lists), dtype=np.int64)
        events = np.concatenate(owners) if owners else np.empty(0, np.int64)
        return Candidates(events, cids, len(cids), np.zeros(len(cids), dtype=np.int32))

    def _reach(self, event: FlatEvent) -> list[set[int]]:
        """MatchBETree / SearchCDir: the non-empty l-nodes the event reaches, each as
        its conjuncts without an access pattern and those under a pattern that holds on
        the event."""
        holding = self.registry.patterns.holding_keys(event) if self._gate_of else set()
        tree_of = self.forest.tree_of
        keys: dict[int, Cut] = {}
        for attribute, value in event.items():
            tree = tree_of.get((attribute, kind_of(value)))
            if tree is not None:
                keys[tree] = (1, value, 1)
        reached = []
        stack = [self.root]
        while stack:
            node = stack.pop()
            if node.lnode:
                reached.append(node.lnode)
            if node.gates and holding:
                gates = node.gates
                reached.extend(gates[key] for key in holding if key in gates)
            pdir = node.pdir
            if not pdir:
                continue
            for tree in (pdir if len(pdir) < len(keys) else keys):
                pnode = pdir.get(tree)
                key = keys.get(tree)
                if pnode is None or key is None:
                    continue
                bucket: CNode | None = pnode.root
                while bucket is not None:
                    stack.append(bucket)
                    right = bucket.right
                    bucket = None if right is None else (right if key > right.lo
                                                         else bucket.left)
        return reached

    # -- bookkeeping -------------------------------------------------------------------

    def _nodes(self) -> list[CNode]:
        nodes, stack = [], [self.root]
        while stack:
            node = stack.pop()
            nodes.append(node)
            stack.extend(p.root for p in node.pdir.values())
            if node.left is not None:
                stack.extend((node.left, node.right))  # type: ignore[arg-type]
        return nodes

    def _family_bytes(self) -> int:
        nodes = self._nodes()
        members = sum(n.size for n in nodes)
        pnodes = sum(len(n.pdir) for n in nodes)
        gates = sum(len(n.gates) for n in nodes if n.gates)
        # Rough CPython sizes: a c-node with its set and dicts ~600 B, a p-node ~120 B,
        # ~60 B per l-node member (set slot, int, node_of entry), ~300 B per gate (its
        # dict slot and set), ~100 B per gated conjunct's pattern.
        return (600 * len(nodes) + 120 * pnodes + 60 * members + 300 * gates
                + 100 * len(self._gate_of))

    def _check(self) -> None:
        super()._check()
        assert self.registry.live == len(self._node_of)
        seen = self._check_node(self.root)
        assert seen == self.registry.live, "conjuncts missing from the tree"

    def _check_node(self, node: CNode) -> int:
        """Assert the invariants below ``node``; returns the conjuncts stored there."""
        assert node.size <= node.capacity, "l-node overflows"
        assert node.capacity >= MAX_CAP and node.capacity % MAX_CAP == 0
        gates = node.gates or {}
        assert all(gates.values()), "an empty gate"
        assert all(self._gate_of[cid] == key for key, cids in gates.items() for cid in cids)
        assert not any(cid in self._gate_of for cid in node.lnode), "a gated conjunct not gated"
        members = node.members()
        assert node.size == len(members) == len(set(members)), "l-node size is wrong"
        attrs: dict[int, int] = {}
        for cid in members:
            assert self._node_of[cid] is node
            hulls = self._hulls(cid)
            for tree in hulls:
                attrs[tree] = attrs.get(tree, 0) + 1
                assert tree not in node.pdir, "conjunct not pushed into its attribute's p-node"
            assert node.used <= hulls.keys(), "conjunct lacks an attribute of its path"
            if node.pnode is not None:
                hull = hulls[node.pnode.tree]
                assert node.encloses(hull), "conjunct outside its bucket"
                if node.left is not None:
                    assert not node.left.encloses(hull) and not node.right.encloses(hull), (  # type: ignore[union-attr]
                        "conjunct not in the smallest enclosing bucket")
        assert attrs == node.attrs, "l-node attribute counts disagree"
        total = node.size
        for tree, pnode in node.pdir.items():
            assert pnode.tree == tree and pnode.parent is node and tree not in node.used
            root = pnode.root
            assert root.pnode is pnode and root.up is None
            assert (root.lo, root.hi) == (LOWEST, HIGHEST) and root.used == node.used | {tree}
            below = self._check_node(root)
            assert below == pnode.score, "p-node score is not its conjunct count"
            total += below
        if node.left is not None:
            left, right = node.left, node.right
            assert right is not None and left.up is node and right.up is node
            assert left.pnode is node.pnode and right.pnode is node.pnode
            assert left.used == right.used == node.used
            assert left.lo == node.lo and left.hi == right.lo and right.hi == node.hi
            assert node.lo < left.hi < node.hi, "split point outside the bucket"
            total += self._check_node(left) + self._check_node(right)
        return total


def _home(bucket: CNode, hull: Hull) -> CNode:
    """InsertCDir: the smallest existing bucket under ``bucket`` enclosing ``hull``."""
    while bucket.left is not None:
        if bucket.left.encloses(hull):
            bucket = bucket.left
        elif bucket.right.encloses(hull):  # type: ignore[union-attr]
            bucket = bucket.right  # type: ignore[assignment]
        else:
            break
    return bucket


def _middle(lo: float, hi: float) -> int | None:
    """The middle cut ``k`` of a bucket between cuts ``lo`` and ``hi`` (fractional when
    their value is no longer a bound): the bucket's positions split into ``[.., k - 1]``
    and ``[k, ..]``; None when the bucket holds one position."""
    first, last = math.floor(lo) + 1, math.ceil(hi) - 1
    return None if first > last else (first + last + 1) // 2


def _cut(values: list[Value], k: int) -> Cut:
    """Cut ``k`` (between positions ``k - 1`` and ``k``) of the sorted bound ``values``."""
    return (1, values[(k - 1) // 2], 0 if k % 2 else 2)


def _capacity(size: int) -> int:
    """UpdateClusterCapacity: ``ceil(|l| / max_cap) max_cap``, at least ``max_cap``."""
    return max(MAX_CAP, -(-size // MAX_CAP) * MAX_CAP)


def _boundary(values: list[Value], cut: Cut) -> float:
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
