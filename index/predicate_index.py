"""What counting, Propagation and PB+tree share: paper predicates, sorted entry lists,
Le Subscribe's phase-1 predicate index and the two-phase matcher life cycle.

The three matchers are *two-phase* (Fabret et al., SIGMOD 2001; Wang et al., PB+tree):
phase 1 finds the predicates an event satisfies with one index per attribute, phase 2
derives the matching subscriptions from them. This module owns:

* :func:`decompose`: our normal form (a predicate is a union of intervals plus ``like``
  patterns, see :mod:`index.language`) mapped onto the papers' predicates
  ``attribute op constant`` with op one of ``= < <= > >= !=``. A set of points (``=``,
  ``in``, booleans, exact ``like``) is one ``=`` predicate over several constants (the
  points are disjoint, so at most one can hold). Anything else is its hull plus its
  gaps: a lower bound gives ``>``/``>=``, an upper bound ``<``/``<=`` (``between`` and
  ``like 'ab%'`` become two predicates, as the papers write them), and point gaps one
  ``!=`` over those points (``!=``, ``not in``). A predicate with neither bound nor
  point gap becomes ``!=`` over no point, i.e. "attribute present with this kind".
  Gaps that are not points (``not between``, ``not like 'ab%'``) and ``like``
  suffix/contains patterns are outside the papers: the hull predicates stay in the
  index as a necessary condition and the conjunct is flagged *residual*, to be verified
  with :meth:`index.language.Conjunct.evaluate` once phase 2 has found it.
* :class:`SortedEntries`: ``(constant, owner)`` entries sorted by constant, the columnar
  form of the papers' per-attribute ordered indexes (hash for ``=``, trees for ranges,
  the B+tree leaf list and PB+tree's three lists). Numbers are double-double
  ``(hi, lo)`` float64 columns (exact beyond 2**53), strings object arrays, booleans
  0/1. Additions wait in a pending list and are merged in one ``np.insert`` by the next
  build; removals only mark the list, and the build drops entries of dead owners. So a
  single add or remove is O(1) and a build O(n + p log p).
* :class:`ExclusionList`: the ``!=`` list, answered as "all owners minus those listed
  under the event's value" (the PB+tree pitfall in the reading notes).
* :class:`PredicateIndex`: Le Subscribe's phase 1. Every distinct paper predicate gets
  one predicate id (``pid``, one bit of the predicate bit vector) shared by all the
  conjuncts that contain it; per (attribute, kind) an :class:`AttributeIndex` holds one
  sorted list per operator. Cost per event pair O(log n + satisfied predicates).
* :class:`ConjunctTable` and :class:`TwoPhaseMatcher`: conjunct ids (``cid``) with
  their slot, size (number of paper predicates) and residual flag; the matcher life
  cycle (file, unfile, purge, chunked batch matching, residual verification) and
  :func:`count_complete`, the counting phase 2 shared by ``counting`` and ``pbtree``.

Deletion, which neither paper specifies: a removed conjunct's cid is marked dead at
once (size -1: its count can never complete) and its predicates lose a reference; a
predicate's last reference takes it out of phase 1 at the next build of its lists.
Entries that name cids (associations, clusters, PB+tree lists) are dropped in bulk once
removals reach a quarter of the index (:attr:`TwoPhaseMatcher.PURGE_MIN` at least).
Dead cids and pids become reusable only after that purge, so a stale entry can never
name a new owner.
"""

from __future__ import annotations

from abc import abstractmethod
from array import array
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from itertools import pairwise

import numpy as np

from index.columns import GrowableArray, expand_ranges, group_by_event
from index.conjuncts import evaluate_flagged
from index.events import FlatEvent
from index.language import Conjunct, Kind, Predicate, Subscription, Value
from index.matcher import Matcher
from index.pstree import number_columns

HIT_BUDGET = 1 << 22
"""Most (event, owner) hits one chunk of a batch should produce (32 MiB per column)."""
FIRST_CHUNK = 16
"""Events in a matcher's first chunk, before it knows its hits per event."""


# --------------------------------------------------------------------------- predicates


class Op(IntEnum):
    """The papers' relational operators."""

    EQ = 0
    LT = 1
    LE = 2
    GT = 3
    GE = 4
    NE = 5


