"""Propagation: access predicates, column-wise clusters, the fallback list, the bit
vector, event statistics and deletion."""

from __future__ import annotations

from psmatch.baselines.paper_predicates import Op
from psmatch.baselines.propagation import PropagationMatcher


def filed(m: PropagationMatcher, sub_id: str) -> tuple[int, object, list[object]]:
    """(cluster width, access predicate, other predicates) of a one-conjunct id."""
    m.check()  # files staged adds
    (cid,) = m.registry.cids_of(m.internal.slot_of(sub_id))
    m._prepare()
    for width, table in m.clusters.items():
        rows = (table.owners == cid).nonzero()[0]
        if len(rows):
            (row,) = rows
            pid_to = m.predicates.predicates
            return (width, pid_to[int(table.keys[0][row])],
                    [pid_to[int(p)] for p in table.payload[:, row]])
    raise AssertionError("not filed")


def test_an_equality_is_the_access_predicate_and_the_rest_are_columns() -> None:
    m = PropagationMatcher()
    m.add("s", "a < 5 and b in (1, 2) and c = 'x' and d != 3")
    width, access, others = filed(m, "s")
    assert width == 3 and access.op is Op.EQ and access.constants == ("x",)
    assert sorted(p.op for p in others) == [Op.EQ, Op.LT, Op.NE]
    m.add("t", "a < 5 and b in (1, 2)")
    assert filed(m, "t")[1].op is Op.EQ  # the in list, the only equality
    m.check()


def test_conjuncts_without_equality_form_the_fallback_list() -> None:
    m = PropagationMatcher()
    m.add("r", "a > 1 and b != 2")
    width, access, others = filed(m, "r")
    assert width == 1 and access.op is Op.GT and others[0].op is Op.NE
    assert m.match_batch([{"a": 2, "b": 3}, {"a": 2, "b": 2}, {"a": 2}]) == [{"r"}, set(), set()]


def test_clusters_of_one_access_predicate_are_split_by_size() -> None:
    m = PropagationMatcher()
    m.add("one", "a = 1")
    m.add("two", "a = 1 and b > 0")
    m.add("three", "a = 1 and b > 0 and c < 0")
    assert {filed(m, s)[0] for s in ("one", "two", "three")} == {0, 1, 2}
    assert m.match({"a": 1, "b": 1, "c": -1}) == {"one", "two", "three"}
    assert m.match({"a": 1, "b": 1}) == {"one", "two"}


def test_the_bit_vector_is_cleared_after_every_chunk() -> None:
    m = PropagationMatcher()
    for i in range(50):
        m.add(str(i), f"a = {i % 5} and b >= {i} and c != {i}")
    answers = m.match_batch([{"a": i % 5, "b": i, "c": 0} for i in range(20)])
    assert answers[7] == {"2", "7"}
    assert not m._bits.any()
    m.check()


def test_history_picks_the_equality_fewer_events_satisfied() -> None:
    m = PropagationMatcher()
    m.add("seed", "a = 1 and b = 2")
    assert filed(m, "seed")[1].attribute == "a"  # no history: first in order
    m.match_batch([{"a": 1, "b": 9}] * 10)  # a = 1 always holds, b = 2 never
    m.add("later", "a = 1 and b = 2")
    assert filed(m, "later")[1].attribute == "b"
    assert m.events_seen == 10


def test_removed_rows_are_skipped_then_purged_and_pids_reused(monkeypatch) -> None:
    m = PropagationMatcher()
    monkeypatch.setattr("psmatch.core.registry.PURGE_MIN", 2)
    for i in range(6):
        m.add(str(i), f"a = 1 and b = {i}")
    assert m.match({"a": 1, "b": 0}) == {"0"}
    m.remove("0")
    m.check()
    assert m.match({"a": 1, "b": 0}) == set()
    assert len(m.clusters[1]) == 6  # the row waits for the purge
    pids_before = m.predicates.size
    m.remove("1")
    m.remove("2")  # three removals: purge
    m.check()
    assert len(m.clusters[1]) == 3 and m.registry.awaiting_reclaim == 0
    m.add("x", "a = 1 and b = 7")
    assert m.predicates.size == pids_before  # a purged pid was reused
    assert m.match({"a": 1, "b": 7}) == {"x"}
    m.check()
