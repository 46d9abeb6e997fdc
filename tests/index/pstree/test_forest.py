"""The PS-Tree: predicate spaces split when predicates arrive and merge when they leave."""

from __future__ import annotations

from index import make_matcher
from index.language import Interval, Kind
from index.pstree.forest import Forest


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
    forest.spaces.event_counter[gap] = 7
    _, splits = forest.add_bounds(tree, [5])
    (split,) = splits
    assert split.sid == gap and tree.space_ids[0] == gap
    assert [int(forest.spaces.event_counter[s]) for s in split.new_sids] == [7, 7]
    forest.check()


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
