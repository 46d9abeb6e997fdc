"""psmatch.adapters.kafka.admin against a real broker: the service's topics created once,
with their settings."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, ConfigResource

from psmatch.adapters.kafka.admin import ensure_topics
from psmatch.devservers.services import LocalServices
from tests.adapters.kafka.topics import new_topics


def test_ensure_topics_creates_once_with_compaction(services: LocalServices) -> None:
    bootstrap = services.kafka.bootstrap_servers
    topics = new_topics()
    assert sorted(ensure_topics(bootstrap, topics, partitions=2)) == sorted(topics)
    assert ensure_topics(bootstrap, topics, partitions=2) == []
    subs = next(iter(topics))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(timeout=10)
    assert len(md.topics[subs].partitions) == 2
    resource = ConfigResource(ConfigResource.Type.TOPIC, subs)
    config = admin.describe_configs([resource])[resource].result()
    assert config["cleanup.policy"].value == "compact"
