"""Issue 46: on a fine value domain an index's cost stays linear in its subscriptions.

Ranges with random bounds over [0, 10**6) make a PS-Tree's spaces grow with the
subscriptions; an index that files a range under every space it covers then grows with
their square. For every indexed matcher, four times the subscriptions must cost at most
4.5 times: ``stats().estimated_bytes`` and the tracemalloc peak of the bulk add (the
filing's work in memory, temporaries included). Counted, never timed. (PSTBloom's and
PSTHash's wide ranges are filed in O(log cells) canonical segments, so their posting
entries grow by a level's worth, a few per range, each time the cells double; that bound
is tested in tests/pstree/test_cells.py.)
"""

from __future__ import annotations

import tracemalloc
from functools import cache

import numpy as np
import pytest

from psmatch import MATCHERS, make_matcher
from psmatch.language import Subscription, parse_subscription

INDEXES = [name for name in MATCHERS if name != "scan"]
DOMAIN = 1_000_000
ATTRIBUTES = 20
WORKLOADS = {  # ranges per subscription, width as a share of the domain
    "fine2": (3, 0.02),
    "fine40": (3, 0.4),
    "hem": (10, 0.4),  # HEM's default: 10 closed ranges of 0.4 x 10**6, distinct attributes
}
SMALL, LARGE = 2000, 8000
RATIO = 4.5


@cache
def subscriptions(workload: str, n: int) -> list[tuple[str, Subscription]]:
    """``n`` subscriptions of the workload's ranges, random bounds, on distinct
    attributes of :data:`ATTRIBUTES`, parsed once for every matcher."""
    per_subscription, width = WORKLOADS[workload]
    rng = np.random.default_rng(n)
    span = int(width * DOMAIN)
    attributes = np.argsort(rng.random((n, ATTRIBUTES)), axis=1)[:, :per_subscription]
    lows = rng.integers(0, DOMAIN - span + 1, size=(n, per_subscription))
    return [(str(i), parse_subscription(" and ".join(
        f"a{a} between {lo} and {lo + span}"
        for a, lo in zip(row_a.tolist(), row_lo.tolist(), strict=True))))
        for i, (row_a, row_lo) in enumerate(zip(attributes, lows, strict=True))]


def costs(name: str, workload: str, n: int) -> tuple[int, int]:
    """(estimated bytes, tracemalloc peak of the bulk add)."""
    matcher = make_matcher(name)
    tracemalloc.start()
    try:
        matcher.add_many(subscriptions(workload, n))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    if n == SMALL:  # the large build's invariants are the same code's; its check() is
        matcher.check()  # a Python step per conjunct, the bulk of this test's time
    return matcher.stats().estimated_bytes, peak


@pytest.mark.parametrize("workload", list(WORKLOADS))
@pytest.mark.parametrize("name", INDEXES)
def test_four_times_the_subscriptions_cost_at_most_four_and_a_half_times(
        name: str, workload: str) -> None:
    small, large = costs(name, workload, SMALL), costs(name, workload, LARGE)
    for what, a, b in zip(("estimated_bytes", "filing peak"), small, large, strict=True):
        assert b <= RATIO * max(a, 1), (name, workload, what, a, b, b / max(a, 1))
