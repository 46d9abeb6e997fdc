"""The normal form a matcher indexes: a subscription as a disjunction of conjuncts.

Owns the DNF types, :class:`Subscription` (its text and conjuncts), :class:`Conjunct`
(predicates on distinct attributes, sorted by attribute), :class:`Predicate` (a union of
sorted disjoint :class:`Interval` over one value kind, plus, for strings, the residual
``like`` :class:`Pattern` that are not intervals) and their evaluation on a flattened
event, where unknown counts as not true. :mod:`psmatch.language.normalise` builds them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from psmatch.language.parser import parse_expression
from psmatch.language.tree import Expression
from psmatch.language.values import Kind, Value, kind_of


class Interval(NamedTuple):
    """An interval of one kind's order; ``None`` bounds are unbounded.

    A named tuple, not a frozen dataclass: a normal form's four bounds become one in a
    single ``tuple.__new__`` (as :func:`psmatch.service.records.normal_forms.load_normal_form` makes
    them), and building one costs a fraction of a slots dataclass whose ``__init__`` sets
    four slots. A worker loading its subscriptions builds several per subscription.
    """

    lo: Value | None
    lo_closed: bool
    hi: Value | None
    hi_closed: bool

    def contains(self, value: Value) -> bool:
        if self.lo is not None and (value < self.lo or (value == self.lo and not self.lo_closed)):  # type: ignore[operator]
            return False
        return not (
            self.hi is not None and (value > self.hi or (value == self.hi and not self.hi_closed))  # type: ignore[operator]
        )

    @property
    def is_point(self) -> bool:
        return self.lo is not None and self.lo == self.hi and self.lo_closed and self.hi_closed


@dataclass(frozen=True, slots=True)
class Pattern:
    """A string test that is not an interval: ``suffix`` or ``contains``, maybe negated."""

    form: str
    text: str
    negated: bool

    def test(self, value: str) -> bool:
        hit = value.endswith(self.text) if self.form == "suffix" else self.text in value
        return hit != self.negated


class Predicate(NamedTuple):
    """All of one conjunct's conditions on one attribute, merged.

    True on an event when the attribute is present with a value of ``kind`` that lies
    in one of ``intervals`` (sorted, disjoint, non-empty) and passes every pattern.
    A named tuple, as :class:`Interval` is, for the cost of building one.
    """

    attribute: str
    kind: Kind
    intervals: tuple[Interval, ...]
    patterns: tuple[Pattern, ...] = ()

    def test(self, value: Value) -> bool:
        """Truth for a value already known to be of ``kind``.

        Cost O(log intervals) plus the patterns: a binary search for the first interval
        that does not end below ``value``, the only one that can hold it.
        """
        ivs = self.intervals
        lo, hi = 0, len(ivs)
        while lo < hi:
            mid = (lo + hi) // 2
            end = ivs[mid].hi
            if end is not None and (end < value or (end == value and not ivs[mid].hi_closed)):  # type: ignore[operator]
                lo = mid + 1
            else:
                hi = mid
        if lo == len(ivs) or not ivs[lo].contains(value):
            return False
        return all(p.test(value) for p in self.patterns)  # type: ignore[arg-type]

    def evaluate(self, event: dict[str, Value]) -> bool:
        """True when the event satisfies the predicate (unknown counts as not true)."""
        value = event.get(self.attribute)
        return value is not None and kind_of(value) is self.kind and self.test(value)


@dataclass(frozen=True, slots=True)
class Conjunct:
    """A conjunction of predicates on distinct attributes, sorted by attribute."""

    predicates: tuple[Predicate, ...]

    def evaluate(self, event: dict[str, Value]) -> bool:
        return all(p.evaluate(event) for p in self.predicates)


@dataclass(frozen=True, slots=True)
class Subscription:
    """A parsed subscription: its text and its DNF, what matchers index."""

    text: str
    conjuncts: tuple[Conjunct, ...]

    def evaluate(self, event: dict[str, Value]) -> bool:
        """True when some conjunct is true on the flattened event. Cost O(predicates)."""
        return any(c.evaluate(event) for c in self.conjuncts)

    @property
    def expression(self) -> Expression:
        """The expression tree of :attr:`text`, parsed again: no matcher keeps it, and a
        subscription loaded from its normal form
        (:func:`psmatch.service.records.normal_forms.load_normal_form`) never had it.
        Cost O(len(text))."""
        return parse_expression(self.text)

    @property
    def predicate_count(self) -> int:
        return sum(len(c.predicates) for c in self.conjuncts)
