"""Compiled kernels of the PS-Tree matchers: the exact verification of candidates, and
PSTHash's pairing of an event's located entries and scan of its fallback lists.

Owns :func:`verify_candidates`, the loop :meth:`index.pstree.store.ConjunctStore.verify`
runs over a chunk's (event, conjunct) candidates, and the layout of the per-row table it
reads (:data:`ROW_TREE` ..); :func:`hashed_pair_entries`, the pairs of entries
:meth:`index.pstree.psthash.PSTHashMatcher._candidates` looks up in its hash table, by
their key (:func:`space_pair_key`, the layout of the table's keys); and
:func:`fallback_candidates`, the range scan of the same method over its fallback lists. The
kernels are compiled to machine code by numba (``nopython`` mode) on their first call,
and the machine code is cached on disk (``cache=True``: in ``__pycache__`` beside this
module, or numba's user-wide cache directory where that is not writable), so a fresh
process, such as a Spark Python worker, loads it instead of compiling it again.

Why compiled: with numpy, each predicate step over a block of candidates was a dozen
passes with their temporaries. What is left is memory latency: at a million conjuncts
the predicate rows far exceed the processor's caches and candidates name conjuncts in
no order, so each candidate costs cache misses. The kernel keeps them few and
overlapped: a row's tree, hull and interval count share one 16-byte record (one miss,
not four), and the candidates' first unchecked rows are found in a first pass whose
loads do not depend on each other, so the processor overlaps their misses. Measured on
BE-Gen (matching probability 0.01 %, 2-core AMD EPYC, shared): about 50-65 ns per
candidate at 1M subscriptions (9,300 candidates per event with PSTHash), 20-40 ns at
100K, against 160-230 and 60-115 ns for the numpy passes. Splitting the candidates
into cache-sized blocks, or partitioning them by conjunct id first, measured slower.
Most candidates at 1M fail on an attribute their event lacks; each conjunct's tree mask
(8 bytes) drops those before their rows, and their other columns, are read: PSTHash at
1M matched in 1.29 and 1.09 ms CPU per event with it, 1.35 and 1.28 ms without (two
runs of 3,000 events, best of three passes each).

A process pays for numba once: importing it (about 0.4 s CPU, and about 120 MB of
resident memory, most of it pages of the shared LLVM library) and loading the cached
machine code on the first call (about 0.2 s); compiling, when no cache is there, about
1.3 s more.
"""

from __future__ import annotations

import numba
import numpy as np

from index.pstree.forest import UNBOUNDED_HI

ROW_TREE, ROW_LO, ROW_HI, ROW_INTERVALS = range(4)
"""Columns of the ``[rows, 4]`` int32 table of predicate rows the kernel reads: the row's
tree, the first and last space position of its hull, and its number of intervals."""
MERGE_RATIO = 16
""":func:`hashed_pair_entries` merges two sorted runs whose lengths are within this
ratio, and searches the items of the shorter in the longer otherwise."""


@numba.njit(cache=True, nogil=True)
def verify_candidates(events: np.ndarray, cids: np.ndarray, checked: np.ndarray,
                      positions: np.ndarray, alive: np.ndarray, tree_mask: np.ndarray,
                      pred_start: np.ndarray, pred_count: np.ndarray, rows: np.ndarray,
                      pred_iv_start: np.ndarray, iv_lo_bid: np.ndarray,
                      iv_lo_closed: np.ndarray, iv_hi_bid: np.ndarray,
                      iv_hi_closed: np.ndarray, bound_rank: np.ndarray) -> np.ndarray:
    """Indices, in order, of the candidates ``(events[i], cids[i])`` whose conjunct is live
    and whose predicates from the ``checked[i]``-th on (in access order) hold.

    ``positions`` is the ``[events, trees]`` position matrix (-1: the event lacks the
    tree's attribute, which no row admits); ``rows`` the ``[rows, 4]`` table of predicate
    rows (:data:`ROW_TREE` ..); ``tree_mask`` the conjuncts' tree masks
    (:func:`index.pstree.store.tree_masks`): a candidate needing a tree its event lacks
    is dropped on its mask, before its rows are read; the other arrays are the store's,
    the registry's and the
    forest's columns (:class:`index.pstree.store.ConjunctStore`). A predicate holds when
    the event's position is inside its hull and, for a predicate of several intervals,
    inside one of them (:func:`inside_any_interval`).

    Cost O(events x trees + candidates + predicates checked until each candidate's first
    false one + intervals scanned); memory: two int32 columns of the candidates' length,
    and the kept indices.
    """
    n = len(cids)
    # Pass 0: the mask of the trees each event has (bit t % 64 for tree t).
    n_events, n_trees = positions.shape
    has = np.zeros(n_events, dtype=np.uint64)
    for e in range(n_events):
        mask = np.uint64(0)
        for t in range(n_trees):
            if positions[e, t] >= 0:
                mask |= np.uint64(1) << np.uint64(t & 63)
        has[e] = mask
    # Pass 1: each live candidate's first unchecked row (-1: dead, or it needs a tree
    # its event lacks) and its conjunct's end.
    first = np.empty(n, dtype=np.int32)
    end = np.empty(n, dtype=np.int32)
    for i in range(n):
        cid = cids[i]
        if not alive[cid] or tree_mask[cid] & ~has[events[i]]:
            first[i] = -1  # its rows are not read at all
            continue
        start = pred_start[cid]
        first[i] = start + checked[i]
        end[i] = start + pred_count[cid]
    # Pass 2: the rows, from the first unchecked one to the first false one.
    kept = np.empty(n, dtype=np.int64)
    n_kept = 0
    for i in range(n):
        pid = first[i]
        if pid < 0:
            continue
        event = events[i]
        holds = True
        while pid < end[i]:
            pos = positions[event, rows[pid, ROW_TREE]]
            if pos < rows[pid, ROW_LO] or pos > rows[pid, ROW_HI] or (
                    rows[pid, ROW_INTERVALS] > 1 and not inside_any_interval(
                        pos, pred_iv_start[pid], rows[pid, ROW_INTERVALS], iv_lo_bid,
                        iv_lo_closed, iv_hi_bid, iv_hi_closed, bound_rank)):
                holds = False
                break
            pid += 1
        if holds:
            kept[n_kept] = i
            n_kept += 1
    return kept[:n_kept]


