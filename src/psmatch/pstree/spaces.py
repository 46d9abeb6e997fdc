"""The predicate spaces every PS-Tree of a forest shares, and the splits new bounds make.

A PS-Tree (:class:`psmatch.pstree.tree.PSTree`) cuts one attribute's domain into disjoint
predicate spaces; every space of every tree has a stable *space id* into the
:class:`SpaceTable`, which holds per space its tree, its predicate counter (how many
predicate intervals cover it) and its event counter (how many past events fell into it,
the selectivity statistics). Freed ids are reused only after :meth:`SpaceTable.reclaim`,
once no structure names them. :class:`Splits` lists the gaps new bounds cut, for the
matchers to copy their entries to the new spaces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from psmatch.core.columns import grown_capacity, zero_padded
from psmatch.errors import PsmatchError

MAX_IDS = 2**31 - 1
"""Space ids and bound ids stay below this: rows hold bound ids as int32 and a pair key
(:func:`psmatch.pstree.psthash.pair_key`) holds two space ids in 32 bits each."""

def check_capacity(size: int, what: str) -> None:
    if size >= MAX_IDS:
        raise PsmatchError(f"the index holds {size:,} {what}, the most its 32-bit ids "
                           "can name: split the subscriptions over several matchers")


@dataclass(slots=True)
class Splits:
    """Gap spaces cut by new bounds, as columns: gap ``sid[i]`` of tree ``tree[i]`` was
    cut into itself and the two new spaces ``new_sids[i]`` (the new point and the part
    right of it).

    The splits of one :meth:`psmatch.pstree.forest.Forest.add_bounds` all name gaps
    that existed before it (several new bounds in one gap give several splits of that
    gap), so a family can copy every gap's entries to its new spaces in one batched
    lookup. Columns rather
    than an object per split: a bulk build of many new values makes hundreds of
    thousands of splits, and objects would cost far more time and memory than the tree.
    """

    tree: np.ndarray
    sid: np.ndarray
    new_sids: np.ndarray
    """Shape ``(n, 2)``."""

    def __len__(self) -> int:
        return len(self.sid)

    @staticmethod
    def join(parts: Sequence[Splits]) -> Splits:
        """The splits of several trees as one table. O(total)."""
        if not parts:
            return Splits(np.empty(0, dtype=np.int32), np.empty(0, dtype=np.int64),
                          np.empty((0, 2), dtype=np.int64))
        if len(parts) == 1:
            return parts[0]
        return Splits(np.concatenate([p.tree for p in parts]),
                      np.concatenate([p.sid for p in parts]),
                      np.concatenate([p.new_sids for p in parts]))


class SpaceTable:
    """Per-space columns shared by all trees, indexed by space id.

    A freed id is *dead*: structures keyed by space ids (posting lists, pair tables,
    signatures) may still name it, so it is reused only after :meth:`reclaim`, which
    the owner calls once those structures were purged of dead ids. Ids therefore stay
    below the live spaces plus those freed since the last purge, whatever the history.
    ``alive`` tells live ids; the arrays grow geometrically (:func:`grown_capacity`).
    """

    def __init__(self) -> None:
        self.size = 0  # ids handed out so far (the columns' used length)
        self.tree = np.zeros(64, dtype=np.int32)
        self.predicate_counter = np.zeros(64, dtype=np.int32)
        self.event_counter = np.zeros(64, dtype=np.int64)
        self.alive = np.zeros(64, dtype=bool)
        self.live = 0
        self.dead: list[int] = []  # freed, not yet reusable
        self.free_ids: list[int] = []  # reusable

    def new(self, tree: int, like: np.ndarray | None = None, count: int = 1) -> np.ndarray:
        """``count`` space ids for ``tree`` (reclaimed ones first), each with the
        counters of its space in ``like`` (zero without). O(count) vectorised."""
        n = count if like is None else len(like)
        reused = self.free_ids[len(self.free_ids) - min(n, len(self.free_ids)):]
        del self.free_ids[len(self.free_ids) - len(reused):]
        fresh = n - len(reused)
        if self.size + fresh > len(self.tree):
            check_capacity(self.size + fresh, "spaces")
            grow = grown_capacity(self.size + fresh, len(self.tree))
            self.tree = zero_padded(self.tree, grow)
            self.predicate_counter = zero_padded(self.predicate_counter, grow)
            self.event_counter = zero_padded(self.event_counter, grow)
            self.alive = zero_padded(self.alive, grow)
        sids = np.concatenate([np.array(reused, dtype=np.int64),
                               np.arange(self.size, self.size + fresh)])
        self.size += fresh
        self.tree[sids] = tree
        self.alive[sids] = True
        self.live += n
        self.predicate_counter[sids] = 0 if like is None else self.predicate_counter[like]
        self.event_counter[sids] = 0 if like is None else self.event_counter[like]
        return sids

    def free(self, sids: np.ndarray) -> None:
        """Free live space ids (distinct): dead until :meth:`reclaim`."""
        self.alive[sids] = False
        self.predicate_counter[sids] = 0
        self.live -= len(sids)
        self.dead.extend(sids.tolist())

    def reclaim(self) -> None:
        """Make the dead ids reusable; call once no structure names them."""
        self.free_ids.extend(self.dead)
        self.dead.clear()

    @property
    def nbytes(self) -> int:
        return int(self.tree.nbytes + self.predicate_counter.nbytes + self.event_counter.nbytes
                   + self.alive.nbytes + 8 * (len(self.dead) + len(self.free_ids)))

    def check(self) -> None:
        """Assert that live, dead and reusable ids partition the ids handed out."""
        assert self.size < MAX_IDS, "space ids overflow"
        idle = self.dead + self.free_ids
        assert len(set(idle)) == len(idle) and not self.alive[idle].any(), (
            "a dead or reusable space id is alive or listed twice")
        assert self.live == int(self.alive[: self.size].sum())
        assert self.live + len(idle) == self.size, "a space id is neither live nor freed"
