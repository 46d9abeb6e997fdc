"""OpIndex's level 2: the operator lists and the directory of (pivot, attribute) blocks.

The ``=``, ``>=`` and ``<=`` lists of every block are one sorted run of ``int64`` keys
``block << 32 | threshold`` (:class:`EntryRun`), kept as a sorted *main* run beside a small
unsorted *delta* that is sorted lazily and merged into main once it exceeds an eighth of
it (:class:`OperatorLists`); the :class:`Directory` maps (pivot, attribute) to its row,
whose blocks are ``3 * row + operator``, and holds the ``=`` segments' 64-bit signatures.
The matcher, :mod:`psmatch.baselines.opindex`, owns level 1 and the counting.
"""

from __future__ import annotations

import numpy as np

from psmatch.core.columns import GrowableArray

EQ, GE, LE = 0, 1, 2
"""The operator lists; a block id is ``3 * directory row + operator``."""
UNBOUNDED = np.int64(2**31 - 1)
"""Threshold of an always-true ``<=`` entry: above every position."""
DELTA_MIN = 4096
"""The delta run is merged into main once it exceeds this and an eighth of main."""
SIGNATURE_HASH = np.uint64(0x9E3779B97F4A7C15)


def signature_bit(sids: np.ndarray) -> np.ndarray:
    """The signature bit of an ``=`` operand, from its point space's id."""
    return np.uint64(1) << ((sids.astype(np.uint64) * SIGNATURE_HASH) >> np.uint64(58))


def entry_keys(block: np.ndarray, bid: np.ndarray, offset: np.ndarray,
               bound_rank: np.ndarray) -> np.ndarray:
    """The keys ``block << 32 | threshold`` of entries under the forest's ``bound_rank``."""
    threshold = 2 * bound_rank[np.maximum(bid, 0)].astype(np.int64) + offset
    return (block << 32) | np.where(bid < 0, UNBOUNDED, threshold)


