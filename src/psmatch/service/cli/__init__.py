"""The ``psmatch`` command: run the service and talk to it through Kafka.

Subcommands: ``run`` (the streaming job, optionally starting local Kafka and Redis,
:mod:`~psmatch.service.cli.run`), ``servers`` (those local servers,
:mod:`~psmatch.service.cli.servers`), ``subscribe``, ``unsubscribe``, ``publish`` and
``tail`` (records in and out, :mod:`~psmatch.service.cli.topics`), ``rebuild-state`` and
``explain`` (the subscription state in Redis, :mod:`~psmatch.service.cli.state`), ``acls``
(the Kafka ACLs the service needs, :mod:`~psmatch.service.cli.acls`), ``tenants`` (a
tenant's topics, ACLs and user, :mod:`~psmatch.service.cli.tenants`), ``spark-conf`` (a
standalone Spark cluster's secret, :mod:`~psmatch.service.cli.spark_conf`); the parser and the
settings flags are :mod:`~psmatch.service.cli.parser`'s. Every setting of
:class:`psmatch.service.config.ServiceConfig` is a flag on each subcommand and an
environment variable ``PSMATCH_<NAME>``.

Exit codes: 0 success, 1 a service error (Kafka, Redis, Spark, or the ``service`` extra
not installed), 2 bad usage or invalid input. This module imports nothing of the
``service`` extra, so that without it every command says so in one line.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

MISSING_EXTRA = ("psmatch: the service needs the 'service' extra (no module named {module!r}): "
                 "pip install 'psmatch[service]'")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """The ``psmatch`` console script (and ``python -m psmatch``)."""
    try:
        return _main(argv)
    except ModuleNotFoundError as exc:
        # the library needs numpy alone: any other missing module is the service's
        package = (exc.name or "psmatch").partition(".")[0]
        if package == "psmatch":
            raise
        print(MISSING_EXTRA.format(module=package), file=sys.stderr)
        return 1


def _main(argv: Sequence[str] | None) -> int:
    from psmatch.errors import PsmatchError
    from psmatch.service.cli.parser import build_parser, config_of, setup_logging
    from psmatch.service.errors import ConfigError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        cfg = config_of(args)
    except ConfigError as exc:
        parser.error(str(exc))
    setup_logging(cfg.log_level)
    try:
        return int(args.func(args, cfg))
    except ConfigError as exc:
        print(f"psmatch {args.command}: {exc}", file=sys.stderr)
        return 2
    except PsmatchError as exc:
        print(f"psmatch {args.command}: {exc}", file=sys.stderr)
        return 1
