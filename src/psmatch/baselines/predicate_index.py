"""Le Subscribe's phase 1: every distinct paper predicate once, indexed per attribute.

Owns :class:`PredicateIndex` (Fabret et al., "Filtering Algorithms and Implementation
for Very Fast Publish/Subscribe Systems", SIGMOD 2001): every distinct paper predicate
(:class:`psmatch.baselines.paper_predicates.PaperPredicate`) gets one predicate id
(``pid``, one bit of the predicate bit vector) shared by all the conjuncts that contain
it; per (attribute, kind) an :class:`AttributeIndex` holds one sorted list per operator.
Cost per (event, attribute) pair O(log n + satisfied predicates).

A predicate's last reference takes it out of phase 1 at the next build of its lists;
its pid becomes reusable only after :meth:`PredicateIndex.reclaim`, which the matchers
call once no phase-2 entry names it, so a stale entry can never name a new predicate.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from psmatch.baselines.paper_predicates import Op, PaperPredicate
from psmatch.baselines.sorted_entries import (
    ExclusionList,
    SortedEntries,
    encode,
    expected_entries,
    owners_found,
)
from psmatch.core.columns import GrowableArray, group_pairs
from psmatch.events import FlatEvent
from psmatch.language import Kind, Value


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
        return owners_found(queries, found, self.inequality)

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
