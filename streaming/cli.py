"""The ``psmatch`` command: run the service and talk to it through Kafka.

Subcommands: ``run`` (the streaming job, optionally starting local Kafka and Redis),
``subscribe``, ``unsubscribe``, ``publish``, ``tail``, ``rebuild-state`` and ``explain``
(why an event does or does not match a stored subscription). Every setting of
:class:`streaming.config.ServiceConfig` is a flag on each subcommand and an environment
variable ``PSMATCH_<NAME>``. Exit codes: 0 success, 1 a service error
(Kafka, Redis, Spark), 2 bad usage or invalid input.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from index.errors import PsmatchError
from streaming.config import REPO_ROOT, ServiceConfig, field_type
from streaming.errors import ConfigError

log = logging.getLogger("psmatch")


# -- config flags ----------------------------------------------------------------------


def _config_parent() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group(
        "settings (each also read from the environment variable PSMATCH_<NAME>)"
    )
    defaults = ServiceConfig()
    for f in dataclasses.fields(ServiceConfig):
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


def _config(args: argparse.Namespace) -> ServiceConfig:
    overrides = {k.removeprefix("cfg_"): v for k, v in vars(args).items() if k.startswith("cfg_")}
    return ServiceConfig.load(overrides=overrides)


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    for noisy in ("py4j", "py4j.clientserver", "py4j.java_gateway"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


# -- run -------------------------------------------------------------------------------


def _host_port(address: str, default_port: int) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return (host or address, int(port)) if port.isdigit() else (address, default_port)


def _start_local_servers(cfg: ServiceConfig, data_dir: Path) -> list[Any]:
    """Start Kafka and Redis on the configured loopback ports when nothing answers there."""
    from urllib.parse import urlparse

    from connectors.kafka import wait_for_kafka
    from connectors.local import KafkaBroker, RedisServer, free_port, port_open

    started: list[Any] = []
    parsed = urlparse(cfg.redis_url)
    redis_port = parsed.port or 6379
    if not port_open(parsed.hostname or "127.0.0.1", redis_port):
        log.info("no Redis on %s: starting redis-server (AOF in %s)", cfg.redis_url,
                 data_dir / "redis")  # fmt: skip
        started.append(RedisServer(data_dir / "redis", port=redis_port).start())
    else:
        log.info("using the Redis already running at %s", cfg.redis_url)
    first = cfg.bootstrap_servers.split(",")[0]
    host, port = _host_port(first, 9092)
    if not port_open(host, port):
        log.info("no Kafka on %s: starting a local KRaft broker (data in %s)", first,
                 data_dir / "kafka")  # fmt: skip
        controller_file = data_dir / "kafka" / "controller.port"
        controller = int(controller_file.read_text()) if controller_file.exists() else 0
        broker = KafkaBroker(
            data_dir / "kafka", port=port, controller_port=controller or free_port()
        )
        try:
            broker.start()
        except BaseException:
            for server in started:
                server.stop()
            raise
        controller_file.write_text(str(broker.controller_port))
        started.append(broker)
    elif not wait_for_kafka(cfg.bootstrap_servers):
        raise ConfigError(f"something listens on {first} but does not answer as Kafka")
    else:
        log.info("using the Kafka already running at %s", cfg.bootstrap_servers)
    return started


def cmd_run(args: argparse.Namespace, cfg: ServiceConfig) -> int:
    from connectors.metrics import ServiceMetrics
    from streaming.job import build_spark, start_query, stop_query

    started: list[Any] = []
    query = None
    metrics = ServiceMetrics(cfg.subscriptions_topic, cfg.events_topic)
    metrics_server = metrics.serve(cfg.metrics_port, cfg.metrics_host) if cfg.metrics_port else None
    stopping = False

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        if args.start_local:
            started = _start_local_servers(cfg, Path(args.data_dir))
        log.info("starting Spark (%s)", cfg.spark_master)
        spark = build_spark(cfg)
        query = start_query(cfg, spark, on_report=metrics.observe_batch, query_name="psmatch")
        log.info("running; Ctrl-C stops")
        while query.isActive:
            query.awaitTermination(1.0)
            progress = query.lastProgress
            metrics.observe_progress(None if progress is None else json.loads(progress.json))
        exc = query.exception()
        if exc is not None:
            log.error("the streaming query failed: %s", exc)
            return 1
        return 0
    except KeyboardInterrupt:
        stopping = True
        log.info("stopping")
        return 0
    finally:
        if query is not None:
            with contextlib.suppress(Exception):
                stop_query(query)
        if stopping or started:
            with contextlib.suppress(Exception):
                from pyspark.sql import SparkSession

                active = SparkSession.getActiveSession()
                if active is not None:
                    active.stop()
        for server in reversed(started):
            server.stop()
        if metrics_server is not None:
            metrics_server.stop()
        if stopping:
            log.info("stopped")


# -- subscribe / unsubscribe / publish -------------------------------------------------


def _argv_bytes(text: str) -> bytes:
    """A command-line argument as the bytes the user typed (undecodable ones included)."""
    return text.encode("utf-8", errors="surrogateescape")


def cmd_subscribe(args: argparse.Namespace, cfg: ServiceConfig) -> int:
    """Encode the subscription record and validate it with the service's own decoder
    (inside the per-record barrier) before sending it."""
    from connectors.kafka import JsonProducer
    from streaming.records import (
        RecordLimits,
        json_type,
        loads_bounded,
        parse_subscription_record,
        record_error,
        subscription_value,
    )

    key = _argv_bytes(args.id)
    try:
        extra = loads_bounded(_argv_bytes(args.extra), "--extra") if args.extra else {}
        if not isinstance(extra, dict):
            print(f"psmatch subscribe: --extra must be a JSON object, not {json_type(extra)}",
                  file=sys.stderr)  # fmt: skip
            return 2
        value = subscription_value(args.expr, args.subscriber or args.id, extra)
        parse_subscription_record(key, value, RecordLimits.from_config(cfg))
    except Exception as exc:  # the per-record barrier: no I/O inside
        print(f"psmatch subscribe: {record_error(exc)}", file=sys.stderr)
        return 2
    with JsonProducer(cfg.bootstrap_servers) as producer:
        producer.send(cfg.subscriptions_topic, value, key=key, raw=True)
    print(f"subscribed {args.id}: {args.expr}")
    return 0


def cmd_unsubscribe(args: argparse.Namespace, cfg: ServiceConfig) -> int:
    from connectors.kafka import JsonProducer

    with JsonProducer(cfg.bootstrap_servers) as producer:
        for sub_id in args.ids:
            producer.send(cfg.subscriptions_topic, None, key=sub_id)
    print(f"unsubscribed {', '.join(args.ids)}")
    return 0


def _event_lines(args: argparse.Namespace, stdin: TextIO) -> Iterator[str]:
    if args.events:
        yield from args.events
    if args.file:
        with open(args.file, encoding="utf-8") as fh:
            yield from fh
    if not args.events and not args.file:
        yield from stdin


def cmd_publish(args: argparse.Namespace, cfg: ServiceConfig) -> int:
    """Send each line that is JSON (decoded with the service's bounded decoder, inside the
    per-record barrier); the service validates the rest and rejects what it refuses."""
    from connectors.kafka import JsonProducer
    from streaming.records import loads_bounded, record_error

    sent = bad = 0
    with JsonProducer(cfg.bootstrap_servers) as producer:
        for n, line in enumerate(_event_lines(args, sys.stdin), 1):
            text = line.strip()
            if not text:
                continue
            data = _argv_bytes(text)
            try:  # the per-record barrier: no I/O inside
                event = loads_bounded(data, f"event {n}")
            except Exception as exc:
                print(f"psmatch publish: {record_error(exc)}; skipped", file=sys.stderr)
                bad += 1
                continue
            key = None
            if args.id_attribute and isinstance(event, dict) and args.id_attribute in event:
                key = str(event[args.id_attribute])
            producer.send(cfg.events_topic, data, key=key, raw=True)
            sent += 1
    print(f"published {sent} events to {cfg.events_topic}" + (f" ({bad} skipped)" if bad else ""))
    return 2 if bad else 0


# -- tail ------------------------------------------------------------------------------


def cmd_tail(args: argparse.Namespace, cfg: ServiceConfig) -> int:
    from connectors.kafka import TopicReader

    topic = cfg.rejected_topic if args.rejected else cfg.notifications_topic
    shown = 0
    with TopicReader(cfg.bootstrap_servers, topic, from_beginning=args.from_beginning) as reader:
        if not args.from_beginning:
            reader.poll(1.0)  # completes the assignment at the end of each partition
        try:
            for record in reader.follow(idle_timeout=args.idle_timeout):
                print(record.value.decode("utf-8", errors="replace") if record.value else "null",
                      flush=True)  # fmt: skip
                shown += 1
                if args.max and shown >= args.max:
                    break
        except KeyboardInterrupt:
            pass
    return 0


# -- rebuild-state ---------------------------------------------------------------------


def cmd_rebuild_state(args: argparse.Namespace, cfg: ServiceConfig) -> int:
    """Replay the subscriptions topic into Redis; each record is decoded inside the
    per-record barrier, so an invalid one is skipped (summarised in one log line), never
    fatal."""
    from collections import Counter

    from connectors.kafka import TopicReader
    from connectors.state import StateStore
    from streaming.records import RecordLimits, parse_subscription_record, record_error
    from streaming.worker import MAX_SAMPLES, reject_sample

    limits = RecordLimits.from_config(cfg)
    latest: dict[str, str | None] = {}
    offsets: dict[str, int] = {}
    codes: Counter[str] = Counter()
    samples: list[str] = []
    with TopicReader(cfg.bootstrap_servers, cfg.subscriptions_topic) as reader:
        records = reader.read_to_end(timeout=args.timeout)
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):
        source = f"{rec.topic}:{rec.partition}"
        offsets[source] = max(offsets.get(source, -1), rec.offset)
        try:  # the per-record barrier: no I/O inside
            change = parse_subscription_record(rec.key, rec.value, limits)
        except Exception as exc:
            error = record_error(exc)
            codes[error.code] += 1
            if len(samples) < MAX_SAMPLES:
                samples.append(reject_sample(error, rec.topic, rec.partition, rec.offset))
            continue
        latest[change.sub_id] = change.stored
    rejected = sum(codes.values())
    by_code = ", ".join(f"{code} {n}" for code, n in sorted(codes.items()))
    if rejected:
        log.warning("skipped %d invalid subscription records (%s); e.g. %s", rejected, by_code,
                    "; ".join(samples))  # fmt: skip
    live = {k: v for k, v in latest.items() if v is not None}
    store = StateStore.from_url(cfg.redis_url, cfg.redis_prefix, cfg.change_log_retention)
    version = store.rebuild(live, offsets)
    print(
        f"rebuilt the subscription state (Redis key prefix {cfg.redis_prefix!r}) from "
        f"{len(records)} records of {cfg.subscriptions_topic}: {len(live)} subscriptions, "
        f"{rejected} invalid records skipped" + (f" ({by_code})" if rejected else "")
        + f", version {version}"
    )
    return 0


# -- explain ---------------------------------------------------------------------------


def cmd_explain(args: argparse.Namespace, cfg: ServiceConfig) -> int:
    from connectors.state import StateStore
    from index import EventError, explain

    try:
        event = json.loads(args.event)
    except ValueError as exc:
        print(f"psmatch explain: the event is not JSON: {exc}", file=sys.stderr)
        return 2
    store = StateStore.from_url(cfg.redis_url, cfg.redis_prefix, cfg.change_log_retention)
    record = store.get(args.id)
    if record is None:
        print(f"psmatch explain: no subscription {args.id!r} in {cfg.redis_url} "
              f"(prefix {cfg.redis_prefix}); the job stores a subscription once it has read it",
              file=sys.stderr)  # fmt: skip
        return 2
    expr = json.loads(record)["expr"]
    try:
        explanation = explain(expr, event)
    except EventError as exc:
        print(f"psmatch explain: invalid event: {exc}", file=sys.stderr)
        return 2
    print(f"subscription {args.id}: {expr}")
    print(explanation)
    return 0


# -- parser ----------------------------------------------------------------------------


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
        "when nothing answers there (and stop them on exit)",
    )  # fmt: skip
    p.add_argument(
        "--data-dir", default=str(REPO_ROOT / "var"),
        help="where --start-local keeps Kafka's log and Redis's AOF (default: %(default)s)",
    )  # fmt: skip
    p.set_defaults(func=cmd_run)

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
        description="Show the stored subscription ID (read from Redis) with each comparison "
        "marked true, false or unknown on the event EVENT and why (missing attribute, value "
        "of another kind, or the value compared), and whether it matches. Example: psmatch "
        "explain cheap-books '{\"price\": 25, \"category\": \"books\"}'",
    )  # fmt: skip
    p.add_argument("id", help="subscription id")
    p.add_argument("event", metavar="EVENT", help="the event, a JSON object")
    p.set_defaults(func=cmd_explain)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        cfg = _config(args)
    except ConfigError as exc:
        parser.error(str(exc))
    _setup_logging(cfg.log_level)
    try:
        return int(args.func(args, cfg))
    except ConfigError as exc:
        print(f"psmatch {args.command}: {exc}", file=sys.stderr)
        return 2
    except PsmatchError as exc:
        print(f"psmatch {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
