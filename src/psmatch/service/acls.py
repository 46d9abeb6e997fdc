"""The Kafka ACLs the service's principals need, and no more: :func:`service_acls` for
the streaming job, :func:`reader_acls` for someone who runs ``psmatch tail``.

On a broker whose authorizer denies what no ACL allows (``allow.everyone.if.no.acl.found
=false``), the job reads the subscriptions and events topics, writes the notifications
and rejected topics, and creates the four when they are missing; Spark's Kafka source
reads without a consumer group (it assigns partitions and keeps its offsets in the
checkpoint), but the driver reads a batch's few subscription records itself
(:class:`~psmatch.adapters.kafka.reader.RangeReader`), whose consumer has a group
(``psmatch-reader-<random>``, committing nothing): the job needs READ on the groups with
that prefix. READ and WRITE imply DESCRIBE. With ``delivery =
"exactly-once"`` its matching tasks are transactional producers that commit a marker
as a consumer group's offsets (:mod:`psmatch.service.delivery`): they need WRITE on
the transactional ids and READ on the groups named with the query's
:func:`~psmatch.service.delivery.transactional_prefix` (the marker's offsets are of the
events topic, which the job reads already), and no IDEMPOTENT_WRITE on the cluster
(Kafka 3.0 and later let a producer with WRITE on a topic be idempotent).
``psmatch tail`` reads with a consumer group of its own (``psmatch-reader-<random>``,
committing nothing), so a reader needs READ on the topic and on the groups with that
prefix. Writing a subscription (``psmatch subscribe``) or an event needs WRITE on that
topic alone. A tenant's ACLs are :func:`psmatch.service.tenants.tenant_acls`.
"""

from __future__ import annotations

from psmatch.adapters.kafka.admin import Acl
from psmatch.adapters.kafka.reader import GROUP_PREFIX
from psmatch.service.config import ServiceConfig
from psmatch.service.delivery import EXACTLY_ONCE, transactional_prefix


def service_acls(config: ServiceConfig, principal: str) -> list[Acl]:
    """The streaming job's ACLs for ``principal`` (``User:<name>``). With ``tenancy =
    "topics"``, READ on every tenant's subscriptions topic and WRITE on every tenant's
    notifications and rejected topics (prefixed ``<topic>.``: the tenants added later
    too), and on its events and rejected topics as with one tenant; the tenants' topics
    are ``psmatch tenants add``'s to create. With ``delivery = "exactly-once"``, WRITE
    on the query's transactional ids and READ on its marker groups (both prefixed
    ``<transactional prefix>.``, which depends on the checkpoint's location: a new
    checkpoint needs them anew)."""
    inputs = (config.subscriptions_topic, config.events_topic)
    outputs = (config.notifications_topic, config.rejected_topic)
    if config.tenancy == "topics":
        tenants = [Acl(principal, "READ", "topic", f"{config.subscriptions_topic}.", True),
                   *(Acl(principal, "WRITE", "topic", f"{topic}.", True) for topic in outputs)]
        own = (config.events_topic, config.rejected_topic)
        acls = [*tenants, Acl(principal, "READ", "topic", config.events_topic),
                Acl(principal, "WRITE", "topic", config.rejected_topic),
                *(Acl(principal, "CREATE", "topic", topic) for topic in own)]  # fmt: skip
    else:
        acls = [
            *(Acl(principal, "READ", "topic", topic) for topic in inputs),
            *(Acl(principal, "WRITE", "topic", topic) for topic in outputs),
            *(Acl(principal, "CREATE", "topic", topic) for topic in (*inputs, *outputs)),
        ]
    acls.append(Acl(principal, "READ", "group", GROUP_PREFIX, prefixed=True))
    if config.delivery == EXACTLY_ONCE:
        # every task's transactional.id, and its marker group, is <prefix>.p<n> or .s<n>
        tasks = transactional_prefix(config.checkpoint_location, config.notifications_topic)
        acls += [Acl(principal, "WRITE", "transactional_id", f"{tasks}.", True),
                 Acl(principal, "READ", "group", f"{tasks}.", True)]  # fmt: skip
    return acls


def reader_acls(topic: str, principal: str) -> list[Acl]:
    """What ``principal`` needs to read ``topic`` with ``psmatch tail``."""
    return [Acl(principal, "READ", "topic", topic),
            Acl(principal, "READ", "group", GROUP_PREFIX, prefixed=True)]  # fmt: skip
