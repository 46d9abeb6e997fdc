"""The PS-Tree: predicate spaces split when predicates arrive and merge when they leave."""

from __future__ import annotations

import contextlib

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psmatch import make_matcher
from psmatch.errors import ExpressionError
from psmatch.events import flatten_event
from psmatch.language import Interval, Kind
from psmatch.pstree.forest import Forest
from tests.strategies import events, expressions


def spaces(matcher, attribute="age"):
    """(space description, predicate counter) for every space of a tree, in order."""
    forest = matcher.forest
    tree = forest.trees[forest.tree_of[(attribute, Kind.NUMBER)]]
    out = []
    for position, sid in enumerate(tree.space_ids.tolist()):
        i = position // 2
        if position % 2:
            name = f"[{tree.values[i]}]"
        else:
            lo = "-inf" if i == 0 else tree.values[i - 1]
            hi = "+inf" if i == len(tree.values) else tree.values[i]
            name = f"({lo},{hi})"
        out.append((name, int(forest.spaces.predicate_counter[sid])))
    return out


def test_section_4_4_example_spaces_split_then_merge():
    # S1: age in [20, 60], S2: age in [30, 80] (the paper's example). Our spaces are
    # the open gaps and the points between bounds, so each paper space is one or two
    # of ours; the counters agree with the paper's 0, 1, 2, 1, 0.
    m = make_matcher("pstbloom")
    m.add("S1", "age between 20 and 60")
    m.add("S2", "age between 30 and 80")
    m.check()
    assert spaces(m) == [
        ("(-inf,20)", 0), ("[20]", 1), ("(20,30)", 1), ("[30]", 2), ("(30,60)", 2),
        ("[60]", 2), ("(60,80)", 1), ("[80]", 1), ("(80,+inf)", 0)]
    m.remove("S2")
    m.check()
    # Bounds 30 and 80 are no longer used: their spaces merged back.
    assert spaces(m) == [
        ("(-inf,20)", 0), ("[20]", 1), ("(20,60)", 1), ("[60]", 1), ("(60,+inf)", 0)]


def test_space_ids_are_stable_and_a_split_copies_counters():
    forest = Forest()
    tree = forest.tree("x", Kind.NUMBER)
    (gap,) = tree.space_ids.tolist()
    forest.spaces.event_counter[gap] = tree.total_events = 7  # as if 7 events fell there
    _, splits = forest.add_bounds(tree, [5])
    assert splits.sid.tolist() == [gap] and tree.space_ids[0] == gap
    assert splits.tree.tolist() == [tree.tree_id]
    assert forest.spaces.event_counter[splits.new_sids[0]].tolist() == [7, 7]
    forest.check()


def test_released_runs_of_bounds_merge_into_the_gap_below_with_the_largest_counter():
    forest = Forest()
    tree = forest.tree("x", Kind.NUMBER)
    bids, _ = forest.add_bounds(tree, [1, 2, 3, 4, 5, 2])  # bound 2 twice
    sids = tree.space_ids.copy()  # (-inf,1) [1] (1,2) [2] (2,3) [3] (3,4) [4] (4,5) [5] (5,inf)
    forest.spaces.event_counter[sids] = [1, 2, 3, 4, 5, 6, 9, 8, 7, 1, 1]
    tree.total_events = 47  # as if these events fell there
    forest.release_bounds(bids[[1, 2, 5, 0]])  # 1, 2 and 3 go (a run); 4 and 5 stay
    forest.check()
    assert tree.values == [4, 5] and forest.bound_refs[tree.bound_ids].tolist() == [1, 1]
    # (-inf,4) keeps the first gap's id and the largest counter of the seven it absorbed
    assert tree.space_ids.tolist() == [sids[0], *sids[7:]]
    assert forest.spaces.event_counter[tree.space_ids].tolist() == [9, 8, 7, 1, 1]
    assert forest.spaces.live == 5 and not forest.spaces.alive[sids[1:7]].any()


def test_locate_is_exact_beyond_2_53():
    forest = Forest()
    tree = forest.tree("x", Kind.NUMBER)
    forest.add_bounds(tree, [2**53, 2**53 + 2, 2**53 + 1])
    positions = tree.locate([2**53, 2**53 + 1, 2**53 + 2, 2.0**53, 2**53 + 3, 0.5])
    assert positions.tolist() == [1, 3, 5, 1, 6, 0]


def test_locate_strings_by_code_point():
    forest = Forest()
    tree = forest.tree("s", Kind.STRING)
    forest.add_bounds(tree, ["b", "a", "a\x00"])
    assert tree.locate(["", "a", "a\x00", "a\x01", "b", "\U0010ffff"]).tolist() == [
        0, 1, 3, 4, 5, 6]


def test_interval_positions_follow_splits():
    forest = Forest()
    tree = forest.tree("x", Kind.NUMBER)
    (lo, hi), _ = forest.add_bounds(tree, [10, 20])
    assert forest.covered_positions(tree, lo, True, hi, False) == (1, 2)
    forest.add_bounds(tree, [15])
    assert forest.covered_positions(tree, lo, True, hi, False) == (1, 4)
    assert Interval(10, True, 20, False).contains(15)


