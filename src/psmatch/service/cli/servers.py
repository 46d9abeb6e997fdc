"""``psmatch servers`` and ``psmatch run --start-local``: the local Kafka and Redis.

Owns which development servers the command starts, stops or shows (a detached
:class:`psmatch.devservers.kafka_broker.KafkaBroker` and
:class:`psmatch.devservers.redis_server.RedisServer` in ``--data-dir``, on the
configured loopback ports), and when: only where nothing answers already. The only
importer of :mod:`psmatch.devservers` in the service, lazily, so that no other command
loads it.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from psmatch.service.config import ServiceConfig
from psmatch.service.errors import ConfigError

log = logging.getLogger("psmatch")

SERVER_KINDS = ("redis", "kafka")


def _host_port(address: str, default_port: int) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return (host or address, int(port)) if port.isdigit() else (address, default_port)


def _local_server(kind: str, cfg: ServiceConfig, data_dir: Path) -> Any:
    """The detached server of ``kind`` in ``data_dir/<kind>``: the running one recorded
    there, else a new (not yet started) one on the configured port."""
    from urllib.parse import urlsplit

    from psmatch.devservers.kafka_broker import KafkaBroker
    from psmatch.devservers.redis_server import RedisServer

    if kind == "redis":
        password = cfg.redis_password or urlsplit(cfg.redis_url).password or None
        port = urlsplit(cfg.redis_url).port or 6379
        return RedisServer.adopt(data_dir / "redis", password=password) or RedisServer(
            data_dir / "redis", port=port, detached=True, password=password
        )
    port = _host_port(cfg.bootstrap_servers.split(",")[0], 9092)[1]
    return KafkaBroker.adopt(data_dir / "kafka") or KafkaBroker(
        data_dir / "kafka", port=port, detached=True
    )


def start_local_servers(cfg: ServiceConfig, data_dir: Path, kinds: Sequence[str]) -> list[str]:
    """Start, detached, the servers of ``kinds`` that nothing answers for on the configured
    ports; returns the kinds that run from ``data_dir`` (started now or earlier).

    A detached server outlives the job (a crash or ``kill -9`` of the job leaves Kafka
    and Redis up for the producers); ``psmatch servers stop`` or Ctrl-C of ``psmatch run
    --start-local`` stops it.
    """
    from psmatch.adapters.kafka.admin import wait_for_kafka
    from psmatch.devservers.process import port_open

    ours: list[str] = []
    for kind in kinds:
        server = _local_server(kind, cfg, data_dir)
        where = cfg.redis_display_url if kind == "redis" else cfg.bootstrap_servers
        if server.running:
            log.info("using the %s started earlier from %s (pid %d, port %d)", server.NAME,
                     server.data_dir, server.pid, server.port)  # fmt: skip
            ours.append(kind)
        elif port_open("127.0.0.1", server.port):
            if kind == "kafka" and not wait_for_kafka(
                cfg.bootstrap_servers, security=cfg.kafka_security
            ):
                raise ConfigError(f"something listens on {where} but does not answer as Kafka")
            log.info("using the %s already running at %s (not started by psmatch: left alone)",
                     server.NAME, where)  # fmt: skip
        else:
            log.info("nothing answers at %s: starting %s (data in %s); it keeps running if "
                     "the job crashes", where, server.NAME, server.data_dir)  # fmt: skip
            server.start()
            ours.append(kind)
    return ours


def stop_local_servers(cfg: ServiceConfig, data_dir: Path, kinds: Sequence[str]) -> None:
    """Stop the detached servers of ``kinds`` recorded in ``data_dir`` (Kafka first)."""
    for kind in sorted(kinds, key=SERVER_KINDS.index, reverse=True):
        server = _local_server(kind, cfg, data_dir)
        if server.running:
            server.stop()


def cmd_servers(args: argparse.Namespace, cfg: ServiceConfig) -> int:
    """Start, stop or show the local servers of ``--data-dir`` (what --start-local starts)."""
    data_dir = Path(args.data_dir)
    kinds = args.servers or list(SERVER_KINDS)
    unknown = sorted(set(kinds) - set(SERVER_KINDS))
    if unknown:
        raise ConfigError(f"unknown server {unknown[0]!r}: choose redis and/or kafka")
    if args.action == "start":
        start_local_servers(cfg, data_dir, kinds)
    elif args.action == "stop":
        stop_local_servers(cfg, data_dir, kinds)
    for kind in kinds:
        server = _local_server(kind, cfg, data_dir)
        state = (f"running, pid {server.pid}, port {server.port}" if server.running
                 else "not running")  # fmt: skip
        print(f"{kind}: {state} (data in {server.data_dir})")
    return 0
