"""Columnar building blocks: insert_sorted and insert_sorted_in_place against numpy's
insert, set_bits against bitwise_or.at, expand_ranges against a loop over the ranges,
GrowableArray against a list, and its growth in place."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psmatch.core.columns import (
    GrowableArray,
    expand_ranges,
    insert_sorted,
    insert_sorted_in_place,
    set_bits,
)


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


@given(st.lists(st.integers(-50, 50), max_size=40), st.data(),
       st.sampled_from([np.int32, np.int64]))
@settings(max_examples=300, deadline=None)
def test_insert_sorted_in_place_equals_numpy_insert(column, data, dtype) -> None:
    """Items before, between and after the entries, several at one place (they keep their
    order), into the column dtypes the multimaps use."""
    n_items = data.draw(st.integers(0, 30))
    at = np.sort(np.array(data.draw(st.lists(st.integers(0, len(column)),
                                             min_size=n_items, max_size=n_items)),
                          dtype=np.int64))
    items = np.arange(100, 100 + n_items, dtype=np.int64)
    expected = np.insert(np.array(column, dtype=dtype), at, items).tolist()
    got = insert_sorted_in_place(np.array(column, dtype=dtype), at, items)
    assert got.dtype == dtype and got.tolist() == expected


def test_insert_sorted_in_place_takes_a_column_that_lives_in_another_buffer() -> None:
    """An array unpickled from a snapshot (protocol 5) is a view of the pickle's buffer
    and cannot be resized in place: it is copied once, then grown."""
    borrowed = np.frombuffer(bytearray(np.arange(6, dtype=np.int64).tobytes()), np.int64)
    assert not borrowed.flags.owndata
    got = insert_sorted_in_place(borrowed, np.array([0, 6]), np.array([-1, 9]))
    assert got.tolist() == [-1, 0, 1, 2, 3, 4, 5, 9]
    assert got.flags.owndata


def test_set_bits_equals_bitwise_or_at() -> None:
    positions = np.random.default_rng(5).integers(0, 64 * 300, 5_000).astype(np.uint64)
    expected = np.zeros(300, dtype=np.uint64)
    np.bitwise_or.at(expected, positions >> np.uint64(6),
                     np.uint64(1) << (positions & np.uint64(63)))
    got = np.zeros(300, dtype=np.uint64)
    set_bits(got, positions.copy())
    assert (got == expected).all()


@given(st.lists(st.tuples(st.integers(-2**40, 2**40), st.integers(0, 6)), max_size=30))
@settings(max_examples=300, deadline=None)
def test_expand_ranges_lists_each_ranges_indices_in_order(ranges) -> None:
    """Range i gives ``starts[i]``, ``starts[i] + 1``, ..., each owned by i; empty
    ranges give nothing. Starts and counts of other integer types are read as int64."""
    starts = np.array([s for s, _ in ranges], dtype=np.int64)
    counts = np.array([c for _, c in ranges], dtype=np.int32)
    owner, index = expand_ranges(starts, counts)
    expected = [(i, s + j) for i, (s, c) in enumerate(ranges) for j in range(c)]
    assert list(zip(owner.tolist(), index.tolist(), strict=True)) == expected
    assert owner.dtype == index.dtype == np.int64


def test_expand_ranges_refuses_a_negative_count() -> None:
    with pytest.raises(ValueError):
        expand_ranges(np.array([0, 5]), np.array([3, -1]))


def _high_water_mark_reset() -> int:
    """Reset the process's resident high-water mark (``VmHWM``) to its resident size;
    returns that size in bytes."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")
    return _status("VmRSS")


def _status(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        line = next(line for line in f if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024


@given(st.lists(st.integers(0, 300_000), min_size=1, max_size=6), st.integers(0, 2**62))
@settings(max_examples=30, deadline=None)
def test_a_growable_array_holds_what_was_appended_across_the_mapped_size(
    lengths: list[int], value: int,
) -> None:
    """Small arrays are numpy's, large ones views of a memory map (MAPPED_BYTES = 1 MiB,
    131,072 int64 here); values survive every growth, truncation and a pickle round
    trip, and a grown tail reads as zeros."""
    column, expected = GrowableArray(np.int64), []
    for n in lengths:
        column.extend(np.arange(value, value + n) % 2**62)
        expected.extend(((np.arange(value, value + n)) % 2**62).tolist())
        column.append(-1)
        expected.append(-1)
        assert column.view().tolist() == expected
        column.grow_to(len(expected) + 3)
        expected.extend([0, 0, 0])
    assert column.view().tolist() == expected
    assert (column.data[len(column) :] == 0).all()
    column.truncate(len(expected) // 2)
    assert column.view().tolist() == expected[: len(expected) // 2]
    copy = pickle.loads(pickle.dumps(column))
    copy.extend(np.full(200_000, 7))
    assert copy.view().tolist() == expected[: len(expected) // 2] + [7] * 200_000


def test_a_large_array_grows_in_place_not_by_a_copy() -> None:
    """A mapped array grows by ``mremap``: the 64 MiB of values it holds are not copied,
    so the process's resident peak rises by less than their size (a copy into a new
    array holds them twice for a moment)."""
    column = GrowableArray(np.int64)
    column.extend(np.arange(8 << 20))  # 64 MiB
    column.grow_to(len(column.data))  # full: the next value grows it
    before = _high_water_mark_reset()
    column.append(1)
    assert len(column.view()) == (8 << 20) + 1  # the growth happens here
    assert _status("VmHWM") - before < 32 << 20
    assert column.view()[-1] == 1 and column.view()[(8 << 20) - 1] == (8 << 20) - 1


def test_a_view_that_is_alive_keeps_its_values_when_the_array_grows() -> None:
    """A map cannot move while a view of it is alive: the array is then copied, and the
    view keeps reading the values it was taken on."""
    column = GrowableArray(np.int32)
    column.extend(np.arange(1 << 19))  # 2 MiB: mapped
    view = column.view()
    column.extend(np.arange(1 << 19))
    assert view.tolist() == list(range(1 << 19))
    assert column.view().tolist() == list(range(1 << 19)) * 2
    column.truncate(10)
    assert view[:10].tolist() == column.view().tolist() == list(range(10))
