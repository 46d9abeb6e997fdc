"""Fixtures shared by the integration tests: one real Kafka broker and Redis per session,
a state store under a Redis key prefix of its own per test, and per-test service
configurations with topic names, Redis prefix, checkpoint and metrics port of their own,
so tests never see each other's records.

Every test that uses a fixture starting a server (directly or through another fixture)
is marked ``integration`` here, so ``pytest -m "not integration"`` (``make test-fast``)
runs the unit tests alone. Tests that start servers by other means carry the marker
themselves.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from psmatch.adapters.state import StateStore
from psmatch.devservers.process import free_port
from psmatch.devservers.services import (
    LocalServices,
    release_shared_services,
    shared_services,
)
from psmatch.service.config import ServiceConfig

SERVER_FIXTURES = frozenset({
    ("tests.conftest", "services"),
    ("tests.service.conftest", "spark"),
    ("tests.deploy.conftest", "start_job"),
    ("tests.deploy.conftest", "start_prometheus"),
})  # fmt: skip
"""Fixtures (module, name) that start Kafka, Redis, Spark, ``psmatch run`` or Prometheus.
By definition, not name: ``tests/deploy/test_consistency.py`` has a ``services`` of its
own (the docker-compose services)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        info = getattr(item, "_fixtureinfo", None)  # the closure of fixtures the test uses
        if info is None:
            continue
        used = {
            (defs[-1].func.__module__, name)
            for name, defs in info.name2fixturedefs.items()
            if defs
        }
        if used & SERVER_FIXTURES:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def services() -> Iterator[LocalServices]:
    """Kafka (KRaft) and redis-server on free loopback ports, stopped after the session."""
    yield shared_services()
    release_shared_services()


@pytest.fixture
def store(services: LocalServices) -> Iterator[StateStore]:
    """A state store under a key prefix of its own, cleared after the test."""
    s = StateStore.from_url(services.redis.url, f"test-{uuid.uuid4().hex[:10]}:", retention=50)
    yield s
    s.clear()


@pytest.fixture
def make_config(services: LocalServices, tmp_path: Path) -> Callable[..., ServiceConfig]:
    """A config with fresh topics, Redis prefix, checkpoint and metrics port; keyword
    arguments override."""
    tag = uuid.uuid4().hex[:10]

    def make(**overrides: Any) -> ServiceConfig:
        values: dict[str, Any] = {
            "bootstrap_servers": services.kafka.bootstrap_servers,
            "redis_url": services.redis.url,
            "redis_prefix": f"t{tag}:",
            "subscriptions_topic": f"subs-{tag}",
            "events_topic": f"events-{tag}",
            "notifications_topic": f"notif-{tag}",
            "rejected_topic": f"rejected-{tag}",
            "checkpoint_location": str(tmp_path / "checkpoint"),
            "spark_master": "local[2]",
            "trigger_seconds": 0.5,
            "metrics_port": free_port(),
        }
        values.update(overrides)
        return ServiceConfig(**values)

    return make
