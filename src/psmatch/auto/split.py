"""Cutting a batch of subscriptions' columns to the conjuncts one family files.

Owns :func:`select_conjuncts`: the :class:`psmatch.language.columns.SubscriptionColumns`
of some of a batch's conjuncts, each subscription keeping those of its conjuncts that
were picked (and left out when none was), so that a family files the columns as they
are, with no object per predicate or interval.
"""

from __future__ import annotations

from operator import itemgetter

import numpy as np

from psmatch.language.columns import ConjunctColumns, SubscriptionColumns


def _pick(values: list, rows: np.ndarray) -> list:
    """``values`` at ``rows``, in a C loop."""
    if len(rows) == 0:
        return []
    if len(rows) == 1:
        return [values[int(rows[0])]]
    return list(itemgetter(*rows.tolist())(values))


def select_conjuncts(columns: SubscriptionColumns, keep: np.ndarray
                     ) -> tuple[np.ndarray, SubscriptionColumns]:  # fmt: skip
    """The subscriptions keeping a conjunct where ``keep`` (bool, per conjunct) holds,
    as a mask over ``columns``' subscriptions, and their columns with only those
    conjuncts. Cost O(conjuncts + predicates + intervals), vectorised."""
    conj = columns.conjuncts
    owner = np.repeat(np.arange(len(columns)), columns.conjunct_count)
    kept_count = np.bincount(owner[keep], minlength=len(columns)).astype(np.int64)
    subscriptions = kept_count > 0
    pred_keep = np.repeat(keep, conj.predicate_count)
    preds = np.flatnonzero(pred_keep)
    intervals = np.flatnonzero(np.repeat(pred_keep, conj.interval_count))
    new_row = np.cumsum(pred_keep) - 1
    texts = columns.texts
    picked = ConjunctColumns(
        predicate_count=conj.predicate_count[keep],
        attribute=_pick(conj.attribute, preds),
        kind=conj.kind[preds],
        interval_count=conj.interval_count[preds],
        patterns={int(new_row[p]): ps for p, ps in conj.patterns.items() if pred_keep[p]},
        lo=_pick(conj.lo, intervals),
        lo_closed=conj.lo_closed[intervals],
        hi=_pick(conj.hi, intervals),
        hi_closed=conj.hi_closed[intervals],
    )
    return subscriptions, SubscriptionColumns(
        texts=_pick(texts, np.flatnonzero(subscriptions)),
        conjunct_count=kept_count[subscriptions], conjuncts=picked)
