"""Reading topics without committing: :class:`TopicReader`, :class:`RangeReader` and
their :class:`Record`.

Owns reading one topic from the beginning, the end or given offsets, all partitions or
some, to the current end or following new records: what ``psmatch tail`` and ``psmatch
rebuild-state``, the tests and the benchmark read with; and reading given offset ranges
of any topics' partitions, as Spark's Kafka source does: what the job's driver reads a
micro-batch's few subscription records with (:mod:`psmatch.service.job`).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from psmatch.adapters.kafka.client import (
    ClientErrors,
    KafkaAuthorizationError,
    KafkaServiceError,
    client_config,
)
from psmatch.adapters.kafka.security import PLAINTEXT, KafkaSecurity

log = logging.getLogger(__name__)

GROUP_PREFIX = "psmatch-reader-"
"""The prefix of every reader's consumer group id (a reader commits nothing, yet the
broker checks READ on its group)."""


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


class TopicReader:
    """Reads one topic from the beginning or the end, or from given offsets, without a
    group: all its partitions, or those given (:class:`KafkaServiceError` for one it does
    not have). On a broker with ACLs the principal needs READ on the topic and on the
    consumer groups prefixed :data:`GROUP_PREFIX` (:class:`KafkaAuthorizationError`
    says which is missing)."""

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
        self._client_errors = ClientErrors(bootstrap_servers)
        self._consumer = Consumer(
            {
                **client_config(bootstrap_servers, security, self._client_errors),
                "group.id": f"{GROUP_PREFIX}{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest" if from_beginning else "latest",
                # records of open or aborted transactions (exactly-once delivery) never
                # reach a reader: each notification is read once
                "isolation.level": "read_committed",
            }
        )
        md = self._metadata(topic, timeout=30.0)
        if topic not in md.topics or md.topics[topic].error is not None:
            self._consumer.close()
            error = md.topics[topic].error if topic in md.topics else None
            if error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                raise KafkaAuthorizationError(
                    f"not authorised to read topic {topic}: the principal needs READ on it"
                )
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
        """The end of each partition, asked of the broker: the offset of its first record
        a ``read_committed`` reader cannot read yet (its last stable offset: the high
        watermark when no transaction is open on it)."""
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
                if err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                    raise KafkaAuthorizationError(
                        f"not authorised to read {self.topic}: a reader's consumer group is "
                        f"{GROUP_PREFIX}<random>, so the principal needs READ on the groups "
                        f"with that prefix (a PREFIXED ACL on group {GROUP_PREFIX})")
                if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    raise KafkaAuthorizationError(f"not authorised to read topic {self.topic}: "
                                                  "the principal needs READ on it")  # fmt: skip
                raise KafkaServiceError(f"reading {self.topic}: {err}")
            self._eof.discard(msg.partition())
            out.append(msg)
        return out

    @property
    def at_end(self) -> bool:
        """Whether every partition reported end-of-partition since its last record."""
        return self._eof >= set(self._partitions)

    def read_to_end(self, timeout: float = 30.0) -> list[Record]:
        """Everything up to the end each partition has now: its last stable offset (where
        the first transaction still open on it starts), and perhaps some records after.

        A partition is done once it reports its end, or once the reader's position in it
        is past that offset. Reported ends alone are not enough: while an exactly-once
        job writes, a transaction is open on some partition nearly all the time, so the
        reader may never see every partition at its end at once."""
        ends = self.end_offsets()
        out: list[Record] = []
        deadline = time.monotonic() + timeout
        while not self._read_to(ends):
            if time.monotonic() > deadline:
                raise KafkaServiceError(f"could not read {self.topic} to its end in {timeout} s")
            out.extend(self.poll(0.5))
        return out

    def _read_to(self, ends: Mapping[int, int]) -> bool:
        """Whether every partition reported its end since its last record, or was read
        up to its offset in ``ends``."""
        if self.at_end:
            return True
        positions = self._consumer.position([TopicPartition(self.topic, p) for p in ends])
        return all(tp.partition in self._eof or tp.offset >= ends[tp.partition]
                   for tp in positions)  # fmt: skip

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


STALL_CHECK_S = 1.0
"""How long :meth:`RangeReader.read` goes without a record before it looks up whether
its topics still exist."""


class RangeReader:
    """Reads given offset ranges ``[start, end)`` of any topics' partitions, the records
    Spark's Kafka source reads for the same ranges: with its isolation
    (``read_uncommitted``), committing nothing. librdkafka's consumer needs a group, so
    the principal needs READ on the topics and on the groups prefixed
    :data:`GROUP_PREFIX`, as a :class:`TopicReader`'s does. One consumer, kept open from
    read to read."""

    def __init__(self, bootstrap_servers: str, security: KafkaSecurity = PLAINTEXT) -> None:
        self._client_errors = ClientErrors(bootstrap_servers)
        self._consumer = Consumer({
            **client_config(bootstrap_servers, security, self._client_errors),
            "group.id": f"{GROUP_PREFIX}{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            # a start that retention removed reads from what is left, as Spark does with
            # failOnDataLoss off
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50,
            # Spark's (the Java client's) default; librdkafka's is read_committed
            "isolation.level": "read_uncommitted",
        })  # fmt: skip

    def read(self, ranges: Mapping[tuple[str, int], tuple[int, int]],
             timeout: float = 120.0) -> list[Record]:  # fmt: skip
        """The records of each ``(topic, partition): (start, end)``, in offset order
        within a partition (partitions interleaved). A range is read when its last
        record is, or when the partition's end is at or past ``end`` (compaction may have
        removed its last records). :class:`KafkaServiceError` after ``timeout`` s (by
        default as long as Spark's source waits for a fetch, ``spark.network.timeout``:
        a broker that is restarting is waited for). A range of a topic deleted meanwhile
        is given up, with a warning, as Spark's source gives it up with
        ``failOnDataLoss`` off: librdkafka reports nothing for a deleted topic's assigned
        partition, so after :data:`STALL_CHECK_S` without a record the topics are looked
        up.

        Cost: the records' bytes fetched once; one metadata request per
        :data:`STALL_CHECK_S` without progress.
        """
        pending = {tp: r for tp, r in ranges.items() if r[1] > r[0]}
        if not pending:
            return []
        self._consumer.assign([TopicPartition(t, p, start)
                               for (t, p), (start, _) in pending.items()])  # fmt: skip
        out: list[Record] = []
        deadline = time.monotonic() + timeout
        stall_check = time.monotonic() + STALL_CHECK_S
        try:
            while pending:
                now = time.monotonic()
                if now > deadline:
                    raise KafkaServiceError(
                        f"could not read {sorted(pending)} to their ends in {timeout} s")
                if now > stall_check:
                    self._give_up_deleted(pending)
                    stall_check = now + STALL_CHECK_S
                self._client_errors.check()
                # consume() waits out its whole timeout unless it gets all it asks for:
                # take what has arrived, else wait for the next one alone
                messages = self._consumer.consume(num_messages=10_000, timeout=0)
                if not messages:
                    first = self._consumer.poll(0.1)
                    messages = [] if first is None else [first]
                if messages:
                    stall_check = time.monotonic() + STALL_CHECK_S
                for msg in messages:
                    tp = (msg.topic(), msg.partition())
                    err = msg.error()
                    if err is None or err.code() == KafkaError._PARTITION_EOF:
                        if tp not in pending:
                            continue
                        end = pending[tp][1]
                        if err is None and msg.offset() < end:
                            out.append(Record(*tp, msg.offset(), msg.key(), msg.value(),
                                              msg.timestamp()[1]))  # fmt: skip
                        # a record's offset is its own, end-of-partition's the next one's
                        if msg.offset() >= end - (err is None):
                            del pending[tp]
                    elif err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                        raise KafkaAuthorizationError(
                            f"not authorised to read topic {tp[0]}: the principal needs READ on it")
                    elif err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                        raise KafkaAuthorizationError(
                            f"not authorised to read {', '.join(sorted({t for t, _ in pending}))}: "
                            f"the reader's consumer group is {GROUP_PREFIX}<random>, so the "
                            "principal needs READ on the groups with that prefix")
                    else:
                        raise KafkaServiceError(f"reading {tp[0]} [{tp[1]}]: {err}")
        finally:
            self._consumer.unassign()
        return out

    def _give_up_deleted(self, pending: dict[tuple[str, int], tuple[int, int]]) -> None:
        """Drops from ``pending`` the ranges of topics the cluster no longer has. A
        metadata request that fails (a broker restarting) drops nothing."""
        try:
            topics = self._consumer.list_topics(timeout=5.0).topics
        except KafkaException:  # the broker out of reach: the read's timeout decides
            return
        for tp in [tp for tp in pending if tp[0] not in topics]:
            start, end = pending.pop(tp)
            log.warning("topic %s was deleted: offsets %d to %d of its partition %d are "
                        "given up", tp[0], start, end - 1, tp[1])  # fmt: skip

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