@dataclass(frozen=True, slots=True)
class PaperPredicate:
    """``attribute op constant`` as the papers write it, over one value kind.

    ``=`` may hold several constants (``in``: true when one of them equals the value),
    ``!=`` several or none (``not in``; true when the value equals none of them), the
    others exactly one.
    """

    attribute: str
    kind: Kind
    op: Op
    constants: tuple[Value, ...]

    @property
    def rank(self) -> tuple[int, int]:
        """Selectivity by operator when there is no history: = , in, ranges, !=."""
        if self.op is Op.EQ:
            return (0 if len(self.constants) == 1 else 1), len(self.constants)
        return (3, 1) if self.op is not Op.NE else (4, len(self.constants))


def decompose(predicate: Predicate) -> tuple[list[PaperPredicate], bool]:
    """The paper predicates whose conjunction ``predicate`` implies, and whether they
    are also sufficient (False) or the predicate must be verified (True, *residual*)."""
    attribute, kind, intervals = predicate.attribute, predicate.kind, predicate.intervals
    if all(iv.is_point for iv in intervals):
        return [PaperPredicate(attribute, kind, Op.EQ, tuple(iv.lo for iv in intervals))], (
            bool(predicate.patterns))  # type: ignore[misc]
    out = []
    first, last = intervals[0], intervals[-1]
    if first.lo is not None:
        out.append(PaperPredicate(attribute, kind, Op.GE if first.lo_closed else Op.GT,
                                  (first.lo,)))
    if last.hi is not None:
        out.append(PaperPredicate(attribute, kind, Op.LE if last.hi_closed else Op.LT,
                                  (last.hi,)))
    points: list[Value] = []
    residual = bool(predicate.patterns)
    for below, above in pairwise(intervals):
        if below.hi == above.lo:  # disjoint and not touching: both ends open
            points.append(below.hi)  # type: ignore[arg-type]
        else:
            residual = True
    if points or not out:
        out.append(PaperPredicate(attribute, kind, Op.NE, tuple(points)))
    return out, residual


def decompose_conjunct(conjunct: Conjunct) -> tuple[list[PaperPredicate], bool]:
    """All paper predicates of a conjunct and whether it needs verification."""
    predicates: list[PaperPredicate] = []
    residual = False
    for predicate in conjunct.predicates:
        parts, rest = decompose(predicate)
        predicates.extend(parts)
        residual |= rest
    return predicates, residual


# --------------------------------------------------------------------------- sorted lists

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
        self.owners = np.union1d(owners, pending[alive[pending]])
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


def group_pairs(events: Sequence[FlatEvent], index_of: dict[tuple[str, Kind], int]
                ) -> dict[int, tuple[list[int], list[Value]]]:
    """The (event, value) pairs of a batch grouped by the index of their (attribute,
    kind); pairs with no index are dropped. One Python pass over the pairs."""
    grouped: dict[int, tuple[list[int], list[Value]]] = {}
    for e, event in enumerate(events):
        for attribute, value in event.items():
            kind = (Kind.BOOL if value is True or value is False
                    else Kind.STRING if isinstance(value, str) else Kind.NUMBER)
            index = index_of.get((attribute, kind))
            if index is not None:
                group = grouped.get(index)
                if group is None:
                    grouped[index] = group = ([], [])
                group[0].append(e)
                group[1].append(value)
    return grouped


# --------------------------------------------------------------------------- phase 1


class AttributeIndex:
    """Le Subscribe's predicate indexes of one (attribute, kind): one sorted list per
    operator (the paper's hash for ``=`` and trees for ranges) and the ``!=`` list.
    Owners are pids."""

    RANGE_OPS = (Op.EQ, Op.LT, Op.LE, Op.GT, Op.GE)

    def __init__(self, kind: Kind) -> None:
        self.kind = kind
        self.lists = {op: SortedEntries(kind) for op in self.RANGE_OPS}
        self.inequality = ExclusionList(kind)

    def add(self, predicate: PaperPredicate, pid: int) -> None:
        if predicate.op is Op.NE:
            self.inequality.add(pid, predicate.constants)
        else:
            for constant in predicate.constants:
                self.lists[predicate.op].add(constant, pid)

    def mark_dead(self, op: Op) -> None:
        (self.inequality if op is Op.NE else self.lists[op]).mark_dead()

    def build(self, alive: np.ndarray) -> None:
        for structure in (*self.lists.values(), self.inequality):
            if structure.dirty:
                structure.build(alive)

    def satisfied(self, values: Sequence[Value]) -> tuple[np.ndarray, np.ndarray]:
        """(value index, pid) of every predicate each value satisfies.

        Each pid appears at most once per value. Cost O(log n + output) per value.
        """
        queries = encode(self.kind, values)
        lists = self.lists
        found = [
            (lists[Op.EQ], lists[Op.EQ].equal(queries)),
            (lists[Op.LT], lists[Op.LT].above(queries, inclusive=False)),
            (lists[Op.LE], lists[Op.LE].above(queries, inclusive=True)),
            (lists[Op.GT], lists[Op.GT].below(queries, inclusive=False)),
            (lists[Op.GE], lists[Op.GE].below(queries, inclusive=True)),
        ]
        parts_q = [query for _, (query, _) in found]
        parts_p = [entries.owners[position] for entries, (_, position) in found]
        if len(self.inequality):
            query, pids = self.inequality.search(queries)
            parts_q.append(query)
            parts_p.append(pids)
        return np.concatenate(parts_q), np.concatenate(parts_p)

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.lists.values()) + self.inequality.nbytes


