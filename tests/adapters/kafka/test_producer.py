"""psmatch.adapters.kafka.producer against a real broker, read back with kafka-python
(another client)."""

from __future__ import annotations

import json

from kafka import KafkaConsumer

from psmatch.adapters.kafka.admin import ensure_topics
from psmatch.adapters.kafka.producer import JsonProducer
from psmatch.devservers.services import LocalServices
from tests.adapters.kafka.topics import new_topics


def test_json_producer_is_read_by_kafka_python(services: LocalServices) -> None:
    bootstrap = services.kafka.bootstrap_servers
    topic = next(iter(new_topics()))
    ensure_topics(bootstrap, {topic: {}}, partitions=1)
    with JsonProducer(bootstrap) as producer:
        producer.send(topic, {"a": 1, "s": "é"}, key="k1")
        producer.send(topic, None, key="k2")
        producer.send(topic, "raw text", key=b"k3", raw=True)
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
        consumer_timeout_ms=10_000, enable_auto_commit=False, group_id=None,
    )  # fmt: skip
    try:
        got = [(m.key, m.value) for _, m in zip(range(3), consumer, strict=False)]
    finally:
        consumer.close()
    assert got == [
        (b"k1", json.dumps({"a": 1, "s": "é"}, separators=(",", ":")).encode()),
        (b"k2", None),
        (b"k3", b"raw text"),
    ]