@numba.njit(cache=True, nogil=True)
def inside_any_interval(pos: int, first: int, count: int, iv_lo_bid: np.ndarray,
                        iv_lo_closed: np.ndarray, iv_hi_bid: np.ndarray,
                        iv_hi_closed: np.ndarray, bound_rank: np.ndarray) -> bool:
    """Whether space position ``pos`` is inside one of the intervals ``first ..
    first + count - 1``, whose positions come from their bounds' ranks as in
    :meth:`index.pstree.store.ConjunctStore.row_table` (bound id -1: unbounded).
    A predicate's intervals are in order and disjoint, so the scan stops at the first
    interval above ``pos``. O(intervals scanned)."""
    for iid in range(first, first + count):
        lo_bid = iv_lo_bid[iid]
        lo = 0 if lo_bid < 0 else (
            2 * np.int64(bound_rank[lo_bid]) + 2 - np.int64(iv_lo_closed[iid]))
        if pos < lo:
            return False
        hi_bid = iv_hi_bid[iid]
        hi = UNBOUNDED_HI if hi_bid < 0 else (
            2 * np.int64(bound_rank[hi_bid]) + np.int64(iv_hi_closed[iid]))
        if pos <= hi:
            return True
    return False


@numba.njit(cache=True, nogil=True)
def fallback_candidates(first: np.ndarray, end: np.ndarray, keys: np.ndarray,
                        offsets: np.ndarray, values: np.ndarray, events: np.ndarray,
                        positions: np.ndarray, no_tree: int) -> tuple[np.ndarray, np.ndarray]:
    """PSTHash's fallback candidates: for each located entry ``i`` (a space of event
    ``events[i]``, whose keys ``space << 32 | tree`` are ``keys[first[i]:end[i]]``), the
    values of the keys whose ``tree`` is ``no_tree`` (a single predicate) or one the
    event has (``positions[events[i], tree] >= 0``), as ``(entry index, value)`` columns
    in entry order (:meth:`index.core.multimap.MultiMap.key_ranges` gives the ranges and
    the CSR columns).

    The values of a key whose tree the event lacks are never read. Cost O(keys in the
    ranges + values kept), in two passes (count, then fill) with no temporaries but the
    output; the numpy version of these steps (ranges expanded, keys tested, values
    expanded) took 37 % of PSTHash's matching at 1M BE-Gen subscriptions (1.44 of
    3.87 s for 8,000 events under a profiler).
    """
    total = 0
    for i in range(len(first)):
        for j in range(first[i], end[i]):
            tree = keys[j] & 0xFFFFFFFF
            if tree == no_tree or positions[events[i], tree] >= 0:
                total += offsets[j + 1] - offsets[j]
    owner = np.empty(total, dtype=np.int64)
    found = np.empty(total, dtype=values.dtype)
    k = 0
    for i in range(len(first)):
        for j in range(first[i], end[i]):
            tree = keys[j] & 0xFFFFFFFF
            if tree == no_tree or positions[events[i], tree] >= 0:
                for at in range(offsets[j], offsets[j + 1]):
                    owner[k] = i
                    found[k] = values[at]
                    k += 1
    return owner, found