class PredicateIndex:
    """Le Subscribe's phase 1: distinct predicates, their pids and attribute indexes.

    ``acquire`` returns the pid of a predicate (a new pid and index entries the first
    time, a reference otherwise); ``release`` drops a reference. :meth:`satisfied` gives
    the satisfied (event, pid) pairs of a batch: the set bits of each event's predicate
    bit vector, with each pid at most once per event.
    """

    def __init__(self) -> None:
        self.indexes: list[AttributeIndex] = []
        self.index_of: dict[tuple[str, Kind], int] = {}
        self.pid_of: dict[PaperPredicate, int] = {}
        self.predicates: list[PaperPredicate | None] = []
        self.refs: list[int] = []
        self.alive = GrowableArray(np.bool_)
        self._free: list[int] = []
        self._removed: list[int] = []
        self._dirty: set[int] = set()

    @property
    def size(self) -> int:
        """Length of the predicate bit vector (pids ever handed out, live or not)."""
        return len(self.predicates)

    @property
    def live(self) -> int:
        return len(self.pid_of)

    def acquire(self, predicate: PaperPredicate) -> int:
        """The pid of ``predicate``, indexing it if new. O(1) (index work is queued)."""
        pid = self.pid_of.get(predicate)
        if pid is not None:
            self.refs[pid] += 1
            return pid
        if self._free:
            pid = self._free.pop()
            self.predicates[pid], self.refs[pid] = predicate, 1
            self.alive.data[pid] = True
        else:
            pid = len(self.predicates)
            self.predicates.append(predicate)
            self.refs.append(1)
            self.alive.append(True)
        self.pid_of[predicate] = pid
        key = (predicate.attribute, predicate.kind)
        index = self.index_of.get(key)
        if index is None:
            index = self.index_of[key] = len(self.indexes)
            self.indexes.append(AttributeIndex(predicate.kind))
        self.indexes[index].add(predicate, pid)
        self._dirty.add(index)
        return pid

    def release(self, pid: int) -> None:
        """Drop one reference; the last one kills the pid (reusable after reclaim)."""
        self.refs[pid] -= 1
        if self.refs[pid]:
            return
        predicate = self.predicates[pid]
        assert predicate is not None
        del self.pid_of[predicate]
        self.predicates[pid] = None
        self.alive.data[pid] = False
        self._removed.append(pid)
        index = self.index_of[(predicate.attribute, predicate.kind)]
        self.indexes[index].mark_dead(predicate.op)
        self._dirty.add(index)

    def refresh(self) -> None:
        """Build every attribute index changed since the last refresh."""
        alive = self.alive.data
        for index in self._dirty:
            self.indexes[index].build(alive)
        self._dirty.clear()

    def reclaim(self) -> None:
        """Make dead pids reusable; call once nothing else refers to them."""
        self.refresh()
        self._free.extend(self._removed)
        self._removed.clear()

    def satisfied(self, events: Sequence[FlatEvent]) -> tuple[np.ndarray, np.ndarray]:
        """(event, pid) for every predicate each event satisfies. Call after refresh."""
        parts_e, parts_p = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
        for index, (rows, values) in group_pairs(events, self.index_of).items():
            pair, pids = self.indexes[index].satisfied(values)
            parts_e.append(np.asarray(rows, dtype=np.int64)[pair])
            parts_p.append(pids)
        return np.concatenate(parts_e), np.concatenate(parts_p)

    @property
    def nbytes(self) -> int:
        # Predicates are also kept as objects for pid lookup: ~200 bytes each.
        return sum(i.nbytes for i in self.indexes) + self.alive.nbytes + 200 * self.live

    def check(self, expected: Counter[PaperPredicate]) -> None:
        """Assert references equal ``expected`` and every index holds exactly the live
        predicates."""
        assert dict(expected) == {p: self.refs[pid] for p, pid in self.pid_of.items()}
        alive = self.alive.data
        for pid, predicate in enumerate(self.predicates):
            assert bool(alive[pid]) == (predicate is not None)
            assert predicate is None or self.pid_of[predicate] == pid
        want: dict[tuple[int, Op], list[tuple[Value, int]]] = {}
        want_ne: dict[int, Counter[int]] = {}
        for predicate, pid in self.pid_of.items():
            index = self.index_of[(predicate.attribute, predicate.kind)]
            if predicate.op is Op.NE:
                want_ne.setdefault(index, Counter())[pid] += 1
                rows = want.setdefault((index, Op.NE), [])
            else:
                rows = want.setdefault((index, predicate.op), [])
            rows.extend((c, pid) for c in predicate.constants)
        for index, structure in enumerate(self.indexes):
            for op, entries in structure.lists.items():
                entries.check()
                assert entries.live(alive) == expected_entries(
                    structure.kind, want.get((index, op), []))
            structure.inequality.check()
            owners, points = structure.inequality.live(alive)
            assert owners == want_ne.get(index, Counter())
            assert points == expected_entries(structure.kind, want.get((index, Op.NE), []))


