"""The posting-list multimap: batched lookups equal a dict of lists (each key's values in
insertion order, across merges of the delta into main and compactions), the key filter
never drops a key and drops most missing queries."""

from __future__ import annotations

import pickle
import tracemalloc
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psmatch.core import multimap as multimap_module
from psmatch.core.multimap import KeyDirectory, KeyFilter, MultiMap

keys = st.integers(min_value=-(2**40), max_value=2**40)


def add(multimap: MultiMap, reference: dict[int, list[int]], batch: list[tuple[int, int]]
        ) -> None:
    """Add a batch of (key, value) pairs to the multimap and to a dict of lists, then check
    the multimap's invariants."""
    multimap.add(np.array([k for k, _ in batch], dtype=np.int64),
                 np.array([v for _, v in batch], dtype=np.int32))
    for k, v in batch:
        reference.setdefault(k, []).append(v)
    multimap.check()


@given(st.lists(st.lists(st.tuples(keys, st.integers(0, 2**31 - 1)), max_size=60), max_size=5),
       st.lists(keys, max_size=80))
@settings(max_examples=200, deadline=None)
def test_lookup_returns_every_value_under_each_query(batches, queries) -> None:
    multimap, reference = MultiMap(), {}
    for batch in batches:
        add(multimap, reference, batch)
    owner, values = multimap.lookup(np.array(queries, dtype=np.int64))
    got = sorted(zip(owner.tolist(), values.tolist(), strict=True))
    assert got == sorted((i, v) for i, q in enumerate(queries) for v in reference.get(q, []))


@given(st.lists(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 2**31 - 1)), max_size=40),
                max_size=6),
       st.lists(st.tuples(st.integers(-5, 65), st.integers(0, 20)), max_size=20))
@settings(max_examples=200, deadline=None)
def test_range_lookups_return_the_entries_of_the_keys_in_each_range(batches, ranges) -> None:
    """Across main and the delta (tiny merge threshold): every entry whose key is in the
    query's range, and only those."""
    with patch.object(multimap_module, "MERGE_MIN", 8):
        multimap, reference = MultiMap(), {}
        for batch in batches:
            add(multimap, reference, batch)
        low = np.array([lo for lo, _ in ranges], dtype=np.int64)
        high = low + np.array([width for _, width in ranges], dtype=np.int64)
        owner, found, values = multimap.lookup_ranges(low, high)
        got = sorted(zip(owner.tolist(), found.tolist(), values.tolist(), strict=True))
        assert got == sorted((i, k, v) for i, (lo, width) in enumerate(ranges)
                             for k in range(lo, lo + width) for v in reference.get(k, []))


@given(st.lists(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 2**31 - 1)), max_size=30),
                max_size=12),
       st.integers(0, 2**31 - 1))
@settings(max_examples=200, deadline=None)
def test_merges_and_compactions_keep_each_keys_values_in_insertion_order(batches,
                                                                         drop) -> None:
    """With a tiny merge threshold every few adds merge the delta into main (new keys and
    keys main has): lookups keep giving each key's values in insertion order. A
    compaction in blocks of 3 entries (a key's values split across blocks) asks its
    filter about every entry with its own key."""
    with (patch.object(multimap_module, "MERGE_MIN", 4),
          patch.object(multimap_module, "COMPACT_BLOCK", 3)):
        multimap, reference = MultiMap(), {}
        for batch in batches:
            add(multimap, reference, batch)
            queries = np.arange(-1, 42, dtype=np.int64)
            owner, values = multimap.lookup(queries)
            got: dict[int, list[int]] = {}
            for i, v in zip(owner.tolist(), values.tolist(), strict=True):
                got.setdefault(int(queries[i]), []).append(v)
            assert got == reference
        multimap.compact(lambda k, v: ((v ^ drop) + k) % 3 != 0)
        multimap.check()
        owner, values = multimap.lookup(np.arange(41, dtype=np.int64))
        kept = [(k, v) for k in range(41) for v in reference.get(k, [])
                if ((v ^ drop) + k) % 3]
        assert list(zip(owner.tolist(), values.tolist(), strict=True)) == kept


@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=300),
       st.lists(st.integers(-(2**63), 2**63 - 1), max_size=50), st.integers(0, 2**20))
