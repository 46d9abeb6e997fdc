"""PSTHash's pair generation, side lists (issue 9, items 1 and 2) and fallback keys
(issue 10).

The hash table holds pairs of spaces from the two access predicates' trees, so an
event's entries are paired only where some hashed conjunct joins their trees; the
fallback lists key a conjunct by its first space and its second tree, so an event
lacking that tree never gets it as a candidate. These tests count the pairs and the
candidates generated and check the answers against scan, with ``check()`` after each
mutation.
"""

from __future__ import annotations

import numpy as np

from psmatch import make_matcher


def _pairs(matcher, event: dict) -> int:
    """Pairs of located entries PSTHash generates for one event."""
    batch = matcher._begin([event])
    located, _ = batch.chunk(0, 1)
    events, keys = matcher._hashed_pairs(located.event, located.tree, located.sid)
    assert (events == 0).all() and len(np.unique(keys)) == len(keys)
    return len(keys)


def test_only_entries_whose_trees_are_joined_are_paired() -> None:
    matcher = make_matcher("psthash")
    n = 2000
    matcher.add_many((str(i), f"x{i} = 1 and x{i + 1} = 1") for i in range(n))
    matcher.add("star", "hub = 1 and x7 = 1")
    matcher.check()
    event = {f"x{j}": 1 for j in range(n + 1)} | {"hub": 1}
    # One pair per joined tree pair present: n chain links and the star; C(n + 2, 2)
    # before.
    assert _pairs(matcher, event) == n + 1
    assert matcher.match(event) == {str(i) for i in range(n)} | {"star"}
    assert _pairs(matcher, {"hub": 1}) == 0
    assert matcher.match({"hub": 1, "x7": 1, "x8": 2}) == {"star"}


def test_tree_pairs_follow_removals_after_a_purge() -> None:
    matcher = make_matcher("psthash")
    matcher.add_many((str(i), f"x{i} = 1 and y{i} = 1") for i in range(3000))
    for i in range(2500):
        matcher.remove(str(i))
    matcher.check()
    assert matcher.registry.awaiting_reclaim < 2500  # a purge ran
    live_pairs = len(matcher._tree_pairs)
    assert 500 <= live_pairs < 3000
    event = {f"x{i}": 1 for i in range(3000)} | {f"y{i}": 1 for i in range(3000)}
    assert matcher.match(event) == {str(i) for i in range(2500, 3000)}


def test_near_full_access_predicates_go_on_the_side_list() -> None:
    matcher = make_matcher("psthash")
    matcher.add_many((str(i), f"a != {i}") for i in range(200))
    matcher.add_many((f"b{i}", f"a not in ({i}, {i + 1}) and b = {i % 3}") for i in range(200))
    matcher.check()
    # ``a != i`` on the side list of ``a``; ``b = k`` is the other group's access
    # predicate and its near-full second one sends it to the fallback lists of ``b``,
    # never to 2 x 400 pairs each.
    assert len(matcher.side) == 200
    assert len(matcher.table) == 0 and len(matcher.fallback) == 200
    scan = make_matcher("scan")
    scan.add_many((str(i), f"a != {i}") for i in range(200))
    scan.add_many((f"b{i}", f"a not in ({i}, {i + 1}) and b = {i % 3}") for i in range(200))
    events = [{"a": v, "b": v % 3} for v in np.arange(-2, 203, 7).tolist()]
    assert matcher.match_batch(events) == scan.match_batch(events)


def _candidates(matcher, event: dict) -> list[int]:
    """Conjunct ids PSTHash's lookup hands to verification for one event."""
    batch = matcher._begin([event])
    return matcher._candidates(batch, 0, 1).cids.tolist()


def _both(*groups: list[tuple[object, str]]) -> tuple:
    """PSTHash and scan, each group added in one bulk add, in order (a group's filing
    sees the bounds of the groups before it)."""
    psthash, scan = make_matcher("psthash"), make_matcher("scan")
    for statements in groups:
        psthash.add_many(statements)
        scan.add_many(statements)
    psthash.check()
    return psthash, scan


