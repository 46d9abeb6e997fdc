"""Kafka administration: the service's topics, its ACLs, and whether a broker answers.

Owns the four topics' settings (:func:`service_topics`: subscriptions compacted, the
rest deleted by age), creating the missing ones (:func:`ensure_topics`), deleting
topics (the tests, the benchmark, ``psmatch tenants remove``), ACLs (:class:`Acl`,
created, deleted and read with :func:`create_acls`, :func:`delete_acls` and
:func:`topic_acls` through the broker's admin API), SCRAM users
(:func:`set_scram_user`) and :func:`wait_for_kafka`. A
refused login fails within about a second with
:class:`~psmatch.adapters.kafka.client.KafkaAuthenticationError`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewTopic

from psmatch.adapters.kafka.client import (
    ClientErrors,
    KafkaAuthenticationError,
    KafkaServiceError,
    client_config,
)
from psmatch.adapters.kafka.security import PLAINTEXT, KafkaSecurity

log = logging.getLogger(__name__)


def _admin(bootstrap_servers: str, security: KafkaSecurity) -> tuple[AdminClient, ClientErrors]:
    errors = ClientErrors(bootstrap_servers)
    return AdminClient(client_config(bootstrap_servers, security, errors)), errors


def _list_topics(admin: AdminClient, errors: ClientErrors, timeout: float) -> Any:
    """Cluster metadata; a refused login fails within about a second, not at ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        step = max(0.1, min(1.0, deadline - time.monotonic()))
        try:
            return admin.list_topics(timeout=step)
        except Exception as exc:
            admin.poll(0)  # runs the error callback
            errors.check()
            if time.monotonic() >= deadline:
                raise KafkaServiceError(
                    f"Kafka at {errors.bootstrap_servers} is not reachable: {exc}"
                ) from None


def wait_for_kafka(
    bootstrap_servers: str, timeout: float = 10.0, security: KafkaSecurity = PLAINTEXT
) -> bool:
    """Whether a broker answers a metadata request within ``timeout`` seconds.

    :class:`KafkaAuthenticationError` if it refuses the credentials.
    """
    admin, errors = _admin(bootstrap_servers, security)
    try:
        return bool(_list_topics(admin, errors, timeout).brokers)
    except KafkaAuthenticationError:
        raise
    except KafkaServiceError:
        return False


def ensure_topics(
    bootstrap_servers: str,
    topics: Mapping[str, Mapping[str, str]],
    partitions: int = 2,
    timeout: float = 30.0,
    security: KafkaSecurity = PLAINTEXT,
) -> list[str]:
    """Create the topics that do not exist yet; returns the names created.

    ``topics`` maps a name to its topic configs (e.g. ``{"cleanup.policy": "compact"}``).
    """
    admin, errors = _admin(bootstrap_servers, security)
    existing = set(_list_topics(admin, errors, timeout).topics)
    new = [
        NewTopic(name, num_partitions=partitions, replication_factor=1, config=dict(cfg))
        for name, cfg in topics.items()
        if name not in existing
    ]
    created = []
    if new:
        for name, future in admin.create_topics(new, operation_timeout=timeout).items():
            try:
                future.result()
                created.append(name)
                log.info("created topic %s", name)
            except Exception as exc:
                err = exc.args[0] if exc.args else None
                if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    # there, though not listed: another creator's, or one this principal
                    # may not DESCRIBE (it would never become visible to the wait below)
                    continue
                raise KafkaServiceError(f"could not create topic {name}: {exc}") from exc
        _wait_topics_visible(admin, created, timeout)
    return created


def _wait_topics_visible(admin: AdminClient, names: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=timeout)
        if all(n in md.topics and md.topics[n].partitions for n in names):
            return
        time.sleep(0.1)


def delete_topics(
    bootstrap_servers: str,
    names: list[str],
    timeout: float = 30.0,
    security: KafkaSecurity = PLAINTEXT,
) -> None:
    admin, _ = _admin(bootstrap_servers, security)
    for future in admin.delete_topics(names, operation_timeout=timeout).values():
        try:
            future.result()
        except Exception as exc:
            log.warning("could not delete topic: %s", exc)


