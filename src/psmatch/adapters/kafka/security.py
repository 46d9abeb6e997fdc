"""Kafka security: the one place it is turned into client settings.

Owns :class:`KafkaSecurity` (protocol, SASL mechanism and credentials, CA file), its
librdkafka settings (every confluent-kafka client of the service) and its Java client
settings, and :func:`spark_kafka_options`, the ``kafka.``-prefixed options of Spark's
Kafka source: every client of the service connects the same way. Imports no Kafka
client.
"""

from __future__ import annotations

from dataclasses import dataclass, field

KAFKA_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


@dataclass(frozen=True, slots=True)
class KafkaSecurity:
    """How every client authenticates to and encrypts its traffic with the brokers.

    ``protocol`` is Kafka's ``security.protocol``; with ``SASL_*``, ``sasl_mechanism``,
    ``username`` and ``password`` authenticate; with ``SSL``/``SASL_SSL``, ``ca_file``
    (PEM) verifies the brokers (default: the system's CAs). The password is left out of
    ``repr``.
    """

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "SCRAM-SHA-512"
    username: str = ""
    password: str = field(default="", repr=False)
    ca_file: str = ""

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def client_config(self) -> dict[str, str]:
        """librdkafka settings (confluent-kafka's producer, consumer and admin client)."""
        conf = {"security.protocol": self.protocol}
        if self.sasl:
            conf.update({"sasl.mechanism": self.sasl_mechanism, "sasl.username": self.username,
                         "sasl.password": self.password})  # fmt: skip
        if self.tls and self.ca_file:
            conf["ssl.ca.location"] = self.ca_file
        return conf

    def java_config(self) -> dict[str, str]:
        """The same settings for the Java client (Spark's source and sink, Kafka's tools)."""
        conf = {"security.protocol": self.protocol}
        if self.sasl:

            def quoted(text: str) -> str:
                return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

            conf["sasl.mechanism"] = self.sasl_mechanism
            conf["sasl.jaas.config"] = (
                f"{_LOGIN_MODULES[self.sasl_mechanism]} required "
                f"username={quoted(self.username)} password={quoted(self.password)};"
            )
        if self.tls and self.ca_file:
            conf.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": self.ca_file})
        return conf


PLAINTEXT = KafkaSecurity()


def spark_kafka_options(bootstrap_servers: str, security: KafkaSecurity) -> dict[str, str]:
    """The ``kafka.``-prefixed options of Spark's Kafka source (and of a Spark Kafka
    sink, as the benchmark's ceiling uses).

    Use them whole: ``spark.readStream.format("kafka").options(**opts)``. They hold the
    password.
    """
    conf = {"bootstrap.servers": bootstrap_servers, **security.java_config()}
    return {f"kafka.{key}": value for key, value in conf.items()}
