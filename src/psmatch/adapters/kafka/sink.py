"""The writer of the service's output records: :class:`RecordSink`.

Owns how the matching tasks' notifications and rejects, and the driver's rejected
subscription records, reach Kafka: a whole Arrow batch at a time, through
:mod:`psmatch.adapters.batch_producer` (librdkafka's batch produce), with the producer
settings every writer of many records uses (:func:`sink_settings`, which a Spark Kafka
sink takes as well) and the chunking of a batch by topic (:func:`topic_runs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

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