@settings(max_examples=300, deadline=None)
def test_a_key_directory_finds_what_a_binary_search_finds(keys, queries, spread) -> None:
    """Any keys (the int64 extremes, clusters, a few spread over a wide range) and any
    queries, the keys' own among them: the directory's lower bounds are searchsorted's."""
    column = np.unique(np.array(keys + [k * spread for k in range(len(keys) // 3)],
                                dtype=np.int64))
    asked = np.array(queries + column[::2].tolist(), dtype=np.int64)
    directory = KeyDirectory(column)
    assert len(directory.starts) <= 2 * max(len(column) // 8, 1) + 2  # about 8 keys a bucket
    got = directory.lower_bounds(column, asked)
    assert got.tolist() == np.searchsorted(column, asked).tolist()


def test_a_bulk_key_filter_add_sets_the_same_bits_as_single_adds() -> None:
    keys = np.random.default_rng(3).integers(-(2**62), 2**62, 50_000)
    bulk, one_by_one = KeyFilter(keys[:0], len(keys)), KeyFilter(keys[:0], len(keys))
    bulk.add(keys)
    for part in np.array_split(keys, 1000):  # below the scatter threshold each
        one_by_one.add(part)
    assert (bulk.words == one_by_one.words).all()


def test_compact_keeps_what_the_filter_accepts_and_the_key_filter_follows() -> None:
    multimap = MultiMap()
    multimap.add(np.arange(10_000, dtype=np.int64), np.arange(10_000, dtype=np.int32))
    multimap.compact(lambda k, v: v % 2 == 0)
    multimap.check()
    owner, values = multimap.lookup(np.array([4, 5, 9_998], dtype=np.int64))
    assert owner.tolist() == [0, 2] and values.tolist() == [4, 9_998]


def test_a_compaction_asks_its_filter_a_block_of_entries_at_a_time() -> None:
    """The filter sees at most COMPACT_BLOCK entries per call, each once, with its key:
    a purge's temporaries are a block's, whatever the table's size."""
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 500, 20_000)  # about 40 values a key
    multimap = MultiMap()
    multimap.add(keys, np.arange(20_000, dtype=np.int32))
    asked: list[tuple[np.ndarray, np.ndarray]] = []

    def keep(k: np.ndarray, v: np.ndarray) -> np.ndarray:
        asked.append((k.copy(), v.copy()))
        return v % 2 == 0

    with patch.object(multimap_module, "COMPACT_BLOCK", 1_000):
        multimap.compact(keep)
    multimap.check()
    assert max(len(v) for _, v in asked) == 1_000 and len(asked) == 20
    seen_keys = np.concatenate([k for k, _ in asked])
    seen_values = np.concatenate([v for _, v in asked])
    assert sorted(seen_values.tolist()) == list(range(20_000))
    assert (seen_keys == keys[seen_values]).all()
    _, values = multimap.lookup(np.arange(500, dtype=np.int64))
    assert sorted(values.tolist()) == list(range(0, 20_000, 2))


def test_a_key_filter_bit_is_the_top_bits_of_the_keys_fibonacci_hash() -> None:
    """The compiled filter sets and reads bit ``(key * 0x9E3779B97F4A7C15 mod 2**64) >>
    shift`` of its words, as numpy computes it, and refuses keys of another type."""
    keys = np.random.default_rng(11).integers(-(2**63), 2**63 - 1, 5_000)
    key_filter = KeyFilter(keys[:0], 10_000)
    key_filter.add(keys)
    bits = (keys.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(
        key_filter._shift)
    expected = np.zeros_like(key_filter.words)
    np.bitwise_or.at(expected, bits >> np.uint64(6), np.uint64(1) << (bits & np.uint64(63)))
    assert (key_filter.words == expected).all()
    assert key_filter.may_hold(keys).all()
    with pytest.raises(TypeError, match="argument 'keys'"):
        key_filter.may_hold(keys.astype(np.int32))


def test_the_key_filter_drops_most_missing_queries() -> None:
    rng = np.random.default_rng(7)
    present = rng.integers(0, 2**62, 100_000)
    key_filter = KeyFilter(present, len(present))
    assert key_filter.may_hold(present).all()
    missing = np.setdiff1d(rng.integers(0, 2**62, 100_000), present)
    passed = int(key_filter.may_hold(missing).sum())
    assert passed < len(missing) // 4  # 8 bits a key or more: about an eighth gets through


def test_a_compaction_rewrites_the_columns_in_place() -> None:
    """No column is copied: the peak is the kept mask, a block's temporaries and the
    rebuilt key filter, below the columns' own size (twice it when they were copied)."""
    multimap = MultiMap()
    n = 2_000_000
    multimap.add(np.arange(n, dtype=np.int64) // 2 * 7, np.arange(n, dtype=np.int32))
    multimap.compact(None)
    columns = sum(c.nbytes for c in (multimap._keys, multimap._offsets, multimap._values))
    with patch.object(multimap_module, "COMPACT_BLOCK", 1_000):
        tracemalloc.start()
        try:
            multimap.compact(lambda k, v: v % 3 != 0)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < columns, (peak, columns)
    multimap.check()
    owner, values = multimap.lookup(np.array([0, 7, 21], dtype=np.int64))
    assert owner.tolist() == [0, 1, 2] and values.tolist() == [1, 2, 7]


def test_an_unpickled_multimap_compacts_without_touching_the_pickle() -> None:
    """A snapshot's columns live in the pickle's buffer: compaction copies them first."""
    multimap = MultiMap()
    multimap.add(np.arange(1_000, dtype=np.int64) % 100, np.arange(1_000, dtype=np.int32))
    multimap.compact(None)
    data = pickle.dumps(multimap, protocol=5)
    loaded = pickle.loads(data)
    loaded.compact(lambda k, v: v < 500)
    loaded.check()
    _, values = loaded.lookup(np.array([3], dtype=np.int64))
    assert values.tolist() == [3, 103, 203, 303, 403]
    assert pickle.loads(data).lookup(np.array([3], dtype=np.int64))[1].tolist() == [
        3, 103, 203, 303, 403, 503, 603, 703, 803, 903]
