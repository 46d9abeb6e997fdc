"""The auto matcher returns exactly what ``scan`` returns, ``check()`` after each
mutation, whichever family its rule files each conjunct in: coarse and fine domains,
wide and narrow ranges, missing attributes, every operator, subscriptions split across
both families, churn, loading from normal-form columns and snapshots."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psmatch import make_matcher
from psmatch.auto import routing
from psmatch.language import parse_subscription
from psmatch.service.records.normal_forms import dump_normal_form, load_normal_forms
from psmatch.service.records.notifications import NotificationHeads
from psmatch.service.snapshots import load_snapshot, save_snapshot
from tests.strategies import events, expressions, parsed, replay_against_scan

FINE = 10**6
ATTRIBUTES = [f"a{i}" for i in range(5)]


@contextmanager
def coarse_bounds(bound: int) -> Iterator[None]:
    """The rule's threshold set to ``bound`` meanwhile, so that small workloads reach
    both families (the rule reads it at each filing)."""
    saved = routing.COARSE_BOUNDS
    routing.COARSE_BOUNDS = bound
    try:
        yield
    finally:
        routing.COARSE_BOUNDS = saved


@st.composite
def domain_expressions(draw: st.DrawFn) -> str:
    """A conjunction of 1-3 comparisons over a fine ([0, 10^6)) or a coarse ([0, 10))
    domain: ranges of 0 to 40 % of it, points, ``in``, ``!=``, ``not in``; sometimes
    or-ed with a random expression of another kind."""
    parts = []
    for attribute in draw(st.lists(st.sampled_from(ATTRIBUTES), min_size=1, max_size=3,
                                   unique=True)):
        size = FINE if attribute in ("a0", "a1", "a2") else 10
        lo = draw(st.integers(0, size))
        hi = lo + int(draw(st.sampled_from([0.0, 0.02, 0.4])) * size)
        shape = draw(st.sampled_from(["between", "not between", "<", ">=", "=", "!=",
                                      "in", "not in"]))
        if shape in ("between", "not between"):
            parts.append(f"{attribute} {shape} {lo} and {hi}")
        elif shape in ("in", "not in"):
            parts.append(f"{attribute} {shape} ({lo}, {hi}, {lo + 1})")
        else:
            parts.append(f"{attribute} {shape} {lo}")
    text = " and ".join(parts)
    if draw(st.booleans()):
        text = f"({text}) or {draw(expressions(3))}"
    return text


@st.composite
def domain_events(draw: st.DrawFn) -> dict:
    """Most of the attributes, some missing or of another kind."""
    event = draw(events())
    for attribute in ATTRIBUTES:
        size = FINE if attribute in ("a0", "a1", "a2") else 10
        value = draw(st.one_of(st.integers(0, size), st.none(), st.just("x")))
        if value is not None:
            event[attribute] = value
    return event


def _agree(subscriptions: list, batch: list[dict]) -> None:
    matcher, scan = make_matcher("auto"), make_matcher("scan")
    for i, subscription in enumerate(subscriptions):
        matcher.add(str(i % 50), subscription)
        scan.add(str(i % 50), subscription)
    matcher.check()
    assert matcher.match_batch(batch) == scan.match_batch(batch)
    assert [matcher.match(e) for e in batch[:4]] == scan.match_batch(batch[:4])
    stats = matcher.stats()
    assert sum(stats.placement[reason] for reason in routing.REASONS) == stats.conjuncts
    assert stats.placement["psthash"] + stats.placement["bitset"] >= len(matcher)
    removed = list(scan)[::3]
    matcher.remove_many(removed)
    for sub_id in removed:
        scan.remove(sub_id)
    matcher.check()
    assert matcher.match_batch(batch) == scan.match_batch(batch)


@given(st.lists(domain_expressions(), min_size=5, max_size=80),
       st.lists(domain_events(), min_size=5, max_size=30), st.sampled_from([0, 3, 256]))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_coarse_and_fine_domains_agree_with_scan(texts: list[str], batch: list[dict],
                                                 bound: int) -> None:
    with coarse_bounds(bound):
        _agree(parsed(texts), batch)


@given(st.lists(expressions(), min_size=5, max_size=60),
       st.lists(events(), min_size=5, max_size=30), st.sampled_from([0, 4]))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_operator_and_kind_agrees_with_scan(texts: list[str], batch: list[dict],
                                                  bound: int) -> None:
    with coarse_bounds(bound):
        _agree(parsed(texts), batch)


@given(st.lists(st.tuples(st.sampled_from(["add", "add", "remove", "match"]),
                          st.integers(0, 20), domain_expressions()), min_size=1, max_size=40),
       st.lists(domain_events(), min_size=1, max_size=8), st.sampled_from([0, 3]))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_add_replace_remove_agree_with_scan_after_each_mutation(ops: list, batch: list[dict],
                                                                bound: int) -> None:
    with coarse_bounds(bound):
        replay_against_scan(make_matcher("auto"), ops, batch)


def _fine_ranges(n: int, seed: int, width: float = 0.02) -> list[tuple[str, str]]:
    """``n`` subscriptions of 3 ranges of ``width`` over [0, 10^6) on a0 .. a4."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        picked = rng.choice(5, 3, replace=False)
        lo = rng.integers(0, int(FINE * (1 - width)), 3)
        out.append((f"f{i}", " and ".join(f"a{a} between {v} and {v + int(width * FINE)}"
                                          for a, v in zip(picked, lo, strict=True))))
    return out


