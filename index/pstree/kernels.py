"""Compiled kernels of the PS-Tree matchers: the exact verification of candidates.

Owns :func:`verify_candidates`, the loop :meth:`index.pstree.store.ConjunctStore.verify`
runs over a chunk's (event, conjunct) candidates. It is compiled to machine code by
numba (``nopython`` mode) on its first call and the machine code is cached on disk
(``cache=True``: in ``__pycache__`` beside this module, or numba's user-wide cache
directory where that is not writable), so a fresh process, such as a Spark Python
worker, loads it instead of compiling it again.

Why compiled: checked with numpy, each predicate step over a block of candidates is a
dozen passes with their temporaries (gathers, comparisons, compaction of the survivors),
so verification cost about ten numpy operations per candidate and predicate. The loop
below touches each candidate's rows once and stops at its first false predicate.
"""

from __future__ import annotations

import numba
import numpy as np

from index.pstree.forest import UNBOUNDED_HI


@numba.njit(cache=True, nogil=True)
def verify_candidates(events: np.ndarray, cids: np.ndarray, checked: np.ndarray,
                      positions: np.ndarray, alive: np.ndarray, pred_start: np.ndarray,
                      pred_count: np.ndarray, pred_tree: np.ndarray, row_lo: np.ndarray,
                      row_hi: np.ndarray, pred_iv_start: np.ndarray,
                      pred_iv_count: np.ndarray, iv_lo_bid: np.ndarray,
                      iv_lo_closed: np.ndarray, iv_hi_bid: np.ndarray,
                      iv_hi_closed: np.ndarray, bound_rank: np.ndarray) -> np.ndarray:
    """Indices of the candidates ``(events[i], cids[i])`` whose conjunct is live and whose
    predicates from the ``checked[i]``-th on (in access order) hold for the event.

    ``positions`` is the ``[events, trees]`` position matrix (-1: the event lacks the
    tree's attribute, which no predicate row admits); a predicate holds when the event's
    position is inside its hull ``row_lo .. row_hi`` and, for a predicate of several
    intervals, inside one of them (interval positions are computed from the bounds'
    ranks as :meth:`index.pstree.store.ConjunctStore.row_positions` does; the
    intervals are in order and disjoint, so the scan stops at the first one above).
    The other arrays are the store's and the registry's columns.

    Cost O(candidates + predicates checked until each candidate's first false one +
    intervals scanned); memory: the returned indices.
    """
    kept = np.empty(len(cids), dtype=np.int64)
    n_kept = 0
    for i in range(len(cids)):
        cid = cids[i]
        if not alive[cid]:
            continue
        event = events[i]
        pid = pred_start[cid] + checked[i]
        end = pred_start[cid] + pred_count[cid]
        holds = True
        while pid < end:
            pos = positions[event, pred_tree[pid]]
            if pos < row_lo[pid] or pos > row_hi[pid]:
                holds = False
                break
            if pred_iv_count[pid] > 1:
                inside = False
                first = pred_iv_start[pid]
                for iid in range(first, first + pred_iv_count[pid]):
                    lo_bid = iv_lo_bid[iid]
                    lo = 0 if lo_bid < 0 else (
                        2 * np.int64(bound_rank[lo_bid]) + 2 - np.int64(iv_lo_closed[iid]))
                    if pos < lo:
                        break
                    hi_bid = iv_hi_bid[iid]
                    hi = UNBOUNDED_HI if hi_bid < 0 else (
                        2 * np.int64(bound_rank[hi_bid]) + np.int64(iv_hi_closed[iid]))
                    if pos <= hi:
                        inside = True
                        break
                if not inside:
                    holds = False
                    break
            pid += 1
        if holds:
            kept[n_kept] = i
            n_kept += 1
    return kept[:n_kept]
