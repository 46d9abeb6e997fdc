"""The batch pipeline every index shares: chunks tile the batch and change no answer."""

from __future__ import annotations

import random

import pytest

from psmatch import MATCHERS, make_matcher
from psmatch.core.pipeline import IndexedMatcher

INDEXES = [name for name in MATCHERS if name not in ("scan", "auto")]
"""The families built on the pipeline (``auto`` files its conjuncts in two of them)."""


@pytest.mark.parametrize("name", INDEXES)
def test_small_chunks_tile_the_batch_and_answer_as_one(name, monkeypatch):
    monkeypatch.setattr("psmatch.core.pipeline.WORK_BUDGET", 64)
    matcher, scan = make_matcher(name), make_matcher("scan")
    assert isinstance(matcher, IndexedMatcher)
    subs = [(str(i), f"a = {i % 7} and b between {i % 5} and {i % 5 + 3} or c like '%{i % 3}%'")
            for i in range(120)]
    matcher.add_many(subs)
    scan.add_many(subs)
    chunks: list[tuple[int, int]] = []
    lookup = matcher._candidates

    def counted(batch, first, last):  # type: ignore[no-untyped-def]
        chunks.append((first, last))
        return lookup(batch, first, last)

    matcher._candidates = counted  # type: ignore[method-assign]
    events = [{"a": i % 7, "b": i % 9, "c": f"x{i % 4}"} for i in range(60)]
    assert matcher.match_batch(events) == scan.match_batch(events)
    assert len(chunks) > 1
    assert [first for first, _ in chunks] == [0, *(last for _, last in chunks[:-1])]
    assert chunks[-1][1] == len(events)
    matcher.check()


@pytest.mark.parametrize("name", INDEXES)
def test_candidates_whose_pattern_fails_are_dropped_before_verification(name):
    """Issue 9, item 6: a family's lookup hands over every conjunct with a contains
    pattern on an attribute the event has; counted, the pairs that go on to verification
    and to the residual check are only those whose pattern holds (each a match here)."""
    rng = random.Random(6)
    letters = "abcdefghijklmnopqrstuvwxyz"
    subs = {str(i): f"s like '%{''.join(rng.choices(letters, k=4))}%'" for i in range(2_000)}
    matcher, scan = make_matcher(name), make_matcher("scan")
    assert isinstance(matcher, IndexedMatcher)
    matcher.add_many(subs.items())
    scan.add_many(subs.items())
    events = [{"s": "".join(rng.choices(letters, k=40))} for _ in range(20)]
    events += [{"s": subs[str(i)][9:13] + "zz"} for i in range(0, 2_000, 200)]
    residual_pairs: list[int] = []
    check = matcher.registry.keep_satisfied

    def counted(events, cids, flat_events):  # type: ignore[no-untyped-def]
        residual_pairs.append(len(cids))
        return check(events, cids, flat_events)

    matcher.registry.keep_satisfied = counted  # type: ignore[method-assign]
    found = matcher.match_batch(events)
    assert found == scan.match_batch(events)
    assert sum(residual_pairs) == sum(len(f) for f in found) >= 10
