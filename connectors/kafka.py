"""Kafka plumbing outside Spark, with confluent-kafka: topics, producing, consuming.

Owns: creating the service's four topics with the right settings (the subscriptions
topic compacted), a JSON producer used by the CLI and the load generator, and a
consumer that reads a topic from the start or the end (``psmatch tail``,
``psmatch rebuild-state``, the tests and the benchmark).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from index.errors import PsmatchError

log = logging.getLogger(__name__)


class KafkaServiceError(PsmatchError):
    """Kafka unreachable, a topic that cannot be created, a record that cannot be sent."""


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


def wait_for_kafka(bootstrap_servers: str, timeout: float = 10.0) -> bool:
    """Whether a broker answers a metadata request within ``timeout`` seconds."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 0})
    try:
        md = admin.list_topics(timeout=timeout)
        return bool(md.brokers)
    except Exception:
        return False


def ensure_topics(
    bootstrap_servers: str,
    topics: Mapping[str, Mapping[str, str]],
    partitions: int = 2,
    timeout: float = 30.0,
) -> list[str]:
    """Create the topics that do not exist yet; returns the names created.

    ``topics`` maps a name to its topic configs (e.g. ``{"cleanup.policy": "compact"}``).
    """
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    try:
        existing = set(admin.list_topics(timeout=timeout).topics)
    except Exception as exc:
        raise KafkaServiceError(f"Kafka at {bootstrap_servers} is not reachable: {exc}") from exc
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


def delete_topics(bootstrap_servers: str, names: list[str], timeout: float = 30.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
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

    def __init__(self, bootstrap_servers: str, **config: Any) -> None:
        conf = {
            "bootstrap.servers": bootstrap_servers,
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
        self._producer.poll(0)

    def flush(self, timeout: float = 30.0) -> None:
        remaining = self._producer.flush(timeout)
        if remaining:
            raise KafkaServiceError(f"{remaining} records not delivered within {timeout:.0f} s")
        if self._errors:
            errors, self._errors = self._errors, []
            raise KafkaServiceError(f"{len(errors)} records failed: {errors[:3]}")

    def __enter__(self) -> JsonProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()


class TopicReader:
    """Reads one topic (all partitions) from the beginning or the end, without a group."""

    def __init__(self, bootstrap_servers: str, topic: str, from_beginning: bool = True) -> None:
        self.topic = topic
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap_servers,
                "group.id": f"psmatch-reader-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest" if from_beginning else "latest",
            }
        )
        md = self._consumer.list_topics(topic, timeout=30)
        if topic not in md.topics or md.topics[topic].error is not None:
            self._consumer.close()
            raise KafkaServiceError(f"topic {topic} does not exist")
        from confluent_kafka import TopicPartition

        self._partitions = sorted(md.topics[topic].partitions)
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        self._consumer.assign([TopicPartition(topic, p, start) for p in self._partitions])
        self._eof: set[int] = set()

    def poll(self, timeout: float = 1.0, max_records: int = 10_000) -> list[Record]:
        """Records available now (waiting at most ``timeout`` for the first)."""
        out: list[Record] = []
        for msg in self._consumer.consume(num_messages=max_records, timeout=timeout):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self._eof.add(msg.partition())
                    continue
                raise KafkaServiceError(f"reading {self.topic}: {err}")
            self._eof.discard(msg.partition())
            _, ts = msg.timestamp()
            out.append(
                Record(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), ts)
            )
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
