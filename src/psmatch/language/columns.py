"""Many subscriptions' normal forms as columns, what the PS-Tree store files in bulk.

:class:`SubscriptionColumns` holds a count of conjuncts per subscription and their
:class:`ConjunctColumns`: a count of predicates per conjunct, a row per predicate and per
interval, as numpy arrays and lists, with no object per predicate or interval.
:meth:`ConjunctColumns.of_conjuncts` reads conjunct objects into them and
:meth:`SubscriptionColumns.subscriptions` builds the objects back;
:func:`psmatch.service.records.normal_forms.load_normal_forms` reads normal forms' text into them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter

import numpy as np

from psmatch.language.normal_form import Conjunct, Interval, Pattern, Predicate, Subscription
from psmatch.language.values import KIND_OF_CODE, Value

_PREDICATES, _INTERVALS = attrgetter("predicates"), attrgetter("intervals")
_ATTRIBUTE, _KIND, _PATTERNS = attrgetter("attribute"), attrgetter("kind"), attrgetter("patterns")
_LO, _LO_CLOSED = attrgetter("lo"), attrgetter("lo_closed")
_HI, _HI_CLOSED = attrgetter("hi"), attrgetter("hi_closed")


@dataclass(frozen=True, slots=True, eq=False)
class ConjunctColumns:
    """Many conjuncts as columns: per conjunct its number of predicates; per predicate
    (conjunct by conjunct, in the conjunct's order) its attribute, kind, number of
    intervals and any ``like`` patterns; per interval (predicate by predicate) its four
    bounds (``None``: unbounded)."""

    predicate_count: np.ndarray
    """int64, per conjunct."""
    attribute: list[str]
    kind: np.ndarray
    """int64 :class:`psmatch.language.Kind` values, per predicate."""
    interval_count: np.ndarray
    """int64, per predicate."""
    patterns: dict[int, tuple[Pattern, ...]]
    """The patterns of each predicate that has some, by predicate row (most have none)."""
    lo: list[Value | None]
    lo_closed: np.ndarray
    hi: list[Value | None]
    hi_closed: np.ndarray

    def __len__(self) -> int:
        return len(self.predicate_count)

    @classmethod
    def of_conjuncts(cls, conjuncts: Sequence[Conjunct]) -> ConjunctColumns:
        """The columns of ``conjuncts``. Cost O(predicates + intervals) in C loops
        (``map`` over attribute getters), no Python frame per predicate."""
        by_conjunct = list(map(_PREDICATES, conjuncts))
        predicates = list(chain.from_iterable(by_conjunct))
        n = len(predicates)
        has_patterns = np.fromiter(map(bool, map(_PATTERNS, predicates)), bool, n)
        by_predicate = list(map(_INTERVALS, predicates))
        intervals = list(chain.from_iterable(by_predicate))
        m = len(intervals)
        return cls(
            predicate_count=np.fromiter(map(len, by_conjunct), np.int64, len(by_conjunct)),
            attribute=list(map(_ATTRIBUTE, predicates)),
            kind=np.fromiter(map(_KIND, predicates), np.int64, n),
            interval_count=np.fromiter(map(len, by_predicate), np.int64, n),
            patterns={p: predicates[p].patterns for p in np.flatnonzero(has_patterns).tolist()},
            lo=list(map(_LO, intervals)),
            lo_closed=np.fromiter(map(_LO_CLOSED, intervals), bool, m),
            hi=list(map(_HI, intervals)),
            hi_closed=np.fromiter(map(_HI_CLOSED, intervals), bool, m),
        )

    @property
    def has_patterns(self) -> np.ndarray:
        """Whether each predicate has ``like`` patterns (bool, per predicate)."""
        mask = np.zeros(len(self.kind), dtype=bool)
        mask[list(self.patterns)] = True
        return mask

    def conjuncts(self, which: Iterable[int] | None = None) -> list[Conjunct]:
        """The objects of the conjuncts ``which`` (default: all), in that order. Cost
        O(conjuncts) for the offsets, then an object per predicate and interval of
        those conjuncts."""
        p_start = (np.cumsum(self.predicate_count) - self.predicate_count).tolist()
        i_start = (np.cumsum(self.interval_count) - self.interval_count).tolist()
        sizes, kinds = self.predicate_count.tolist(), self.kind.tolist()
        counts = self.interval_count.tolist()
        lo_closed, hi_closed = self.lo_closed.tolist(), self.hi_closed.tolist()

        def predicate(p: int) -> Predicate:
            first = i_start[p]
            return Predicate(self.attribute[p], KIND_OF_CODE[kinds[p]], tuple(map(
                Interval, self.lo[first:first + counts[p]], lo_closed[first:first + counts[p]],
                self.hi[first:first + counts[p]], hi_closed[first:first + counts[p]])),
                self.patterns.get(p, ()))  # fmt: skip

        return [Conjunct(tuple(map(predicate, range(p_start[c], p_start[c] + sizes[c]))))
                for c in (range(len(sizes)) if which is None else which)]


@dataclass(frozen=True, slots=True, eq=False)
class SubscriptionColumns:
    """Many subscriptions' normal forms as columns: each subscription's text and number
    of conjuncts, and the conjuncts of all of them, subscription by subscription."""

    texts: list[str]
    conjunct_count: np.ndarray
    """int64, per subscription; each at least 1."""
    conjuncts: ConjunctColumns

    def __len__(self) -> int:
        return len(self.texts)

    def subscriptions(self) -> list[Subscription]:
        """The objects of every subscription, in order. Cost: an object per conjunct,
        predicate and interval."""
        conjuncts = iter(self.conjuncts.conjuncts())
        return [Subscription(text, tuple(next(conjuncts) for _ in range(count)))
                for text, count in zip(self.texts, self.conjunct_count.tolist(), strict=True)]
