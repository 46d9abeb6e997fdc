"""The ``auto`` matcher: each conjunct filed in the family that serves it best.

Owns :class:`AutoMatcher`, a :class:`psmatch.core.matcher.Matcher` over two child
matchers, PSTHash (:mod:`psmatch.pstree.psthash`) and the bitset family
(:mod:`psmatch.bitset.matcher`), which it drives through their hooks by the slots of its
own id map: a subscription's slot is the same in the children, so the service's path by
slot (``matcher.internal``) works through it unchanged.

* **filing** (objects or normal-form columns, read as columns once):
  :func:`psmatch.auto.routing.route` gives each conjunct a reason and so a family; each
  family gets its conjuncts, a subscription with conjuncts in both families under its
  one slot in each, as columns (cut by :func:`psmatch.auto.split.select_conjuncts`),
  which both file as they are. The rule and why are in :mod:`psmatch.auto.routing`;
* **removal** takes each slot out of the families it has conjuncts in;
* **matching** asks each family holding conjuncts for its (event, slot) pairs and, when
  both do, merges them, by event and each pair once (a subscription may match through a
  conjunct in each).

``stats()`` sums the families' and says in ``placement`` how many subscriptions have
a conjunct in each family (``psthash``, ``bitset``) and how many live conjuncts each
reason filed where (``family/reason``, :data:`psmatch.auto.routing.REASONS`).

Cost: a family's own, plus O(conjuncts + intervals) to route a batch; a batch of
events pays both families' fixed costs only when both hold conjuncts. Memory: the
families', plus 3 bytes per slot for the placement counts and the bounds
:class:`psmatch.auto.routing.DomainStats` keeps.
"""

from __future__ import annotations

from itertools import chain
from operator import attrgetter

import numpy as np

from psmatch.auto.routing import FAMILY_OF, REASONS, DomainStats, route
from psmatch.auto.split import select_conjuncts
from psmatch.bitset.matcher import BitsetMatcher
from psmatch.core.columns import distinct_sorted
from psmatch.core.matcher import Matcher, MatcherStats
from psmatch.events import FlatEvent
from psmatch.language import Subscription
from psmatch.language.columns import ConjunctColumns, SubscriptionColumns
from psmatch.pstree.psthash import PSTHashMatcher

FAMILIES = ("psthash", "bitset")
"""The families ``auto`` files in, in the order it asks them."""
_FAMILY_CODE = np.array([FAMILIES.index(f) for f in FAMILY_OF], dtype=np.int8)


_CONJUNCTS, _TEXT = attrgetter("conjuncts"), attrgetter("text")


class FamilySlots:
    """What a child family reads of its id map: the slots of the subscriptions with a
    conjunct in it (its ``held_slots``, O(slots), which only ``check`` reads, and its
    ``len``, O(1), which ``stats`` reads), from the owner's placement counts."""

    __slots__ = ("family", "owner")

    def __init__(self, owner: AutoMatcher, family: int) -> None:
        self.owner, self.family = owner, family

    def held_slots(self) -> np.ndarray:
        return np.flatnonzero(self.owner.family_counts()[:, self.family] > 0)

    def __len__(self) -> int:
        return int(self.owner.held[self.family])


