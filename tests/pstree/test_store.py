"""ConjunctStore.verify, the compiled verification kernel, against the conjuncts' own
evaluation.

The store is built with its real forest and registry (no matcher around it): every
(event, live conjunct) pair is a candidate, and verify must keep exactly the pairs whose
conjunct the event satisfies (for residual conjuncts, those with ``like`` patterns the
rows cannot hold, at least those), must trust the ``checked`` predicates it is told
hold (not their values: their attributes must still be in the event, as they are when
the lookup found them true), and must drop removed conjuncts. ``check()`` runs after every mutation.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psmatch.core.registry import ConjunctRegistry
from psmatch.events import flatten_event
from psmatch.language import Conjunct, Kind, Predicate
from psmatch.language.columns import ConjunctColumns
from psmatch.pstree.forest import Forest
from psmatch.pstree.rows import run_field, run_starts
from psmatch.pstree.store import ConjunctStore, operator_ranks
from tests.strategies import events, expressions, parsed


class Stored:
    """A store holding conjuncts, with the registry and forest it uses."""

    def __init__(self, conjuncts: list[Conjunct]) -> None:
        self.forest = Forest()
        self.registry = ConjunctRegistry()
        self.store = ConjunctStore(self.forest, self.registry)
        self.conjuncts: list[Conjunct] = []
        self.cids = np.empty(0, dtype=np.int64)
        self.residual = np.empty(0, dtype=bool)
        self.add(conjuncts)

    def add(self, conjuncts: list[Conjunct]) -> None:
        """Store more conjuncts, each as its own subscription (slot = its index)."""
        slots = list(range(len(self.conjuncts), len(self.conjuncts) + len(conjuncts)))
        columns = ConjunctColumns.of_conjuncts(conjuncts)
        cids = self.registry.allocate(slots, columns.predicate_count)
        inserted = self.store.insert_many(cids, columns)
        self.conjuncts += conjuncts
        self.cids = np.concatenate([self.cids, cids])
        self.residual = np.concatenate([self.residual, inserted.residual])
        self.store.check()

    def remove(self, slot: int) -> None:
        self.store.release(self.registry.unlink(np.array([slot])))
        self.store.check()

    def verify_all(self, batch: list[dict], checked: int = 0) -> set[tuple[int, int]]:
        """(event, conjunct index) pairs verify keeps, every pair a candidate with its
        first ``checked`` predicates (or all, if fewer) told to hold."""
        flat = [flatten_event(event) for event in batch]
        positions = self.forest.locate_events(flat).position_matrix(len(self.forest.trees))
        e, j = np.divmod(np.arange(len(flat) * len(self.cids)), len(self.cids))
        sizes = np.array([len(c.predicates) for c in self.conjuncts], dtype=np.int64)
        kept_e, kept_c = self.store.verify(e, self.cids[j], np.minimum(sizes[j], checked),
                                           positions)
        assert kept_e.dtype == kept_c.dtype == np.int64
        index_of = {int(cid): i for i, cid in enumerate(self.cids)}
        return {(int(ev), index_of[int(cid)]) for ev, cid in zip(kept_e, kept_c, strict=True)}

    def truth(self, batch: list[dict], live: list[int]) -> set[tuple[int, int]]:
        flat = [flatten_event(event) for event in batch]
        return {(e, j) for e, event in enumerate(flat) for j in live
                if self.conjuncts[j].evaluate(event)}


def _conjuncts(texts: list[str]) -> list[Conjunct]:
    return [c for subscription in parsed(texts) for c in subscription.conjuncts]


def _agrees(stored: Stored, batch: list[dict], live: list[int]) -> None:
    kept = stored.verify_all(batch)
    truth = stored.truth(batch, live)
    exact = {(e, j) for e, j in kept if not stored.residual[j]}
    assert exact == {(e, j) for e, j in truth if not stored.residual[j]}
    assert truth <= kept  # residual conjuncts: the patterns are left to the residual check
    assert {j for _, j in kept} <= set(live)


@given(st.lists(expressions(), min_size=1, max_size=30),
       st.lists(events(), min_size=1, max_size=12), st.data())
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_verify_keeps_exactly_the_satisfied_live_conjuncts(texts: list[str], batch: list[dict],
                                                           data: st.DataObject) -> None:
    conjuncts = _conjuncts(texts)
    if not conjuncts:
        return
    stored = Stored(conjuncts)
    _agrees(stored, batch, list(range(len(conjuncts))))
    removed = data.draw(st.sets(st.sampled_from(range(len(conjuncts)))))
    for slot in removed:
        stored.remove(slot)
    _agrees(stored, batch, [j for j in range(len(conjuncts)) if j not in removed])


def test_several_intervals_hold_only_inside_one_of_them() -> None:
    # Holes below, between and above the intervals of `in`, `not in` and `not between`.
    stored = Stored(_conjuncts(["a in (1, 3, 5)", "a not in (2, 4)",
                                "a not between 2 and 4 and b = 'x'", "a in (3, 'x')"]))
    batch = [{"a": v, "b": "x"} for v in (0, 1, 2, 3, 4, 5, 6, 2.5, "x", None)] + [{"b": "x"}]
    kept = stored.verify_all(batch)
    assert kept == stored.truth(batch, list(range(len(stored.conjuncts))))
    assert {e for e, j in kept if j == 0} == {1, 3, 5}
    assert {e for e, j in kept if j == 1} == {0, 1, 3, 5, 6, 7}
    assert {e for e, j in kept if j == 2} == {0, 1, 5, 6}


def test_verify_trusts_the_checked_predicates_and_drops_removed_conjuncts() -> None:
    stored = Stored(_conjuncts(["a = 1 and b = 2", "a > 5 and b < 0 and c = 'z'", "c = 'y'"]))
    # Checked predicates are those the lookup found true, so their attributes are there:
    # events with every attribute, and values no predicate admits.
    batch = [{"a": 0, "b": 0, "c": "q"}, {"a": 3, "b": 1, "c": "x"}]
    assert stored.verify_all(batch) == set()
    assert stored.verify_all(batch, checked=3) == {(e, j) for e in (0, 1) for j in (0, 1, 2)}
    # The first predicate in access order told to hold: the other is still checked, so
    # of two events each failing one of them exactly one passes.
    kept = stored.verify_all([{"a": 1, "b": 2, "c": "q"}, {"a": 0, "b": 2, "c": "q"},
                              {"a": 1, "b": 0, "c": "q"}], checked=1)  # fmt: skip
    assert (0, 0) in kept and len(kept & {(1, 0), (2, 0)}) == 1
    assert {(e, j) for e, j in kept if j != 0} == {(0, 2), (1, 2), (2, 2)}  # all checked
    stored.remove(1)
    assert stored.verify_all(batch, checked=3) == {(e, j) for e in (0, 1) for j in (0, 2)}


def test_a_candidate_needing_an_attribute_its_event_lacks_is_dropped_on_its_tree_mask() -> None:
    """Even with its predicates told to hold: no predicate holds on a missing attribute,
    so the kernel drops the candidate before reading its rows."""
    stored = Stored(_conjuncts(["a = 1 and b = 2", "c = 3"]))
    assert stored.verify_all([{"a": 1}, {"b": 2}, {}, {"c": 3}], checked=2) == {(3, 1)}
    assert stored.verify_all([{"a": 1, "b": 2}], checked=2) == {(0, 0)}


def test_trees_sharing_a_mask_bit_stay_exact() -> None:
    """With more than 64 trees, two share each bit (t % 64): the mask lets such a
    candidate through and its rows decide."""
    rng = np.random.default_rng(7)
    texts = [f"x{i} = 0 and x{(i + 64) % 100} <= 1" for i in range(100)]
    stored = Stored(_conjuncts(texts))
    assert len(stored.forest.trees) == 100
    batch = [{f"x{i}": int(rng.integers(0, 3)) for i in rng.choice(100, 40, replace=False)}
             for _ in range(30)]  # fmt: skip
    _agrees(stored, batch, list(range(100)))
    assert stored.truth(batch, list(range(100)))  # some match: not an empty agreement


def test_verify_follows_rows_added_split_and_compacted() -> None:
    """Rows keep bound codes, whose space positions the kernel reads from the forest's
    bound ranks: verify stays exact when rows are added without new bounds, when new
    bounds split spaces (positions move), and after a compaction (rows and the runs of
    ``in`` and ``not in`` predicates move left)."""
    batch = [{"a": v, "b": w} for v in (0, 1, 2, 3, 4, 5, 6, 7) for w in (0, 1, 2)]
    stored = Stored(_conjuncts([f"a in ({v}, {v + 2}) and b <= {v % 3}" for v in range(4)]))
    _agrees(stored, batch, list(range(4)))
    version = stored.forest.version
    stored.add(_conjuncts(["a = 2 and b = 1", "a in (0, 4)"]))  # existing bounds only
    assert stored.forest.version == version
    _agrees(stored, batch, list(range(6)))
    assert len(stored.store.row_table()) == len(stored.store.rows)
    stored.add(_conjuncts(["a > 4.5 and b != 0", "a not in (1, 3, 6) and b >= 1"]))
    assert stored.forest.version != version  # 4.5 and 6 split spaces of a
    _agrees(stored, batch, list(range(8)))
    for slot in (0, 2, 4, 6):
        stored.remove(slot)
    stored.store.compact()
    stored.store.check()
    live_rows = sum(len(stored.conjuncts[j].predicates) for j in (1, 3, 5, 7))
    assert stored.store.dead_rows == 0 and len(stored.store.rows) == live_rows
    _agrees(stored, batch, [1, 3, 5, 7])


def test_check_finds_a_hull_that_is_not_its_runs() -> None:
    """A row of several intervals keeps its hull's high end in the row (what the kernel
    tests first) and its intervals in a run, whose start is the row's low end: a hull
    that disagrees with the run fails ``check``, and so does a run of one interval."""
    stored = Stored(_conjuncts(["a in (1, 3) and b <= 2", "a = 2"]))
    store = stored.store
    store.check()
    run = run_starts(store.rows.view()["lo"])
    multi = int(np.flatnonzero(run >= 0)[0])
    assert store.interval_counts(np.array([multi])).tolist() == [2]
    store.rows.data["hi"][multi] = store.runs.data[run[multi] + 1]  # the first's low end
    with pytest.raises(AssertionError, match="a hull"):
        store.check()
    stored = Stored(_conjuncts(["a in (1, 3) and b <= 2", "a = 2"]))
    store = stored.store
    single = int(np.flatnonzero(run_starts(store.rows.view()["lo"]) < 0)[0])
    row = store.rows.data[single]
    start = store.runs.extend(np.array([1, row["lo"], row["hi"]]))
    store.rows.data["lo"][single] = run_field(np.array([start]))[0]
    with pytest.raises(AssertionError, match="a run"):
        store.check()


def test_no_candidates() -> None:
    stored = Stored(_conjuncts(["a = 1"]))
    positions = stored.forest.locate_events([{"a": 1}]).position_matrix(1)
    empty = np.empty(0, dtype=np.int64)
    kept_e, kept_c = stored.store.verify(empty, empty, empty, positions)
    assert len(kept_e) == len(kept_c) == 0


def paper_operator_rank(predicate: Predicate) -> tuple[int, int]:
    """The paper's fallback selectivity order, one predicate at a time (the reference for
    the columnar :func:`psmatch.pstree.store.operator_ranks`), smaller is more selective:
    = , in, between, range, !=, not in, anything; then fewer intervals first."""
    ivs = predicate.intervals
    if all(iv.is_point for iv in ivs):
        rank = 0 if len(ivs) == 1 else 1
    elif ivs[0].lo is not None and ivs[-1].hi is not None:
        rank = 2
    elif len(ivs) == 1 and (ivs[0].lo is not None or ivs[0].hi is not None):
        rank = 3
    elif len(ivs) == 1:
        rank = 6
    else:
        rank = 4 if len(ivs) == 2 else 5
    return rank, len(ivs)


@given(st.lists(expressions(), min_size=1, max_size=30))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_operator_ranks_of_the_rows_equal_the_predicates_own(texts: list[str]) -> None:
    """The columnar ranks insert_many orders predicates by equal the paper's order
    (:func:`paper_operator_rank`) and the interval count of every stored row."""
    conjuncts = _conjuncts(texts)
    if not conjuncts:
        return
    store = Stored(conjuncts).store
    rows = np.arange(len(store.rows))
    niv = store.interval_counts(rows)
    ranks = operator_ranks(*store.intervals(rows)[:1], np.cumsum(niv) - niv, niv,
                           *store.intervals(rows)[1:])
    forest = store.forest
    for cid in range(len(conjuncts)):
        start = int(store.pred_start.data[cid])
        for predicate in conjuncts[cid].predicates:
            tree = forest.tree_of[(predicate.attribute, predicate.kind)]
            row = start + store.pred_tree[start : len(store.rows)].tolist().index(tree)
            rank, width = paper_operator_rank(predicate)
            assert ranks[row] == rank * 1024 + min(width, 1023)


def test_before_any_event_an_equality_in_the_larger_domain_comes_first() -> None:
    """With no event seen, equalities tie on past events, on their rank and on the one
    space each covers; the share of its tree's spaces decides: among a hundred
    destinations and four carriers, the destination comes first whatever the
    attributes' names."""
    watches = [f"carrier = 'c{i % 4}' and dest = 'd{i}'" for i in range(100)]
    store = Stored(_conjuncts(watches)).store
    dest = store.forest.tree_of[("dest", Kind.STRING)]
    first = store.pred_tree[store.pred_start.data[: len(watches)]]
    assert (first == dest).all()
