"""Every raw loop of ``psmatch.core._kernels`` on arbitrary arrays of its element types, of
any lengths and values: the outcome is a ``ValueError`` or what a plain Python/numpy
reference computes, never a crash (``make test-asan`` runs these under AddressSanitizer
and UBSan) and never a hang (each probe of the id table is bounded by its size).

Each reference is written from the loop's contract, with the reads it makes in the
order it makes them: where a read would fall outside its column the reference raises
:class:`Refused`, and the loop must then raise ``ValueError``; where the reference
computes a result, the loop must compute the same one. Values are drawn from small
ranges around the lengths (so that most indices are valid and some are not) and from
the integer limits (so that shifts and sums that could overflow are tried)."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from psmatch.core import _kernels

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
EXTREMES = [I64_MIN, I64_MAX, I32_MIN, I32_MAX, I32_MAX + 1, 2**32]
MASK64 = 2**64 - 1
EXAMPLES = settings(max_examples=150, deadline=None)


class Refused(Exception):
    """The reference reached a value the loop must refuse."""


def column(dtype: Any, lo: int = -2, hi: int = 8, max_len: int = 6, extremes: bool = True
           ) -> st.SearchStrategy[np.ndarray]:  # fmt: skip
    """A 1-dimensional array of ``dtype``: values mostly in ``[lo, hi]``, some at the
    limits of the type."""
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
    values = st.integers(max(lo, info.min), min(hi, info.max)) if info else st.booleans()
    if info and extremes:
        edges = [e for e in EXTREMES if info.min <= e <= info.max] + [info.min, info.max]
        values = st.one_of(values, values, values, st.sampled_from(edges))
    return arrays(dtype, st.integers(0, max_len), elements=values)


def at(values: np.ndarray, i: int) -> Any:
    """``values[i]`` as a Python value; :class:`Refused` outside the column (never
    Python's wrap-around for negative indices)."""
    if not 0 <= i < len(values):
        raise Refused
    return values[i].item()


def check(kernel: Callable[[], Any], reference: Callable[[], Any]) -> Any:
    """Run the reference, then the loop: both refuse, or both compute; the loop's result."""
    try:
        expected = reference()
    except Refused:
        with pytest.raises(ValueError):
            kernel()
        return None
    return expected, kernel()


# ---------------------------------------------------------------- columns


@given(column(np.uint64, 0, 3), column(np.uint64, 0, 300))
@EXAMPLES
def test_set_bits(words: np.ndarray, positions: np.ndarray) -> None:
    def reference() -> list[int]:
        out = words.tolist()
        for p in positions.tolist():
            if p >> 6 >= len(out):
                raise Refused
            out[p >> 6] |= 1 << (p & 63)
        return out

    result = check(lambda: _kernels.set_bits(words, positions), reference)
    if result:
        assert words.tolist() == result[0]


@given(column(np.int64), column(np.int64, -1, 3), st.booleans(), st.integers(0, 8))
@EXAMPLES
def test_expand_ranges(starts: np.ndarray, counts: np.ndarray, right_length: bool,
                       other: int) -> None:
    total = int(sum(int(c) for c in counts)) if right_length else other
    total = min(max(total, 0), 64)
    owner, index = np.zeros(total, np.int64), np.zeros(total, np.int64)

    def reference() -> tuple[list[int], list[int]]:
        if len(starts) < len(counts):
            raise Refused
        ranges = list(zip(starts.tolist(), counts.tolist(), strict=False))
        if any(count < 0 or start + count > I64_MAX for start, count in ranges):
            raise Refused
        if sum(count for _, count in ranges) != total:  # an int64 sum past the limit too
            raise Refused
        return ([i for i, (_, count) in enumerate(ranges) for _ in range(count)],
                [start + j for start, count in ranges for j in range(count)])

    result = check(lambda: _kernels.expand_ranges(starts, counts, owner, index), reference)
    if result:
        assert (owner.tolist(), index.tolist()) == result[0]


@given(column(np.uint8, 0, 255), column(np.int64, -1, 6), column(np.int64, -1, 4),
       column(np.uint8, 0, 255), column(np.int64, -1, 6))
@EXAMPLES
def test_copy_ranges(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                     out: np.ndarray, out_starts: np.ndarray) -> None:
    def reference() -> list[int]:
        if not len(starts) == len(lengths) == len(out_starts):
            raise Refused
        got = out.tolist()
        for s, n, o in zip(starts.tolist(), lengths.tolist(), out_starts.tolist(), strict=True):
            if n < 0 or s < 0 or s + n > len(data) or o < 0 or o + n > len(got):
                raise Refused
            got[o:o + n] = data[s:s + n].tolist()
        return got

    result = check(lambda: _kernels.copy_ranges(data, starts, lengths, out, out_starts),
                   reference)  # fmt: skip
    if result:
        assert out.tolist() == result[0]


@given(st.sampled_from([np.int32, np.int64]), st.data())
@EXAMPLES
def test_move_right_and_insert(dtype: Any, data: st.DataObject) -> None:
    column_ = data.draw(column(dtype, -5, 5, max_len=8))
    items = data.draw(column(dtype, -5, 5, max_len=4))
    at_ = data.draw(column(np.int64, -1, 6, max_len=4))
    n = data.draw(st.sampled_from([-1, 0, 1, 2, 3, 4, 5, 8, I64_MAX]))
    before = column_.copy()

    def reference() -> list[int]:
        k = len(items)
        if len(at_) != k or not 0 <= n <= len(column_) - k:
            raise Refused
        if any(not 0 <= a <= n for a in at_.tolist()) or any(
                b < a for a, b in pairwise(at_.tolist())):
            raise Refused
        return np.insert(before[:n], at_, items).tolist() + before[n + k:].tolist()

    result = check(lambda: _kernels.move_right_and_insert(column_, n, at_, items), reference)
    if result:
        assert column_.tolist() == result[0]
    else:
        assert column_.tolist() == before.tolist()


# ---------------------------------------------------------------- id table


def fnv_high(data: bytes) -> int:
    h = 14695981039346656037
    for b in data:
        h = ((h ^ b) * 1099511628211) & MASK64
    return h >> 32


def offsets_ok(offsets: list[int], n: int, limit: int) -> bool:
    return (len(offsets) >= n + 1 and offsets[0] >= 0 and offsets[n] <= limit
            and all(a <= b for a, b in pairwise(offsets[:n + 1])))


@given(column(np.uint8, 0, 255, max_len=8), column(np.int64, -1, 9), st.integers(0, 6))
@EXAMPLES
def test_hash_ranges(data: np.ndarray, offsets: np.ndarray, n: int) -> None:
    out = np.zeros(n, np.uint32)

    def reference() -> list[int]:
        if len(offsets) < n + 1 or not offsets_ok(offsets.tolist(), n, len(data)):
            raise Refused
        return [fnv_high(data[offsets[i]:offsets[i + 1]].tobytes()) for i in range(n)]

    result = check(lambda: _kernels.hash_ranges(data, offsets, out), reference)
    if result:
        assert out.tolist() == result[0]


EMPTY, DELETED = -1, -2
HASHES = [0, 1, 2**31, 2**32 - 1, 12345]


def home(hash_: int, entries: int) -> int:
    return (hash_ * entries) >> 32


@given(st.data())
@EXAMPLES
def test_find_slots(data: st.DataObject) -> None:
    hashes_of = st.sampled_from(HASHES)
    table = data.draw(column(np.int32, -2, 5, max_len=6))
    slot_hash = data.draw(arrays(np.uint32, st.integers(0, 5), elements=hashes_of))
    buffer = data.draw(column(np.uint8, 0, 3, max_len=8, extremes=False))
    start = data.draw(column(np.int64, -1, 8, max_len=5))
    length = data.draw(column(np.int32, -1, 3, max_len=5))
    query = data.draw(column(np.uint8, 0, 3, max_len=6, extremes=False))
    offsets = data.draw(column(np.int64, -1, 6, max_len=4))
    hashes = data.draw(arrays(np.uint32, st.integers(0, 4), elements=hashes_of))
    n = data.draw(st.integers(0, 3))
    out = np.zeros(n, np.int64)
    n_slots = min(len(slot_hash), len(start), len(length))

    def reference() -> list[int]:
        if len(hashes) < n or len(offsets) < n + 1:
            raise Refused
        if not offsets_ok(offsets.tolist(), n, len(query)):
            raise Refused
        got = []
        for i in range(n):
            lo, size, found = int(offsets[i]), int(offsets[i + 1] - offsets[i]), -1
            entry = home(int(hashes[i]), len(table)) if len(table) else 0
            for _ in range(len(table)):
                slot = int(table[entry])
                if slot == EMPTY:
                    break
                if slot >= 0:
                    if slot >= n_slots:
                        raise Refused
                    if slot_hash[slot] == hashes[i] and length[slot] == size:
                        s = int(start[slot])
                        if size and not 0 <= s <= len(buffer) - size:
                            raise Refused
                        if buffer[s:s + size].tobytes() == query[lo:lo + size].tobytes():
                            found = slot
                            break
                entry = (entry + 1) % len(table)
            got.append(found)
        return got

    result = check(lambda: _kernels.find_slots(table, slot_hash, buffer, start, length, query,
                                               offsets, hashes, out, EMPTY), reference)
    if result:
        assert out.tolist() == result[0]


@given(st.booleans(), column(np.int32, -2, 4, max_len=6),
       arrays(np.uint32, st.integers(0, 5), elements=st.sampled_from(HASHES)),
       column(np.int64, -1, 5, max_len=4))
@EXAMPLES
def test_insert_and_remove_slots(filing: bool, table: np.ndarray, slot_hash: np.ndarray,
                                 slots: np.ndarray) -> None:
    """Filing into a full table and removing an absent slot are refused after at most
    one round of the table each: no endless probe."""
    marker = EMPTY if filing else DELETED
    kernel = _kernels.insert_slots if filing else _kernels.remove_slots

    def reference() -> list[int]:
        got = table.tolist()
        for slot in slots.tolist():
            if not 0 <= slot < len(slot_hash):
                raise Refused
        for slot in slots.tolist():
            entry = home(int(slot_hash[slot]), len(got)) if got else 0
            for _ in range(len(got)):
                if got[entry] == (marker if filing else slot):
                    got[entry] = slot if filing else marker
                    break
                entry = (entry + 1) % len(got)
            else:
                raise Refused
        return got

    result = check(lambda: kernel(table, slot_hash, slots, marker), reference)
    if result:
        assert table.tolist() == result[0]


# ---------------------------------------------------------------- multimap


@given(column(np.int64, -3, 3), column(np.int32, -1, 6, max_len=7),
       column(np.int32, -3, 3, max_len=6), column(np.bool_, max_len=6))
@EXAMPLES
def test_compact_in_place(keys: np.ndarray, offsets: np.ndarray, values: np.ndarray,
                          kept: np.ndarray) -> None:
    k0, o0, v0 = keys.tolist(), offsets.tolist(), values.tolist()

    def reference() -> tuple[int, int, list[int], list[int], list[int]]:
        n = len(k0)
        if len(o0) < n + 1 or not offsets_ok(o0, n, min(len(v0), len(kept))):
            raise Refused
        new_keys, new_ends, new_values = [], [], []
        for i in range(n):
            run = [v0[j] for j in range(o0[i], o0[i + 1]) if kept[j]]
            if run:
                new_values += run
                new_keys.append(k0[i])
                new_ends.append(len(new_values))
        return len(new_keys), len(new_values), new_keys, new_ends, new_values

    result = check(lambda: _kernels.compact_in_place(keys, offsets, values, kept), reference)
    if result:
        n_keys, n_values, new_keys, new_ends, new_values = result[0]
        assert result[1] == (n_keys, n_values)
        assert keys[:n_keys].tolist() == new_keys
        assert offsets[1:n_keys + 1].tolist() == new_ends
        assert values[:n_values].tolist() == new_values


@given(column(np.int32, -3, 3), column(np.int64, -1, 6, max_len=4), column(np.int64, -3, 3))
@EXAMPLES
def test_shift_offsets(offsets: np.ndarray, merged_at: np.ndarray, step: np.ndarray) -> None:
    before = offsets.tolist()

    def reference() -> list[int]:
        m = len(merged_at)
        if len(step) < m + 1 or any(b < a for a, b in pairwise(merged_at.tolist())):
            raise Refused
        if any(not I32_MIN <= s <= I32_MAX for s in step[:m + 1].tolist()):
            raise Refused
        got = [o + int(step[int(np.sum(merged_at < j))]) for j, o in enumerate(before)]
        if any(not I32_MIN <= o <= I32_MAX for o in got):
            raise Refused
        return got

    result = check(lambda: _kernels.shift_offsets(offsets, merged_at, step), reference)
    if result:
        assert offsets.tolist() == result[0]
    else:
        assert offsets.tolist() == before


def buckets_of(keys: list[int], shift: int) -> int:
    return (keys[-1] >> shift) - (keys[0] >> shift) + 1 if keys else 0


def bucket_starts_reference(keys: list[int], shift: int) -> list[int]:
    if not keys:
        return [0]
    bucket = [(k >> shift) - (keys[0] >> shift) for k in keys]
    return [bisect.bisect_left(bucket, b) for b in range(buckets_of(keys, shift) + 1)]


@given(column(np.int64, -40, 40), st.sampled_from([-1, 0, 1, 3, 63, 64]), st.booleans(),
       st.integers(0, 6))
@EXAMPLES
def test_bucket_starts(keys: np.ndarray, shift: int, right_length: bool, other: int) -> None:
    k = keys.tolist()
    sortable = 0 <= shift <= 63 and k == sorted(k)
    length = (buckets_of(k, shift) + 1 if sortable and right_length else other)
    if length > 200:
        return  # buckets over the int64 range: no array could hold them
    starts = np.zeros(length, np.int32)

    def reference() -> list[int]:
        if not sortable or buckets_of(k, shift) + 1 != length:
            raise Refused
        return bucket_starts_reference(k, shift)

    result = check(lambda: _kernels.bucket_starts(keys, starts, shift), reference)
    if result:
        assert starts.tolist() == result[0]


@given(column(np.int64, -40, 40), st.sampled_from([-1, 0, 2, 63, 64]), st.booleans(),
       column(np.int32, -1, 6, max_len=8), column(np.int64, -50, 50), st.integers(0, 6))
@EXAMPLES
def test_lower_bounds(keys: np.ndarray, shift: int, right_starts: bool, other: np.ndarray,
                      queries: np.ndarray, q: int) -> None:
    """The keys sorted (their order is ``bucket_starts``' check); the starts right or
    arbitrary: a right directory gives ``np.searchsorted``."""
    keys = np.sort(keys)
    k = keys.tolist()
    fits = 0 <= shift <= 63 and buckets_of(k, shift) < 200
    starts = (np.array(bucket_starts_reference(k, shift), np.int32) if fits and right_starts
              else other)  # fmt: skip
    out = np.zeros(q, np.int64)

    def reference() -> list[int]:
        if len(queries) < q or not 0 <= shift <= 63:
            raise Refused
        if buckets_of(k, shift) + 1 != len(starts):
            raise Refused
        got = []
        for query in queries[:q].tolist():
            if not k or query >> shift < k[0] >> shift:
                got.append(0)
            elif query >> shift > k[-1] >> shift:
                got.append(len(k))
            else:
                b = (query >> shift) - (k[0] >> shift)
                lo, hi = int(starts[b]), int(starts[b + 1])
                if not 0 <= lo <= hi <= len(k):
                    raise Refused
                got.append(bisect.bisect_left(k, query, lo, hi))
        return got

    result = check(lambda: _kernels.lower_bounds(keys, starts, shift, queries, out), reference)
    if result:
        assert out.tolist() == result[0]
        if fits and right_starts:
            assert out.tolist() == np.searchsorted(keys, queries[:q]).tolist()


@given(st.booleans(), column(np.uint64, 0, 2**64 - 1, max_len=4), column(np.int64),
       st.integers(0, 2**64 - 1), st.sampled_from([-1, 0, 1, 57, 58, 62, 63, 64]),
       st.integers(0, 6))
@EXAMPLES
def test_filter_add_and_may_hold(adding: bool, words: np.ndarray, keys: np.ndarray,
                                 multiplier: int, shift: int, n_out: int) -> None:
    before = words.tolist()
    out = np.zeros(n_out, np.bool_)

    def reference() -> list[int]:
        if not 1 <= shift <= 63 or len(words) * 64 < 1 << (64 - shift):
            raise Refused
        if not adding and n_out < len(keys):
            raise Refused
        bits = [((key * multiplier) & MASK64) >> shift for key in keys.tolist()]
        if adding:
            got = list(before)
            for bit in bits:
                got[bit >> 6] |= 1 << (bit & 63)
            return got
        return [bool(before[bit >> 6] >> (bit & 63) & 1) for bit in bits]

    def kernel() -> None:
        if adding:
            _kernels.filter_add(words, keys, multiplier, shift)
        else:
            _kernels.filter_may_hold(words, keys, multiplier, shift, out)

    result = check(kernel, reference)
    if result:
        assert (words.tolist() if adding else out[:len(keys)].tolist()) == result[0]


# ---------------------------------------------------------------- PS-Tree family


def pair_key(a: int, b: int) -> int:
    return (max(a, b) + 1) << 32 | min(a, b)


@given(column(np.int64, -1, 5), column(np.int64, -1, 5), st.integers(0, 6))
@EXAMPLES
def test_space_pair_keys(sid_a: np.ndarray, sid_b: np.ndarray, n: int) -> None:
    out = np.zeros(n, np.int64)

    def reference() -> list[int]:
        if len(sid_a) < n or len(sid_b) < n:
            raise Refused
        pairs = list(zip(sid_a[:n].tolist(), sid_b[:n].tolist(), strict=True))
        if any(not (0 <= a < I32_MAX and 0 <= b < I32_MAX) for a, b in pairs):
            raise Refused
        return [pair_key(a, b) for a, b in pairs]

    result = check(lambda: _kernels.space_pair_keys(sid_a, sid_b, out), reference)
    if result:
        assert out.tolist() == result[0]


@given(column(np.int64, 0, 2, max_len=8), column(np.int64, -1, 4, max_len=8),
       column(np.int64, -1, 6, max_len=8),
       st.sets(st.tuples(st.integers(0, 4), st.integers(0, 4)), max_size=10),
       st.sampled_from([-1, 0, 1, 16, 2**16 + 1]), st.booleans())
@EXAMPLES
def test_hashed_pair_entries(event: np.ndarray, tree: np.ndarray, sid: np.ndarray,
                             pairs: set[tuple[int, int]], merge_ratio: int, sort: bool) -> None:
    """``tree_pairs`` sorted and unique, as ``PSTHashMatcher._add_tree_pairs`` keeps it;
    the entries sorted by event and tree, or as drawn."""
    if sort and len(event) == len(tree):
        order = np.lexsort((tree, event))
        event, tree = event[order], tree[order]
    tree_pairs = np.array(sorted({lo << 32 | hi for lo, hi in pairs}), np.int64)

    def reference() -> tuple[list[int], list[int]]:
        n = len(event)
        if len(tree) != n or len(sid) != n or not 0 <= merge_ratio <= 2**16:
            raise Refused
        if any(not 0 <= t < I32_MAX for t in tree.tolist()):
            raise Refused
        if any(not 0 <= s < I32_MAX for s in sid.tolist()):
            raise Refused
        entries = list(zip(event.tolist(), tree.tolist(), strict=True))
        if any(a[0] > b[0] or (a[0] == b[0] and a[1] >= b[1])
               for a, b in pairwise(entries)):
            raise Refused
        known = set(tree_pairs.tolist())
        found = [(i, pair_key(int(sid[i]), int(sid[j]))) for i in range(n)
                 for j in range(i + 1, n)
                 if event[j] == event[i] and int(tree[i]) << 32 | int(tree[j]) in known]
        return [i for i, _ in found], [key for _, key in found]

    def kernel() -> tuple[list[int], list[int]]:
        owner, keys = _kernels.hashed_pair_entries(event, tree, sid, tree_pairs, merge_ratio)
        return (np.frombuffer(owner, np.int64).tolist(), np.frombuffer(keys, np.int64).tolist())

    result = check(kernel, reference)
    if result:
        assert result[1] == result[0]


@given(st.data())
@EXAMPLES
def test_fallback_candidates(data: st.DataObject) -> None:
    no_tree = 7
    n_trees = data.draw(st.integers(0, 3))
    positions = data.draw(arrays(np.int32, (data.draw(st.integers(0, 3)), n_trees),
                                 elements=st.integers(-1, 2)))
    keys = data.draw(arrays(np.int64, st.integers(0, 5),
                            elements=st.one_of(st.integers(0, 4), st.just(no_tree),
                                               st.just(3 << 32 | no_tree),
                                               st.sampled_from(EXTREMES))))
    offsets = data.draw(column(data.draw(st.sampled_from([np.int32, np.int64])), -1, 5,
                               max_len=6))
    values = data.draw(column(np.int32, -3, 3, max_len=5))
    tree_mask = data.draw(column(np.uint64, 0, 7, max_len=4))
    first = data.draw(column(np.int64, -1, 6, max_len=4))
    end = data.draw(column(np.int64, -1, 6, max_len=4))
    events = data.draw(column(np.int64, -1, 3, max_len=4))

    def reference() -> tuple[list[int], list[int]]:
        n = len(first)
        if len(end) != n or len(events) != n:
            raise Refused
        if any(not 0 <= e < positions.shape[0] for e in events.tolist()):
            raise Refused
        n_keys = min(len(keys), len(offsets) - 1)
        kept: list[tuple[int, list[int]]] = []
        for i in range(n):  # the first pass: every range, key and kept offsets
            f, e = int(first[i]), int(end[i])
            if f < e and (f < 0 or e > n_keys):
                raise Refused
            for j in range(f, e):
                tree = int(keys[j]) & 0xFFFFFFFF
                if tree != no_tree and tree >= n_trees:
                    raise Refused
                if tree == no_tree or positions[events[i], tree] >= 0:
                    lo, hi = int(offsets[j]), int(offsets[j + 1])
                    if not 0 <= lo <= hi <= len(values):
                        raise Refused
                    kept.append((i, values[lo:hi].tolist()))
        got: tuple[list[int], list[int]] = ([], [])
        for i, cids in kept:  # the second: each value within tree_mask, kept on its mask
            has = sum(1 << (t % 64) for t in range(n_trees) if positions[events[i], t] >= 0)
            for cid in cids:
                if not 0 <= cid < len(tree_mask):
                    raise Refused
                if int(tree_mask[cid]) & ~has == 0:
                    got[0].append(i)
                    got[1].append(cid)
        return got

    def kernel() -> tuple[list[int], list[int]]:
        owner, found = _kernels.fallback_candidates(first, end, keys, offsets, values, events,
                                                    positions, tree_mask, no_tree)  # fmt: skip
        return (np.frombuffer(owner, np.int64).tolist(), np.frombuffer(found, np.int32).tolist())

    result = check(kernel, reference)
    if result:
        assert result[1] == result[0]


UNBOUNDED_HI = 100


def lo_position(code: int, bound_rank: np.ndarray) -> int:
    return 0 if code < 0 else 2 * at(bound_rank, code >> 1) + 2 - (code & 1)


def hi_position(code: int, bound_rank: np.ndarray) -> int:
    return UNBOUNDED_HI if code < 0 else 2 * at(bound_rank, code >> 1) + (code & 1)


def inside_run(pos: int, runs: np.ndarray, start: int, bound_rank: np.ndarray) -> bool:
    if start >= len(runs) or not 0 <= runs[start] <= (len(runs) - start - 1) // 2:
        raise Refused
    for j in range(int(runs[start])):
        lo, hi = int(runs[start + 1 + 2 * j]), int(runs[start + 2 + 2 * j])
        if lo >= 2 * len(bound_rank) or hi >= 2 * len(bound_rank):
            raise Refused
        if pos < lo_position(lo, bound_rank):
            return False
        if pos <= hi_position(hi, bound_rank):
            return True
    return False


def verify_reference(events: np.ndarray, cids: np.ndarray, checked: np.ndarray,
                     positions: np.ndarray, alive: np.ndarray, tree_mask: np.ndarray,
                     pred_start: np.ndarray, pred_count: np.ndarray, rows: np.ndarray,
                     runs: np.ndarray, bound_rank: np.ndarray) -> list[int]:
    n, (n_events, n_trees) = len(cids), positions.shape
    n_conjuncts, n_codes = len(alive), 2 * len(bound_rank)
    if len(events) != n or len(checked) != n or rows.shape[1] != 3:
        raise Refused
    if min(len(tree_mask), len(pred_start), len(pred_count)) < n_conjuncts:
        raise Refused
    if any(not 0 <= e < n_events for e in events.tolist()):
        raise Refused
    if any(not 0 <= c < n_conjuncts for c in cids.tolist()):
        raise Refused
    has = [sum(1 << (t & 63) for t in range(n_trees) if positions[e, t] >= 0)
           for e in range(n_events)]
    todo = []
    for i in range(n):
        cid = int(cids[i])
        if not alive[cid] or int(tree_mask[cid]) & ~has[events[i]]:
            continue
        start, count = int(pred_start[cid]), int(pred_count[cid])
        if start < 0 or count < 0 or checked[i] < 0 or start + count > len(rows):
            raise Refused
        todo.append((i, start + int(checked[i]), start + count))
    kept = []
    for i, first, end in todo:
        holds = True
        for pid in range(first, end):
            tree, lo, hi = (int(x) for x in rows[pid])
            if not 0 <= tree < n_trees or lo >= n_codes or hi >= n_codes:
                raise Refused
            pos = int(positions[events[i], tree])
            if pos > hi_position(hi, bound_rank) or (
                    pos < lo_position(lo, bound_rank) if lo >= -1
                    else not inside_run(pos, runs, -2 - lo, bound_rank)):
                holds = False
                break
        if holds:
            kept.append(i)
    return kept


@given(st.data())
@settings(max_examples=300, deadline=None)
def test_verify_candidates(data: st.DataObject) -> None:
    n_events, n_trees = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))
    n_conjuncts, n_rows = data.draw(st.integers(0, 4)), data.draw(st.integers(0, 5))
    n = data.draw(st.integers(0, 5))
    draw = data.draw
    positions = draw(arrays(np.int32, (n_events, n_trees), elements=st.integers(-1, 5)))
    alive = draw(arrays(np.bool_, n_conjuncts))
    tree_mask = draw(arrays(np.uint64, n_conjuncts, elements=st.integers(0, 7)))
    pred_start = draw(arrays(np.int32, n_conjuncts, elements=st.integers(-1, n_rows)))
    pred_count = draw(arrays(np.int32, n_conjuncts, elements=st.integers(-1, 3)))
    rows = draw(arrays(np.int32, (n_rows, draw(st.sampled_from([3, 3, 3, 2]))),
                       elements=st.integers(-4, 6)))
    runs = draw(column(np.int32, -1, 4, max_len=7, extremes=False))
    bound_rank = draw(column(np.int32, 0, 5, max_len=4, extremes=False))
    events = draw(arrays(np.int64, n, elements=st.integers(-1, n_events)))
    cids = draw(arrays(np.int64, n, elements=st.integers(-1, n_conjuncts)))
    checked = draw(arrays(np.int32, n, elements=st.integers(-1, 2)))
    columns = (events, cids, checked, positions, alive, tree_mask, pred_start, pred_count,
               rows, runs, bound_rank)
    kept = np.zeros(n, np.int64)

    def kernel() -> list[int]:
        n_kept = _kernels.verify_candidates(*columns, kept, UNBOUNDED_HI)
        return kept[:n_kept].tolist()

    result = check(kernel, lambda: verify_reference(*columns))
    if result:
        assert result[1] == result[0]


