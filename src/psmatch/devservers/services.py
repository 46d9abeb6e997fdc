"""One development Kafka broker and one Redis per process, shared by the test suites and
the benchmarks: :func:`shared_services`.

Owns the pair's life: started once in a temporary folder, reference counted so that
several pytest conftests share the same instances within a session, stopped at the last
release (or at exit) and its folder removed.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from psmatch.devservers.kafka_broker import KafkaBroker
from psmatch.devservers.redis_server import RedisServer


@dataclass
class LocalServices:
    """A Kafka broker and a Redis server started together in ``base_dir``."""

    kafka: KafkaBroker
    redis: RedisServer
    base_dir: Path


_shared: LocalServices | None = None
_shared_refs = 0
_shared_lock = threading.Lock()


def shared_services() -> LocalServices:
    """Start (once per process) a Kafka broker and a Redis server in a temporary folder.

    Reference counted: each caller must call :func:`release_shared_services` once; the
    last release stops both servers. An ``atexit`` hook stops them in any case.
    """
    global _shared, _shared_refs
    with _shared_lock:
        if _shared is None:
            base = Path(tempfile.mkdtemp(prefix="psmatch-services-"))
            kafka = KafkaBroker(base / "kafka")
            redis_server = RedisServer(base / "redis")
            try:
                redis_server.start()
                kafka.start()
            except BaseException:
                redis_server.stop()
                kafka.stop()
                raise
            _shared = LocalServices(kafka, redis_server, base)
            atexit.register(_stop_shared)
        _shared_refs += 1
        return _shared


def release_shared_services() -> None:
    global _shared_refs
    with _shared_lock:
        _shared_refs -= 1
        if _shared_refs <= 0:
            _stop_shared()


def _stop_shared() -> None:
    global _shared
    if _shared is not None:
        services, _shared = _shared, None
        services.kafka.stop()
        services.redis.stop()
        shutil.rmtree(services.base_dir, ignore_errors=True)
