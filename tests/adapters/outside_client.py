"""kafka-python, the outside client the connectors' tests read their records back with."""

from __future__ import annotations

from kafka import KafkaConsumer


def read_records(bootstrap: str, topic: str, count: int
                 ) -> list[tuple[int, bytes | None, bytes | None]]:  # fmt: skip
    """(partition, key, value) of the first ``count`` records of ``topic``, partition by
    partition in offset order (waiting up to 10 s for more)."""
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
        consumer_timeout_ms=10_000, enable_auto_commit=False, group_id=None,
    )  # fmt: skip
    try:
        return [(m.partition, m.key, m.value)
                for _, m in zip(range(count), consumer, strict=False)]  # fmt: skip
    finally:
        consumer.close()
