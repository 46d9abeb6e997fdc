"""``psmatch rebuild-state`` and ``psmatch explain``: the subscription state in Redis.

Owns replaying the compacted subscriptions topic (with ``tenancy = "topics"``, every
tenant's) into a new state (each record decoded inside the per-record barrier: an
invalid one is counted and skipped, never fatal) and
explaining a subscription against an event given on the command line: the one stored
in Redis (an operator's tool), or, ``--from-topic``, the latest in the subscriptions
topic, read with the caller's own Kafka credentials (what a subscriber may read).
"""

from __future__ import annotations

import argparse
import logging
import sys

from psmatch.service.config import ServiceConfig

log = logging.getLogger("psmatch")


def cmd_rebuild_state(args: argparse.Namespace, cfg: ServiceConfig) -> int:
    """Replay the subscriptions topic into Redis; each record is decoded inside the
    per-record barrier, so an invalid one is skipped (summarised in one log line), never
    fatal."""
    from collections import Counter

    from psmatch.adapters.kafka.reader import TopicReader
    from psmatch.adapters.state import StateStore
    from psmatch.service.records.common import RecordLimits, record_error
    from psmatch.service.records.subscriptions import parse_subscription_record
    from psmatch.service.task_contract import MAX_SAMPLES, reject_sample

    limits = RecordLimits.from_config(cfg)
    latest: dict[str, str | None] = {}
    offsets: dict[str, int] = {}
    codes: Counter[str] = Counter()
    samples: list[str] = []
    tenants: dict[str, str | None] = {cfg.subscriptions_topic: None}
    if cfg.tenancy == "topics":  # every tenant's topic, its ids scoped as the job scopes them
        from psmatch.adapters.kafka.admin import topic_names
        from psmatch.service.records.tenants import tenant_of_topic

        tenants = {name: tenant_of_topic(name, cfg.subscriptions_topic)
                   for name in topic_names(cfg.bootstrap_servers, security=cfg.kafka_security)}
        tenants = {name: tenant for name, tenant in tenants.items() if tenant is not None}
    records = []
    for topic in tenants:
        with TopicReader(cfg.bootstrap_servers, topic, security=cfg.kafka_security) as reader:
            records += reader.read_to_end(timeout=args.timeout)
    for rec in sorted(records, key=lambda r: (r.topic, r.partition, r.offset)):
        source = f"{rec.topic}:{rec.partition}"
        offsets[source] = max(offsets.get(source, -1), rec.offset)
        try:  # the per-record barrier: no I/O inside
            change = parse_subscription_record(rec.key, rec.value, limits, tenants[rec.topic])
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
        cfg.redis_connection_url, cfg.redis_prefix, cfg.change_log_retention,
        cfg.redis_retry_seconds,
    )
    version = store.rebuild(live, offsets)
    print(
        f"rebuilt the subscription state (Redis key prefix {cfg.redis_prefix!r}) from "
        f"{len(records)} records of {', '.join(tenants) or 'no tenant'}: {len(live)} "
        "subscriptions, "
        f"{rejected} invalid records skipped" + (f" ({by_code})" if rejected else "")
        + f", version {version}"
    )
    return 0


def _from_topic(cfg: ServiceConfig, sub_id: str, timeout: float) -> str | None:
    """The latest valid record of ``sub_id`` in the subscriptions topic, read to its end
    with the caller's own Kafka credentials (O(records in the topic)); ``None`` if it has
    none or its latest is a delete."""
    from psmatch.adapters.kafka.reader import TopicReader
    from psmatch.service.records.common import RecordLimits
    from psmatch.service.records.subscriptions import parse_subscription_record

    limits = RecordLimits.from_config(cfg)
    latest: str | None = None
    with TopicReader(
        cfg.bootstrap_servers, cfg.own_topic(cfg.subscriptions_topic), security=cfg.kafka_security
    ) as reader:
        records = reader.read_to_end(timeout=timeout)
    wanted = sub_id.encode("utf-8", "surrogateescape")
    for rec in sorted(records, key=lambda r: r.offset):  # one id is in one partition
        if rec.key != wanted:
            continue
        try:  # the per-record barrier: an invalid record changes nothing, as in the job
            latest = parse_subscription_record(rec.key, rec.value, limits).stored
        except Exception:
            continue
    return latest


def cmd_explain(args: argparse.Namespace, cfg: ServiceConfig) -> int:
    from psmatch import EventError, ExpressionError, explain
    from psmatch.adapters.state import StateStore
    from psmatch.service.records.common import MAX_STORED_NESTING, RecordError, loads_bounded

    try:  # the service's own bounded decoder: no event, however built, can crash this
        event = loads_bounded(args.event.encode("utf-8", "surrogateescape"), "the event")
    except RecordError as exc:
        print(f"psmatch explain: {exc} [{exc.code}]", file=sys.stderr)
        return 2
    if args.from_topic:
        record = _from_topic(cfg, args.id, args.timeout)
        where = f"the topic {cfg.own_topic(cfg.subscriptions_topic)}"
    else:
        store = StateStore.from_url(
            cfg.redis_connection_url, cfg.redis_prefix, cfg.change_log_retention,
            cfg.redis_retry_seconds,
        )
        record = store.get(args.id)
        where = (f"{cfg.redis_display_url} (prefix {cfg.redis_prefix}); the job stores a "
                 "subscription once it has read it")  # fmt: skip
    if record is None:
        print(f"psmatch explain: no subscription {args.id!r} in {where}", file=sys.stderr)
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
