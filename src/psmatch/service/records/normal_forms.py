"""A subscription's normal form as JSON text, what the service's change log carries.

The service parses a subscription once, on its way in, and logs this text
(:func:`dump_normal_form`), so that its workers read the normal form instead of parsing
the expression again: one subscription's objects (:func:`load_normal_form`), or a batch
of texts straight into :class:`~psmatch.language.columns.SubscriptionColumns`
(:func:`load_normal_forms`), with no object per predicate or interval (C loops over the
decoded lists, types checked by table lookups)::

    [conjunct, ...]; a conjunct is [predicate, ...]; a predicate is
    [attribute, kind, [lo, lo_closed, hi, hi_closed, ...]] and, with patterns, a
    fourth item [[form, text, negated], ...]

A normal form read from text is checked for its shape and the kinds of its values, not
for intervals sorted and disjoint: it must come from :func:`dump_normal_form` of a parsed
subscription (the service's own change log).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

import numpy as np
import orjson

from psmatch.errors import ExpressionError
from psmatch.language import (
    KIND_OF_CODE,
    Conjunct,
    Interval,
    Kind,
    Pattern,
    Predicate,
    Subscription,
)
from psmatch.language.columns import ConjunctColumns, SubscriptionColumns

_new_tuple = tuple.__new__
_BOUND_TYPES = {Kind.NUMBER: frozenset({int, float, type(None)}),
                Kind.STRING: frozenset({str, type(None)}),
                Kind.BOOL: frozenset({bool, type(None)})}  # fmt: skip
_TYPE_CODE = {type(None): 0, bool: 1, int: 2, float: 3, str: 4}
"""A bound's type as a column of :data:`_ALLOWED` (any other type: the last column)."""
_ALLOWED = np.array([[t in _BOUND_TYPES[kind] for t in (*_TYPE_CODE, object)] for kind in Kind])
"""Whether a bound of each type may bound an interval of each kind: ``[kind, type code]``."""

_FIRST, _SECOND, _THIRD = itemgetter(0), itemgetter(1), itemgetter(2)
_MALFORMED = (TypeError, ValueError, IndexError, KeyError, OverflowError, RecursionError)
"""What reading a malformed form raises: a wrong shape or type, a kind past 64 bits,
arrays nested deeper than the JSON decoders recurse."""


def dump_normal_form(subscription: Subscription) -> str:
    """The DNF of ``subscription`` as JSON text (decoders :func:`load_normal_form`,
    :func:`load_normal_forms`).

    Cost O(size of the normal form): orjson writes it, the standard library (ASCII
    escapes) when a string holds a lone surrogate, which orjson refuses.
    """
    form = [[[p.attribute, int(p.kind),
              [*chain.from_iterable(p.intervals)],  # each Interval is its four bounds
              *([[[q.form, q.text, q.negated] for q in p.patterns]] if p.patterns else ())]
             for p in c.predicates] for c in subscription.conjuncts]  # fmt: skip
    try:
        return orjson.dumps(form).decode()
    except orjson.JSONEncodeError:
        return json.dumps(form, separators=(",", ":"))


def _loads(form: str | bytes) -> Any:
    try:
        return orjson.loads(form)
    except orjson.JSONDecodeError:  # a lone surrogate's escape, which orjson refuses
        return json.loads(form)


def load_normal_form(text: str, form: str) -> Subscription:
    """The subscription ``text`` whose DNF :func:`dump_normal_form` wrote as ``form``,
    without parsing ``text``: its objects, one per conjunct, predicate and interval.
    With the stored record's JSON (:func:`psmatch.service.records.subscriptions.load_stored`), about
    half the time of :func:`psmatch.language.parse_subscription` on BE-Gen subscriptions
    and a quarter on a mix of every operator (``.venv/bin/python bench/bench_parser.py``,
    its operations ``load`` and ``parse_subscription``). :func:`load_normal_forms` reads
    many into columns instead.

    :class:`ExpressionError` if the shape or the kind of a value is wrong.
    """
    try:
        items = _loads(form)
        conjuncts = tuple([Conjunct(tuple(map(_load_predicate, c))) for c in items])
    except _MALFORMED as exc:
        raise ExpressionError(f"a malformed normal form ({exc})", text) from None
    if not conjuncts:
        raise ExpressionError("a normal form with no conjunct", text)
    return Subscription(text, conjuncts)


def _load_predicate(item: list) -> Predicate:
    """One predicate of a normal form's text; ``ValueError`` (or ``TypeError``,
    ``IndexError``) if it is malformed. The common predicate, one interval, is checked
    value by value, without the slices and sets of the general case, and both tuples are
    made by ``tuple.__new__`` from what was checked (no constructor call)."""
    if len(item) == 3:
        attribute, kind, bounds = item
        patterns: tuple[Pattern, ...] = ()
    else:
        attribute, kind, bounds, listed = item
        patterns = tuple(map(_load_pattern, listed))
    if attribute.__class__ is not str or kind.__class__ is not int:
        raise ValueError(f"attribute {attribute!r:.100} of kind {kind!r:.20}")
    kind = KIND_OF_CODE[kind]
    allowed = _BOUND_TYPES[kind]
    if len(bounds) == 4:
        lo, lo_closed, hi, hi_closed = bounds
        if (lo.__class__ not in allowed or hi.__class__ not in allowed
                or lo_closed.__class__ is not bool or hi_closed.__class__ is not bool):
            raise ValueError(f"interval {bounds!r:.100} of a {kind.name} predicate")
        return _new_tuple(Predicate, (attribute, kind, (_new_tuple(Interval, bounds),), patterns))
    if (not bounds or len(bounds) % 4 or not set(map(type, bounds[::2])) <= allowed
            or set(map(type, bounds[1::2])) != {bool}):  # fmt: skip
        raise ValueError(f"intervals {bounds!r:.100} of a {kind.name} predicate")
    intervals = tuple([_new_tuple(Interval, bounds[i:i + 4]) for i in range(0, len(bounds), 4)])
    return _new_tuple(Predicate, (attribute, kind, intervals, patterns))


