"""psmatch.adapters.kafka.reader against a real broker: records written by kafka-python
(another client), read to the end, from given offsets, from given partitions; offset
ranges of several topics read as Spark's source reads them."""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka import KafkaProducer

from psmatch.adapters.kafka.admin import delete_topics, ensure_topics
from psmatch.adapters.kafka.client import KafkaServiceError
from psmatch.adapters.kafka.producer import JsonProducer
from psmatch.adapters.kafka.reader import RangeReader, TopicReader
from psmatch.devservers.services import LocalServices
from tests.adapters.kafka.topics import new_topics


def _kafka_python_topic(bootstrap: str, partitions: int,
                        records: list[dict[str, Any]]) -> str:  # fmt: skip
    """A new topic of ``partitions`` holding ``records`` (``KafkaProducer.send``'s
    arguments), written by kafka-python."""
    topic = next(iter(new_topics()))
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


def test_range_reader_reads_exactly_the_ranges_of_several_topics(
    services: LocalServices,
) -> None:
    """Each ``[start, end)`` and nothing else, an empty range reads nothing, a range
    ending at a partition's end is read without waiting, and one reader serves read
    after read."""
    bootstrap = services.kafka.bootstrap_servers
    first = _kafka_python_topic(bootstrap, 2,
                                [{"value": b"%d" % i, "partition": i % 2} for i in range(20)])
    second = _kafka_python_topic(bootstrap, 1, [{"value": b"x%d" % i} for i in range(5)])
    with RangeReader(bootstrap) as reader:
        records = reader.read({(first, 0): (2, 6), (first, 1): (9, 10), (second, 0): (3, 5)})
        assert reader.read({(first, 0): (4, 4)}) == []
        again = reader.read({(first, 1): (0, 2)})
    by_partition = {(r.topic, r.partition): [] for r in records}
    for r in records:
        by_partition[r.topic, r.partition].append((r.offset, r.value))
    assert by_partition == {
        (first, 0): [(2, b"4"), (3, b"6"), (4, b"8"), (5, b"10")],
        (first, 1): [(9, b"19")],
        (second, 0): [(3, b"x3"), (4, b"x4")],
    }
    assert [(r.offset, r.value) for r in again] == [(0, b"1"), (1, b"3")]


def test_range_reader_gives_up_on_a_range_past_the_end(services: LocalServices) -> None:
    """A range the partition does not have (yet) is an error after the timeout, never a
    silent short read."""
    bootstrap = services.kafka.bootstrap_servers
    topic = _kafka_python_topic(bootstrap, 1, [{"value": b"%d" % i} for i in range(3)])
    with RangeReader(bootstrap) as reader, pytest.raises(KafkaServiceError,
                                                         match="to their ends in 2"):  # fmt: skip
        reader.read({(topic, 0): (1, 9)}, timeout=2)


def test_range_reader_gives_up_the_ranges_of_a_deleted_topic(
    services: LocalServices, caplog: pytest.LogCaptureFixture,
) -> None:
    """A topic deleted after its ranges were planned (a tenant removed) is given up with
    a warning, well before the timeout; the other topics' ranges are read."""
    bootstrap = services.kafka.bootstrap_servers
    kept = _kafka_python_topic(bootstrap, 1, [{"value": b"k%d" % i} for i in range(3)])
    deleted = _kafka_python_topic(bootstrap, 2, [{"value": b"d%d" % i} for i in range(4)])
    delete_topics(bootstrap, [deleted])
    with RangeReader(bootstrap) as reader:
        started = time.monotonic()
        records = reader.read({(kept, 0): (0, 3), (deleted, 0): (0, 2), (deleted, 1): (0, 2)},
                              timeout=60)  # fmt: skip
        took = time.monotonic() - started
    assert [(r.topic, r.value) for r in records] == [(kept, b"k0"), (kept, b"k1"), (kept, b"k2")]
    assert took < 30, "given up when the topic was found missing, not at the timeout"
    assert sorted(m for m in caplog.messages if deleted in m) == [
        f"topic {deleted} was deleted: offsets 0 to 1 of its partition {p} are given up"
        for p in (0, 1)]


def test_range_reader_reads_past_the_markers_of_transactions(services: LocalServices) -> None:
    """A transaction's commit marker takes an offset no record has: a range ending on one
    is read once the partition's end is past it, and aborted records are read, as Spark's
    source (``read_uncommitted``) reads them."""
    bootstrap = services.kafka.bootstrap_servers
    topic = next(iter(new_topics()))
    ensure_topics(bootstrap, {topic: {}}, partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap,
                         "transactional.id": f"reader-test-{uuid.uuid4().hex}"})  # fmt: skip
    producer.init_transactions(30)
    for values, commit in (([b"a", b"b"], True), ([b"x"], False), ([b"c"], True)):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    with TopicReader(bootstrap, topic) as reader:
        end = reader.end_offsets()[0]
    assert end == 7  # a, b, marker, x, marker, c, marker
    with RangeReader(bootstrap) as reader:
        assert [r.value for r in reader.read({(topic, 0): (0, 3)}, timeout=30)] == [b"a", b"b"]
        assert [r.value for r in reader.read({(topic, 0): (0, end)}, timeout=30)] == [
            b"a", b"b", b"x", b"c"]


def test_topic_reader_reads_to_the_end_while_transactions_follow_each_other(
    services: LocalServices,
) -> None:
    """An exactly-once job keeps a transaction open on some partition nearly all the
    time, so a read_committed reader at the end rarely sees every partition's end at
    once: it reads to the ends the partitions had when it was asked, and returns."""
    bootstrap = services.kafka.bootstrap_servers
    topic = next(iter(new_topics()))
    ensure_topics(bootstrap, {topic: {}}, partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                         "transactional.id": f"reader-test-{uuid.uuid4().hex}"})  # fmt: skip
    producer.init_transactions(30)
    written = 0

    def transaction() -> None:
        nonlocal written
        producer.begin_transaction()
        for partition in (0, 1):
            producer.produce(topic, b"%d" % written, partition=partition)
            written += 1
        producer.flush(30)
        producer.commit_transaction(30)

    for _ in range(5):
        transaction()
    before = written
    stop = threading.Event()

    def keep_writing() -> None:
        while not stop.is_set():
            producer.begin_transaction()
            producer.produce(topic, b"%d" % written, partition=0)
            producer.flush(30)
            time.sleep(0.05)  # open, with a record, most of the time
            producer.produce(topic, b"%d" % (written + 1), partition=1)
            producer.flush(30)
            producer.commit_transaction(30)

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        with TopicReader(bootstrap, topic) as reader:
            values = {int(r.value or b"") for r in reader.read_to_end(timeout=30)}
    finally:
        stop.set()
        writer.join()
    assert set(range(before)) <= values
