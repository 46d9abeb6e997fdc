"""What every confluent-kafka client of the service shares.

Owns the Kafka errors (:class:`KafkaServiceError`, :class:`KafkaAuthenticationError`,
:class:`KafkaAuthorizationError`),
the error callback that turns a refused connection into one such error instead of
librdkafka's endless retries (:class:`ClientErrors`), the logger librdkafka's own log
goes to (:data:`CLIENT_LOG`) and the settings every client starts from
(:func:`client_config`).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from confluent_kafka import KafkaError

from psmatch.adapters.kafka.security import KafkaSecurity
from psmatch.adapters.tls_probe import host_port, listener_kind
from psmatch.errors import PsmatchError


class KafkaServiceError(PsmatchError):
    """Kafka unreachable, a topic that cannot be created, a record that cannot be sent."""


class KafkaAuthenticationError(KafkaServiceError):
    """The broker refused the client: its SASL credentials, its TLS handshake (a CA that
    does not verify the broker, a client certificate the broker does not trust) or its
    security protocol (plaintext to a TLS listener)."""


class KafkaAuthorizationError(KafkaServiceError):
    """The broker's ACLs do not allow the principal what it asked (a topic's READ or
    WRITE, a group's READ)."""


_BROKER_NAME = re.compile(r"^\S+/\S+: ")  # "sasl_ssl://127.0.0.1:9093/bootstrap: "
_SETTINGS_HINT = {
    "auth": "check kafka_username, the password in PSMATCH_KAFKA_PASSWORD or "
            "--kafka-password-file, kafka_sasl_mechanism and kafka_security_protocol",
    "tls": "check kafka_ca_file (the CA that signed the broker's certificate) and "
           "kafka_security_protocol (is this listener TLS?)",
    "certificate": "the listener wants a client certificate it trusts: check "
                   "kafka_cert_file and kafka_key_file, and that this is the listener for "
                   "kafka_security_protocol",
}  # fmt: skip


class ClientErrors:
    """The error callback of a confluent-kafka client: remembers why the broker refused
    the connection.

    librdkafka retries a refused connection for ever (its log says why, once per
    attempt); the service instead stops with one message the first time: a refused
    login (SASL), a failed TLS handshake (the broker's certificate not verified), a TLS
    alert from the broker (no or an untrusted client certificate), and a protocol
    mismatch: a client without TLS (``security``, set by :func:`client_config`) that
    finds no broker, or a TLS client whose handshake fails, asks the first bootstrap
    server once which protocol it speaks (:func:`listener_kind`), so that a broker down
    is still waited out.
    """

    def __init__(self, bootstrap_servers: str, security: KafkaSecurity | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.security = security
        self.auth: str | None = None
        self._probed = False

    def __call__(self, err: KafkaError) -> None:
        self.record(err.code(), err.str())

    def record(self, code: int, reason: str) -> None:
        """Note a client error (librdkafka's code and reason)."""
        if self.auth is not None:
            return
        reason = _BROKER_NAME.sub("", reason)
        if code == KafkaError._AUTHENTICATION:
            self.auth = f"refused the login: {reason} ({_SETTINGS_HINT['auth']})"
        elif code == KafkaError._SSL:
            self.auth = f"refused the connection: TLS: {reason} ({_SETTINGS_HINT['tls']})"
        elif code == KafkaError._TRANSPORT and "alert" in reason.lower():
            self.auth = (f"refused the connection with a TLS alert: {reason} "
                         f"({_SETTINGS_HINT['certificate']})")  # fmt: skip
        elif code == KafkaError._TRANSPORT and "SSL handshake failed" in reason:
            self._probe(expect_tls=True)  # a plaintext listener, or a broker going down?
        elif code == KafkaError._ALL_BROKERS_DOWN:
            self._probe(expect_tls=False)

    def _probe(self, expect_tls: bool) -> None:
        """Once: is the first bootstrap server a listener of the other kind than this
        client's protocol (not merely down)?"""
        if self._probed or self.security is None or self.security.tls != expect_tls:
            return
        self._probed = True
        first = self.bootstrap_servers.split(",")[0]
        kind = listener_kind(*host_port(first, 9092))
        protocol = self.security.protocol
        if kind == "tls" and not expect_tls:
            self.auth = (f"refused the connection: {first} is a TLS listener but "
                         f"kafka_security_protocol is {protocol} (use SSL or SASL_SSL, with "
                         "kafka_ca_file)")  # fmt: skip
        elif kind == "plaintext" and expect_tls:
            self.auth = (f"refused the connection: {first} is not a TLS listener but "
                         f"kafka_security_protocol is {protocol} (is this listener TLS? use "
                         "PLAINTEXT or SASL_PLAINTEXT for it)")  # fmt: skip

    def check(self) -> None:
        """:class:`KafkaAuthenticationError` if the broker refused the connection."""
        if self.auth is not None:
            raise KafkaAuthenticationError(f"Kafka at {self.bootstrap_servers} {self.auth}")


CLIENT_LOG = logging.getLogger("psmatch.kafka.client")
"""Where librdkafka's own log goes (the CLI shows its warnings only)."""


def client_config(
    bootstrap_servers: str, security: KafkaSecurity, errors: ClientErrors
) -> dict[str, Any]:
    """The settings every confluent-kafka client here starts from: the brokers, the
    security settings, ``errors`` as the error callback (told the security settings,
    so that it can tell a protocol mismatch from an outage) and :data:`CLIENT_LOG`."""
    errors.security = security
    return {"bootstrap.servers": bootstrap_servers, **security.client_config(),
            "error_cb": errors, "logger": CLIENT_LOG}  # fmt: skip