def service_topics(
    subscriptions: str, events: str, notifications: str, rejected: str
) -> dict[str, dict[str, str]]:
    """The four topics with their configs: subscriptions compacted, the rest deleted by age."""
    return {
        subscriptions: {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"},
        events: {"retention.ms": str(7 * 24 * 3600 * 1000)},
        notifications: {"retention.ms": str(7 * 24 * 3600 * 1000)},
        rejected: {"retention.ms": str(30 * 24 * 3600 * 1000)},
    }


@dataclass(frozen=True, slots=True)
class Acl:
    """One ALLOW ACL: ``principal`` (``User:<name>``) may ``operation`` (``READ``,
    ``WRITE``, ``CREATE``, ...) on the ``resource`` (``topic``, ``group`` or
    ``transactional_id``) ``name``, or on every name starting with it (``prefixed``)."""

    principal: str
    operation: str
    resource: Literal["topic", "group", "transactional_id"]
    name: str
    prefixed: bool = False

    def __str__(self) -> str:
        kind = "prefixed" if self.prefixed else "literal"
        return f"ALLOW {self.principal} {self.operation} on {self.resource} {self.name} ({kind})"

    def binding(self) -> Any:
        """The confluent-kafka ``AclBinding``."""
        from confluent_kafka.admin import (
            AclBinding,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
            ResourceType,
        )

        pattern = ResourcePatternType.PREFIXED if self.prefixed else ResourcePatternType.LITERAL
        return AclBinding(ResourceType[self.resource.upper()], self.name, pattern,
                          self.principal, "*", AclOperation[self.operation],
                          AclPermissionType.ALLOW)  # fmt: skip


def create_acls(
    bootstrap_servers: str,
    acls: Sequence[Acl],
    timeout: float = 30.0,
    security: KafkaSecurity = PLAINTEXT,
) -> None:
    """Create ``acls`` (those that exist already are kept: creating is idempotent); the
    client's principal needs ALTER on the cluster."""
    acls = list(dict.fromkeys(acls))  # one future per distinct binding
    admin, errors = _admin(bootstrap_servers, security)
    _list_topics(admin, errors, timeout)  # a refused connection fails here, in one line
    for acl, future in zip(acls, admin.create_acls([a.binding() for a in acls]).values(),
                           strict=True):  # fmt: skip
        try:
            future.result(timeout=timeout)
        except Exception as exc:
            raise KafkaServiceError(f"could not create the ACL {acl}: {exc}") from None


def _filter(acl: Acl) -> Any:
    """The ``AclBindingFilter`` that matches ``acl`` alone."""
    from confluent_kafka.admin import AclBindingFilter

    binding = acl.binding()
    return AclBindingFilter(binding.restype, binding.name, binding.resource_pattern_type,
                            binding.principal, binding.host, binding.operation,
                            binding.permission_type)  # fmt: skip


def delete_acls(
    bootstrap_servers: str,
    acls: Sequence[Acl],
    timeout: float = 30.0,
    security: KafkaSecurity = PLAINTEXT,
) -> int:
    """Delete ``acls`` (those that do not exist are no error); how many the broker
    deleted. The client's principal needs ALTER on the cluster."""
    acls = list(dict.fromkeys(acls))
    admin, errors = _admin(bootstrap_servers, security)
    _list_topics(admin, errors, timeout)
    deleted = 0
    for acl, future in zip(acls, admin.delete_acls([_filter(a) for a in acls]).values(),
                           strict=True):  # fmt: skip
        try:
            deleted += len(future.result(timeout=timeout))
        except Exception as exc:
            raise KafkaServiceError(f"could not delete the ACL {acl}: {exc}") from None
    return deleted


def topic_acls(
    bootstrap_servers: str, topics: Sequence[str], timeout: float = 30.0,
    security: KafkaSecurity = PLAINTEXT,
) -> dict[str, list[Acl]]:  # fmt: skip
    """The literal ALLOW ACLs on each of ``topics``, by topic."""
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    admin, errors = _admin(bootstrap_servers, security)
    _list_topics(admin, errors, timeout)
    found: dict[str, list[Acl]] = {}
    for topic in topics:
        query = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None,
                                 None, AclOperation.ANY, AclPermissionType.ALLOW)  # fmt: skip
        try:
            bindings = admin.describe_acls(query).result(timeout=timeout)
        except Exception as exc:
            raise KafkaServiceError(f"could not read the ACLs of topic {topic}: {exc}") from None
        found[topic] = [Acl(b.principal, b.operation.name, "topic", topic) for b in bindings]
    return found


def topic_names(
    bootstrap_servers: str, timeout: float = 30.0, security: KafkaSecurity = PLAINTEXT
) -> list[str]:
    """The names of the broker's topics that the client may describe, sorted."""
    admin, errors = _admin(bootstrap_servers, security)
    return sorted(_list_topics(admin, errors, timeout).topics)


def set_scram_user(
    bootstrap_servers: str,
    user: str,
    password: str | None,
    timeout: float = 30.0,
    security: KafkaSecurity = PLAINTEXT,
) -> None:
    """Create or reset the SCRAM-SHA-512 credential of ``user`` with ``password``, or with
    ``None`` delete it (a user without one is no error)."""
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin, errors = _admin(bootstrap_servers, security)
    _list_topics(admin, errors, timeout)
    if password is None:
        change: Any = UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)
    else:
        change = UserScramCredentialUpsertion(
            user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password.encode())
    for future in admin.alter_user_scram_credentials([change]).values():
        try:
            future.result(timeout=timeout)
        except Exception as exc:
            err = exc.args[0] if exc.args else None
            if (password is None and isinstance(err, KafkaError)
                    and err.code() == KafkaError.RESOURCE_NOT_FOUND):  # fmt: skip
                return
            # the message names the user, never the password
            raise KafkaServiceError(f"could not change the SCRAM user {user}: "
                                    f"{err.str() if isinstance(err, KafkaError) else exc}"
                                    ) from None  # fmt: skip
