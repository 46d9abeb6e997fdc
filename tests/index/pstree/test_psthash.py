"""PSTHash's pair generation and side lists (issue 9, items 1 and 2).

The hash table holds pairs of spaces from the two access predicates' trees, so an
event's entries are paired only where some hashed conjunct joins their trees; these
tests count the pairs generated and check the answers against scan, with ``check()``
after each mutation.
"""

from __future__ import annotations

import numpy as np

from index import make_matcher


def _pairs(matcher, event: dict) -> int:
    """Pairs of located entries PSTHash generates for one event."""
    batch = matcher._begin([event])
    located, _ = batch.chunk(0, 1)
    owner, partner = matcher._hashed_pairs(located.event, located.tree)
    assert (located.event[owner] == located.event[partner]).all()
    return len(owner)


def test_only_entries_whose_trees_are_joined_are_paired() -> None:
    matcher = make_matcher("psthash")
    n = 2000
    matcher.add_many((i, f"x{i} = 1 and x{i + 1} = 1") for i in range(n))
    matcher.add("star", "hub = 1 and x7 = 1")
    matcher.check()
    event = {f"x{j}": 1 for j in range(n + 1)} | {"hub": 1}
    # One pair per joined tree pair present: n chain links and the star; C(n + 2, 2)
    # before.
    assert _pairs(matcher, event) == n + 1
    assert matcher.match(event) == set(range(n)) | {"star"}
    assert _pairs(matcher, {"hub": 1}) == 0
    assert matcher.match({"hub": 1, "x7": 1, "x8": 2}) == {"star"}


def test_tree_pairs_follow_removals_after_a_purge() -> None:
    matcher = make_matcher("psthash")
    matcher.add_many((i, f"x{i} = 1 and y{i} = 1") for i in range(3000))
    for i in range(2500):
        matcher.remove(i)
    matcher.check()
    assert matcher.registry.awaiting_reclaim < 2500  # a purge ran
    live_pairs = len(matcher._tree_pairs)
    assert 500 <= live_pairs < 3000
    event = {f"x{i}": 1 for i in range(3000)} | {f"y{i}": 1 for i in range(3000)}
    assert matcher.match(event) == set(range(2500, 3000))


def test_near_full_access_predicates_go_on_the_side_list() -> None:
    matcher = make_matcher("psthash")
    matcher.add_many((i, f"a != {i}") for i in range(200))
    matcher.add_many((f"b{i}", f"a not in ({i}, {i + 1}) and b = {i % 3}") for i in range(200))
    matcher.check()
    # ``a != i`` on the side list of ``a``; ``b = k`` is the other group's access
    # predicate and its near-full second one sends it to the fallback lists of ``b``,
    # never to 2 x 400 pairs each.
    assert len(matcher.side) == 200
    assert len(matcher.table) == 0 and len(matcher.fallback) == 200
    scan = make_matcher("scan")
    scan.add_many((i, f"a != {i}") for i in range(200))
    scan.add_many((f"b{i}", f"a not in ({i}, {i + 1}) and b = {i % 3}") for i in range(200))
    events = [{"a": v, "b": v % 3} for v in np.arange(-2, 203, 7).tolist()]
    assert matcher.match_batch(events) == scan.match_batch(events)
