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
space cutting. *Space partitioning* (Alg. 5) repeatedly takes the most frequent unused
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

Domains. BE-Tree assumes discrete finite domains ``[v_min, v_max]``; here each
(attribute, kind) has the PS-Tree forest's order-preserving encoding
(:class:`index.pstree.forest.Forest`): the distinct operand values ``b_0 < ... < b_{m-1}`` of
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
the l-node capacity is re-evaluated, a pair of leaf buckets whose conjuncts fit in half
of their open parent's capacity folds back into it (the merge rule), and an empty
p-node's c-directory is removed, propagating upward.

The walk is a Python loop per event (the nature of the structure); the leaf scans are
vectorised: all (event, conjunct) candidates of a batch are checked together, predicate
by predicate, by :meth:`index.pstree.store.ConjunctStore.verify`. Not implemented: the
cost-based ranking with loss over event windows and l-node recycling (section 5); the
paper's own experiments set their weights so that popularity decides.

Costs: insert O(tree height + p) plus amortised splitting; match per event
O(visited nodes) in Python plus O(candidates x predicates) vectorised.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from itertools import chain

import numpy as np

from index.core.pipeline import Batch, Candidates
from index.events import FlatEvent
from index.language import Value, kind_of
from index.pstree.matcher import ForestMatcher
from index.pstree.store import InsertedConjuncts

MAX_CAP = 5
"""``max_cap``: the paper's leaf capacity for matching probabilities below 1% (Table 4)."""
MIN_SIZE = 3
"""``min_size``: conjuncts that must share an attribute for it to partition an l-node."""

Cut = tuple
"""A bucket bound: ``(0,)`` below everything, ``(2,)`` above everything, ``(1, v, 0)``
just before ``v``, ``(1, v, 2)`` just after ``v``; an event value ``x`` is ``(1, x, 1)``."""
LOWEST: Cut = (0,)
HIGHEST: Cut = (2,)
Hull = tuple[Cut, Cut]


class CNode:
    """A c-node: l-node, p-directory and, unless it is the root, its bucket."""

    __slots__ = ("attrs", "capacity", "hi", "left", "lnode", "lo", "pdir", "pnode", "right",
                 "up", "used")

    def __init__(self, used: frozenset[int], pnode: PNode | None = None,
                 lo: Cut = LOWEST, hi: Cut = HIGHEST, up: CNode | None = None) -> None:
        self.lnode: set[int] = set()
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


class PNode:
    """A p-node: one attribute, its score and the root bucket of its c-directory."""

    __slots__ = ("parent", "root", "score", "tree")

    def __init__(self, tree: int, parent: CNode) -> None:
        self.tree = tree
        self.parent = parent
        self.score = 0
        self.root = CNode(parent.used | {tree}, self)


