"""Bulk scanning: many texts that are conjunctions of integer comparisons, to columns.

:func:`scan_columns` reads a list of subscription texts with one ``findall`` of
:data:`_COMPARISON_RE` over all of them (joined by newlines) and builds the
:class:`~psmatch.language.columns.SubscriptionColumns` of those that are conjunctions of
comparisons of integers of at most 18 digits (``=``, ``==``, ``!=``, ``<>``, ``<``, ``<=``,
``>``, ``>=``, ``between``, ``not between``) on distinct attributes: exactly what
:func:`~psmatch.language.normalise.parse_subscription` gives for each (its one conjunct,
predicates sorted by attribute), with no object per comparison or interval. Every other
text (another form, an impossible ``between``, a keyword as a name, a limit) is handed
back by position for ``parse_subscription``, whose every error stays its own.

Cost O(total length) in the regex engine and C loops (``zip``, ``map``, ``compress``),
then numpy passes over the comparisons: no Python frame per comparison.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import compress, repeat

import numpy as np

from psmatch.language.columns import ConjunctColumns, SubscriptionColumns
from psmatch.language.lexer import KEYWORD_SPELLINGS
from psmatch.language.limits import MAX_PREDICATES, MAX_TEXT
from psmatch.language.values import Kind

_WS = r"[^\S\n]"  # whitespace but the newline that ends each text
_COMPARISON_RE = re.compile(
    rf"""
    {_WS}*(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_0-9]+)*)
    (?:{_WS}*(?P<op><>|!=|==|<=|>=|=|<|>){_WS}*
      |{_WS}+(?:(?P<negated>(?i:not)){_WS}+)?(?P<between>(?i:between)){_WS}+)
    (?P<value>[-+]?[0-9]{{1,18}})
    (?(between){_WS}+(?i:and){_WS}+(?P<high>[-+]?[0-9]{{1,18}}))
    (?:{_WS}+(?i:and){_WS}+|{_WS}*(?P<end>\n))
    |(?P<bad>[^\n]*\n)
    """,
    re.VERBOSE,
)
"""One integer comparison and the ``and`` after it (or the newline that ends its text),
else the rest of the text (``bad``): every character of the joined texts is in exactly
one match, so a text is in the common form when none of its matches is ``bad``. The
pieces are the tokenizer's (:data:`~psmatch.language.lexer.TOKEN_RE`): a name, an
operator, an ``integer`` (at most 18 digits, so within the 64-bit range, and followed
by whitespace or the end, so not the start of a longer number), keywords in any case
between whitespace."""

_EQ, _NE, _LT, _LE, _GT, _GE, _BETWEEN, _NOT_BETWEEN = range(8)
_OP_CODE = {"=": _EQ, "==": _EQ, "!=": _NE, "<>": _NE, "<": _LT, "<=": _LE, ">": _GT, ">=": _GE}


def scan_columns(texts: Sequence[str]) -> tuple[np.ndarray, SubscriptionColumns, np.ndarray]:
    """The positions of the texts in the common form (see the module docstring), their
    columns (in that order), and the positions of the others (int64, ascending)."""
    n = len(texts)
    joined = "\n".join(texts) + "\n"
    if joined.count("\n") != n:  # a text holds a newline: its lines would be mistaken for texts
        return np.empty(0, np.int64), _columns([], *_no_rows()), np.arange(n, dtype=np.int64)
    found = _COMPARISON_RE.findall(joined)
    names, ops, negated, _, values, highs, ends, bads = (
        zip(*found, strict=True) if found else ((),) * 8)
    m = len(found)
    bad = np.fromiter(map(bool, bads), bool, m)
    ends_text = np.fromiter(map(bool, ends), bool, m) | bad
    text_of = np.cumsum(ends_text) - ends_text  # the text each match is in
    rejected = np.zeros(n, dtype=bool)
    rejected[text_of[bad]] = True
    rejected |= np.fromiter(map(len, texts), np.int64, n) > MAX_TEXT
    # the comparisons: every match but the bad ones
    keep = (~bad).tolist()
    names = list(compress(names, keep))
    text_of = text_of[~bad]
    k = len(names)
    code = np.fromiter(map(_OP_CODE.get, compress(ops, keep), repeat(_BETWEEN)), np.int8, k)
    code[(code == _BETWEEN) & np.fromiter(map(bool, compress(negated, keep)), bool, k)] = (
        _NOT_BETWEEN)
    value = np.fromiter(map(int, compress(values, keep)), np.int64, k)
    is_range = code >= _BETWEEN
    high = np.zeros(k, dtype=np.int64)
    high[is_range] = np.fromiter(map(int, compress(compress(highs, keep), is_range.tolist())),
                                 np.int64, int(is_range.sum()))
    rejected[text_of[(code == _BETWEEN) & (value > high)]] = True  # can never be true
    counts = np.bincount(text_of, minlength=n)
    rejected |= counts > MAX_PREDICATES
    # predicates sorted by attribute within each text; one attribute twice is the parser's
    distinct = sorted(set(names))
    if KEYWORD_SPELLINGS.intersection(distinct):  # rare: a keyword is no name
        keyword = np.fromiter(map(KEYWORD_SPELLINGS.__contains__, names), bool, k)
        rejected[text_of[keyword]] = True
    ranks = {name: i for i, name in enumerate(distinct)}
    rank = np.fromiter(map(ranks.__getitem__, names), np.int64, k)
    order = np.lexsort((rank, text_of))
    text_of, rank = text_of[order], rank[order]
    twice = np.flatnonzero((np.diff(text_of) == 0) & (np.diff(rank) == 0))
    rejected[text_of[twice]] = True
    rejected |= counts == 0
    rows = order[~rejected[text_of]]
    accepted = np.flatnonzero(~rejected)
    columns = _columns([texts[i] for i in accepted.tolist()],
                       [names[i] for i in rows.tolist()], code[rows], value[rows],
                       high[rows], counts[accepted])  # fmt: skip
    return accepted, columns, np.flatnonzero(rejected)


def _no_rows() -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    empty = np.empty(0, np.int64)
    return [], empty.astype(np.int8), empty, empty, empty


def _columns(texts: list[str], names: list[str], code: np.ndarray, value: np.ndarray,
             high: np.ndarray, counts: np.ndarray) -> SubscriptionColumns:
    """The columns of accepted texts from their comparisons (in predicate order): each
    comparison's intervals as ``comparison_predicate`` makes them."""
    k = len(names)
    # not between lo and hi with lo > hi is everything: one unbounded interval
    two = (code == _NE) | ((code == _NOT_BETWEEN) & (value <= high))
    iv_count = 1 + two.astype(np.int64)
    first = np.cumsum(iv_count) - iv_count
    total = int(iv_count.sum())
    lo, hi = np.zeros(total, np.int64), np.zeros(total, np.int64)
    lo_none, hi_none = np.zeros(total, bool), np.zeros(total, bool)
    lo_closed, hi_closed = np.zeros(total, bool), np.zeros(total, bool)
    # the first interval of each comparison
    lo[first] = value
    lo_none[first] = (code == _NE) | (code == _LT) | (code == _LE) | (code == _NOT_BETWEEN)
    lo_closed[first] = (code == _EQ) | (code == _GE) | (code == _BETWEEN)
    hi[first] = np.where(code == _BETWEEN, high, value)
    hi_none[first] = (code == _GT) | (code == _GE) | ((code == _NOT_BETWEEN) & ~two)
    hi_closed[first] = (code == _EQ) | (code == _LE) | (code == _BETWEEN)
    # the second, above the value (!=) or the high bound (not between)
    second = first[two] + 1
    lo[second] = np.where(code[two] == _NE, value[two], high[two])
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
