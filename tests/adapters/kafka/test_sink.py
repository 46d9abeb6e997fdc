"""psmatch.adapters.kafka.sink: a batch cut into its topic runs, and the record sink
against a real broker (partitions as the Java client chooses them, refused records, a
broker restart), read back with kafka-python (another client)."""

from __future__ import annotations

import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest
from kafka.partitioner.default import murmur2

from psmatch.adapters.kafka.admin import ensure_topics
from psmatch.adapters.kafka.client import KafkaServiceError
from psmatch.adapters.kafka.reader import TopicReader
from psmatch.adapters.kafka.sink import RecordSink, SinkSettings, TransactionalSink, topic_runs
from psmatch.devservers.kafka_broker import KafkaBroker
from psmatch.devservers.services import LocalServices
from tests.adapters.kafka.topics import new_topics
from tests.adapters.outside_client import read_records

RECORDS = pa.schema([("topic", pa.string()), ("key", pa.binary()), ("value", pa.binary())])


def _two_topics(bootstrap: str, partitions: int,
                first: dict[str, str] | None = None) -> tuple[str, str]:  # fmt: skip
    """Two new topics, the first with the topic configs ``first``."""
    one, two = list(new_topics())[:2]
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


@pytest.mark.integration
def test_record_sink_waits_out_a_broker_restart(tmp_path: Path) -> None:
    """Records written while the broker is down are delivered once it is back (within
    the two minutes a record may wait): flush waits, nothing is lost or reordered."""
    broker = KafkaBroker(tmp_path / "kafka", heap="512m").start()
    try:
        bootstrap = broker.bootstrap_servers
        topic = next(iter(new_topics()))
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


def _committed_records(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of every record of ``topic`` a ``read_committed`` reader sees."""
    with TopicReader(bootstrap, topic) as reader:
        return [(r.key, r.value) for r in reader.read_to_end()]


def _records(topic: str, keys: list[bytes]) -> pa.RecordBatch:
    values = [b"v-" + k for k in keys]
    return pa.RecordBatch.from_pydict({"topic": [topic] * len(keys), "key": keys,
                                       "value": values}, schema=RECORDS)  # fmt: skip


def test_a_transaction_makes_its_records_and_its_marker_visible_together(
    services: LocalServices,
) -> None:
    bootstrap = services.kafka.bootstrap_servers
    out, inputs = _two_topics(bootstrap, 2)
    txn = f"txn-{out}"
    sink = TransactionalSink(SinkSettings(bootstrap), txn, txn)
    assert sink.committed(inputs, [0, 1]) == {0: 0, 1: 0}
    sink.begin()
    sink.write(_records(out, [b"a", b"b"]))
    sink.commit(inputs, {1: 42}, "batch 7")
    sink.close()
    assert sorted(_committed_records(bootstrap, out)) == [(b"a", b"v-a"), (b"b", b"v-b")]
    again = TransactionalSink(SinkSettings(bootstrap), txn, txn)
    assert again.committed(inputs, [0, 1]) == {0: 0, 1: 42}
    again.close()


def test_a_new_sink_of_the_same_id_fences_the_old_one_and_aborts_its_records(
    services: LocalServices,
) -> None:
    """The zombie's records reach the partition but no read_committed reader, and its
    commit fails; the successor's records are read once."""
    bootstrap = services.kafka.bootstrap_servers
    out, inputs = _two_topics(bootstrap, 1)
    txn = f"txn-{out}"
    zombie = TransactionalSink(SinkSettings(bootstrap), txn, txn)
    zombie.begin()
    zombie.write(_records(out, [b"z1", b"z2"]))
    zombie._producer.flush(10)  # the records are on the broker, the transaction open
    successor = TransactionalSink(SinkSettings(bootstrap), txn, txn)
    with pytest.raises(KafkaServiceError, match=r"[Ff]enced|epoch"):
        zombie.commit(inputs, {0: 10}, "batch 1")
    zombie.close()
    assert successor.committed(inputs, [0]) == {0: 0}
    successor.begin()
    successor.write(_records(out, [b"s1"]))
    successor.commit(inputs, {0: 10}, "batch 1")
    successor.close()
    assert _committed_records(bootstrap, out) == [(b"s1", b"v-s1")]
    assert len(read_records(bootstrap, out, 10)) == 3  # read_uncommitted sees the zombie's


def test_closing_an_open_transaction_aborts_it(services: LocalServices) -> None:
    bootstrap = services.kafka.bootstrap_servers
    out, inputs = _two_topics(bootstrap, 1)
    sink = TransactionalSink(SinkSettings(bootstrap), f"txn-{out}", f"txn-{out}")
    sink.begin()
    sink.write(_records(out, [b"x"]))
    sink.close()
    assert _committed_records(bootstrap, out) == []
    marker = TransactionalSink(SinkSettings(bootstrap), f"txn-{out}", f"txn-{out}")
    assert marker.committed(inputs, [0]) == {0: 0}
    marker.close()
