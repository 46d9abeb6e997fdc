"""BE-Tree's two-phase space cutting (Alg. 5 and 6) and its merge rule.

*Space partitioning* (Alg. 5) repeatedly takes the most frequent unused attribute of an
overflowing l-node's conjuncts that at least :data:`MIN_SIZE` of them share, creates its
p-node and moves them; when no attribute is eligible the l-node's capacity grows
(``max_cap^j = ceil(|l| / max_cap) max_cap``) instead of looping. *Space clustering*
(Alg. 6) splits an overflowing non-atomic leaf bucket ``[lo, hi]`` at ``m = (lo + hi) //
2`` into ``[lo, m]`` and ``[m + 1, hi]`` and moves the conjuncts a child encloses, level
by level down to buckets that fit; a non-leaf or atomic bucket is partitioned instead.
Both phases run on one work list rather than by recursion. The *merge rule*, for
deletion, folds leaf buckets back into their parent and drops empty p-nodes.
"""

from __future__ import annotations

import numpy as np

from psmatch.baselines.betree_nodes import MAX_CAP, CNode, LNodes, PNode, capacity_for
from psmatch.baselines.betree_space import HullReader, HullRows, boundary, cut_at, middle

MIN_SIZE = 3
"""``min_size``: conjuncts that must share an attribute for it to partition an l-node."""


class SpaceCutting:
    """Cuts overflowing l-nodes of a BE-Tree and folds emptied buckets back."""

    def __init__(self, lnodes: LNodes, hulls: HullReader) -> None:
        self.lnodes = lnodes
        self.hulls = hulls

    def settle(self, start: list[CNode]) -> None:
        """The two-phase space cutting (Alg. 5 and 6) until no l-node overflows."""
        work = list({id(node): node for node in start}.values())
        while work:
            node = work.pop()
            if node.size <= node.capacity:
                continue
            if (node.pnode is None or node.left is not None
                    or self.hulls.midpoint(node.pnode.tree, node.lo, node.hi) is None):
                work.extend(self.partition(node))  # the root, a non-leaf or atomic bucket
            else:
                work.extend(self.cluster(node))

    def partition(self, node: CNode) -> list[CNode]:
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
                rows = self.hulls.rows(np.array(node.members(), dtype=np.int64))
                staying = np.ones(len(rows.cids), bool)
            moving = np.zeros(len(rows.cids), bool)
            moving[rows.owner[rows.tree == tree]] = True
            moving &= staying
            staying &= ~moving
            members = np.flatnonzero(moving)
            self.lnodes.take_many(node, members, rows)
            self.lnodes.place([pnode.root], np.zeros(len(members), np.int64), members, rows)
            pnode.score += len(members)
            created.append(pnode.root)
        node.capacity = capacity_for(node.size)
        return created

    def cluster(self, bucket: CNode) -> list[CNode]:
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
        values = self.hulls.values(pnode.tree)
        rows = self.hulls.rows(np.array(bucket.members(), dtype=np.int64))
        self.lnodes.take_many(bucket, np.arange(len(rows.cids)), rows)
        lo, hi = rows.on(np.arange(len(rows.cids)), pnode.tree)
        nodes = [bucket]
        cuts = [(boundary(values, bucket.lo), boundary(values, bucket.hi))]
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
                k = middle(*cuts[i]) if counts[i] > capacity[i] else None
                if k is None:
                    continue
                node, cut = nodes[i], cut_at(values, k)
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
        self.lnodes.place(nodes, at, np.arange(len(rows.cids)), rows)
        return [node for node in nodes if node.size > node.capacity]

    def tidy(self, node: CNode) -> None:
        """Merge rule and removal of empty directories, from ``node`` upward. A bucket
        first folds its own children (they may have emptied while it still had a
        p-directory, which kept them apart), then its parent tries to fold it."""
        while node.pnode is not None:
            self.fold(node)
            parent = node.up
            if parent is None:  # the root bucket of a p-node: drop the p-node when empty
                if node.size or node.pdir or node.left is not None:
                    return
                pnode = node.pnode
                del pnode.parent.pdir[pnode.tree]
                node = pnode.parent
                continue
            if not self.fold(parent):
                return
            node = parent

    def fold(self, bucket: CNode) -> bool:
        """The merge rule: two leaf buckets without p-directories whose conjuncts, with
        their parent's, number less than its capacity move back into it, if it has no
        p-directory either (two below the split at capacity + 1, so a bucket does not
        split and fold by turns; at half the capacity, buckets that churn emptied would
        stay split). Returns whether ``bucket`` is a leaf now.
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
                trees = self.hulls.trees(cid)
                self.lnodes.take(cid, child, trees)
                self.lnodes.put(cid, bucket, trees)
        bucket.left = bucket.right = None
        return True
