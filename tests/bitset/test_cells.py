"""The cells and fail bitsets of the bitset family, with ``check()`` after each mutation.

``check()`` asserts that every dimension's bitsets are exactly what filing its live rows
afresh gives; these tests add what it cannot see: that a set bit is right (every value
of its cell fails the predicate), that dimensions change between sparse and dense, and
that a skewed cell re-cuts its dimension.
"""

from __future__ import annotations

import random

import numpy as np

from psmatch import make_matcher
from psmatch.bitset.cells import BITS_PER_ROW, MAX_CELLS
from psmatch.bitset.matcher import BitsetMatcher
from psmatch.language import Kind


def _bitset() -> BitsetMatcher:
    matcher = make_matcher("bitset")
    assert isinstance(matcher, BitsetMatcher)
    return matcher


def _bit(fail: np.ndarray, cell: int, cid: int) -> bool:
    return bool((int(fail[cell, cid >> 6]) >> (cid & 63)) & 1)


def test_a_set_bit_means_every_value_of_its_cell_fails() -> None:
    rng = random.Random(3)
    matcher = _bitset()
    texts = {}
    for i in range(600):
        lo = rng.randrange(1000)
        texts[str(i)] = rng.choice([f"a between {lo} and {lo + rng.randrange(300)}",
                                    f"a in ({lo}, {lo + 7}, {lo + 400})", f"a > {lo}",
                                    f"a <= {lo}", f"a not between {lo} and {lo + 50}"])
    matcher.add_many(texts.items())
    matcher.check()
    dim = matcher.dims[matcher.dim_of["a", Kind.NUMBER]]
    assert dim.dense and 2 <= dim.cells <= MAX_CELLS
    edges = [-1e9, *dim.cuts.tolist(), 1e9]
    cid_of = {sub_id: matcher.registry.cids_of(matcher._ids.get(sub_id))[0] for sub_id in texts}
    for cell in range(dim.cells):
        probes = np.linspace(edges[cell], edges[cell + 1], 9)[:-1].tolist()
        matched = set().union(*matcher.match_batch([{"a": v} for v in probes]))
        failing = {sub_id for sub_id, cid in cid_of.items() if _bit(dim.fail, cell, cid)}
        assert not failing & matched, (cell, sorted(failing & matched)[:3])
        assert failing, "every cell fails some predicate here"
    assert all(_bit(dim.fail, dim.cells, cid) for cid in cid_of.values()), (
        "the absent row marks every predicate")


def test_dimensions_turn_dense_and_sparse_with_their_rows() -> None:
    matcher = _bitset()
    matcher.add_many((f"o{i}", f"x{i % 50} = {i}") for i in range(2000))
    matcher.add_many((f"a{i}", f"a between {i} and {i + 10}") for i in range(5))
    matcher.check()
    a = matcher.dims[matcher.dim_of["a", Kind.NUMBER]]
    assert not a.dense, "5 predicates among 2,000 ids get no bitsets"
    assert matcher.match({"a": 7}) == {f"a{i}" for i in range(5)}
    matcher.add_many((f"a{i}", f"a between {i} and {i + 10}") for i in range(5, 1500))
    matcher.check()
    assert a.dense
    assert a.cells <= BITS_PER_ROW * a.rows_at_cut // (64 * a.words_at_cut)
    assert matcher.match({"a": 7}) == {f"a{i}" for i in range(8)}
    matcher.remove_many([f"a{i}" for i in range(3, 1500)])
    matcher.check()
    assert not a.dense
    assert matcher.match({"a": 7}) == {"a0", "a1", "a2"}
    assert matcher.match({"a": 7, "x7": 7}) == {"a0", "a1", "a2", "o7"}


def test_single_adds_are_filed_into_the_cells_and_a_skewed_cell_re_cuts() -> None:
    matcher = _bitset()
    matcher.add_many((str(i), f"a between {i} and {i + 5}") for i in range(0, 4000, 2))
    dim = matcher.dims[matcher.dim_of["a", Kind.NUMBER]]
    matcher.check()
    cuts = dim.cuts.copy()
    for i in range(40):  # spread over the cells: filed into them, no re-cut
        matcher.add(f"s{i}", f"a between {i * 100} and {i * 100 + 3}")
        matcher.check()
    assert np.array_equal(cuts, dim.cuts)
    for i in range(300):  # all in the last cell: it gets too many bounds
        matcher.add(f"k{i}", f"a between {10**6 + i} and {10**6 + i + 1}")
        if i % 50 == 0:
            matcher.check()
    matcher.check()
    assert not np.array_equal(cuts, dim.cuts), "the skewed cell re-cut the dimension"
    assert (dim.cuts > 10**6).any()
    assert matcher.match({"a": 10**6 + 5}) == {"k4", "k5"}


def test_removal_clears_bits_at_once_and_ids_are_reused_after_the_purge() -> None:
    matcher = _bitset()
    matcher.add_many((str(i), f"a between {i} and {i + 100} and b < {i}") for i in range(3000))
    matcher.check()
    for round_ in range(3):
        removed = [str(i) for i in range(round_, 3000, 3)]
        texts = [(f"r{round_}-{i}", f"a = {i} and b >= 0") for i in range(1000)]
        matcher.remove_many(removed)
        matcher.check()
        matcher.add_many(texts)
        matcher.check()
    assert len(matcher.registry) <= 3000 + 3000 // 8 + 64
    expected = {f"r{r}-500" for r in range(3)}
    assert matcher.match({"a": 500, "b": 0}) == expected
