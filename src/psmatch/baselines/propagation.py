"""Propagation (Fabret et al., SIGMOD 2001, sections 3-4): access predicates and
column-wise subscription clusters over Le Subscribe's phase 1.

Owns Propagation's phase-2 structures on top of
:class:`psmatch.baselines.predicate_index.PredicateIndex`:

* the *cluster tables*: one :class:`psmatch.baselines.sorted_entries.SortedEntries` per cluster
  size (number of predicates besides the access predicate), keyed by the access
  predicate's pid. The rows under one access pid in one table are one paper
  *cluster*; together the tables are the pid's *cluster list*. Each table stores its
  subscriptions column-wise as in the paper: the *subscription line* (cids, the
  ``owners`` column) and the *predicates array*, one int64 row of pids per predicate
  position (the ``payload``).
* the *predicate bit vector*: a dense ``[events, pids]`` boolean table for up to
  :data:`BIT_CELLS` cells of events at a time; phase 1 sets the bits of the satisfied
  predicates and they are cleared again after those events (only the bits that were
  set, so the table is never scanned).
* *statistics*: how many events satisfied each pid, for choosing access predicates.

Access predicates: a conjunct's access predicate is its ``=`` (or ``in``) predicate
that the fewest past events satisfied, the paper's operator order (``=`` before
``in``) breaking ties and deciding when there is no history. A conjunct with no
equality predicate goes to the paper's *fallback list*; here that list is itself
clustered under the conjunct's most selective other predicate (a range or ``!=``
predicate, chosen the same way), because phase 1 has evaluated those predicates
anyway and checking every fallback subscription for every event costs O(fallback)
per event. The paper's dynamic multi-attribute clustering (conjunctions of equalities
hashed together, chosen by a cost model) is not implemented: every access predicate is
a single predicate.

Matching a chunk: phase 1 gives the satisfied (event, pid) pairs and sets their bits;
every table finds the rows under the satisfied pids through its directory (O(1) per
pid: a satisfied access predicate makes its clusters candidates), then checks the
predicate columns one after the other against the bit vector, dropping rows at their
first unset bit. Residual conjuncts are verified after.

Deletion (not in the paper, which removes a subscription from its cluster by id): a
removed conjunct's predicates lose a reference at once and its row is filtered out
of the answers until removals reach an eighth of the index, when every cluster table
drops the rows of dead conjuncts in one O(rows) filter.

Cost per event: phase 1, then O(1) per satisfied pid and table, plus the column checks
of the candidate rows (O(candidates x columns checked until the first unset bit)).
Memory O(distinct predicates + occurrences), plus a directory of O(pids) per table.
"""

from __future__ import annotations

import numpy as np

from psmatch.baselines.paper_predicates import Op, PaperPredicate
from psmatch.baselines.predicate_index import PredicateIndex
from psmatch.baselines.sorted_entries import SortedEntries
from psmatch.baselines.two_phase import TwoPhaseMatcher
from psmatch.events import FlatEvent

BIT_CELLS = 1 << 24
"""Most cells of the dense predicate bit vectors held at once (16 MiB of bool)."""


