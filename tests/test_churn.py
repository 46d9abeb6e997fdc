"""Churn: many add/replace/remove cycles leave an index sized by what is live.

Regression of issue 9, item 4 (space, bound and conjunct ids were never reused, so
memory and the cost of adds grew with the history): the tests count ids handed out and
``estimated_bytes`` against a fresh build of the same subscriptions, and hold every
matcher to ``scan`` with ``check()`` after each mutation while ids are reused.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psmatch import MATCHERS, ExpressionError, make_matcher
from psmatch.core.registry import PURGE_MIN, PURGE_SHARE
from psmatch.language import parse_subscription
from tests.strategies import events, expressions

INDEXES = [name for name in MATCHERS if name != "scan"]


def _text(rng: random.Random) -> str:
    v = rng.randrange(1_000_000)
    return (f"a{rng.randrange(20)} between {v} and {v + rng.randrange(1, 1000)} "
            f"and b{rng.randrange(7)} = {rng.randrange(1000)}")


@pytest.mark.parametrize("name", INDEXES)
def test_churn_memory_follows_the_live_subscriptions(name: str) -> None:
    rng = random.Random(9)
    live = 1_000
    matcher = make_matcher(name)
    texts = {str(i): _text(rng) for i in range(live)}
    matcher.add_many(texts.items())
    ids = list(texts)
    for cycle in range(1_500):
        slot = rng.randrange(live)
        matcher.remove(ids[slot])
        del texts[ids[slot]]
        ids[slot] = str(live + cycle)
        texts[ids[slot]] = _text(rng)
        matcher.add(ids[slot], texts[ids[slot]])
    matcher.check()
    fresh = make_matcher(name)
    fresh.add_many(texts.items())
    # auto: each family it files in, against the same family of the fresh build
    for index, rebuilt_index in zip(getattr(matcher, "families", [matcher]),
                                    getattr(fresh, "families", [fresh]), strict=True):
        # Conjunct ids: the live ones plus those removed since the last purge.
        registry = index.registry
        assert len(registry) <= registry.live + max(PURGE_MIN, live // PURGE_SHARE) + 1
        if hasattr(index, "forest"):
            spaces = index.forest.spaces
            assert spaces.size <= 2 * rebuilt_index.forest.spaces.size, (spaces.size,
                                                                         spaces.live)
    churned, rebuilt = matcher.stats().estimated_bytes, fresh.stats().estimated_bytes
    # Issue 9 asks for 1.5 x; a purge after an eighth of the live conjuncts were removed,
    # compaction at every purge and arrays grown by half (not doubled) give margin: the
    # dead share stays near a ninth (it reached a third when the store compacted at a
    # quarter and purges waited for 256 removals).
    assert churned <= 4 / 3 * rebuilt, (churned / rebuilt)


@pytest.mark.parametrize("name", INDEXES)
def test_bulk_replacements_and_removals_agree_with_scan(name: str) -> None:
    """The service's path: ``add_many`` of batches that replace live ids and
    ``remove_many``, each in bulk, across several purges; ``check()`` after each."""
    rng = random.Random(3)
    matcher, scan = make_matcher(name), make_matcher("scan")

    def text() -> str:  # small domains: bounds shared and released, events matching
        v = rng.randrange(100)
        return (f"a{rng.randrange(3)} between {v} and {v + rng.randrange(1, 30)} "
                f"and b{rng.randrange(2)} in ({rng.randrange(5)}, {rng.randrange(5)})")

    batch = [{f"a{i}": rng.randrange(130) for i in range(3)}
             | {f"b{i}": rng.randrange(5) for i in range(2)} for _ in range(30)]
    matched = 0
    for step in range(40):
        texts = [(str(rng.randrange(300)), text()) for _ in range(rng.randrange(1, 60))]
        matcher.add_many(texts)
        scan.add_many(texts)
        matcher.check()
        held = list(scan)
        removed = rng.sample(held, min(len(held), rng.randrange(0, 40)))
        matcher.remove_many(removed)
        scan.remove_many(removed)
        matcher.check()
        if step % 5 == 0:
            expected = scan.match_batch(batch)
            assert matcher.match_batch(batch) == expected
            matched += sum(map(len, expected))
    assert matched > 100  # the comparisons were not of empty answers


cycles = st.lists(st.tuples(st.integers(0, 7).map(str), expressions(4)), min_size=1,
                  max_size=12)


@pytest.mark.parametrize("name", INDEXES)
@given(pool=cycles, batch=st.lists(events(), min_size=1, max_size=8), seed=st.integers(0, 99))
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_matchers_agree_with_scan_through_churn(name: str, pool: list, batch: list[dict],
                                                seed: int) -> None:
    """Hundreds of add/replace/remove cycles over a few ids (several purges, so space,
    bound and conjunct ids are reused), ``check()`` after each mutation."""
    parsed = []
    for sub_id, text in pool:
        try:
            parsed.append((sub_id, parse_subscription(text)))
        except ExpressionError:
            continue
    if not parsed:
        return
    rng = random.Random(seed)
    matcher, scan = make_matcher(name), make_matcher("scan")
    for step in range(PURGE_MIN + 50):
        sub_id, subscription = rng.choice(parsed)
        if sub_id in scan and rng.random() < 0.25:
            matcher.remove(sub_id)
            scan.remove(sub_id)
        else:
            matcher.add(sub_id, subscription)
            scan.add(sub_id, subscription)
        matcher.check()
        if step % 50 == 0:
            assert matcher.match_batch(batch) == scan.match_batch(batch)
    assert matcher.match_batch(batch) == scan.match_batch(batch)
