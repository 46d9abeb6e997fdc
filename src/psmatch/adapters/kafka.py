"""Kafka plumbing outside Spark, with librdkafka: topics, producing, consuming.

Owns:

* creating the service's four topics with the right settings (the subscriptions topic
  compacted);
* the writer of the service's output records, :class:`RecordSink`: the matching tasks'
  notifications and rejects, and the driver's rejected subscription records, a whole
  Arrow batch at a time (:mod:`psmatch.adapters.batch_producer`; every other client here is
  confluent-kafka's);
* a JSON producer used by the CLI and the load generator;
* a consumer that reads a topic from the start, the end or given offsets (``psmatch
  tail``, ``psmatch rebuild-state``, the tests and the benchmark);
* the one place Kafka security is turned into client settings: :class:`KafkaSecurity`
  gives librdkafka's settings (the clients here) and :func:`spark_kafka_options` the
  ``kafka.``-prefixed options of Spark's Kafka source, so every client of the service
  connects the same way.

A client whose credentials the broker refuses fails at once with one
:class:`KafkaAuthenticationError` instead of retrying until a timeout.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from psmatch.adapters.arrow import value_offsets
from psmatch.adapters.batch_producer import BatchProducer
from psmatch.errors import PsmatchError

log = logging.getLogger(__name__)


class KafkaServiceError(PsmatchError):
    """Kafka unreachable, a topic that cannot be created, a record that cannot be sent."""


class KafkaAuthenticationError(KafkaServiceError):
    """The broker refused the client's SASL credentials (or its TLS handshake failed)."""


KAFKA_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


@dataclass(frozen=True, slots=True)
class KafkaSecurity:
    """How every client authenticates to and encrypts its traffic with the brokers.

    ``protocol`` is Kafka's ``security.protocol``; with ``SASL_*``, ``sasl_mechanism``,
    ``username`` and ``password`` authenticate; with ``SSL``/``SASL_SSL``, ``ca_file``
    (PEM) verifies the brokers (default: the system's CAs). The password is left out of
    ``repr``.
    """

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "SCRAM-SHA-512"
    username: str = ""
    password: str = field(default="", repr=False)
    ca_file: str = ""

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def client_config(self) -> dict[str, str]:
        """librdkafka settings (confluent-kafka's producer, consumer and admin client)."""
        conf = {"security.protocol": self.protocol}
        if self.sasl:
            conf.update({"sasl.mechanism": self.sasl_mechanism, "sasl.username": self.username,
                         "sasl.password": self.password})  # fmt: skip
        if self.tls and self.ca_file:
            conf["ssl.ca.location"] = self.ca_file
        return conf

    def java_config(self) -> dict[str, str]:
        """The same settings for the Java client (Spark's source and sink, Kafka's tools)."""
        conf = {"security.protocol": self.protocol}
        if self.sasl:

            def quoted(text: str) -> str:
                return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

            conf["sasl.mechanism"] = self.sasl_mechanism
            conf["sasl.jaas.config"] = (
                f"{_LOGIN_MODULES[self.sasl_mechanism]} required "
                f"username={quoted(self.username)} password={quoted(self.password)};"
            )
        if self.tls and self.ca_file:
            conf.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": self.ca_file})
        return conf


PLAINTEXT = KafkaSecurity()


def spark_kafka_options(bootstrap_servers: str, security: KafkaSecurity) -> dict[str, str]:
    """The ``kafka.``-prefixed options of Spark's Kafka source (and of a Spark Kafka
    sink, as the benchmark's ceiling uses).

    Use them whole: ``spark.readStream.format("kafka").options(**opts)``. They hold the
    password.
    """
    conf = {"bootstrap.servers": bootstrap_servers, **security.java_config()}
    return {f"kafka.{key}": value for key, value in conf.items()}


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
    less CPU storing it (docs/bench-streaming.md measures both). Consumers need the
    codec: Java clients and librdkafka have them all, kafka-python needs the ``lz4``
    package for lz4.
    """
    return {"batch.size": str(1 << 20), "linger.ms": "20", "compression.type": compression}


class _ClientErrors:
    """The error callback of a confluent-kafka client: remembers a refused login.

    librdkafka retries a failed authentication for ever (its log says why, once per
    attempt); the service instead stops with one message the first time.
    """

    def __init__(self, bootstrap_servers: str) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.auth: str | None = None

    def __call__(self, err: KafkaError) -> None:
        self.record(err.code(), err.str())

    def record(self, code: int, reason: str) -> None:
        """Note a client error (librdkafka's code and reason)."""
        if code in (KafkaError._AUTHENTICATION, KafkaError._SSL):
            self.auth = self.auth or reason

    def check(self) -> None:
        if self.auth is not None:
            raise KafkaAuthenticationError(
                f"Kafka at {self.bootstrap_servers} refused the connection: {self.auth} "
                "(check kafka_username, the password in PSMATCH_KAFKA_PASSWORD or "
                "--kafka-password-file, kafka_sasl_mechanism and kafka_security_protocol)"
            )


CLIENT_LOG = logging.getLogger("psmatch.kafka.client")
"""Where librdkafka's own log goes (the CLI shows its warnings only)."""


def _client_config(
    bootstrap_servers: str, security: KafkaSecurity, errors: _ClientErrors
) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap_servers, **security.client_config(),
            "error_cb": errors, "logger": CLIENT_LOG}  # fmt: skip


