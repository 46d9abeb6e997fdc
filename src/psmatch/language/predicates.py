"""The predicate of one comparison, and the interval-set operations that build it.

Every operator maps onto one shape, a union of sorted, disjoint, non-touching intervals
of one kind's order plus, for strings, ``like`` patterns that are not intervals (suffix
and contains): ``in`` lists are sorted and merged, negations are complements (booleans
stay in their finite domain {false, true}), a prefix ``like`` is the interval up to the
prefix's successor. :mod:`psmatch.language.normalise` merges these per attribute.
"""

from __future__ import annotations

from psmatch.language.normal_form import Interval, Pattern, Predicate
from psmatch.language.values import MAX_CODE_POINT, Kind, Value, kind_of

_EVERYTHING = (Interval(None, False, None, False),)


def _normalise_intervals(intervals: list[Interval]) -> tuple[Interval, ...]:
    """Sort and merge overlapping or touching intervals; drop empty ones.

    Cost O(n log n) for the sort, then one pass.
    """

    def lo_key(iv: Interval) -> tuple:
        return (0,) if iv.lo is None else (1, iv.lo, 0 if iv.lo_closed else 1)

    kept = [iv for iv in intervals if not _is_empty(iv.lo, iv.lo_closed, iv.hi, iv.hi_closed)]
    kept.sort(key=lo_key)
    merged: list[Interval] = []
    for iv in kept:
        if merged:
            last = merged[-1]
            touches = (
                last.hi is None
                or iv.lo is None
                or iv.lo < last.hi  # type: ignore[operator]
                or (iv.lo == last.hi and (iv.lo_closed or last.hi_closed))
            )
            if touches:
                if last.hi is None or (iv.hi is not None and (
                    iv.hi < last.hi or (iv.hi == last.hi and not iv.hi_closed)  # type: ignore[operator]
                )):
                    continue
                merged[-1] = Interval(last.lo, last.lo_closed, iv.hi, iv.hi_closed)
                continue
        merged.append(iv)
    return tuple(merged)


def _is_empty(lo: Value | None, lo_closed: bool, hi: Value | None, hi_closed: bool) -> bool:
    if lo is None or hi is None:
        return False
    if lo > hi:  # type: ignore[operator]
        return True
    return lo == hi and not (lo_closed and hi_closed)


def _complement(ivs: tuple[Interval, ...]) -> tuple[Interval, ...]:
    """The gaps between sorted, disjoint, non-touching intervals. Cost O(n)."""
    out: list[Interval] = []
    lo: Value | None = None
    lo_closed = False
    for iv in ivs:
        if iv.lo is not None:
            out.append(Interval(lo, lo_closed, iv.lo, not iv.lo_closed))
        if iv.hi is None:
            return tuple(out)
        lo, lo_closed = iv.hi, not iv.hi_closed
    out.append(Interval(lo, lo_closed, None, False))
    return tuple(out)


def _prefix_successor(prefix: str) -> str | None:
    """The least string greater than every string starting with ``prefix`` (None: none)."""
    chars = list(prefix)
    while chars and ord(chars[-1]) == MAX_CODE_POINT:
        chars.pop()
    if not chars:
        return None
    chars[-1] = chr(ord(chars[-1]) + 1)
    return "".join(chars)


def _point(value: Value) -> Interval:
    return Interval(value, True, value, True)


def comparison_predicate(attribute: str, op: str, vals: tuple[Value, ...]) -> Predicate:
    """The predicate of one comparison (``not`` already folded into ``op``).

    Cost O(v log v) for the v values of an ``in`` list, O(1) otherwise.
    """
    kind = kind_of(vals[0])
    if vals[0].__class__ is bool:  # kind is Kind.BOOL (bool has no subclass), but quicker
        # Booleans form the finite domain {False, True}: complements stay inside it.
        chosen = set(vals)
        if op in ("!=", "notin"):
            chosen = {False, True} - chosen
        return Predicate(attribute, kind, tuple(_point(v) for v in sorted(chosen)))
    if op == "=":
        return Predicate(attribute, kind, (_point(vals[0]),))
    if op in ("<", "<="):
        return Predicate(attribute, kind, (Interval(None, False, vals[0], op == "<="),))
    if op in (">", ">="):
        return Predicate(attribute, kind, (Interval(vals[0], op == ">=", None, False),))
    if op in ("like", "notlike"):
        return _like_predicate(attribute, kind, op, str(vals[0]))
    if op in ("in", "!=", "notin"):
        # distinct values (the common case) are points apart: sorting them is all the
        # merge would do
        ivs = (tuple(_point(v) for v in sorted(vals)) if len(set(vals)) == len(vals)
               else _normalise_intervals([_point(v) for v in vals]))  # fmt: skip
    else:  # between, notbetween
        low, high = vals
        ivs = () if low > high else (Interval(low, True, high, True),)  # type: ignore[operator]
    if op in ("!=", "notin", "notbetween"):
        ivs = _complement(ivs)
    return Predicate(attribute, kind, ivs)


def _like_predicate(attribute: str, kind: Kind, op: str, pattern: str) -> Predicate:
    """The predicate of ``attribute like pattern`` (``op`` ``like`` or ``notlike``)."""
    patterns: tuple[Pattern, ...] = ()
    if len(pattern) >= 2 and pattern.startswith("%") and pattern.endswith("%"):
        ivs, patterns = _EVERYTHING, (Pattern("contains", pattern[1:-1], op == "notlike"),)
    elif pattern.startswith("%"):
        ivs, patterns = _EVERYTHING, (Pattern("suffix", pattern[1:], op == "notlike"),)
    elif pattern.endswith("%"):
        prefix = pattern[:-1]
        ivs = (Interval(prefix, True, _prefix_successor(prefix), False),)
    else:
        ivs = (_point(pattern),)
    if patterns and not patterns[0].text:
        # '%' and '%%' hold for every string; their negation for none.
        ivs = () if op == "notlike" else _EVERYTHING
        patterns = ()
    elif op == "notlike" and not patterns:
        ivs = _complement(ivs)
    return Predicate(attribute, kind, ivs, patterns)
