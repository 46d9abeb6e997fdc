"""The batch pipeline every index shares: chunks tile the batch and change no answer."""

from __future__ import annotations

import pytest

from index import MATCHERS, make_matcher
from index.core.pipeline import IndexedMatcher

INDEXES = [name for name in MATCHERS if name != "scan"]


@pytest.mark.parametrize("name", INDEXES)
def test_small_chunks_tile_the_batch_and_answer_as_one(name, monkeypatch):
    monkeypatch.setattr("index.core.pipeline.WORK_BUDGET", 64)
    matcher, scan = make_matcher(name), make_matcher("scan")
    assert isinstance(matcher, IndexedMatcher)
    subs = [(i, f"a = {i % 7} and b between {i % 5} and {i % 5 + 3} or c like '%{i % 3}%'")
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
