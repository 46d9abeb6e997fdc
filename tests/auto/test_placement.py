"""Where the auto rule files real workloads, and that its cost stays linear there:
BE-Gen's paper default all in PSTHash, fine-domain ranges and HEM's default all in the
bitset family, and 4x the subscriptions costing at most 4.5x the bytes (counted, not
timed). ``explain`` agrees with it."""

from __future__ import annotations

import numpy as np
import pytest

from psmatch import make_matcher
from psmatch.begen.generator import generate
from psmatch.begen.params import BEGenParams
from psmatch.explain import explain

FINE = 10**6


def fine_ranges(n: int, width: float, seed: int) -> list[tuple[str, str]]:
    """3 ranges of ``width`` of [0, 10^6) per subscription on 20 attributes."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        lo = rng.integers(0, int(FINE * (1 - width)), 3)
        out.append((f"s{i}", " and ".join(
            f"a{a} between {v} and {v + int(width * FINE)}"
            for a, v in zip(rng.choice(20, 3, replace=False), lo, strict=True))))
    return out


def hem(n: int, seed: int) -> list[tuple[str, str]]:
    """HEM's default: 10 closed ranges of width 0.4 x 10^6 of 20 attributes."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        lo = rng.integers(0, int(0.6 * FINE), 10)
        out.append((f"s{i}", " and ".join(f"a{a} between {v} and {v + int(0.4 * FINE)}" for a, v
                                          in zip(rng.choice(20, 10, replace=False), lo,
                                                 strict=True))))
    return out


@pytest.mark.parametrize(("workload", "family"), [
    (lambda n: fine_ranges(n, 0.02, 1), "bitset/fine-ranges"),
    (lambda n: fine_ranges(n, 0.4, 2), "bitset/fine-ranges"),
    (lambda n: hem(n, 3), "bitset/fine-ranges"),
    (lambda n: generate(BEGenParams(subscriptions=n, events=1, seed=4)).subscriptions, None),
], ids=["fine2", "fine40", "hem", "begen"])
def test_each_workload_is_filed_where_it_stays_linear(workload, family) -> None:
    sizes = {}
    for n in (1500, 6000):
        matcher = make_matcher("auto")
        matcher.add_many(workload(n))
        matcher.check()
        stats = matcher.stats()
        placement = {k: v for k, v in stats.placement.items() if v}
        if family is None:  # BE-Gen: every conjunct has a point or a coarse predicate
            assert set(placement) <= {"psthash", "psthash/points", "psthash/coarse"}
        else:
            assert placement == {"bitset": n, family: n}
            assert stats.spaces == 0
        sizes[n] = stats.estimated_bytes
    assert sizes[6000] <= 4.5 * sizes[1500]


def test_explain_agrees_with_auto_on_both_families() -> None:
    items = [*fine_ranges(2000, 0.02, 5), ("eq", "a1 = 5 or k in (1, 2)"),
             ("mixed", "(a0 between 0 and 500000 and not (a2 > 900000)) or k = 3")]
    matcher = make_matcher("auto")
    matcher.add_many(items)
    assert matcher.stats().placement["bitset/fine-ranges"] > 0
    rng = np.random.default_rng(6)
    for _ in range(12):
        event = {f"a{j}": int(rng.integers(0, FINE)) for j in range(20) if rng.random() < 0.7}
        event["k"] = int(rng.integers(0, 4))
        expected = {sub_id for sub_id, text in items if explain(text, event).matches}
        assert matcher.match(event) == expected
