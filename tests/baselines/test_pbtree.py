"""PB+tree: which of the leaf items and the three lists each operator lands in, the
search over them (including "all != minus those at x"), multiplicity, exact keys and
deletion."""

from __future__ import annotations

import numpy as np

from psmatch.baselines.paper_predicates import Op, PaperPredicate
from psmatch.baselines.pbtree import PBTree, PBTreeMatcher
from psmatch.language import Kind

ALIVE = np.ones(16, dtype=bool)


def tree_with(*rows: tuple[int, Op, tuple]) -> PBTree:
    tree = PBTree(Kind.NUMBER)
    for cid, op, constants in rows:
        tree.insert(cid, PaperPredicate("x", Kind.NUMBER, op, constants))
    tree.build(ALIVE)
    return tree


def keys_and_cids(entries: object) -> list[tuple[float, int]]:
    return list(zip(entries.keys[0].tolist(), entries.owners.tolist(), strict=True))  # type: ignore[attr-defined]


def test_each_operator_lands_in_its_lists() -> None:
    tree = tree_with((0, Op.EQ, (5,)), (1, Op.GE, (3,)), (2, Op.GT, (4,)), (3, Op.LE, (6,)),
                     (4, Op.LT, (2,)), (5, Op.NE, (5, 7)), (6, Op.EQ, (1, 9)))
    assert keys_and_cids(tree.leaf) == [(1, 6), (3, 1), (5, 0), (6, 3), (9, 6)]
    assert keys_and_cids(tree.greater) == [(3, 1), (4, 2)]
    assert keys_and_cids(tree.less) == [(2, 4), (6, 3)]
    assert tree.inequality.owners.tolist() == [5]
    assert keys_and_cids(tree.inequality.points) == [(5, 5), (7, 5)]


def test_search_collects_leaf_greater_less_and_inequality() -> None:
    tree = tree_with((0, Op.EQ, (5,)), (1, Op.GE, (3,)), (2, Op.GT, (5,)), (3, Op.LE, (5,)),
                     (4, Op.LT, (5,)), (5, Op.NE, (5, 7)), (6, Op.NE, ()))
    values = [5, 4, 7, 6]
    query, cids = tree.search(values)
    got = [sorted(cids[query == i].tolist()) for i in range(len(values))]
    assert got == [[0, 1, 3, 6],  # x = 5: the leaf item at 5, >= 3 through the list
                   [1, 3, 4, 5, 6],
                   [1, 2, 6],  # != (5, 7) excluded at 7
                   [1, 2, 5, 6]]


def test_keys_beyond_two_to_the_53_are_exact() -> None:
    big = 2**53
    tree = tree_with((0, Op.GT, (big,)), (1, Op.EQ, (big + 1,)), (2, Op.LT, (big + 2,)))
    query, cids = tree.search([big, big + 1, float(big), big + 2])
    assert [sorted(cids[query == i].tolist()) for i in range(4)] == [
        [2], [0, 1, 2], [2], [0]]


def test_strings_and_booleans_have_their_own_trees() -> None:
    m = PBTreeMatcher()
    m.add("p", "s like 'ab%' and f = true")
    m.add("q", "s = 'ab'")
    m.check()
    assert set(m.tree_of) == {("s", Kind.STRING), ("f", Kind.BOOL)}
    assert m.match_batch([{"s": "abc", "f": True}, {"s": "ab", "f": 1}, {"s": "ac"}]) == [
        {"p"}, {"q"}, set()]


def test_two_predicates_on_one_attribute_count_twice() -> None:
    m = PBTreeMatcher()
    m.add("between", "x between 3 and 5")
    m.add("not in", "x not in (1, 2) and x > 0")
    assert m.match_batch([{"x": 3}, {"x": 4}, {"x": 6}, {"x": 2}]) == [
        {"between", "not in"}, {"between", "not in"}, {"not in"}, set()]
    m.check()


def test_deleted_entries_stay_until_the_bulk_purge(monkeypatch) -> None:
    m = PBTreeMatcher()
    monkeypatch.setattr("psmatch.core.registry.PURGE_MIN", 2)
    for i in range(6):
        m.add(str(i), f"x >= {i} and x != {i + 1}")
    assert m.match({"x": 0}) == {"0"}
    m.remove("0")
    m.check()
    assert m.match({"x": 0}) == set()
    tree = m.trees[m.tree_of[("x", Kind.NUMBER)]]
    assert len(tree.leaf) == 6 and len(tree.inequality) == 6
    m.remove("1")
    m.remove("2")  # three removals: purge
    m.check()
    assert len(tree.leaf) == len(tree.greater) == len(tree.inequality) == 3
    m.add("new", "x >= 0")
    m.check()
    assert m.registry.cids_of(m.internal.slot_of("new"))[0] < 6  # a purged cid is reused
    assert m.match({"x": 9}) == {"3", "4", "5", "new"}
    m.check()
