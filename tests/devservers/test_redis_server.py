"""psmatch.devservers.redis_server: a real redis-server started, stopped, killed, restarted,
detached and adopted, with and without a password."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import redis

from psmatch.devservers.process import port_open
from psmatch.devservers.redis_server import RedisServer

pytestmark = pytest.mark.integration


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


def test_redis_stop_start_and_kill_keep_port_and_data(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis").start()
    try:
        port = server.port
        redis.Redis.from_url(server.url).set("k", "v")
        server.kill()  # SIGKILL: the AOF written so far survives
        assert not server.running and not port_open("127.0.0.1", port)
        server.start()
        assert server.port == port
        assert redis.Redis.from_url(server.url).get("k") == b"v"
        server.stop()
        assert not port_open("127.0.0.1", port)
        server.start()
        assert redis.Redis.from_url(server.url).get("k") == b"v"
    finally:
        server.stop()


def test_detached_redis_outlives_its_starter_and_is_adopted(tmp_path: Path) -> None:
    """A detached server is recorded in server.json, found again, and stopped by pid."""
    code = (
        "import sys; from pathlib import Path; "
        "from psmatch.devservers.redis_server import RedisServer; "
        "s = RedisServer(Path(sys.argv[1]), detached=True).start(); print(s.port, flush=True)"
    )
    starter = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "redis")],
        capture_output=True, text=True, check=True, cwd=Path(__file__).parents[2],
    )  # fmt: skip
    port = int(starter.stdout.split()[-1])
    adopted = RedisServer.adopt(tmp_path / "redis")
    assert adopted is not None and adopted.port == port and adopted.running
    try:
        assert redis.Redis(port=port).ping()  # the starter exited; the server did not
    finally:
        adopted.stop()
    assert not port_open("127.0.0.1", port)
    assert RedisServer.adopt(tmp_path / "redis") is None


def test_redis_with_a_password_refuses_other_clients(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", password='se"cr\\et').start()
    try:
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=server.port).ping()
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=server.port, password="wrong").ping()
        assert redis.Redis(port=server.port, password='se"cr\\et').ping()
        assert 'cr\\et' not in repr(server)
    finally:
        server.stop()
