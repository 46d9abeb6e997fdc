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
"""

from __future__ import annotations

import hashlib
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
        self._id = ""
        self._marker: dict[int, int] = {}  # events partition -> first offset not covered
        self._next: dict[int, int] = {}  # events partition -> after the last offset read
        self.replayed = 0  # events left out: a committed transaction covers them

    def _open(self, partition: int) -> TransactionalSink:
        name = f"s{self._shard}" if self._shards > 1 else f"p{partition}"
        self._id = f"{self._prefix}.{name}"
        self._sink = TransactionalSink(self._settings, self._id, self._id)
        self._sink.begin()
        return self._sink

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
                self._marker.update(self._sink.committed(self._topic, new))
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

    def close(self) -> None:
        """Abort what was not committed and destroy the sink."""
        if self._sink is not None:
            self._sink.discard()
            self._sink = None