class BETreeMatcher(ForestMatcher):
    """BE-Tree over the PS-Tree forest's value encoding, with exact leaf checks."""

    name = "betree"

    def __init__(self) -> None:
        super().__init__()
        self.root = CNode(frozenset())
        self._node_of: dict[int, CNode] = {}

    # -- hulls and cuts ----------------------------------------------------------------

    def _hulls(self, cid: int) -> dict[int, Hull]:
        """The conjunct's hull per attribute tree (Table 1 of the paper), read from the
        store's per-predicate hull columns. O(predicates)."""
        store, forest = self.store, self.forest
        start = int(store.pred_start.data[cid])
        rows = slice(start, start + int(store.pred_count.data[cid]))
        rank = forest.bound_rank
        hulls = {}
        for tree, lo, lo_closed, hi, hi_closed in zip(
                store.pred_tree.data[rows].tolist(), store.pred_lo_bid.data[rows].tolist(),
                store.pred_lo_closed.data[rows].tolist(), store.pred_hi_bid.data[rows].tolist(),
                store.pred_hi_closed.data[rows].tolist(), strict=True):
            values = forest.trees[tree].values
            hulls[tree] = (LOWEST if lo < 0 else (1, values[rank[lo]], 0 if lo_closed else 2),
                           HIGHEST if hi < 0 else (1, values[rank[hi]], 2 if hi_closed else 0))
        return hulls

    def _midpoint(self, bucket: CNode) -> Cut | None:
        """The cut splitting a bucket into ``[lo, m]`` and ``[m + 1, hi]``; None if atomic.

        Positions are the current domain's ``0 .. 2m``; cut ``k`` separates positions
        ``k - 1`` and ``k``. O(log m).
        """
        assert bucket.pnode is not None
        values = self.forest.trees[bucket.pnode.tree].values
        first = math.floor(_boundary(values, bucket.lo)) + 1
        last = math.ceil(_boundary(values, bucket.hi)) - 1
        if first > last:
            return None
        k = (first + last + 1) // 2
        return (1, values[(k - 1) // 2], 0 if k % 2 else 2)

    # -- insertion ---------------------------------------------------------------------

    def _file_rows(self, inserted: InsertedConjuncts) -> None:
        for cid in inserted.cids.tolist():
            self._file_one(cid)

    def _file_one(self, cid: int) -> None:
        """InsertBETree / InsertCDir: one path down, then settle any overflow."""
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
        self._put(cid, node, hulls)
        self._settle(node)

    def _put(self, cid: int, node: CNode, hulls: dict[int, Hull]) -> None:
        node.lnode.add(cid)
        for tree in hulls:
            node.attrs[tree] = node.attrs.get(tree, 0) + 1
        self._node_of[cid] = node

    def _take(self, cid: int, node: CNode, hulls: dict[int, Hull]) -> None:
        node.lnode.remove(cid)
        for tree in hulls:
            left = node.attrs[tree] - 1
            if left:
                node.attrs[tree] = left
            else:
                del node.attrs[tree]

    def _settle(self, start: CNode) -> None:
        """The two-phase space cutting (Alg. 5 and 6) until no l-node overflows."""
        work = [start]
        while work:
            node = work.pop()
            if len(node.lnode) <= node.capacity:
                continue
            if node.pnode is None or node.left is not None:
                work.extend(self._partition(node))
                continue
            mid = self._midpoint(node)
            if mid is None:  # atomic bucket
                work.extend(self._partition(node))
                continue
            self._split(node, mid)
            work.extend((node, node.left, node.right))  # type: ignore[arg-type]

    def _partition(self, node: CNode) -> list[CNode]:
        """SpacePartitioning: new p-nodes until the l-node fits; returns their buckets."""
        created = []
        while len(node.lnode) > node.capacity:
            eligible = [(count, -tree) for tree, count in node.attrs.items()
                        if tree not in node.used and tree not in node.pdir]
            count, negated = max(eligible, default=(0, 0))
            if count < MIN_SIZE:
                break  # no attribute to partition on: the l-node's capacity grows
            tree = -negated
            pnode = PNode(tree, node)
            node.pdir[tree] = pnode
            moving = [(cid, hulls) for cid in node.lnode if tree in (hulls := self._hulls(cid))]
            for cid, hulls in moving:
                self._take(cid, node, hulls)
                self._put(cid, pnode.root, hulls)
                pnode.score += 1
            created.append(pnode.root)
        node.capacity = _capacity(len(node.lnode))
        return created

    def _split(self, bucket: CNode, mid: Cut) -> None:
        """SpaceClustering's split of a leaf bucket at ``mid``, moving enclosed conjuncts."""
        pnode = bucket.pnode
        assert pnode is not None
        bucket.left = CNode(bucket.used, pnode, bucket.lo, mid, bucket)
        bucket.right = CNode(bucket.used, pnode, mid, bucket.hi, bucket)
        for cid in list(bucket.lnode):
            hulls = self._hulls(cid)
            for child in (bucket.left, bucket.right):
                if child.encloses(hulls[pnode.tree]):
                    self._take(cid, bucket, hulls)
                    self._put(cid, child, hulls)
                    break

    # -- deletion ----------------------------------------------------------------------

    def _unfile_rows(self, cids: list[int]) -> None:
        for cid in cids:
            node = self._node_of.pop(cid)
            self._take(cid, node, self._hulls(cid))
            above = node
            while above.pnode is not None:
                above.pnode.score -= 1
                above = above.pnode.parent
            node.capacity = _capacity(len(node.lnode))
            self._tidy(node)

    def _tidy(self, node: CNode) -> None:
        """Merge rule and removal of empty directories, from ``node`` upward."""
        while node.pnode is not None:
            parent = node.up
            if parent is None:  # the root bucket of a p-node: drop the p-node when empty
                if node.lnode or node.pdir or node.left is not None:
                    return
                pnode = node.pnode
                del pnode.parent.pdir[pnode.tree]
                node = pnode.parent
                continue
            left, right = parent.left, parent.right
            assert left is not None and right is not None
            if parent.pdir or any(c.left is not None or c.pdir for c in (left, right)):
                return
            if len(parent.lnode) + len(left.lnode) + len(right.lnode) > parent.capacity // 2:
                return
            for child in (left, right):
                for cid in list(child.lnode):
                    hulls = self._hulls(cid)
                    self._take(cid, child, hulls)
                    self._put(cid, parent, hulls)
            parent.left = parent.right = None
            node = parent

    # -- matching ----------------------------------------------------------------------

    def _candidates(self, batch: Batch, first: int, last: int) -> Candidates:
        """The conjuncts of the l-nodes each event reaches; none of their predicates is
        checked yet (the leaf check is the verification)."""
        lists, owners = [], []
        for e in range(first, last):
            reached = self._reach(batch.events[e])
            lists.extend(reached)
            owners.append(np.full(sum(len(r) for r in reached), e - first, np.int64))
        cids = np.fromiter(chain.from_iterable(lists), dtype=np.int64)
        events = np.concatenate(owners) if owners else np.empty(0, np.int64)
        return Candidates(events, cids, len(cids), np.zeros(len(cids), dtype=np.int32))

    def _reach(self, event: FlatEvent) -> list[set[int]]:
        """MatchBETree / SearchCDir: the non-empty l-nodes the event reaches."""
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
        members = sum(len(n.lnode) for n in nodes)
        pnodes = sum(len(n.pdir) for n in nodes)
        # Rough CPython sizes: a c-node with its set and dicts ~600 B, a p-node ~120 B,
        # ~60 B per l-node member (set slot, int, node_of entry).
        return 600 * len(nodes) + 120 * pnodes + 60 * members

    def check(self) -> None:
        super().check()
        assert self.registry.live == len(self._node_of)
        seen = self._check_node(self.root)
        assert seen == self.registry.live, "conjuncts missing from the tree"

    def _check_node(self, node: CNode) -> int:
        """Assert the invariants below ``node``; returns the conjuncts stored there."""
        assert len(node.lnode) <= node.capacity, "l-node overflows"
        assert node.capacity >= MAX_CAP and node.capacity % MAX_CAP == 0
        attrs: dict[int, int] = {}
        for cid in node.lnode:
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
        total = len(node.lnode)
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
