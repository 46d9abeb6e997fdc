"""Columnar building blocks shared by the indexes: growable arrays, range expansion and
the grouping of a batch's (event, value) pairs by attribute."""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from itertools import chain, repeat

import numpy as np

from psmatch.core import _kernels
from psmatch.events import FlatEvent
from psmatch.language import KIND_OF_CLASS, Kind


def grown_capacity(needed: int, capacity: int) -> int:
    """The capacity a full array grows to: at least half as large again.

    Geometric growth keeps appends amortised O(1) (each entry is copied about twice);
    1.5 rather than 2 leaves at most a third of the memory idle, so an index's size
    follows what it holds (``tests/test_churn.py`` bounds it against a fresh build).
    """
    return max(needed, capacity + capacity // 2)


def zero_padded(column: np.ndarray, size: int) -> np.ndarray:
    """``column`` copied into a zeroed array of ``size`` entries, how growing columns
    take their new capacity (``np.resize`` would fill the tail with repeated copies).
    O(size)."""
    grown = np.zeros(size, dtype=column.dtype)
    grown[: len(column)] = column
    return grown


def insert_sorted(column: np.ndarray, at: np.ndarray, items: np.ndarray) -> np.ndarray:
    """``column`` with ``items[j]`` inserted before its entry ``at[j]`` (``at``
    non-decreasing, equal ones keep the items' order). O(len + k); unlike ``np.insert``
    no sort of ``at`` and no copy of it beside the one mask: how sorted columns (a
    tree's bounds, a multimap's main part) take new entries."""
    k = len(items)
    if k <= _SLICED_MAX:  # a single add: a few slices, one concatenate
        pieces, previous = [], 0
        for j, i in enumerate(at.tolist()):
            pieces += (column[previous:i], items[j : j + 1])
            previous = i
        pieces.append(column[previous:])
        return np.concatenate(pieces).astype(column.dtype, copy=False)
    out = np.empty(len(column) + k, dtype=column.dtype)
    slots = at + np.arange(k)
    keep = np.ones(len(out), dtype=bool)
    keep[slots] = False
    out[slots] = items
    out[keep] = column
    return out


def insert_sorted_in_place(column: np.ndarray, at: np.ndarray, items: np.ndarray
                           ) -> np.ndarray:  # fmt: skip
    """:func:`insert_sorted` without a second copy of ``column``, for columns too large to
    hold twice (a multimap's main part): the array is grown by ``ndarray.resize`` (a
    realloc, which remaps a large block instead of copying it), then its entries move
    right in one compiled pass from the last one down, so that no entry is overwritten
    before it is read (an entry only moves right), with no temporaries. No view of
    ``column`` may be alive; it is consumed: use the returned array. A column that does
    not own its data (one unpickled from a snapshot lives in the pickle's buffer) is
    copied once first, after which it owns. O(len + k).

    Compiled, because a bulk build merges a multimap's delta into main tens of times:
    numpy's block-wise scatter took 12.0 of a 1M BE-Gen PSTHash build's 38.0 s of CPU.
    """
    n, k = len(column), len(items)
    if not k:
        return column
    if not column.flags.owndata:
        column = column.copy()
    column.resize(n + k, refcheck=False)
    _move_right_and_insert(column, n, at.astype(np.int64, copy=False),
                           items.astype(column.dtype, copy=False))  # fmt: skip
    return column


def _move_right_and_insert(column: np.ndarray, n: int, at: np.ndarray, items: np.ndarray
                           ) -> None:  # fmt: skip
    """With entries ``0 .. n - 1`` of ``column`` valid and room for the items after
    them: put ``items[j]`` before entry ``at[j]`` (``at`` non-decreasing), moving the
    entries right from the last one down."""
    _kernels.move_right_and_insert(column, n, at, items)


def set_bits(words: np.ndarray, positions: np.ndarray) -> None:
    """Set bit ``p % 64`` of word ``p // 64`` of the uint64 ``words`` for every ``p`` of
    the uint64 ``positions``. O(k), compiled: numpy has no scatter-OR but
    ``np.bitwise_or.at``, a bit at a time, or a sort of the positions to OR each word's
    bits with ``reduceat`` (which took 4.2 of a 1M BE-Gen PSTHash build's 29.7 s of CPU
    for its key filters)."""
    _kernels.set_bits(words, positions)


def find_sorted(sorted_keys: np.ndarray, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each query is in the sorted column ``sorted_keys`` and whether it is there:
    ``(at, found)``, ``at`` valid only where ``found``. O(q log n), vectorised."""
    if not len(sorted_keys):
        return np.zeros(len(queries), dtype=np.int64), np.zeros(len(queries), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_keys, queries), len(sorted_keys) - 1)
    return at, sorted_keys[at] == queries


def distinct_sorted(keys: np.ndarray) -> np.ndarray:
    """The distinct values of an integer column, sorted: one sort and a mask,
    O(n log n).

    What ``np.unique`` returns, without its hash table: numpy 2.4's ``np.unique`` hashes
    integer columns first, which on distinct-heavy int64 keys costs many times one sort;
    a matched batch's (event, subscription) pairs are such keys."""
    ordered = np.sort(keys)
    if len(ordered) < 2:
        return ordered
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


_SLICED_MAX = 8
"""Up to this many items, :func:`insert_sorted` concatenates slices (numpy's fixed
costs per call dominate a single add)."""
SPARE_SHARE = 8
"""A compacted array keeps 1/SPARE_SHARE of its length spare (the registry purges after
removals of an eighth of the live conjuncts, whose replacements then fit)."""


MAPPED_BYTES = 1 << 20
"""A :class:`GrowableArray` whose capacity reaches this many bytes lives in a memory
map of its own, resized in place."""


class GrowableArray:
    """A 1-d numpy array with amortised O(1) append, like a typed Python list.

    Scalar appends go to a Python list first (an append to a numpy array costs far more
    than one to a list) and are copied into the array in one step by the first read.
    ``view()`` returns the live prefix without copying.

    A large array (:data:`MAPPED_BYTES`) is a view of a private anonymous memory map,
    which grows and shrinks by ``mremap``: the kernel moves the pages, so the old values
    and their copy are never held at once (``ndarray.resize`` copies when it grows, and
    a copy into a new array is the same). A 1M BE-Gen worker's store grows its 80 MB of
    predicate rows by half at a time while it catches up; each growth held both. The
    new tail reads as zeros and costs no memory until written. While a view of the
    array is alive elsewhere the map cannot move, and the array is copied as before.
    """

    __slots__ = ("_data", "_map", "_pending", "_size")

    def __init__(self, dtype: np.dtype | type, capacity: int = 64) -> None:
        self._map: mmap.mmap | None = None
        self._data = self._allocated(np.dtype(dtype), max(capacity, 1))
        self._pending: list = []
        self._size = 0

    def _allocated(self, dtype: np.dtype, capacity: int) -> np.ndarray:
        """A zeroed array of ``capacity`` entries: a view of a new memory map (kept in
        ``_map``) if it is large, else a numpy array (and ``_map`` is None)."""
        if capacity * dtype.itemsize < MAPPED_BYTES:
            self._map = None
            return np.zeros(capacity, dtype=dtype)
        self._map = mmap.mmap(-1, capacity * dtype.itemsize, flags=mmap.MAP_PRIVATE)
        return np.frombuffer(self._map, dtype=dtype)

    def _remapped(self, capacity: int) -> bool:
        """Resize the memory map in place to ``capacity`` entries; False (nothing
        changed) if the array is not mapped, a view of it is alive, or the system
        cannot resize a map (``mremap`` is Linux's)."""
        if self._map is None:
            return False
        dtype = self._data.dtype
        self._data = None  # type: ignore[assignment]  # its export would pin the map
        try:
            self._map.resize(capacity * dtype.itemsize)
        except (BufferError, OSError, SystemError):
            return False
        finally:
            self._data = np.frombuffer(self._map, dtype=dtype)
        return True

    def __len__(self) -> int:
        return self._size + len(self._pending)

    @property
    def size(self) -> int:
        return len(self)

    def _flush(self) -> None:
        pending = self._pending
        self._pending = []
        self._reserve(self._size + len(pending))
        self._data[self._size : self._size + len(pending)] = pending
        self._size += len(pending)

    def _reserve(self, needed: int) -> None:
        if needed > len(self._data):
            capacity = grown_capacity(needed, len(self._data))
            if not self._remapped(capacity):
                self._resized_copy(capacity)

    def _resized_copy(self, capacity: int) -> None:
        """The live values copied into a new zeroed array of ``capacity`` entries."""
        live = self._data[: self._size]
        self._data = self._allocated(live.dtype, capacity)
        self._data[: self._size] = live

    def append(self, value: object) -> int:
        """Append one value; returns its index. Amortised O(1)."""
        self._pending.append(value)
        return len(self) - 1

    def extend(self, values: np.ndarray | list) -> int:
        """Append many values; returns the index of the first."""
        if self._pending:
            self._flush()
        n = len(values)
        self._reserve(self._size + n)
        self._data[self._size : self._size + n] = values
        self._size += n
        return self._size - n

    def grow_to(self, size: int, fill: object = 0) -> None:
        """Append ``fill`` until the array holds ``size`` values (none if it does).
        Amortised O(size - len), filled in place (no temporary array)."""
        if size > len(self):
            if self._pending:
                self._flush()
            self._reserve(size)
            self._data[self._size : size] = fill
            self._size = size

    def put(self, indices: np.ndarray, values: np.ndarray | object) -> None:
        """``array[indices] = values``, growing the array (with zeros) to reach the
        largest index first: how per-id columns take new and reused ids alike.
        Cost O(len(indices)); a single add's few indices skip numpy's reduction."""
        if len(indices):
            top = max(indices.tolist()) if len(indices) <= 8 else int(indices.max())
            self.grow_to(top + 1)
            self.data[indices] = values

    def view(self) -> np.ndarray:
        if self._pending:
            self._flush()
        return self._data[: self._size]

    @property
    def data(self) -> np.ndarray:
        """The whole backing array (valid below ``size``); index it with known indices."""
        if self._pending:
            self._flush()
        return self._data

    def replace(self, values: np.ndarray) -> None:
        """Replace the contents with ``values`` (used by compaction), with an eighth
        spare: the adds that follow a purge fill it instead of growing the array by
        half at once, so under churn the capacity follows the live entries."""
        self._pending = []
        self._data = self._allocated(self._data.dtype,
                                     len(values) + len(values) // SPARE_SHARE + 1)
        self._data[: len(values)] = values
        self._size = len(values)

    def truncate(self, size: int) -> None:
        """Keep the first ``size`` values (a compaction rewrote them in place), with the
        spare :meth:`replace` leaves, without a second copy: a mapped array's map is
        shrunk in place, another array by ``ndarray.resize`` (a realloc), which needs
        no view of it alive. One that is neither (unpickled from a snapshot, or mapped
        with a view alive) is copied."""
        self.view()
        capacity = size + size // SPARE_SHARE + 1
        self._size = min(self._size, size)
        if self._map is None and self._data.flags.owndata:
            self._data.resize(capacity, refcheck=False)
        elif not self._remapped(capacity):
            self._resized_copy(capacity)
        self._size = size

    @property
    def nbytes(self) -> int:
        return int(self._data.nbytes) + 8 * len(self._pending)

    def __getstate__(self) -> np.ndarray:
        """The live values only: a snapshot holds no spare capacity."""
        return self.view()

    def __setstate__(self, values: np.ndarray) -> None:
        self._data, self._map, self._pending, self._size = values, None, [], len(values)


def expand_ranges(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Expand ranges ``[starts[i], starts[i] + counts[i])`` into flat indices.

    Returns ``(owner, index)``: for each produced index, the range it came from (int64).
    Cost O(len(starts) + counts.sum()), one compiled pass with no temporaries: the numpy
    version (a repeat, a cumulative sum and three gathers) took 7 % of PSTBloom's matching
    at 1M BE-Gen subscriptions, in its subscription lists' lookups."""
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    total = int(counts.sum())
    owner, index = np.empty(total, dtype=np.int64), np.empty(total, dtype=np.int64)
    _kernels.expand_ranges(np.ascontiguousarray(starts, dtype=np.int64), counts, owner, index)
    return owner, index


def group_pairs(events: Sequence[FlatEvent], index_of: dict[tuple[str, Kind], int]
                ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """The (event, value) pairs of a batch grouped by the index of their (attribute,
    kind), as (event rows, object column of values) in event order; pairs with no index
    are dropped. Cost O(pairs): the pairs are looked up by ``map`` over chained
    iterators (C loops, no Python frame per pair), then grouped by one stable sort."""
    attributes = chain.from_iterable(events)
    values = list(chain.from_iterable(map(dict.values, events)))
    kinds = map(KIND_OF_CLASS.__getitem__, map(type, values))
    index = np.fromiter(map(index_of.get, zip(attributes, kinds, strict=True), repeat(-1)),
                        dtype=np.int64, count=len(values))
    rows = np.repeat(np.arange(len(events), dtype=np.int64), list(map(len, events)))
    kept = np.flatnonzero(index >= 0)
    if not len(kept):
        return {}
    order = kept[np.argsort(index[kept], kind="stable")]
    column = np.empty(len(values), dtype=object)
    column[:] = values
    sorted_index = index[order]
    starts = np.flatnonzero(np.diff(sorted_index, prepend=-1))
    ends = np.append(starts[1:], len(order))
    return {int(sorted_index[a]): (rows[order[a:b]], column[order[a:b]])
            for a, b in zip(starts.tolist(), ends.tolist(), strict=True)}
