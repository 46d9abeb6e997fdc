"""The service's one configuration object: ``ServiceConfig``, typed, frozen, with defaults.

Every setting has a default that works on one machine, can be overridden by an
environment variable ``PSMATCH_<FIELD>`` (e.g. ``PSMATCH_BOOTSTRAP_SERVERS``) and by the
matching CLI flag (``--bootstrap-servers``); flags win over the environment, which wins
over the defaults. Invalid values raise :class:`streaming.errors.ConfigError`.
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

from streaming import records
from streaming.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parent.parent
ENV_PREFIX = "PSMATCH_"


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
    topic_partitions: int = field(
        default=2, metadata={"help": "partitions of the topics the service creates"}
    )
    redis_url: str = field(
        default="redis://127.0.0.1:6379/0", metadata={"help": "Redis holding subscription state"}
    )
    redis_prefix: str = field(
        default="psmatch:", metadata={"help": "prefix of every Redis key the service writes"}
    )
    change_log_retention: int = field(
        default=200_000,
        metadata={"help": "subscription changes kept in Redis for workers to catch up"},
    )
    matcher: str = field(
        default="psthash", metadata={"help": "matcher kind: psthash, pstbloom or scan"}
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
        default=str(REPO_ROOT / "var" / "checkpoint"),
        metadata={"help": "Spark checkpoint directory (holds the input offsets)"},
    )
    spark_master: str = field(
        default="local[*]", metadata={"help": "Spark master URL (local[*] = all cores here)"}
    )
    shuffle_partitions: int = field(default=2, metadata={"help": "spark.sql.shuffle.partitions"})
    match_batch_size: int = field(
        default=2000, metadata={"help": "events per Arrow batch handed to the matcher"}
    )
    spark_jars_dir: str = field(
        default=str(REPO_ROOT / ".cache" / "spark-kafka" / "jars"),
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
        default=records.DEFAULT_MAX_EVENT_BYTES,
        metadata={"help": "largest event value in bytes; larger ones are rejected (too_large)"},
    )
    max_subscription_bytes: int = field(
        default=records.DEFAULT_MAX_SUBSCRIPTION_BYTES,
        metadata={"help": "largest subscription record in bytes, as sent and as stored "
                  "(too_large); with max_event_bytes it must leave a notification under 1 MB"},
    )  # fmt: skip
    max_event_attributes: int = field(
        default=records.DEFAULT_MAX_EVENT_ATTRIBUTES,
        metadata={"help": "most attributes in an event, once flattened (limit_exceeded)"},
    )
    max_string_length: int = field(
        default=records.DEFAULT_MAX_STRING_LENGTH,
        metadata={"help": "longest attribute name or string value in an event, in characters "
                  "(limit_exceeded)"},
    )  # fmt: skip

    def __post_init__(self) -> None:
        if self.trigger_seconds <= 0:
            raise ConfigError(f"trigger_seconds must be > 0, got {self.trigger_seconds}")
        for name in ("topic_partitions", "change_log_retention", "match_batch_size",
                     "shuffle_partitions"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"metrics_port must be 0 (off) or a port, got {self.metrics_port}")
        if self.max_offsets_per_trigger < 0:
            raise ConfigError("max_offsets_per_trigger must be >= 0 (0 = no limit)")
        if self.starting_offsets not in ("earliest", "latest"):
            raise ConfigError(
                f"starting_offsets must be 'earliest' or 'latest', got {self.starting_offsets!r}"
            )
        from index import MATCHERS

        if self.matcher not in MATCHERS:
            raise ConfigError(f"unknown matcher {self.matcher!r}; choose one of {MATCHERS}")
        topics = [self.subscriptions_topic, self.events_topic, self.notifications_topic,
                  self.rejected_topic]  # fmt: skip
        if len(set(topics)) != len(topics) or not all(topics):
            raise ConfigError(f"the four topic names must be distinct and non-empty: {topics}")
        if not self.redis_url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigError(f"redis_url must be a redis:// URL, got {self.redis_url!r}")

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
        return dataclasses.asdict(self)


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
