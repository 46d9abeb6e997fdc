"""psmatch.devservers.process: free loopback ports (the life of a server process is
exercised through the servers, tests/devservers/test_redis_server.py)."""

from __future__ import annotations

from psmatch.devservers.process import free_port, port_open


def test_free_port_is_free() -> None:
    port = free_port()
    assert not port_open("127.0.0.1", port)