@numba.njit(cache=True, nogil=True)
def hashed_pair_entries(event: np.ndarray, tree: np.ndarray, sid: np.ndarray,
                        tree_pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """PSTHash's pairs of located entries that can have a bucket: for each ``(i, j)``,
    ``i < j``, of one event whose trees ``tree[i] < tree[j]`` are a pair of
    ``tree_pairs`` (sorted keys ``low << 32 | high``), ``i`` and the bucket's key, the
    :func:`space_pair_key` of their spaces ``sid[i]`` and ``sid[j]``. The entries are
    sorted by event, then tree (an event has one entry per tree).

    Entry ``i``'s partners (its tree's pairs) and the event's later entries are two runs
    sorted by tree: merged when their lengths are within :data:`MERGE_RATIO`, else each
    item of the shorter is searched in the longer. Cost O(sum over entries of
    min(partners, later entries) x (MERGE_RATIO + log of the other)), with no
    temporaries but the output: never the C(|E|, 2) of a wide event unless the index
    has as many tree pairs. The numpy version of these steps (sorted searches over
    expanded ranges) took a third of PSTHash's matching at 100K BE-Gen subscriptions in
    the service (py-spy, 2026-11-29): 27-29 µs per event in one process to pair the
    entries and 12.5 µs more to key the pairs, where this kernel, keys included, and its
    caller's sort take 11-12 µs (435 pairs per event, 2,000 events).
    """
    n = len(event)
    event_end = np.empty(n, dtype=np.int64)
    up_start = np.empty(n, dtype=np.int64)
    up_end = np.empty(n, dtype=np.int64)
    end = n
    bound = 0
    for i in range(n - 1, -1, -1):
        if i + 1 < n and event[i + 1] != event[i]:
            end = i + 1
        event_end[i] = end
        up_start[i] = np.searchsorted(tree_pairs, tree[i] << 32)
        up_end[i] = np.searchsorted(tree_pairs, (tree[i] + 1) << 32)
        bound += min(up_end[i] - up_start[i], end - i - 1)
    owner = np.empty(bound, dtype=np.int64)
    keys = np.empty(bound, dtype=np.int64)
    k = 0
    for i in range(n):
        first, last = up_start[i], up_end[i]
        lo, hi = i + 1, event_end[i]
        partners, later = last - first, hi - lo
        if MERGE_RATIO * min(partners, later) >= max(partners, later):
            # alike in length: one merge of the two sorted runs of trees
            p, j = first, lo
            while p < last and j < hi:
                high = tree_pairs[p] & 0xFFFFFFFF
                if high < tree[j]:
                    p += 1
                elif high > tree[j]:
                    j += 1
                else:
                    owner[k] = i
                    keys[k] = space_pair_key(sid[i], sid[j])
                    k += 1
                    p += 1
                    j += 1
        elif partners < later:  # search each partner among the event's later entries
            for p in range(first, last):
                high = tree_pairs[p] & 0xFFFFFFFF
                at = lo + np.searchsorted(tree[lo:hi], high)
                if at < hi and tree[at] == high:
                    owner[k] = i
                    keys[k] = space_pair_key(sid[i], sid[at])
                    k += 1
        else:  # search each later entry's pair among the tree's pairs
            low = tree[i] << 32
            for j in range(lo, hi):
                want = low | tree[j]
                at = first + np.searchsorted(tree_pairs[first:last], want)
                if at < last and tree_pairs[at] == want:
                    owner[k] = i
                    keys[k] = space_pair_key(sid[i], sid[j])
                    k += 1
    return owner[:k], keys[:k]


@numba.njit(cache=True, nogil=True)
def space_pair_key(sid_a: int, sid_b: int) -> int:
    """PSTHash's posting key of the 2-dim predicate space of spaces ``sid_a`` and
    ``sid_b``, order-free: the smaller id in the low half, the larger plus one in the
    high half, so that a pair key is never equal to a single-space key."""
    low, high = np.int64(min(sid_a, sid_b)), np.int64(max(sid_a, sid_b))
    return ((high + 1) << 32) | low


@numba.njit(cache=True, nogil=True)
def space_pair_keys(sid_a: np.ndarray, sid_b: np.ndarray) -> np.ndarray:
    """:func:`space_pair_key` of each ``(sid_a[i], sid_b[i])``: int64. O(n)."""
    keys = np.empty(len(sid_a), dtype=np.int64)
    for i in range(len(sid_a)):
        keys[i] = space_pair_key(sid_a[i], sid_b[i])
    return keys
