"""BE-Tree (Sadoghi & Jacobsen, SIGMOD 2011): space partitioning and space clustering.

Owns the BE-Tree matcher of "BE-Tree: An Index Structure to Efficiently Match Boolean
Expressions over High-dimensional Discrete Space" (Sadoghi & Jacobsen, SIGMOD 2011,
sections 4-6), with the paper's errors corrected where they apply below: its insertion
walk, deletion and matching. Its nodes are :mod:`psmatch.baselines.betree_nodes`, its
space cutting and merge rule :mod:`psmatch.baselines.betree_cutting` and its domains
:mod:`psmatch.baselines.betree_space`. The structure is the paper's:

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
applied to groups rather than one conjunct at a time (one conjunct at a time, 100,000
``a = i`` are 100,000 walks and thousands of one-bucket splits re-reading every moved
conjunct): the batch
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
bucket kept them apart, and would otherwise stay (churn would leave empty buckets behind,
and the tree's bytes would drift above a fresh build's, which ``tests/test_churn.py``
bounds).

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

from itertools import chain

import numpy as np

from psmatch.baselines.betree_cutting import SpaceCutting
from psmatch.baselines.betree_nodes import (
    CNode,
    LNodes,
    PNode,
    capacity_for,
    check_node,
    home,
    subtree,
)
from psmatch.baselines.betree_space import Cut, HullReader, HullRows, boundary
from psmatch.core.columns import distinct_sorted, expand_ranges, find_sorted
from psmatch.core.patterns import access_pattern
from psmatch.core.pipeline import Batch, Candidates
from psmatch.events import FlatEvent
from psmatch.language import Conjunct, kind_of
from psmatch.pstree.matcher import ForestMatcher
from psmatch.pstree.store import InsertedConjuncts

SMALL_BATCH = 8
"""Batches up to this size are filed one conjunct at a time (numpy's fixed cost per call
exceeds a Python walk's for a handful of conjuncts)."""


class BETreeMatcher(ForestMatcher):
    """BE-Tree over the PS-Tree forest's value encoding, with exact leaf checks.

    ``root`` is the root c-node, ``lnodes`` where each conjunct is filed, ``hulls`` the
    conjuncts' hulls and ``cutting`` the space cutting and merge rule over them.
    """

    name = "betree"

    def __init__(self) -> None:
        super().__init__()
        self.root = CNode(frozenset())
        self.lnodes = LNodes()
        self.hulls = HullReader(self.store, self.forest)
        self.cutting = SpaceCutting(self.lnodes, self.hulls)

    # -- insertion ---------------------------------------------------------------------

    def _file(self, cids: np.ndarray, conjuncts: list[Conjunct]) -> np.ndarray:
        """Note each new conjunct's access pattern (the registry files the same one in
        its pattern index), then file the batch."""
        gate_of = self.lnodes.gate_of
        for cid, conjunct in zip(cids.tolist(), conjuncts, strict=True):
            access = access_pattern(conjunct)
            if access is not None:
                attribute, pattern = access
                gate_of[cid] = (attribute, pattern.form, pattern.text)
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
            self.cutting.settle(placed)
            return
        rows = self.hulls.rows(inserted.cids.astype(np.int64))
        work = [(self.root, np.arange(len(rows.cids)))]
        placed: list[CNode] = []
        while work:
            node, group = work.pop()
            choice = self._choose(node, group, rows)
            if (choice < 0).any():
                self.lnodes.place([node], np.zeros(int((choice < 0).sum()), np.int64),
                                  group[choice < 0], rows)
                placed.append(node)
            for tree in distinct_sorted(choice[choice >= 0]).tolist():
                members = group[choice == tree]
                pnode = node.pdir[tree]
                pnode.score += len(members)
                work.extend(self._descend_cdir(pnode, members, rows))
        self.cutting.settle(placed)

    def _walk(self, cid: int) -> CNode:
        """InsertBETree / InsertCDir for one conjunct: down one path, choosing at each
        c-node the p-node of highest score, into the smallest enclosing bucket; puts the
        conjunct there and returns that c-node. O(depth + predicates) in Python."""
        hulls = self.hulls.hulls(cid)
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
            node = home(best.root, hulls[best.tree])
        self.lnodes.put(cid, node, list(hulls))
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
        values = self.hulls.values(pnode.tree)
        lo, hi = rows.on(members, pnode.tree)
        reached = []
        stack = [(pnode.root, members, lo, hi)]
        while stack:
            bucket, members, lo, hi = stack.pop()
            left, right = bucket.left, bucket.right
            if left is None or right is None:
                reached.append((bucket, members))
                continue
            k = boundary(values, left.hi)
            go_left, go_right = hi <= k, lo >= k
            stay = ~(go_left | go_right)
            if stay.any():
                reached.append((bucket, members[stay]))
            for child, go in ((left, go_left), (right, go_right)):
                if go.any():
                    stack.append((child, members[go], lo[go], hi[go]))
        return reached

    # -- deletion ----------------------------------------------------------------------

    def _unfile_rows(self, cids: np.ndarray) -> None:
        lnodes = self.lnodes
        for cid in cids.tolist():
            node = lnodes.node_of.pop(cid)
            lnodes.take(cid, node, self.hulls.trees(cid))
            lnodes.gate_of.pop(cid, None)
            above = node
            while above.pnode is not None:
                above.pnode.score -= 1
                above = above.pnode.parent
            node.capacity = capacity_for(node.size)
            self.cutting.tidy(node)

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
        holding = (self.registry.patterns.holding_keys(event) if self.lnodes.gate_of
                   else set())
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

    def nodes(self) -> list[CNode]:
        """Every c-node of the tree, the root first. O(nodes)."""
        return subtree(self.root)

    def _family_bytes(self) -> int:
        nodes = self.nodes()
        members = sum(n.size for n in nodes)
        pnodes = sum(len(n.pdir) for n in nodes)
        gates = sum(len(n.gates) for n in nodes if n.gates)
        # Rough CPython sizes: a c-node with its set and dicts ~600 B, a p-node ~120 B,
        # ~60 B per l-node member (set slot, int, node_of entry), ~300 B per gate (its
        # dict slot and set), ~100 B per gated conjunct's pattern.
        return (600 * len(nodes) + 120 * pnodes + 60 * members + 300 * gates
                + 100 * len(self.lnodes.gate_of))

    def _check(self) -> None:
        """The forest's and store's invariants, then the tree's
        (:func:`psmatch.baselines.betree_nodes.check_node`): every live conjunct filed
        once."""
        super()._check()
        assert self.registry.live == len(self.lnodes.node_of)
        seen = check_node(self.root, self.lnodes, self.hulls)
        assert seen == self.registry.live, "conjuncts missing from the tree"