def test_many_new_bounds_are_one_sorted_merge(monkeypatch) -> None:
    # Issue 9, item 5: one np.insert per new value made a bulk build quadratic.
    import numpy as np

    forest = Forest()
    tree = forest.tree("x", Kind.NUMBER)
    forest.add_bounds(tree, [10**6, -(10**6)])
    inserts = 0
    insert = np.insert

    def counted(*args, **kwargs):
        nonlocal inserts
        inserts += 1
        return insert(*args, **kwargs)

    monkeypatch.setattr(np, "insert", counted)
    values = [v * 7 % 20_011 for v in range(20_000)] + [5, 5.0, 10**6]
    bids, splits = forest.add_bounds(tree, values)
    monkeypatch.undo()
    assert inserts <= 6  # one per column of the tree, whatever the number of values
    assert len(splits) == 20_000 and len(tree.values) == 20_002
    assert tree.values[tree.bound_index(values[:3])[0]] == values[0]
    assert bids[-3] == bids[-2] == bids[values.index(5)]
    forest.check()
    # Every new space copies the counters of the gap that held it.
    gap = set(splits.sid.tolist())
    assert gap <= set(tree.space_ids.tolist())


def test_many_new_bounds_cost_no_python_object_each() -> None:
    # Issue 9, item 2: a flood of distinct `not in` values inserts hundreds of thousands
    # of bounds at once. A Split object per new space pair and a dict entry per distinct
    # value made the tracemalloc peak about 400 bytes per value (about 220 now: the
    # tree's columns, the new spaces and the columnar splits).
    import tracemalloc

    for kind, values in ((Kind.NUMBER, [v * 7919 % 1_000_003 for v in range(50_000)]),
                         (Kind.STRING, [f"s{v * 7919 % 1_000_003}" for v in range(50_000)])):
        forest = Forest()
        tree = forest.tree("x", kind)
        forest.add_bounds(tree, values[:10])
        tracemalloc.start()
        try:
            bids, splits = forest.add_bounds(tree, values + values[:100])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak <= 300 * len(values), (kind, peak / len(values))
        assert len(splits) == len(values) - 10 and len(tree.values) == len(values)
        assert (bids[-100:] == bids[:100]).all()
        assert (tree.locate(values) % 2 == 1).all()
        forest.check()


def test_bound_ids_of_a_batch_name_its_values_whatever_was_present() -> None:
    # add_bounds places the batch without locating it again (present bounds shift by the
    # new ones below them): each returned id must name its own value, duplicates and
    # equal numbers (1 == 1.0, ints beyond 2**53) sharing one bound.
    import random

    rng = random.Random(4)
    pool = [*range(-20, 20), 2.5, -0.0, 2**53, 2**53 + 1, 2.0**53, 2**60 + 3, 10**20]
    for kind, make in ((Kind.NUMBER, lambda v: v), (Kind.STRING, str)):
        forest = Forest()
        tree = forest.tree("x", kind)
        refs: dict = {}
        for _ in range(40):
            batch = [make(rng.choice(pool)) for _ in range(rng.choice([1, 3, 9, 40]))]
            bids, _ = forest.add_bounds(tree, batch)
            for value, bid in zip(batch, bids.tolist(), strict=True):
                assert tree.values[forest.bound_rank[bid]] == value
                refs[value] = refs.get(value, 0) + 1
            forest.check()
        assert dict(zip(tree.values, forest.bound_refs[tree.bound_ids].tolist(),
                        strict=True)) == refs


def test_freed_space_and_bound_ids_wait_for_reclaim_then_are_reused() -> None:
    forest = Forest()
    tree = forest.tree("x", Kind.NUMBER)
    bids, _ = forest.add_bounds(tree, [1, 2, 3])
    size, bounds = forest.spaces.size, forest._bound_count
    forest.release_bounds(bids)
    forest.check()
    assert forest.spaces.live == 1
    forest.add_bounds(tree, [4, 5, 6])  # freed ids are not reusable yet: stale entries
    assert forest.spaces.size == size + 6 and forest._bound_count == bounds + 3
    forest.check()
    forest.reclaim()
    for _ in range(50):  # churn: ids stay within what is live plus what awaits reclaim
        bids, _ = forest.add_bounds(tree, [7, 8, 9])
        forest.release_bounds(bids)
        forest.reclaim()
        forest.check()
    assert forest.spaces.size == size + 6 and forest._bound_count == bounds + 3


def test_replacing_one_subscription_keeps_spaces_bounded() -> None:
    # Issue 9, item 4: 20,000 replacements with 100 live left 120,202 spaces (202 live);
    # 1,000 replacements cross several purges.
    for name in ("pstbloom", "psthash", "opindex", "betree"):
        m = make_matcher(name)
        m.add_many((str(i), f"age = {i} and x between {i} and {i + 5}") for i in range(100))
        for k in range(1_000):
            m.add("0", f"age = {1000 + k} and x between {k} and {k + 3}")
            if k % 250 == 0:
                m.check()
        m.check()
        spaces = m.forest.spaces
        # Ids stay below the live spaces plus those freed since the last purge
        # (at most PURGE_MIN removals of 3 bounds, 2 spaces each).
        assert spaces.size <= spaces.live + 6 * 257, name
        assert m.forest._bound_count <= 300 + 3 * 257, name


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(expressions(), min_size=1, max_size=20), st.lists(events(), min_size=1,
                                                                  max_size=12))
def test_a_batch_is_located_by_event_then_tree(texts, batch) -> None:
    """What PSTHash's pairing kernel takes as it is, unsorted again: a batch's located
    pairs ordered by event, then tree, one pair per tree and event at most."""
    matcher = make_matcher("psthash")
    for i, text in enumerate(texts):
        with contextlib.suppress(ExpressionError):  # some drawn can never be true
            matcher.add(str(i), text)
    flat = [flatten_event(event) for event in batch]
    matcher.internal.match_flat_batch(flat)  # the staged subscriptions filed
    located = matcher._begin(flat).located
    order = np.lexsort((located.tree, located.event))
    assert (order == np.arange(len(order))).all()
    pairs = located.event * max(len(matcher.forest.trees), 1) + located.tree
    assert len(np.unique(pairs)) == len(pairs)