def bloom_bits(cid: int, bits: int, multiplier: int) -> tuple[int, int]:
    x = ((cid + 1) * multiplier) & MASK64
    return (x >> 40) & (bits - 1), (x >> 8) & (bits - 1)


def filter_ok(offset: int, bits: int, n_words: int) -> bool:
    return bits > 0 and not bits & (bits - 1) and 0 <= offset <= n_words - max(1, bits >> 6)


MULTIPLIER = 0x9E3779B97F4A7C15


@given(column(np.uint64, 0, 0, max_len=5), column(np.int64, -1, 4), column(np.int64, -1, 256),
       column(np.int64), st.sampled_from([64, 128, 0, 3]))
@EXAMPLES
def test_bloom_add(pool: np.ndarray, offsets: np.ndarray, bits: np.ndarray, cids: np.ndarray,
                   power: int) -> None:
    if power and len(bits):
        bits[0] = power

    def reference() -> list[int]:
        n = len(cids)
        if len(offsets) < n or len(bits) < n:
            raise Refused
        got = pool.tolist()
        for i in range(n):
            if not filter_ok(int(offsets[i]), int(bits[i]), len(got)):
                raise Refused
        for i in range(n):
            for bit in bloom_bits(int(cids[i]), int(bits[i]), MULTIPLIER):
                got[int(offsets[i]) + (bit >> 6)] |= 1 << (bit & 63)
        return got

    result = check(lambda: _kernels.bloom_add(pool, offsets, bits, cids, MULTIPLIER), reference)
    if result:
        assert pool.tolist() == result[0]


