"""The predicate rows of indexed conjuncts: their format, their columns and compaction.

Each conjunct's predicates are rows of numpy columns (:class:`PredicateRows`): per row
its tree, and its intervals as *bound codes* (bound ids into the
:class:`psmatch.pstree.forest.Forest` with the closed flag in the low bit,
:func:`bound_codes`), a predicate of several intervals keeping them in a *run* of its own
(:func:`run_field`). The compiled kernels read the rows as they are
(:meth:`PredicateRows.row_table`). What the rows mean against the forest, their filing
and their verification, is :class:`psmatch.pstree.store.ConjunctStore`'s.
"""

from __future__ import annotations

import numpy as np

from psmatch.core.columns import GrowableArray, expand_ranges, set_bits
from psmatch.core.heap import release_free_heap
from psmatch.pstree.kernels import ROW_HI, ROW_LO, ROW_TREE

ROW_BLOCK = 1 << 18
"""Rows :meth:`PredicateRows.compact_rows` moves at once: its temporaries, a few int64
columns, are a block's, so a smaller block lowers a compaction's peak in proportion."""
ROW_DTYPE = np.dtype({"names": ["tree", "lo", "hi"], "formats": [np.int32] * 3,
                      "offsets": [4 * ROW_TREE, 4 * ROW_LO, 4 * ROW_HI]})
"""A predicate row of :attr:`PredicateRows.rows`: its tree, its low end and the bound code
of its hull's high end (:func:`bound_codes`), each field at the column of the
verification kernel's ``[rows, 3]`` table (:data:`psmatch.pstree.kernels.ROW_TREE` ..),
so that the rows are that table as they are. The low end is the bound code of the
hull's low end for a single interval; a predicate of several intervals has
:func:`run_field` of the start of its interval run in :attr:`PredicateRows.runs` there
(whose first interval's low end is the hull's)."""



def run_field(start: np.ndarray) -> np.ndarray:
    """The low-end field of rows whose interval runs start at ``start``: ``-2 - start``,
    below every bound code (-1 or more). O(n), vectorised."""
    return (-2 - start).astype(np.int32)


def run_starts(lo: np.ndarray) -> np.ndarray:
    """Where the interval run of each row whose low-end field is ``lo`` starts (int64), -1
    for a row of a single interval. O(n), vectorised."""
    lo = lo.astype(np.int64)
    return np.where(lo <= -2, -2 - lo, -1)


def bound_codes(bid: np.ndarray, closed: np.ndarray) -> np.ndarray:
    """Interval ends as the store keeps them: ``bound id * 2 + closed``, -1 for an
    unbounded end (which is open). One int32 where a bound id and a flag took 5 bytes,
    and the kernel reads the flag with the id. O(n), vectorised."""
    return np.where(bid < 0, -1, bid * 2 + closed).astype(np.int32)


