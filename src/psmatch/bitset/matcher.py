"""The ``bitset`` matcher: per-cell fail bitsets over conjunct ids, after Rein and HEM.

Owns :class:`BitsetMatcher`, the family's life cycle and matching on top of the shared
pipeline (:mod:`psmatch.core.pipeline`):

* **filing** a conjunct appends its predicates' rows (:mod:`psmatch.bitset.rows`) and
  hands each to its dimension (:mod:`psmatch.bitset.cells`), which files it lazily at
  the next read; its id's bit leaves the *void* bitset (ids that are not live);
* **matching** a chunk of events: per event, the void bitset ORed with one fail row per
  dense dimension (the event's cell there, or the absent row when it lacks the
  attribute or holds another kind), in blocks of words shared by up to
  :data:`EVENTS_AT_ONCE` events; the clear bits are the *candidates*. A candidate with
  predicates on sparse dimensions must have the event carry all of them (counted).
  Then each predicate of a candidate is decided by its cell, or tested exactly where
  the cell holds one of its bounds (or it has several intervals); a conjunct with a
  string or pattern predicate is left to the registry's residual check
  (``Conjunct.evaluate``), since string keys are only monotone;
* **removal** clears the conjuncts' bits at once and sets their void bits; the purge
  compacts the rows.

Cost per event: O(dense dimensions x ids / 64) word operations (numpy, in blocks that
stay in cache), plus the rows of present sparse dimensions, plus O(predicates) per
candidate, exact tests vectorised over the chunk. Memory: at most
:data:`psmatch.bitset.cells.BITS_PER_ROW` bits of fail bitsets per predicate (cells are
bounded by rows, see :mod:`psmatch.bitset.cells`), one bit per id for the void set,
and about 46 bytes per predicate and 22 per interval in the rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain, repeat
from typing import Any

import numpy as np

from psmatch.bitset.cells import Dimension, clear_bits, set_bits
from psmatch.bitset.rows import PredicateRows, bound_keys
from psmatch.core.columns import GrowableArray, expand_ranges, find_sorted
from psmatch.core.matcher import MatcherStats
from psmatch.core.pipeline import Batch, Candidates, ColumnarMatcher
from psmatch.events import FlatEvent
from psmatch.language import KIND_OF_CLASS, KIND_OF_CODE, Kind
from psmatch.language.columns import ConjunctColumns

EVENTS_AT_ONCE = 64
"""Events whose fail bitsets are ORed together, a block of words at a time."""
BLOCK_WORDS = 1 << 16
"""Words of the per-event accumulators of one block (512 KiB, about a core's L2)."""
DIMENSION_BYTES = 300
"""Estimated bytes of a dimension's Python objects and its entry in the index map."""


@dataclass(slots=True)
class BitsetBatch(Batch):
    """A batch with every (event, dimension) value located in its cells."""

    dense: list[tuple[Dimension, np.ndarray]] = field(default_factory=list)
    """Per dense dimension, each event's cell there (its absent row when it has none)."""
    sparse: list[tuple[Dimension, np.ndarray]] = field(default_factory=list)
    """Per sparse dimension, the events carrying it (sorted)."""
    keys: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    """``event x dimensions + dimension`` of every present value, sorted."""
    cell: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    f: np.ndarray = field(default_factory=lambda: np.empty(0, np.float64))
    d: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))


