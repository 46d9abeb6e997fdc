"""The conjunct registry: one id space for the conjuncts of every indexed matcher.

A subscription's normal form is a disjunction of conjuncts (:mod:`psmatch.language`);
every indexed matcher files each conjunct under a dense integer *conjunct id*
(``cid``). This module owns, for all of them:

* *id allocation*: :meth:`ConjunctRegistry.allocate` hands out cids, reusing freed
  ones first; per cid the registry keeps the subscription's slot, whether it is
  alive and its number of normal-form predicates;
* *subscription -> conjunct links*: each slot's cids as a linked list in two int32
  columns (``first_cid[slot]``, ``next_cid[cid]``), so a removal finds its conjuncts
  without a dict of lists;
* the *residual* conjuncts, those an index cannot decide by itself (``like`` suffix and
  contains patterns, or gaps a paper's operators cannot express): flagged per cid and
  kept as objects, and finished by :meth:`ConjunctRegistry.keep_satisfied`. A residual
  conjunct with a positive suffix or contains pattern files it (its *access pattern*)
  in the :class:`psmatch.core.patterns.PatternIndex`, so that candidates whose pattern
  fails are dropped in bulk (:meth:`ConjunctRegistry.access_holds`, before the family
  verifies them) and only the others are evaluated in Python;
* the *reclaim policy*: a removed cid is dead at once but becomes reusable only after
  :meth:`ConjunctRegistry.reclaim`, which the pipeline calls once the matcher has
  purged every structure naming removed cids. The purge is due
  (:attr:`ConjunctRegistry.purge_due`) when the removed cids exceed
  :data:`PURGE_MIN` and an eighth of the live ones (:data:`PURGE_SHARE`), so a stale
  posting can never name a new conjunct, what is dead stays within about a ninth of
  every structure (churn keeps memory near a fresh build), and purges cost
  amortised O(1) per removal;
* *memory accounting*: :attr:`ConjunctRegistry.nbytes`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from psmatch.core.columns import GrowableArray, find_sorted
from psmatch.core.patterns import PatternIndex, access_pattern
from psmatch.events import FlatEvent
from psmatch.language import Conjunct

PURGE_MIN = 64
"""Removed conjuncts that always wait for a bulk purge (beyond it, a share of the live)."""
PURGE_SHARE = 8
"""A purge is due once the removed conjuncts exceed 1/PURGE_SHARE of the live ones: a
purge costs O(index), so it is amortised over live/8 removals, O(1) each, while the
dead entries it drops stay below a ninth of the structures."""
RESIDUAL_BYTES = 1024
"""Estimated bytes of a residual conjunct kept as Python objects."""


class ConjunctRegistry:
    """Conjunct ids, their subscriptions, liveness, residual flags and reclaim."""

    def __init__(self) -> None:
        self.slot = GrowableArray(np.int32)
        self.alive = GrowableArray(np.bool_)
        self.predicates = GrowableArray(np.int32)  # normal-form predicates per conjunct
        self.residual = GrowableArray(np.bool_)
        self.residual_conjuncts: dict[int, Conjunct] = {}
        self.patterns = PatternIndex()
        self.access_pattern = GrowableArray(np.int32)  # per cid: pattern id, -1: none
        self.first_cid = GrowableArray(np.int32)
        self.next_cid = GrowableArray(np.int32)
        self._free: list[int] = []
        self._removed: list[int] = []
        self.live = 0
        self.live_predicates = 0

    def __len__(self) -> int:
        """Cids ever handed out (the length of every per-cid column)."""
        return len(self.alive)

    # -- allocation and links --------------------------------------------------------

    def allocate(self, slots: Sequence[int], predicate_count: np.ndarray) -> np.ndarray:
        """New cids for conjuncts of ``predicate_count`` predicates each (of the
        subscriptions in ``slots``), linked to their slots; freed cids are reused first.
        Cost O(n) plus O(1) Python work per cid for the links."""
        n = len(predicate_count)
        reused = self._free[-n:][::-1] if n <= len(self._free) else self._free[::-1]
        del self._free[len(self._free) - len(reused):]
        start = len(self)
        end = start + n - len(reused)
        cids = np.array(reused + list(range(start, end)), dtype=np.int64)
        # new cids take their constant columns from the fill and only reused ones are
        # reset: a single add costs a few slice fills, not numpy calls for every column
        for column, fill in ((self.slot, 0), (self.alive, True), (self.predicates, 0),
                             (self.residual, False), (self.access_pattern, -1)):
            column.grow_to(end, fill)
        if reused:
            self.alive.data[reused] = True
            self.residual.data[reused] = False
            self.access_pattern.data[reused] = -1
        self.slot.data[cids] = slots
        self.predicates.data[cids] = predicate_count
        self.live += n
        self.live_predicates += int(np.sum(predicate_count))
        self._link(slots, cids)
        return cids

    def _link(self, slots: Sequence[int], cids: np.ndarray) -> None:
        """Put each new conjunct at the front of its subscription's list."""
        self.first_cid.grow_to(max(slots) + 1, fill=-1)
        self.next_cid.grow_to(len(self), fill=-1)
        first, nxt = self.first_cid.data, self.next_cid.data
        for cid, slot in zip(reversed(cids.tolist()), reversed(slots), strict=True):
            nxt[cid] = first[slot]
            first[slot] = cid

    def cids_of(self, slot: int) -> list[int]:
        """The conjuncts of the subscription in ``slot``. O(conjuncts)."""
        cids = []
        cid = int(self.first_cid.data[slot]) if slot < len(self.first_cid) else -1
        while cid >= 0:
            cids.append(cid)
            cid = int(self.next_cid.data[cid])
        return cids

    def mark_residual(self, cids: np.ndarray, conjuncts: Sequence[Conjunct]) -> None:
        """Flag conjuncts whose candidates must be finished by ``Conjunct.evaluate``."""
        self.residual.data[cids] = True
        for cid, conjunct in zip(cids.tolist(), conjuncts, strict=True):
            self.residual_conjuncts[cid] = conjunct
            access = access_pattern(conjunct)
            if access is not None:
                self.access_pattern.data[cid] = self.patterns.acquire(*access)

    # -- removal and reclaim -----------------------------------------------------------

    def unlink(self, slots: np.ndarray) -> np.ndarray:
        """Remove the conjuncts of the subscriptions in ``slots`` (distinct, each with
        conjuncts): dead at once, reusable after reclaim. Returns their cids.

        Cost: one vectorised step per link of the longest list (a subscription's
        conjuncts), O(cids) in all, plus O(1) Python work per residual conjunct.
        """
        first, nxt = self.first_cid.data, self.next_cid.data
        found = []
        cid = first[slots].astype(np.int64)
        first[slots] = -1
        while len(cid := cid[cid >= 0]):
            found.append(cid)
            cid = nxt[cid].astype(np.int64)
        cids = np.concatenate(found) if found else np.empty(0, dtype=np.int64)
        self.alive.data[cids] = False
        residual = cids[self.residual.data[cids]]
        self.residual.data[residual] = False
        for dead in residual.tolist():
            del self.residual_conjuncts[dead]
        patterned = cids[self.access_pattern.data[cids] >= 0]
        for pid in self.access_pattern.data[patterned].tolist():
            self.patterns.release(pid)
        self.access_pattern.data[patterned] = -1
        self.live_predicates -= int(self.predicates.data[cids].sum())
        self._removed.extend(cids.tolist())
        self.live -= len(cids)
        return cids

    @property
    def awaiting_reclaim(self) -> int:
        """Removed conjuncts whose ids wait for :meth:`reclaim`."""
        return len(self._removed)

    @property
    def purge_due(self) -> bool:
        """Whether enough conjuncts were removed to purge the structures in bulk."""
        return len(self._removed) > max(PURGE_MIN, self.live // PURGE_SHARE)

    def reclaim(self) -> None:
        """Make removed cids reusable; call once no structure refers to them."""
        self._free.extend(self._removed)
        self._removed.clear()

    # -- matching ----------------------------------------------------------------------

    def access_holds(self, events: np.ndarray, cids: np.ndarray,
                     flat_events: Sequence[FlatEvent]) -> np.ndarray | None:
        """The mask of the (event, conjunct) pairs whose access pattern holds on the event
        (or that have none), ``None`` when every pair passes. The pipeline drops the
        others before verifying anything: a contains or suffix pattern is a necessary
        condition its family's lookup cannot test. The pattern index finds the patterns
        holding on the events with such pairs, and a sorted search tests the pairs
        against them. Cost O(pairs) vectorised, plus the pattern lookups of those events.
        """
        check = np.flatnonzero(self.residual.data[cids])
        if not len(check):
            return None
        pids = self.access_pattern.data[cids[check]].astype(np.int64)
        indexed = np.flatnonzero(pids >= 0)
        if not len(indexed):
            return None
        pair_events = events[check[indexed]]
        # the events present, in order, by counting rather than sorting every pair
        rows = np.flatnonzero(np.bincount(pair_events, minlength=len(flat_events)))
        holding = self.patterns.holding(flat_events, rows)
        wanted = pair_events * self.patterns.width + pids[indexed]
        _, holds = find_sorted(holding, wanted)
        keep = np.ones(len(cids), dtype=bool)
        keep[check[indexed[~holds]]] = False
        return keep

    def keep_satisfied(self, events: np.ndarray, cids: np.ndarray,
                       flat_events: Sequence[FlatEvent]) -> tuple[np.ndarray, np.ndarray]:
        """The (event, conjunct) pairs that hold, finishing residual conjuncts in Python:
        pairs of other conjuncts are kept as they are (the index decided them). Cost
        O(pairs) vectorised plus one ``Conjunct.evaluate`` per residual pair (after
        :meth:`access_holds`, those whose access pattern holds, or that have none)."""
        check = np.flatnonzero(self.residual.data[cids])
        if not len(check):
            return events, cids
        keep = np.ones(len(cids), dtype=bool)
        conjunct_of = self.residual_conjuncts.__getitem__
        for i in check.tolist():
            keep[i] = conjunct_of(int(cids[i])).evaluate(flat_events[int(events[i])])
        return events[keep], cids[keep]

    # -- bookkeeping -------------------------------------------------------------------

    @property
    def _columns(self) -> tuple[GrowableArray, ...]:
        return (self.slot, self.alive, self.predicates, self.residual, self.first_cid,
                self.next_cid, self.access_pattern)

    @property
    def nbytes(self) -> int:
        return (sum(c.nbytes for c in self._columns) + 8 * len(self._free)
                + 8 * len(self._removed) + RESIDUAL_BYTES * len(self.residual_conjuncts)
                + self.patterns.nbytes)

    def check(self, slots: Sequence[int]) -> None:
        """Assert that the live conjuncts are exactly those linked from ``slots`` (the
        live subscriptions), each once and with its slot, and that the counts agree."""
        alive = self.alive.view()
        linked = [(slot, cid) for slot in slots for cid in self.cids_of(slot)]
        assert all(linked_cids for linked_cids in map(self.cids_of, slots)), (
            "a subscription has no conjunct")
        assert sorted(cid for _, cid in linked) == np.flatnonzero(alive).tolist(), (
            "every live conjunct is linked from its subscription exactly once")
        assert all(self.slot.data[cid] == slot for slot, cid in linked)
        assert self.live == int(alive.sum())
        assert self.live_predicates == int(self.predicates.view()[alive].sum())
        assert not alive[self._removed + self._free].any(), "a free cid is alive"
        residual = np.flatnonzero(self.residual.view()).tolist()
        assert sorted(self.residual_conjuncts) == residual
        assert alive[residual].all(), "a dead conjunct is flagged residual"
        assert len(self) < 2**31 - 1, "conjunct ids overflow"
        access = self.access_pattern.view()
        expected: dict[int, int] = {}
        for cid in range(len(self)):
            conjunct = self.residual_conjuncts.get(cid)
            assert (access[cid] >= 0) == (conjunct is not None
                                          and access_pattern(conjunct) is not None)
            if access[cid] >= 0:
                expected[int(access[cid])] = expected.get(int(access[cid]), 0) + 1
        self.patterns.check(expected)

