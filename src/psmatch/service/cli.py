"""The ``psmatch`` command: run the service and talk to it through Kafka.

Subcommands: ``run`` (the streaming job, optionally starting local Kafka and Redis),
``subscribe``, ``unsubscribe``, ``publish``, ``tail``, ``rebuild-state`` and ``explain``
(why an event does or does not match a stored subscription). Every setting of
:class:`psmatch.service.config.ServiceConfig` is a flag on each subcommand and an environment
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

from psmatch.errors import PsmatchError
from psmatch.service.config import REPO_ROOT, ServiceConfig, field_type
from psmatch.service.errors import ConfigError

log = logging.getLogger("psmatch")


# -- config flags ----------------------------------------------------------------------


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


def _config(args: argparse.Namespace) -> ServiceConfig:
    overrides = {k.removeprefix("cfg_"): v for k, v in vars(args).items() if k.startswith("cfg_")}
    return ServiceConfig.load(overrides=overrides)


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    # Unless debugging, failures reach the user once, in psmatch's own words: librdkafka
    # logs every failed connection attempt (its errors are the client's exception, see
    # psmatch.adapters.kafka), and py4j logs the traceback of a failed foreachBatch (psmatch run
    # reports the failed query in one line, see psmatch.service.supervisor).
    quiet = logging.DEBUG if level.upper() == "DEBUG" else logging.CRITICAL
    for noisy in ("py4j", "psmatch.kafka.client"):
        logging.getLogger(noisy).setLevel(quiet)


# -- local servers ---------------------------------------------------------------------

SERVER_KINDS = ("redis", "kafka")


def _host_port(address: str, default_port: int) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return (host or address, int(port)) if port.isdigit() else (address, default_port)


def _local_server(kind: str, cfg: ServiceConfig, data_dir: Path) -> Any:
    """The detached server of ``kind`` in ``data_dir/<kind>``: the running one recorded
    there, else a new (not yet started) one on the configured port."""
    from urllib.parse import urlsplit

    from psmatch.devservers.local import KafkaBroker, RedisServer

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


def _start_local_servers(cfg: ServiceConfig, data_dir: Path, kinds: Sequence[str]) -> list[str]:
    """Start, detached, the servers of ``kinds`` that nothing answers for on the configured
    ports; returns the kinds that run from ``data_dir`` (started now or earlier).

    A detached server outlives the job (a crash or ``kill -9`` of the job leaves Kafka
    and Redis up for the producers); ``psmatch servers stop`` or Ctrl-C of ``psmatch run
    --start-local`` stops it.
    """
    from psmatch.adapters.kafka import wait_for_kafka
    from psmatch.devservers.local import port_open

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


def _stop_local_servers(cfg: ServiceConfig, data_dir: Path, kinds: Sequence[str]) -> None:
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
        _start_local_servers(cfg, data_dir, kinds)
    elif args.action == "stop":
        _stop_local_servers(cfg, data_dir, kinds)
    for kind in kinds:
        server = _local_server(kind, cfg, data_dir)
        state = (f"running, pid {server.pid}, port {server.port}" if server.running
                 else "not running")  # fmt: skip
        print(f"{kind}: {state} (data in {server.data_dir})")
    return 0


# -- run -------------------------------------------------------------------------------


def _watch(query: Any, metrics: Any) -> None:
    """Until the query stops: feed Spark's progress to the metrics once a second."""
    from pyspark.errors import StreamingQueryException

    while query.isActive:
        try:
            query.awaitTermination(1.0)
        except StreamingQueryException:
            return  # the caller reads query.exception()
        progress = query.lastProgress
        metrics.observe_progress(None if progress is None else json.loads(progress.json))


def _transient(exc: PsmatchError) -> bool:
    """Whether a failure to (re)start the query may pass: a server still down."""
    from psmatch.adapters.kafka import KafkaAuthenticationError, KafkaServiceError
    from psmatch.adapters.state import StateAuthenticationError, StateUnavailableError

    if isinstance(exc, KafkaAuthenticationError | StateAuthenticationError | ConfigError):
        return False
    return isinstance(exc, KafkaServiceError | StateUnavailableError)


