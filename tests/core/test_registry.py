"""The conjunct registry every indexed matcher shares: ids, links, residuals, reclaim."""

from __future__ import annotations

import numpy as np

from psmatch.core import registry as registry_module
from psmatch.core.registry import ConjunctRegistry
from psmatch.language import parse_subscription


def conjuncts(text: str):
    return list(parse_subscription(text).conjuncts)


def sizes(conjuncts) -> np.ndarray:
    """The number of predicates of each conjunct, what ``allocate`` takes."""
    return np.array([len(c.predicates) for c in conjuncts], dtype=np.int64)


def test_allocate_links_each_subscription_to_its_conjuncts():
    r = ConjunctRegistry()
    first = conjuncts("a = 1 or b = 2")
    cids = r.allocate([7, 7], sizes(first))
    cids2 = r.allocate([3], sizes(conjuncts("c > 1 and d < 2")))
    r.check([7, 3])
    assert sorted(r.cids_of(7)) == sorted(cids.tolist()) and r.cids_of(3) == cids2.tolist()
    assert (r.live, r.live_predicates) == (3, 4)
    assert r.slot.data[cids2[0]] == 3


def test_removed_ids_are_reused_only_after_reclaim(monkeypatch):
    monkeypatch.setattr(registry_module, "PURGE_MIN", 1)
    r = ConjunctRegistry()
    for slot in range(4):
        r.allocate([slot], sizes(conjuncts(f"a = {slot}")))
    removed = r.unlink(np.array([0, 1]))
    r.check([2, 3])
    assert not r.alive.data[removed].any() and r.purge_due and r.awaiting_reclaim == 2
    assert set(r.allocate([5], sizes(conjuncts("b = 1"))).tolist()).isdisjoint(removed)
    r.reclaim()
    assert r.allocate([6], sizes(conjuncts("b = 2")))[0] in removed
    r.check([2, 3, 5, 6])
    assert (r.live, r.live_predicates, len(r)) == (4, 4, 5)


def test_residual_conjuncts_are_finished_by_evaluation():
    r = ConjunctRegistry()
    cids = r.allocate([0, 1], sizes([*conjuncts("s like '%x%'"), *conjuncts("s like 'a%'")]))
    r.mark_residual(cids[:1], conjuncts("s like '%x%'"))
    r.check([0, 1])
    events = np.array([0, 0, 1, 1])
    pairs = np.array([cids[0], cids[1], cids[0], cids[1]])
    # "x" does not occur in "abc": that pair is dropped before anything is verified
    keep = r.access_holds(events, pairs, [{"s": "axe"}, {"s": "abc"}])
    assert keep is not None and keep.tolist() == [True, True, False, True]
    kept_e, kept_c = r.keep_satisfied(events, pairs, [{"s": "axe"}, {"s": "abc"}])
    # the index decided the second conjunct; the first holds only where "x" occurs
    assert list(zip(kept_e.tolist(), kept_c.tolist(), strict=True)) == [
        (0, cids[0]), (0, cids[1]), (1, cids[1])]
    r.unlink(np.array([0]))
    r.check([1])
    assert not r.residual_conjuncts
