"""A confluent-kafka producer of JSON (or raw) values: what the CLI's ``subscribe``,
``unsubscribe`` and ``publish``, the load generator and the tests send records with.

Owns :class:`JsonProducer`. The service's own output records are written by
:mod:`psmatch.adapters.kafka.sink` instead, a whole Arrow batch at a time.
"""

from __future__ import annotations

import json
import time
from typing import Any

from confluent_kafka import KafkaError, Producer

from psmatch.adapters.kafka.client import (
    ClientErrors,
    KafkaAuthorizationError,
    KafkaServiceError,
    client_config,
)
from psmatch.adapters.kafka.security import PLAINTEXT, KafkaSecurity


def _text_or_bytes(value: str | bytes | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return value.encode()


class JsonProducer:
    """A confluent-kafka producer of JSON (or raw) values, tuned for throughput."""

    def __init__(
        self, bootstrap_servers: str, security: KafkaSecurity = PLAINTEXT, **config: Any
    ) -> None:
        self._client_errors = ClientErrors(bootstrap_servers)
        conf = {
            **client_config(bootstrap_servers, security, self._client_errors),
            "linger.ms": 5,
            "batch.num.messages": 10_000,
            "enable.idempotence": True,
            **config,
        }
        self._producer = Producer(conf)
        self._errors: list[str] = []
        self._denied: str | None = None  # a topic the broker refused a record of

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            self._denied = msg.topic()
        elif err is not None:
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
        if self._denied is not None:
            topic, self._denied = self._denied, None
            raise KafkaAuthorizationError(f"not authorised to write topic {topic}: the "
                                          "principal needs WRITE on it")  # fmt: skip
        if self._errors:
            errors, self._errors = self._errors, []
            raise KafkaServiceError(f"{len(errors)} records failed: {errors[:3]}")

    def __enter__(self) -> JsonProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()
