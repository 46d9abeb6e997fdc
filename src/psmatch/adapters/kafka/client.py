"""What every confluent-kafka client of the service shares.

Owns the Kafka errors (:class:`KafkaServiceError`, :class:`KafkaAuthenticationError`),
the error callback that turns a refused login into one such error instead of
librdkafka's endless retries (:class:`ClientErrors`), the logger librdkafka's own log
goes to (:data:`CLIENT_LOG`) and the settings every client starts from
(:func:`client_config`).
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaError

from psmatch.adapters.kafka.security import KafkaSecurity
from psmatch.errors import PsmatchError


class KafkaServiceError(PsmatchError):
    """Kafka unreachable, a topic that cannot be created, a record that cannot be sent."""


class KafkaAuthenticationError(KafkaServiceError):
    """The broker refused the client's SASL credentials (or its TLS handshake failed)."""


class ClientErrors:
    """The error callback of a confluent-kafka client: remembers a refused login.

    librdkafka retries a failed authentication for ever (its log says why, once per
    attempt); the service instead stops with one message the first time.
    """

    def __init__(self, bootstrap_servers: str) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.auth: str | None = None

    def __call__(self, err: KafkaError) -> None:
        self.record(err.code(), err.str())

    def record(self, code: int, reason: str) -> None:
        """Note a client error (librdkafka's code and reason)."""
        if code in (KafkaError._AUTHENTICATION, KafkaError._SSL):
            self.auth = self.auth or reason

    def check(self) -> None:
        """:class:`KafkaAuthenticationError` if the broker refused the login."""
        if self.auth is not None:
            raise KafkaAuthenticationError(
                f"Kafka at {self.bootstrap_servers} refused the connection: {self.auth} "
                "(check kafka_username, the password in PSMATCH_KAFKA_PASSWORD or "
                "--kafka-password-file, kafka_sasl_mechanism and kafka_security_protocol)"
            )


CLIENT_LOG = logging.getLogger("psmatch.kafka.client")
"""Where librdkafka's own log goes (the CLI shows its warnings only)."""


def client_config(
    bootstrap_servers: str, security: KafkaSecurity, errors: ClientErrors
) -> dict[str, Any]:
    """The settings every confluent-kafka client here starts from: the brokers, the
    security settings, ``errors`` as the error callback and :data:`CLIENT_LOG`."""
    return {"bootstrap.servers": bootstrap_servers, **security.client_config(),
            "error_cb": errors, "logger": CLIENT_LOG}  # fmt: skip