@given(st.data())
@settings(max_examples=300, deadline=None)
def test_signature_filter(data: st.DataObject) -> None:
    draw = data.draw
    n_events, n_trees = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    n_conjuncts, n_rows, n = draw(st.integers(0, 4)), draw(st.integers(0, 5)), draw(
        st.integers(0, 5))
    n_spaces = draw(st.integers(0, 4))
    alive = draw(arrays(np.bool_, n_conjuncts))
    sig_mask = draw(arrays(np.uint64, n_conjuncts, elements=st.integers(0, 15)))
    pred_start = draw(arrays(np.int32, n_conjuncts, elements=st.integers(-2, n_rows)))
    rows = draw(arrays(np.int32, (n_rows, 3), elements=st.integers(-1, 3)))
    sid_matrix = draw(arrays(np.int64, (n_events, n_trees), elements=st.integers(-1, 5)))
    sig_bits = draw(arrays(np.int64, n_spaces, elements=st.sampled_from([0, 64, 128, 3, -64])))
    sig_offset = draw(arrays(np.int64, n_spaces, elements=st.integers(-1, 3)))
    sig_pool = draw(arrays(np.uint64, st.integers(0, 4), elements=st.integers(0, 2**64 - 1)))
    events = draw(arrays(np.int64, n, elements=st.integers(-1, n_events)))
    cids = draw(arrays(np.int64, n, elements=st.integers(-1, n_conjuncts)))
    kept = np.zeros(n, np.int64)

    def reference() -> list[int]:
        if any(not 0 <= e < n_events for e in events.tolist()):
            raise Refused
        if any(not 0 <= c < n_conjuncts for c in cids.tolist()):
            raise Refused
        got = []
        for i in range(n):
            cid = int(cids[i])
            if not alive[cid]:
                continue
            holds, rest, pid = True, int(sig_mask[cid]) >> 1, int(pred_start[cid]) + 1
            if rest and not 0 <= pid <= pid + rest.bit_length() - 1 < n_rows:
                raise Refused
            while rest:
                if rest & 1:
                    if not 0 <= rows[pid, 0] < n_trees:
                        raise Refused
                    sid = int(sid_matrix[events[i], rows[pid, 0]])
                    if sid < 0:
                        holds = False
                        break
                    if sid < n_spaces and sig_bits[sid] != 0:
                        bits, offset = int(sig_bits[sid]), int(sig_offset[sid])
                        if bits < 0 or not 0 <= offset <= len(sig_pool) - 1 - (bits - 1 >> 6):
                            raise Refused
                        words = sig_pool[offset:].tolist()
                        if not all(words[b >> 6] >> (b & 63) & 1
                                   for b in bloom_bits(cid, bits, MULTIPLIER)):
                            holds = False
                            break
                rest >>= 1
                pid += 1
            if holds:
                got.append(i)
        return got

    def kernel() -> list[int]:
        n_kept = _kernels.signature_filter(events, cids, alive, sig_mask, pred_start, rows,
                                           sid_matrix, sig_bits, sig_offset, sig_pool, kept,
                                           MULTIPLIER)  # fmt: skip
        return kept[:n_kept].tolist()

    result = check(kernel, reference)
    if result:
        assert result[1] == result[0]