def cmd_run(args: argparse.Namespace, cfg: ServiceConfig) -> int:
    """Run the query; restart it from its checkpoint after an infrastructure fault, within
    the budget of :class:`psmatch.service.supervisor.RestartBudget`."""
    import time

    from psmatch.service.job import build_spark, start_query, stop_query
    from psmatch.service.metrics import ServiceMetrics
    from psmatch.service.supervisor import QueryFailure, RestartBudget, classify_failure

    data_dir = Path(args.data_dir)
    ours: list[str] = []
    query = None
    metrics = ServiceMetrics(cfg.subscriptions_topic, cfg.events_topic)
    metrics_server = metrics.serve(cfg.metrics_port, cfg.metrics_host) if cfg.metrics_port else None
    stopping = False

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        if args.start_local:
            ours = _start_local_servers(cfg, data_dir, SERVER_KINDS)
        log.info("starting Spark (%s)", cfg.spark_master)
        spark = build_spark(cfg)
        query = start_query(cfg, spark, on_report=metrics.observe_batch, query_name="psmatch")
        log.info("running; Ctrl-C stops")
        budget = RestartBudget(cfg.query_max_restarts, cfg.query_restart_window_seconds)
        while True:
            if query is not None:
                _watch(query, metrics)
                exc = query.exception()
                if exc is None:
                    return 0  # stopped by someone else
                failure = classify_failure(str(exc))
                query = None
            if not failure.transient:
                log.error("the streaming query stopped: %s", failure.message)
                return 1
            delay = budget.next_delay()
            if delay is None:
                log.error("the streaming query failed %d times within %.0f s (query_max_restarts "
                          "%d); giving up. Last failure: %s", budget.used + 1,
                          cfg.query_restart_window_seconds, cfg.query_max_restarts,
                          failure.message)  # fmt: skip
                return 1
            log.warning("the streaming query failed (%s); restarting it from the checkpoint "
                        "in %.1f s (restart %d of at most %d per %.0f s)", failure.message,
                        delay, budget.used, cfg.query_max_restarts,
                        cfg.query_restart_window_seconds)  # fmt: skip
            time.sleep(delay)
            metrics.query_restarts.inc()
            try:
                spark = build_spark(cfg)
                query = start_query(cfg, spark, on_report=metrics.observe_batch,
                                    query_name="psmatch")  # fmt: skip
                log.info("the streaming query runs again")
            except PsmatchError as exc:
                failure = QueryFailure(str(exc), transient=_transient(exc))
    except KeyboardInterrupt:
        stopping = True
        log.info("stopping")
        return 0
    finally:
        if query is not None:
            with contextlib.suppress(Exception):
                stop_query(query)
        if stopping or ours:
            with contextlib.suppress(Exception):
                from pyspark.sql import SparkSession

                active = SparkSession.getActiveSession()
                if active is not None:
                    active.stop()
        if stopping:
            _stop_local_servers(cfg, data_dir, ours)
        elif ours:
            log.info("the local %s started by --start-local keep running; `psmatch servers "
                     "stop` stops them", " and ".join(ours))  # fmt: skip
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
    from psmatch.adapters.kafka import JsonProducer
    from psmatch.service.records import (
        RecordLimits,
        json_type,
        loads_bounded,
        parse_subscription_record,
        record_error,
        subscription_value,
    )

    key = _argv_bytes(args.id)
    limits = RecordLimits.from_config(cfg)
    try:
        extra = loads_bounded(_argv_bytes(args.extra), "--extra") if args.extra else {}
        if not isinstance(extra, dict):
            print(f"psmatch subscribe: --extra must be a JSON object, not {json_type(extra)}",
                  file=sys.stderr)  # fmt: skip
            return 2
        value = subscription_value(args.expr, args.subscriber or args.id, extra)
        parse_subscription_record(key, value, limits)
    except Exception as exc:  # the per-record barrier: no I/O inside
        print(f"psmatch subscribe: {record_error(exc)}", file=sys.stderr)
        return 2
    with JsonProducer(cfg.bootstrap_servers, cfg.kafka_security) as producer:
        producer.send(cfg.subscriptions_topic, value, key=key, raw=True)
    print(f"subscribed {args.id}: {args.expr}")
    return 0


def cmd_unsubscribe(args: argparse.Namespace, cfg: ServiceConfig) -> int:
    from psmatch.adapters.kafka import JsonProducer

    with JsonProducer(cfg.bootstrap_servers, cfg.kafka_security) as producer:
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
    from psmatch.adapters.kafka import JsonProducer
    from psmatch.service.records import loads_bounded, record_error

    sent = bad = 0
    with JsonProducer(cfg.bootstrap_servers, cfg.kafka_security) as producer:
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
    from psmatch.adapters.kafka import TopicReader

    topic = cfg.rejected_topic if args.rejected else cfg.notifications_topic
    shown = 0
    with TopicReader(
        cfg.bootstrap_servers, topic, args.from_beginning, cfg.kafka_security
    ) as reader:
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

    from psmatch.adapters.kafka import TopicReader
    from psmatch.adapters.state import StateStore
    from psmatch.service.records import RecordLimits, parse_subscription_record, record_error
    from psmatch.service.worker import MAX_SAMPLES, reject_sample

    limits = RecordLimits.from_config(cfg)
    latest: dict[str, str | None] = {}
    offsets: dict[str, int] = {}
    codes: Counter[str] = Counter()
    samples: list[str] = []
    with TopicReader(
        cfg.bootstrap_servers, cfg.subscriptions_topic, security=cfg.kafka_security
    ) as reader:
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
    store = StateStore.from_url(
        cfg.redis_connection_url, cfg.redis_prefix, cfg.change_log_retention
    )
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
    from psmatch import EventError, ExpressionError, explain
    from psmatch.adapters.state import StateStore
    from psmatch.service.records import MAX_STORED_NESTING, RecordError, loads_bounded

    try:  # the service's own bounded decoder: no event, however built, can crash this
        event = loads_bounded(args.event.encode("utf-8", "surrogateescape"), "the event")
    except RecordError as exc:
        print(f"psmatch explain: {exc} [{exc.code}]", file=sys.stderr)
        return 2
    store = StateStore.from_url(
        cfg.redis_connection_url, cfg.redis_prefix, cfg.change_log_retention
    )
    record = store.get(args.id)
    if record is None:
        print(f"psmatch explain: no subscription {args.id!r} in {cfg.redis_display_url} "
              f"(prefix {cfg.redis_prefix}); the job stores a subscription once it has read it",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        expr = loads_bounded(record.encode("utf-8"), "the stored subscription",
                             MAX_STORED_NESTING)["expr"]
        explanation = explain(expr, event)
    except (RecordError, ExpressionError, KeyError, TypeError) as exc:
        print(f"psmatch explain: the stored subscription {args.id!r} cannot be explained "
              f"({exc}); rebuild the state with psmatch rebuild-state",
              file=sys.stderr)  # fmt: skip
        return 1
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
        "when nothing answers there; they outlive a crash of the job, Ctrl-C stops them",
    )  # fmt: skip
    data_dir_help = "where the local servers keep their data and pids (default: %(default)s)"
    p.add_argument("--data-dir", default=str(REPO_ROOT / "var"), help=data_dir_help)
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
    p.add_argument("--data-dir", default=str(REPO_ROOT / "var"), help=data_dir_help)
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
