"""The writer of the service's output records: :class:`RecordSink`.

Owns how the matching tasks' notifications and rejects, and the driver's rejected
subscription records, reach Kafka: a whole Arrow batch at a time, through
:mod:`psmatch.adapters.batch_producer` (librdkafka's batch produce), with the producer
settings every writer of many records uses (:func:`sink_settings`, which a Spark Kafka
sink takes as well) and the chunking of a batch by topic (:func:`topic_runs`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa

from psmatch.adapters.arrow import value_offsets
from psmatch.adapters.batch_producer import BatchProducer, TransactionFailure
from psmatch.adapters.kafka.client import (
    CLIENT_LOG,
    ClientErrors,
    KafkaAuthorizationError,
    KafkaServiceError,
)
from psmatch.adapters.kafka.security import PLAINTEXT, KafkaSecurity

SINK_COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")
"""The codecs Kafka producers offer (``compression.type``)."""


def sink_settings(compression: str) -> dict[str, str]:
    """Producer settings of every writer of many output records: batches of up to 1 MiB,
    compressed with ``compression`` (one of :data:`SINK_COMPRESSION_TYPES`). The names
    are those of both clients: :class:`RecordSink` (librdkafka) takes them as they are,
    a Spark Kafka sink with the prefix ``kafka.``.

    A batch of events makes about as many notification records as it has matches,
    several per event, each carrying its event. In batches of up to 1 MiB (the Java
    producer's default is 16 KiB) the broker and the producer handle them with much
    less CPU than in many small ones, CPU the Python workers need; compressed, a batch
    that repeats each event in many notifications shrinks on the wire and on the
    broker's disk, and the broker, which shares the machine in the benchmark, spends
    less CPU storing it (``bench/bench_sink_compression.py`` compares the codecs).
    Consumers need the codec: Java clients and librdkafka have them all, kafka-python
    needs the ``lz4`` package for lz4.
    """
    return {"batch.size": str(1 << 20), "linger.ms": "20", "compression.type": compression}


@dataclass(frozen=True, slots=True)
class SinkSettings:
    """Where and how a :class:`RecordSink` writes: what a Spark task needs to open one
    (shipped in its closure; it holds the password)."""

    bootstrap_servers: str
    security: KafkaSecurity = PLAINTEXT
    compression: str = "lz4"


SINK_CHUNK = 4_096
"""Records :meth:`RecordSink.write` queues at a time: one ``rd_kafka_produce_batch``
call over an array of 72 bytes a record (:mod:`psmatch.adapters.batch_producer`). A
worker assembles its notification records as many at a time (``psmatch.service.tasks``),
so a chunk being built and librdkafka's full queue (12 MiB, :class:`RecordSink`) are
what the writing holds at once: larger chunks raise a worker's peak memory and save no
CPU, the C call being a small share of a record's cost already."""


def topic_runs(topics: pa.StringArray) -> list[tuple[str, int, int]]:
    """The runs of rows with the same topic, ``(topic, start, stop)`` in row order: one
    for a batch of one topic (a worker's batches are). Slicing a batch by its runs keeps
    each topic's records in order without ``pyarrow.compute`` (its ``unique`` and
    ``filter``), which a Python worker would load for this alone (megabytes resident
    in every worker), nor a Python string per row.

    Cost O(rows) in numpy when every topic has the same length (the bytes of each row
    compared with the next's), else a Python string per row.
    """
    n = len(topics)
    if not n:
        return []
    offsets = value_offsets(topics)
    width = int(offsets[1] - offsets[0])
    if not (np.diff(offsets) == width).all():
        names = np.array(topics.to_pylist(), dtype=object)
        cuts = np.flatnonzero(names[1:] != names[:-1]) + 1
    elif width:
        data = np.frombuffer(topics.buffers()[2], np.uint8)
        rows = data[offsets[0] : offsets[-1]].reshape(n, width)
        cuts = np.flatnonzero((rows[1:] != rows[:-1]).any(axis=1)) + 1
    else:
        cuts = np.empty(0, dtype=np.int64)
    bounds = [0, *cuts.tolist(), n]
    return [(topics[a].as_py(), a, b) for a, b in pairwise(bounds)]


def _producer_config(settings: SinkSettings) -> dict[str, str]:
    """librdkafka's settings of both sinks' producers."""
    return {
        "bootstrap.servers": settings.bootstrap_servers,
        **settings.security.client_config(),
        **sink_settings(settings.compression),
        "partitioner": "murmur2_random",
        "enable.idempotence": "true",
        "message.timeout.ms": "120000",
        # a notification is at most SINK_RECORD_LIMIT (psmatch.service.records.common) bytes;
        # this is the Java producer's max.request.size
        "message.max.bytes": str(1 << 20),
        # a full queue is memory every matching worker holds on top of its index: a
        # small one keeps a worker's peak down, at the cost of a little more waiting
        # for room
        "queue.buffering.max.kbytes": str(12 * 1024),
        "queue.buffering.max.messages": "1000000",
    }  # fmt: skip


def _queue(producer: BatchProducer, records: pa.RecordBatch | pa.Table,
           client_errors: ClientErrors) -> None:  # fmt: skip
    """Queue ``records`` (columns ``topic`` string, ``key`` and ``value`` binary, a null
    key or value as Kafka's null) on ``producer``, in order, :data:`SINK_CHUNK` at a
    time and one call per run of a topic."""
    for batch in records.to_batches() if isinstance(records, pa.Table) else [records]:
        for start in range(0, batch.num_rows, SINK_CHUNK):
            chunk = batch.slice(start, SINK_CHUNK)
            for topic, first, stop in topic_runs(chunk.column("topic")):
                run = chunk.slice(first, stop - first)
                producer.produce(topic, run.column("key"), run.column("value"),
                                 client_errors.check)  # fmt: skip


class RecordSink:
    """Writes the service's output records (notifications and rejects) to Kafka with
    librdkafka, at least once, the way Spark's Kafka sink did: keyed records go to the
    partition the Java client would choose (``murmur2_random``), the producer is
    idempotent (no duplicates or reordering from its own retries), and a record not
    acknowledged within two minutes (Java's ``delivery.timeout.ms``) fails.

    :meth:`write` queues records; :meth:`flush` waits until every record queued is
    acknowledged, and raises :class:`KafkaServiceError` if any failed since the last
    flush: a matching task flushes before it ends, so a task whose records were not all
    written fails, and Spark runs it (or the query runs its batch) again.

    Memory: librdkafka's queue is bounded (12 MiB); :meth:`write` waits for room when it
    is full. Cost per record: a share of one C call per :data:`SINK_CHUNK` records
    (:class:`psmatch.adapters.batch_producer.BatchProducer`, which copies it from the Arrow
    buffers), and librdkafka's threads, which compress and send it; ``.venv/bin/python
    bench/bench_sink_compression.py`` measures both, per codec.
    """

    def __init__(self, settings: SinkSettings) -> None:
        self._client_errors = ClientErrors(settings.bootstrap_servers)
        self._config = _producer_config(settings)
        self._producer = self._new_producer()

    def _new_producer(self) -> BatchProducer:
        return BatchProducer(self._config, self._client_errors.record, CLIENT_LOG)

    def write(self, records: pa.RecordBatch | pa.Table) -> None:
        """Queue ``records`` (columns ``topic`` string, ``key`` and ``value`` binary,
        a null key or value as Kafka's null), in order."""
        _queue(self._producer, records, self._client_errors)

    def flush(self) -> None:
        """Wait until every queued record is acknowledged or has failed (at most
        ``message.timeout.ms``); :class:`KafkaServiceError` if any failed since the
        last flush (the sink then goes on with a new producer),
        :class:`~psmatch.adapters.kafka.client.KafkaAuthenticationError` if the broker
        refused the login."""
        while self._producer.flush(1.0):
            self._client_errors.check()
        self._client_errors.check()
        failures, examples = self._producer.take_failures()
        if failures:
            # a new producer: an error can leave one unusable (a fatal idempotence
            # error), and the queue is empty now
            self._producer.close()
            self._producer = self._new_producer()
            raise KafkaServiceError(f"{failures} output records were not written to Kafka, "
                                    f"e.g. {'; '.join(examples)}")  # fmt: skip


TRANSACTION_TIMEOUT_MS = 120_000
"""How long the broker lets a transaction stay open (``transaction.timeout.ms``): a task
must write and commit its records within it, else the broker aborts them and the task
fails. It is also how long a transaction of a task that died, and is never fenced by a
successor, holds back every ``read_committed`` consumer of its partitions."""

OPENING_WAIT_S = 5.0
"""How long a :class:`TransactionalSink` waits for a broker to answer before it calls
``init_transactions`` (:meth:`BatchProducer.await_broker` says why); a broker that has
not answered by then is left to ``init_transactions``' own timeout and error."""


class TransactionalSink:
    """Writes output records in Kafka transactions, with a marker of the input read:
    the exactly-once writer (:mod:`psmatch.service.delivery` says how a matching task
    uses it).

    Opening one with a ``transactional_id`` fences every earlier producer of that id:
    the broker aborts its open transaction, and none of its later writes or commits
    succeeds. The marker is the input position of ``marker_group``, a consumer group
    nothing consumes with: :meth:`commit` makes the records written since :meth:`begin`
    and the positions given visible together, or neither; :meth:`committed` reads the
    positions back. Read after the sink is opened, the positions are those of every
    transaction that will ever commit under the id.

    The marker is read through a consumer of ``marker_group`` that this process keeps
    (:func:`_marker_consumer`): it only reads positions, so sinks one after the other
    share it and the group's coordinator is looked up once.

    Records are queued as :class:`RecordSink` queues them, a whole Arrow batch per C call
    (:class:`~psmatch.adapters.batch_producer.BatchProducer`), with its settings
    (partitioner, batches, compression). Cost: opening, a producer created, one
    metadata request (:data:`OPENING_WAIT_S` says why) and ``init_transactions`` (a few
    round trips to the broker); per transaction, a position
    read, and a commit (round trips to the transaction's and the group's coordinators,
    and the markers written to each partition written).
    """

    def __init__(self, settings: SinkSettings, transactional_id: str, marker_group: str,
                 timeout_s: float = 60.0) -> None:  # fmt: skip
        self._client_errors = ClientErrors(settings.bootstrap_servers)
        self._timeout_s = timeout_s
        self._id = transactional_id
        self._group = marker_group
        self._producer = BatchProducer({
            **_producer_config(settings),
            "transactional.id": transactional_id,
            "transaction.timeout.ms": str(TRANSACTION_TIMEOUT_MS),
            "retry.backoff.ms": "20",
            "retry.backoff.max.ms": "200",
            # a task's producer is new: its connections come up in some 15 ms instead
            # of the 55 ms librdkafka's default backoff of 100 ms takes on loopback
            "reconnect.backoff.ms": "20",
        }, self._client_errors.record, CLIENT_LOG)  # fmt: skip
        self._consumer, self._marker_errors = _marker_consumer(settings, marker_group)
        self._open = False
        try:
            self._producer.await_broker(min(self._timeout_s, OPENING_WAIT_S))
            self._call(self._producer.init_transactions, self._timeout_s)
        except BaseException:
            self.close()
            raise

    def _call(self, method: Any, *args: object) -> Any:
        """``method(*args)``, called again while it fails with a retriable error (a
        coordinator moving or loading, for up to ``timeout_s``); any other failure as
        :class:`KafkaServiceError` (a refused login as
        :class:`~psmatch.adapters.kafka.client.KafkaAuthenticationError`, a missing ACL
        on the transactional id or the marker group as
        :class:`~psmatch.adapters.kafka.client.KafkaAuthorizationError`), after which
        the open transaction is aborted if it must be."""
        from confluent_kafka import KafkaError, KafkaException

        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                return method(*args)
            except TransactionFailure as exc:
                failure: TransactionFailure | None = exc
                code, retriable, text = exc.code, exc.retriable, str(exc)
            except KafkaException as exc:  # the marker's consumer
                failure, code = None, exc.args[0].code()
                # a group coordinator moving or loading (a broker just started) is
                # worth waiting for, though librdkafka does not call it retriable here
                retriable = exc.args[0].retriable() or code in (
                    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR,
                    KafkaError.COORDINATOR_NOT_AVAILABLE)  # fmt: skip
                text = exc.args[0].str()
            self._producer.poll(0)
            self._client_errors.check()
            self._marker_errors.check()
            if retriable and time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            if failure is not None:
                _, examples = self._producer.take_failures()  # why records failed
                text = "; ".join([text, *examples])
                if failure.abortable:
                    self.close()
            if code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                raise KafkaAuthorizationError(
                    f"not authorised to use transactional id {self._id}: the principal "
                    "needs WRITE on it (psmatch acls --delivery exactly-once)"
                ) from None  # fmt: skip
            if code == KafkaError.GROUP_AUTHORIZATION_FAILED:
                raise KafkaAuthorizationError(
                    f"not authorised to commit to consumer group {self._group}: the "
                    "principal needs READ on it (psmatch acls --delivery exactly-once)"
                ) from None  # fmt: skip
            if failure is None and code == KafkaError._TIMED_OUT:
                # the marker's read: librdkafka retries a group the principal may not
                # read until the timeout, as it does a coordinator out of reach
                raise KafkaServiceError(
                    f"could not read the marker of consumer group {self._group} within "
                    f"{self._timeout_s:.0f} s: is the broker reachable, and may the "
                    "principal READ the group (psmatch acls --delivery exactly-once)?"
                ) from None  # fmt: skip
            raise KafkaServiceError(f"Kafka transaction failed: {text}") from None

    def committed(self, topic: str, partitions: list[int]) -> dict[int, int]:
        """The marker's position in each of ``partitions`` of ``topic``: the first offset
        no committed transaction covers (0 where none was committed)."""
        from confluent_kafka import TopicPartition

        got = self._call(self._consumer.committed,
                         [TopicPartition(topic, p) for p in partitions], self._timeout_s)
        return {tp.partition: max(tp.offset, 0) for tp in got}

    def begin(self) -> None:
        self._call(self._producer.begin_transaction)
        self._open = True

    def write(self, records: pa.RecordBatch | pa.Table) -> None:
        """Queue ``records`` (the columns of :meth:`RecordSink.write`) in the open
        transaction, in order."""
        _queue(self._producer, records, self._client_errors)

    def commit(self, topic: str, positions: dict[int, int], metadata: str) -> None:
        """Commit the open transaction: the records written since :meth:`begin` and the
        marker at ``positions`` (partition of ``topic`` -> the next offset to read),
        noted with ``metadata``. :class:`KafkaServiceError` if it could not (the broker
        fenced this producer, aborted the transaction on its timeout, a record failed,
        or the broker is out of reach for ``timeout_s``): then nothing of it is visible."""
        if positions:
            self._call(self._producer.send_offsets_to_transaction, topic, positions,
                       self._group, metadata, self._timeout_s)  # fmt: skip
        self._call(self._producer.commit_transaction, self._timeout_s)
        self._open = False
        failures, examples = self._producer.take_failures()
        if failures:  # cannot be: a failed record fails the commit
            raise KafkaServiceError(f"records failed in a committed transaction: {examples}")

    def close(self) -> None:
        """Abort the open transaction, if any (best effort: a successor's fencing aborts
        it too)."""
        if self._open:
            self._open = False
            with contextlib.suppress(TransactionFailure):
                self._producer.abort_transaction(min(self._timeout_s, 10.0))
            self._producer.take_failures()

    def discard(self) -> None:
        """Close the sink and destroy its producer."""
        self.close()
        self._producer.close()


_MARKER_CONSUMERS: dict[tuple[SinkSettings, str], tuple[Any, ClientErrors]] = {}
_MARKER_LOCK = threading.Lock()


def _marker_consumer(settings: SinkSettings, group: str) -> tuple[Any, ClientErrors]:
    """This process's consumer of ``group`` (never subscribed: it reads the group's
    positions, ``read_committed``, and gives its metadata to a transaction), opened at
    first use, with its error callback."""
    from confluent_kafka import Consumer

    with _MARKER_LOCK:
        found = _MARKER_CONSUMERS.get((settings, group))
        if found is None:
            errors = ClientErrors(settings.bootstrap_servers)
            consumer = Consumer({"bootstrap.servers": settings.bootstrap_servers,
                                 **settings.security.client_config(), "error_cb": errors,
                                 "logger": CLIENT_LOG, "group.id": group,
                                 "enable.auto.commit": False,
                                 "isolation.level": "read_committed"})  # fmt: skip
            found = _MARKER_CONSUMERS[(settings, group)] = (consumer, errors)
        return found
