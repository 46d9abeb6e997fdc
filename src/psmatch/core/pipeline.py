"""The one life cycle and batch pipeline of every indexed matcher.

:class:`IndexedMatcher` implements the :class:`psmatch.core.matcher.Matcher` hooks once for
all indexes (every matcher but the reference ``scan``):

* **add**: the subscriptions' conjuncts get ids from the
  :class:`psmatch.core.registry.ConjunctRegistry`; the family *files* them in its
  structures (:meth:`IndexedMatcher._file`) and says which are residual;
* **remove**, of one subscription or many at once: the registry unlinks the
  subscriptions' conjuncts (dead at once); the family *unfiles* them all together
  (:meth:`IndexedMatcher._unfile`); once the registry says a purge is due, the family
  drops every entry naming dead conjuncts (:meth:`IndexedMatcher._purge`) and the
  registry makes their ids reusable;
* **match**, for a batch of validated flat events: the family prepares the batch once
  (:meth:`IndexedMatcher._begin`, e.g. locating every pair in the PS-Trees), then per
  *chunk* of events: *candidates* (the family's lookup,
  :meth:`IndexedMatcher._candidates`), less those whose access pattern fails
  (:meth:`psmatch.core.registry.ConjunctRegistry.access_holds`, before anything is
  verified: a family's lookup hands over every conjunct with a pattern), *verify* (the
  exact check of predicates the lookup did not decide, :meth:`IndexedMatcher._verify`),
  the *residual check* of conjuncts no index decides
  (:meth:`psmatch.core.registry.ConjunctRegistry.keep_satisfied`), and finally the
  distinct (event, subscription slot) pairs, by event.

:class:`ColumnarMatcher` is an indexed matcher whose family files normal-form columns
(:meth:`ColumnarMatcher._file_columns`): the service's columns and ``add_many``'s bulk
scan reach it with no object per conjunct.

Chunks keep a batch's intermediate columns bounded: a chunk is sized so that its work
(hits, candidates, counter cells: what the family reports) stays near
:data:`WORK_BUDGET`, estimated from the previous chunk (the first chunk of a fresh
matcher has :data:`FIRST_CHUNK` events), and so that dense per-event tables of
``Batch.cells_per_event`` cells stay within :data:`CELL_BUDGET`.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

import numpy as np

from psmatch.core.columns import distinct_sorted
from psmatch.core.matcher import Matcher, MatcherStats
from psmatch.core.registry import ConjunctRegistry
from psmatch.events import FlatEvent
from psmatch.language import Conjunct, Subscription
from psmatch.language.columns import ConjunctColumns, SubscriptionColumns

WORK_BUDGET = 1 << 17
"""Work (candidate pairs, hits, counter cells) one chunk should do: 1 MiB per column. A
chunk's columns, not the batch, set what matching allocates: a larger budget raises what
matching allocates at once nearly in proportion for little time gained, and a smaller one
costs a few numpy calls more per event."""
CELL_BUDGET = 1 << 22
"""Most cells of a chunk's dense per-event tables (16 MiB of int32)."""
FIRST_CHUNK = 16
"""Events in a matcher's first chunk, before it knows its work per event."""


@dataclass(slots=True)
class Batch:
    """A batch of flat events as a family prepared it; families extend it."""

    events: list[FlatEvent]
    cells_per_event: int
    """Cells of the dense per-event tables a chunk builds (0: none)."""


@dataclass(slots=True)
class Candidates:
    """What a family's lookup found for one chunk: (chunk event, cid) pairs.

    ``checked`` is, per pair, how many of the conjunct's first predicates (in the
    family's access order) the lookup already knows to hold; ``None`` when the lookup
    decided every pair exactly (counting reached the conjunct's size). ``work`` is how
    much the lookup handled, for sizing the next chunk.
    """

    events: np.ndarray
    cids: np.ndarray
    work: int
    checked: np.ndarray | None = None


@dataclass(slots=True)
class FilterCounts:
    """What a matcher's pre-filter did since the matcher was made: the (event, conjunct)
    *candidates* its family's lookup handed over, and the *matches* among them (those
    left after the access pattern, the verification and the residual check), so
    ``matches / candidates`` is the lookup's precision. Cost: two additions a chunk."""

    candidates: int = 0
    matches: int = 0