# ---------------------------------------------------------------- bulk scan

_SCAN_NAME = rb"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*"
_SCAN_INT = rb"[+-]?[0-9]{1,18}(?=[ \n])"
_SCAN_COMPARISON = re.compile(
    rb"(" + _SCAN_NAME + rb")(?: *(<>|!=|==|<=|>=|=|<|>) *(" + _SCAN_INT + rb")"
    rb"| +(?:((?i:not)) +)?(?i:between) +(" + _SCAN_INT + rb") +(?i:and) +(" + _SCAN_INT
    + rb"))")
_SCAN_OPS = {b"=": 0, b"==": 0, b"!=": 1, b"<>": 1, b"<": 2, b"<=": 3, b">": 4, b">=": 5}
_SCAN_TOKENS = [b"a", b"b.c", b"_9", b"x.", b" ", b"  ", b"\n", b"\t", b"=", b"==", b"!=",
                b"<>", b"<", b"<=", b">", b">=", b"!", b"1", b"-7", b"+0", b"9" * 18,
                b"9" * 19, b"and", b"AND", b"not", b"NoT", b"between", b"BETWEEN", b"\xc3\xa9",
                b".5", b"e", b"a = 1", b" and ", b"b between -1 and 2", b"c not between 3 and 1",
                b"x.y<>5"]


