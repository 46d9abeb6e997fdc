"""Compiled kernels of the PS-Tree matchers: the exact verification of candidates, and
PSTHash's pairing of an event's located entries and scan of its fallback lists.

Owns :func:`verify_candidates`, the loop :meth:`psmatch.pstree.store.ConjunctStore.verify`
runs over a chunk's (event, conjunct) candidates, and the layout of the per-row table it
reads (:data:`ROW_TREE` ..); :func:`hashed_pair_entries`, the pairs of entries
:meth:`psmatch.pstree.psthash.PSTHashMatcher._candidates` looks up in its hash table, by
their key (:func:`space_pair_keys`, the layout of the table's keys); and
:func:`fallback_candidates`, the range scan of the same method over its fallback lists. The
loops are C (:mod:`psmatch.core._kernels`, built by ``pip install``), which checks its
arguments' types and every index, offset and length it reads (``ValueError`` naming the
argument); the functions here allocate the outputs whose length is known.

Why compiled: with numpy, each predicate step over a block of candidates was a dozen
passes with their temporaries. What is left is memory latency: at a million conjuncts
the predicate rows far exceed the processor's caches and candidates name conjuncts in no
order, so each candidate costs cache misses. The kernel keeps them few and overlapped: a
row's tree, hull and interval run share one 16-byte record (one miss, not four; the
hull's bound codes become space positions through the forest's bound ranks, a column
small enough to stay in cache), and the candidates' first unchecked rows are found in a
first pass whose loads do not depend on each other, so the processor overlaps their
misses; this made the candidates about three times cheaper than the numpy passes on
BE-Gen workloads. Splitting the candidates into cache-sized blocks, or partitioning them
by conjunct id first, measured slower. Most conjuncts a lookup finds at a million
subscriptions need an attribute their event lacks; each conjunct's tree mask (8 bytes)
drops those before their rows, and their other columns, are read: PSTHash's fallback
scan drops them before they become candidates, verification the others
(docs/matching.md, *PSTBloom* and *PSTHash*; ``bench/bench_matchers.py`` measures the
matchers).
"""

from __future__ import annotations

import numpy as np

from psmatch.core import _kernels
from psmatch.pstree.forest import UNBOUNDED_HI

ROW_TREE, ROW_LO, ROW_HI = range(3)
"""Columns of the ``[rows, 3]`` int32 table of predicate rows the kernel reads: the row's
tree, its low end and the bound code of its hull's high end
(:func:`psmatch.pstree.rows.bound_codes`). The low end is the bound code of the hull's
low end for a single interval, and ``-2 - start`` for a predicate of several, ``start``
where its interval run starts in the store's runs (:func:`psmatch.pstree.rows.run_starts`):
a bound code is -1 (unbounded) or more."""
MERGE_RATIO = 16
""":func:`hashed_pair_entries` merges two sorted runs whose lengths are within this
ratio, and searches the items of the shorter in the longer otherwise."""


def verify_candidates(events: np.ndarray, cids: np.ndarray, checked: np.ndarray,
                      positions: np.ndarray, alive: np.ndarray, tree_mask: np.ndarray,
                      pred_start: np.ndarray, pred_count: np.ndarray, rows: np.ndarray,
                      runs: np.ndarray, bound_rank: np.ndarray) -> np.ndarray:
    """Indices, in order, of the candidates ``(events[i], cids[i])`` whose conjunct is live
    and whose predicates from the ``checked[i]``-th on (in access order) hold.

    ``positions`` is the ``[events, trees]`` position matrix (-1: the event lacks the
    tree's attribute, which no row admits); ``rows`` the ``[rows, 3]`` table of predicate
    rows (:data:`ROW_TREE` ..); ``tree_mask`` the conjuncts' tree masks
    (:func:`psmatch.pstree.rows.tree_masks`): a candidate needing a tree its event lacks
    is dropped on its mask, before its rows are read; ``runs`` the store's interval runs;
    the other arrays are the registry's and the forest's columns
    (:class:`psmatch.pstree.store.ConjunctStore`). A predicate holds when the event's
    position is inside its hull: for a predicate of several intervals, below its hull's
    high end and inside one of them (its run scanned in order up to the first interval
    above the position).

    Cost O(events x trees + candidates + predicates checked until each candidate's first
    false one + intervals scanned); memory: two int32 columns of the candidates' length,
    and the kept indices (int64).
    """
    kept = np.empty(len(cids), dtype=np.int64)
    n_kept = _kernels.verify_candidates(
        events, cids, checked, positions, alive, tree_mask, pred_start, pred_count, rows,
        runs, bound_rank, kept, UNBOUNDED_HI)
    return kept[:n_kept]


