"""Normalisation to disjunctive normal form, and :func:`parse_subscription`.

``not`` is pushed into the complementary operator, each conjunct keeps at most one
:class:`~psmatch.language.normal_form.Predicate` per attribute (several predicates on
one attribute are intersected into one set of intervals by a sorted merge), conjuncts
that can never be true are dropped, and an expression with nothing left is rejected. A
conjunction of comparisons on distinct attributes goes straight to its one conjunct
(:meth:`Normaliser.conjunction`), from the scanned text itself when the whole text is
one (:func:`parse_subscription`). The work is bounded as it is done: at most
:data:`~psmatch.language.limits.MAX_NORMALISATION_STEPS` steps, and the limits on
intervals and conjuncts checked as each is built.
"""

from __future__ import annotations

from itertools import product
from operator import attrgetter

from psmatch.errors import ExpressionLimitError, UnsatisfiableError
from psmatch.language.limits import (
    MAX_CONJUNCTS,
    MAX_INTERVALS,
    MAX_NORMAL_FORM_INTERVALS,
    MAX_NORMALISATION_STEPS,
    MAX_TEXT,
)
from psmatch.language.normal_form import Conjunct, Interval, Pattern, Predicate, Subscription
from psmatch.language.parser import Parser, parse_expression
from psmatch.language.predicates import comparison_predicate
from psmatch.language.scanner import Written, conjunction_tree, scan_conjunction
from psmatch.language.tree import COMPLEMENT, And, Comparison, Expression, Not, Or


def _negate(expr: Expression) -> Expression:
    if isinstance(expr, Comparison):
        return Comparison(expr.attribute, COMPLEMENT[expr.op], expr.values, expr.position)
    if isinstance(expr, Not):
        return expr.child
    if isinstance(expr, And):
        return Or(tuple(_negate(c) for c in expr.children))
    return And(tuple(_negate(c) for c in expr.children))


def _first_position(expr: Expression) -> int:
    """Where ``expr`` starts in the text: its leftmost comparison. Cost O(depth)."""
    while not isinstance(expr, Comparison):
        expr = expr.child if isinstance(expr, Not) else expr.children[0]
    return expr.position


_RawConjunct = dict[str, Predicate]
_BY_ATTRIBUTE = attrgetter("attribute")


