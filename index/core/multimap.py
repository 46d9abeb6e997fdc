"""A columnar multimap from int64 keys to int32 values: the index's posting lists.

Owns the storage behind PSTBloom's subscription lists (space id -> conjuncts) and
PSTHash's hash table (2-dim space id -> conjuncts). A sorted *main* part in CSR form
(unique keys, offsets, values) answers a whole batch of lookups with one
``searchsorted``; new entries go to an unsorted *delta* that is sorted lazily and merged
into main once it holds more than an eighth of the entries (amortised O(log n) per
add). Entries are never removed one by one: the owner marks values dead and calls
:meth:`compact` with a filter, which rewrites everything in O(n log n).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from index.core.columns import GrowableArray, expand_ranges

Filter = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""Maps (keys, values) of all entries to a boolean mask of the entries to keep."""


class MultiMap:
    """int64 key -> bag of int32 values, built for batched lookups."""

    def __init__(self) -> None:
        self._keys = np.empty(0, dtype=np.int64)
        self._offsets = np.zeros(1, dtype=np.int64)
        self._values = np.empty(0, dtype=np.int32)
        self._delta_keys = GrowableArray(np.int64)
        self._delta_values = GrowableArray(np.int32)
        self._delta_sorted: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        """Number of entries (key, value), live or not."""
        return len(self._values) + len(self._delta_keys)

    @property
    def nbytes(self) -> int:
        return int(
            self._keys.nbytes + self._offsets.nbytes + self._values.nbytes
            + self._delta_keys.nbytes + self._delta_values.nbytes
        )

    def add(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Add the entries ``(keys[i], values[i])``. Amortised O(log n) each."""
        if len(keys) == 0:
            return
        self._delta_keys.extend(keys)
        self._delta_values.extend(values)
        self._delta_sorted = None
        if len(self._delta_keys) > max(4096, len(self._values) // 8):
            self._merge(None)

    def lookup(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All values under each query key, as ``(query_index, value)`` columns.

        Cost O(q log n + r) for q queries and r results, vectorised.
        """
        owner_main, values_main = _csr_lookup(self._keys, self._offsets, self._values, queries)
        if len(self._delta_keys) == 0:
            return owner_main, values_main
        if self._delta_sorted is None:
            keys = self._delta_keys.view()
            order = np.argsort(keys, kind="stable")
            unique, offsets = _runs(keys[order])
            self._delta_sorted = (unique, offsets, self._delta_values.view()[order])
        owner_delta, values_delta = _csr_lookup(*self._delta_sorted, queries)
        return (np.concatenate([owner_main, owner_delta]),
                np.concatenate([values_main, values_delta]))

    def values_of(self, key: int) -> np.ndarray:
        """Every value under one key (live or not)."""
        return self.lookup(np.array([key], dtype=np.int64))[1]

    def compact(self, keep: Filter | None) -> None:
        """Merge the delta into main, keeping only entries ``keep`` accepts."""
        self._merge(keep)

    def entries(self) -> tuple[np.ndarray, np.ndarray]:
        """All (key, value) entries, main then delta; for checks and rebuilds."""
        main_keys = np.repeat(self._keys, np.diff(self._offsets))
        return (np.concatenate([main_keys, self._delta_keys.view()]),
                np.concatenate([self._values, self._delta_values.view()]))

    def _merge(self, keep: Filter | None) -> None:
        keys, values = self.entries()
        if keep is not None:
            mask = keep(keys, values)
            keys, values = keys[mask], values[mask]
        order = np.argsort(keys, kind="stable")
        keys, values = keys[order], values[order]
        self._keys, self._offsets = _runs(keys)
        self._values = values.astype(np.int32, copy=False)
        self._delta_keys = GrowableArray(np.int64)
        self._delta_values = GrowableArray(np.int32)
        self._delta_sorted = None


def _runs(sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys of a sorted column and the CSR offsets of their runs (one
    pass; ``np.unique`` would sort the sorted column again)."""
    starts = np.flatnonzero(np.diff(sorted_keys, prepend=sorted_keys[:1] - 1))
    return sorted_keys[starts], np.append(starts, len(sorted_keys)).astype(np.int64)


def _csr_lookup(keys: np.ndarray, offsets: np.ndarray, values: np.ndarray,
                queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(keys) == 0 or len(queries) == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32)
    # Sorted queries let searchsorted narrow each search from the previous answer,
    # which is several times faster on large tables than random-order queries.
    order = np.argsort(queries)
    idx = np.empty(len(queries), dtype=np.int64)
    idx[order] = np.searchsorted(keys, queries[order])
    idx_clipped = np.minimum(idx, len(keys) - 1)
    found = np.flatnonzero((idx < len(keys)) & (keys[idx_clipped] == queries))
    hit = idx_clipped[found]
    starts = offsets[hit]
    counts = offsets[hit + 1] - starts
    owner, positions = expand_ranges(starts, counts)
    return found[owner], values[positions]
