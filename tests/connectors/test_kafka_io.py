"""Kafka helpers against a real broker, cross-checked with kafka-python (another client)."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource
from kafka import KafkaConsumer, KafkaProducer

from connectors.kafka import JsonProducer, TopicReader, ensure_topics, service_topics
from connectors.local import LocalServices

pytestmark = pytest.mark.integration


def _topics() -> dict[str, dict[str, str]]:
    tag = uuid.uuid4().hex[:8]
    return service_topics(f"s-{tag}", f"e-{tag}", f"n-{tag}", f"r-{tag}")


def test_ensure_topics_creates_once_with_compaction(services: LocalServices) -> None:
    bootstrap = services.kafka.bootstrap_servers
    topics = _topics()
    assert sorted(ensure_topics(bootstrap, topics, partitions=2)) == sorted(topics)
    assert ensure_topics(bootstrap, topics, partitions=2) == []
    subs = next(iter(topics))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(timeout=10)
    assert len(md.topics[subs].partitions) == 2
    resource = ConfigResource(ConfigResource.Type.TOPIC, subs)
    config = admin.describe_configs([resource])[resource].result()
    assert config["cleanup.policy"].value == "compact"


def test_json_producer_is_read_by_kafka_python(services: LocalServices) -> None:
    bootstrap = services.kafka.bootstrap_servers
    topic = next(iter(_topics()))
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


def test_topic_reader_reads_kafka_python_records(services: LocalServices) -> None:
    bootstrap = services.kafka.bootstrap_servers
    topic = next(iter(_topics()))
    ensure_topics(bootstrap, {topic: {}}, partitions=2)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(20):
        producer.send(topic, key=f"k{i}".encode(), value=json.dumps({"i": i}).encode())
    producer.flush()
    producer.close()
    with TopicReader(bootstrap, topic) as reader:
        records = reader.read_to_end(timeout=30)
    assert sorted(r.json()["i"] for r in records) == list(range(20))
    assert {r.partition for r in records} <= {0, 1}
    assert all(r.timestamp_ms > 0 for r in records)
