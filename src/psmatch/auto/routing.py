"""The ``auto`` matcher's rule: which family each conjunct is filed in, and why.

Owns :class:`DomainStats` (the distinct bounds seen per (attribute, kind), up to
:data:`COARSE_BOUNDS`) and :func:`route` (a reason per conjunct, :data:`REASONS`).

**Why the rule looks at bounds.** A PS-Tree cuts an (attribute, kind)'s domain into the
``2m + 1`` spaces of its ``m`` distinct bounds, and PSTHash files a conjunct under every
space its access predicate covers. A predicate whose intervals are a few points covers
that many spaces whatever ``m`` is; a range covers a fixed fraction of them, so on a
*coarse* domain (few distinct bounds, BE-Gen's 100 values) it costs at most ``2m + 1``
links, and on a *fine* one (prices, timestamps: bounds that rarely repeat, ``m`` growing
with the subscriptions) its links grow with ``n`` and the index with ``n`` squared. The
bitset family costs a bounded number of bits per predicate on any domain, but every
event pays a pass over the ids of its dense dimensions, where PSTHash reads only the
entries of the event's spaces: PSTHash is the faster where it stays linear.

**The rule** (per conjunct, at filing, from the statistics including its own batch):

* ``psthash/points``: some predicate is at most :data:`MAX_POINTS` points
  (``=``, ``in``): its spaces are bounded on any domain;
* ``psthash/coarse``: some predicate is on a coarse (attribute, kind), one with at most
  :data:`COARSE_BOUNDS` distinct bounds seen so far: every predicate there covers at most
  ``2 * COARSE_BOUNDS + 1`` spaces;
* ``bitset/fine-ranges``: otherwise, every predicate is a range (or ``!=``, ``not in``,
  a ``like``) on a fine domain.

PSTHash's access order puts the most selective predicate first (fewest past events in
the spaces it covers, then the operator's rank), which for these conjuncts is the
bounded one. The rule is static: a conjunct stays in the family it was filed in, and
an (attribute, kind) once fine stays fine (removals do not make it coarse again), so
the rule never moves subscriptions. The PS-Tree holds only the bounds of the conjuncts
filed in it, so ranges on a fine domain never reach it once the domain is seen to be
fine. The case the rule leaves unbounded: ranges filed on an attribute while it looked
coarse stay in PSTHash after it turns fine, and their links grow with the bounds later
point predicates bring to that attribute's tree (moving them would need their
conjuncts, which the families keep only as rows).

Cost: filing a batch reads every interval's bounds once (set updates, C loops) while
their (attribute, kind) is coarse, and O(predicates + intervals) vectorised to route;
memory at most ``COARSE_BOUNDS + 1`` bounds per (attribute, kind).
"""

from __future__ import annotations

from itertools import count, repeat
from operator import eq, is_not, itemgetter

import numpy as np

from psmatch.language.columns import ConjunctColumns
from psmatch.language.values import Kind, Value

COARSE_BOUNDS = 256
"""Most distinct bounds of a coarse (attribute, kind): PSTHash files ranges on it."""
MAX_POINTS = 32
"""Most points a predicate may be for PSTHash to file it on a fine domain (PSTHash's
``MAX_KEYS``: as many spaces as it files a hashed conjunct under at most)."""

POINTS, COARSE, FINE_RANGES = 0, 1, 2
"""Reason codes, the index into :data:`REASONS` and :data:`FAMILY_OF`."""
REASONS = ("psthash/points", "psthash/coarse", "bitset/fine-ranges")
"""Each reason as ``family/why``, what ``stats().placement`` counts conjuncts by."""
FAMILY_OF = tuple(reason.split("/")[0] for reason in REASONS)
"""The family of each reason code."""


class DomainStats:
    """The distinct bounds seen per (attribute, kind code), while at most
    :data:`COARSE_BOUNDS`; a fine one keeps no bounds."""

    __slots__ = ("bounds", "fine")

    def __init__(self) -> None:
        self.bounds: dict[tuple[str, int], set[Value]] = {}
        self.fine: set[tuple[str, int]] = set()

    def observe(self, columns: ConjunctColumns) -> np.ndarray:
        """Count the bounds of every interval of ``columns`` on a coarse (attribute,
        kind); returns whether each predicate's (attribute, kind) is coarse after that.
        Cost O(predicates + intervals) in C loops and numpy, one set update per
        (attribute, kind) still coarse."""
        first: dict[str, int] = {}  # each attribute's first predicate: a number for it
        named = np.fromiter(map(first.setdefault, columns.attribute, count()), np.int64,
                            len(columns.kind))
        keys, code = np.unique(named * len(Kind) + columns.kind, return_inverse=True)
        name_of = {number: name for name, number in first.items()}
        iv_code = np.repeat(code.ravel(), columns.interval_count)
        order = np.argsort(iv_code)
        ends = np.searchsorted(iv_code[order], np.arange(len(keys)), side="right").tolist()
        coarse = np.zeros(len(keys), dtype=bool)
        for k, (key, a, b) in enumerate(zip(keys.tolist(), [0, *ends[:-1]], ends,
                                            strict=True)):
            dim = (name_of[key // len(Kind)], key % len(Kind))
            if dim in self.fine:
                continue
            seen = self.bounds.setdefault(dim, set())
            pick = itemgetter(*order[a:b].tolist(), order[a])  # a tuple, even of one
            seen.update(pick(columns.lo))
            seen.update(pick(columns.hi))
            seen.discard(None)
            if len(seen) > COARSE_BOUNDS:
                del self.bounds[dim]
                self.fine.add(dim)
            else:
                coarse[k] = True
        return coarse[code.ravel()]

    @property
    def nbytes(self) -> int:
        """Estimated bytes: 64 per bound kept (its set slot and object), 200 per key."""
        return 64 * sum(map(len, self.bounds.values())) + 200 * (len(self.bounds)
                                                                 + len(self.fine))


def route(columns: ConjunctColumns, domains: DomainStats) -> np.ndarray:
    """The reason code of each conjunct of ``columns`` (int8; see the module docstring),
    after ``domains`` counted their bounds. O(predicates + intervals), C loops."""
    n_pred = len(columns.kind)
    coarse = domains.observe(columns)
    point = np.fromiter(map(eq, columns.lo, columns.hi), bool, len(columns.lo))
    point &= np.fromiter(map(is_not, columns.lo, repeat(None)), bool, len(columns.lo))
    point &= columns.lo_closed & columns.hi_closed
    owner = np.repeat(np.arange(n_pred), columns.interval_count)
    points = np.bincount(owner, weights=point, minlength=n_pred) == columns.interval_count
    points &= (columns.interval_count <= MAX_POINTS) & ~columns.has_patterns
    conj = np.repeat(np.arange(len(columns)), columns.predicate_count)
    any_points = np.bincount(conj, weights=points, minlength=len(columns)) > 0
    any_coarse = np.bincount(conj, weights=coarse, minlength=len(columns)) > 0
    reason = np.full(len(columns), FINE_RANGES, dtype=np.int8)
    reason[any_coarse] = COARSE
    reason[any_points] = POINTS
    return reason
