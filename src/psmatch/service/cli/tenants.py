"""``psmatch tenants add|remove|list``: a tenant's topics, ACLs and SCRAM user, made and
removed through the broker's admin API (:mod:`psmatch.service.tenants`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from psmatch.service.config import ServiceConfig
from psmatch.service.errors import ConfigError


def _password(path: str | None) -> str | None:
    """The password in the file ``path`` (its first line), never from a command line."""
    if path is None:
        return None
    try:
        password = Path(path).read_text(encoding="utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read --password-file {path}: {type(exc).__name__}") from None
    if not password:
        raise ConfigError(f"--password-file {path} is empty")
    return password


def cmd_tenants(args: argparse.Namespace, cfg: ServiceConfig) -> int:
    from psmatch.service.records.tenants import check_tenant
    from psmatch.service.tenants import add_tenant, list_tenants, remove_tenant

    if cfg.tenancy != "topics":
        raise ConfigError("tenants have topics of their own only with tenancy topics "
                          "(--tenancy topics or PSMATCH_TENANCY=topics)")  # fmt: skip
    if args.action == "list":
        for tenant in list_tenants(cfg):
            print(f"{tenant.name}: WRITE on its subscriptions by "
                  f"{', '.join(tenant.writers) or 'nobody'}")  # fmt: skip
        return 0
    if args.name is None:
        raise ConfigError(f"tenants {args.action} needs the tenant's NAME")
    try:
        name = check_tenant(args.name)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    principal = args.principal or f"User:{name}"
    if not principal.startswith("User:"):
        raise ConfigError(f"--principal must be User:<name>, got {principal!r}")
    if args.action == "add":
        done = add_tenant(cfg, name, principal, _password(args.password_file))
    else:
        done = remove_tenant(cfg, name, principal, user=args.user,
                             delete_topics=args.delete_topics)  # fmt: skip
    for line in done:
        print(line)
    return 0
