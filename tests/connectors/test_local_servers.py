"""Starting and stopping the project's own Kafka and Redis processes."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from connectors.local import KafkaBroker, LocalServerError, RedisServer, free_port, port_open

pytestmark = pytest.mark.integration


def test_free_port_is_free() -> None:
    port = free_port()
    assert not port_open("127.0.0.1", port)


def test_redis_starts_with_aof_and_stops(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis").start()
    try:
        client = redis.Redis.from_url(server.url)
        client.set("k", "v")
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        server.restart()
        assert redis.Redis.from_url(server.url).get("k") == b"v"
    finally:
        server.stop()
    assert not server.running
    assert not port_open("127.0.0.1", server.port)


def test_kafka_without_jars_says_what_to_run(tmp_path: Path) -> None:
    broker = KafkaBroker(tmp_path / "kafka", libs_dir=tmp_path / "nothing")
    with pytest.raises(LocalServerError, match="fetch-jars"):
        broker.start()