def test_a_subscription_split_across_families_matches_once_per_event() -> None:
    """A conjunct in each family: the event satisfying both gets the subscription once,
    and its removal takes it out of both."""
    matcher, scan = make_matcher("auto"), make_matcher("scan")
    items = [*_fine_ranges(300, 1), ("both", "a0 between 10 and 400000 or k = 5"),
             ("points", "a0 = 7 and a1 between 0 and 900000")]
    matcher.add_many(items)
    scan.add_many(items)
    matcher.check()
    placement = matcher.stats().placement
    assert placement["psthash/points"] == 2  # k = 5, a0 = 7
    assert placement["psthash"] == 2 and placement["bitset"] == 301  # "both" in each
    assert placement["bitset/fine-ranges"] >= 250  # ranges on a0 .. a4, fine by then
    batch = [{"a0": 7, "a1": 5, "k": 5}, {"a0": 20, "k": 5}, {"a0": 20}, {"k": 5}, {}]
    got = matcher.match_batch(batch)
    assert got == scan.match_batch(batch)
    assert "both" in got[0] and "both" in got[1] and "points" in got[0]
    _, ids = matcher.internal.match_flat_pairs([{"a0": 20, "k": 5}])
    assert sorted(ids) == sorted(set(ids)) and ids.count("both") == 1
    matcher.remove("both")
    matcher.check()
    assert matcher.stats().placement["psthash/points"] == 1
    assert "both" not in set().union(*matcher.match_batch(batch))


def test_the_rule_files_points_and_coarse_domains_in_psthash_and_fine_ranges_in_bitset(
) -> None:
    matcher = make_matcher("auto")
    fine = _fine_ranges(400, 2)
    matcher.add_many(fine)  # one batch: its own bounds make a0 .. a4 fine
    matcher.add_many([("eq", "a0 = 3 and a1 between 5 and 900000"),
                      ("in", "a2 in (1, 2, 3)"), ("coarse", "c between 2 and 5"),
                      ("ne", "a3 != 4"), ("like", "s like '%x'"),
                      ("many", f"a2 in ({', '.join(map(str, range(routing.MAX_POINTS + 1)))})")])
    placement = matcher.stats().placement
    assert placement == {"psthash": 4, "bitset": 402,  # subscriptions, then conjuncts:
                         "psthash/points": 2, "psthash/coarse": 2,  # c and s
                         "bitset/fine-ranges": 400 + 2}  # a3 != 4, a2 in (33 values)
    stats = matcher.stats()
    assert stats.conjuncts == 406 and stats.subscriptions == 406
    # a fine (attribute, kind) stays fine once its ranges are removed
    matcher.remove_many([sub_id for sub_id, _ in fine])
    matcher.add("later", "a4 between 1 and 2")
    assert matcher.stats().placement["bitset/fine-ranges"] == 3
    matcher.check()