class Normaliser:
    """Disjunctive normal form of one expression, its work bounded as it is done.

    Each interval read or built, pattern checked and predicate copied is one step;
    past :data:`MAX_NORMALISATION_STEPS` normalisation stops with an
    :class:`ExpressionLimitError` at the comparison that crossed it. The limits on
    intervals per predicate and on conjuncts are checked as each one is built, so no
    expression makes normalisation build more than the limits allow before failing.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.steps = 0

    def charge(self, steps: int, position: int) -> None:
        self.steps += steps
        if self.steps > MAX_NORMALISATION_STEPS:
            raise ExpressionLimitError(
                f"normalising the expression takes more than {MAX_NORMALISATION_STEPS} steps: "
                "it merges attributes with many intervals into many conjuncts; merge its "
                "in-lists or split it into several subscriptions",
                self.text,
                position,
            )

    def dnf(self, expr: Expression) -> list[_RawConjunct]:
        """The conjuncts of ``expr``, each a map from attribute to merged predicate."""
        if isinstance(expr, Not):
            return self.dnf(_negate(expr.child))
        if isinstance(expr, Comparison):
            self.charge(len(expr.values) + 1, expr.position)
            p = self.finish(comparison_predicate(expr.attribute, expr.op, expr.values),
                            expr.position)
            return [] if p is None else [{p.attribute: p}]
        if isinstance(expr, Or):
            out: list[_RawConjunct] = []
            for child in expr.children:
                out.extend(self.dnf(child))
                self.check_conjuncts(len(out), _first_position(child))
            return out
        written = [(c.attribute, c.op, c.values, c.position) for c in expr.children
                   if c.__class__ is Comparison]  # fmt: skip
        if len(written) == len(expr.children) and _distinct_attributes(written):
            return self.conjunction(written)
        result: list[_RawConjunct] = [{}]
        for child in expr.children:
            terms = self.dnf(child)
            position = _first_position(child)
            distinct = len(result) * len(terms) > 1
            seen: set[frozenset[Predicate]] = set()
            combined: list[_RawConjunct] = []
            for left, right in product(result, terms):
                merged = self.merge(left, right, position)
                if merged is None:
                    continue
                if distinct:
                    # Hashing a conjunct hashes all its intervals: charged as steps.
                    self.charge(sum(len(p.intervals) for p in merged.values()), position)
                    key = frozenset(merged.values())
                    if key in seen:
                        continue
                    seen.add(key)
                combined.append(merged)
                self.check_conjuncts(len(combined), position)
            result = combined
        return result

    def conjunction(self, comparisons: list[Written]) -> list[_RawConjunct]:
        """The DNF of a conjunction of comparisons on distinct attributes (the common
        case), given as :func:`~psmatch.language.scanner.scan_conjunction` reads them: one
        conjunct of their predicates, or none if one of them is impossible.

        What :meth:`dnf` builds for any conjunction, without its cross products and
        merges, none of which has anything to combine here; it charges their steps all
        the same, so that the step limit falls exactly where it would.
        """
        conjunct: _RawConjunct | None = {}
        for attribute, op, values, position in comparisons:
            p: Predicate | None = comparison_predicate(attribute, op, values)
            if p.patterns or not p.intervals:  # else finish(p) is p
                p = self.finish(p, position)
            # dnf's steps for this comparison, then merge(conjunct, {attribute: p})'s
            # unless there is no conjunct left to merge with; charged at once, as all are
            # at the comparison's position
            steps = len(values) + 1
            if conjunct is not None:
                if p is None:
                    conjunct = None
                else:
                    steps += len(conjunct) + 1
                    conjunct[attribute] = p
            self.charge(steps, position)
        return [] if conjunct is None else [conjunct]

    def check_conjuncts(self, count: int, position: int) -> None:
        if count > MAX_CONJUNCTS:
            raise ExpressionLimitError(
                f"the expression expands to more than {MAX_CONJUNCTS} conjuncts in disjunctive "
                "normal form; use 'in' lists or split it into several subscriptions",
                self.text,
                position,
            )

    def merge(self, a: _RawConjunct, b: _RawConjunct, position: int) -> _RawConjunct | None:
        """The conjunction of two raw conjuncts, or None when it can never be true."""
        self.charge(len(a) + len(b), position)
        out = dict(a)
        for attribute, p in b.items():
            q = out.get(attribute)
            if q is None:
                out[attribute] = p
                continue
            if q.kind is not p.kind:
                return None
            intervals = self.intersect(attribute, q.intervals, p.intervals, position)
            merged = self.finish(
                Predicate(attribute, p.kind, intervals, q.patterns + p.patterns), position)
            if merged is None:
                return None
            out[attribute] = merged
        return out

    def intersect(self, attribute: str, a: tuple[Interval, ...], b: tuple[Interval, ...],
                  position: int) -> tuple[Interval, ...]:
        """The intersection of two sorted, disjoint, non-touching interval sets.

        A sorted merge: O(len(a) + len(b)) steps, and the result (at most
        len(a) + len(b) - 1 intervals, sorted, disjoint and non-touching, since each
        piece lies in a different interval of a or of b) is checked against
        :data:`MAX_INTERVALS` as it grows.
        """
        self.charge(len(a) + len(b), position)
        out: list[Interval] = []
        append = out.append
        i = j = 0
        na, nb = len(a), len(b)
        # Inlined: this loop is the whole cost of merging long lists.
        while i < na and j < nb:
            x, y = a[i], b[j]
            x_lo, y_lo = x.lo, y.lo
            if x_lo is None:
                lo, lo_closed = y_lo, y.lo_closed
            elif y_lo is None or x_lo > y_lo:  # type: ignore[operator]
                lo, lo_closed = x_lo, x.lo_closed
            elif y_lo > x_lo:  # type: ignore[operator]
                lo, lo_closed = y_lo, y.lo_closed
            else:
                lo, lo_closed = x_lo, x.lo_closed and y.lo_closed
            x_hi, y_hi = x.hi, y.hi
            # x_first: x ends no later than y, so x meets nothing in b after y.
            if x_hi is None:
                hi, hi_closed, x_first = y_hi, y.hi_closed, False
            elif y_hi is None or x_hi < y_hi:  # type: ignore[operator]
                hi, hi_closed, x_first = x_hi, x.hi_closed, True
            elif y_hi < x_hi:  # type: ignore[operator]
                hi, hi_closed, x_first = y_hi, y.hi_closed, False
            else:
                hi, hi_closed, x_first = x_hi, x.hi_closed and y.hi_closed, not x.hi_closed
            if lo is None or hi is None or lo < hi or (lo == hi and lo_closed and hi_closed):  # type: ignore[operator]
                if len(out) == MAX_INTERVALS:
                    raise ExpressionLimitError(
                        f"the comparisons on {attribute!r} in one conjunct combine into more "
                        f"than {MAX_INTERVALS} intervals; merge their lists or split the "
                        "subscription",
                        self.text,
                        position,
                    )
                append(Interval(lo, lo_closed, hi, hi_closed))
            if x_first:
                i += 1
            else:
                j += 1
        return tuple(out)

    def finish(self, p: Predicate, position: int) -> Predicate | None:
        """Drop impossible predicates; resolve patterns against point sets."""
        if not p.intervals:
            return None
        if not p.patterns:
            return p
        if all(iv.is_point for iv in p.intervals):
            self.charge(len(p.intervals) * (len(p.patterns) + 1), position)
            points = tuple(iv for iv in p.intervals
                           if all(pt.test(iv.lo) for pt in p.patterns))  # type: ignore[arg-type]
            return Predicate(p.attribute, p.kind, points) if points else None
        self.charge(len(p.patterns), position)
        patterns = tuple(dict.fromkeys(p.patterns))
        present = set(patterns)
        if any(Pattern(x.form, x.text, not x.negated) in present for x in patterns):
            return None
        return Predicate(p.attribute, p.kind, p.intervals, patterns)


def _distinct_attributes(written: list[Written]) -> bool:
    return len({w[0] for w in written}) == len(written)


def parse_subscription(text: str) -> Subscription:
    """Parse and normalise a subscription.

    Cost O(len(text)): parsing is linear and normalisation stops after
    :data:`MAX_NORMALISATION_STEPS` steps. The text is scanned once: a conjunction of
    comparisons on distinct attributes goes from its scanned comparisons straight to
    :meth:`Normaliser.conjunction`, with no tree (one comparison is then charged one
    step more than :meth:`Normaliser.dnf` charges it, which no limit can notice). Raises
    :class:`~psmatch.errors.ExpressionError` for text that does not parse,
    :class:`ExpressionLimitError` past the limits and :class:`UnsatisfiableError` when no
    conjunct can ever be true.
    """
    readable = text.__class__ is str and len(text) <= MAX_TEXT
    written = scan_conjunction(text) if readable else None
    normaliser = Normaliser(text)
    if written is not None and _distinct_attributes(written):
        raw = normaliser.conjunction(written)
    elif written is not None:
        raw = normaliser.dnf(conjunction_tree(written))
    else:  # parse_expression would scan again; it checks what is not readable
        raw = normaliser.dnf(Parser(text).parse() if readable else parse_expression(text))
    conjuncts = tuple([Conjunct(tuple(sorted(c.values(), key=_BY_ATTRIBUTE))) for c in raw])
    if not conjuncts:
        raise UnsatisfiableError(f"the expression can never be true: {text!r}", text)
    total = sum([len(p.intervals) for c in conjuncts for p in c.predicates])
    if total > MAX_NORMAL_FORM_INTERVALS:
        raise ExpressionLimitError(
            f"the expression has {total} intervals in its normal form, more than "
            f"{MAX_NORMAL_FORM_INTERVALS}: its conjuncts repeat comparisons with many values; "
            "split it into several subscriptions",
            text,
        )
    return Subscription(text, conjuncts)
