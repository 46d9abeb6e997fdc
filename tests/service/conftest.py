"""Fixtures for the streaming tests: real Kafka, Redis and Spark, shared per session.

Each test gets its own topic names, Redis key prefix and checkpoint folder from
``make_config`` (in ``tests/conftest.py``), so tests never see each other's records.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from psmatch.service.config import ServiceConfig


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from psmatch.service.job import build_spark

    session = build_spark(
        ServiceConfig(spark_master="local[2]"),
        app_name="psmatch-tests",
        **{
            "spark.ui.enabled": "false",
            "spark.driver.memory": "2g",
            "spark.local.dir": str(tmp_path_factory.mktemp("spark-local")),
        },
    )
    yield session
    session.stop()


