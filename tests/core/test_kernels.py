"""The compiled loops' module, ``psmatch.core._kernels``, refuses what its loops cannot read:
a column of another element type, size or shape, a strided view, a read-only column it
would write, a wrong number of arguments, lengths that disagree, or an index, offset or
count outside the column it leads to, each with a ``TypeError`` or ``ValueError`` naming
the loop and the argument, and never a crash. The values are the regressions of the
reads and writes outside their columns once found: each loop gets a slice of a larger
array, so that a write past the slice would show in the rest. What the loops compute is
tested through their callers (``tests/core``, ``tests/pstree/test_kernels.py`` and the
matchers' differential tests) and against references (``test_kernel_properties.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from psmatch import make_matcher
from psmatch.core import _kernels
from psmatch.core.columns import expand_ranges
from psmatch.core.multimap import KeyDirectory


def words(n: int = 4) -> np.ndarray:
    return np.zeros(n, dtype=np.uint64)


def test_a_column_of_another_type_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match=r"set_bits\(\): argument 'positions' must be a "
                                        r"1-dimensional array of 8-byte unsigned integer"):
        _kernels.set_bits(words(), np.array([1, 2], dtype=np.int64))
    with pytest.raises(TypeError, match="argument 'words'"):
        _kernels.set_bits(np.zeros(4, dtype=np.float64), np.array([1], dtype=np.uint64))
    with pytest.raises(TypeError, match="argument 'positions'"):
        _kernels.set_bits(words(), np.array([1, 2], dtype=np.uint32))


def test_a_strided_view_or_a_non_array_is_refused() -> None:
    positions = np.arange(8, dtype=np.uint64)
    with pytest.raises(TypeError, match="argument 'positions' must be a C-contiguous array"):
        _kernels.set_bits(words(), positions[::2])
    with pytest.raises(TypeError, match="argument 'positions'"):
        _kernels.set_bits(words(), [1, 2])


def test_a_read_only_column_is_not_written() -> None:
    frozen = words()
    frozen.flags.writeable = False
    with pytest.raises(TypeError, match="argument 'words' must be a writable C-contiguous"):
        _kernels.set_bits(frozen, np.array([1], dtype=np.uint64))
    assert not frozen.any()


def test_a_two_dimensional_column_is_checked_for_its_shape() -> None:
    """``verify_candidates`` reads ``positions`` as ``[events, trees]`` and ``rows`` as
    ``[rows, 3]``: a flat ``positions`` or a row table of another width is refused."""
    i64, i32, flag = (np.zeros(1, dtype=t) for t in (np.int64, np.int32, bool))
    columns = [i64, i64, i32, np.zeros((1, 1), np.int32), flag, np.zeros(1, np.uint64), i32,
               i32, np.zeros((1, 3), np.int32), i32, i32, i64.copy()]
    assert _kernels.verify_candidates(*columns, 2**30) == 0  # conjunct 0 is dead
    live = columns.copy()
    live[4], live[7] = np.ones(1, bool), np.ones(1, np.int32)  # one row, both ends unbounded
    live[8] = np.array([[0, -1, -1]], np.int32)
    assert _kernels.verify_candidates(*live, 2**30) == 1
    flat = columns.copy()
    flat[3] = np.zeros(1, np.int32)
    with pytest.raises(TypeError, match="argument 'positions' must be a 2-dimensional"):
        _kernels.verify_candidates(*flat, 2**30)
    wide = columns.copy()
    wide[8] = np.zeros((1, 4), np.int32)
    with pytest.raises(ValueError, match=r"rows is not \[rows, 3\]"):
        _kernels.verify_candidates(*wide, 2**30)


@pytest.mark.parametrize("name", sorted(n for n in dir(_kernels) if not n.startswith("_")))
def test_every_loop_refuses_too_few_arguments(name: str) -> None:
    """Each loop counts its arguments before it reads one: no call reads past them."""
    with pytest.raises(TypeError, match=rf"{name}\(\) takes \d+ arguments \(1 given\)"):
        getattr(_kernels, name)(np.zeros(1, np.int64))


def test_wrong_counts_and_lengths_are_errors() -> None:
    with pytest.raises(TypeError, match=r"set_bits\(\) takes 2 arguments \(1 given\)"):
        _kernels.set_bits(words())
    with pytest.raises(TypeError):
        _kernels.insert_slots(np.zeros(4, np.int32), words(), np.zeros(1, np.int64), "-1")
    column = np.zeros(3, dtype=np.int64)
    with pytest.raises(ValueError, match="no room"):
        _kernels.move_right_and_insert(column, 3, np.array([0], np.int64),
                                       np.array([7], np.int64))  # fmt: skip
    with pytest.raises(ValueError, match="differ in type"):
        _kernels.move_right_and_insert(column, 2, np.array([0], np.int64),
                                       np.array([7], np.int32))  # fmt: skip
    assert column.tolist() == [0, 0, 0]


def test_outputs_the_loop_sizes_itself_are_bytearrays_of_its_results() -> None:
    """``hashed_pair_entries`` and ``fallback_candidates`` know their outputs' lengths
    only once they have run: they return byte arrays, read as columns with
    ``np.frombuffer``. Entries 0 and 1 (trees 1 and 2 of event 0) are the pair (1, 2)."""
    tree = np.array([1, 2], np.int64)
    owner, keys = _kernels.hashed_pair_entries(
        np.zeros(2, np.int64), tree, np.array([5, 3], np.int64),
        np.array([1 << 32 | 2], np.int64), 16)
    assert isinstance(owner, bytearray)
    assert np.frombuffer(owner, np.int64).tolist() == [0]
    assert np.frombuffer(keys, np.int64).tolist() == [(5 + 1) << 32 | 3]


def guarded(values: list[int], dtype: type, spare: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """``values`` as a slice of a larger array whose tail holds a sentinel (7)."""
    whole = np.full(len(values) + spare, 7, dtype=dtype)
    whole[: len(values)] = values
    return whole[: len(values)], whole


def untouched(whole: np.ndarray, n: int) -> bool:
    return bool((whole[n:] == 7).all())


def test_expand_ranges_refuses_any_negative_count() -> None:
    """Counts ``[2, -3, 3]`` sum to 2: the check of a negative sum alone let the loop
    write five entries into two."""
    with pytest.raises(ValueError, match="argument 'counts' holds a negative count"):
        expand_ranges(np.zeros(3, np.int64), np.array([2, -3, 3]))
    owner, whole = guarded([0, 0], np.int64)
    with pytest.raises(ValueError, match="counts"):
        _kernels.expand_ranges(np.zeros(3, np.int64), np.array([2, -3, 3]), owner, owner.copy())
    assert untouched(whole, 2)
    with pytest.raises(ValueError, match="overflows"):
        _kernels.expand_ranges(np.array([2**63 - 2], np.int64), np.array([2], np.int64),
                               np.zeros(2, np.int64), np.zeros(2, np.int64))  # fmt: skip


def test_a_key_directory_of_unsorted_keys_is_refused() -> None:
    with pytest.raises(ValueError, match="argument 'keys' is not non-decreasing"):
        KeyDirectory(np.array([0, 100, 1], np.int64))
    starts, whole = guarded([0, 0, 0], np.int32)
    with pytest.raises(ValueError, match="keys"):
        _kernels.bucket_starts(np.array([0, 100, 1], np.int64), starts, 0)
    assert untouched(whole, 3)


def test_lower_bounds_refuses_starts_outside_the_keys() -> None:
    keys = np.array([1, 2, 3], np.int64)
    with pytest.raises(ValueError, match="argument 'starts' holds a bucket"):
        _kernels.lower_bounds(keys, np.array([0, 9, 9, 3], np.int32), 0, np.array([1]),
                              np.zeros(1, np.int64))  # fmt: skip
    with pytest.raises(ValueError, match="argument 'starts' is not one longer"):
        _kernels.lower_bounds(keys, np.array([0], np.int32), 0, np.array([1]),
                              np.zeros(1, np.int64))  # fmt: skip


def test_set_bits_refuses_a_bit_past_the_words() -> None:
    words, whole = guarded([0, 0], np.uint64)
    with pytest.raises(ValueError, match="argument 'positions' holds a bit past the words"):
        _kernels.set_bits(words, np.array([3, 128], np.uint64))
    assert untouched(whole, 2) and not words.any()


def test_copy_ranges_refuses_ranges_outside_their_columns() -> None:
    out, whole = guarded([0, 0, 0], np.uint8)
    data = np.arange(6, dtype=np.uint8)
    cases = {"out_starts": ([0], [3], [1]), "starts": ([5], [2], [0]),
             "lengths": ([0], [-1], [0])}
    for name, (starts, lengths, out_starts) in cases.items():
        with pytest.raises(ValueError, match=f"argument '{name}'"):
            _kernels.copy_ranges(data, np.array(starts), np.array(lengths), out,
                                 np.array(out_starts))  # fmt: skip
    with pytest.raises(ValueError, match="differ in length"):
        _kernels.copy_ranges(data, np.array([0]), np.array([1, 1]), out, np.array([0]))
    assert untouched(whole, 3) and not out.any()


def test_move_right_and_insert_refuses_places_outside_the_entries() -> None:
    column, whole = guarded([1, 2, 0], np.int64)
    for at in ([-1], [3], [1, 0]):
        with pytest.raises(ValueError, match="argument 'at' is not non-decreasing"):
            _kernels.move_right_and_insert(column[: 2 + len(at)] if len(at) == 1 else column,
                                           2 if len(at) == 1 else 1, np.array(at, np.int64),
                                           np.full(len(at), 9, np.int64))  # fmt: skip
    assert column.tolist() == [1, 2, 0] and untouched(whole, 3)


def test_compact_in_place_refuses_short_or_unordered_offsets() -> None:
    keys, values, kept = np.array([5, 6], np.int64), np.arange(4, dtype=np.int32), np.ones(4, bool)
    for offsets in ([0, 2], [0, 3, 2], [0, 2, 5], [-1, 2, 4]):
        with pytest.raises(ValueError, match="argument 'offsets'"):
            _kernels.compact_in_place(keys, np.array(offsets, np.int32), values, kept)
    assert _kernels.compact_in_place(keys, np.array([0, 2, 4], np.int32), values, kept) == (2, 4)


def test_shift_offsets_refuses_an_offset_out_of_int32() -> None:
    offsets = np.array([0, 2**31 - 1], np.int32)
    with pytest.raises(ValueError, match="argument 'step' shifts an offset"):
        _kernels.shift_offsets(offsets, np.array([0], np.int64), np.array([0, 1], np.int64))
    assert offsets.tolist() == [0, 2**31 - 1]  # a refused call writes nothing


def test_bloom_add_refuses_a_filter_outside_the_pool() -> None:
    """``bits == 0`` (a dead space's, in PSTBloom's columns) made the mask all ones."""
    pool, whole = guarded([0, 0], np.uint64)
    for offsets, bits in (([0], [0]), ([0], [96]), ([1], [128]), ([-1], [64])):
        with pytest.raises(ValueError, match="argument 'bits'"):
            _kernels.bloom_add(pool, np.array(offsets), np.array(bits), np.array([3]), 2**63 + 1)
    assert untouched(whole, 2) and not pool.any()


def test_fallback_candidates_refuses_offsets_that_descend() -> None:
    positions = np.zeros((1, 2), np.int32)
    keys = np.array([0, 1], np.int64)
    first, end, events = np.array([0]), np.array([2]), np.array([0])
    tree_mask = np.zeros(3, np.uint64)
    for offsets, name in (([0, 3, 1], "offsets"), ([0, 1, 9], "offsets"), ([0, 1], "first")):
        with pytest.raises(ValueError, match=f"argument '{name}'"):
            _kernels.fallback_candidates(first, end, keys, np.array(offsets, np.int64),
                                         np.arange(3, dtype=np.int32), events, positions,
                                         tree_mask, 9)  # fmt: skip
    with pytest.raises(ValueError, match="argument 'keys'"):  # tree 5 of 2
        _kernels.fallback_candidates(first, end, np.array([0, 5]), np.array([0, 1, 2]),
                                     np.arange(3, dtype=np.int32), events, positions,
                                     tree_mask, 9)  # fmt: skip
    with pytest.raises(ValueError, match="argument 'events'"):
        _kernels.fallback_candidates(first, end, keys, np.array([0, 1, 2]),
                                     np.arange(3, dtype=np.int32), np.array([1]), positions,
                                     tree_mask, 9)  # fmt: skip


def test_fallback_candidates_reads_a_tree_mask_only_of_a_conjunct_within_it() -> None:
    """Conjunct 2 is past a tree mask of two: refused, not read; within it, a conjunct
    needing tree 1, which the event lacks, is dropped and one needing tree 0 kept."""
    positions = np.array([[4, -1]], np.int32)
    first, end, events = np.array([0]), np.array([1]), np.array([0])
    keys, offsets = np.array([0], np.int64), np.array([0, 2], np.int64)
    with pytest.raises(ValueError, match="argument 'values' holds a conjunct outside"):
        _kernels.fallback_candidates(first, end, keys, offsets, np.array([0, 2], np.int32),
                                     events, positions, np.ones(2, np.uint64), 9)  # fmt: skip
    owner, found = _kernels.fallback_candidates(
        first, end, keys, offsets, np.array([0, 1], np.int32), events, positions,
        np.array([0b10, 0b01], np.uint64), 9)
    assert np.frombuffer(owner, np.int64).tolist() == [0]
    assert np.frombuffer(found, np.int32).tolist() == [1]


def verify_columns() -> list[np.ndarray]:
    """One event of one tree (position 0), one live conjunct of one unbounded row."""
    return [np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int32),
            np.zeros((1, 1), np.int32), np.ones(1, bool), np.zeros(1, np.uint64),
            np.zeros(1, np.int32), np.ones(1, np.int32), np.array([[0, -1, -1]], np.int32),
            np.zeros(0, np.int32), np.zeros(1, np.int32), np.zeros(1, np.int64)]


@pytest.mark.parametrize(("place", "value", "name"), [
    (0, [1], "events"), (1, [-1], "cids"), (1, [1], "cids"), (6, [1], "pred_start"),
    (7, [2], "pred_start"), (2, [-1], "pred_start"), (8, [[1, -1, -1]], "rows"),
    (8, [[0, 2, -1]], "rows"), (8, [[0, -3, -1]], "runs"),
])  # fmt: skip
def test_verify_candidates_refuses_ids_and_rows_outside_their_columns(
        place: int, value: list, name: str) -> None:
    columns = verify_columns()
    assert _kernels.verify_candidates(*columns, 2**30) == 1
    columns[place] = np.array(value, dtype=columns[place].dtype)
    with pytest.raises(ValueError, match=f"argument '{name}'"):
        _kernels.verify_candidates(*columns, 2**30)


def signature_columns() -> list[np.ndarray]:
    """One event whose tree 0 is in space 0 (a 64-bit filter, all ones), one live
    conjunct signed in its second predicate (row 1, tree 0)."""
    return [np.zeros(1, np.int64), np.zeros(1, np.int64), np.ones(1, bool),
            np.array([2], np.uint64), np.zeros(1, np.int32), np.zeros((2, 3), np.int32),
            np.zeros((1, 1), np.int64), np.array([64], np.int64), np.zeros(1, np.int64),
            np.full(1, 2**64 - 1, np.uint64), np.zeros(1, np.int64)]


@pytest.mark.parametrize(("place", "value", "name"), [
    (0, [1], "events"), (1, [1], "cids"), (4, [1], "pred_start"),
    (5, [[0, 0, 0], [4, 0, 0]], "rows"), (7, [-64], "sig_bits"), (7, [128], "sig_bits"),
    (8, [1], "sig_bits"),
])  # fmt: skip
def test_signature_filter_refuses_ids_and_filters_outside_their_columns(
        place: int, value: list, name: str) -> None:
    columns = signature_columns()
    assert _kernels.signature_filter(*columns, 2**63 + 1) == 1
    columns[place] = np.array(value, dtype=columns[place].dtype)
    with pytest.raises(ValueError, match=f"argument '{name}'"):
        _kernels.signature_filter(*columns, 2**63 + 1)


def test_pair_keys_refuse_trees_and_spaces_whose_shift_overflows() -> None:
    zeros, pairs = np.zeros(2, np.int64), np.array([1 << 32 | 2], np.int64)
    for tree, sid, name in (([1, 2**31], [0, 1], "tree"), ([1, 2], [-1, 3], "sid"),
                            ([2, 1], [0, 1], "event")):
        with pytest.raises(ValueError, match=f"argument '{name}'"):
            _kernels.hashed_pair_entries(zeros, np.array(tree), np.array(sid), pairs, 16)
    with pytest.raises(ValueError, match="argument 'sid_b' holds a space outside"):
        _kernels.space_pair_keys(np.zeros(1, np.int64), np.array([2**31 - 1]),
                                 np.zeros(1, np.int64))  # fmt: skip


def test_psthash_keeps_its_tree_pairs_sorted_and_unique() -> None:
    """The order ``hashed_pair_entries`` relies on and does not check (a pass over the
    tree pairs would cost more than the call): ``PSTHashMatcher._add_tree_pairs`` keeps it."""
    matcher = make_matcher("psthash")
    for round_ in range(3):
        matcher.add_many((f"{round_}.{i}", f"x{(i * 7 + round_) % 13} = 1 and "
                          f"x{(i * 5 + 3 * round_) % 11 + 13} = 1") for i in range(60))
        pairs = matcher._tree_pairs
        assert len(pairs) and (np.diff(pairs) > 0).all()


def test_hash_ranges_refuses_offsets_outside_the_data() -> None:
    out, whole = guarded([0], np.uint32)
    for offsets in ([0, 9], [-1, 2], [2, 1]):
        with pytest.raises(ValueError, match="argument 'offsets' does not ascend within data"):
            _kernels.hash_ranges(np.zeros(4, np.uint8), np.array(offsets), out)
    assert untouched(whole, 1)


@pytest.mark.timeout(60)
def test_probes_of_the_id_table_end() -> None:
    """A full table (no empty entry) and a slot absent from the table ended no probe
    (with the GIL released): each probe now goes once round the table at most."""
    full, slot_hash = np.array([0, 1, 2], np.int32), np.array([0, 2**31, 2**32 - 1], np.uint32)
    with pytest.raises(ValueError, match="argument 'table' has no free entry"):
        _kernels.insert_slots(full, slot_hash, np.array([1]), -1)
    with pytest.raises(ValueError, match="argument 'slots' holds a slot absent"):
        _kernels.remove_slots(np.array([-1, -1, -1], np.int32), slot_hash, np.array([1]), -2)
    with pytest.raises(ValueError, match="argument 'slots' holds a slot outside"):
        _kernels.insert_slots(np.full(3, -1, np.int32), slot_hash, np.array([3]), -1)
    out = np.zeros(1, np.int64)
    _kernels.find_slots(np.full(3, -2, np.int32), slot_hash, np.zeros(0, np.uint8),
                        np.zeros(3, np.int64), np.zeros(3, np.int32), np.zeros(0, np.uint8),
                        np.zeros(2, np.int64), np.zeros(1, np.uint32), out, -1)  # fmt: skip
    assert out.tolist() == [-1]  # every entry deleted: not found, after one round
    with pytest.raises(ValueError, match="argument 'table' leads to a slot"):
        _kernels.find_slots(np.array([5], np.int32), slot_hash, np.zeros(0, np.uint8),
                            np.zeros(3, np.int64), np.zeros(3, np.int32),
                            np.zeros(0, np.uint8), np.zeros(2, np.int64),
                            np.zeros(1, np.uint32), out, -1)  # fmt: skip
