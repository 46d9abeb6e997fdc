"""Kafka helpers against a real broker, cross-checked with kafka-python (another client)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource
from kafka import KafkaConsumer, KafkaProducer
from kafka.partitioner.default import murmur2

from psmatch.adapters.kafka.admin import ensure_topics, service_topics
from psmatch.adapters.kafka.client import KafkaServiceError
from psmatch.adapters.kafka.producer import JsonProducer
from psmatch.adapters.kafka.reader import TopicReader
from psmatch.adapters.kafka.sink import RecordSink, SinkSettings, topic_runs
from psmatch.devservers.kafka_broker import KafkaBroker
from psmatch.devservers.services import LocalServices
from tests.adapters.outside_client import read_records

pytestmark = pytest.mark.integration

RECORDS = pa.schema([("topic", pa.string()), ("key", pa.binary()), ("value", pa.binary())])


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


def _kafka_python_topic(bootstrap: str, partitions: int,
                        records: list[dict[str, Any]]) -> str:  # fmt: skip
    """A new topic of ``partitions`` holding ``records`` (``KafkaProducer.send``'s
    arguments), written by kafka-python."""
    topic = next(iter(_topics()))
    ensure_topics(bootstrap, {topic: {}}, partitions=partitions)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for record in records:
        producer.send(topic, **record)
    producer.flush()
    producer.close()
    return topic


def test_topic_reader_reads_kafka_python_records(services: LocalServices) -> None:
    bootstrap = services.kafka.bootstrap_servers
    topic = _kafka_python_topic(bootstrap, 2, [
        {"key": f"k{i}".encode(), "value": json.dumps({"i": i}).encode()} for i in range(20)])
    with TopicReader(bootstrap, topic) as reader:
        records = reader.read_to_end(timeout=30)
    assert sorted(r.json()["i"] for r in records) == list(range(20))
    assert {r.partition for r in records} <= {0, 1}
    assert all(r.timestamp_ms > 0 for r in records)


def test_topic_reader_resumes_from_the_end_offsets_of_an_earlier_reader(
    services: LocalServices,
) -> None:
    """A reader started where another saw each partition end reads only what came after,
    even though the broker stamped every record with its own append time."""
    bootstrap = services.kafka.bootstrap_servers
    topic = f"appended-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: {"message.timestamp.type": "LogAppendTime"}}, partitions=2)
    with JsonProducer(bootstrap) as producer:
        for i in range(6):
            producer.send(topic, b"%d" % i, raw=True, timestamp_ms=1000)
    with TopicReader(bootstrap, topic) as reader:
        ends = reader.end_offsets()
        assert sum(ends.values()) == 6 and len(reader.read_to_end(timeout=30)) == 6
    before = time.time() * 1000
    with JsonProducer(bootstrap) as producer:
        for i in range(6, 10):
            producer.send(topic, b"%d" % i, raw=True, timestamp_ms=1000)
    with TopicReader(bootstrap, topic, offsets=ends) as reader:
        records = reader.read_to_end(timeout=30)
    assert sorted(int(r.value or b"") for r in records) == [6, 7, 8, 9]
    assert all(r.timestamp_ms >= before - 1000 for r in records)  # the broker's time, not 1000


def test_topic_reader_reads_the_partitions_it_is_given(services: LocalServices) -> None:
    bootstrap = services.kafka.bootstrap_servers
    topic = _kafka_python_topic(bootstrap, 2,
                                [{"value": b"%d" % i, "partition": i % 2} for i in range(10)])
    with TopicReader(bootstrap, topic, partitions=[1]) as reader:
        records = reader.read_to_end(timeout=30)
    assert sorted(int(r.value or b"") for r in records) == [1, 3, 5, 7, 9]
    with pytest.raises(KafkaServiceError, match=r"has no partition \[2\]"):
        TopicReader(bootstrap, topic, partitions=[0, 2])


def _two_topics(bootstrap: str, partitions: int,
                first: dict[str, str] | None = None) -> tuple[str, str]:  # fmt: skip
    """Two new topics, the first with the topic configs ``first``."""
    one, two = list(_topics())[:2]
    ensure_topics(bootstrap, {one: first or {}, two: {}}, partitions=partitions)
    return one, two


def test_topic_runs_cut_a_batch_into_its_runs_of_one_topic_in_order() -> None:
    assert topic_runs(pa.array(["n", "n", "r", "n"])) == [("n", 0, 2), ("r", 2, 3), ("n", 3, 4)]
    assert topic_runs(pa.array(["nn", "rej", "nn"]).slice(1)) == [("rej", 0, 1), ("nn", 1, 2)]
    assert topic_runs(pa.array(["x", "n", "n", "n", "x"]).slice(1, 3)) == [("n", 0, 3)]
    assert topic_runs(pa.array(["", ""])) == [("", 0, 2)]
    assert topic_runs(pa.array([], pa.string())) == []


def test_record_sink_writes_to_the_partition_the_java_client_chooses(
    services: LocalServices,
) -> None:
    bootstrap = services.kafka.bootstrap_servers
    one, two = _two_topics(bootstrap, 3)
    keys = [f"sub-{i}".encode() for i in range(200)]
    sink = RecordSink(SinkSettings(bootstrap, compression="lz4"))
    sink.write(pa.RecordBatch.from_pydict({
        "topic": [one] * 200 + [two, two],
        "key": [*keys, None, b"k"],
        "value": [b"v%d" % i for i in range(200)] + [b"no key", None],
    }, schema=RECORDS))  # fmt: skip
    sink.flush()
    got = read_records(bootstrap, one, 200)
    # Kafka's Java default partitioner: murmur2 of the key, positive, modulo partitions
    assert sorted(got) == sorted(((murmur2(k) & 0x7FFFFFFF) % 3, k, b"v%d" % i)
                                 for i, k in enumerate(keys))  # fmt: skip
    for partition in range(3):  # in order within each partition
        values = [int(v[1:]) for p, _, v in got if p == partition]
        assert values == sorted(values)
    assert {(k, v) for _, k, v in read_records(bootstrap, two, 2)} == {
        (None, b"no key"), (b"k", None)}  # fmt: skip
    kcat = shutil.which("kcat")
    if kcat is not None:  # an outside client reads the lz4 batches the same way
        read = [kcat, "-C", "-b", bootstrap, "-t", one, "-e", "-q", "-f", "%p %k %s\\n"]
        out = subprocess.run(read, capture_output=True, check=True, timeout=60)
        assert sorted(tuple(line.split(b" ")) for line in out.stdout.splitlines()) == sorted(
            (b"%d" % p, k, v) for p, k, v in got)  # fmt: skip


def test_record_sink_flush_fails_for_a_record_the_broker_refuses_then_goes_on(
    services: LocalServices,
) -> None:
    bootstrap = services.kafka.bootstrap_servers
    small, other = _two_topics(bootstrap, 1, {"max.message.bytes": "2000"})
    sink = RecordSink(SinkSettings(bootstrap, compression="none"))
    too_large = {"topic": [small], "key": [b"k"], "value": [b"x" * 5000]}
    sink.write(pa.RecordBatch.from_pydict(too_large, schema=RECORDS))
    with pytest.raises(KafkaServiceError, match=r"1 output records were not written to Kafka, "
                                                r"e\.g\. .*too large"):  # fmt: skip
        sink.flush()
    fine = {"topic": [other], "key": [b"k"], "value": [b"fine"]}
    sink.write(pa.RecordBatch.from_pydict(fine, schema=RECORDS))
    sink.flush()  # the failure was reported once
    assert read_records(bootstrap, other, 1) == [(0, b"k", b"fine")]


def test_record_sink_waits_out_a_broker_restart(tmp_path: Path) -> None:
    """Records written while the broker is down are delivered once it is back (within
    the two minutes a record may wait): flush waits, nothing is lost or reordered."""
    broker = KafkaBroker(tmp_path / "kafka", heap="512m").start()
    try:
        bootstrap = broker.bootstrap_servers
        topic = next(iter(_topics()))
        ensure_topics(bootstrap, {topic: {}}, partitions=1)
        sink = RecordSink(SinkSettings(bootstrap))

        def records(start: int, stop: int) -> pa.RecordBatch:
            return pa.RecordBatch.from_pydict({
                "topic": [topic] * (stop - start), "key": [b"k"] * (stop - start),
                "value": [b"%d" % i for i in range(start, stop)],
            }, schema=RECORDS)  # fmt: skip

        sink.write(records(0, 100))
        sink.flush()
        broker.stop()
        sink.write(records(100, 1100))
        # started again from this thread: the broker dies with the thread that started it
        with ThreadPoolExecutor(1) as pool:
            flushed = pool.submit(sink.flush)
            time.sleep(5)
            assert not flushed.done()  # waiting for the broker
            broker.start()
            flushed.result(timeout=150)
        values = [int(v) for _, _, v in read_records(bootstrap, topic, 1100) if v is not None]
        assert values == list(range(1100))
    finally:
        broker.stop()
