"""A columnar multimap from int64 keys to int32 values: the index's posting lists.

Owns the storage behind PSTBloom's subscription lists (space id -> conjuncts) and
PSTHash's hash table (2-dim space id -> conjuncts). A sorted *main* part in CSR form
(unique keys, offsets, values) answers a whole batch of lookups with one
``searchsorted``; new entries go to an unsorted *delta* that is sorted lazily and merged
into main once it holds more than a sixteenth of main's entries (:data:`MERGE_FRACTION`).
The merge sorts only the delta and interleaves it with main's sorted columns
(O(n + d log d), main's keys never expanded per entry), so a bulk build of n entries
costs amortised O(MERGE_FRACTION + log d) per entry and its temporaries are a few words
per delta entry. Entries are never removed one by
one: the owner marks values dead and calls :meth:`compact` with a filter, which rewrites
everything in O(n).

Most lookups miss: PSTHash asks for every pair of spaces an event falls in, and about
one pair in twenty has a bucket. So a bit set of the keys' hashes (:class:`KeyFilter`,
at least 8 bits per distinct key) drops most missing queries with one multiply and one
gather each, before the sort and the binary searches that would otherwise cost
O(q log q) for all of them.
"""

from __future__ import annotations

from collections.abc import Callable

import numba
import numpy as np

from index.core.columns import (
    GrowableArray,
    expand_ranges,
    find_sorted,
    insert_sorted_in_place,
    set_bits,
)
from index.errors import PsmatchError