class PropagationMatcher(TwoPhaseMatcher):
    """Phase 1 predicate index, then clusters under access predicates."""

    name = "propagation"

    def __init__(self) -> None:
        super().__init__()
        self.predicates = PredicateIndex()
        self.clusters: dict[int, SortedEntries] = {}
        self.satisfied_count = np.zeros(64, dtype=np.int64)
        self.events_seen = 0
        self._bits = np.zeros(0, dtype=bool)

    # -- filing ------------------------------------------------------------------------

    def _access(self, pids: list[int], predicates: list[PaperPredicate]) -> int:
        """Position of the access predicate: equality first, then fewest satisfying
        events, then operator rank."""
        seen = max(self.events_seen, 1)
        count = self.satisfied_count

        def cost(i: int) -> tuple[bool, float, tuple[int, int]]:
            pid = pids[i]
            history = count[pid] / seen if pid < len(count) else 0.0
            return predicates[i].op is not Op.EQ, history, predicates[i].rank

        return min(range(len(pids)), key=cost)

    def _file_predicates(self, cid: int, predicates: list[PaperPredicate]) -> None:
        pids = [self.predicates.acquire(p) for p in predicates]
        access = pids.pop(self._access(pids, predicates))
        table = self.clusters.get(len(pids))
        if table is None:
            table = self.clusters[len(pids)] = SortedEntries(None, len(pids))
        table.add(access, cid, pids)

    def _unfile_predicates(self, cid: int, predicates: list[PaperPredicate]) -> None:
        for predicate in predicates:
            self.predicates.release(self.predicates.pid_of[predicate])

    def _prepare(self) -> None:
        self.predicates.refresh()
        alive = self.registry.alive.data
        for table in self.clusters.values():
            if table.dirty:
                table.build(alive)

    def _purge(self) -> None:
        for table in self.clusters.values():
            table.mark_dead()
        self._prepare()
        self.predicates.reclaim()

    # -- matching ----------------------------------------------------------------------

    def _complete(self, events: list[FlatEvent]) -> tuple[np.ndarray, np.ndarray, int]:
        ev, pids = self.predicates.satisfied(events)
        self._observe(pids, len(events))
        width = max(self.predicates.size, 1)
        # The set bits of all events, ordered by event: event e's bit vector is the
        # slice [e * width, (e + 1) * width) of one long bit array.
        keys = np.sort(ev * width + pids)
        per_vector = max(1, BIT_CELLS // width)
        if len(self._bits) < per_vector * width:
            self._bits = np.zeros(per_vector * width, dtype=bool)
        starts = np.arange(0, len(events) + per_vector, per_vector)
        bounds = np.searchsorted(keys, starts * width)
        found_e, found_c = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
        candidates = 0
        for i in range(len(starts) - 1):
            local = keys[bounds[i] : bounds[i + 1]] - starts[i] * width
            e, c, n = self._match_clusters(local, width)
            found_e.append(e + starts[i])
            found_c.append(c)
            candidates += n
        e, c = np.concatenate(found_e), np.concatenate(found_c)
        keep = self.registry.alive.data[c]  # rows of removed conjuncts wait for the purge
        return e[keep], c[keep], len(keys) + candidates

    def _match_clusters(self, set_bits: np.ndarray, width: int
                        ) -> tuple[np.ndarray, np.ndarray, int]:
        """Cluster matching for events whose bit vectors hold ``set_bits``."""
        bits = self._bits
        bits[set_bits] = True
        ev, pids = set_bits // width, set_bits % width
        found_e, found_c = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
        candidates = 0
        for table in self.clusters.values():
            pair, rows = table.equal((pids,))
            e = ev[pair]
            candidates += len(rows)
            for column in table.payload:
                ok = bits[e * width + column[rows]]
                e, rows = e[ok], rows[ok]
            found_e.append(e)
            found_c.append(table.owners[rows])
        bits[set_bits] = False
        return np.concatenate(found_e), np.concatenate(found_c), candidates

    def _observe(self, pids: np.ndarray, n_events: int) -> None:
        """Add a chunk's satisfied predicates to the access-selection statistics."""
        size = self.predicates.size
        if len(self.satisfied_count) < size:
            grown = np.zeros(max(size, 2 * len(self.satisfied_count)), dtype=np.int64)
            grown[: len(self.satisfied_count)] = self.satisfied_count
            self.satisfied_count = grown
        self.satisfied_count[:size] += np.bincount(pids, minlength=size)
        self.events_seen += n_events

    # -- bookkeeping -------------------------------------------------------------------

    def _structure_bytes(self) -> int:
        return int(self.predicates.nbytes + self._conjunct_bytes() + self.satisfied_count.nbytes
                   + self._bits.nbytes + sum(t.nbytes for t in self.clusters.values()))

    def _check(self) -> None:
        super()._check()
        self.predicates.check(self._live_predicates())
        alive = self.registry.alive.data
        rows = {}
        for width, table in self.clusters.items():
            table.check()
            for access, cid, *others in table.live(alive):
                assert len(others) == width
                assert cid not in rows, f"conjunct {cid} filed twice"
                rows[cid] = (int(access), others)
        pid_of = self.predicates.pid_of
        for cid, predicates in self.live_conjuncts():
            access, others = rows.pop(cid)
            assert sorted([access, *others]) == sorted(pid_of[p] for p in predicates)
        assert not rows, "rows of dead conjuncts"
