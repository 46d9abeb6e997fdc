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

A process keeps its sink of each ``transactional.id`` from task to task (a Python
worker runs tasks of batch after batch). A kept sink puts the marker it read in its
transaction before writing anything, a round trip that fails if another process's sink
of the id has fenced it since (the task of an earlier batch ran in another worker): a
new sink then replaces it, fencing the other in turn, and reads the marker again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from psmatch.adapters.arrow import values_of
from psmatch.adapters.kafka.client import KafkaServiceError
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


_SINKS: dict[tuple[SinkSettings, str], TransactionalSink] = {}
"""This process's sink of each ``transactional.id``: opening one costs a producer and
its registration with the transaction coordinator (tens of milliseconds), which a task
of every batch would otherwise pay."""


class ExactlyOnceTask:
    """The exactly-once writing of one matching task of batch ``batch_id``.

    :meth:`unseen` passes on the task's input batches without the events a committed
    transaction covers, opening the task's :class:`TransactionalSink` at the first
    event (which fences the earlier attempts); :meth:`write` queues output records in
    its transaction, :meth:`commit` commits them with the marker after the last event
    read, :meth:`close` aborts whatever was not committed. A task without events opens
    no sink and commits nothing.
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
        self._claimed = False  # whether the sink is known not to be fenced
        self._done = False  # whether commit() ended without an error
        self._id = ""
        self._marker: dict[int, int] = {}  # events partition -> first offset not covered
        self._next: dict[int, int] = {}  # events partition -> after the last offset read
        self.replayed = 0  # events left out: a committed transaction covers them

    def _open(self, partition: int) -> TransactionalSink:
        name = f"s{self._shard}" if self._shards > 1 else f"p{partition}"
        self._id = f"{self._prefix}.{name}"
        return self._begin()

    def _begin(self) -> TransactionalSink:
        """Begin the task's transaction on this process's sink of its id (a new one if
        it has none, or one that was fenced)."""
        key = (self._settings, self._id)
        sink = _SINKS.get(key)
        if sink is None or sink.fenced:
            sink = _SINKS[key] = TransactionalSink(self._settings, self._id, self._id)
            self._claimed = True  # opening it fenced every other: nothing to check
        sink.begin()
        self._sink = sink
        return sink

    def _renew(self) -> TransactionalSink:
        """A new sink of the id in place of this process's (which another fenced)."""
        assert self._sink is not None
        self._sink.fenced = True
        self._sink.discard()
        return self._begin()

    def _read_marker(self, partitions: list[int]) -> dict[int, int]:
        """The marker's positions in ``partitions``. The first time, with a sink kept
        from an earlier task, the marker is put in the transaction too, which fails if a
        newer sink fenced this one: then, nothing being written yet, a new sink (fencing
        that one) reads the marker again."""
        assert self._sink is not None
        positions = self._sink.committed(self._topic, partitions)
        if self._claimed:
            return positions
        self._claimed = True
        try:
            self._sink.claim(self._topic, positions, f"batch {self._batch_id}")
        except KafkaServiceError:
            if not self._sink.fenced:
                raise
            return self._renew().committed(self._topic, partitions)
        return positions

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
            if self._sink is None:
                self._open(int(partitions[0]))
            seen = np.unique(partitions).tolist()
            handed = sorted(set(seen) | set(self._marker))
            if self._shards == 1 and len(handed) > 1:
                raise DeliveryError(f"the task of {self._id} was handed events of "
                                    f"partitions {handed}")  # fmt: skip
            new = [p for p in seen if p not in self._marker]
            if new:
                self._marker.update(self._read_marker(new))
            fresh = np.empty(len(offsets), dtype=bool)
            for p in seen:
                rows = partitions == p
                fresh[rows] = offsets[rows] >= self._marker[p]
                last = int(offsets[rows].max()) + 1
                self._next[p] = max(self._next.get(p, 0), last)
            if fresh.all():
                yield batch
                continue
            self.replayed += int((~fresh).sum())
            if fresh.any():
                yield batch.filter(pa.array(fresh))

    def write(self, records: pa.RecordBatch) -> None:
        assert self._sink is not None  # records come from events: the sink is open
        self._sink.write(records)

    def commit(self) -> None:
        """Commit the transaction and the marker after every event read (no commit
        when every event was covered already)."""
        if self._sink is None:
            return
        ahead = {p: n for p, n in self._next.items() if n > self._marker[p]}
        if ahead:
            self._sink.commit(self._topic, ahead, f"batch {self._batch_id}")
        self._done = True

    def close(self) -> None:
        """Abort what was not committed. The sink stays this process's for the id after
        a task that ended well; after a failure it is destroyed (a transaction call that
        timed out, say, can leave it in a state no next task could begin from)."""
        if self._sink is None:
            return
        if self._done:
            self._sink.close()
        else:
            _SINKS.pop((self._settings, self._id), None)
            self._sink.discard()
        self._sink = None