Filter = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""Maps (keys, values) of all entries to a boolean mask of the entries to keep."""

MERGE_MIN = 4096
"""Delta entries that always wait for a merge (beyond it, :data:`MERGE_FRACTION`)."""
MERGE_FRACTION = 16
"""The delta is merged once it holds more than main's entries over this. The delta's
sort and the merge's temporaries, a few words per delta entry, are the peak of a bulk
build: a worker's catch-up of 1M BE-Gen subscriptions into PSTHash (23.3M hash table
entries) peaked at 1,583-1,593 MiB with an eighth, 1,464-1,472 MiB with a sixteenth or
a 32nd, in the same time within this machine's noise (PSTBloom's, 1,033-1,045 MiB
either way, peaks elsewhere; docs/bench-streaming.md). Each entry then moves about this
many times in a bulk build."""
BITS_PER_KEY = 8
"""Bits of the key filter per distinct key: about 1 missing query in 8 gets through."""
_FIBONACCI = np.uint64(0x9E3779B97F4A7C15)  # 2**64 / golden ratio: spreads nearby keys
FILTER_BLOCK = 1 << 20
"""Keys a bulk :meth:`KeyFilter.add` hashes at once."""
MAX_ENTRIES = 2**31 - 1
"""Entries one multimap holds at most: its CSR offsets are int32, 4 bytes an entry less
than int64 in the hash table, whose keys are nearly all distinct."""


class KeyFilter:
    """A bit set over hashed int64 keys: no false negatives, and a share of false
    positives close to the keys over the bits. Sized when built; adds only set bits,
    so a filter that outgrew its size lets more queries through but never drops one."""

    def __init__(self, keys: np.ndarray, expected: int) -> None:
        bits = 1 << max(10, int(BITS_PER_KEY * expected - 1).bit_length())
        self.capacity = bits // BITS_PER_KEY
        """Distinct keys it holds at :data:`BITS_PER_KEY` bits each or more."""
        self._shift = np.uint64(64 - bits.bit_length() + 1)
        self.words = np.zeros(bits >> 6, dtype=np.uint64)
        self.add(keys)

    def _positions(self, keys: np.ndarray) -> np.ndarray:
        return (keys.astype(np.uint64) * _FIBONACCI) >> self._shift

    def add(self, keys: np.ndarray) -> None:
        """Set the bits of ``keys``. O(n), a block of :data:`FILTER_BLOCK` keys at a time
        (:func:`index.core.columns.set_bits`), so the temporaries are those of one
        block, not of all the keys."""
        for begin in range(0, len(keys), FILTER_BLOCK):
            set_bits(self.words, self._positions(keys[begin : begin + FILTER_BLOCK]))

    def may_hold(self, queries: np.ndarray) -> np.ndarray:
        """The mask of ``queries`` that may be keys (every key is). O(q), vectorised."""
        position = self._positions(queries)
        word = self.words[position >> np.uint64(6)]
        return ((word >> (position & np.uint64(63))) & np.uint64(1)).astype(bool)


class MultiMap:
    """int64 key -> bag of int32 values, built for batched lookups."""

    def __init__(self) -> None:
        self._keys = np.empty(0, dtype=np.int64)
        self._offsets = np.zeros(1, dtype=np.int32)
        self._values = np.empty(0, dtype=np.int32)
        self._delta_keys = GrowableArray(np.int64)
        self._delta_values = GrowableArray(np.int32)
        self._delta_sorted: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._filter = KeyFilter(self._keys, MERGE_MIN)

    def __len__(self) -> int:
        """Number of entries (key, value), live or not."""
        return len(self._values) + len(self._delta_keys)

    @property
    def nbytes(self) -> int:
        return int(
            self._keys.nbytes + self._offsets.nbytes + self._values.nbytes
            + self._delta_keys.nbytes + self._delta_values.nbytes + self._filter.words.nbytes
        )

    def add(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Add the entries ``(keys[i], values[i])``. Amortised O(log n) each."""
        if len(keys) == 0:
            return
        self._delta_keys.extend(keys)
        self._delta_values.extend(values)
        self._delta_sorted = None
        if len(self._delta_keys) > max(MERGE_MIN, len(self._values) // MERGE_FRACTION):
            self._merge_delta()
        else:
            self._filter.add(keys)

    def lookup(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All values under each query key, as ``(query_index, value)`` columns: the
        entries of main, then the delta's, each in query order.

        Cost O(q) to filter the queries, then O(p log p + p log n + r) for the p that
        pass the key filter and the r results, vectorised.
        """
        maybe = np.flatnonzero(self._filter.may_hold(queries))
        passed = queries[maybe]
        order = np.argsort(passed)  # one sort serves main and delta
        owner_main, values_main = _csr_lookup(self._keys, self._offsets, self._values,
                                              passed, order)
        if len(self._delta_keys) == 0:
            return maybe[owner_main], values_main
        owner_delta, values_delta = _csr_lookup(*self._sorted_delta(), passed, order)
        return (maybe[np.concatenate([owner_main, owner_delta])],
                np.concatenate([values_main, values_delta]))

    def lookup_ranges(self, low: np.ndarray, high: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The entries whose key is in ``[low[i], high[i])``, as ``(query_index, key,
        value)`` columns: main's, then the delta's.

        Cost O(q log n) plus the entries found, vectorised; the key filter cannot help a
        range.
        """
        owner, keys, values = zip(*(_csr_ranges(*part, low, high) for part in self.csr_parts()),
                                  strict=True)
        return np.concatenate(owner), np.concatenate(keys), np.concatenate(values)

    def csr_parts(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Main's columns ``(distinct keys, offsets, values)`` and, when the delta holds
        entries, the delta's in the same form (sorted once per change of the delta): for
        compiled scans such as :func:`index.pstree.kernels.fallback_candidates`. They are
        read-only views, to drop before the next :meth:`add`, whose merge may grow
        main's columns in place."""
        parts = [(self._keys, self._offsets, self._values)]
        if len(self._delta_keys):
            parts.append(self._sorted_delta())
        return parts

    def values_of(self, key: int) -> np.ndarray:
        """Every value under one key (live or not)."""
        return self.lookup(np.array([key], dtype=np.int64))[1]

    def compact(self, keep: Filter | None) -> None:
        """Merge the delta into main, keeping only entries ``keep`` accepts (all without
        a filter). O(n) besides the delta's sort; the key filter is rebuilt to the kept
        keys."""
        self._merge_delta()
        if keep is not None:
            kept = keep(np.repeat(self._keys, np.diff(self._offsets)), self._values)
            self._values = self._values[kept]
            counts = (np.add.reduceat(kept, self._offsets[:-1], dtype=np.int32)
                      if len(self._keys) else np.zeros(0, dtype=np.int32))
            self._keys = self._keys[counts > 0]
            self._offsets = np.concatenate([[0], np.cumsum(counts[counts > 0])]
                                           ).astype(np.int32)
        self._filter = KeyFilter(self._keys, len(self._keys) + MERGE_MIN)

    def entries(self) -> tuple[np.ndarray, np.ndarray]:
        """All (key, value) entries, main then delta; for checks and rebuilds."""
        main_keys = np.repeat(self._keys, np.diff(self._offsets))
        return (np.concatenate([main_keys, self._delta_keys.view()]),
                np.concatenate([self._values, self._delta_values.view()]))

    def _sorted_delta(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The delta as CSR (distinct keys, offsets, values in insertion order per key);
        sorted once per change of the delta, O(d log d)."""
        if self._delta_sorted is None:
            keys = self._delta_keys.view()
            delta_order = np.argsort(keys, kind="stable")
            unique, offsets = _runs(keys[delta_order])
            self._delta_sorted = (unique, offsets, self._delta_values.view()[delta_order])
        return self._delta_sorted

    def _merge_delta(self) -> None:
        """Interleave the sorted delta into main: each delta entry goes after main's
        entries of keys up to its own, so a key's values stay in insertion order.

        O(n + d log d). Main's columns grow in place
        (:func:`index.core.columns.insert_sorted_in_place`), so the temporaries are the
        delta's and a block's, not a copy of main (main's columns are never handed out,
        so no view of them is alive); the key filter is rebuilt only when main's keys
        outgrow it."""
        if not len(self._delta_keys):
            return
        keys, offsets, values = self._sorted_delta()
        if len(self._values) + len(values) > MAX_ENTRIES:
            raise PsmatchError(f"a posting multimap would hold over {MAX_ENTRIES:,} entries, "
                               "the most its 32-bit offsets can name: split the "
                               "subscriptions over several matchers")
        counts = np.diff(offsets).astype(np.int32)
        at = np.searchsorted(self._keys, keys)  # main's keys below each delta key
        present = np.zeros(len(keys), dtype=bool)
        inside = np.flatnonzero(at < len(self._keys))
        present[inside] = self._keys[at[inside]] == keys[inside]
        self._values = insert_sorted_in_place(
            self._values, np.repeat(self._offsets[at + present], counts), values)
        # A new key starts where main's entries below it end; then every key moves right
        # by the delta entries of the keys below it: step[i] once i delta keys are below.
        new = ~present
        merged_at = at + np.cumsum(new) - new  # each delta key's index among main's + new
        self._offsets = insert_sorted_in_place(self._offsets, at[new], self._offsets[at[new]])
        _shift_offsets(self._offsets, merged_at, np.concatenate([[0], np.cumsum(counts)]))
        self._keys = insert_sorted_in_place(self._keys, at[new], keys[new])
        self._delta_keys = GrowableArray(np.int64)
        self._delta_values = GrowableArray(np.int32)
        self._delta_sorted = None
        if len(self._keys) + MERGE_MIN > self._filter.capacity:
            self._filter = KeyFilter(self._keys, len(self._keys) + MERGE_MIN)
        else:
            self._filter.add(keys)

    def check(self) -> None:
        """Assert that main is sorted CSR and that the key filter passes every key."""
        assert (np.diff(self._keys) > 0).all(), "main keys not sorted and distinct"
        assert self._offsets[0] == 0 and self._offsets[-1] == len(self._values)
        assert (np.diff(self._offsets) > 0).all(), "an empty run in main"
        assert self._values.dtype == self._offsets.dtype == np.int32
        keys, _ = self.entries()
        assert self._filter.may_hold(keys).all(), "the key filter drops a key"


@numba.njit(cache=True, nogil=True)
def _shift_offsets(offsets: np.ndarray, merged_at: np.ndarray, step: np.ndarray) -> None:
    """Add ``step[i]`` to offset ``j``, where ``i`` is how many of the sorted
    ``merged_at`` are below ``j``: one compiled pass, O(len(offsets) + len(merged_at))."""
    below = 0
    for j in range(len(offsets)):
        while below < len(merged_at) and merged_at[below] < j:
            below += 1
        offsets[j] += step[below]


def _runs(sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys of a sorted column and the CSR offsets of their runs (one
    pass; ``np.unique`` would sort the sorted column again)."""
    starts = np.flatnonzero(np.diff(sorted_keys, prepend=sorted_keys[:1] - 1))
    return sorted_keys[starts], np.append(starts, len(sorted_keys)).astype(np.int64)


def _csr_lookup(keys: np.ndarray, offsets: np.ndarray, values: np.ndarray,
                queries: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(query_index, value)`` of every entry under the queries (``order`` sorts them)."""
    if len(keys) == 0 or len(queries) == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32)
    # Sorted queries let searchsorted narrow each search from the previous answer,
    # which is several times faster on large tables than random-order queries.
    at = np.empty(len(queries), dtype=np.int64)
    present = np.empty(len(queries), dtype=bool)
    at[order], present[order] = find_sorted(keys, queries[order])
    found = np.flatnonzero(present)
    hit = at[found]
    starts = offsets[hit]
    counts = offsets[hit + 1] - starts
    owner, positions = expand_ranges(starts, counts)
    return found[owner], values[positions]


def _csr_ranges(keys: np.ndarray, offsets: np.ndarray, values: np.ndarray, low: np.ndarray,
                high: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(query_index, key, value)`` of the entries under the keys in each query's range."""
    order = np.argsort(low)  # sorted queries narrow each search from the previous one
    first = np.empty(len(low), dtype=np.int64)
    end = np.empty(len(low), dtype=np.int64)
    first[order] = np.searchsorted(keys, low[order])
    end[order] = np.searchsorted(keys, high[order])
    owner, at = expand_ranges(first, end - first)
    starts = offsets[at]
    entry, positions = expand_ranges(starts, offsets[at + 1] - starts)
    return owner[entry], keys[at][entry], values[positions]