# --------------------------------------------------------------------------- phase 2


class ConjunctTable:
    """Conjuncts as columns: ``slot``, ``size`` (paper predicates; -1 when dead, so a
    count can never complete), ``residual``, ``alive``; plus the conjunct objects, for
    residual verification and for unfiling."""

    def __init__(self) -> None:
        self.slot = GrowableArray(np.int64)
        self.size = GrowableArray(np.int32)
        self.residual = GrowableArray(np.bool_)
        self.alive = GrowableArray(np.bool_)
        self.conjuncts: list[Conjunct | None] = []
        self.removed: list[int] = []
        self._free: list[int] = []
        self.live = 0

    def __len__(self) -> int:
        """Cids ever handed out."""
        return len(self.conjuncts)

    def add(self, slot: int, conjunct: Conjunct, size: int, residual: bool) -> int:
        row = (slot, size, residual, True)
        columns = (self.slot, self.size, self.residual, self.alive)
        if self._free:
            cid = self._free.pop()
            self.conjuncts[cid] = conjunct
            for column, value in zip(columns, row, strict=True):
                column.data[cid] = value
        else:
            cid = len(self.conjuncts)
            self.conjuncts.append(conjunct)
            for column, value in zip(columns, row, strict=True):
                column.append(value)
        self.live += 1
        return cid

    def remove(self, cid: int) -> None:
        self.alive.data[cid] = False
        self.size.data[cid] = -1
        self.conjuncts[cid] = None
        self.removed.append(cid)
        self.live -= 1

    def reclaim(self) -> None:
        """Make removed cids reusable; call once no structure refers to them."""
        self._free.extend(self.removed)
        self.removed.clear()

    @property
    def nbytes(self) -> int:
        columns = (self.slot, self.size, self.residual, self.alive)
        # The Conjunct objects are kept for verification and unfiling: ~8 bytes a pointer.
        return sum(c.nbytes for c in columns) + 8 * len(self.conjuncts)

    @property
    def live_predicates(self) -> int:
        return int(self.size.view()[self.alive.view()].sum())

    def predicates(self) -> Iterable[tuple[int, list[PaperPredicate]]]:
        """(cid, paper predicates) of every live conjunct; for checks. O(predicates)."""
        for cid, conjunct in enumerate(self.conjuncts):
            if conjunct is not None:
                yield cid, decompose_conjunct(conjunct)[0]

    def check(self) -> None:
        alive = self.alive.view()
        assert int(alive.sum()) == self.live
        assert not alive[self.removed + self._free].any()
        for cid, conjunct in enumerate(self.conjuncts):
            assert bool(alive[cid]) == (conjunct is not None)
            if conjunct is not None:
                predicates, residual = decompose_conjunct(conjunct)
                assert int(self.size.data[cid]) == len(predicates)
                assert bool(self.residual.data[cid]) == residual