def scan_reference(data: bytes, capacity: int) -> tuple[list[bool], list[tuple[int, ...]]]:
    """What scan_comparisons writes, read line by line with a regex; :class:`Refused`
    when the columns cannot hold the comparisons (a rejected text's ones included, which
    are written before it is rejected)."""
    rejected: list[bool] = []
    rows: list[tuple[int, ...]] = []
    for t, line in enumerate(data.split(b"\n")[:-1]):
        text, found, ok = line + b"\n", [], False
        at = len(line) - len(line.lstrip(b" "))
        while m := _SCAN_COMPARISON.match(text, at):
            name, op, value, negated, low, high = m.groups()
            fnv = 14695981039346656037
            for byte in name:
                fnv = ((fnv ^ byte) * 1099511628211) & MASK64
            if len(rows) + len(found) == capacity:
                raise Refused
            found.append((t, sum(len(x) + 1 for x in data.split(b"\n")[:t]) + m.start(1),
                          len(name), fnv - (fnv >> 63 << 64),
                          _SCAN_OPS[op] if op else 7 if negated else 6,
                          int(value or low), int(high or 0)))
            if re.match(rb" *\n", text[m.end():]):
                ok = True
                break
            sep = re.match(rb" +(?i:and) +", text[m.end():])
            if not sep:
                break
            at = m.end() + sep.end()
        rejected.append(not ok)
        rows.extend(found if ok else [])
    return rejected, rows


