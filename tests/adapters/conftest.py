"""Fixtures for the connectors tests: one real Kafka broker and Redis per test session."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from psmatch.adapters.state import StateStore
from psmatch.devservers.services import LocalServices


@pytest.fixture
def store(services: LocalServices) -> Iterator[StateStore]:
    """A state store under a key prefix of its own."""
    s = StateStore.from_url(services.redis.url, f"test-{uuid.uuid4().hex[:10]}:", retention=50)
    yield s
    s.clear()
