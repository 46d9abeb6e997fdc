"""Redis outages against a real redis-server killed with SIGKILL: waited out, or one error.

Each test has a redis-server of its own (the shared one must stay up for other tests).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from psmatch.adapters.redis_retry import redis_retry_stats
from psmatch.adapters.state import (
    SourceChange,
    StateAuthenticationError,
    StateStore,
    StateUnavailableError,
    redact_url,
)
from psmatch.devservers.redis_server import RedisServer
from psmatch.service.metrics import ServiceMetrics

pytestmark = pytest.mark.integration

PASSWORD = "pw-s3cret/with:odd@chars"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    s = RedisServer(tmp_path / "redis").start()
    yield s
    s.stop()


def put(offset: int, sub_id: str) -> SourceChange:
    record = json.dumps({"expr": "a = 1", "subscriber": sub_id, "extra": {}})
    return SourceChange("subs:0", offset, sub_id, record)


def test_a_killed_redis_is_waited_out_and_nothing_is_lost_or_doubled(
    server: RedisServer,
) -> None:
    """Batches applied while redis-server is killed -9 and started again 2 s later."""
    store = StateStore.from_url(server.url, "out:", retry_seconds=60)
    reader = StateStore.from_url(server.url, "out:", retry_seconds=60)
    before = redis_retry_stats()
    batches, per_batch = 150, 4
    errors: list[BaseException] = []
    versions: list[int] = []

    def stream() -> None:
        try:
            for b in range(batches):
                first = b * per_batch
                changes = [put(first + i, f"s{first + i}") for i in range(per_batch)]
                versions.append(store.apply(changes).version)
                # a worker catching up, as in each task
                reader.changes(max(0, versions[-1] - per_batch), versions[-1])
                time.sleep(0.02)
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=stream)
    thread.start()
    while len(versions) < 20:
        time.sleep(0.01)
    server.kill()
    time.sleep(2.0)
    during = redis_retry_stats()
    server.start()
    thread.join(timeout=120)
    assert not thread.is_alive() and errors == []
    total = batches * per_batch
    assert versions == [per_batch * (b + 1) for b in range(batches)]
    assert store.version() == total and store.count() == total
    assert len(store.changes(0, total)) == total
    after = redis_retry_stats()
    assert during.waiting_seconds > 1.0
    assert after.retries > before.retries and after.outages > before.outages
    assert after.waiting_seconds == 0.0
    # what the driver's metrics endpoint exports
    registry = ServiceMetrics().registry
    assert registry.get_sample_value("psmatch_redis_retries_total") == after.retries
    assert registry.get_sample_value("psmatch_redis_unavailable_seconds") == 0.0


def test_an_outage_past_the_deadline_is_one_clear_error(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    store = StateStore.from_url(server.url, "dead:", retry_seconds=1.5)
    store.apply([put(0, "s0")])
    server.kill()
    before = redis_retry_stats()
    gave_up = r"stayed unreachable for 1\.\d s after \d+ retries"
    with pytest.raises(StateUnavailableError, match=gave_up) as info:
        store.version()
    assert redis_retry_stats().retries > before.retries
    assert f"127.0.0.1:{server.port}" in str(info.value)
    retries = [r for r in caplog.records if "retry" in r.getMessage()]
    assert retries and all("is not reachable" in r.getMessage() for r in retries)
    # retry_seconds=0, and ping() at start-up: no waiting at all
    with pytest.raises(StateUnavailableError, match="is not reachable"):
        StateStore.from_url(server.url, "dead:", retry_seconds=0).count()
    before = redis_retry_stats()
    with pytest.raises(StateUnavailableError, match="is not reachable"):
        StateStore.from_url(server.url, "dead:").ping()
    assert redis_retry_stats().retries == before.retries


def test_password_is_used_and_never_shown(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server = RedisServer(tmp_path / "redis", password=PASSWORD).start()
    try:
        quoted = PASSWORD.replace("/", "%2F").replace(":", "%3A").replace("@", "%40")
        good = f"redis://:{quoted}@127.0.0.1:{server.port}/0"
        store = StateStore.from_url(good, "auth:")
        store.apply([put(0, "s0")])
        assert store.count() == 1
        assert "s3cret" not in redact_url(good) and ":***@127.0.0.1" in redact_url(good)
        assert "s3cret" not in store.where
        for bad in (f"redis://:wrong@127.0.0.1:{server.port}/0", server.url):
            before = redis_retry_stats()
            with pytest.raises(StateAuthenticationError, match="refused the credentials"):
                StateStore.from_url(bad, "auth:").count()
            assert redis_retry_stats().retries == before.retries  # not retried
        server.kill()
        with pytest.raises(StateUnavailableError) as info:
            StateStore.from_url(good, "auth:", retry_seconds=0.5).count()
        assert "s3cret" not in str(info.value)
        assert all("s3cret" not in r.getMessage() for r in caplog.records)
    finally:
        server.stop()
