"""A columnar multimap from int64 keys to int32 values: the index's posting lists.

Owns the storage behind PSTBloom's subscription lists (space id -> conjuncts) and
PSTHash's hash table (2-dim space id -> conjuncts). A sorted *main* part in CSR form
(unique keys, offsets, values) answers a whole batch of lookups in one compiled pass
through its key directory (:class:`KeyDirectory`: where each bucket of about 8 keys
starts); new entries go to an unsorted *delta* that is sorted lazily and merged into
main once it holds more than a sixteenth of main's entries (:data:`MERGE_FRACTION`).
The merge sorts only the delta and interleaves it with main's sorted columns
(O(n + d log d), main's keys never expanded per entry), so a bulk build of n entries
costs amortised O(MERGE_FRACTION + log d) per entry and its temporaries are a few words
per delta entry. Entries are never removed one by
one: the owner marks values dead and calls :meth:`compact` with a filter, which rewrites
everything in O(n).

Most lookups miss: PSTHash asks for every pair of spaces an event falls in, and about
one pair in twenty has a bucket. So a bit set of the keys' hashes (:class:`KeyFilter`,
at least 8 bits per distinct key) drops most missing queries with one multiply and one
gather each, before the searches that would otherwise cost a bucket's search for all
of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from psmatch.core import _kernels
from psmatch.core.columns import (
    GrowableArray,
    expand_ranges,
    insert_sorted_in_place,
)
from psmatch.core.heap import release_free_heap
from psmatch.errors import PsmatchError

Filter = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""Maps (keys, values) of entries to a boolean mask of those to keep, entry by entry: a
compaction asks it about a block of entries at a time (:data:`COMPACT_BLOCK`)."""

MERGE_MIN = 4096
"""Delta entries that always wait for a merge (beyond it, :data:`MERGE_FRACTION`)."""
MERGE_FRACTION = 16
"""The delta is merged once it holds more than main's entries over this. The delta's
sort and the merge's temporaries, a few words per delta entry, are the peak of a bulk
build, so a sixteenth rather than an eighth lowers a large PSTHash catch-up's peak in the
same time (a 32nd gains nothing more). Each entry then moves about this many times in a
bulk build."""
COMPACT_BLOCK = 1 << 20
"""Entries a compaction's filter is asked about at once (:meth:`MultiMap.compact`)."""
BITS_PER_KEY = 8
"""Bits of the key filter per distinct key: about 1 missing query in 8 gets through."""
_FIBONACCI = 0x9E3779B97F4A7C15  # 2**64 / golden ratio: spreads nearby keys
DIRECTORY_KEYS = 8
"""Keys per bucket of a :class:`KeyDirectory`, on average: a search then reads a few
neighbouring keys (one or two cache lines) after the bucket's start, for half a byte of
directory per key."""
MAX_ENTRIES = 2**31 - 1
"""Entries one multimap holds at most: its CSR offsets are int32, 4 bytes an entry less
than int64 in the hash table, whose keys are nearly all distinct."""


class KeyFilter:
    """A bit set over hashed int64 keys: no false negatives, and a share of false
    positives close to the keys over the bits. Sized when built; adds only set bits,
    so a filter that outgrew its size lets more queries through but never drops one.

    A key's bit is the top bits of its product with :data:`_FIBONACCI` (modulo 2**64),
    computed by the compiled loops (``src/psmatch/core/_kernels.c``) in one pass over the keys,
    with no temporaries, where numpy passes (multiply, shift, gather, test) took about
    a tenth of an event's matching in PSTHash."""

    def __init__(self, keys: np.ndarray, expected: int) -> None:
        bits = 1 << max(10, int(BITS_PER_KEY * expected - 1).bit_length())
        self.capacity = bits // BITS_PER_KEY
        """Distinct keys it holds at :data:`BITS_PER_KEY` bits each or more."""
        self._shift = 64 - bits.bit_length() + 1
        self.words = np.zeros(bits >> 6, dtype=np.uint64)
        self.add(keys)

    def add(self, keys: np.ndarray) -> None:
        """Set the bits of the int64 ``keys``. O(n), compiled."""
        _kernels.filter_add(self.words, keys, _FIBONACCI, self._shift)

    def may_hold(self, queries: np.ndarray) -> np.ndarray:
        """The mask of the int64 ``queries`` that may be keys (every key is). O(q),
        compiled."""
        held = np.empty(len(queries), dtype=bool)
        _kernels.filter_may_hold(self.words, queries, _FIBONACCI, self._shift, held)
        return held


