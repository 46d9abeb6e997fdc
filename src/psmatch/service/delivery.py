"""How the matching tasks deliver their records: the two delivery modes and the
exactly-once protocol of one task (:class:`ExactlyOnceTask`).

``at-least-once``: a task's records are written by its process's
:class:`~psmatch.adapters.kafka.sink.RecordSink` and acknowledged before the task ends;
a batch run again (a task retried, the job restarted before Spark logged the batch as
done) writes its records again.

``exactly-once``: a task writes its notifications and rejected events in one Kafka
transaction of a producer whose ``transactional.id`` is the query's
(:func:`transactional_prefix`) and its input's: the events partition it reads with one
shard, its shard with several. So a task run again fences every earlier attempt of it
(the broker aborts their open transaction). The same transaction commits a marker: the
next offset of each events partition the task read, the position of a consumer group
named after the ``transactional.id`` (``batch <id>`` as its metadata). A task reads the
marker once it has fenced the earlier attempts, and leaves out the events it covers: a
batch run again writes only what no committed transaction wrote. A ``read_committed``
consumer then reads each notification once. docs/streaming.md has the preconditions
and the cost.

Each task opens its own sink and destroys it at its end: a producer kept from task to
task lived through broker restarts in states a later task could not always begin from.
Opening it (a metadata request and ``init_transactions``, a few round trips to the
broker) runs in a thread while the task's first events are matched: nothing is written
before it is open and its marker read, and should the marker cover any of those events
(a batch run again) the task matches them again without them (:class:`CoveredEvents`).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from psmatch.adapters.arrow import values_of
from psmatch.adapters.kafka.sink import SinkSettings, TransactionalSink
from psmatch.errors import PsmatchError

AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"
DELIVERY_MODES = (AT_LEAST_ONCE, EXACTLY_ONCE)


class DeliveryError(PsmatchError):
    """A task of one shard was handed events of two partitions: the job's plan no longer
    gives each events partition a task of its own (a bug, never a record's fault)."""


def transactional_prefix(checkpoint_location: str, notifications_topic: str) -> str:
    """What the ``transactional.id`` of every task of a query starts with: the output
    topic and a digest of the checkpoint's location, which is the query (a new
    checkpoint is a new query, which neither fences nor skips the old one's work)."""
    digest = hashlib.sha256(checkpoint_location.encode()).hexdigest()[:12]
    return f"psmatch.{notifications_topic}.{digest}"


class CoveredEvents(PsmatchError):
    """The first events a task matched while its sink was opening include events a
    committed transaction covers: the task was run before. Nothing of them was written;
    :attr:`batches` (those events' input batches, in order) are to be matched again,
    before the rest of the input, through :meth:`ExactlyOnceTask.unseen`, which now
    leaves the covered events out."""

    def __init__(self, batches: list[pa.RecordBatch]) -> None:
        super().__init__("events matched before the marker was read are covered by it")
        self.batches = batches


class _Opening(threading.Thread):
    """A task's :class:`TransactionalSink` being opened (which fences the earlier
    attempts), its transaction begun and its marker read for ``partitions``."""

    def __init__(self, settings: SinkSettings, transactional_id: str, topic: str,
                 partitions: list[int]) -> None:  # fmt: skip
        super().__init__(name=f"open {transactional_id}", daemon=True)
        self._args = settings, transactional_id, topic, partitions
        self.sink: TransactionalSink | None = None
        self.marker: dict[int, int] = {}
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        settings, transactional_id, topic, partitions = self._args
        try:
            self.sink = TransactionalSink(settings, transactional_id, transactional_id)
            self.sink.begin()
            self.marker = self.sink.committed(topic, partitions)
        except BaseException as exc:  # handed to the task's thread, which raises it
            self.error = exc


class ExactlyOnceTask:
    """The exactly-once writing of one matching task of batch ``batch_id``.

    :meth:`unseen` passes on the task's input batches without the events a committed
    transaction covers. At the first event it starts opening the task's
    :class:`TransactionalSink` (which fences the earlier attempts) and passes that
    first batch on whole, to be matched meanwhile; the next call of any method waits
    for the sink and its marker and raises :class:`CoveredEvents` should the marker
    cover any of that batch. :meth:`write` queues output records in the transaction,
    :meth:`commit` commits them with the marker after the last event read,
    :meth:`close` aborts whatever was not committed. A task without events opens no
    sink and commits nothing.
    """

    def __init__(self, sink: SinkSettings, prefix: str, events_topic: str, batch_id: int,
                 shard: int, shards: int) -> None:  # fmt: skip
        self._settings = sink
        self._prefix = prefix
        self._topic = events_topic
        self._batch_id = batch_id
        self._shard = shard
        self._shards = shards
        self._sink: TransactionalSink | None = None
        self._opening: _Opening | None = None
        self._first: tuple[pa.RecordBatch, np.ndarray, np.ndarray, list[int]] | None = None
        self._id = ""
        self._marker: dict[int, int] = {}  # events partition -> first offset not covered
        self._next: dict[int, int] = {}  # events partition -> after the last offset read
        self.replayed = 0  # events left out: a committed transaction covers them

    def _settle(self, in_hand: pa.RecordBatch | None = None) -> None:
        """Wait for the sink being opened; :class:`CoveredEvents` (with the first batch
        and ``in_hand``, an input batch taken since) if its marker covers any event of
        the first batch."""
        opening = self._opening
        if opening is None:
            return
        opening.join()
        self._opening = None
        self._sink = opening.sink  # destroyed by close() should the opening have failed
        if opening.error is not None:
            raise opening.error
        self._marker.update(opening.marker)
        assert self._first is not None  # set with the opening
        batch, partitions, offsets, seen = self._first
        self._first = None
        if not self._fresh(partitions, offsets, seen).all():
            raise CoveredEvents([batch] + ([in_hand] if in_hand is not None else []))

    def unseen(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``batches`` (with the columns ``partition`` and ``offset`` of the events)
        without the events a committed transaction of this task's id covers.

        Cost: O(events) in numpy; a round trip to the broker per events partition
        seen (the marker read); a filtered copy of a batch only where it has covered
        events (a batch run again).
        """
        for batch in batches:
            if not batch.num_rows:
                continue
            partitions = values_of(batch.column("partition")).astype(np.int64)
            offsets = values_of(batch.column("offset")).astype(np.int64)
            seen = np.unique(partitions).tolist()
            handed = sorted(set(seen) | set(self._next))
            name = f"s{self._shard}" if self._shards > 1 else f"p{handed[0]}"
            self._id = self._id or f"{self._prefix}.{name}"
            if self._shards == 1 and len(handed) > 1:
                raise DeliveryError(f"the task of {self._id} was handed events of "
                                    f"partitions {handed}")  # fmt: skip
            if self._sink is None and self._opening is None:
                self._opening = _Opening(self._settings, self._id, self._topic, seen)
                self._first = batch, partitions, offsets, seen
                self._advance(partitions, offsets, seen)
                yield batch
                continue
            self._settle(batch)
            assert self._sink is not None  # settled
            new = [p for p in seen if p not in self._marker]
            if new:
                self._marker.update(self._sink.committed(self._topic, new))
            fresh = self._fresh(partitions, offsets, seen)
            self._advance(partitions, offsets, seen)
            if fresh.all():
                yield batch
                continue
            self.replayed += int((~fresh).sum())
            if fresh.any():
                yield batch.filter(pa.array(fresh))

    def _fresh(self, partitions: np.ndarray, offsets: np.ndarray, seen: list[int]
               ) -> np.ndarray:  # fmt: skip
        """Which events no committed transaction covers (the marker of each of ``seen``,
        the events' partitions, known)."""
        fresh = np.empty(len(offsets), dtype=bool)
        for p in seen:
            rows = partitions == p
            fresh[rows] = offsets[rows] >= self._marker[p]
        return fresh

    def _advance(self, partitions: np.ndarray, offsets: np.ndarray, seen: list[int]) -> None:
        """Note the offsets read: the marker to commit is after the last of each
        partition."""
        for p in seen:
            last = int(offsets[partitions == p].max()) + 1
            self._next[p] = max(self._next.get(p, 0), last)

    def write(self, records: pa.RecordBatch) -> None:
        self._settle()
        assert self._sink is not None  # records come from events: the sink is open
        self._sink.write(records)

    def commit(self) -> None:
        """Commit the transaction and the marker after every event read (no commit
        when every event was covered already)."""
        self._settle()
        if self._sink is None:
            return
        ahead = {p: n for p, n in self._next.items() if n > self._marker[p]}
        if ahead:
            self._sink.commit(self._topic, ahead, f"batch {self._batch_id}")

    def close(self) -> None:
        """Abort what was not committed and destroy the sink."""
        if self._opening is not None:  # the task failed while its sink was opening
            self._opening.join()
            self._sink, self._opening = self._opening.sink, None
        if self._sink is not None:
            self._sink.discard()
            self._sink = None
