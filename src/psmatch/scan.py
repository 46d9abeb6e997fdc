"""The ``scan`` matcher: the plain reference that evaluates every subscription.

No index at all: each event is tested against every stored subscription's normal form.
Every other matcher is tested against it, and it is tested against the direct
evaluation of the expression tree. Matching costs O(subscriptions x predicates) per
event; adds and removes cost O(1).
"""

from __future__ import annotations

from itertools import chain

import numpy as np

from psmatch.core.matcher import Matcher, MatcherStats
from psmatch.events import FlatEvent
from psmatch.language import Subscription


class ScanMatcher(Matcher):
    """Evaluates every subscription on every event."""

    name = "scan"

    def __init__(self) -> None:
        super().__init__()
        self._subscriptions: dict[int, Subscription] = {}

    def _insert(self, slot: int, subscription: Subscription) -> None:
        self._subscriptions[slot] = subscription

    def _delete(self, slot: int) -> None:
        del self._subscriptions[slot]

    def _match_flat_pairs(self, events: list[FlatEvent]) -> tuple[np.ndarray, np.ndarray]:
        items = self._subscriptions.items()
        matched = [[slot for slot, sub in items if sub.evaluate(event)] for event in events]
        rows = np.repeat(np.arange(len(events), dtype=np.int64), list(map(len, matched)))
        return rows, np.fromiter(chain.from_iterable(matched), dtype=np.int64, count=len(rows))

    def _stats(self) -> MatcherStats:
        subs = self._subscriptions.values()
        conjuncts = sum(len(s.conjuncts) for s in subs)
        predicates = sum(s.predicate_count for s in subs)
        # The parsed subscriptions are frozen dataclasses in tuples: roughly 200 bytes
        # per predicate and conjunct.
        return MatcherStats(len(subs), conjuncts, predicates, 0, 200 * (conjuncts + predicates))

    def _check(self) -> None:
        assert set(self._subscriptions) == set(self._ids.held_slots().tolist())
        for slot, sub in self._subscriptions.items():
            assert sub.conjuncts, f"slot {slot} has no conjunct"