class KeyDirectory:
    """Where each bucket of key values starts in a sorted int64 column, so that a search
    reads one bucket instead of halving the whole column.

    A key's bucket is its value shifted right by :attr:`shift` bits, less the smallest
    key's; the shift is chosen so that there are about :data:`DIRECTORY_KEYS` keys per
    bucket where keys are spread evenly (space ids, pairs of them). A search is then a
    lookup of the bucket's start and a binary search of the bucket: at a million BE-Gen
    subscriptions, whose PSTHash table holds 20.5M keys, the numpy binary search of the
    whole column cost a cache miss for most of its 24 halvings, and the directory cuts
    the table's searches by about a third. Uneven keys only make some buckets longer,
    never a search wrong. The directory refers to no column: it is
    built for one and must be used with it.
    """

    __slots__ = ("shift", "starts")

    def __init__(self, keys: np.ndarray) -> None:
        """The directory of the sorted distinct ``keys``. O(n), compiled."""
        width = int(keys[-1]) - int(keys[0]) if len(keys) else 0
        self.shift = max(0, width.bit_length() - max(len(keys) // DIRECTORY_KEYS, 1).bit_length())
        self.starts = _bucket_starts(keys, self.shift)

    def lower_bounds(self, keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
        """For each query, the index of the first key not below it (``len(keys)`` if
        none): ``np.searchsorted(keys, queries)``. O(q (1 + log bucket)), compiled."""
        return _lower_bounds(keys, self.starts, self.shift, queries)


class CsrPart(NamedTuple):
    """Sorted distinct keys, the offsets of each key's values, the values, and the keys'
    directory: main, or the sorted delta, of a :class:`MultiMap`."""

    keys: np.ndarray
    offsets: np.ndarray
    values: np.ndarray
    directory: KeyDirectory


class MultiMap:
    """int64 key -> bag of int32 values, built for batched lookups."""

    def __init__(self) -> None:
        self._keys = np.empty(0, dtype=np.int64)
        self._offsets = np.zeros(1, dtype=np.int32)
        self._values = np.empty(0, dtype=np.int32)
        self._delta_keys = GrowableArray(np.int64)
        self._delta_values = GrowableArray(np.int32)
        self._delta_sorted: CsrPart | None = None
        self._main_directory: KeyDirectory | None = None
        self._filter = KeyFilter(self._keys, MERGE_MIN)

    def __len__(self) -> int:
        """Number of entries (key, value), live or not."""
        return len(self._values) + len(self._delta_keys)

    @property
    def nbytes(self) -> int:
        return int(
            self._keys.nbytes + self._offsets.nbytes + self._values.nbytes
            + self._delta_keys.nbytes + self._delta_values.nbytes + self._filter.words.nbytes
            + sum(directory.starts.nbytes for directory in self._directories())
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

        Cost O(q) to filter the queries, then O(p (1 + log bucket) + r) for the p that
        pass the key filter and the r results (:class:`KeyDirectory`), vectorised.
        """
        maybe = np.flatnonzero(self._filter.may_hold(queries))
        passed = queries[maybe]
        owner, values = zip(*(_csr_lookup(part, passed) for part in self._parts()),
                            strict=True)
        return maybe[np.concatenate(owner)], np.concatenate(values)

    def lookup_ranges(self, low: np.ndarray, high: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The entries whose key is in ``[low[i], high[i])``, as ``(query_index, key,
        value)`` columns: main's, then the delta's.

        Cost O(q (1 + log bucket)) plus the entries found, vectorised; the key filter
        cannot help a range.
        """
        owner, keys, values = zip(*(_csr_ranges(*part)
                                    for part in self.key_ranges(low, high)), strict=True)
        return np.concatenate(owner), np.concatenate(keys), np.concatenate(values)

    def key_ranges(self, low: np.ndarray, high: np.ndarray
                   ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """Per part (main, then the delta if it holds entries): ``(first, end, keys,
        offsets, values)``, where the part's distinct keys in ``[low[i], high[i])`` are
        ``keys[first[i]:end[i]]`` and a key ``keys[j]``'s values are
        ``values[offsets[j]:offsets[j + 1]]``; for compiled scans such as
        :func:`psmatch.pstree.kernels.fallback_candidates`. The columns are read-only
        views, to drop before the next :meth:`add`, whose merge may grow main's columns
        in place. Cost O(q (1 + log bucket)) per part."""
        return [(part.directory.lower_bounds(part.keys, low),
                 part.directory.lower_bounds(part.keys, high), part.keys, part.offsets,
                 part.values) for part in self._parts()]

    def values_of(self, key: int) -> np.ndarray:
        """Every value under one key (live or not)."""
        return self.lookup(np.array([key], dtype=np.int64))[1]

    def compact(self, keep: Filter | None) -> None:
        """Merge the delta into main, keeping only entries ``keep`` accepts (all without
        a filter). O(n) besides the delta's sort; the key filter is rebuilt to the kept
        keys. ``keep`` is asked :data:`COMPACT_BLOCK` entries at a time
        (:meth:`_kept_entries`); main's columns are then rewritten in place, in one
        compiled pass (:func:`_compact_in_place`), and shrunk.

        In place, because at 1M BE-Gen subscriptions PSTHash's table has 23M entries
        under 21M keys: numpy's per-key ``reduceat`` and the new offsets' ``cumsum`` took
        1.6 of a purge's 2.2 s, besides a copy of every column.

        What the compaction freed is given back to the system at the end
        (:func:`psmatch.core.heap.release_free_heap`): a purge compacts several
        structures in turn, and glibc keeps each one's freed temporaries (blocks of up
        to 32 MiB come from its heap) where the next one's do not fit, so that without
        it their pages added up in a worker's peak."""
        self._merge_delta()
        if keep is not None:
            kept = self._kept_entries(keep)
            for name in ("_keys", "_offsets", "_values"):
                if not getattr(self, name).flags.owndata:  # unpickled: in the pickle's buffer
                    setattr(self, name, getattr(self, name).copy())
            n_keys, n_values = _compact_in_place(self._keys, self._offsets, self._values, kept)
            self._keys.resize(n_keys, refcheck=False)
            self._offsets.resize(n_keys + 1, refcheck=False)
            self._values.resize(n_values, refcheck=False)
            self._main_directory = None
        self._filter = KeyFilter(self._keys, len(self._keys) + MERGE_MIN)
        release_free_heap()

    def _kept_entries(self, keep: Filter) -> np.ndarray:
        """The mask of main's entries ``keep`` accepts, asked one block of
        :data:`COMPACT_BLOCK` entries at a time with each entry's key, so that the keys
        expanded per entry and whatever ``keep`` computes from them are a block's, not
        the whole table's (at 1M BE-Gen subscriptions PSTHash's table holds 23M entries,
        184 MB per int64 column: expanded at once, a worker's purge under churn raised
        its peak by about 1 GB; docs/bench-streaming.md). O(n) in all."""
        offsets, total = self._offsets, len(self._values)
        kept = np.empty(total, dtype=bool)
        entry = offsets.dtype.type  # a Python int would make numpy copy offsets to int64
        for lo in range(0, total, COMPACT_BLOCK):
            hi = min(lo + COMPACT_BLOCK, total)
            # keys first..last-1 own entries lo..hi-1: clip their ranges to the block
            first = int(offsets.searchsorted(entry(lo), side="right")) - 1
            last = int(offsets.searchsorted(entry(hi), side="left"))
            counts = np.diff(np.clip(offsets[first : last + 1], lo, hi))
            kept[lo:hi] = keep(np.repeat(self._keys[first:last], counts), self._values[lo:hi])
        return kept

    def entries(self) -> tuple[np.ndarray, np.ndarray]:
        """All (key, value) entries, main then delta; for checks and rebuilds."""
        main_keys = np.repeat(self._keys, np.diff(self._offsets))
        return (np.concatenate([main_keys, self._delta_keys.view()]),
                np.concatenate([self._values, self._delta_values.view()]))

    def _directories(self) -> list[KeyDirectory]:
        """The key directories built so far (counting them builds none)."""
        delta = [self._delta_sorted.directory] if self._delta_sorted is not None else []
        return ([self._main_directory] if self._main_directory is not None else []) + delta

    def _parts(self) -> list[CsrPart]:
        """Main, and the sorted delta if it holds entries; main's directory is built
        on the first lookup after a merge or a compaction, O(n)."""
        if self._main_directory is None:
            self._main_directory = KeyDirectory(self._keys)
        main = CsrPart(self._keys, self._offsets, self._values, self._main_directory)
        return [main, self._sorted_delta()] if len(self._delta_keys) else [main]

    def _sorted_delta(self) -> CsrPart:
        """The delta as CSR (distinct keys, offsets, values in insertion order per key)
        with its directory; sorted once per change of the delta, O(d log d)."""
        if self._delta_sorted is None:
            keys = self._delta_keys.view()
            delta_order = np.argsort(keys, kind="stable")
            unique, offsets = _runs(keys[delta_order])
            self._delta_sorted = CsrPart(unique, offsets, self._delta_values.view()[delta_order],
                                         KeyDirectory(unique))
        return self._delta_sorted

    def _merge_delta(self) -> None:
        """Interleave the sorted delta into main: each delta entry goes after main's
        entries of keys up to its own, so a key's values stay in insertion order.

        O(n + d log d). Main's columns grow in place
        (:func:`psmatch.core.columns.insert_sorted_in_place`), so the temporaries are the
        delta's and a block's, not a copy of main (main's columns are never handed out,
        so no view of them is alive); the key filter is rebuilt only when main's keys
        outgrow it."""
        if not len(self._delta_keys):
            return
        keys, offsets, values, _ = self._sorted_delta()
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
        self._main_directory = None
        if len(self._keys) + MERGE_MIN > self._filter.capacity:
            self._filter = KeyFilter(self._keys, len(self._keys) + MERGE_MIN)
        else:
            self._filter.add(keys)

    def check(self) -> None:
        """Assert that main is sorted CSR, that the key filter passes every key and that
        each part's key directory is the one its keys give."""
        assert (np.diff(self._keys) > 0).all(), "main keys not sorted and distinct"
        assert self._offsets[0] == 0 and self._offsets[-1] == len(self._values)
        assert (np.diff(self._offsets) > 0).all(), "an empty run in main"
        assert self._values.dtype == self._offsets.dtype == np.int32
        keys, _ = self.entries()
        assert self._filter.may_hold(keys).all(), "the key filter drops a key"
        for part in self._parts():
            fresh = KeyDirectory(part.keys)
            assert part.directory.shift == fresh.shift, "a stale key directory"
            assert np.array_equal(part.directory.starts, fresh.starts), "a stale key directory"


def _compact_in_place(keys: np.ndarray, offsets: np.ndarray, values: np.ndarray,
                      kept: np.ndarray) -> tuple[int, int]:
    """Keep the CSR entries ``kept`` marks and the keys left with one, in place: each
    kept value moves left over the dropped ones, and so do the keys and their offsets
    (a key's end is read before its slot can be overwritten). Returns the numbers of
    keys and values kept; the columns' tails beyond them are garbage. O(keys + values),
    no temporaries."""
    return _kernels.compact_in_place(keys, offsets, values, kept)


def _shift_offsets(offsets: np.ndarray, merged_at: np.ndarray, step: np.ndarray) -> None:
    """Add ``step[i]`` to offset ``j``, where ``i`` is how many of the sorted
    ``merged_at`` are below ``j``: one compiled pass, O(len(offsets) + len(merged_at))."""
    _kernels.shift_offsets(offsets, merged_at, step)


def _runs(sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys of a sorted column and the CSR offsets of their runs (one
    pass; ``np.unique`` would sort the sorted column again)."""
    starts = np.flatnonzero(np.diff(sorted_keys, prepend=sorted_keys[:1] - 1))
    return sorted_keys[starts], np.append(starts, len(sorted_keys)).astype(np.int64)


def _csr_lookup(part: CsrPart, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(query_index, value)`` of every entry of ``part`` under the queries."""
    keys, offsets, values, directory = part
    at = directory.lower_bounds(keys, queries)
    found = np.flatnonzero(at < len(keys))
    found = found[keys[at[found]] == queries[found]]
    hit = at[found]
    starts = offsets[hit]
    owner, positions = expand_ranges(starts, offsets[hit + 1] - starts)
    return found[owner], values[positions]


def _csr_ranges(first: np.ndarray, end: np.ndarray, keys: np.ndarray, offsets: np.ndarray,
                values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(query_index, key, value)`` of the entries under ``keys[first[i]:end[i]]``."""
    owner, at = expand_ranges(first, end - first)
    starts = offsets[at]
    entry, positions = expand_ranges(starts, offsets[at + 1] - starts)
    return owner[entry], keys[at][entry], values[positions]


def _bucket_starts(keys: np.ndarray, shift: int) -> np.ndarray:
    """``starts[b]``: the index of the first key whose bucket (``key >> shift`` less the
    smallest key's) is ``b`` or more, for every bucket and one past the last. O(n +
    buckets)."""
    if not len(keys):
        return np.zeros(1, dtype=np.int32)
    starts = np.empty(int(keys[-1] >> shift) - int(keys[0] >> shift) + 2, dtype=np.int32)
    _kernels.bucket_starts(keys, starts, shift)
    return starts


def _lower_bounds(keys: np.ndarray, starts: np.ndarray, shift: int,
                  queries: np.ndarray) -> np.ndarray:
    """``np.searchsorted(keys, queries)`` through the buckets' ``starts``
    (:func:`_bucket_starts`): a query below every bucket is before the first key, one
    above them after the last, any other searched for in its bucket alone."""
    at = np.empty(len(queries), dtype=np.int64)
    _kernels.lower_bounds(keys, starts, shift, queries, at)
    return at
