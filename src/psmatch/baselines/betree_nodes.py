"""BE-Tree's nodes and the conjuncts filed in them.

* a *c-node* (:class:`CNode`) holds an *l-node* (the conjuncts stored there, with its
  capacity ``max_cap^j``) and a *p-directory* (a dict attribute -> p-node); the root is a
  c-node;
* a *p-node* (:class:`PNode`, one attribute, never used twice on a path) owns a
  *c-directory*: a binary grid of *buckets* over the attribute's domain, each bucket
  being a c-node again.

:class:`LNodes` files conjuncts in l-nodes (under their access pattern's gate, if they
have one) and keeps where each is; :func:`check_node` asserts the invariants of a subtree.
"""

from __future__ import annotations

from itertools import chain

import numpy as np

from psmatch.baselines.betree_space import HIGHEST, LOWEST, Cut, Hull, HullReader, HullRows
from psmatch.core.columns import expand_ranges
from psmatch.core.patterns import PatternKey

MAX_CAP = 5
"""``max_cap``: the paper's leaf capacity for matching probabilities below 1% (Table 4)."""


class CNode:
    """A c-node: l-node, p-directory and, unless it is the root, its bucket.

    The l-node's conjuncts are split by their access pattern (see
    :mod:`psmatch.baselines.betree`): ``lnode`` holds those without one, ``gates`` (None
    until needed) maps an access pattern to the conjuncts filed under it; ``size``
    counts both.
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


def home(bucket: CNode, hull: Hull) -> CNode:
    """InsertCDir: the smallest existing bucket under ``bucket`` enclosing ``hull``."""
    while bucket.left is not None:
        if bucket.left.encloses(hull):
            bucket = bucket.left
        elif bucket.right.encloses(hull):  # type: ignore[union-attr]
            bucket = bucket.right  # type: ignore[assignment]
        else:
            break
    return bucket


def capacity_for(size: int) -> int:
    """UpdateClusterCapacity: ``ceil(|l| / max_cap) max_cap``, at least ``max_cap``."""
    return max(MAX_CAP, -(-size // MAX_CAP) * MAX_CAP)


def subtree(root: CNode) -> list[CNode]:
    """Every c-node under ``root``, itself included. O(nodes)."""
    nodes, stack = [], [root]
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(p.root for p in node.pdir.values())
        if node.left is not None:
            stack.extend((node.left, node.right))  # type: ignore[arg-type]
    return nodes


class LNodes:
    """Where each conjunct is filed: ``node_of`` (cid -> its c-node) and ``gate_of`` (cid
    -> its access pattern, for the conjuncts that have one, filed under that gate).

    Every step keeps a c-node's ``size`` and its per-attribute counts ``attrs`` in step
    with its members.
    """

    def __init__(self) -> None:
        self.node_of: dict[int, CNode] = {}
        self.gate_of: dict[int, PatternKey] = {}

    def enter(self, cid: int, node: CNode) -> None:
        """Put ``cid`` in ``node``'s l-node, under its access pattern's gate if it has one."""
        gate = self.gate_of.get(cid)
        if gate is None:
            node.lnode.add(cid)
        else:
            node.gates = node.gates or {}
            node.gates.setdefault(gate, set()).add(cid)
        node.size += 1

    def put(self, cid: int, node: CNode, trees: list[int]) -> None:
        """File ``cid`` (with predicates on ``trees``) in ``node``. O(predicates)."""
        self.enter(cid, node)
        for tree in trees:
            node.attrs[tree] = node.attrs.get(tree, 0) + 1
        self.node_of[cid] = node

    def take(self, cid: int, node: CNode, trees: list[int]) -> None:
        """Take ``cid`` (with predicates on ``trees``) out of ``node``'s l-node; its
        ``node_of`` entry is the caller's. O(predicates)."""
        gate = self.gate_of.get(cid)
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

    def take_many(self, node: CNode, members: np.ndarray, rows: HullRows) -> None:
        """Take ``members`` (indices into ``rows.cids``) out of ``node``'s l-node.
        O(members + their predicates)."""
        cids = rows.cids[members].tolist()
        _, pred = expand_ranges(rows.first[members], rows.count[members])
        trees = rows.tree[pred].tolist()
        if node.gates:
            for cid in cids:
                self.take(cid, node, [])
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

    def place(self, nodes: list[CNode], at: np.ndarray, members: np.ndarray,
              rows: HullRows) -> None:
        """Put ``members`` (indices into ``rows.cids``) into the l-nodes ``nodes[at]``.
        O(members + their predicates): a dict or set step each (numpy's fixed cost per
        call would dominate the many small groups of a deep tree)."""
        cids = rows.cids[members].tolist()
        targets = [nodes[i] for i in at.tolist()]
        self.node_of.update(zip(cids, targets, strict=True))
        if len(nodes) == 1 and not self.gate_of:
            nodes[0].lnode.update(cids)
            nodes[0].size += len(cids)
        else:
            for cid, node in zip(cids, targets, strict=True):
                self.enter(cid, node)
        _, pred = expand_ranges(rows.first[members], rows.count[members])
        for i, tree in zip(np.repeat(at, rows.count[members]).tolist(),
                           rows.tree[pred].tolist(), strict=True):
            attrs = nodes[i].attrs
            attrs[tree] = attrs.get(tree, 0) + 1


def check_node(node: CNode, lnodes: LNodes, hulls: HullReader) -> int:
    """Assert the invariants below ``node``; returns the conjuncts stored there.

    Every l-node fits its capacity, a multiple of ``max_cap``; gated conjuncts are under
    their own pattern's gate and the others are not; sizes and attribute counts agree
    with the members; a conjunct has a predicate on every attribute of its path, none on
    an attribute of its c-node's p-directory, lies in its bucket and in no child of it
    (the smallest enclosing bucket); p-node scores count the conjuncts below them; a
    bucket's children split it at a cut inside it. O(conjuncts x predicates + nodes).
    """
    gate_of, node_of = lnodes.gate_of, lnodes.node_of
    assert node.size <= node.capacity, "l-node overflows"
    assert node.capacity >= MAX_CAP and node.capacity % MAX_CAP == 0
    gates = node.gates or {}
    assert all(gates.values()), "an empty gate"
    assert all(gate_of[cid] == key for key, cids in gates.items() for cid in cids)
    assert not any(cid in gate_of for cid in node.lnode), "a gated conjunct not gated"
    members = node.members()
    assert node.size == len(members) == len(set(members)), "l-node size is wrong"
    attrs: dict[int, int] = {}
    for cid in members:
        assert node_of[cid] is node
        conjunct_hulls = hulls.hulls(cid)
        for tree in conjunct_hulls:
            attrs[tree] = attrs.get(tree, 0) + 1
            assert tree not in node.pdir, "conjunct not pushed into its attribute's p-node"
        assert node.used <= conjunct_hulls.keys(), "conjunct lacks an attribute of its path"
        if node.pnode is not None:
            hull = conjunct_hulls[node.pnode.tree]
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
        below = check_node(root, lnodes, hulls)
        assert below == pnode.score, "p-node score is not its conjunct count"
        total += below
    if node.left is not None:
        left, right = node.left, node.right
        assert right is not None and left.up is node and right.up is node
        assert left.pnode is node.pnode and right.pnode is node.pnode
        assert left.used == right.used == node.used
        assert left.lo == node.lo and left.hi == right.lo and right.hi == node.hi
        assert node.lo < left.hi < node.hi, "split point outside the bucket"
        total += check_node(left, lnodes, hulls) + check_node(right, lnodes, hulls)
    return total
