"""The predicate rows of the bitset family: every filed predicate as columns.

Owns, for :class:`psmatch.bitset.matcher.BitsetMatcher`:

* one *row* per predicate of a filed conjunct: its conjunct id, its dimension (the
  (attribute, kind) it constrains, :mod:`psmatch.bitset.cells`), its intervals (a range
  of the interval columns), whether it is *simple* (one interval, no pattern) and the
  cells of its hull's bounds (``lo_cell``, ``hi_cell``; -1 and :data:`UNBOUNDED` for a
  side with no bound), which its dimension sets when it cuts its domain;
* one *interval* per interval of a row: both bounds as keys (:mod:`psmatch.bitset.keys`)
  with their mode (:data:`OPEN`, :data:`CLOSED`, :data:`NONE`);
* per conjunct id, the range of its rows (a conjunct's rows are contiguous);
* the exact test of (event value, row) pairs (:meth:`PredicateRows.hold`), for the
  rows of conjuncts on numbers and booleans, where keys are exact.

Rows and intervals are appended; a removed conjunct's rows are dead until the purge
compacts both tables (:meth:`PredicateRows.compact`, O(rows + intervals)).
Memory: 46 bytes per row and 22 per interval, plus 12 per conjunct id.
"""

from __future__ import annotations

import numpy as np

from psmatch.bitset.keys import EXACT_INT, key
from psmatch.core.columns import GrowableArray, expand_ranges
from psmatch.language import Kind
from psmatch.language.columns import ConjunctColumns

NONE, OPEN, CLOSED = 0, 1, 2
"""Modes of an interval's bound: unbounded, open, closed."""
UNBOUNDED = 2**30
"""The ``hi_cell`` of a row with no upper bound (above every cell)."""


def bound_keys(values: list, kind: Kind) -> tuple[np.ndarray, np.ndarray]:
    """The keys of interval bounds of one kind (``None``, no bound, gets ``(0, 0)``).
    Numbers and booleans convert in a few numpy passes; only ints past 2**53 and strings
    cost a Python step each."""
    n = len(values)
    if kind is Kind.STRING:
        pairs = [(0.0, 0) if v is None else key(v, kind) for v in values]
        return (np.fromiter((p[0] for p in pairs), np.float64, n),
                np.fromiter((p[1] for p in pairs), np.int64, n))
    column = np.empty(n, dtype=object)
    column[:] = values
    column[column == None] = 0  # noqa: E711 - elementwise, on an object column
    f = column.astype(np.float64)
    d = np.zeros(n, dtype=np.int64)
    for i in np.flatnonzero(np.abs(f) >= EXACT_INT).tolist():
        v = column[i]
        if v.__class__ is int:
            d[i] = v - int(f[i])
    return f, d


