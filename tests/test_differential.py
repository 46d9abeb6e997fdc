"""Every matcher returns exactly what ``scan`` returns; ``scan`` agrees with the tree.

Random subscriptions over every operator and kind, random events with missing
attributes, mismatched kinds and edge values, and interleaved adds, replacements and
removals; ``check()`` runs after every mutation.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psmatch import MATCHERS, ExpressionError, make_matcher
from psmatch.events import flatten_event
from psmatch.language import Subscription, parse_subscription
from psmatch.service.records.normal_forms import dump_normal_form, load_normal_forms
from tests.strategies import (
    events,
    expressions,
    flood_expressions,
    parsed,
    wide_events,
    wide_expressions,
)

INDEXES = [name for name in MATCHERS if name != "scan"]


def parsed_or_none(text: str) -> Subscription | None:
    try:
        return parse_subscription(text)
    except ExpressionError:
        return None  # the strategy also draws expressions that can never be true


operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 12).map(str), expressions()),
        st.tuples(st.just("add_columns"), st.none(),
                  st.dictionaries(st.integers(0, 12).map(str), expressions(), max_size=6)),
        st.tuples(st.just("remove"), st.integers(0, 12).map(str), st.none()),
        st.tuples(st.just("remove_many"), st.none(),
                  st.sets(st.integers(0, 12).map(str), max_size=6)),
        st.tuples(st.just("match"), st.none(), st.lists(events(), min_size=1, max_size=8)),
    ),
    min_size=1,
    max_size=40,
)


@given(expressions(), st.lists(events(), min_size=1, max_size=10))
@settings(max_examples=400, deadline=None)
def test_scan_agrees_with_the_expression_tree(text: str, batch: list[dict]) -> None:
    try:
        subscription = parse_subscription(text)
    except ExpressionError:
        return
    scan = make_matcher("scan")
    scan.add("s", subscription)
    for event, answer in zip(batch, scan.match_batch(batch), strict=True):
        tree_truth = subscription.expression.evaluate(flatten_event(event))
        assert (answer == {"s"}) == (tree_truth is True), (text, event)


@pytest.mark.parametrize("name", INDEXES)
@given(ops=operations)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_matcher_returns_what_scan_returns(name: str, ops: list) -> None:
    matcher, scan = make_matcher(name), make_matcher("scan")
    for op, sub_id, arg in ops:
        if op == "add":
            try:
                subscription = parse_subscription(arg)
            except ExpressionError:
                continue
            matcher.add(sub_id, subscription)
            scan.add(sub_id, subscription)
            matcher.check()
        elif op == "add_columns":  # in bulk, from the normal forms' text, as a worker does
            adds = {i: s for i, s in ((i, parsed_or_none(text)) for i, text in arg.items()) if s}
            matcher.internal.add_columns(list(adds), load_normal_forms(
                [s.text for s in adds.values()], [dump_normal_form(s) for s in adds.values()]))
            for i, s in adds.items():
                scan.add(i, s)
            matcher.check()
        elif op == "remove":
            if sub_id in scan:
                matcher.remove(sub_id)
                scan.remove(sub_id)
                matcher.check()
        elif op == "remove_many":
            held = [sub_id for sub_id in arg if sub_id in scan]
            matcher.remove_many(held)
            for sub_id in held:
                scan.remove(sub_id)
            matcher.check()
        else:
            assert matcher.match_batch(arg) == scan.match_batch(arg)
        assert len(matcher) == len(scan)


@pytest.mark.parametrize("name", INDEXES)
@given(st.lists(expressions(), min_size=30, max_size=100),
       st.lists(events(), min_size=30, max_size=80))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_larger_indexes_agree_with_scan_before_and_after_removals(
    name: str, texts: list[str], batch: list[dict]
) -> None:
    matcher, scan = make_matcher(name), make_matcher("scan")
    for i, text in enumerate(texts):
        try:
            subscription = parse_subscription(text)
        except ExpressionError:
            continue
        matcher.add(str(i % 40), subscription)  # ids repeat: later ones replace earlier ones
        scan.add(str(i % 40), subscription)
    matcher.check()
    assert matcher.match_batch(batch) == scan.match_batch(batch)
    removed = list(scan)[::2]
    matcher.remove_many(removed)  # in bulk, against scan's one at a time
    for sub_id in removed:
        scan.remove(sub_id)
    matcher.check()
    assert matcher.match_batch(batch) == scan.match_batch(batch)


@pytest.mark.parametrize("name", INDEXES)
@given(st.lists(flood_expressions(), min_size=40, max_size=120),
       st.lists(wide_expressions(), min_size=10, max_size=60),
       st.lists(st.one_of(flood_expressions(), wide_expressions()), max_size=15),
       st.lists(wide_events(), min_size=5, max_size=30))
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_floods_and_wide_events_agree_with_scan(
    name: str, floods: list[str], wide: list[str], later: list[str], batch: list[dict]
) -> None:
    """Floods of ``!=`` / ``not in`` / near-full ranges on one attribute and wide events
    (issue 9): bulk-built, then added and removed one by one with ``check()`` each time."""
    matcher, scan = make_matcher(name), make_matcher("scan")
    bulk = [(str(i), sub) for i, sub in enumerate(parsed(floods + wide))]
    matcher.add_many(bulk)
    scan.add_many(bulk)
    matcher.check()
    assert matcher.match_batch(batch) == scan.match_batch(batch)
    for i, subscription in enumerate(parsed(later)):
        matcher.add(f"later{i}", subscription)
        scan.add(f"later{i}", subscription)
        matcher.check()
    assert matcher.match_batch(batch) == scan.match_batch(batch)
    for sub_id in list(scan)[::2]:
        matcher.remove(sub_id)
        scan.remove(sub_id)
        matcher.check()
    assert matcher.match_batch(batch) == scan.match_batch(batch)


def fine_domain_ranges(rng: np.random.Generator, n: int, prefix: str) -> list[tuple[str, str]]:
    """``n`` conjuncts over a fine domain, [0, 10**6) with random bounds on 3 attributes:
    ranges of 0.1 %, 2 % and 40 %, open ranges, points and ``!=``, one or two a conjunct
    (enough distinct bounds that PSTBloom's and PSTHash's trees are fine, and their wide
    ranges filed in cells)."""
    forms = ["a{a} between {lo} and {hi}", "a{a} > {lo}", "a{a} <= {hi}", "a{a} = {lo}",
             "a{a} != {lo}", "a{a} in ({lo}, {hi})"]
    out = []
    for i in range(n):
        parts = []
        for a in rng.choice(3, size=int(rng.integers(1, 3)), replace=False).tolist():
            width = int(rng.choice([1_000, 20_000, 400_000]))
            lo = int(rng.integers(0, 1_000_000 - width))
            form = forms[int(rng.choice(len(forms), p=[0.6, 0.1, 0.1, 0.1, 0.05, 0.05]))]
            parts.append(form.format(a=a, lo=lo, hi=lo + width))
        out.append((f"{prefix}{i}", " and ".join(parts)))
    return out


@pytest.mark.parametrize("name", INDEXES)
@given(st.integers(0, 2**32 - 1))
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fine_domain_and_wide_ranges_agree_with_scan(name: str, seed: int) -> None:
    """Ranges with random bounds over a fine domain (issue 46), events lacking some
    attributes: bulk-built, then added to one by one (the early ranges' spaces keep
    splitting) and removed from, ``check()`` after every mutation."""
    rng = np.random.default_rng(seed)
    matcher, scan = make_matcher(name), make_matcher("scan")
    bulk = fine_domain_ranges(rng, 400, "b")
    matcher.add_many(bulk)
    scan.add_many(bulk)
    matcher.check()
    values = rng.integers(0, 1_000_000, size=(40, 3)).tolist()
    batch = [{f"a{k}": v for k, v in enumerate(row) if (i + k) % 4} for i, row in enumerate(values)]
    assert matcher.match_batch(batch) == scan.match_batch(batch)
    for sub_id, text in fine_domain_ranges(rng, 15, "later"):
        matcher.add(sub_id, text)
        scan.add(sub_id, text)
        matcher.check()
    assert matcher.match_batch(batch) == scan.match_batch(batch)
    for sub_id in list(scan)[::25]:
        matcher.remove(sub_id)
        scan.remove(sub_id)
        matcher.check()
    assert matcher.match_batch(batch) == scan.match_batch(batch)
