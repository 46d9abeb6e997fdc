"""Tenant administration with ``tenancy = "topics"``: a tenant's topics, its ACLs and
its SCRAM user, made and removed through the broker's admin API, and the tenants a
broker holds (what ``psmatch tenants add|remove|list`` does).

A tenant ``alice`` (:mod:`psmatch.service.records.tenants`) has three topics:
``<subscriptions topic>.alice`` (compacted), ``<notifications topic>.alice`` and
``<rejected topic>.alice``, and its principal (``User:alice`` by default, the SCRAM
user's, or a client certificate's ``User:CN=...``) the ACLs :func:`tenant_acls`: WRITE
and READ on its subscriptions topic (READ for ``psmatch explain --from-topic``), READ
on its notifications and rejected topics and on the readers' groups (``psmatch tail``,
:func:`psmatch.service.acls.reader_acls`), all literal but the groups' prefix. Nothing
else: on a broker that denies what no ACL allows, alice can neither write another
tenant's subscriptions nor read its notifications. The streaming job's principal reads
and writes every tenant's topics through :func:`psmatch.service.acls.service_acls`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from psmatch.adapters.kafka import admin
from psmatch.adapters.kafka.admin import Acl
from psmatch.errors import PsmatchError
from psmatch.service.acls import reader_acls
from psmatch.service.config import ServiceConfig
from psmatch.service.records.tenants import scoped_id, tenant_of_topic, tenant_topic


def tenant_topics(config: ServiceConfig, tenant: str) -> dict[str, dict[str, str]]:
    """``tenant``'s three topics with their configs (those of the job's own topics)."""
    bases = (config.subscriptions_topic, config.events_topic, config.notifications_topic,
             config.rejected_topic)  # fmt: skip
    configs = admin.service_topics(*bases)
    return {tenant_topic(base, tenant): configs[base]
            for base in (bases[0], bases[2], bases[3])}  # fmt: skip


def tenant_acls(config: ServiceConfig, tenant: str, principal: str) -> list[Acl]:
    """What ``tenant``'s ``principal`` may do, and nothing more (the module docstring)."""
    subscriptions = tenant_topic(config.subscriptions_topic, tenant)
    return [Acl(principal, "WRITE", "topic", subscriptions),
            *reader_acls(subscriptions, principal),
            *reader_acls(tenant_topic(config.notifications_topic, tenant), principal),
            *reader_acls(tenant_topic(config.rejected_topic, tenant), principal)]  # fmt: skip


def add_tenant(config: ServiceConfig, tenant: str, principal: str,
               password: str | None = None) -> list[str]:  # fmt: skip
    """Create ``tenant``'s topics (those missing), its ACLs and, with ``password``, its
    SCRAM-SHA-512 user named as the tenant (its principal ``User:<tenant>``); returns
    what it did, one line each, the password never among them."""
    kafka = (config.bootstrap_servers,)
    security = config.kafka_security
    done = []
    if password is not None:
        admin.set_scram_user(*kafka, tenant, password, security=security)
        done.append(f"set the SCRAM-SHA-512 credential of user {tenant}")
    created = admin.ensure_topics(*kafka, tenant_topics(config, tenant),
                                  partitions=config.topic_partitions, security=security)
    done += [f"created topic {name}" for name in created]
    acls = list(dict.fromkeys(tenant_acls(config, tenant, principal)))
    admin.create_acls(*kafka, acls, security=security)
    done += [f"created {acl}" for acl in acls]
    return done


class TombstonesPending(PsmatchError):
    """The job had not applied a removed tenant's tombstones when its topics were to be
    deleted: they are kept."""


