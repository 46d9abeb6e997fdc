"""Columnar building blocks: insert_sorted against numpy's insert."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from index.core.columns import insert_sorted


@given(st.lists(st.integers(-50, 50), max_size=40), st.data())
@settings(max_examples=300, deadline=None)
def test_insert_sorted_equals_numpy_insert(column, data) -> None:
    """Small (sliced) and large (masked) insertions alike, equal positions keeping the
    items' order, as np.insert does for sorted positions."""
    n_items = data.draw(st.integers(0, 30))
    at = np.sort(np.array(data.draw(st.lists(st.integers(0, len(column)),
                                             min_size=n_items, max_size=n_items)),
                          dtype=np.int64))
    items = np.arange(100, 100 + n_items, dtype=np.int32)
    base = np.array(column, dtype=np.int32)
    got = insert_sorted(base, at, items)
    assert got.dtype == base.dtype
    assert got.tolist() == np.insert(base, at, items).tolist()
