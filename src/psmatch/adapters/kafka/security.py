"""Kafka security: the one place it is turned into client settings.

Owns :class:`KafkaSecurity` (protocol, SASL mechanism and credentials, CA file, client
certificate), its
librdkafka settings (every confluent-kafka client of the service) and its Java client
settings, and :func:`spark_kafka_options`, the ``kafka.``-prefixed options of Spark's
Kafka source: every client of the service connects the same way. Imports no Kafka
client.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

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
    (PEM) verifies the brokers (default: the system's CAs) and ``cert_file`` with
    ``key_file`` (PEM, an unencrypted PKCS#8 key) is the client certificate a broker
    that requires one (mTLS) authenticates. Java's PEM key store is one file holding the
    certificate chain and the key: ``key_file`` must be that file when Spark's client
    uses the certificate (it may be the same file as ``cert_file``;
    :func:`pem_keystore_problem` says whether it is). The password is left out of
    ``repr``.
    """

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "SCRAM-SHA-512"
    username: str = ""
    password: str = field(default="", repr=False)
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""

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
        if self.tls and self.cert_file:
            conf.update({"ssl.certificate.location": self.cert_file,
                         "ssl.key.location": self.key_file})  # fmt: skip
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
        if self.tls and self.cert_file:
            # a PEM key store is read from its location alone: no password with PEM
            conf.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": self.key_file})
        return conf


PLAINTEXT = KafkaSecurity()


def pem_keystore_problem(key_file: str) -> str | None:
    """Why ``key_file`` cannot be Java's PEM key store (``None`` if it can): it must
    hold an unencrypted PKCS#8 key (``BEGIN PRIVATE KEY``) and the certificate chain.
    Reads the file once."""
    try:
        text = Path(key_file).read_text(encoding="ascii", errors="replace")
    except OSError as exc:
        return f"cannot be read ({type(exc).__name__})"
    if "-----BEGIN PRIVATE KEY-----" not in text:
        return ("holds no unencrypted PKCS#8 key (BEGIN PRIVATE KEY); convert it with "
                "openssl pkcs8 -topk8 -nocrypt")  # fmt: skip
    if "-----BEGIN CERTIFICATE-----" not in text:
        return ("holds no certificate: Spark's Kafka client reads the key and the "
                "certificate chain from one file (cat cert.pem key.pem > client.pem)")
    return None


def spark_kafka_options(bootstrap_servers: str, security: KafkaSecurity) -> dict[str, str]:
    """The ``kafka.``-prefixed options of Spark's Kafka source (and of a Spark Kafka
    sink, as the benchmark's ceiling uses).

    Use them whole: ``spark.readStream.format("kafka").options(**opts)``. They hold the
    password.
    """
    conf = {"bootstrap.servers": bootstrap_servers, **security.java_config()}
    return {f"kafka.{key}": value for key, value in conf.items()}