def remove_tenant(config: ServiceConfig, tenant: str, principal: str, user: bool = False,
                  delete_topics: bool = False, timeout: float = 120.0) -> list[str]:  # fmt: skip
    """Delete ``tenant``'s ACLs for ``principal`` (it can write and read no more), then
    delete each of its live subscriptions by a tombstone in its subscriptions topic,
    which the job applies as it applies any; with ``user``, its SCRAM user; with
    ``delete_topics``, its three topics, once the subscription state holds none of the
    ids its subscriptions topic names (a subscription the job still held would have its
    notifications written to a topic that is gone): :class:`TombstonesPending`, and the
    topics kept, if it still holds some after ``timeout`` seconds (the job not running,
    say). Returns what it did, one line each. Cost: its subscriptions topic read to its
    end, then the state asked every second for those ids."""
    from psmatch.adapters.kafka.producer import JsonProducer
    from psmatch.adapters.kafka.reader import TopicReader

    kafka = (config.bootstrap_servers,)
    security = config.kafka_security
    deleted = admin.delete_acls(*kafka, tenant_acls(config, tenant, principal), security=security)
    done = [f"deleted {deleted} ACLs of {principal}"]
    existing = admin.topic_names(*kafka, security=security)
    subscriptions = tenant_topic(config.subscriptions_topic, tenant)
    if subscriptions in existing:
        with TopicReader(*kafka, subscriptions, security=security) as reader:
            latest = {r.key: r.value for r in sorted(reader.read_to_end(timeout=timeout),
                                                      key=lambda r: (r.partition, r.offset))}
        live = [key for key, value in latest.items() if key is not None and value is not None]
        with JsonProducer(*kafka, security) as producer:
            for key in live:
                producer.send(subscriptions, None, key=key)
        done.append(f"deleted {len(live)} subscriptions (tombstones in {subscriptions})")
    if user:
        admin.set_scram_user(*kafka, tenant, None, security=security)
        done.append(f"deleted the SCRAM-SHA-512 credential of user {tenant}")
    if delete_topics:
        if subscriptions in existing:
            # every id its topic ever named: a run again finds tombstones only, and the
            # state may still hold what they delete
            ids = [scoped_id(tenant, key.decode("utf-8", "replace"))
                   for key in latest if key is not None]  # fmt: skip
            _await_forgotten(config, tenant, ids, timeout)
        names = [name for name in tenant_topics(config, tenant) if name in existing]
        if names:
            admin.delete_topics(*kafka, names, security=security)
        done += [f"deleted topic {name}" for name in names]
    return done


def _await_forgotten(config: ServiceConfig, tenant: str, ids: list[str],
                     timeout: float) -> None:  # fmt: skip
    """Wait until the subscription state holds none of ``ids``; :class:`TombstonesPending`
    if it still holds some after ``timeout`` seconds."""
    from psmatch.adapters.state import StateStore

    store = StateStore.from_url(config.redis_connection_url, config.redis_prefix,
                                config.change_log_retention,
                                config.redis_retry_seconds)  # fmt: skip
    deadline = time.monotonic() + timeout
    while held := store.held(ids):
        if time.monotonic() >= deadline:
            raise TombstonesPending(
                f"the job still holds {len(held)} of tenant {tenant}'s subscriptions "
                f"(e.g. {held[0]}) {timeout:.0f} s after their tombstones: is it running? "
                f"Its topics are kept; run psmatch tenants remove {tenant} --delete-topics "
                "again once the job has applied them")  # fmt: skip
        time.sleep(1.0)


@dataclass(frozen=True, slots=True)
class Tenant:
    """A tenant the broker holds: its name and the principals that may write its
    subscriptions topic."""

    name: str
    writers: tuple[str, ...]


def list_tenants(config: ServiceConfig) -> list[Tenant]:
    """The tenants whose subscriptions topic the broker holds, by name, with the
    principals its ACLs let write it."""
    kafka = (config.bootstrap_servers,)
    security = config.kafka_security
    topics = {tenant_of_topic(name, config.subscriptions_topic): name
              for name in admin.topic_names(*kafka, security=security)}  # fmt: skip
    topics.pop(None, None)
    acls = admin.topic_acls(*kafka, list(topics.values()), security=security)
    return [Tenant(str(name), tuple(sorted({a.principal for a in acls[topic]
                                            if a.operation == "WRITE"})))
            for name, topic in sorted(topics.items())]  # fmt: skip
