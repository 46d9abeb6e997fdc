"""The batch producer against a real broker, its records read back by kafka-python."""

from __future__ import annotations

import gc
import logging
import time
import uuid
import weakref

import pyarrow as pa
import pytest
from kafka.partitioner.default import murmur2

from psmatch.adapters.batch_producer import BatchProducer, KafkaClientError
from psmatch.adapters.kafka.admin import ensure_topics
from psmatch.adapters.kafka.client import CLIENT_LOG
from psmatch.devservers.services import LocalServices
from tests.adapters.outside_client import read_records

pytestmark = pytest.mark.integration


def _topic(bootstrap: str, partitions: int) -> str:
    topic = f"batch-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: {}}, partitions=partitions)
    return topic


def _producer(bootstrap: str, **config: str) -> BatchProducer:
    return BatchProducer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                          "enable.idempotence": "true", **config},
                         lambda code, reason: None, CLIENT_LOG)  # fmt: skip


def test_a_batch_larger_than_the_queue_arrives_whole_in_order_where_java_puts_it(
    services: LocalServices,
) -> None:
    bootstrap = services.kafka.bootstrap_servers
    topic = _topic(bootstrap, 3)
    producer = _producer(bootstrap, **{"queue.buffering.max.messages": "100"})
    keys = [b"sub-%d" % (i % 50) for i in range(3000)]
    waits: list[float] = []
    producer.produce(topic, pa.array(keys, pa.binary()),
                     pa.array([b"%d" % i for i in range(3000)], pa.binary()),
                     lambda: waits.append(time.monotonic()))  # fmt: skip
    assert waits  # the queue was full: the rest was queued once there was room
    assert producer.flush(30) == 0
    assert producer.take_failures() == (0, [])
    got = read_records(bootstrap, topic, 3000)
    assert sorted(int(v or b"") for _, _, v in got) == list(range(3000))
    for partition, key, _ in got:  # Kafka's Java default partitioner
        assert partition == (murmur2(key) & 0x7FFFFFFF) % 3
    for partition in range(3):
        values = [int(v or b"") for p, _, v in got if p == partition]
        assert values == sorted(values)


@pytest.mark.parametrize("kind", [pa.binary(), pa.large_binary()])
def test_nulls_empties_and_slices_are_written_as_given(
    services: LocalServices, kind: pa.DataType
) -> None:
    bootstrap = services.kafka.bootstrap_servers
    topic = _topic(bootstrap, 1)
    producer = _producer(bootstrap)
    keys = pa.array([b"skipped", None, b"", b"k", b"\x00\xff"], kind).slice(1)
    values = pa.array([b"skipped", b"", None, b"v" * 1000, b""], kind).slice(1)
    producer.produce(topic, keys, values, lambda: None)
    empties = pa.array([b"", b""], kind)  # a column with no data buffer to point into
    producer.produce(topic, empties, empties, lambda: None)
    assert producer.flush(30) == 0
    assert read_records(bootstrap, topic, 6) == [
        (0, None, b""), (0, b"", None), (0, b"k", b"v" * 1000), (0, b"\x00\xff", b""),
        (0, b"", b""), (0, b"", b""),
    ]  # fmt: skip


def test_a_record_librdkafka_refuses_is_a_failure_and_the_rest_goes_on(
    services: LocalServices,
) -> None:
    bootstrap = services.kafka.bootstrap_servers
    topic = _topic(bootstrap, 1)
    producer = _producer(bootstrap, **{"message.max.bytes": "2000"})
    values = [b"first", b"x" * 5000, b"last"]
    producer.produce(topic, pa.array([b"k"] * 3, pa.binary()), pa.array(values, pa.binary()),
                     lambda: None)  # fmt: skip
    assert producer.flush(30) == 0
    count, examples = producer.take_failures()
    assert count == 1 and examples[0].startswith(f"{topic}: ") and "too large" in examples[0]
    assert producer.take_failures() == (0, [])  # taken once
    assert [v for _, _, v in read_records(bootstrap, topic, 2)] == [b"first", b"last"]


def test_a_setting_librdkafka_does_not_know_is_a_clear_error() -> None:
    with pytest.raises(KafkaClientError, match=r"no\.such\.setting"):
        BatchProducer({"no.such.setting": "1"}, lambda code, reason: None, CLIENT_LOG)


def test_client_errors_and_the_log_reach_python_while_polling(
    caplog: pytest.LogCaptureFixture,
) -> None:
    errors: list[tuple[int, str]] = []
    producer = BatchProducer({"bootstrap.servers": "127.0.0.1:1"},
                             lambda code, reason: errors.append((code, reason)),
                             CLIENT_LOG)  # fmt: skip
    with caplog.at_level(logging.INFO, logger=CLIENT_LOG.name):
        deadline = time.monotonic() + 20
        while not (errors and caplog.records) and time.monotonic() < deadline:
            producer.poll(0.2)
    assert any("127.0.0.1:1" in reason for _, reason in errors), errors
    assert any(r.name == CLIENT_LOG.name and "127.0.0.1:1" in r.getMessage()
               for r in caplog.records)  # fmt: skip
    producer.close()


def test_await_broker_says_whether_a_broker_answered(services: LocalServices) -> None:
    live = _producer(services.kafka.bootstrap_servers)
    assert live.await_broker(30)
    live.close()
    nobody = _producer("127.0.0.1:1")
    assert not nobody.await_broker(0.5)
    nobody.close()


def test_a_producer_nobody_holds_is_destroyed(services: LocalServices) -> None:
    producer = _producer(services.kafka.bootstrap_servers)
    producer.produce(_topic(services.kafka.bootstrap_servers, 1), pa.array([b"k"]),
                     pa.array([b"v"]), lambda: None)  # fmt: skip
    assert producer.flush(30) == 0
    released = producer._release
    ref = weakref.ref(producer)
    del producer
    gc.collect()
    assert ref() is None and not released.alive
