"""``psmatch subscribe``, ``unsubscribe``, ``publish`` and ``tail``: records in and out.

Owns what the command sends to the input topics, checked first with the service's own
decoders inside the per-record barrier (an invalid subscription is refused before any
I/O, an event line that is not JSON is skipped), and how it prints the notifications
or rejected records it reads.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import TextIO

from psmatch.service.config import ServiceConfig


def _argv_bytes(text: str) -> bytes:
    """A command-line argument as the bytes the user typed (undecodable ones included)."""
    return text.encode("utf-8", errors="surrogateescape")


def cmd_subscribe(args: argparse.Namespace, cfg: ServiceConfig) -> int:
    """Encode the subscription record and validate it with the service's own decoder
    (inside the per-record barrier) before sending it."""
    from psmatch.adapters.kafka.producer import JsonProducer
    from psmatch.service.records.common import RecordLimits, json_type, loads_bounded, record_error
    from psmatch.service.records.subscriptions import parse_subscription_record, subscription_value

    key = _argv_bytes(args.id)
    limits = RecordLimits.from_config(cfg)
    try:
        extra = loads_bounded(_argv_bytes(args.extra), "--extra") if args.extra else {}
        if not isinstance(extra, dict):
            print(f"psmatch subscribe: --extra must be a JSON object, not {json_type(extra)}",
                  file=sys.stderr)  # fmt: skip
            return 2
        value = subscription_value(args.expr, args.subscriber, extra)
        parse_subscription_record(key, value, limits)
    except Exception as exc:  # the per-record barrier: no I/O inside
        print(f"psmatch subscribe: {record_error(exc)}", file=sys.stderr)
        return 2
    with JsonProducer(cfg.bootstrap_servers, cfg.kafka_security) as producer:
        producer.send(cfg.own_topic(cfg.subscriptions_topic), value, key=key, raw=True)
    print(f"subscribed {args.id}: {args.expr}")
    return 0


def cmd_unsubscribe(args: argparse.Namespace, cfg: ServiceConfig) -> int:
    from psmatch.adapters.kafka.producer import JsonProducer

    with JsonProducer(cfg.bootstrap_servers, cfg.kafka_security) as producer:
        for sub_id in args.ids:
            producer.send(cfg.own_topic(cfg.subscriptions_topic), None, key=sub_id)
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
    from psmatch.adapters.kafka.producer import JsonProducer
    from psmatch.service.records.common import loads_bounded, record_error

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


def cmd_tail(args: argparse.Namespace, cfg: ServiceConfig) -> int:
    from psmatch.adapters.kafka.reader import TopicReader

    topic = cfg.own_topic(cfg.rejected_topic if args.rejected else cfg.notifications_topic)
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
