"""The service's one configuration object: ``ServiceConfig``, typed, frozen, with defaults.

Every setting has a default that works on one machine, can be overridden by an
environment variable ``PSMATCH_<FIELD>`` (e.g. ``PSMATCH_BOOTSTRAP_SERVERS``) and by the
matching CLI flag (``--bootstrap-servers``); flags win over the environment, which wins
over the defaults. Invalid values raise :class:`psmatch.service.errors.ConfigError`.

Secrets (``kafka_password``, ``redis_password``) are never flags, since a command line
is visible to every user of the machine: they come from the environment
(``PSMATCH_KAFKA_PASSWORD``, ``PSMATCH_REDIS_PASSWORD``) or from a file named by a flag
(``--kafka-password-file``, ``--redis-password-file``). They are left out of ``repr``
and shown as ``***`` by :meth:`ServiceConfig.as_dict`.

The default folders (the checkpoint and the local servers' data under ``var/``, the
Spark Kafka connector under ``.cache/``) are in :data:`BASE_DIR`: the checkout the
package runs from (an editable install, as ``make run`` and the tests use), else the
current directory (an installed package).
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from psmatch.adapters.kafka.security import (
    KAFKA_PROTOCOLS,
    SASL_MECHANISMS,
    KafkaSecurity,
    pem_keystore_problem,
)
from psmatch.paths import base_dir
from psmatch.service.errors import ConfigError
from psmatch.service.records import common as record_limits

ENV_PREFIX = "PSMATCH_"


BASE_DIR = base_dir()
"""Where ``var/`` and ``.cache/`` are by default (see the module docstring)."""
VAR_DIR = BASE_DIR / "var"
"""The default folder of the checkpoint and of the local servers' data and pids."""


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    """Settings of the streaming service and its CLI."""

    bootstrap_servers: str = field(
        default="127.0.0.1:9092", metadata={"help": "Kafka bootstrap servers (host:port,...)"}
    )
    subscriptions_topic: str = field(
        default="psmatch.subscriptions",
        metadata={"help": "compacted input topic: key = subscription id, value = JSON"},
    )
    events_topic: str = field(
        default="psmatch.events", metadata={"help": "input topic of JSON events"}
    )
    notifications_topic: str = field(
        default="psmatch.notifications", metadata={"help": "output topic, one record per match"}
    )
    rejected_topic: str = field(
        default="psmatch.rejected",
        metadata={"help": "output topic of records that could not be used, with a reason"},
    )
    tenancy: str = field(
        default="single",
        metadata={"help": "single (one tenant: the four topics as named) or topics (a "
                  "subscriptions, notifications and rejected topic per tenant, each named "
                  "<topic>.<tenant>, read and written by that tenant alone; psmatch tenants)"},
    )  # fmt: skip
    tenant: str = field(
        default="",
        metadata={"help": "a tenant's commands (subscribe, unsubscribe, tail, explain "
                  "--from-topic) use that tenant's topics, <topic>.<tenant>"},
    )  # fmt: skip
    topic_partitions: int = field(
        default=2, metadata={"help": "partitions of the topics the service creates"}
    )
    sink_compression: str = field(
        default="lz4",
        metadata={"help": "compression of the notification and rejected records: none, "
                          "gzip, snappy, lz4 or zstd (consumers need the codec)"},
    )
    delivery: str = field(
        default="at-least-once",
        metadata={"help": "at-least-once (a replayed batch writes its notifications again) or "
                  "exactly-once (Kafka transactions: read_committed consumers see each once; "
                  "docs/streaming.md)"},
    )  # fmt: skip
    redis_url: str = field(
        default="redis://127.0.0.1:6379/0", metadata={"help": "Redis holding subscription state"}
    )
    redis_prefix: str = field(
        default="psmatch:", metadata={"help": "prefix of every Redis key the service writes"}
    )
    change_log_retention: int = field(
        default=200_000,
        metadata={"help": "subscription changes kept in Redis for workers to catch up "
                          "(and always every change of the latest batch)"},
    )
    matcher: str = field(
        default="auto", metadata={"help": "matcher kind (psmatch.matchers.MATCHERS): auto "
                                          "(PSTHash or bitset per conjunct), psthash, bitset, ..."}
    )
    trigger_seconds: float = field(
        default=1.0, metadata={"help": "micro-batch trigger interval in seconds"}
    )
    max_offsets_per_trigger: int = field(
        default=0,
        metadata={"help": "max input records per micro-batch over both topics (0 = no limit)"},
    )
    starting_offsets: str = field(
        default="earliest",
        metadata={"help": "where a new query (no checkpoint) starts: earliest or latest"},
    )
    checkpoint_location: str = field(
        default=str(VAR_DIR / "checkpoint"),
        metadata={"help": "Spark checkpoint directory (holds the input offsets)"},
    )
    spark_master: str = field(
        default="local[*]", metadata={"help": "Spark master URL (local[*] = all cores here)"}
    )
    shuffle_partitions: int = field(default=2, metadata={"help": "spark.sql.shuffle.partitions"})
    shards: int = field(
        default=1,
        metadata={"help": "split the subscriptions into this many shards by a stable hash of "
                  "their id; each matching task holds one shard and every event is matched "
                  "by every shard (docs/streaming.md)"},
    )  # fmt: skip
    match_batch_size: int = field(
        default=2000, metadata={"help": "events per Arrow batch handed to the matcher"}
    )
    spark_jars_dir: str = field(
        default=str(BASE_DIR / ".cache" / "spark-kafka" / "jars"),
        metadata={"help": "folder of the Spark Kafka connector jars (scripts/fetch-jars.sh)"},
    )
    log_level: str = field(
        default="INFO", metadata={"help": "log level of the service: DEBUG, INFO, WARNING"}
    )
    metrics_port: int = field(
        default=9464,
        metadata={"help": "port of the job's Prometheus /metrics endpoint (0 = no endpoint)"},
    )
    metrics_host: str = field(
        default="127.0.0.1",
        metadata={"help": "address the metrics endpoint listens on (0.0.0.0 = every interface)"},
    )
    max_event_bytes: int = field(
        default=record_limits.DEFAULT_MAX_EVENT_BYTES,
        metadata={"help": "largest event value in bytes; larger ones are rejected (too_large)"},
    )
    max_subscription_bytes: int = field(
        default=record_limits.DEFAULT_MAX_SUBSCRIPTION_BYTES,
        metadata={"help": "largest subscription record in bytes, as sent and as stored "
                  "(too_large); with max_event_bytes it must leave a notification under 1 MB"},
    )  # fmt: skip
    max_event_attributes: int = field(
        default=record_limits.DEFAULT_MAX_EVENT_ATTRIBUTES,
        metadata={"help": "most attributes in an event, once flattened (limit_exceeded)"},
    )
    max_string_length: int = field(
        default=record_limits.DEFAULT_MAX_STRING_LENGTH,
        metadata={"help": "longest attribute name or string value in an event, in characters "
                  "(limit_exceeded)"},
    )  # fmt: skip
    redis_retry_seconds: float = field(
        default=300.0,
        metadata={"help": "how long the job waits out a Redis outage (retrying with backoff) "
                  "before it stops; 0 = stop at the first connection error"},
    )  # fmt: skip
    query_max_restarts: int = field(
        default=5,
        metadata={"help": "restarts of a streaming query that failed on an infrastructure "
                  "fault allowed within query_restart_window_seconds (0 = never restart)"},
    )  # fmt: skip
    query_restart_window_seconds: float = field(
        default=600.0,
        metadata={"help": "the window over which query_max_restarts is counted"},
    )
    kafka_security_protocol: str = field(
        default="PLAINTEXT",
        metadata={"help": "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, for every Kafka client"},
    )
    kafka_sasl_mechanism: str = field(
        default="SCRAM-SHA-512",
        metadata={"help": "SASL mechanism with SASL_*: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"},
    )
    kafka_username: str = field(default="", metadata={"help": "SASL user name with SASL_*"})
    kafka_password_file: str = field(
        default="",
        metadata={"help": "file holding the SASL password (or set PSMATCH_KAFKA_PASSWORD)"},
    )
    kafka_ca_file: str = field(
        default="",
        metadata={"help": "CA bundle (PEM) that verifies the brokers with SSL or SASL_SSL "
                  "(default: the system's)"},
    )  # fmt: skip
    kafka_cert_file: str = field(
        default="",
        metadata={"help": "client certificate (PEM) for a broker that requires one (mTLS), "
                  "with SSL or SASL_SSL; needs kafka_key_file"},
    )  # fmt: skip
    kafka_key_file: str = field(
        default="",
        metadata={"help": "the client certificate's unencrypted PKCS#8 key, in one PEM file "
                  "with the certificate chain (Java's PEM key store; may be kafka_cert_file)"},
    )  # fmt: skip
    redis_password_file: str = field(
        default="",
        metadata={"help": "file holding the Redis password (or set PSMATCH_REDIS_PASSWORD, "
                  "or put it in the URL)"},
    )  # fmt: skip
    redis_ca_file: str = field(
        default="",
        metadata={"help": "CA bundle (PEM) verifying a rediss:// server (default: the system's)"},
    )
    redis_cert_file: str = field(
        default="",
        metadata={"help": "client certificate (PEM) for a rediss:// server that asks for one; "
                  "needs redis_key_file"},
    )  # fmt: skip
    redis_key_file: str = field(
        default="", metadata={"help": "the key (PEM) of redis_cert_file"}
    )
    kafka_password: str = field(
        default="", repr=False, metadata={"secret": True, "help": "SASL password"}
    )
    redis_password: str = field(
        default="", repr=False, metadata={"secret": True, "help": "Redis password"}
    )

    def __post_init__(self) -> None:
        if self.trigger_seconds <= 0:
            raise ConfigError(f"trigger_seconds must be > 0, got {self.trigger_seconds}")
        for name in ("topic_partitions", "change_log_retention", "match_batch_size",
                     "shuffle_partitions", "shards"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"metrics_port must be 0 (off) or a port, got {self.metrics_port}")
        if self.max_offsets_per_trigger < 0:
            raise ConfigError("max_offsets_per_trigger must be >= 0 (0 = no limit)")
        from psmatch.adapters.kafka.sink import SINK_COMPRESSION_TYPES

        if self.sink_compression not in SINK_COMPRESSION_TYPES:
            raise ConfigError(f"sink_compression must be one of {SINK_COMPRESSION_TYPES}, got "
                              f"{self.sink_compression!r}")  # fmt: skip
        from psmatch.service.delivery import DELIVERY_MODES

        if self.delivery not in DELIVERY_MODES:
            raise ConfigError(f"delivery must be one of {DELIVERY_MODES}, got {self.delivery!r}")
        if self.starting_offsets not in ("earliest", "latest"):
            raise ConfigError(
                f"starting_offsets must be 'earliest' or 'latest', got {self.starting_offsets!r}"
            )
        from psmatch import MATCHERS

        if self.matcher not in MATCHERS:
            raise ConfigError(f"unknown matcher {self.matcher!r}; choose one of {MATCHERS}")
        topics = [self.subscriptions_topic, self.events_topic, self.notifications_topic,
                  self.rejected_topic]  # fmt: skip
        if len(set(topics)) != len(topics) or not all(topics):
            raise ConfigError(f"the four topic names must be distinct and non-empty: {topics}")
        from psmatch.service.records.tenants import TENANCY_MODES, check_tenant

        if self.tenancy not in TENANCY_MODES:
            raise ConfigError(f"tenancy must be one of {TENANCY_MODES}, got {self.tenancy!r}")
        if self.tenant:
            try:
                check_tenant(self.tenant)
            except ValueError as exc:
                raise ConfigError(f"tenant: {exc}") from None
        if not self.redis_url.startswith(("redis://", "rediss://", "unix://")):
            from psmatch.adapters.state import redact_url

            raise ConfigError(
                f"redis_url must be a redis://, rediss:// or unix:// URL, got "
                f"{redact_url(self.redis_url)!r}"
            )
        if self.redis_retry_seconds < 0 or self.query_restart_window_seconds <= 0:
            raise ConfigError("redis_retry_seconds must be >= 0 and "
                              "query_restart_window_seconds > 0")  # fmt: skip
        if self.query_max_restarts < 0:
            raise ConfigError("query_max_restarts must be >= 0 (0 = never restart)")
        self._check_security()

    def _check_security(self) -> None:
        for secret in ("kafka_password", "redis_password"):
            path = getattr(self, secret + "_file")
            if not path:
                continue
            try:
                value = Path(path).read_text(encoding="utf-8").rstrip("\r\n")
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"cannot read {secret}_file {path}: "
                                  f"{type(exc).__name__}") from None  # fmt: skip
            if getattr(self, secret) not in ("", value):
                raise ConfigError(f"{secret} is set in the environment and {secret}_file "
                                  "names a file: give one of them")  # fmt: skip
            object.__setattr__(self, secret, value)
        if self.kafka_security_protocol not in KAFKA_PROTOCOLS:
            raise ConfigError(f"kafka_security_protocol must be one of {KAFKA_PROTOCOLS}, "
                              f"got {self.kafka_security_protocol!r}")  # fmt: skip
        if self.kafka_security_protocol.startswith("SASL_"):
            if self.kafka_sasl_mechanism not in SASL_MECHANISMS:
                raise ConfigError(f"kafka_sasl_mechanism must be one of {SASL_MECHANISMS}, "
                                  f"got {self.kafka_sasl_mechanism!r}")  # fmt: skip
            if not self.kafka_username or not self.kafka_password:
                raise ConfigError(
                    f"kafka_security_protocol {self.kafka_security_protocol} needs "
                    "kafka_username and a password (PSMATCH_KAFKA_PASSWORD or "
                    "--kafka-password-file)"
                )
        for name in ("kafka_ca_file", "redis_ca_file", "kafka_cert_file", "kafka_key_file",
                     "redis_cert_file", "redis_key_file"):  # fmt: skip
            path = getattr(self, name)
            if path and not Path(path).is_file():
                raise ConfigError(f"{name} {path} is not a file")
        for server in ("kafka", "redis"):
            cert, key = getattr(self, f"{server}_cert_file"), getattr(self, f"{server}_key_file")
            if bool(cert) != bool(key):
                raise ConfigError(f"{server}_cert_file and {server}_key_file go together: "
                                  "give both or neither")  # fmt: skip
        if self.kafka_cert_file:
            if self.kafka_security_protocol not in ("SSL", "SASL_SSL"):
                raise ConfigError("kafka_cert_file needs kafka_security_protocol SSL or "
                                  f"SASL_SSL, not {self.kafka_security_protocol}")  # fmt: skip
            problem = pem_keystore_problem(self.kafka_key_file)
            if problem is not None:
                raise ConfigError(f"kafka_key_file {self.kafka_key_file} {problem}")
        tls_settings = [n for n in ("redis_ca_file", "redis_cert_file") if getattr(self, n)]
        if tls_settings and not self.redis_url.startswith("rediss://"):
            raise ConfigError(f"{tls_settings[0]} is for TLS: give a rediss:// redis_url, not "
                              f"{self.redis_display_url!r}")  # fmt: skip

    # -- derived settings ----------------------------------------------------------

    @property
    def kafka_security(self) -> KafkaSecurity:
        """The security settings every Kafka client uses
        (:mod:`psmatch.adapters.kafka.security`)."""
        return KafkaSecurity(
            protocol=self.kafka_security_protocol,
            sasl_mechanism=self.kafka_sasl_mechanism,
            username=self.kafka_username,
            password=self.kafka_password,
            ca_file=self.kafka_ca_file,
            cert_file=self.kafka_cert_file,
            key_file=self.kafka_key_file,
        )

    def own_topic(self, base: str) -> str:
        """The topic ``base`` (one of the four) as this client uses it: with ``tenant``,
        that tenant's (``<base>.<tenant>``)."""
        from psmatch.service.records.tenants import tenant_topic

        return tenant_topic(base, self.tenant) if self.tenant else base

    @property
    def redis_connection_url(self) -> str:
        """``redis_url`` with the password and TLS files: what the state store connects
        with. Holds the secret: log :attr:`redis_display_url` instead."""
        parts = urlsplit(self.redis_url)
        if self.redis_password:
            user = quote(parts.username or "", safe="")
            host = parts.netloc.rpartition("@")[2]
            parts = parts._replace(netloc=f"{user}:{quote(self.redis_password, safe='')}@{host}")
        tls = [("ssl_ca_certs", self.redis_ca_file), ("ssl_certfile", self.redis_cert_file),
               ("ssl_keyfile", self.redis_key_file)]  # fmt: skip
        if any(value for _, value in tls):
            query = [*parse_qsl(parts.query), *((k, v) for k, v in tls if v)]
            parts = parts._replace(query=urlencode(query))
        return urlunsplit(parts)

    @property
    def redis_display_url(self) -> str:
        """``redis_url`` without any password, for logs and messages."""
        from psmatch.adapters.state import redact_url

        return redact_url(self.redis_url)

    # -- construction --------------------------------------------------------------

    @classmethod
    def load(
        cls, env: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None
    ) -> ServiceConfig:
        """Defaults, then ``PSMATCH_*`` environment variables, then ``overrides``.

        ``overrides`` values that are ``None`` are ignored (an unset CLI flag).
        """
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is not None and raw != "":
                values[f.name] = _convert(f.name, field_type(f), raw)
        for name, value in (overrides or {}).items():
            if value is None:
                continue
            if name not in _FIELD_NAMES:
                raise ConfigError(f"unknown setting {name!r}")
            f = _FIELDS[name]
            values[name] = _convert(name, field_type(f), value) if isinstance(value, str) else value
        return cls(**values)

    def replace(self, **changes: Any) -> ServiceConfig:
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """Every setting; secrets (and a password in ``redis_url``) shown as ``***``."""
        values = dataclasses.asdict(self)
        for name in SECRET_FIELDS:
            values[name] = "***" if values[name] else ""
        values["redis_url"] = self.redis_display_url
        return values


def field_type(f: dataclasses.Field[Any]) -> type:
    hints = typing.get_type_hints(ServiceConfig)
    tp = hints[f.name]
    if isinstance(tp, types.UnionType):
        tp = next(t for t in typing.get_args(tp) if t is not type(None))
    return tp  # type: ignore[no-any-return]


def _convert(name: str, tp: type, raw: str) -> Any:
    try:
        if tp is bool:
            return raw.strip().lower() in ("1", "true", "yes", "on")
        return tp(raw)
    except ValueError:
        raise ConfigError(
            f"setting {name} (env {ENV_PREFIX}{name.upper()}) must be a {tp.__name__}, got {raw!r}"
        ) from None


_FIELDS = {f.name: f for f in dataclasses.fields(ServiceConfig)}
_FIELD_NAMES = frozenset(_FIELDS)
SECRET_FIELDS = frozenset(name for name, f in _FIELDS.items() if f.metadata.get("secret"))