def decode_bounds(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bound ids (-1: unbounded) and closed flags of bound codes. O(n), vectorised."""
    codes = codes.astype(np.int64)
    return codes >> 1, (codes >= 0) & (codes & 1 == 1)  # -1 >> 1 is -1


def tree_masks(owner: np.ndarray, tree: np.ndarray, n: int) -> np.ndarray:
    """The tree mask of each of ``n`` conjuncts whose predicates are on trees ``tree``
    (conjunct ``owner``): bit ``t % 64`` set for each tree ``t``.

    Every predicate is false on an event that lacks its tree's attribute (or has it
    with a value of another kind), so a conjunct needing a bit that is not in the mask
    of the trees an event has cannot match it: the verification kernel drops such a
    candidate before it reads the conjunct's rows. A bit shared by two trees only lets a
    candidate through to the exact check. O(predicates).
    """
    masks = np.zeros(n, dtype=np.uint64)
    set_bits(masks, (owner.astype(np.uint64) << np.uint64(6)) | (tree & 63).astype(np.uint64))
    return masks


class PredicateRows:
    """Predicates as rows in access order, per conjunct id.

    Columns per conjunct: ``pred_start``/``pred_count`` (its predicate rows) and
    ``tree_mask`` (the trees its predicates are on, see :func:`tree_masks`). Per
    predicate row, :attr:`rows` (:data:`ROW_DTYPE`): its tree (:attr:`pred_tree`), the
    bound code of its hull's low end (:func:`bound_codes`, :meth:`hull`) or, for a
    predicate of several intervals (``in``, ``!=``, ``not in``: 13 % of BE-Gen's
    predicates), the start of its *run* in :attr:`runs` (:func:`run_field`): the
    interval count, then each interval's low and high bound codes; and its hull's high
    end. A single interval is its hull and has no run. 12 bytes a row and 8 an interval
    of a run. ``dead_rows`` counts the rows of removed conjuncts, which stay until
    :meth:`compact_rows`.
    """

    def __init__(self) -> None:
        self.pred_start = GrowableArray(np.int32)
        self.pred_count = GrowableArray(np.int32)
        self.tree_mask = GrowableArray(np.uint64)
        self.rows = GrowableArray(ROW_DTYPE)
        self.runs = GrowableArray(np.int32)
        self.dead_rows = 0

    @property
    def pred_tree(self) -> np.ndarray:
        """The tree of each predicate row (a view of :attr:`rows`, valid below
        ``len(rows)``)."""
        return self.rows.data["tree"]

    def interval_counts(self, pids: np.ndarray) -> np.ndarray:
        """The number of intervals of each predicate row of ``pids`` (int64). O(len(pids)),
        vectorised."""
        return self._counts_of_runs(run_starts(self.rows.data["lo"][pids]))

    def _counts_of_runs(self, run: np.ndarray) -> np.ndarray:
        """The number of intervals of rows whose runs start at ``run`` (-1: one)."""
        counts = np.ones(len(run), dtype=np.int64)
        multi = run >= 0
        counts[multi] = self.runs.data[run[multi]]
        return counts

    def intervals(self, pids: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every interval of the predicate rows ``pids``, in order: ``(owner, lo_bid,
        lo_closed, hi_bid, hi_closed)``, ``owner`` the index in ``pids`` of each
        interval's row (bound id -1: unbounded). O(len(pids) + intervals), vectorised."""
        rows = self.rows.data[pids]
        run = run_starts(rows["lo"])
        counts = self._counts_of_runs(run)
        owner = np.repeat(np.arange(len(pids)), counts)
        lo, hi = rows["lo"][owner], rows["hi"][owner]  # a single interval is the hull
        multi = np.flatnonzero(run >= 0)
        first = np.cumsum(counts) - counts
        run_owner, at = expand_ranges(first[multi], counts[multi])
        code = run[multi][run_owner] + 1 + 2 * (at - first[multi][run_owner])
        lo[at], hi[at] = self.runs.data[code], self.runs.data[code + 1]
        return owner, *decode_bounds(lo), *decode_bounds(hi)

    def hull(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The hull of the intervals of each predicate row of ``rows``: the first
        interval's low end and the last one's high end, as ``(lo_bid, lo_closed,
        hi_bid, hi_closed)`` (bound id -1 is unbounded). O(len(rows)), vectorised."""
        table = self.rows.data[rows]
        lo, run = table["lo"], run_starts(table["lo"])
        multi = run >= 0
        lo[multi] = self.runs.data[run[multi] + 1]  # a run's first interval's low end
        return *decode_bounds(lo), *decode_bounds(table["hi"])

    def predicate_row(self, cid: int, k: int) -> int:
        """Row of the conjunct's k-th predicate in access order."""
        return int(self.pred_start.data[cid]) + k

    def row_table(self) -> np.ndarray:
        """The ``[rows, 3]`` int32 table the compiled kernels read: :attr:`rows` as
        columns, per predicate row its tree, its low end (or run) and its hull's high
        end, side by side so that one cache miss reads them. O(1), a view."""
        n = len(self.rows)
        return self.rows.data[:n].view(np.int32).reshape(n, 3)

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self._columns)

    @property
    def _columns(self) -> tuple[GrowableArray, ...]:
        return (self.pred_start, self.pred_count, self.tree_mask, self.rows, self.runs)

    def compact_rows(self, cids: np.ndarray) -> None:
        """Keep the rows of the conjuncts ``cids`` (the live ones) only, dropping the
        :attr:`dead_rows`. Cost O(rows), amortised O(1) per dead row when called, as
        :meth:`psmatch.pstree.store.ConjunctStore.compact` is, once the dead rows are an
        eighth of the live conjuncts'.

        In place: the live conjuncts, in the order of their rows, move their rows left
        over the dead ones about :data:`ROW_BLOCK` rows at a time (a row only moves left,
        so no block overwrites rows a later block has still to read), and the columns
        are then shrunk. The temporaries are a block's and a column of the live cids, not
        every row expanded and copied whole, which would raise a large worker's peak at
        each purge under churn. What they freed is given back to the system at the end, as
        :meth:`psmatch.core.multimap.MultiMap.compact` does."""
        cids = cids[np.argsort(self.pred_start.view()[cids], kind="stable")]
        ends = np.cumsum(self.pred_count.view()[cids], dtype=np.int64)
        cuts = np.searchsorted(ends, np.arange(ROW_BLOCK, int(ends[-1]) if len(ends) else 0,
                                               ROW_BLOCK), side="right")
        pred_to = run_to = 0
        for block in np.split(cids, cuts):
            pred_to, run_to = self._move_rows_left(block, pred_to, run_to)
        self.rows.truncate(pred_to)
        self.runs.truncate(run_to)
        self.dead_rows = 0
        release_free_heap()

    def _move_rows_left(self, cids: np.ndarray, pred_to: int, run_to: int) -> tuple[int, int]:
        """Move the rows of ``cids`` (live, in the order of their rows, all after the
        rows already moved) to predicate row ``pred_to`` and their runs to ``run_to`` on
        (runs are in the order of their rows, so they too only move left); returns where
        the next block's rows and runs go."""
        counts = self.pred_count.view()[cids].astype(np.int64)
        _, pids = expand_ranges(self.pred_start.view()[cids], counts)
        self.pred_start.data[cids] = pred_to + np.cumsum(counts) - counts
        rows = self.rows.data[pids]
        run = run_starts(rows["lo"])
        multi = np.flatnonzero(run >= 0)
        run = run[multi]
        run_length = 1 + 2 * self.runs.data[run].astype(np.int64)
        _, codes = expand_ranges(run, run_length)
        self.runs.data[run_to : run_to + len(codes)] = self.runs.data[codes]
        rows["lo"][multi] = run_field(run_to + np.cumsum(run_length) - run_length)
        self.rows.data[pred_to : pred_to + len(pids)] = rows
        return pred_to + len(pids), run_to + len(codes)