@given(st.lists(st.sampled_from(_SCAN_TOKENS), max_size=24).map(b"".join), st.integers(-1, 1),
       st.integers(0, 4))
@settings(max_examples=400, deadline=None)
def test_scan_comparisons(body: bytes, extra_texts: int, short: int) -> None:
    data = body + b"\n" if body and not body.endswith(b"\n") else body
    texts = data.count(b"\n") + (extra_texts if extra_texts >= 0 or data else 0)
    capacity = max(len(data) // 4 + 1 - short, 0)
    flags = np.zeros(max(texts, 0), np.uint8)
    columns = [np.zeros(capacity, np.int64) for _ in range(6)]
    code = np.zeros(capacity, np.int8)

    def kernel() -> tuple[list[bool], list[tuple[int, ...]]]:
        text_of, start, length, fnv, value, high = columns
        count = _kernels.scan_comparisons(np.frombuffer(data, np.uint8), flags, text_of, start,
                                          length, fnv, code, value, high)
        return (flags.astype(bool).tolist(),
                list(zip(*(c[:count].tolist() for c in (text_of, start, length, fnv, code,
                                                         value, high)), strict=True)))

    def reference() -> tuple[list[bool], list[tuple[int, ...]]]:
        if texts != data.count(b"\n"):
            raise Refused
        return scan_reference(data, capacity)

    result = check(kernel, reference)
    if result:
        assert result[1] == result[0]


def test_every_kernel_has_a_property_test() -> None:
    tested = {"set_bits", "expand_ranges", "copy_ranges", "move_right_and_insert",
              "hash_ranges", "find_slots", "insert_slots", "remove_slots",
              "compact_in_place", "shift_offsets", "bucket_starts", "lower_bounds",
              "filter_add", "filter_may_hold", "space_pair_keys", "hashed_pair_entries",
              "fallback_candidates", "verify_candidates", "bloom_add", "signature_filter",
              "scan_comparisons"}
    assert {name for name in dir(_kernels) if not name.startswith("_")} == tested