def test_a_domain_is_coarse_up_to_the_bound_count() -> None:
    matcher = make_matcher("auto")
    bound = routing.COARSE_BOUNDS
    matcher.add_many([(f"s{v}", f"x > {v}") for v in range(bound)])
    assert matcher.stats().placement["psthash/coarse"] == bound
    matcher.add_many([("one more", f"x > {bound}"), ("repeat", "x < 3")])
    assert matcher.stats().placement["bitset/fine-ranges"] == 2
    matcher.check()


def _columns(items: list[tuple[str, str]]):
    subscriptions = [parse_subscription(text) for _, text in items]
    return load_normal_forms([s.text for s in subscriptions],
                             [dump_normal_form(s) for s in subscriptions])


def test_columns_load_as_objects_do_through_the_service_path() -> None:
    """``internal.add_columns`` cuts the columns by family: the same placement, counts
    and answers as ``add_many`` of the objects, and as ``scan``."""
    items = [*_fine_ranges(300, 3), ("both", "a0 between 10 and 400000 or k = 5"),
             ("mixed", "(a1 = 4 and a2 > 10) or a3 < 999 or q like 'ab%'"),
             ("ne", "k != 2"), *[(f"c{i}", f"c between {i % 7} and 9") for i in range(20)]]
    by_columns, by_objects, scan = make_matcher("auto"), make_matcher("auto"), make_matcher("scan")
    by_columns.internal.add_columns([sub_id for sub_id, _ in items], _columns(items))
    by_objects.add_many(items)
    scan.add_many(items)
    by_columns.check()
    assert by_columns.stats().placement == by_objects.stats().placement
    assert by_columns.stats().placement["bitset/fine-ranges"] > 0
    assert by_columns.stats().predicates == by_objects.stats().predicates
    rng = np.random.default_rng(4)
    batch = [{f"a{j}": int(rng.integers(0, FINE)) for j in range(5) if rng.random() < 0.8}
             | {"k": int(rng.integers(0, 6)), "c": int(rng.integers(0, 10)), "q": "abc"}
             for _ in range(60)]
    assert by_columns.match_batch(batch) == scan.match_batch(batch)
    assert by_objects.match_batch(batch) == scan.match_batch(batch)
    flat = [{"a0": 20, "k": 5}, {"a3": 5, "q": "abz"}]  # "both" and "ne", then "mixed"
    at, matched = by_columns.internal.match_flat_slots(flat)
    expected = [sorted(by_columns.internal.slots_of(sorted(ids)).tolist())
                for ids in scan.match_batch(flat)]
    assert at.tolist() == [0, 0, 1]
    assert [sorted(matched[at == e].tolist()) for e in (0, 1)] == expected
    # replacing through the columns moves a subscription between families
    by_columns.internal.add_columns(["both", "ne"], _columns([("both", "k = 6"),
                                                             ("ne", "a1 > 5")]))
    scan.add_many([("both", "k = 6"), ("ne", "a1 > 5")])
    by_columns.check()
    assert by_columns.match_batch(batch) == scan.match_batch(batch)


def test_a_snapshot_of_both_families_round_trips(tmp_path: Path) -> None:
    items = [*_fine_ranges(300, 5), ("both", "a0 between 10 and 400000 or k = 5"),
             *[(f"c{i}", f"c = {i % 7}") for i in range(30)]]
    matcher = make_matcher("auto")
    matcher.add_many(items)
    matcher.remove_many(["f3", "c4"])
    matcher.add("late", "a2 between 0 and 500000")  # staged: stored as it is
    save_snapshot(tmp_path, "p:", 1, matcher, NotificationHeads(), "digest")
    loaded = load_snapshot(tmp_path, "p:", "auto").matcher
    loaded.check()
    # the same counts and placement (bytes differ: arrays are stored without spare room)
    assert replace(loaded.stats(), estimated_bytes=0) == replace(matcher.stats(),
                                                                 estimated_bytes=0)
    rng = np.random.default_rng(6)
    batch = [{f"a{j}": int(rng.integers(0, FINE)) for j in range(5)}
             | {"k": 5, "c": int(rng.integers(0, 7))} for _ in range(40)]
    assert loaded.match_batch(batch) == matcher.match_batch(batch)
    for index in (matcher, loaded):
        index.remove_many(["both", "f7"])
        index.add_many([("n", "a1 between 1 and 600000"), ("m", "c = 2")])
        index.check()
    assert loaded.match_batch(batch) == matcher.match_batch(batch)
