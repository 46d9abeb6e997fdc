"""The papers' predicates ``attribute op constant`` and our normal form mapped onto them.

Owns :func:`decompose`, used by the two-phase matchers (counting, Propagation, PB+tree):
our normal form (a predicate is a union of intervals plus ``like`` patterns, see
:mod:`psmatch.language`) mapped onto the predicates of Fabret et al. ("Filtering
Algorithms and Implementation for Very Fast Publish/Subscribe Systems", SIGMOD 2001)
and Wang et al.'s PB+tree, with op one of ``= < <= > >= !=``. A set of points (``=``,
``in``, booleans, exact ``like``) is one ``=`` predicate over several constants (the
points are disjoint, so at most one can hold). Anything else is its hull plus its
gaps: a lower bound gives ``>``/``>=``, an upper bound ``<``/``<=`` (``between`` and
``like 'ab%'`` become two predicates, as the papers write them), and point gaps one
``!=`` over those points (``!=``, ``not in``). A predicate with neither bound nor point
gap becomes ``!=`` over no point, i.e. "attribute present with this kind". Gaps that
are not points (``not between``, ``not like 'ab%'``) and ``like`` suffix/contains
patterns are outside the papers: the hull predicates stay in the index as a necessary
condition and the conjunct is flagged *residual*, to be verified with
:meth:`psmatch.language.Conjunct.evaluate` once phase 2 has found it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from itertools import pairwise

from psmatch.language import Conjunct, Kind, Predicate, Value


class Op(IntEnum):
    """The papers' relational operators."""

    EQ = 0
    LT = 1
    LE = 2
    GT = 3
    GE = 4
    NE = 5


@dataclass(frozen=True, slots=True)
class PaperPredicate:
    """``attribute op constant`` as the papers write it, over one value kind.

    ``=`` may hold several constants (``in``: true when one of them equals the value),
    ``!=`` several or none (``not in``; true when the value equals none of them), the
    others exactly one.
    """

    attribute: str
    kind: Kind
    op: Op
    constants: tuple[Value, ...]

    @property
    def rank(self) -> tuple[int, int]:
        """Selectivity by operator when there is no history: = , in, ranges, !=."""
        if self.op is Op.EQ:
            return (0 if len(self.constants) == 1 else 1), len(self.constants)
        return (3, 1) if self.op is not Op.NE else (4, len(self.constants))


def decompose(predicate: Predicate) -> tuple[list[PaperPredicate], bool]:
    """The paper predicates whose conjunction ``predicate`` implies, and whether they
    are also sufficient (False) or the predicate must be verified (True, *residual*)."""
    attribute, kind, intervals = predicate.attribute, predicate.kind, predicate.intervals
    if all(iv.is_point for iv in intervals):
        return [PaperPredicate(attribute, kind, Op.EQ, tuple(iv.lo for iv in intervals))], (
            bool(predicate.patterns))  # type: ignore[misc]
    out = []
    first, last = intervals[0], intervals[-1]
    if first.lo is not None:
        out.append(PaperPredicate(attribute, kind, Op.GE if first.lo_closed else Op.GT,
                                  (first.lo,)))
    if last.hi is not None:
        out.append(PaperPredicate(attribute, kind, Op.LE if last.hi_closed else Op.LT,
                                  (last.hi,)))
    points: list[Value] = []
    residual = bool(predicate.patterns)
    for below, above in pairwise(intervals):
        if below.hi == above.lo:  # disjoint and not touching: both ends open
            points.append(below.hi)  # type: ignore[arg-type]
        else:
            residual = True
    if points or not out:
        out.append(PaperPredicate(attribute, kind, Op.NE, tuple(points)))
    return out, residual


def decompose_conjunct(conjunct: Conjunct) -> tuple[list[PaperPredicate], bool]:
    """All paper predicates of a conjunct and whether it needs verification."""
    predicates: list[PaperPredicate] = []
    residual = False
    for predicate in conjunct.predicates:
        parts, rest = decompose(predicate)
        predicates.extend(parts)
        residual |= rest
    return predicates, residual

