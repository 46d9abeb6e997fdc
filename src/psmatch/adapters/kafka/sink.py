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
from psmatch.adapters.batch_producer import BatchProducer
from psmatch.adapters.kafka.client import CLIENT_LOG, ClientErrors, KafkaServiceError
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
        self._config = {
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
        self._producer = self._new_producer()

    def _new_producer(self) -> BatchProducer:
        return BatchProducer(self._config, self._client_errors.record, CLIENT_LOG)

    def write(self, records: pa.RecordBatch | pa.Table) -> None:
        """Queue ``records`` (columns ``topic`` string, ``key`` and ``value`` binary,
        a null key or value as Kafka's null), in order."""
        for batch in records.to_batches() if isinstance(records, pa.Table) else [records]:
            for start in range(0, batch.num_rows, SINK_CHUNK):
                chunk = batch.slice(start, SINK_CHUNK)
                for topic, first, stop in topic_runs(chunk.column("topic")):
                    self._produce(topic, chunk.slice(first, stop - first))

    def _produce(self, topic: str, batch: pa.RecordBatch) -> None:
        self._producer.produce(topic, batch.column("key"), batch.column("value"),
                               self._client_errors.check)  # fmt: skip

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

    The marker is read and committed through a consumer of ``marker_group`` that this
    process keeps (:func:`_marker_consumer`): it only reads positions and names the
    group, so sinks one after the other share it and the group's coordinator is looked
    up once.

    Records go through confluent-kafka's ``Producer.produce``, one Python call a record
    (librdkafka's transactional API is not in :class:`BatchProducer`), with the settings
    of :class:`RecordSink` (partitioner, batches, compression). Cost per task: a
    producer and a consumer created, ``init_transactions`` and a position read (a few
    round trips to the broker), one commit (a round trip to the transaction coordinator
    and the markers written to each partition written).
    """

    def __init__(self, settings: SinkSettings, transactional_id: str, marker_group: str,
                 timeout_s: float = 60.0) -> None:  # fmt: skip
        from confluent_kafka import Producer

        self._client_errors = ClientErrors(settings.bootstrap_servers)
        self._timeout_s = timeout_s
        base = {"bootstrap.servers": settings.bootstrap_servers,
                **settings.security.client_config(), "error_cb": self._client_errors,
                "logger": CLIENT_LOG}  # fmt: skip
        self._producer = Producer({
            **base, **sink_settings(settings.compression),
            "partitioner": "murmur2_random",
            "transactional.id": transactional_id,
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "retry.backoff.ms": 20,
            "retry.backoff.max.ms": 200,
            "message.max.bytes": 1 << 20,
            "queue.buffering.max.kbytes": 12 * 1024,
            "queue.buffering.max.messages": 1_000_000,
        })  # fmt: skip
        self._consumer, self._marker_errors = _marker_consumer(settings, marker_group)
        self._failures: list[str] = []
        self._open = False
        try:
            self._call(self._producer.init_transactions, self._timeout_s)
        except BaseException:
            self.close()
            raise

    def _call(self, method: object, *args: object) -> object:
        """``method(*args)``, called again while it fails with a retriable error (a
        coordinator moving or loading, for up to ``timeout_s``); any other Kafka error
        as :class:`KafkaServiceError` (a refused login as
        :class:`~psmatch.adapters.kafka.client.KafkaAuthenticationError`)."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                return method(*args)  # type: ignore[operator]
            except KafkaException as exc:
                self._client_errors.check()
                self._marker_errors.check()
                error = exc.args[0]
                if error.retriable() and time.monotonic() < deadline:
                    time.sleep(0.1)
                    continue
                raise KafkaServiceError(f"Kafka transaction failed: {error}") from None

    def committed(self, topic: str, partitions: list[int]) -> dict[int, int]:
        """The marker's position in each of ``partitions`` of ``topic``: the first offset
        no committed transaction covers (0 where none was committed)."""
        from confluent_kafka import TopicPartition

        got = self._call(self._consumer.committed,
                         [TopicPartition(topic, p) for p in partitions], self._timeout_s)
        return {tp.partition: max(tp.offset, 0) for tp in got}  # type: ignore[attr-defined]

    def begin(self) -> None:
        self._call(self._producer.begin_transaction)
        self._open = True

    def write(self, records: pa.RecordBatch | pa.Table) -> None:
        """Queue ``records`` (the columns of :meth:`RecordSink.write`) in the open
        transaction, in order."""
        produce, poll = self._producer.produce, self._producer.poll
        for batch in records.to_batches() if isinstance(records, pa.Table) else [records]:
            columns = (batch.column(name).to_pylist() for name in ("topic", "key", "value"))
            for topic, key, value in zip(*columns, strict=True):
                while True:
                    try:
                        produce(topic, value, key, on_delivery=self._on_delivery)
                        break
                    except BufferError:  # the queue is full: wait for room
                        poll(0.05)
                        self._client_errors.check()
            poll(0)

    def _on_delivery(self, err: object, msg: object) -> None:
        if err is not None and len(self._failures) < 3:
            self._failures.append(f"{msg.topic()}: {err}")  # type: ignore[attr-defined]

    def commit(self, topic: str, positions: dict[int, int], metadata: str) -> None:
        """Commit the open transaction: the records written since :meth:`begin` and the
        marker at ``positions`` (partition of ``topic`` -> the next offset to read),
        noted with ``metadata``. :class:`KafkaServiceError` if it could not (the broker
        fenced this producer, aborted the transaction on its timeout, or is out of
        reach for ``timeout_s``): then nothing of it is visible."""
        from confluent_kafka import TopicPartition

        if positions:
            offsets = [TopicPartition(topic, p, n, metadata) for p, n in sorted(positions.items())]
            self._call(self._producer.send_offsets_to_transaction, offsets,
                       self._consumer.consumer_group_metadata(), self._timeout_s)  # fmt: skip
        self._call(self._producer.commit_transaction, self._timeout_s)
        self._open = False
        if self._failures:  # cannot be: a failed record fails the commit
            raise KafkaServiceError(f"records failed in a committed transaction: {self._failures}")

    def close(self) -> None:
        """Abort the open transaction, if any (best effort: a successor's fencing aborts
        it too), and release the producer."""
        from confluent_kafka import KafkaException

        if self._open:
            self._open = False
            with contextlib.suppress(KafkaException):
                self._producer.abort_transaction(min(self._timeout_s, 10.0))


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
