"""One development Kafka broker and one Redis per process, shared by the test suites and
the benchmarks: :func:`shared_services`; and one secured pair, :func:`secured_services`.

Owns the pairs' lives: started once in a temporary folder, the plain pair reference
counted so that several pytest conftests share the same instances within a session,
stopped at the last release (or at exit) and its folder removed. The secured pair (TLS
everywhere, SCRAM and client certificates, ACLs) lives until the process exits.
"""

from __future__ import annotations

import atexit
import secrets
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from psmatch.devservers.kafka_broker import KafkaBroker
from psmatch.devservers.redis_server import RedisServer
from psmatch.devservers.tls import DevCA


@dataclass
class LocalServices:
    """A Kafka broker and a Redis server started together in ``base_dir``."""

    kafka: KafkaBroker
    redis: RedisServer
    base_dir: Path


def _start_pair(kafka: KafkaBroker, redis_server: RedisServer) -> None:
    """Start Redis, then Kafka; should either fail, stop both and re-raise."""
    try:
        redis_server.start()
        kafka.start()
    except BaseException:
        redis_server.stop()
        kafka.stop()
        raise


def _stop_pair(kafka: KafkaBroker, redis_server: RedisServer, base_dir: Path) -> None:
    """Stop both servers and remove their folder."""
    kafka.stop()
    redis_server.stop()
    shutil.rmtree(base_dir, ignore_errors=True)


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
            _start_pair(kafka, redis_server)
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
        _stop_pair(services.kafka, services.redis, services.base_dir)


SERVICE_USER = "psmatch"
"""The secured pair's service principal: a Kafka super user (``User:psmatch`` over
SASL, ``User:CN=psmatch`` with its client certificate) and a Redis ACL user."""


@dataclass
class SecuredServices:
    """A secure Kafka broker (SASL_SSL with SCRAM-SHA-512 on ``kafka.port``, mTLS on
    ``kafka.mtls_port``, ACLs denying what none allows) and a TLS-only Redis whose only
    user is :data:`SERVICE_USER` (client certificates optional), both with certificates
    from ``ca``. ``kafka_password`` and ``redis_password`` are :data:`SERVICE_USER`'s,
    made at random."""

    kafka: KafkaBroker
    redis: RedisServer
    ca: DevCA
    base_dir: Path
    kafka_password: str = field(repr=False)
    redis_password: str = field(repr=False)


_secured: SecuredServices | None = None


def secured_services() -> SecuredServices:
    """Start (once per process) the secured pair in a temporary folder; stopped at exit."""
    global _secured
    with _shared_lock:
        if _secured is None:
            base = Path(tempfile.mkdtemp(prefix="psmatch-secured-"))
            ca = DevCA(base / "tls")
            kafka_pw, redis_pw = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
            kafka = KafkaBroker(base / "kafka", ca=ca,
                                scram_users={SERVICE_USER: kafka_pw},
                                super_users=(SERVICE_USER, f"CN={SERVICE_USER}"))  # fmt: skip
            redis_server = RedisServer(base / "redis", ca=ca, users={SERVICE_USER: redis_pw},
                                       tls_auth_clients="optional")  # fmt: skip
            _start_pair(kafka, redis_server)
            _secured = SecuredServices(kafka, redis_server, ca, base, kafka_pw, redis_pw)
            atexit.register(_stop_secured)
        return _secured


def _stop_secured() -> None:
    global _secured
    if _secured is not None:
        services, _secured = _secured, None
        _stop_pair(services.kafka, services.redis, services.base_dir)