def count_complete(events: np.ndarray, cids: np.ndarray,
                   table: ConjunctTable) -> tuple[np.ndarray, np.ndarray]:
    """The counting algorithm's phase 2: a conjunct matches an event when its hits on
    the event (its satisfied predicates, with multiplicity) reach its size.

    The counters are the run lengths of the sorted (event, cid) keys: one ``np.sort``
    (a SIMD radix/quick sort on int64, a few ns per hit) and O(hits) passes, where a
    dense ``events x conjuncts`` counter table would cost O(conjuncts) per event.
    Dead conjuncts have size -1 and never complete.
    """
    width = max(len(table), 1)
    keys = events * width + cids
    if len(keys) and (int(events.max()) + 1) * width < 2**31:
        keys = keys.astype(np.int32)  # half the bytes to sort
    keys.sort()
    if not len(keys):
        return keys, keys
    first = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    runs = np.diff(np.append(first, len(keys)))
    unique = keys[first]
    done = unique[runs == table.size.data[unique % width]].astype(np.int64)
    return done // width, done % width


class TwoPhaseMatcher(Matcher):
    """Base of counting, Propagation and PB+tree: conjunct table, life cycle, batching.

    Subclasses file a conjunct's paper predicates in their structures and, per chunk of
    events, return the (event, cid) pairs phase 2 found complete; this class verifies
    residual conjuncts and groups the answer. Chunks are sized so that the hits of a
    chunk, estimated from the previous one, stay near :data:`HIT_BUDGET`.
    """

    PURGE_MIN = 1024
    """Removals that always wait for a bulk purge (else a quarter of the live ones)."""

    def __init__(self) -> None:
        super().__init__()
        self.table = ConjunctTable()
        self._cids_of: dict[int, list[int]] = {}
        self._hits_per_event = HIT_BUDGET / FIRST_CHUNK

    # -- Matcher hooks -----------------------------------------------------------------

    def _insert(self, slot: int, subscription: Subscription) -> None:
        cids = []
        for conjunct in subscription.conjuncts:
            predicates, residual = decompose_conjunct(conjunct)
            cid = self.table.add(slot, conjunct, len(predicates), residual)
            self._file(cid, predicates)
            cids.append(cid)
        self._cids_of[slot] = cids

    def _delete(self, slot: int) -> None:
        for cid in self._cids_of.pop(slot):
            conjunct = self.table.conjuncts[cid]
            assert conjunct is not None
            self.table.remove(cid)
            self._unfile(cid, decompose_conjunct(conjunct)[0])
        if len(self.table.removed) > max(self.PURGE_MIN, self.table.live // 4):
            self._purge()
            self.table.reclaim()

    def add_many(self, items: Iterable[tuple[Hashable, str | Subscription]]) -> None:
        """Add many subscriptions, then build the structures (so build time is paid
        here rather than by the first match)."""
        super().add_many(items)
        self._prepare()

    def _match_flat(self, events: list[FlatEvent]) -> list[Iterable[int]]:
        self._prepare()
        found_e, found_c = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
        first = 0
        while first < len(events):
            size = max(1, int(HIT_BUDGET / self._hits_per_event))
            chunk = events[first : first + size]
            e, c, hits = self._match_chunk(chunk)
            self._hits_per_event = max(hits / len(chunk), 1.0)
            e, c = evaluate_flagged(e, c, self.table.residual.data,
                                    self.table.conjuncts.__getitem__, chunk)
            found_e.append(e + first)
            found_c.append(c)
            first += len(chunk)
        cids = np.concatenate(found_c)
        return group_by_event(len(events), np.concatenate(found_e), self.table.slot.data[cids])

    # -- subclass hooks ----------------------------------------------------------------

    @abstractmethod
    def _file(self, cid: int, predicates: list[PaperPredicate]) -> None:
        """Index a new conjunct's paper predicates."""

    def _unfile(self, cid: int, predicates: list[PaperPredicate]) -> None:
        """Release what a removed conjunct holds besides entries purged in bulk."""

    @abstractmethod
    def _prepare(self) -> None:
        """Bring the structures a match reads up to date (build pending additions)."""

    @abstractmethod
    def _purge(self) -> None:
        """Drop every entry of removed cids (and dead pids) from all structures."""

    @abstractmethod
    def _match_chunk(self, events: list[FlatEvent]
                     ) -> tuple[np.ndarray, np.ndarray, int]:
        """(chunk event, cid) pairs found complete, and the number of hits handled."""

    def check(self) -> None:
        self.table.check()
        assert sum(len(c) for c in self._cids_of.values()) == self.table.live
        for slot, cids in self._cids_of.items():
            assert self._ids[slot] is not None
            for cid in cids:
                assert self.table.alive.data[cid] and self.table.slot.data[cid] == slot

    def _live_predicates(self) -> Counter[PaperPredicate]:
        """Each paper predicate with the number of live conjuncts that contain it."""
        return Counter(p for _, ps in self.table.predicates() for p in ps)
