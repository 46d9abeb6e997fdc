"""One dimension of the bitset family: a domain cut into cells, and per cell the
conjuncts a value there cannot satisfy.

A *dimension* is an (attribute, kind) pair of the filed predicates. Its domain is cut
into at most :data:`MAX_CELLS` cells by *cuts* drawn from the quantiles of its rows'
hull bounds (the keys' ``f``, :mod:`psmatch.bitset.keys`): cell ``c`` holds the values
with ``cuts[c - 1] <= f < cuts[c]``. A *dense* dimension keeps a bitset over conjunct
ids per cell (Rein, Qian et al., INFOCOM 2014; HEM, Shi & Qian, DASFAA 2022), one row
of ``fail``:

* ``fail[c]`` marks the conjuncts whose predicate here a value in cell ``c`` cannot
  satisfy: the cell lies wholly below the hull's lower bound or above its upper one, or
  (an ``in`` list, ``not between``) between its intervals;
* ``fail[C]`` (one past the cells) marks every conjunct with a predicate here: what an
  event lacking the attribute, or holding a value of another kind, fails (a predicate
  on a missing attribute is not true, :mod:`psmatch.language`).

An event ORs one row per dense dimension. A row's predicate is decided by its cell
except in the cells of its bounds (``lo_cell``, ``hi_cell``) and, for a predicate of
several intervals or with patterns, in every cell its hull meets: there the matcher
tests it exactly (:meth:`psmatch.bitset.rows.PredicateRows.hold`).

Memory is bounded by the rows: a dimension has at most ``BITS_PER_ROW x rows / ids``
cells (``ids`` the conjunct-id capacity), so its bitsets hold at most
:data:`BITS_PER_ROW` bits per row. One with fewer than 2 cells' worth is *sparse*: no
bitsets, only the conjunct ids of its rows, which the matcher counts against the
events that carry it (a conjunct with predicates on sparse dimensions is a candidate
when the event carries all of them).

Changes are lazy (:meth:`Dimension.refresh`, before the next match): new rows are filed
into the existing cells (O(cells) bits each), removed ones cleared at once; the
dimension is *re-cut* from scratch when its rows doubled or fell to a quarter since
the last cut, when the id capacity doubled, or when a cell holds more than
:data:`SKEW` times its share of bounds. A re-cut costs O(rows log rows + cells x ids /
64) words: amortised over the rows added since the last, O(log rows + BITS_PER_ROW /
64) per row.
"""

from __future__ import annotations

import numpy as np

from psmatch.bitset.rows import NONE, UNBOUNDED, PredicateRows
from psmatch.core.columns import expand_ranges
from psmatch.language import Kind

MAX_CELLS = 128
"""Most cells of a dimension."""
BITS_PER_ROW = 512
"""Most bits of fail bitsets per row of a dimension (the cells' budget)."""
SKEW = 4
"""A cell holding more than this many times its share of the bounds re-cuts its
dimension."""
COMPLEX_CHUNK = 1 << 15
"""Rows of several intervals whose touched cells are tabled at once."""


def set_bits(fail: np.ndarray, cells: np.ndarray, cids: np.ndarray) -> None:
    """Set the bits of ``cids`` in the rows ``cells`` of ``fail``. O(pairs)."""
    if len(cids):
        np.bitwise_or.at(fail, (cells, cids >> 6),
                         np.left_shift(np.uint64(1), (cids & 63).astype(np.uint64)))


def clear_bits(fail: np.ndarray, cids: np.ndarray) -> None:
    """Clear the bits of ``cids`` in every row of ``fail``. O(rows x distinct words)."""
    if not len(cids):
        return
    words = cids >> 6
    mask = np.zeros(fail.shape[1], dtype=np.uint64)
    np.bitwise_or.at(mask, words, np.left_shift(np.uint64(1), (cids & 63).astype(np.uint64)))
    touched = np.unique(words)
    fail[:, touched] &= ~mask[touched]


