"""Sorted ``(constant, owner)`` entry lists: the papers' per-attribute ordered indexes.

Owns :class:`SortedEntries`, the columnar form of the ordered indexes of the two-phase
matchers (Le Subscribe's hash for ``=`` and trees for ranges, the B+tree leaf list and
the three lists of PB+tree): entries sorted by constant. Numbers are double-double
``(hi, lo)`` float64 columns (exact beyond 2**53), strings object arrays, booleans 0/1.
Additions wait in a pending list and are merged in one ``np.insert`` by the next build;
removals only mark the list, and the build drops entries of dead owners. So a single add
or remove is O(1) and a build O(n + p log p).

And :class:`ExclusionList`, the ``!=`` list, answered as "all owners minus those listed
under the event's value" (an inequality matches almost every value, so listing its
matches would be quadratic).
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import pairwise

import numpy as np

from psmatch.core.columns import distinct_sorted, expand_ranges
from psmatch.language import Kind, Value
from psmatch.pstree.tree import number_columns

Keys = tuple[np.ndarray, ...]
"""A key column: ``(hi, lo)`` float64 for numbers and booleans, ``(objects,)`` for
strings, ``(int64,)`` for integer keys (``kind`` None)."""


def encode(kind: Kind | None, values: Sequence[Value]) -> Keys:
    """The key column of ``values``. Cost O(n)."""
    if kind is None:
        return (np.asarray(values, dtype=np.int64).reshape(-1),)
    if kind is Kind.STRING:
        column = np.empty(len(values), dtype=object)
        column[:] = values
        return (column,)
    return number_columns(values)


def _sort_order(keys: Keys) -> np.ndarray:
    if len(keys) == 1:
        return np.argsort(keys[0], kind="stable")
    return np.lexsort((keys[1], keys[0]))


class SortedEntries:
    """``(key, owner)`` entries sorted by key, with optional int64 payload columns.

    ``keys`` and ``owners`` (and ``payload``, ``width`` rows of int64) are valid after
    :meth:`build`; :meth:`add` and :meth:`mark_dead` only record work for it.
    """

    def __init__(self, kind: Kind | None, width: int = 0) -> None:
        self.kind = kind
        self.keys: Keys = encode(kind, [])
        self.owners = np.empty(0, dtype=np.int64)
        self.payload = np.empty((width, 0), dtype=np.int64)
        self._clear_pending()
        self._dead = False
        self._has_lo = False
        self._directory = np.zeros(1, dtype=np.int32)

    def __len__(self) -> int:
        return len(self.owners)

    def _clear_pending(self) -> None:
        # Typed buffers, not lists of Python ints: 8 bytes an entry, no int objects.
        self._pending_keys: list[Value] | array[int] = array("q") if self.kind is None else []
        self._pending_owners = array("q")
        self._pending_payload = array("q")

    @property
    def dirty(self) -> bool:
        return self._dead or bool(self._pending_owners)

    @property
    def nbytes(self) -> int:
        strings = 64 * len(self.owners) if self.kind is Kind.STRING else 0
        return (sum(c.nbytes for c in self.keys) + self.owners.nbytes + self.payload.nbytes
                + self._directory.nbytes + strings
                + 8 * len(self._pending_owners) * (2 + len(self.payload)))

    def add(self, key: Value, owner: int, payload: Sequence[int] = ()) -> None:
        """Queue one entry for the next build. O(1)."""
        self._pending_keys.append(key)  # type: ignore[arg-type]
        self._pending_owners.append(owner)
        self._pending_payload.extend(payload)

    def mark_dead(self) -> None:
        """Some owner with entries here died: the next build drops its entries. O(1)."""
        self._dead = True

    def build(self, alive: np.ndarray) -> None:
        """Drop entries of owners not ``alive`` and merge the pending ones in order.

        Cost O(n) for the filter and the merge plus O(p log p) to sort p pending.
        """
        if self._dead:
            keep = alive[self.owners]
            self.keys = tuple(c[keep] for c in self.keys)
            self.owners, self.payload = self.owners[keep], self.payload[:, keep]
            self._dead = False
        if self._pending_owners:
            owners = np.asarray(self._pending_owners, dtype=np.int64)
            keep = alive[owners]
            keys = tuple(c[keep] for c in encode(self.kind, self._pending_keys))
            payload = np.asarray(self._pending_payload, dtype=np.int64).reshape(
                len(owners), len(self.payload)).T[:, keep]
            owners = owners[keep]
            order = _sort_order(keys)
            keys = tuple(c[order] for c in keys)
            at = self._search(keys, "right")
            self.keys = tuple(np.insert(c, at, k) for c, k in zip(self.keys, keys, strict=True))
            self.owners = np.insert(self.owners, at, owners[order])
            self.payload = np.insert(self.payload, at, payload[:, order], axis=1)
            self._clear_pending()
        self._has_lo = len(self.keys) == 2 and bool(self.keys[1].any())
        if self.kind is None:
            # Integer keys are dense ids: key k's entries are directory[k]:directory[k+1].
            counts = np.bincount(self.keys[0]) if len(self.owners) else np.zeros(0, np.int64)
            self._directory = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)

    def _search(self, queries: Keys, side: str) -> np.ndarray:
        """``searchsorted`` on the key column, exact for double-double numbers."""
        if len(self.keys) == 1:
            return np.searchsorted(self.keys[0], queries[0], side=side)  # type: ignore[call-overload]
        hi, lo = self.keys
        q_hi, q_lo = queries
        below = np.searchsorted(hi, q_hi, side="left")
        upto = np.searchsorted(hi, q_hi, side="right")
        if not self._has_lo:
            # Keys tied on hi all have lo 0: the query's lo alone orders them.
            return np.where(q_lo > 0 if side == "left" else q_lo >= 0, upto, below)
        out = below.copy()
        for t in np.flatnonzero(upto > below):
            out[t] += np.searchsorted(lo[below[t] : upto[t]], q_lo[t], side=side)  # type: ignore[call-overload]
        return out

    def _collect(self, start: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return expand_ranges(start, np.maximum(stop - start, 0))

    def equal(self, queries: Keys) -> tuple[np.ndarray, np.ndarray]:
        """(query, entry position) for every entry whose key equals the query.

        O(log n) per query, O(1) for integer keys (directory lookup)."""
        if self.kind is None:
            last = len(self._directory) - 1
            return self._collect(self._directory[np.minimum(queries[0], last)],
                                 self._directory[np.minimum(queries[0] + 1, last)])
        return self._collect(self._search(queries, "left"), self._search(queries, "right"))

    def below(self, queries: Keys, inclusive: bool) -> tuple[np.ndarray, np.ndarray]:
        """(query, entry position) for every key < query (<= when ``inclusive``)."""
        stop = self._search(queries, "right" if inclusive else "left")
        return self._collect(np.zeros_like(stop), stop)

    def above(self, queries: Keys, inclusive: bool) -> tuple[np.ndarray, np.ndarray]:
        """(query, entry position) for every key > query (>= when ``inclusive``)."""
        start = self._search(queries, "left" if inclusive else "right")
        return self._collect(start, np.full_like(start, len(self.owners)))

    def live(self, alive: np.ndarray) -> Counter[tuple]:
        """Multiset of (key parts..., owner, payload...) of live entries, pending included;
        for checks."""
        out: Counter[tuple] = Counter()
        owners = np.concatenate([self.owners,
                                 np.asarray(self._pending_owners, dtype=np.int64)])
        keys = [np.concatenate([c, p]) for c, p in
                zip(self.keys, encode(self.kind, self._pending_keys), strict=True)]
        payload = np.concatenate([self.payload, np.asarray(
            self._pending_payload, dtype=np.int64).reshape(len(self._pending_owners),
                                                            len(self.payload)).T], axis=1)
        for i in np.flatnonzero(alive[owners]):
            out[(*(c[i] for c in keys), int(owners[i]), *payload[:, i].tolist())] += 1
        return out

    def check(self) -> None:
        """Assert the built part is sorted (and the directory right, for integer keys)."""
        if len(self.keys) == 2:
            hi, lo = self.keys
            assert ((hi[1:] > hi[:-1]) | ((hi[1:] == hi[:-1]) & (lo[1:] >= lo[:-1]))).all()
        elif self.kind is Kind.STRING:
            values = self.keys[0].tolist()
            assert all(a <= b for a, b in pairwise(values))
        else:
            keys = self.keys[0]
            assert (np.diff(keys) >= 0).all()
            assert (self._directory[keys] <= np.arange(len(keys))).all()
            assert (self._directory[keys + 1] > np.arange(len(keys))).all()


def expected_entries(kind: Kind | None, rows: Iterable[tuple[Value, int]]) -> Counter[tuple]:
    """The multiset :meth:`SortedEntries.live` should return for ``(key, owner)`` rows."""
    rows = list(rows)
    keys = encode(kind, [key for key, _ in rows])
    return Counter((*(c[i] for c in keys), owner) for i, (_, owner) in enumerate(rows))


class ExclusionList:
    """The ``!=`` list: owners true for every value except the points listed under them.

    Search returns all owners minus those with a point equal to the value (the owners
    array is sorted and unique, so the exclusion is one scatter into a mask). Cost per
    query O(log n + owners); memory O(owners + points).
    """

    def __init__(self, kind: Kind) -> None:
        self.points = SortedEntries(kind)
        self.owners = np.empty(0, dtype=np.int64)
        self._pending: list[int] = []
        self._dead = False

    def __len__(self) -> int:
        return len(self.owners)

    @property
    def dirty(self) -> bool:
        return self._dead or bool(self._pending) or self.points.dirty

    @property
    def nbytes(self) -> int:
        return self.points.nbytes + self.owners.nbytes + 8 * len(self._pending)

    def add(self, owner: int, points: Sequence[Value]) -> None:
        self._pending.append(owner)
        for point in points:
            self.points.add(point, owner)

    def mark_dead(self) -> None:
        self._dead = True
        self.points.mark_dead()

    def build(self, alive: np.ndarray) -> None:
        self.points.build(alive)
        owners = self.owners[alive[self.owners]] if self._dead else self.owners
        pending = np.asarray(self._pending, dtype=np.int64)
        self.owners = distinct_sorted(np.concatenate([owners, pending[alive[pending]]]))
        self._pending, self._dead = [], False

    def search(self, queries: Keys) -> tuple[np.ndarray, np.ndarray]:
        """(query, owner) for every owner whose points exclude none of the values."""
        k = len(self.owners)
        n = len(queries[0])
        keep = np.ones(n * k, dtype=bool)
        query, position = self.points.equal(queries)
        keep[query * k + np.searchsorted(self.owners, self.points.owners[position])] = False
        flat = np.flatnonzero(keep)
        return flat // k, self.owners[flat % k]

    def live(self, alive: np.ndarray) -> tuple[Counter[int], Counter[tuple]]:
        owners = np.concatenate([self.owners, np.asarray(self._pending, dtype=np.int64)])
        return Counter(owners[alive[owners]].tolist()), self.points.live(alive)

    def check(self) -> None:
        self.points.check()
        assert (np.diff(self.owners) > 0).all(), "owners not sorted and unique"


def owners_found(queries: Keys, found: list[tuple[SortedEntries, tuple[np.ndarray, np.ndarray]]],
                 inequality: ExclusionList) -> tuple[np.ndarray, np.ndarray]:
    """(query, owner) for every entry the searches ``found`` (each list with its
    ``(query, position)`` answer) hit, plus the ``!=`` list's owners for ``queries``."""
    parts_q = [query for _, (query, _) in found]
    parts_o = [entries.owners[position] for entries, (_, position) in found]
    if len(inequality):
        query, owners = inequality.search(queries)
        parts_q.append(query)
        parts_o.append(owners)
    return np.concatenate(parts_q), np.concatenate(parts_o)