def fallback_candidates(first: np.ndarray, end: np.ndarray, keys: np.ndarray,
                        offsets: np.ndarray, values: np.ndarray, events: np.ndarray,
                        positions: np.ndarray, tree_mask: np.ndarray,
                        no_tree: int) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """PSTHash's fallback candidates: for each located entry ``i`` (a space of event
    ``events[i]``, whose keys ``space << 32 | tree`` are ``keys[first[i]:end[i]]``), the
    values of the keys whose ``tree`` is ``no_tree`` (a single predicate) or one the
    event has (``positions[events[i], tree] >= 0``), less the conjuncts whose tree mask
    (``tree_mask[value]``, :func:`psmatch.pstree.rows.tree_masks`) needs a tree the event
    lacks, as ``(entry index, value)`` columns in entry order
    (:meth:`psmatch.core.multimap.MultiMap.key_ranges` gives the ranges and the CSR
    columns).

    The values of a key whose tree the event lacks are never read. Cost O(events x trees
    + keys in the ranges + values of the kept keys), in two passes (count, then fill) with
    no temporaries but the output; the fill reads each value's tree mask (a cache miss
    each, but independent loads the processor overlaps). The numpy version of these
    steps (ranges expanded, keys tested, values expanded) took over a third of PSTHash's
    matching at 1M BE-Gen subscriptions; handing on the conjuncts the mask drops left
    verification nine in ten of its candidates to drop the same way.
    """
    owner, found = _kernels.fallback_candidates(first, end, keys, offsets, values, events,
                                                positions, tree_mask, no_tree)  # fmt: skip
    return np.frombuffer(owner, dtype=np.int64), np.frombuffer(found, dtype=values.dtype)


def hashed_pair_entries(event: np.ndarray, tree: np.ndarray, sid: np.ndarray,
                        tree_pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """PSTHash's pairs of located entries that can have a bucket: for each ``(i, j)``,
    ``i < j``, of one event whose trees ``tree[i] < tree[j]`` are a pair of
    ``tree_pairs`` (sorted keys ``low << 32 | high``), ``i`` and the bucket's key, the
    :func:`space_pair_keys` of their spaces ``sid[i]`` and ``sid[j]``. The entries are
    sorted by event, then tree (an event has one entry per tree).

    Entry ``i``'s partners (its tree's pairs) and the event's later entries are two runs
    sorted by tree: merged when their lengths are within :data:`MERGE_RATIO`, else each
    item of the shorter is searched in the longer. Cost O(sum over entries of
    min(partners, later entries) x (MERGE_RATIO + log of the other)), with no
    temporaries but the output: never the C(|E|, 2) of a wide event unless the index
    has as many tree pairs. The numpy version of these steps (sorted searches over
    expanded ranges) took a third of PSTHash's matching at 100K BE-Gen subscriptions in
    the service, about three times what this kernel, keys included, and its caller's sort
    take. ``tree_pairs`` must be sorted and unique (``PSTHashMatcher`` keeps it so; the
    kernel does not check it, and pairs out of order are only missed pairs).
    """
    owner, keys = _kernels.hashed_pair_entries(event, tree, sid, tree_pairs, MERGE_RATIO)
    return np.frombuffer(owner, dtype=np.int64), np.frombuffer(keys, dtype=np.int64)


def space_pair_keys(sid_a: np.ndarray, sid_b: np.ndarray) -> np.ndarray:
    """PSTHash's posting key of each 2-dim predicate space of spaces ``sid_a[i]`` and
    ``sid_b[i]`` (int64 columns), order-free: the smaller id in the low half, the larger
    plus one in the high half, so that a pair key is never equal to a single-space key.
    int64, O(n)."""
    keys = np.empty(len(sid_a), dtype=np.int64)
    _kernels.space_pair_keys(sid_a, sid_b, keys)
    return keys