class Dimension:
    """The cells of one (attribute, kind) and their fail bitsets (or sparse ids)."""

    def __init__(self, attribute: str, kind: Kind) -> None:
        self.attribute = attribute
        self.kind = kind
        self.cuts = np.empty(0, dtype=np.float64)
        self.fail: np.ndarray | None = None  # (cells + 1, words) uint64 when dense
        self.rows = np.empty(0, dtype=np.int64)  # filed rows (dead ones until purged)
        self.pending: list[np.ndarray] = []  # rows to file at the next refresh
        self.sparse_cids = np.empty(0, dtype=np.int64)  # when sparse: cids of the rows
        self.bounds = np.zeros(1, dtype=np.int64)  # bounds of the filed rows per cell
        self.live = 0  # live rows, filed or pending
        self.rows_at_cut = 0
        self.words_at_cut = 0

    @property
    def cells(self) -> int:
        return len(self.cuts) + 1

    @property
    def dense(self) -> bool:
        return self.fail is not None

    def cell_of(self, f: np.ndarray) -> np.ndarray:
        """The cells of values with keys' ``f``. O(log cells) each."""
        return np.searchsorted(self.cuts, f, side="right")

    # -- changes -----------------------------------------------------------------------

    def add(self, rows: np.ndarray) -> None:
        """Take new rows, filed at the next refresh. O(1)."""
        self.pending.append(rows)
        self.live += len(rows)

    def remove(self, table: PredicateRows, rows: np.ndarray) -> None:
        """Forget dead rows: their bits are cleared now (a sparse dimension's ids go at
        the purge: dead conjuncts are never candidates). O(cells x their words)."""
        self.live -= len(rows)
        if self.fail is not None:
            clear_bits(self.fail, table.cid.data[rows])

    def grow(self, words: int) -> None:
        """Widen the bitsets to ``words`` words of conjunct ids. O(cells x words)."""
        if self.fail is not None and self.fail.shape[1] < words:
            grown = np.zeros((self.fail.shape[0], words), dtype=np.uint64)
            grown[:, : self.fail.shape[1]] = self.fail
            self.fail = grown

    def refresh(self, table: PredicateRows, words: int) -> tuple[np.ndarray, np.ndarray]:
        """File the pending rows, re-cutting the domain when due (see the module
        docstring). Returns the cids whose count of sparse predicates goes up by one
        and those whose count goes down by one (a re-cut hands back every id it
        counted: the dead ones' counts are reset when their ids are reused)."""
        pending = (np.concatenate(self.pending) if self.pending
                   else np.empty(0, dtype=np.int64))
        self.pending = []
        pending = pending[table.alive.data[pending]]
        due = (self.rows_at_cut == 0 or self.live > 2 * self.rows_at_cut
               or 4 * self.live < self.rows_at_cut or words > 2 * self.words_at_cut)
        if not due and self.fail is not None and len(pending):
            lo, hi = self._row_cells(table, pending)
            counts = self.bounds + self._bound_counts(lo, hi)
            share = 2 * self.rows_at_cut / self.cells
            due = counts.max() > SKEW * share + 8
        if due:
            return self._recut(table, words, pending)
        self.rows = np.concatenate((self.rows, pending))
        if self.fail is None:
            table.lo_cell.data[pending], table.hi_cell.data[pending] = self._row_cells(
                table, pending)
            cids = table.cid.data[pending]
            self.sparse_cids = np.concatenate((self.sparse_cids, cids))
            return cids, np.empty(0, dtype=np.int64)
        self._file(table, pending)
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)

    def _recut(self, table: PredicateRows, words: int,
               pending: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        was_sparse = self.sparse_cids
        rows = np.concatenate((self.rows, pending))
        self.rows = rows = rows[table.alive.data[rows]]
        self.rows_at_cut, self.words_at_cut = len(rows), words
        self.sparse_cids = np.empty(0, dtype=np.int64)
        target = min(MAX_CELLS, BITS_PER_ROW * len(rows) // (64 * words))
        if target < 2:
            self.cuts, self.fail = np.empty(0, dtype=np.float64), None
            self.bounds = np.zeros(1, dtype=np.int64)
            table.lo_cell.data[rows], table.hi_cell.data[rows] = self._row_cells(table, rows)
            self.sparse_cids = table.cid.data[rows]
            return self.sparse_cids, was_sparse
        bounds = np.concatenate((table.hull_lo.data[rows], table.hull_hi.data[rows]))
        bounds = np.sort(bounds[np.isfinite(bounds)])
        if len(bounds):
            self.cuts = np.unique(bounds[(np.arange(1, target) * len(bounds)) // target])
        else:
            self.cuts = np.empty(0, dtype=np.float64)
        self.fail = np.zeros((self.cells + 1, words), dtype=np.uint64)
        self.bounds = np.zeros(self.cells, dtype=np.int64)
        self._file(table, rows, fresh=True)
        return np.empty(0, dtype=np.int64), was_sparse

    def _row_cells(self, table: PredicateRows, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The cells of the rows' hull bounds: -1 below every cell for no lower bound,
        :data:`UNBOUNDED` for no upper one."""
        lo, hi = table.hull_lo.data[rows], table.hull_hi.data[rows]
        lo_cell = np.where(lo == -np.inf, -1, self.cell_of(lo)).astype(np.int32)
        hi_cell = np.where(hi == np.inf, UNBOUNDED, self.cell_of(hi)).astype(np.int32)
        return lo_cell, hi_cell

    def _bound_counts(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        cells = self.cells
        return (np.bincount(lo[lo >= 0], minlength=cells)
                + np.bincount(hi[hi < cells], minlength=cells))[:cells]

    def _file(self, table: PredicateRows, rows: np.ndarray, fresh: bool = False) -> None:
        """Set the fail bits of ``rows`` (and their bit of the absent row); ``fresh``:
        the bitsets are empty, so the simple rows are filed by cumulative ORs over the
        cells, O(cells x words + rows), rather than O(cells) bits each."""
        fail = self.fail
        assert fail is not None
        cells = self.cells
        lo, hi = self._row_cells(table, rows)
        table.lo_cell.data[rows], table.hi_cell.data[rows] = lo, hi
        self.bounds += self._bound_counts(lo, hi)
        cids = table.cid.data[rows]
        set_bits(fail, np.full(len(cids), cells), cids)
        simple = table.simple.data[rows]
        s_cid, s_lo, s_hi = cids[simple], lo[simple], hi[simple]
        if fresh:
            # fail[c] = (rows with lo_cell > c) | (rows with hi_cell < c)
            words = fail.shape[1]
            starts = np.zeros((cells + 1, words), dtype=np.uint64)
            has = s_lo >= 1
            set_bits(starts, s_lo[has], s_cid[has])
            np.bitwise_or.accumulate(starts[::-1], axis=0, out=starts[::-1])
            fail[:cells] |= starts[1:]
            starts[:] = 0
            has = s_hi < cells - 1
            set_bits(starts, s_hi[has] + 1, s_cid[has])
            np.bitwise_or.accumulate(starts, axis=0, out=starts)
            fail[:cells] |= starts[:cells]
        else:
            below = np.clip(s_lo, 0, cells)  # cells 0 .. lo_cell - 1
            above = cells - 1 - np.clip(s_hi, -1, cells - 1)  # cells hi_cell + 1 ..
            owner, cell = expand_ranges(np.zeros(len(s_cid), np.int64), below)
            set_bits(fail, cell, s_cid[owner])
            owner, cell = expand_ranges(np.clip(s_hi, -1, cells - 1) + 1, above)
            set_bits(fail, cell, s_cid[owner])
        complex_rows = rows[~simple]
        for at in range(0, len(complex_rows), COMPLEX_CHUNK):
            self._file_complex(table, complex_rows[at:at + COMPLEX_CHUNK])

    def _file_complex(self, table: PredicateRows, rows: np.ndarray) -> None:
        """Fail bits of rows of several intervals (or patterns): every cell none of
        their intervals meets. O(rows x cells + intervals)."""
        fail = self.fail
        assert fail is not None
        cells = self.cells
        owner, iv = expand_ranges(table.iv_start.data[rows], table.iv_count.data[rows])
        lo = np.where(table.lo_mode.data[iv] == NONE, 0, self.cell_of(table.lo_f.data[iv]))
        hi = np.where(table.hi_mode.data[iv] == NONE, cells - 1,
                      self.cell_of(table.hi_f.data[iv]))
        touched = np.zeros((len(rows), cells + 1), dtype=np.int32)
        np.add.at(touched, (owner, lo), 1)
        np.add.at(touched, (owner, hi + 1), -1)
        met = np.cumsum(touched, axis=1)[:, :cells] > 0
        row, cell = np.nonzero(~met)
        set_bits(fail, cell, table.cid.data[rows][row])

    def remap(self, table: PredicateRows, remap: np.ndarray) -> None:
        """Follow a compaction of the row table (``remap``: old row id to new, -1 for a
        dropped one); a sparse dimension drops its dead ids. O(rows)."""
        rows = remap[self.rows]
        self.rows = rows[rows >= 0]
        self.pending = [p[p >= 0] for p in (remap[p] for p in self.pending)]
        if self.fail is None:
            self.sparse_cids = table.cid.data[self.rows]

    # -- bookkeeping -------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        return (self.cuts.nbytes + (0 if self.fail is None else self.fail.nbytes)
                + self.rows.nbytes + self.sparse_cids.nbytes + self.bounds.nbytes
                + sum(p.nbytes for p in self.pending) + 200)

    def check(self, table: PredicateRows, words: int) -> None:
        """Assert that the filed rows are the live ones and that the bitsets are
        exactly what filing them afresh gives (call after a refresh)."""
        assert not self.pending
        alive = table.alive.data[self.rows]
        live = self.rows[alive]
        assert len(live) == self.live, (self.attribute, len(live), self.live)
        assert (table.dim.data[live] == table.dim.data[live[:1]]).all()
        lo, hi = self._row_cells(table, live)
        assert (table.lo_cell.data[live] == lo).all() and (table.hi_cell.data[live] == hi).all()
        assert self.cells <= MAX_CELLS
        if self.fail is None:
            held = self.sparse_cids[table.row_count.data[self.sparse_cids] > 0]
            assert np.array_equal(np.sort(held), np.sort(table.cid.data[live]))
            return
        assert self.fail.shape == (self.cells + 1, words)
        assert 64 * self.words_at_cut * self.cells <= BITS_PER_ROW * self.rows_at_cut, (
            "the cells' bitsets exceed their budget of bits per row")
        expected = Dimension(self.attribute, self.kind)
        expected.cuts = self.cuts
        expected.fail = np.zeros_like(self.fail)
        expected.bounds = np.zeros(self.cells, dtype=np.int64)
        expected._file(table, live)
        assert np.array_equal(expected.fail, self.fail), f"fail bits of {self.attribute}"
