"""The Kafka ACLs the service's principals need, and no more: :func:`service_acls` for
the streaming job, :func:`reader_acls` for someone who runs ``psmatch tail``.

On a broker whose authorizer denies what no ACL allows (``allow.everyone.if.no.acl.found
=false``), the job reads the subscriptions and events topics, writes the notifications
and rejected topics, and creates the four when they are missing; Spark's Kafka source
reads without a consumer group (it assigns partitions and keeps its offsets in the
checkpoint), so it needs no group ACL. READ and WRITE imply DESCRIBE. ``psmatch tail``
reads with a consumer group of its own (``psmatch-reader-<random>``, committing nothing),
so a reader needs READ on the topic and on the groups with that prefix. Writing a
subscription (``psmatch subscribe``) or an event needs WRITE on that topic alone. A
tenant's ACLs are :func:`psmatch.service.tenants.tenant_acls`.
"""

from __future__ import annotations

from psmatch.adapters.kafka.admin import Acl
from psmatch.adapters.kafka.reader import GROUP_PREFIX
from psmatch.service.config import ServiceConfig


def service_acls(config: ServiceConfig, principal: str) -> list[Acl]:
    """The streaming job's ACLs for ``principal`` (``User:<name>``). With ``tenancy =
    "topics"``, READ on every tenant's subscriptions topic and WRITE on every tenant's
    notifications and rejected topics (prefixed ``<topic>.``: the tenants added later
    too), and on its events and rejected topics as with one tenant; the tenants' topics
    are ``psmatch tenants add``'s to create."""
    inputs = (config.subscriptions_topic, config.events_topic)
    outputs = (config.notifications_topic, config.rejected_topic)
    if config.tenancy == "topics":
        tenants = [Acl(principal, "READ", "topic", f"{config.subscriptions_topic}.", True),
                   *(Acl(principal, "WRITE", "topic", f"{topic}.", True) for topic in outputs)]
        own = (config.events_topic, config.rejected_topic)
        return [*tenants, Acl(principal, "READ", "topic", config.events_topic),
                Acl(principal, "WRITE", "topic", config.rejected_topic),
                *(Acl(principal, "CREATE", "topic", topic) for topic in own)]  # fmt: skip
    return [
        *(Acl(principal, "READ", "topic", topic) for topic in inputs),
        *(Acl(principal, "WRITE", "topic", topic) for topic in outputs),
        *(Acl(principal, "CREATE", "topic", topic) for topic in (*inputs, *outputs)),
    ]


def reader_acls(topic: str, principal: str) -> list[Acl]:
    """What ``principal`` needs to read ``topic`` with ``psmatch tail``."""
    return [Acl(principal, "READ", "topic", topic),
            Acl(principal, "READ", "group", GROUP_PREFIX, prefixed=True)]  # fmt: skip
