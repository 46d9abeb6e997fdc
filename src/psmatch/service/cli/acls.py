"""``psmatch acls``: the Kafka ACLs of the service's principal, printed, or created
through the broker's admin API (:mod:`psmatch.service.acls`)."""

from __future__ import annotations

import argparse

from psmatch.service.config import ServiceConfig
from psmatch.service.errors import ConfigError


def cmd_acls(args: argparse.Namespace, cfg: ServiceConfig) -> int:
    from psmatch.adapters.kafka.admin import create_acls
    from psmatch.service.acls import reader_acls, service_acls

    if not args.principal.startswith("User:"):
        raise ConfigError(f"--principal must be User:<name>, got {args.principal!r}")
    if args.reader:
        acls = reader_acls(cfg.notifications_topic, args.principal)
    else:
        acls = service_acls(cfg, args.principal)
    for acl in acls:
        print(acl)
    if args.apply:
        create_acls(cfg.bootstrap_servers, acls, security=cfg.kafka_security)
        print(f"created {len(acls)} ACLs on {cfg.bootstrap_servers}")
    return 0