class IndexedMatcher(Matcher):
    """A matcher whose family supplies filing, unfiling and candidate lookup."""

    def __init__(self) -> None:
        super().__init__()
        self.registry = ConjunctRegistry()
        self._work_per_event = WORK_BUDGET / FIRST_CHUNK
        self.filter_counts = FilterCounts()

    # -- life cycle --------------------------------------------------------------------

    def _insert(self, slot: int, subscription: Subscription) -> None:
        self._insert_many([(slot, subscription)])

    def _insert_many(self, batch: list[tuple[int, Subscription]]) -> None:
        slots, conjuncts = self._conjuncts_of(batch)
        cids = self.registry.allocate(slots, np.fromiter(
            (len(c.predicates) for c in conjuncts), np.int64, len(conjuncts)))  # fmt: skip
        residual = np.flatnonzero(self._file(cids, conjuncts))
        if len(residual):
            self.registry.mark_residual(cids[residual], [conjuncts[i] for i in residual])

    def _delete(self, slot: int) -> None:
        self._delete_many([slot])

    def _delete_many(self, slots: list[int]) -> None:
        self._unfile(self.registry.unlink(np.array(slots, dtype=np.int64)))
        if self.registry.purge_due:
            self._purge()
            self.registry.reclaim()

    # -- matching ----------------------------------------------------------------------

    def _match_flat_pairs(self, events: list[FlatEvent]) -> tuple[np.ndarray, np.ndarray]:
        batch = self._begin(events)
        found_e, found_c = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
        first = 0
        while first < len(events):
            last = self._chunk_end(batch, first)
            found = self._candidates(batch, first, last)
            self.filter_counts.candidates += len(found.cids)
            self._work_per_event = max(found.work / (last - first), 1.0)
            keep = self.registry.access_holds(found.events, found.cids, events[first:last])
            if keep is not None:
                found = Candidates(found.events[keep], found.cids[keep], found.work,
                                   None if found.checked is None else found.checked[keep])
            e, c = (found.events, found.cids) if found.checked is None else (
                self._verify(batch, first, last, found))
            e, c = self.registry.keep_satisfied(e, c, events[first:last])
            self.filter_counts.matches += len(c)
            found_e.append(e + first)
            found_c.append(c)
            first = last
        slots = self.registry.slot.data[np.concatenate(found_c)].astype(np.int64)
        # by event, each pair once: a subscription of several conjuncts may match an
        # event through more than one (slots and event indexes are below 2**31)
        pairs = distinct_sorted((np.concatenate(found_e) << 32) | slots)
        return pairs >> 32, pairs & 0xFFFFFFFF

    def _chunk_end(self, batch: Batch, first: int) -> int:
        size = int(WORK_BUDGET / self._work_per_event)
        if batch.cells_per_event:
            size = min(size, CELL_BUDGET // batch.cells_per_event)
        return min(len(batch.events), first + max(size, 1))

    # -- bookkeeping -------------------------------------------------------------------

    def _stats(self) -> MatcherStats:
        registry = self.registry
        return MatcherStats(len(self), registry.live, registry.live_predicates,
                            self._spaces(), registry.nbytes + self._structure_bytes())

    def _check(self) -> None:
        self.registry.check(self._ids.held_slots().tolist())

    def _spaces(self) -> int:
        """Live PS-Tree predicate spaces of the index (0 without a forest)."""
        return 0

    # -- what a family supplies --------------------------------------------------------

    @abstractmethod
    def _file(self, cids: np.ndarray, conjuncts: list[Conjunct]) -> np.ndarray:
        """Index new conjuncts under their cids; returns the mask of residual ones."""

    @abstractmethod
    def _unfile(self, cids: np.ndarray) -> None:
        """Take removed conjuncts out (or mark them for the purge), all at once."""

    @abstractmethod
    def _purge(self) -> None:
        """Drop every entry that names a removed conjunct."""

    def _begin(self, events: list[FlatEvent]) -> Batch:
        """Bring the structures up to date and prepare a batch (default: nothing)."""
        return Batch(events, 0)

    @abstractmethod
    def _candidates(self, batch: Batch, first: int, last: int) -> Candidates:
        """The (chunk event, cid) candidates of events ``first .. last - 1``."""

    def _verify(self, batch: Batch, first: int, last: int,
                found: Candidates) -> tuple[np.ndarray, np.ndarray]:
        """The candidates whose unchecked predicates hold; families whose lookup can
        leave predicates unchecked override it."""
        raise NotImplementedError(f"{type(self).__name__} leaves predicates unchecked")

    @abstractmethod
    def _structure_bytes(self) -> int:
        """Estimated bytes of the family's structures (the registry is counted apart)."""


class ColumnarMatcher(IndexedMatcher):
    """An indexed matcher whose family files conjuncts given as columns: conjunct
    objects are turned into columns, and normal-form columns are filed as they are."""

    def _insert_columns(self, slots: np.ndarray, columns: SubscriptionColumns) -> None:
        conjuncts = columns.conjuncts
        cids = self.registry.allocate(np.repeat(slots, columns.conjunct_count),
                                      conjuncts.predicate_count)  # fmt: skip
        residual = np.flatnonzero(self._file_columns(cids, conjuncts))
        if len(residual):
            self.registry.mark_residual(cids[residual], conjuncts.conjuncts(residual.tolist()))

    def _file(self, cids: np.ndarray, conjuncts: list[Conjunct]) -> np.ndarray:
        return self._file_columns(cids, ConjunctColumns.of_conjuncts(conjuncts))

    @abstractmethod
    def _file_columns(self, cids: np.ndarray, columns: ConjunctColumns) -> np.ndarray:
        """Index new conjuncts, given as columns, under their cids; returns the mask of
        residual ones."""