class AutoMatcher(Matcher):
    """PSTHash and the bitset family under one id map, each conjunct in one of them."""

    name = "auto"

    def __init__(self) -> None:
        super().__init__()
        self.domains = DomainStats()
        self.families: list[Matcher] = [PSTHashMatcher(), BitsetMatcher()]
        for index, family in enumerate(self.families):
            family._ids = FamilySlots(self, index)  # type: ignore[assignment]
        self.placed = np.zeros((0, len(REASONS)), dtype=np.uint8)
        """Per slot, its live conjuncts by reason code (at most ``MAX_CONJUNCTS``, 64)."""
        self.totals = np.zeros(len(REASONS), dtype=np.int64)
        """The live conjuncts by reason code: ``placed`` summed."""
        self.held = np.zeros(len(FAMILIES), dtype=np.int64)
        """The subscriptions with a conjunct in each family."""

    def family_counts(self, slots: np.ndarray | None = None) -> np.ndarray:
        """Per slot of ``slots`` (default: every slot ever used), its live conjuncts by
        family (int64, slots x families)."""
        rows = (self.placed[: self._slot_count] if slots is None else self.placed[slots])
        counts = np.zeros((len(rows), len(FAMILIES)), dtype=np.int64)
        for reason, family in enumerate(_FAMILY_CODE.tolist()):
            counts[:, family] += rows[:, reason]
        return counts

    # -- life cycle --------------------------------------------------------------------

    def _place(self, family: int, slots: np.ndarray, reason: np.ndarray) -> None:
        """Count the conjuncts ``family`` filed, under ``reason``, for ``slots`` (one
        entry per conjunct) that held none there. Called once a family has filed them,
        so that the counts say what the families hold even if one of them raised."""
        if not len(slots):
            return
        if int(slots.max()) >= len(self.placed):
            grown = np.zeros((max(int(slots.max()) + 1, 2 * len(self.placed)), len(REASONS)),
                             dtype=np.uint8)
            grown[: len(self.placed)] = self.placed
            self.placed = grown
        np.add.at(self.placed, (slots, reason.astype(np.int64)), 1)
        self.totals += np.bincount(reason, minlength=len(REASONS))
        self.held[family] += len(np.unique(slots))

    def _insert(self, slot: int, subscription: Subscription) -> None:
        self._insert_many([(slot, subscription)])

    def _insert_many(self, batch: list[tuple[int, Subscription]]) -> None:
        subscriptions = [subscription for _, subscription in batch]
        counts = np.fromiter(map(len, map(_CONJUNCTS, subscriptions)), np.int64, len(batch))
        columns = SubscriptionColumns(
            list(map(_TEXT, subscriptions)), counts, ConjunctColumns.of_conjuncts(
                list(chain.from_iterable(map(_CONJUNCTS, subscriptions)))))
        self._insert_columns(np.fromiter((slot for slot, _ in batch), np.int64, len(batch)),
                             columns)

    def _insert_columns(self, slots: np.ndarray, columns: SubscriptionColumns) -> None:
        """Route the conjuncts of ``columns`` (the subscriptions under ``slots``) and
        hand each family its own, as columns."""
        reason = route(columns.conjuncts, self.domains)
        family_of = _FAMILY_CODE[reason]
        at = np.repeat(slots, columns.conjunct_count)
        for index, family in enumerate(self.families):
            keep = family_of == index
            if not keep.any():
                continue
            if keep.all():
                family._insert_columns(slots, columns)
            else:
                held, part = select_conjuncts(columns, keep)
                family._insert_columns(slots[held], part)
            self._place(index, at[keep], reason[keep])

    def _delete(self, slot: int) -> None:
        self._delete_many([slot])

    def _delete_many(self, slots: list[int]) -> None:
        at = np.array(slots, dtype=np.int64)
        held = self.family_counts(at) > 0
        for index, family in enumerate(self.families):
            if held[:, index].any():
                family._delete_many(at[held[:, index]].tolist())
        self.totals -= self.placed[at].sum(axis=0, dtype=np.int64)
        self.held -= held.sum(axis=0)
        self.placed[at] = 0

    def _finish_bulk(self) -> None:
        for family in self.families:
            family._finish_bulk()

    # -- matching ----------------------------------------------------------------------

    def _match_flat_pairs(self, events: list[FlatEvent]) -> tuple[np.ndarray, np.ndarray]:
        live = np.bincount(_FAMILY_CODE, weights=self.totals, minlength=len(FAMILIES))
        found = [family._match_flat_pairs(events)
                 for family, n in zip(self.families, live.tolist(), strict=True) if n]
        if not found:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        if len(found) == 1:
            return found[0]
        # a subscription with conjuncts in both families may match through each
        pairs = distinct_sorted(np.concatenate(
            [(e.astype(np.int64) << 32) | s.astype(np.int64) for e, s in found]))
        return pairs >> 32, pairs & 0xFFFFFFFF

    # -- bookkeeping -------------------------------------------------------------------

    def _stats(self) -> MatcherStats:
        parts = [family._stats() for family in self.families]
        return MatcherStats(
            len(self), sum(p.conjuncts for p in parts), sum(p.predicates for p in parts),
            sum(p.spaces for p in parts),
            sum(p.estimated_bytes for p in parts) + self.placed.nbytes + self.totals.nbytes
            + self.domains.nbytes,
            placement={**dict(zip(FAMILIES, self.held.tolist(), strict=True)),
                       **dict(zip(REASONS, self.totals.tolist(), strict=True))})

    def _check(self) -> None:
        for family in self.families:
            family._check()
        held = self._ids.held_slots()
        rows = self.placed[: self._slot_count]
        assert (self.placed[self._slot_count:] == 0).all()
        assert np.array_equal(rows.sum(axis=0, dtype=np.int64), self.totals), "totals"
        counted = rows.sum(axis=1)
        assert (counted[held] > 0).all(), "a held subscription with no conjunct placed"
        unheld = np.ones(len(rows), dtype=bool)
        unheld[held] = False
        assert (counted[unheld] == 0).all(), "conjuncts placed for a slot not held"
        live = np.bincount(_FAMILY_CODE, weights=self.totals, minlength=len(FAMILIES))
        for family, n in zip(self.families, live.tolist(), strict=True):
            assert family._stats().conjuncts == n, f"{family.name}: conjuncts placed"
        assert np.array_equal((self.family_counts() > 0).sum(axis=0), self.held), "held"