class PredicateRows:
    """The row and interval tables, and each conjunct's range of rows."""

    def __init__(self) -> None:
        self.cid = GrowableArray(np.int32)
        self.dim = GrowableArray(np.int32)
        self.iv_start = GrowableArray(np.int64)
        self.iv_count = GrowableArray(np.int32)
        self.simple = GrowableArray(np.bool_)
        self.alive = GrowableArray(np.bool_)
        self.lo_cell = GrowableArray(np.int32)
        self.hi_cell = GrowableArray(np.int32)
        self.hull_lo = GrowableArray(np.float64)  # f of the hull's bounds, for the cuts
        self.hull_hi = GrowableArray(np.float64)
        self.lo_f = GrowableArray(np.float64)
        self.lo_d = GrowableArray(np.int16)  # |d| <= 1024 (keys)
        self.lo_mode = GrowableArray(np.int8)
        self.hi_f = GrowableArray(np.float64)
        self.hi_d = GrowableArray(np.int16)
        self.hi_mode = GrowableArray(np.int8)
        self.first_row = GrowableArray(np.int64)  # per cid
        self.row_count = GrowableArray(np.int32)  # per cid
        self.live_rows = 0

    def __len__(self) -> int:
        return len(self.cid)

    # -- filing ------------------------------------------------------------------------

    def append(self, cids: np.ndarray, columns: ConjunctColumns,
               dims: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """File the rows of new conjuncts, given as columns (``dims``: each predicate's
        dimension, in order). Returns the new rows' ids and the mask of the conjuncts
        that only ``Conjunct.evaluate`` decides (a string or a pattern). Cost
        O(intervals) in numpy passes, one Python step per string bound and per int past
        2**53."""
        counts = columns.predicate_count
        iv_counts = columns.interval_count
        kinds = columns.kind.astype(np.int8)
        patterned = columns.has_patterns
        m = int(iv_counts.sum())
        iv_kind = np.repeat(kinds, iv_counts)
        lo_keys = np.zeros(m), np.zeros(m, np.int64)
        hi_keys = np.zeros(m), np.zeros(m, np.int64)
        for kind in Kind:
            at = np.flatnonzero(iv_kind == kind)
            if len(at) == m and m:  # one kind (the common case): no gather
                lo_keys, hi_keys = bound_keys(columns.lo, kind), bound_keys(columns.hi, kind)
            elif len(at):
                for (f, d), bounds in ((lo_keys, columns.lo), (hi_keys, columns.hi)):
                    f[at], d[at] = bound_keys([bounds[i] for i in at.tolist()], kind)
        lo_mode = self._modes(columns.lo, columns.lo_closed)
        hi_mode = self._modes(columns.hi, columns.hi_closed)
        first_iv = len(self.lo_f) + np.concatenate(([0], np.cumsum(iv_counts)[:-1]))
        for column, values in ((self.lo_f, lo_keys[0]), (self.lo_d, lo_keys[1]),
                               (self.lo_mode, lo_mode), (self.hi_f, hi_keys[0]),
                               (self.hi_d, hi_keys[1]), (self.hi_mode, hi_mode)):
            column.extend(values)
        n = len(kinds)
        first = len(self.cid)
        self.cid.extend(np.repeat(cids, counts))
        self.dim.extend(dims.astype(np.int32))
        self.iv_start.extend(first_iv.astype(np.int64) if n else np.empty(0, np.int64))
        self.iv_count.extend(iv_counts)
        self.simple.extend((iv_counts == 1) & ~patterned)
        self.alive.extend(np.ones(n, dtype=bool))
        self.lo_cell.extend(np.zeros(n, np.int32))
        self.hi_cell.extend(np.zeros(n, np.int32))
        if n:
            self.hull_lo.extend(self._hull(first_iv, iv_counts, lo_keys[0], lo_mode, -np.inf))
            self.hull_hi.extend(self._hull(first_iv + iv_counts - 1, iv_counts, hi_keys[0],
                                           hi_mode, np.inf))
        width = int(cids.max()) + 1 if len(cids) else 0
        if width > len(self.first_row):
            self.first_row.grow_to(width, 0)
            self.row_count.grow_to(width, 0)
        self.first_row.data[cids] = first + np.concatenate(([0], np.cumsum(counts)[:-1]))
        self.row_count.data[cids] = counts
        self.live_rows += n
        residual = np.zeros(len(counts), dtype=bool)
        string_or_pattern = (kinds == Kind.STRING) | patterned
        if n:
            owner = np.repeat(np.arange(len(counts)), counts)
            residual[owner[string_or_pattern]] = True
        return np.arange(first, first + n, dtype=np.int64), residual

    @staticmethod
    def _modes(bounds: list, closed: np.ndarray) -> np.ndarray:
        """:data:`NONE`, :data:`OPEN` or :data:`CLOSED` per bound. O(bounds) in numpy."""
        column = np.empty(len(bounds), dtype=object)
        column[:] = bounds
        return np.where(column == None, NONE,  # noqa: E711 - elementwise
                        np.where(closed, CLOSED, OPEN)).astype(np.int8)

    def _hull(self, at: np.ndarray, iv_counts: np.ndarray, f: np.ndarray, mode: np.ndarray,
              unbounded: float) -> np.ndarray:
        """``f`` of one side of each new row's hull: its first interval's lower bound or
        its last one's upper bound (``at``, global interval ids), ``unbounded`` for a side
        with none; a row with no interval gets the other side's infinity, so that no
        cell meets its hull."""
        local = np.clip(at - (len(self.lo_f) - len(f)), 0, max(len(f) - 1, 0))
        if not len(f):
            return np.full(len(at), -unbounded)
        hull = np.where(mode[local] == NONE, unbounded, f[local])
        return np.where(iv_counts == 0, -unbounded, hull)

    def rows_of(self, cids: np.ndarray) -> np.ndarray:
        """The rows of the conjuncts ``cids`` (filed ones). O(their rows)."""
        _, rows = expand_ranges(self.first_row.data[cids], self.row_count.data[cids])
        return rows

    def kill(self, cids: np.ndarray) -> np.ndarray:
        """Mark the rows of removed conjuncts dead; returns them."""
        rows = self.rows_of(cids)
        self.alive.data[rows] = False
        self.row_count.data[cids] = 0
        self.live_rows -= len(rows)
        return rows

    def compact(self) -> np.ndarray:
        """Drop the dead rows and their intervals. Returns the map from old row ids to
        new ones (-1 for a dropped row). Cost O(rows + intervals)."""
        n = len(self.cid)
        alive = self.alive.view()
        kept = np.flatnonzero(alive)
        remap = np.full(n, -1, dtype=np.int64)
        remap[kept] = np.arange(len(kept))
        iv_owner, iv_index = expand_ranges(self.iv_start.view()[kept], self.iv_count.view()[kept])
        for column in (self.lo_f, self.lo_d, self.lo_mode, self.hi_f, self.hi_d, self.hi_mode):
            column.replace(column.view()[iv_index])
        counts = self.iv_count.view()[kept].astype(np.int64)
        new_start = np.concatenate(([0], np.cumsum(counts)[:-1])) if len(kept) else counts
        for column in (self.cid, self.dim, self.iv_count, self.simple, self.alive,
                       self.lo_cell, self.hi_cell, self.hull_lo, self.hull_hi):
            column.replace(column.view()[kept])
        self.iv_start.replace(new_start)
        held = np.flatnonzero(self.row_count.view() > 0)
        self.first_row.data[held] = remap[self.first_row.data[held]]
        del iv_owner
        return remap

    # -- the exact test ----------------------------------------------------------------

    def hold(self, rows: np.ndarray, f: np.ndarray, d: np.ndarray) -> np.ndarray:
        """Whether each value (key ``f``, ``d``) lies in an interval of its row: exact
        for numbers and booleans. Cost O(the rows' intervals), vectorised."""
        owner, iv = expand_ranges(self.iv_start.data[rows], self.iv_count.data[rows])
        vf, vd = f[owner], d[owner]
        lf, ld, lm = self.lo_f.data[iv], self.lo_d.data[iv], self.lo_mode.data[iv]
        hf, hd, hm = self.hi_f.data[iv], self.hi_d.data[iv], self.hi_mode.data[iv]
        above = (vf > lf) | ((vf == lf) & (vd > ld))
        at_lo = (vf == lf) & (vd == ld)
        below = (vf < hf) | ((vf == hf) & (vd < hd))
        at_hi = (vf == hf) & (vd == hd)
        inside = ((lm == NONE) | above | ((lm == CLOSED) & at_lo)) & (
            (hm == NONE) | below | ((hm == CLOSED) & at_hi))
        return np.bincount(owner[inside], minlength=len(rows)) > 0

    # -- bookkeeping -------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in (
            self.cid, self.dim, self.iv_start, self.iv_count, self.simple, self.alive,
            self.lo_cell, self.hi_cell, self.hull_lo, self.hull_hi, self.lo_f, self.lo_d,
            self.lo_mode, self.hi_f, self.hi_d, self.hi_mode, self.first_row,
            self.row_count))

    def check(self, alive_cids: np.ndarray) -> None:
        """Assert that the live rows are exactly the rows of the live conjuncts."""
        alive = self.alive.view()
        assert self.live_rows == int(alive.sum())
        rows = self.rows_of(alive_cids) if len(alive_cids) else np.empty(0, np.int64)
        assert np.array_equal(np.sort(rows), np.flatnonzero(alive)), "rows of live conjuncts"
        assert (self.cid.view()[rows] == np.repeat(
            alive_cids, self.row_count.data[alive_cids])).all()