def _admin(bootstrap_servers: str, security: KafkaSecurity) -> tuple[AdminClient, _ClientErrors]:
    errors = _ClientErrors(bootstrap_servers)
    return AdminClient(_client_config(bootstrap_servers, security, errors)), errors


def _list_topics(admin: AdminClient, errors: _ClientErrors, timeout: float) -> Any:
    """Cluster metadata; a refused login fails within about a second, not at ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        step = max(0.1, min(1.0, deadline - time.monotonic()))
        try:
            return admin.list_topics(timeout=step)
        except Exception as exc:
            admin.poll(0)  # runs the error callback
            errors.check()
            if time.monotonic() >= deadline:
                raise KafkaServiceError(
                    f"Kafka at {errors.bootstrap_servers} is not reachable: {exc}"
                ) from None


@dataclass(frozen=True, slots=True)
class Record:
    """A record read from Kafka."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int

    def json(self) -> Any:
        return None if self.value is None else json.loads(self.value)


def wait_for_kafka(
    bootstrap_servers: str, timeout: float = 10.0, security: KafkaSecurity = PLAINTEXT
) -> bool:
    """Whether a broker answers a metadata request within ``timeout`` seconds.

    :class:`KafkaAuthenticationError` if it refuses the credentials.
    """
    admin, errors = _admin(bootstrap_servers, security)
    try:
        return bool(_list_topics(admin, errors, timeout).brokers)
    except KafkaAuthenticationError:
        raise
    except KafkaServiceError:
        return False


def ensure_topics(
    bootstrap_servers: str,
    topics: Mapping[str, Mapping[str, str]],
    partitions: int = 2,
    timeout: float = 30.0,
    security: KafkaSecurity = PLAINTEXT,
) -> list[str]:
    """Create the topics that do not exist yet; returns the names created.

    ``topics`` maps a name to its topic configs (e.g. ``{"cleanup.policy": "compact"}``).
    """
    admin, errors = _admin(bootstrap_servers, security)
    existing = set(_list_topics(admin, errors, timeout).topics)
    new = [
        NewTopic(name, num_partitions=partitions, replication_factor=1, config=dict(cfg))
        for name, cfg in topics.items()
        if name not in existing
    ]
    created = []
    if new:
        for name, future in admin.create_topics(new, operation_timeout=timeout).items():
            try:
                future.result()
                created.append(name)
                log.info("created topic %s", name)
            except Exception as exc:
                err = exc.args[0] if exc.args else None
                if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue
                raise KafkaServiceError(f"could not create topic {name}: {exc}") from exc
        _wait_topics_visible(admin, [t.topic for t in new], timeout)
    return created


def _wait_topics_visible(admin: AdminClient, names: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=timeout)
        if all(n in md.topics and md.topics[n].partitions for n in names):
            return
        time.sleep(0.1)


def delete_topics(
    bootstrap_servers: str,
    names: list[str],
    timeout: float = 30.0,
    security: KafkaSecurity = PLAINTEXT,
) -> None:
    admin, _ = _admin(bootstrap_servers, security)
    for future in admin.delete_topics(names, operation_timeout=timeout).values():
        try:
            future.result()
        except Exception as exc:
            log.warning("could not delete topic: %s", exc)


