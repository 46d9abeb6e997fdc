"""Normal-form columns of many conjunctions of integer comparisons, from their pieces.

The common form of bulk loads: a text that is comparisons of an attribute with integers
of at most 18 digits (``=``, ``==``, ``!=``, ``<>``, ``<``, ``<=``, ``>``, ``>=``,
``between``, ``not between``) joined by ``and``. :func:`conjunction_columns` takes such
texts as a scanner read them (:mod:`psmatch.core.bulk_scan`: per comparison its text,
attribute, operator and integers) and builds their
:class:`~psmatch.language.columns.SubscriptionColumns`: exactly what
:func:`~psmatch.language.normalise.parse_subscription` gives for each (its one conjunct,
predicates sorted by attribute), with no object per comparison or interval. It refuses
the texts whose normal form is not that (an attribute twice, an impossible ``between``,
a keyword as a name, more than :data:`~psmatch.language.limits.MAX_PREDICATES`
comparisons, a text over :data:`~psmatch.language.limits.MAX_TEXT`), which are left to
``parse_subscription``, whose every error stays its own.

Cost O(comparisons) in numpy passes and C loops (``map``), no Python frame per
comparison.
"""

from __future__ import annotations

import numpy as np

from psmatch.language.columns import ConjunctColumns, SubscriptionColumns
from psmatch.language.lexer import KEYWORD_SPELLINGS
from psmatch.language.limits import MAX_PREDICATES, MAX_TEXT
from psmatch.language.values import Kind

EQ, NE, LT, LE, GT, GE, BETWEEN, NOTBETWEEN = range(8)
"""The operators' codes, as the scanner writes them."""


def conjunction_columns(texts: list[str], text_of: np.ndarray, names: list[str],
                        code: np.ndarray, value: np.ndarray, high: np.ndarray,
                        rejected: np.ndarray) -> tuple[np.ndarray, SubscriptionColumns]:
    """The texts in the common form, as columns: ``texts[t]`` is the comparisons ``i``
    with ``text_of[i] == t`` (in order, ascending ``t``): ``names[i] code[i] value[i]``
    (``between value[i] and high[i]``). ``rejected`` (bool, per text) marks the texts
    the scanner refused; the others this refuses are marked there too. Returns the
    positions of the texts taken (ascending) and their columns."""
    n = len(texts)
    k = len(names)
    rejected |= np.fromiter(map(len, texts), np.int64, n) > MAX_TEXT
    rejected[text_of[(code == BETWEEN) & (value > high)]] = True  # can never be true
    counts = np.bincount(text_of, minlength=n)
    rejected |= counts > MAX_PREDICATES
    rejected |= counts == 0
    distinct = sorted(set(names))
    if KEYWORD_SPELLINGS.intersection(distinct):  # rare: a keyword is no name
        keyword = np.fromiter(map(KEYWORD_SPELLINGS.__contains__, names), bool, k)
        rejected[text_of[keyword]] = True
    # predicates sorted by attribute within each text; one attribute twice is the parser's
    ranks = {name: i for i, name in enumerate(distinct)}
    rank = np.fromiter(map(ranks.__getitem__, names), np.int64, k)
    order = np.lexsort((rank, text_of))
    text_sorted = text_of[order]
    twice = np.flatnonzero((np.diff(text_sorted) == 0) & (np.diff(rank[order]) == 0))
    rejected[text_sorted[twice]] = True
    rows = order[~rejected[text_sorted]]
    accepted = np.flatnonzero(~rejected)
    attribute = np.array(names, dtype=object)[rows].tolist() if k else []
    columns = _columns([texts[i] for i in accepted.tolist()], attribute, code[rows],
                       value[rows], high[rows], counts[accepted])  # fmt: skip
    return accepted, columns


def _columns(texts: list[str], names: list[str], code: np.ndarray, value: np.ndarray,
             high: np.ndarray, counts: np.ndarray) -> SubscriptionColumns:
    """The columns of accepted texts from their comparisons (in predicate order): each
    comparison's intervals as ``comparison_predicate`` makes them."""
    k = len(names)
    # not between lo and hi with lo > hi is everything: one unbounded interval
    two = (code == NE) | ((code == NOTBETWEEN) & (value <= high))
    iv_count = 1 + two.astype(np.int64)
    first = np.cumsum(iv_count) - iv_count
    total = int(iv_count.sum())
    lo, hi = np.zeros(total, np.int64), np.zeros(total, np.int64)
    lo_none, hi_none = np.zeros(total, bool), np.zeros(total, bool)
    lo_closed, hi_closed = np.zeros(total, bool), np.zeros(total, bool)
    # the first interval of each comparison
    lo[first] = value
    lo_none[first] = (code == NE) | (code == LT) | (code == LE) | (code == NOTBETWEEN)
    lo_closed[first] = (code == EQ) | (code == GE) | (code == BETWEEN)
    hi[first] = np.where(code == BETWEEN, high, value)
    hi_none[first] = (code == GT) | (code == GE) | ((code == NOTBETWEEN) & ~two)
    hi_closed[first] = (code == EQ) | (code == LE) | (code == BETWEEN)
    # the second, above the value (!=) or the high bound (not between)
    second = first[two] + 1
    lo[second] = np.where(code[two] == NE, value[two], high[two])
    hi_none[second] = True
    lo_objects, hi_objects = lo.astype(object), hi.astype(object)
    lo_objects[lo_none] = None
    hi_objects[hi_none] = None
    return SubscriptionColumns(
        texts=texts,
        conjunct_count=np.ones(len(texts), dtype=np.int64),
        conjuncts=ConjunctColumns(
            predicate_count=np.asarray(counts, dtype=np.int64),
            attribute=names,
            kind=np.full(k, int(Kind.NUMBER), dtype=np.int64),
            interval_count=iv_count,
            patterns={},
            lo=lo_objects.tolist(),
            lo_closed=lo_closed,
            hi=hi_objects.tolist(),
            hi_closed=hi_closed,
        ),
    )