class EntryRun:
    """One sorted run of list entries, keyed ``block << 32 | threshold``.

    The threshold of an entry on bound ``bid`` is ``2 rank(bid) + offset`` (offset 1 for
    ``=`` and closed ends, 2 for an open ``>=``, 0 for an open ``<=``).
    """

    def __init__(self, block: np.ndarray, bid: np.ndarray, offset: np.ndarray,
                 cid: np.ndarray, bound_rank: np.ndarray) -> None:
        key = entry_keys(block, bid, offset, bound_rank)
        order = np.argsort(key, kind="stable")
        self.key = key[order]
        self.block = block[order]
        self.bid = bid[order]
        self.offset = offset[order]
        self.cid = cid[order]

    def __len__(self) -> int:
        return len(self.key)

    def rekey(self, bound_rank: np.ndarray, alive: np.ndarray) -> None:
        """Recompute the thresholds after rank changes. O(n).

        Live entries keep their order (their bounds are still referenced, and new or
        released values never reorder the others); a dead entry's bound may be gone, so
        it takes the key before it, which keeps the run sorted.
        """
        fresh = entry_keys(self.block, self.bid, self.offset, bound_rank)
        fresh[~alive[self.cid]] = -1
        self.key = np.maximum.accumulate(fresh) if len(fresh) else fresh

    def ranges(self, op: int, rows: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """First entry and entry count matching each (directory row, position) query."""
        head = (3 * rows + op) << 32
        if op == EQ:
            lo = np.searchsorted(self.key, head | pos)
            hi = np.searchsorted(self.key, (head | pos) + 1)
        elif op == GE:  # thresholds <= pos
            lo = np.searchsorted(self.key, head)
            hi = np.searchsorted(self.key, (head | pos) + 1)
        else:  # LE: thresholds >= pos
            lo = np.searchsorted(self.key, head | pos)
            hi = np.searchsorted(self.key, head + (1 << 32))
        return lo, hi - lo

    @property
    def nbytes(self) -> int:
        return int(self.key.nbytes + self.block.nbytes + self.bid.nbytes + self.offset.nbytes
                   + self.cid.nbytes)


def new_delta() -> list[GrowableArray]:
    """Columns of the unsorted delta: block, bound id, threshold offset, cid."""
    return [GrowableArray(np.int64) for _ in range(4)]


def empty_run() -> EntryRun:
    empty = np.zeros(0, dtype=np.int64)
    return EntryRun(empty, empty, empty, empty, empty)


class OperatorLists:
    """Every block's entries: the sorted ``main`` run and the unsorted ``delta`` columns
    (block, bound id, threshold offset, cid), sorted lazily into one more run.

    ``version`` is the forest's version (:attr:`psmatch.pstree.forest.Forest.version`)
    whose ranks main's keys were made with: when it changes, main is rekeyed in O(n)
    before the next search.
    """

    def __init__(self, version: int) -> None:
        self.main = empty_run()
        self.delta = new_delta()
        self.delta_run: EntryRun | None = None
        self.version = version

    def append(self, block: np.ndarray, bid: np.ndarray, offset: np.ndarray,
               cid: np.ndarray) -> None:
        """Add entries to the delta. O(entries) amortised."""
        for column, values in zip(self.delta, (block, bid, offset, cid), strict=True):
            column.extend(values)
        self.delta_run = None

    def entries(self) -> tuple[np.ndarray, ...]:
        """Block, bound id, threshold offset and cid of every entry, main's then the
        delta's (dead conjuncts' entries included until a rebuild). O(n)."""
        main = self.main
        return tuple(np.concatenate([part, column.view()]) for part, column in
                     zip((main.block, main.bid, main.offset, main.cid), self.delta, strict=True))

    def rebuild(self, keep: np.ndarray | None, bound_rank: np.ndarray, version: int) -> None:
        """One main run of the entries (those ``keep`` marks, when given) and an empty
        delta. O(n log n)."""
        block, bid, offset, cid = self.entries()
        if keep is not None:
            block, bid, offset, cid = block[keep], bid[keep], offset[keep], cid[keep]
        self.main = EntryRun(block, bid, offset, cid, bound_rank)
        self.delta = new_delta()
        self.delta_run = None
        self.version = version

    def runs(self, bound_rank: np.ndarray, version: int, alive: np.ndarray) -> list[EntryRun]:
        """The sorted runs to search, brought up to date with inserts and rank changes:
        the delta merged into main once it exceeds :data:`DELTA_MIN` and an eighth of
        main, main rekeyed when the ranks changed (``alive``: per cid, whether its
        entries are live), the delta sorted."""
        if len(self.delta[0]) > max(DELTA_MIN, len(self.main) // 8):
            self.rebuild(None, bound_rank, version)
        if self.version != version:
            self.main.rekey(bound_rank, alive)
            self.delta_run = None
            self.version = version
        if self.delta_run is None:
            self.delta_run = EntryRun(*(c.view() for c in self.delta), bound_rank)
        return [run for run in (self.main, self.delta_run) if len(run)]

    @property
    def nbytes(self) -> int:
        return self.main.nbytes + sum(c.nbytes for c in self.delta)

    def check(self) -> None:
        """Assert the runs are sorted and the threshold offsets in range."""
        _, _, offset, _ = self.entries()
        assert ((offset >= 0) & (offset <= 2)).all()
        for run in (self.main, self.delta_run):
            if run is not None and len(run):
                assert (np.diff(run.key) >= 0).all(), "run not sorted"


class Directory:
    """The rows of the (pivot, attribute) pairs that have entries: ``row_of`` maps the
    key ``pivot << 32 | attribute tree`` to its row (rows are never removed), ``row_tree``
    gives each row's attribute tree and ``signature`` its ``=`` segment's signature."""

    def __init__(self) -> None:
        self.row_of: dict[int, int] = {}
        self.row_tree = GrowableArray(np.int64)
        self.signature = GrowableArray(np.uint64)
        self._keys = np.empty(0, dtype=np.int64)  # sorted keys of row_of
        self._rows = np.empty(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.row_of)

    def rows_of(self, keys: np.ndarray) -> np.ndarray:
        """Rows of (pivot << 32 | attribute) keys, creating the new ones. O(distinct keys)
        dict steps."""
        unique, inverse = np.unique(keys, return_inverse=True)
        rows = np.empty(len(unique), dtype=np.int64)
        for i, key in enumerate(unique.tolist()):
            row = self.row_of.get(key)
            if row is None:
                row = self.row_of[key] = len(self.row_of)
                self.row_tree.append(key & 0xFFFFFFFF)
                self.signature.append(0)
            rows[i] = row
        return rows[inverse.ravel()]

    def sorted(self) -> tuple[np.ndarray, np.ndarray]:
        """The directory's keys, sorted, and their rows; rebuilt when rows were added.
        O(rows log rows) then, O(1) otherwise."""
        if len(self._keys) != len(self.row_of):
            keys = np.fromiter(self.row_of.keys(), dtype=np.int64, count=len(self.row_of))
            rows = np.fromiter(self.row_of.values(), dtype=np.int64, count=len(self.row_of))
            order = np.argsort(keys)
            self._keys, self._rows = keys[order], rows[order]
        return self._keys, self._rows

    def pivots(self) -> np.ndarray:
        """The pivot tree of each row."""
        row_pivot = np.zeros(len(self.row_of), dtype=np.int64)
        for key, row in self.row_of.items():
            row_pivot[row] = key >> 32
        return row_pivot

    @property
    def nbytes(self) -> int:
        # A row's dict entry with its int key and value: ~100 bytes.
        return int(self._keys.nbytes + self._rows.nbytes + self.signature.nbytes
                   + 100 * len(self.row_of))

    def check(self) -> None:
        """Assert each row's tree is its key's attribute."""
        for key, row in self.row_of.items():
            assert self.row_tree.data[row] == key & 0xFFFFFFFF