def service_topics(
    subscriptions: str, events: str, notifications: str, rejected: str
) -> dict[str, dict[str, str]]:
    """The four topics with their configs: subscriptions compacted, the rest deleted by age."""
    return {
        subscriptions: {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"},
        events: {"retention.ms": str(7 * 24 * 3600 * 1000)},
        notifications: {"retention.ms": str(7 * 24 * 3600 * 1000)},
        rejected: {"retention.ms": str(30 * 24 * 3600 * 1000)},
    }


def _text_or_bytes(value: str | bytes | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return value.encode()


class JsonProducer:
    """A confluent-kafka producer of JSON (or raw) values, tuned for throughput."""

    def __init__(
        self, bootstrap_servers: str, security: KafkaSecurity = PLAINTEXT, **config: Any
    ) -> None:
        self._client_errors = _ClientErrors(bootstrap_servers)
        conf = {
            **_client_config(bootstrap_servers, security, self._client_errors),
            "linger.ms": 5,
            "batch.num.messages": 10_000,
            "enable.idempotence": True,
            **config,
        }
        self._producer = Producer(conf)
        self._errors: list[str] = []

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._errors.append(f"{msg.topic()}: {err}")

    def send(
        self,
        topic: str,
        value: Any,
        key: str | bytes | None = None,
        *,
        raw: bool = False,
        timestamp_ms: int | None = None,
    ) -> None:
        """Send ``value`` as JSON (``raw=True``: as given; ``None`` = tombstone)."""
        if value is None:
            payload = None
        elif raw:
            payload = _text_or_bytes(value)
        else:
            payload = json.dumps(value, separators=(",", ":")).encode()
        kwargs: dict[str, Any] = {"on_delivery": self._on_delivery}
        if timestamp_ms is not None:
            kwargs["timestamp"] = timestamp_ms
        while True:
            try:
                self._producer.produce(topic, payload, _text_or_bytes(key), **kwargs)
                break
            except BufferError:
                self._producer.poll(0.05)
                self._client_errors.check()
        self._producer.poll(0)

    def flush(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        remaining = self._producer.flush(0.2)
        while remaining and time.monotonic() < deadline:
            self._client_errors.check()
            remaining = self._producer.flush(min(0.5, max(0.0, deadline - time.monotonic())))
        self._client_errors.check()
        if remaining:
            raise KafkaServiceError(f"{remaining} records not delivered within {timeout:.0f} s")
        if self._errors:
            errors, self._errors = self._errors, []
            raise KafkaServiceError(f"{len(errors)} records failed: {errors[:3]}")

    def __enter__(self) -> JsonProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()


@dataclass(frozen=True, slots=True)
class SinkSettings:
    """Where and how a :class:`RecordSink` writes: what a Spark task needs to open one
    (shipped in its closure; it holds the password)."""

    bootstrap_servers: str
    security: KafkaSecurity = PLAINTEXT
    compression: str = "lz4"


SINK_CHUNK = 4_096
"""Records :meth:`RecordSink.write` queues at a time: one ``rd_kafka_produce_batch``
call over an array of 72 bytes a record (:mod:`psmatch.adapters.batch_producer`); a worker
assembles its notification records as many at a time (``psmatch.service.worker``), so a chunk
being built and librdkafka's full queue (12 MiB, :class:`RecordSink`) are what the
writing holds at once. A process matching batches of 2,000 events at 1M BE-Gen
subscriptions in PSTBloom (251,573 notifications a batch) and writing them to a real
broker peaked at 338-341 MiB in chunks of 4,096, 344-351 in chunks of 8,192 and 352-366
in chunks of 16,384, at the same CPU (1.91-2.29 s per batch against 1.94-2.64; stop 43,
scratch ``msink.py``, the three alternated twice). Chunks of 16,384 and a queue of 16
MiB, instead of 65,536 and 64 MiB, had taken a 1M PSTHash worker's peak from 1,206 to
1,095 MiB (docs/bench-streaming.md, stop 29)."""


def topic_runs(topics: pa.StringArray) -> list[tuple[str, int, int]]:
    """The runs of rows with the same topic, ``(topic, start, stop)`` in row order: one
    for a batch of one topic (a worker's batches are). Slicing a batch by its runs keeps
    each topic's records in order without ``pyarrow.compute`` (its ``unique`` and
    ``filter``), which a Python worker would load for this alone (8 MiB resident,
    docs/bench-streaming.md), nor a Python string per row (10 ms per 16,384 rows).

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
    buffers), and librdkafka's threads, which compress and send it: 3.4 µs of CPU for a
    438-byte notification, 0.57-0.69 µs of it in the writing thread, where a
    confluent-kafka ``produce`` per record took 4.8-5.3 and 2.0-2.7 µs the same hour
    (``bench/bench_sink_compression.py``, docs/bench-streaming.md, stop 34).
    """

    def __init__(self, settings: SinkSettings) -> None:
        self._client_errors = _ClientErrors(settings.bootstrap_servers)
        self._config = {
            "bootstrap.servers": settings.bootstrap_servers,
            **settings.security.client_config(),
            **sink_settings(settings.compression),
            "partitioner": "murmur2_random",
            "enable.idempotence": "true",
            "message.timeout.ms": "120000",
            # a notification is at most SINK_RECORD_LIMIT (psmatch.service.records) bytes;
            # this is the Java producer's max.request.size
            "message.max.bytes": str(1 << 20),
            # 12 MiB, not 16: matching batches of 2,000 events at 1M BE-Gen subscriptions
            # in PSTBloom and writing their 251,573 notifications to a real broker, a
            # process peaked at 322-325 MiB against 326-328, in 1.78-1.88 s a batch
            # against 1.69-1.79 (stop 44, scratch; docs/bench-streaming.md)
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
        :class:`KafkaAuthenticationError` if the broker refused the login."""
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


class TopicReader:
    """Reads one topic from the beginning or the end, or from given offsets, without a
    group: all its partitions, or those given (:class:`KafkaServiceError` for one it does
    not have)."""

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        from_beginning: bool = True,
        security: KafkaSecurity = PLAINTEXT,
        partitions: Sequence[int] | None = None,
        offsets: Mapping[int, int] | None = None,
    ) -> None:
        """``offsets``: where to start in each partition read (``end_offsets()`` of an
        earlier reader), instead of the beginning or the end."""
        self.topic = topic
        self._client_errors = _ClientErrors(bootstrap_servers)
        self._consumer = Consumer(
            {
                **_client_config(bootstrap_servers, security, self._client_errors),
                "group.id": f"psmatch-reader-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest" if from_beginning else "latest",
            }
        )
        md = self._metadata(topic, timeout=30.0)
        if topic not in md.topics or md.topics[topic].error is not None:
            self._consumer.close()
            raise KafkaServiceError(f"topic {topic} does not exist")
        self._partitions = sorted(md.topics[topic].partitions)
        if partitions is not None:
            missing = set(partitions) - set(self._partitions)
            if missing:
                self._consumer.close()
                raise KafkaServiceError(f"topic {topic} has no partition {sorted(missing)}")
            self._partitions = sorted(set(partitions))
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        self._consumer.assign([TopicPartition(topic, p, start if offsets is None else offsets[p])
                               for p in self._partitions])  # fmt: skip
        self._eof: set[int] = set()

    def end_offsets(self, timeout: float = 10.0) -> dict[int, int]:
        """The offset the next record of each partition read will get (its high
        watermark), asked of the broker."""
        return {p: self._consumer.get_watermark_offsets(TopicPartition(self.topic, p),
                                                        timeout=timeout)[1]
                for p in self._partitions}  # fmt: skip

    def _metadata(self, topic: str, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._consumer.list_topics(topic, timeout=1.0)
            except Exception as exc:
                self._consumer.poll(0)  # runs the error callback
                if self._client_errors.auth is not None or time.monotonic() >= deadline:
                    self._consumer.close()
                    self._client_errors.check()
                    raise KafkaServiceError(
                        f"Kafka at {self._client_errors.bootstrap_servers} is not reachable: {exc}"
                    ) from None

    def poll(self, timeout: float = 1.0, max_records: int = 10_000) -> list[Record]:
        """Records available now (waiting at most ``timeout`` for the first)."""
        out: list[Record] = []
        for msg in self._messages(timeout, max_records):
            _, ts = msg.timestamp()
            out.append(
                Record(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), ts)
            )
        return out

    def _messages(self, timeout: float, max_records: int) -> list[Any]:
        """The messages available now, waiting at most ``timeout`` for the first, less
        the end-of-partition markers (noted for :attr:`at_end`);
        :class:`KafkaServiceError` for any other error."""
        self._client_errors.check()
        out = []
        for msg in self._consumer.consume(num_messages=max_records, timeout=timeout):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self._eof.add(msg.partition())
                    continue
                raise KafkaServiceError(f"reading {self.topic}: {err}")
            self._eof.discard(msg.partition())
            out.append(msg)
        return out

    @property
    def at_end(self) -> bool:
        """Whether every partition reported end-of-partition since its last record."""
        return self._eof >= set(self._partitions)

    def read_to_end(self, timeout: float = 30.0) -> list[Record]:
        """Everything up to the current end of every partition."""
        out: list[Record] = []
        deadline = time.monotonic() + timeout
        while not self.at_end:
            if time.monotonic() > deadline:
                raise KafkaServiceError(f"could not read {self.topic} to its end in {timeout} s")
            out.extend(self.poll(0.5))
        return out

    def follow(self, idle_timeout: float | None = None) -> Iterator[Record]:
        """Yield records as they arrive; stop after ``idle_timeout`` s without any."""
        last = time.monotonic()
        while True:
            records = self.poll(0.5)
            if records:
                last = time.monotonic()
                yield from records
            elif idle_timeout is not None and time.monotonic() - last > idle_timeout:
                return

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