def _load_pattern(item: list) -> Pattern:
    form, text, negated = item
    if form not in ("suffix", "contains") or text.__class__ is not str \
            or negated.__class__ is not bool:
        raise ValueError(f"pattern {item!r:.100}")
    return Pattern(form, text, negated)


def load_normal_forms(texts: Sequence[str], forms: Sequence[str | bytes]) -> SubscriptionColumns:
    """The subscriptions ``texts[i]`` whose DNFs :func:`dump_normal_form` wrote as
    ``forms[i]``, as columns, what :func:`load_normal_form` of each would make but with
    no object per conjunct, predicate or interval.

    Cost: one JSON decode per form, then O(predicates + intervals) in C loops (``map``
    and ``chain`` over the decoded lists; the bounds' types checked against their
    kinds by the set of their types, or by a table lookup per bound where a chunk's
    kinds are mixed). :class:`ExpressionError` if any form is
    malformed, without saying which: :func:`load_normal_form` of each finds it.
    """
    try:
        return SubscriptionColumns(list(texts), *_columns(list(map(_loads, forms))))
    except _MALFORMED as exc:
        raise ExpressionError(f"a malformed normal form among {len(forms)} ({exc})") from None


def _columns(items: list[Any]) -> tuple[np.ndarray, ConjunctColumns]:
    """The conjunct counts and the conjunct columns of decoded normal forms; ``ValueError``
    (or ``TypeError``, ``IndexError``) for a wrong shape or type."""
    conjunct_count = _counts(items, "normal form")
    if not conjunct_count.all():
        raise ValueError("a normal form with no conjunct")
    conjuncts = list(chain.from_iterable(items))
    predicate_count = _counts(conjuncts, "conjunct")
    predicates = list(chain.from_iterable(conjuncts))
    width = _counts(predicates, "predicate")
    if ((width != 3) & (width != 4)).any():
        raise ValueError("a predicate that is not [attribute, kind, bounds(, patterns)]")
    attribute = list(map(_FIRST, predicates))
    kinds = list(map(_SECOND, predicates))
    if not set(map(type, attribute)) <= {str} or not set(map(type, kinds)) <= {int}:
        raise ValueError("an attribute that is not a string or a kind that is not an integer")
    kind = np.array(kinds, dtype=np.int64)
    if ((kind < 0) | (kind >= len(Kind))).any():
        raise ValueError("an unknown kind")
    bounds = list(map(_THIRD, predicates))
    bound_count = _counts(bounds, "predicate's bounds")
    if not bound_count.all() or (bound_count % 4).any():
        raise ValueError("a predicate whose bounds are not intervals of four")
    flat = list(chain.from_iterable(bounds))
    lo, lo_closed, hi, hi_closed = flat[0::4], flat[1::4], flat[2::4], flat[3::4]
    interval_count = bound_count // 4
    if not _bounds_allowed(kind, interval_count, lo, hi):
        raise ValueError("a bound of the wrong type for its predicate's kind")
    if not set(map(type, lo_closed)) <= {bool} or not set(map(type, hi_closed)) <= {bool}:
        raise ValueError("an interval end neither open nor closed")
    patterns = {}
    for p in np.flatnonzero(width == 4).tolist():
        if listed := tuple(map(_load_pattern, predicates[p][3])):
            patterns[p] = listed
    return conjunct_count, ConjunctColumns(
        predicate_count, attribute, kind, interval_count, patterns,
        lo, np.array(lo_closed, dtype=bool), hi, np.array(hi_closed, dtype=bool))  # fmt: skip


def _counts(items: list[Any], what: str) -> np.ndarray:
    """The length of each of ``items``, which must all be lists (int64)."""
    if not set(map(type, items)) <= {list}:
        raise ValueError(f"a {what} that is not a list")
    return np.fromiter(map(len, items), np.int64, len(items))


def _bounds_allowed(kind: np.ndarray, interval_count: np.ndarray, lo: list[Any],
                    hi: list[Any]) -> bool:  # fmt: skip
    """Whether each interval's bounds are of types its predicate's kind allows. Bounds
    of predicates all of one kind (BE-Gen's, many a chunk's) are checked by the set of
    their types, one C pass each; others by a table lookup per bound."""
    if kind.size and kind.min() == kind.max():
        allowed = _BOUND_TYPES[KIND_OF_CODE[int(kind[0])]]
        if set(map(type, lo)) <= allowed and set(map(type, hi)) <= allowed:
            return True
    interval_kind = np.repeat(kind, interval_count)
    return bool(_ALLOWED[interval_kind, _type_codes(lo)].all()
                and _ALLOWED[interval_kind, _type_codes(hi)].all())  # fmt: skip


def _type_codes(bounds: list[Any]) -> np.ndarray:
    """Each bound's column of :data:`_ALLOWED`."""
    return np.fromiter(map(_TYPE_CODE.get, map(type, bounds), repeat(len(_TYPE_CODE))),
                       np.int64, len(bounds))  # fmt: skip
