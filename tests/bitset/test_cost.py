"""The bitset matcher's costs follow its subscriptions: for 4x the subscriptions, the
estimated bytes and the work of matching (bitset words ORed, candidate pairs, rows
tested exactly) stay within 4.5x, on fine-domain ranges (2 % and 40 % of [0, 10^6)) and
on HEM's default workload (10 ranges of 40 % on 20 attributes). Counted, never timed."""

from __future__ import annotations

import numpy as np
import pytest

from psmatch import make_matcher
from psmatch.bitset.matcher import BitsetMatcher

DOMAIN = 10**6
WORKLOADS = {"fine2": (3, 0.02), "fine40": (3, 0.4), "hem": (10, 0.4)}


def _ranges(n: int, per_subscription: int, width: float,
            rng: np.random.Generator) -> list[tuple[str, str]]:
    span = int(width * DOMAIN)
    attrs = np.argsort(rng.random((n, 20)), axis=1)[:, :per_subscription]
    lows = rng.integers(0, DOMAIN - span + 1, size=(n, per_subscription))
    return [(str(i), " and ".join(f"a{a} between {lo} and {lo + span}"
                                  for a, lo in zip(ra.tolist(), rl.tolist(), strict=True)))
            for i, (ra, rl) in enumerate(zip(attrs, lows, strict=True))]


def _costs(n: int, workload: str) -> tuple[int, dict[str, int]]:
    rng = np.random.default_rng(7)
    matcher = make_matcher("bitset")
    assert isinstance(matcher, BitsetMatcher)
    matcher.add_many(_ranges(n, *WORKLOADS[workload], rng))
    matcher.check()
    events = [{f"a{a}": int(v) for a, v in enumerate(row)}
              for row in rng.integers(0, DOMAIN, size=(1000, 20))]
    matcher.match_batch(events)
    return matcher.stats().estimated_bytes, dict(matcher.work)


@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_four_times_the_subscriptions_cost_at_most_four_and_a_half_times(workload: str) -> None:
    n = 2500
    small_bytes, small = _costs(n, workload)
    large_bytes, large = _costs(4 * n, workload)
    assert large_bytes <= 4.5 * small_bytes, (large_bytes / small_bytes)
    for what in ("words", "candidates", "tested"):
        assert large[what] <= 4.5 * max(small[what], 500), (what, small[what], large[what])
    assert large_bytes <= 1600 * 4 * n  # linear: bytes per subscription bounded
