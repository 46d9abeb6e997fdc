"""Counting and the shared phase 1: the mapping onto paper predicates, the predicate
index (one pid per distinct predicate, the != list), counting with multiplicity, and
deletion with its bulk purge."""

from __future__ import annotations

import pytest

from psmatch.baselines.counting import CountingMatcher
from psmatch.baselines.paper_predicates import Op, PaperPredicate, decompose
from psmatch.baselines.predicate_index import PredicateIndex
from psmatch.language import Kind, parse_subscription


def paper(text: str) -> tuple[list[tuple[Op, tuple]], bool]:
    (conjunct,) = parse_subscription(text).conjuncts
    (predicate,) = conjunct.predicates
    predicates, residual = decompose(predicate)
    return [(p.op, p.constants) for p in predicates], residual


@pytest.mark.parametrize(("text", "expected"), [
    ("x = 3", ([(Op.EQ, (3,))], False)),
    ("x in (3, 1)", ([(Op.EQ, (1, 3))], False)),
    ("x < 3", ([(Op.LT, (3,))], False)),
    ("x >= 3", ([(Op.GE, (3,))], False)),
    ("x between 1 and 5", ([(Op.GE, (1,)), (Op.LE, (5,))], False)),
    ("x != 3", ([(Op.NE, (3,))], False)),
    ("x not in (1, 3)", ([(Op.NE, (1, 3))], False)),
    ("x between 1 and 5 and x != 3", ([(Op.GE, (1,)), (Op.LE, (5,)), (Op.NE, (3,))], False)),
    ("s like 'ab%'", ([(Op.GE, ("ab",)), (Op.LT, ("ac",))], False)),
    ("b = true", ([(Op.EQ, (True,))], False)),
    # Outside the papers: a necessary condition plus verification.
    ("x not between 1 and 5", ([(Op.NE, ())], True)),
    ("s like '%son'", ([(Op.NE, ())], True)),
    ("x > 1 and x != 3 and x not between 4 and 5", ([(Op.GT, (1,)), (Op.NE, (3,))], True)),
])
def test_every_operator_maps_onto_paper_predicates(text: str, expected: tuple) -> None:
    assert paper(text) == expected


def test_phase_one_shares_one_pid_per_distinct_predicate() -> None:
    index = PredicateIndex()
    eq = PaperPredicate("x", Kind.NUMBER, Op.EQ, (1, 2))
    first, second = index.acquire(eq), index.acquire(eq)
    assert first == second and index.refs[first] == 2 and index.live == 1
    index.release(first)
    assert index.live == 1
    index.release(first)
    assert index.live == 0 and not index.alive.data[first]
    index.reclaim()
    assert index.acquire(PaperPredicate("x", Kind.NUMBER, Op.LT, (0,))) == first


def test_phase_one_finds_exactly_the_satisfied_predicates() -> None:
    index = PredicateIndex()
    big = 2**53
    predicates = [PaperPredicate("x", Kind.NUMBER, op, constants) for op, constants in [
        (Op.EQ, (big + 1,)), (Op.EQ, (big, 7)), (Op.LT, (big + 1,)), (Op.LE, (big + 1,)),
        (Op.GT, (big,)), (Op.GE, (big + 1,)), (Op.NE, (big + 1, 7)), (Op.NE, ()),
    ]]
    pids = [index.acquire(p) for p in predicates]
    index.refresh()
    events = [{"x": big + 1}, {"x": float(big)}, {"x": 7}, {"x": "7"}, {}]
    ev, found = index.satisfied(events)
    got = [sorted(found[ev == e].tolist()) for e in range(len(events))]
    assert got[0] == sorted(pids[i] for i in (0, 3, 4, 5, 7))
    assert got[1] == sorted(pids[i] for i in (1, 2, 3, 6, 7))
    assert got[2] == sorted(pids[i] for i in (1, 2, 3, 7))
    assert got[3] == got[4] == []


def test_a_between_counts_twice_on_one_attribute() -> None:
    m = CountingMatcher()
    m.add("s", "x between 1 and 5")
    m.add("t", "x >= 1")
    assert m.match_batch([{"x": 1}, {"x": 5}, {"x": 6}]) == [{"s", "t"}, {"s", "t"}, {"t"}]
    (cid,) = m.registry.cids_of(m.internal.slot_of("s"))
    assert m.size.data[cid] == 2
    assert m.predicates.live == 2  # ">= 1" is one predicate for both


def test_removed_conjuncts_never_complete_and_are_purged_in_bulk(monkeypatch) -> None:
    m = CountingMatcher()
    monkeypatch.setattr("psmatch.core.registry.PURGE_MIN", 3)
    for i in range(8):
        m.add(str(i), f"x = {i % 2} and y > {i}")
    m.check()
    assert m.match({}) == set() and len(m.associations) == 16  # built
    for i in range(3):
        m.remove(str(i))
        m.check()
        assert str(i) not in m.match({"x": i % 2, "y": 100})
    assert m.registry.awaiting_reclaim == 3  # not yet purged: associations keep dead cids
    assert len(m.associations) == 16
    m.remove("3")  # the fourth removal passes a quarter of the live conjuncts
    m.check()
    assert m.registry.awaiting_reclaim == 0 and len(m.associations) == 8
    m.add("new", "x = 0")
    m.check()  # files the staged add
    assert m.registry.cids_of(m.internal.slot_of("new"))[0] < 8  # a purged cid is reused
    assert m.match({"x": 0, "y": 100}) == {"4", "6", "new"}
    m.check()
