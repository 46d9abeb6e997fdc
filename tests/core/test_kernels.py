"""The compiled loops' module, ``psmatch.core._kernels``, refuses what its loops cannot read:
a column of another element type, size or shape, a strided view, a read-only column it
would write, a wrong number of arguments, or lengths that disagree, each with a
``TypeError`` or ``ValueError`` naming the loop and the argument, and never a crash.
What the loops compute is tested through their callers (``tests/core``,
``tests/pstree/test_kernels.py`` and the matchers' differential tests)."""

from __future__ import annotations

import numpy as np
import pytest

from psmatch.core import _kernels


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
    assert _kernels.verify_candidates(*columns, 2**30) in (0, 1)
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