class BitsetMatcher(ColumnarMatcher):
    """Fail bitsets per cell of each (attribute, kind), exact tests at the bounds."""

    name = "bitset"

    def __init__(self) -> None:
        super().__init__()
        self.table = PredicateRows()
        self.dims: list[Dimension] = []
        self.dim_of: dict[tuple[str, Kind], int] = {}
        self.words = 1
        self.void = np.full(1, ~np.uint64(0), dtype=np.uint64)
        self.sparse_n = GrowableArray(np.int32)  # per cid: predicates on sparse dimensions
        self._dirty: set[int] = set()
        self._cuts: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.work = {"events": 0, "words": 0, "candidates": 0, "tested": 0}
        """What matching did, summed: events, bitset words ORed, candidate pairs (before
        the exact tests) and rows tested exactly; tests count costs with it."""

    # -- life cycle --------------------------------------------------------------------

    def _dimension(self, attribute: str, kind: Kind) -> int:
        index = self.dim_of.get((attribute, kind))
        if index is None:
            index = self.dim_of[attribute, kind] = len(self.dims)
            self.dims.append(Dimension(attribute, kind))
        return index

    def _file_columns(self, cids: np.ndarray, columns: ConjunctColumns) -> np.ndarray:
        """File new conjuncts given as columns; returns the mask of residual ones. Cost
        O(predicates + intervals) in numpy passes and C loops (a dictionary probe per
        predicate for its dimension)."""
        dims = self._dimensions(columns.attribute, columns.kind)
        rows, residual = self.table.append(cids, columns, dims)
        self._reserve(len(self.registry))
        clear_bits(self.void[None, :], cids)
        self.sparse_n.grow_to(len(self.registry), 0)
        self.sparse_n.data[cids] = 0
        self._hand_out(rows, dims, lambda dim, r: dim.add(r))
        return residual

    def _dimensions(self, attributes: list[str], kinds: np.ndarray) -> np.ndarray:
        """The dimension of each (attribute, kind), new ones made. O(pairs): a
        dictionary probe each, by attribute within each kind."""
        dims = np.empty(len(attributes), dtype=np.int64)
        for code in np.unique(kinds).tolist():
            kind = KIND_OF_CODE[code]
            at = None if kinds[0] == kinds[-1] == code and (kinds == code).all() else (
                np.flatnonzero(kinds == code))
            names = attributes if at is None else [attributes[i] for i in at.tolist()]
            for name in dict.fromkeys(names):  # new ones in the order first met
                self._dimension(name, kind)
            index = {a: i for (a, k), i in self.dim_of.items() if k is kind}
            found = np.fromiter(map(index.__getitem__, names), np.int64, len(names))
            if at is None:
                dims[:] = found
            else:
                dims[at] = found
        return dims

    def _hand_out(self, rows: np.ndarray, dims: np.ndarray, give: Any) -> None:
        """Give each dimension its rows (grouped by one stable sort)."""
        if not len(rows):
            return
        order = np.argsort(dims, kind="stable")
        sorted_dims = dims[order]
        starts = np.flatnonzero(np.diff(sorted_dims, prepend=-1))
        for a, b in zip(starts.tolist(), [*starts[1:].tolist(), len(order)], strict=True):
            index = int(sorted_dims[a])
            give(self.dims[index], rows[order[a:b]])
            self._dirty.add(index)

    def _reserve(self, ids: int) -> None:
        """Widen every bitset to hold ``ids`` conjunct ids, by a quarter at least:
        amortised O(1) copies of each word, and the capacity stays within a quarter of
        the ids (churn keeps up to a ninth of them dead until the purge)."""
        if ids <= 64 * self.words:
            return
        words = max(self.words + self.words // 4, -(-ids // 64))
        void = np.full(words, ~np.uint64(0), dtype=np.uint64)
        void[: self.words] = self.void
        self.void, self.words = void, words
        for dim in self.dims:
            dim.grow(words)
        self._dirty.update(range(len(self.dims)))

    def _unfile(self, cids: np.ndarray) -> None:
        table = self.table
        rows = table.kill(cids)
        self._hand_out(rows, table.dim.data[rows].astype(np.int64),
                       lambda dim, r: dim.remove(table, r))
        set_bits(self.void[None, :], np.zeros(len(cids), np.int64), cids)

    def _purge(self) -> None:
        remap = self.table.compact()
        for dim in self.dims:
            dim.remap(self.table, remap)

    def _refresh(self) -> None:
        """File what the dimensions hold pending; re-cut those due."""
        sparse_n = self.sparse_n.data
        if self._dirty:
            self._cuts = None
        for index in sorted(self._dirty):
            up, down = self.dims[index].refresh(self.table, self.words)
            sparse_n[up] += 1
            sparse_n[down] -= 1
        self._dirty.clear()

    def _finish_bulk(self) -> None:
        self._refresh()

    # -- matching ----------------------------------------------------------------------

    def _begin(self, events: list[FlatEvent]) -> BitsetBatch:
        """Refresh, then locate every event's values: their keys and cells per
        dimension. Cost O(pairs) in C loops and a few numpy passes (the cells of every
        dimension by one search of all cuts), one Python step per string value and per
        int past 2**53."""
        self._refresh()
        batch = BitsetBatch(events, 0)
        attributes = chain.from_iterable(events)
        values = list(chain.from_iterable(map(dict.values, events)))
        kinds = list(map(KIND_OF_CLASS.__getitem__, map(type, values)))
        index = np.fromiter(map(self.dim_of.get, zip(attributes, kinds, strict=True),
                                repeat(-1)), dtype=np.int64, count=len(values))
        rows = np.repeat(np.arange(len(events), dtype=np.int64), list(map(len, events)))
        kept = np.flatnonzero(index >= 0)
        rows, index = rows[kept], index[kept]
        kept_values = [values[i] for i in kept.tolist()]
        strings = np.fromiter((kinds[i] is Kind.STRING for i in kept.tolist()), np.bool_,
                              len(kept))
        f, d = np.zeros(len(kept)), np.zeros(len(kept), dtype=np.int64)
        for kind, at in ((Kind.NUMBER, np.flatnonzero(~strings)),
                         (Kind.STRING, np.flatnonzero(strings))):
            if len(at):
                f[at], d[at] = bound_keys([kept_values[i] for i in at.tolist()], kind)
        cuts, offsets, dense_at = self._all_cuts()
        cell = np.zeros(len(kept), dtype=np.int64)
        on_dense = dense_at[index] >= 0
        if on_dense.any():
            place = np.searchsorted(cuts, index[on_dense] + 1j * f[on_dense], side="right")
            cell[on_dense] = place - offsets[index[on_dense]]
        dense = [i for i, dim in enumerate(self.dims) if dim.dense]
        table = np.repeat(np.array([self.dims[i].cells for i in dense], np.int64)[:, None],
                          len(events), axis=1)
        table[dense_at[index[on_dense]], rows[on_dense]] = cell[on_dense]
        batch.dense = [(self.dims[i], table[j]) for j, i in enumerate(dense)]
        sparse = np.flatnonzero(~on_dense)
        if len(sparse):
            order = sparse[np.argsort(index[sparse], kind="stable")]
            starts = np.flatnonzero(np.diff(index[order], prepend=-1))
            for a, b in zip(starts.tolist(), [*starts[1:].tolist(), len(order)], strict=True):
                dim = self.dims[int(index[order[a]])]
                if dim.live:
                    batch.sparse.append((dim, rows[order[a:b]]))
        order = np.argsort(rows * max(len(self.dims), 1) + index)
        batch.keys = (rows * max(len(self.dims), 1) + index)[order]
        batch.cell, batch.f, batch.d = cell[order], f[order], d[order]
        return batch

    def _all_cuts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every dense dimension's cuts as one sorted complex column (dimension + 1j x
        cut: numpy orders complex numbers lexicographically), where each dimension's
        start is, and each dimension's position among the dense ones (-1: sparse).
        Rebuilt after a refresh changed a cut. O(cuts)."""
        if self._cuts is None:
            dense_at = np.full(max(len(self.dims), 1), -1, dtype=np.int64)
            parts, offsets, total = [], np.zeros(max(len(self.dims), 1), np.int64), 0
            for i, dim in enumerate(self.dims):
                offsets[i] = total
                if dim.dense:
                    dense_at[i] = len(parts)
                    parts.append(i + 1j * dim.cuts)
                    total += len(dim.cuts)
            cuts = np.concatenate(parts) if parts else np.empty(0, np.complex128)
            self._cuts = (cuts.astype(np.complex128), offsets, dense_at)
        return self._cuts

    def _candidates(self, batch: Batch, first: int, last: int) -> Candidates:
        assert isinstance(batch, BitsetBatch)
        found_e, found_c = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
        for start in range(first, last, EVENTS_AT_ONCE):
            end = min(last, start + EVENTS_AT_ONCE)
            e, c = self._clear_bits(batch, start, end)
            found_e.append(e + (start - first))
            found_c.append(c)
        events, cids = np.concatenate(found_e), np.concatenate(found_c)
        events, cids = self._count_sparse(batch, first, last, events, cids)
        work = self.work
        work["events"] += last - first
        work["words"] += (last - first) * self.words * (len(batch.dense) + 1)
        work["candidates"] += len(events)
        events, cids, tested = self._decide(batch, first, events, cids)
        work["tested"] += tested
        return Candidates(events, cids, len(events) + tested + (last - first))

    def _clear_bits(self, batch: BitsetBatch, start: int, end: int
                    ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """The (event - start, cid) pairs no fail bitset of the events marks."""
        n = end - start
        width = max(64, BLOCK_WORDS // n)
        found_e, found_c = [], []
        for w0 in range(0, self.words, width):
            w1 = min(self.words, w0 + width)
            acc = np.repeat(self.void[None, w0:w1], n, axis=0)
            for dim, cells in batch.dense:
                assert dim.fail is not None
                acc |= dim.fail[cells[start:end], w0:w1]
            np.invert(acc, out=acc)
            rows, words = np.nonzero(acc)
            if not len(rows):
                continue
            bits = np.unpackbits(acc[rows, words].view(np.uint8).reshape(-1, 8), axis=1,
                                 bitorder="little")
            at, bit = np.nonzero(bits)
            found_e.append(rows[at].astype(np.int64))
            found_c.append((w0 + words[at].astype(np.int64)) * 64 + bit)
        if not found_e:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return np.concatenate(found_e), np.concatenate(found_c)

    def _count_sparse(self, batch: BitsetBatch, first: int, last: int, events: np.ndarray,
                      cids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Keep the candidates whose every sparse predicate's dimension the event
        carries: the (event, cid) pairs of the present sparse dimensions counted
        against each conjunct's number of them. O(those pairs)."""
        needs = self.sparse_n.data[cids] > 0
        if not needs.any():
            return events, cids
        width = 64 * self.words
        pairs = [np.empty(0, np.int64)]
        for dim, rows in batch.sparse:
            lo, hi = np.searchsorted(rows, (first, last))
            if hi > lo and len(dim.sparse_cids):
                pairs.append(((rows[lo:hi] - first)[:, None] * width
                              + dim.sparse_cids[None, :]).ravel())
        held, counts = np.unique(np.concatenate(pairs), return_counts=True)
        complete = held[counts == self.sparse_n.data[held % width]]
        _, ok = find_sorted(complete, events[needs] * width + cids[needs])
        keep = ~needs
        keep[np.flatnonzero(needs)[ok]] = True
        return events[keep], cids[keep]

    def _decide(self, batch: BitsetBatch, first: int, events: np.ndarray,
                cids: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """Drop the candidates a predicate fails: each row of a conjunct decided by
        numbers and booleans is decided by the event's cell, or tested exactly where
        the cell holds one of its bounds. Residual conjuncts pass untested (the
        registry evaluates them). Returns the pairs kept and the rows tested."""
        exact = np.flatnonzero(~self.registry.residual.data[cids])
        if not len(exact):
            return events, cids, 0
        table = self.table
        owner, rows = expand_ranges(table.first_row.data[cids[exact]],
                                    table.row_count.data[cids[exact]])
        wanted = (events[exact[owner]] + first) * max(len(self.dims), 1) + table.dim.data[rows]
        at = np.searchsorted(batch.keys, wanted)
        cell = batch.cell[at]
        sure = table.simple.data[rows] & (table.lo_cell.data[rows] < cell) & (
            cell < table.hi_cell.data[rows])
        test = np.flatnonzero(~sure)
        holds = table.hold(rows[test], batch.f[at[test]], batch.d[at[test]])
        keep = np.ones(len(cids), dtype=bool)
        keep[exact[owner[test[~holds]]]] = False
        return events[keep], cids[keep], len(test)

    # -- bookkeeping -------------------------------------------------------------------

    def _stats(self) -> MatcherStats:
        self._refresh()
        return super()._stats()

    def _structure_bytes(self) -> int:
        return (self.table.nbytes + sum(dim.nbytes for dim in self.dims) + self.void.nbytes
                + self.sparse_n.nbytes + DIMENSION_BYTES * len(self.dims))

    def layout(self) -> list[dict[str, Any]]:
        """Per dimension: attribute, kind, live predicates, cells (0: sparse) and bytes
        of its bitsets, for tuning and the benchmark's notes (staged adds filed)."""
        self._file_staged()
        self._refresh()
        return [{"attribute": dim.attribute, "kind": dim.kind.name.lower(),
                 "predicates": dim.live, "cells": dim.cells if dim.dense else 0,
                 "bitset_bytes": 0 if dim.fail is None else int(dim.fail.nbytes)}
                for dim in self.dims]

    def _check(self) -> None:
        super()._check()
        self._refresh()
        alive = self.registry.alive.view()
        live = np.flatnonzero(alive)
        self.table.check(live)
        assert len(self.registry) <= 64 * self.words
        void = np.unpackbits(self.void.view(np.uint8), bitorder="little").astype(bool)
        assert np.array_equal(~void[: len(alive)], alive), "void bits are not the dead ids"
        assert void[len(alive):].all()
        assert all(self.dim_of[dim.attribute, dim.kind] == i for i, dim in enumerate(self.dims))
        sparse = np.zeros(len(alive), dtype=np.int64)
        for dim in self.dims:
            dim.check(self.table, self.words)
            if not dim.dense:
                cids = self.table.cid.data[dim.rows[self.table.alive.data[dim.rows]]]
                sparse[cids] += 1
        assert np.array_equal(self.sparse_n.view()[live], sparse[live]), "sparse counts"
        assert sum(dim.live for dim in self.dims) == self.table.live_rows