def _wide_pairs(n: int) -> tuple[list[tuple[object, str]], list[tuple[object, str]]]:
    """Point conjuncts making trees ``a``, ``b``, ``c`` of 2n + 1 spaces, and, added
    after them, n // 4 on ``a`` and ``b`` whose predicates each cover over 100 of them
    (over MAX_KEYS pairs) and leave out over 32 (not near-full): filed on the fallback
    lists (the trees are coarse, at most FINE_SPACES spaces)."""
    points = [(f"p{i}", f"a = {i} or b = {i} or c = {i}") for i in range(n)]
    wide = [(f"w{i}", f"a >= {n // 5 + i} and b < {n - n // 5 - i}") for i in range(n // 4)]
    return points, wide


def test_fallback_conjuncts_need_their_second_attribute_to_be_candidates() -> None:
    psthash, scan = _both(*_wide_pairs(100))
    assert len(psthash.table) == 0 and len(psthash.side) == 0
    keys, _ = psthash.fallback.entries()
    assert ((keys & 0xFFFFFFFF) != 0xFFFFFFFF).sum() > 25 * 100  # the wide ones, per space
    # An event lacking ``b`` looks up only the single-predicate keys of its ``a``
    # space: the point conjunct ``a = 60`` (its ``a`` part), never a wide one.
    only_a = _candidates(psthash, {"a": 60})
    assert len(only_a) == 1
    both = _candidates(psthash, {"a": 60, "b": 20})
    assert len(both) == 2 + 25  # a = 60, b = 20 and every wide one (its first holds)
    for event in ({"a": 60}, {"b": 20}, {"a": 60, "b": 20}, {"a": 5, "b": 3, "c": 3},
                  {"c": 7}, {"a": 99, "b": 0}):
        assert psthash.match(event) == scan.match(event), event


def test_splits_copy_fallback_entries_with_their_second_tree() -> None:
    """Bounds added later split spaces holding fallback entries: the new spaces get
    them under the same second tree, and the matches stay scan's."""
    psthash, scan = _both([(f"w{i}", f"a >= {10 * i} and b < {1000 - 10 * i}")
                           for i in range(40)] + [("solo", "a > 5")])
    before = len(psthash.fallback)
    spaces_a = psthash.forest.spaces.live
    # Bounds inside the wide ranges split their spaces, one batch after another.
    for step in range(1, 6):  # the trees stay coarse (FINE_SPACES): no cells
        more = [(f"s{step}.{i}", f"a = {10 * i + step} and b = {1000 - 10 * i - step}")
                for i in range(40)]
        psthash.add_many(more)
        scan.add_many(more)
        psthash.check()
    assert psthash.forest.spaces.live > spaces_a + 300
    assert len(psthash.fallback) > before  # the split spaces' entries were copied
    events = [{"a": a, "b": b} for a in range(0, 420, 7) for b in range(590, 1010, 13)]
    events += [{"a": a} for a in range(0, 420, 3)]
    assert psthash.match_batch(events) == scan.match_batch(events)


def test_removals_then_purge_keep_the_fallback_lists_exact() -> None:
    psthash, scan = _both(*_wide_pairs(200))
    # The wide ones first: the purges that the point conjuncts' removals bring drop
    # them all.
    gone = [f"w{i}" for i in range(50)] + [f"p{i}" for i in range(0, 200, 2)]
    for sid in gone:
        psthash.remove(sid)
        scan.remove(sid)
        psthash.check()
    assert psthash.registry.awaiting_reclaim < 300  # a purge ran
    keys, _ = psthash.fallback.entries()
    assert ((keys & 0xFFFFFFFF) == 0xFFFFFFFF).all()
    events = [{"a": v, "b": 199 - v, "c": v} for v in range(0, 200, 3)] + [{"a": 7}]
    assert psthash.match_batch(events) == scan.match_batch(events)
    again = [(f"x{i}", f"a >= {i} and c < {200 - i}") for i in range(50)]
    psthash.add_many(again)
    scan.add_many(again)
    psthash.check()
    assert psthash.match_batch(events) == scan.match_batch(events)
