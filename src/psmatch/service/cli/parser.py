"""The ``psmatch`` command line: its parser, the settings flags, and the logging setup.

Owns every subcommand's arguments and help (:func:`build_parser`), the flags made of
:class:`psmatch.service.config.ServiceConfig`'s fields (all but the secrets, which a
command line would show to every user of the machine), the config built from them and
the environment (:func:`config_of`), and how the command logs (:func:`setup_logging`).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging

from psmatch.service.cli.acls import cmd_acls
from psmatch.service.cli.run import cmd_run
from psmatch.service.cli.servers import cmd_servers
from psmatch.service.cli.spark_conf import cmd_spark_conf
from psmatch.service.cli.state import cmd_explain, cmd_rebuild_state
from psmatch.service.cli.tenants import cmd_tenants
from psmatch.service.cli.topics import cmd_publish, cmd_subscribe, cmd_tail, cmd_unsubscribe
from psmatch.service.config import VAR_DIR, ServiceConfig, field_type


def _config_parent() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group(
        "settings (each also read from the environment variable PSMATCH_<NAME>; the "
        "passwords only from PSMATCH_KAFKA_PASSWORD, PSMATCH_REDIS_PASSWORD or a file)"
    )
    defaults = ServiceConfig()
    for f in dataclasses.fields(ServiceConfig):
        if f.metadata.get("secret"):
            continue  # a command line is visible to every user of the machine
        flag = "--" + f.name.replace("_", "-")
        group.add_argument(
            flag,
            dest=f"cfg_{f.name}",
            type=field_type(f),
            default=None,
            metavar=f.name.upper(),
            help=f"{f.metadata.get('help', '')} (default: {getattr(defaults, f.name)})",
        )
    return parent


def config_of(args: argparse.Namespace) -> ServiceConfig:
    """The defaults, then the ``PSMATCH_*`` environment, then the flags given."""
    overrides = {k.removeprefix("cfg_"): v for k, v in vars(args).items() if k.startswith("cfg_")}
    return ServiceConfig.load(overrides=overrides)


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    # Unless debugging, failures reach the user once, in psmatch's own words: librdkafka
    # logs every failed connection attempt (its errors are the client's exception, see
    # psmatch.adapters.kafka.client), and py4j logs the traceback of a failed
    # foreachBatch (psmatch run reports the failed query in one line, see
    # psmatch.service.supervisor).
    quiet = logging.DEBUG if level.upper() == "DEBUG" else logging.CRITICAL
    for noisy in ("py4j", "psmatch.kafka.client"):
        logging.getLogger(noisy).setLevel(quiet)


def build_parser() -> argparse.ArgumentParser:
    parent = _config_parent()
    parser = argparse.ArgumentParser(
        prog="psmatch",
        description="Content-based publish/subscribe over Kafka: subscriptions are Boolean "
        "expressions, events are JSON objects, the streaming job publishes one "
        "notification per (subscription, event) match.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "run", parents=[parent], help="run the streaming job in the foreground",
        description="Run the Spark Structured Streaming job: read the subscriptions and "
        "events topics, keep subscription state in Redis, write notifications and "
        "rejected records. Creates missing topics. Ctrl-C stops it cleanly; the "
        "checkpoint lets the next run continue where this one stopped.",
    )  # fmt: skip
    p.add_argument(
        "--start-local", action="store_true",
        help="start a local Kafka broker and redis-server on the configured loopback ports "
        "when nothing answers there; they outlive a crash of the job, Ctrl-C stops them",
    )  # fmt: skip
    data_dir_help = "where the local servers keep their data and pids (default: %(default)s)"
    p.add_argument("--data-dir", default=str(VAR_DIR), help=data_dir_help)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "servers", parents=[parent], help="start, stop or show the local Kafka and Redis",
        description="The local servers that run --start-local starts, on the configured "
        "loopback ports with their data in --data-dir. Restart one alone: psmatch servers "
        "stop redis && psmatch servers start redis. A running job waits out the gap.",
    )  # fmt: skip
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("servers", nargs="*", metavar="SERVER",
                   help="redis and/or kafka (default: both)")  # fmt: skip
    p.add_argument("--data-dir", default=str(VAR_DIR), help=data_dir_help)
    p.set_defaults(func=cmd_servers)

    p = sub.add_parser(
        "subscribe", parents=[parent], help="add or replace a subscription",
        description="Add the subscription ID with the Boolean expression EXPR (replacing "
        "any subscription with that id). Example: psmatch subscribe cheap-books "
        "\"price < 20 and category = 'books'\" --subscriber alice@example.com",
    )  # fmt: skip
    p.add_argument("id", help="subscription id (the Kafka key)")
    p.add_argument("expr", help="subscription expression")
    p.add_argument("--subscriber", help="who to notify (default: the id)")
    p.add_argument("--extra", help="JSON object of extra fields echoed in notifications")
    p.set_defaults(func=cmd_subscribe)

    p = sub.add_parser(
        "unsubscribe", parents=[parent], help="delete subscriptions",
        description="Delete subscriptions by id (writes a tombstone to the subscriptions topic).",
    )  # fmt: skip
    p.add_argument("ids", nargs="+", metavar="ID")
    p.set_defaults(func=cmd_unsubscribe)

    p = sub.add_parser(
        "publish", parents=[parent], help="publish JSON events",
        description="Publish events (JSON objects) given as arguments, in a file or on "
        "stdin, one per line. Example: psmatch publish '{\"price\": 12, \"category\": "
        "\"books\"}'",
    )  # fmt: skip
    p.add_argument("events", nargs="*", metavar="EVENT", help="JSON events")
    p.add_argument("--file", "-f", help="file of JSON events, one per line")
    p.add_argument(
        "--id-attribute", help="attribute whose value becomes the event id (the Kafka key)"
    )
    p.set_defaults(func=cmd_publish)

    p = sub.add_parser(
        "tail", parents=[parent], help="print notifications as they arrive",
        description="Print notifications (or, with --rejected, rejected records) as JSON "
        "lines as they arrive. Ctrl-C stops.",
    )  # fmt: skip
    p.add_argument("--from-beginning", action="store_true", help="start at the oldest record")
    p.add_argument("--rejected", action="store_true", help="read the rejected topic instead")
    p.add_argument("--max", type=int, default=0, help="stop after this many records")
    p.add_argument(
        "--idle-timeout", type=float, default=None,
        help="stop after this many seconds without a record",
    )  # fmt: skip
    p.set_defaults(func=cmd_tail)

    p = sub.add_parser(
        "rebuild-state", parents=[parent], help="rebuild Redis from the subscriptions topic",
        description="Read the compacted subscriptions topic from the start and replace the "
        "subscription state in Redis with its latest value per id. Running workers "
        "notice and reload. Use after losing Redis data.",
    )  # fmt: skip
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to read the topic")
    p.set_defaults(func=cmd_rebuild_state)

    p = sub.add_parser(
        "explain", parents=[parent], help="why an event does or does not match a subscription",
        description="An operator's tool: it reads Redis directly, so it shows any "
        "subscription to whoever holds the Redis credentials. "
        "Show the stored subscription ID (read from Redis) with each comparison "
        "marked true, false or unknown on the event EVENT and why (missing attribute, value "
        "of another kind, or the value compared), and whether it matches. Example: psmatch "
        "explain cheap-books '{\"price\": 25, \"category\": \"books\"}'",
    )  # fmt: skip
    p.add_argument("id", help="subscription id")
    p.add_argument("event", metavar="EVENT", help="the event, a JSON object")
    p.add_argument(
        "--from-topic", action="store_true",
        help="read the subscription from the subscriptions topic with your own Kafka "
        "credentials (READ on that topic) instead of from Redis: for a subscriber, who "
        "sees no other topic's subscriptions; reads the whole topic",
    )  # fmt: skip
    p.add_argument("--timeout", type=float, default=120.0,
                   help="with --from-topic: seconds to read the topic")  # fmt: skip
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser(
        "acls", parents=[parent], help="the Kafka ACLs the service's principal needs",
        description="Print the ACLs the streaming job's PRINCIPAL needs on a broker that "
        "denies what no ACL allows (READ on the subscriptions and events topics, WRITE on "
        "the notifications and rejected topics, CREATE on the four; with --tenancy topics, "
        "the tenants' topics by prefix; with --delivery exactly-once, WRITE on the query's "
        "transactional ids and READ on its marker groups, prefixed with a digest of "
        "--checkpoint-location: give the job's), or, with --reader, what psmatch tail "
        "needs; with --apply, create them (the connecting principal needs ALTER on the "
        "cluster).",
    )  # fmt: skip
    p.add_argument("--principal", required=True, help="User:<name> (or User:CN=<name>)")
    p.add_argument("--reader", action="store_true",
                   help="the ACLs of a reader of the notifications topic instead")  # fmt: skip
    p.add_argument("--apply", action="store_true", help="create them through the admin API")
    p.set_defaults(func=cmd_acls)

    p = sub.add_parser(
        "tenants", parents=[parent], help="add, remove or list tenants (tenancy topics)",
        description="With tenancy topics, each tenant NAME has its own subscriptions, "
        "notifications and rejected topics (<topic>.NAME). add: create them, the ACLs of "
        "the tenant's principal (WRITE and READ on its subscriptions topic, READ on its "
        "notifications and rejected topics and on the psmatch-reader- groups) and, with "
        "--password-file, its SCRAM-SHA-512 user NAME. remove: delete those ACLs and each "
        "of its subscriptions (tombstones the job applies), with --user its SCRAM user, "
        "with --delete-topics its topics, once the job has applied the tombstones (waiting "
        "up to 120 s). list: "
        "the tenants the broker holds. The connecting principal needs ALTER on the "
        "cluster and CREATE on the topics.",
    )  # fmt: skip
    p.add_argument("action", choices=["add", "remove", "list"])
    p.add_argument("name", nargs="?", metavar="NAME",
                   help="the tenant: 1 to 63 of a-z, 0-9, _ and -, a letter or digit first")
    p.add_argument("--principal",
                   help="the tenant's principal (default: User:NAME; User:CN=... for a client "
                   "certificate)")  # fmt: skip
    p.add_argument("--password-file",
                   help="add: create or reset the SCRAM-SHA-512 user NAME with the password "
                   "in this file")  # fmt: skip
    p.add_argument("--user", action="store_true", help="remove: delete the SCRAM user too")
    p.add_argument("--delete-topics", action="store_true",
                   help="remove: delete the tenant's topics too")  # fmt: skip
    p.set_defaults(func=cmd_tenants)

    p = sub.add_parser(
        "spark-conf", help="make a standalone Spark cluster's secret and RPC settings",
        description="Write a new spark-defaults.conf (mode 0600) that switches on Spark's "
        "RPC authentication (spark.authenticate with a fresh spark.authenticate.secret) and "
        "AES-GCM encryption (spark.network.crypto.*). Copy it to SPARK_CONF_DIR on every "
        "node of a standalone cluster, the driver's included, before starting the master "
        "and workers. Refuses to overwrite a file; never prints the secret.",
    )  # fmt: skip
    p.add_argument("--out", required=True, metavar="FILE",
                   help="the file to create, e.g. conf/spark-defaults.conf")  # fmt: skip
    p.set_defaults(func=cmd_spark_conf)
    return parser
