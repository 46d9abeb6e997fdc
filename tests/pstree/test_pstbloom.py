"""PSTBloom's signatures: built in bulk, shared by split spaces, stale after removals.

The differential tests add subscriptions one at a time, which seldom triggers a
signature build; these tests force builds between mutations so that every state of the
signatures (fresh, shared after a split, stale after a removal) is compared with scan.
"""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psmatch import make_matcher
from psmatch.pstree import pstbloom
from psmatch.pstree.pstbloom import PSTBloomMatcher
from psmatch.pstree.store import ConjunctStore
from tests.strategies import events, expressions, parsed


@given(st.lists(expressions(), min_size=10, max_size=60),
       st.lists(expressions(), min_size=1, max_size=20),
       st.lists(events(), min_size=10, max_size=40))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_signatures_never_drop_a_match(first: list[str], later: list[str], batch: list[dict]):
    bloom, scan = make_matcher("pstbloom"), make_matcher("scan")
    initial = [(str(i), sub) for i, sub in enumerate(parsed(first))]
    bloom.add_many(initial)  # the first match builds the signatures
    scan.add_many(initial)
    bloom.check()
    assert bloom.match_batch(batch) == scan.match_batch(batch)
    # Added after the build: new bounds split spaces that share their parent's filter.
    for i, sub in enumerate(parsed(later), start=1000):
        bloom.add(str(i), sub)
        scan.add(str(i), sub)
    bloom.check()
    assert bloom.match_batch(batch) == scan.match_batch(batch)
    # Removed after the build: their bits stay (stale), which may only add candidates.
    for sub_id, _ in initial[::2]:
        bloom.remove(sub_id)
        scan.remove(sub_id)
    bloom.check()
    assert bloom.match_batch(batch) == scan.match_batch(batch)
    bloom.build_signatures()
    assert bloom.match_batch(batch) == scan.match_batch(batch)


def test_signatures_reject_candidates_whose_other_predicate_misses():
    bloom = make_matcher("pstbloom")
    bloom.add_many([(str(i), f"a = {i} and b = {i}") for i in range(50)])
    assert not bloom.sig_pool.any(), "add_many leaves the signatures to the next match"
    assert bloom.match({"a": 3, "b": 3}) == {"3"}
    assert bloom.sig_pool.any(), "the first match after add_many builds them"
    # Every conjunct's second predicate (b = i) is narrow, so it is signed.
    assert (bloom.sig_mask.view() != 0).all()
    assert bloom.match({"a": 3, "b": 4}) == set()


def test_the_signature_filter_drops_candidates_before_verification():
    """Conjunct 3 (``a = 3 and b = 3``) is a candidate of ``{a: 3, b: 4}`` through its
    access predicate; its signed ``b = 3`` is missing from the signature of the event's
    ``b`` space, so verification never sees it. An event without ``b`` drops it too,
    and the conjunct that holds passes."""
    bloom = make_matcher("pstbloom")
    bloom.add_many([(str(i), f"a = {i} and b = {i}") for i in range(50)])
    bloom.match({"a": 0, "b": 0})  # builds the signatures
    verify = ConjunctStore.verify
    with patch.object(ConjunctStore, "verify", autospec=True,
                      side_effect=verify) as verified:
        for event, answer in (({"a": 3, "b": 4}, set()), ({"a": 3}, set()),
                              ({"a": 3, "b": 3}, {"3"})):
            assert bloom.match(event) == answer
            cids = verified.call_args.args[2]
            assert len(cids) == len(answer), event


def test_bulk_adds_between_two_matches_are_signed_by_one_build():
    """A reload or catch-up is many ``add_many`` calls: they pay for one pass over the
    live conjuncts, at the next match, not one each."""
    bloom = make_matcher("pstbloom")
    build = PSTBloomMatcher.build_signatures
    with patch.object(PSTBloomMatcher, "build_signatures", autospec=True,
                      side_effect=build) as counted:
        for start in range(0, 200, 50):
            bloom.add_many([(str(i), f"a = {i} and b = {i}") for i in range(start, start + 50)])
            bloom.check()
        assert counted.call_count == 0
        assert bloom.match({"a": 3, "b": 3}) == {"3"}
        assert bloom.match({"a": 199, "b": 199}) == {"199"}
        assert counted.call_count == 1
        bloom.add_many([("200", "a = 200 and b = 200")])
        assert bloom.match({"a": 200, "b": 200}) == {"200"}
        assert counted.call_count == 2
    assert (bloom.sig_mask.view() != 0).all()


@given(st.lists(expressions(), min_size=1, max_size=60), st.integers(1, 7))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_signatures_built_block_by_block_equal_those_built_at_once(texts: list[str],
                                                                   block: int) -> None:
    bloom = make_matcher("pstbloom")
    bloom.add_many([(str(i), sub) for i, sub in enumerate(parsed(texts))])
    bloom.build_signatures()
    whole = (bloom.sig_pool.copy(), bloom.sig_offset.copy(), bloom.sig_bits.copy(),
             bloom.sig_mask.view().copy())
    with patch.object(pstbloom, "SIGNATURE_BLOCK", block):
        bloom.build_signatures()
    blocks = (bloom.sig_pool, bloom.sig_offset, bloom.sig_bits, bloom.sig_mask.view())
    assert all(np.array_equal(a, b) for a, b in zip(whole, blocks, strict=True))
