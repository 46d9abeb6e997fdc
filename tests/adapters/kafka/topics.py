"""Fresh topic names for each Kafka test, so tests never see each other's records."""

from __future__ import annotations

import uuid

from psmatch.adapters.kafka.admin import service_topics


def new_topics() -> dict[str, dict[str, str]]:
    """The service's four topics under new names, with their settings."""
    tag = uuid.uuid4().hex[:8]
    return service_topics(f"s-{tag}", f"e-{tag}", f"n-{tag}", f"r-{tag}")
