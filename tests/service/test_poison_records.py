"""The poison records of issue 8 against the real service (Kafka, Redis, Spark): each used
to end the query for good; now each is rejected exactly once with its code while good
records flow, and ``psmatch rebuild-state`` skips them too."""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from kafka import KafkaProducer

from psmatch.adapters.kafka.admin import ensure_topics, service_topics
from psmatch.adapters.state import StateStore
from psmatch.service.cli import main
from psmatch.service.config import ServiceConfig
from psmatch.service.records.common import SINK_RECORD_LIMIT
from psmatch.service.records.rejected import REJECT_PREFIX_BYTES, parse_rejected
from tests.service.test_end_to_end import read_topic, running, wait_for_notifications

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

GARBAGE = bytes(range(256)) * 2400  # 614,400 bytes, not UTF-8
DEEP_EXTRA = b'{"expr": "a = 1", "extra": ' + b"[" * 5000 + b"]" * 5000 + b"}"
SURROGATE = b'{"expr": "a = 1", "subscriber": "x\\udc00y"}'

POISON_SUBSCRIPTIONS = [
    (b"poison-surrogate", SURROGATE, "invalid_unicode"),
    (b"poison-deep-extra", DEEP_EXTRA, "too_deep"),
    (b"poison-expr", b'{"expr": "a <"}', "invalid_expression"),
    (b"poison-nan", b'{"expr": "a = 1", "w": NaN}', "invalid_json"),
]
POISON_EVENTS = [
    (b"poison-deep", b'{"a":' * 1000 + b"1" + b"}" * 1000, "too_deep"),
    (b"poison-garbage", GARBAGE, "invalid_unicode"),
    (b"poison-array", b'{"a": [1, 2]}', "invalid_event"),
    (b"poison-surrogate-event", b'{"a": 1, "s": "\\ud800"}', "invalid_unicode"),
]


def test_poison_records_are_rejected_once_and_the_query_goes_on(
    spark: Any, make_config: Callable[..., ServiceConfig], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="psmatch.job")
    config = make_config()
    kp = KafkaProducer(bootstrap_servers=config.bootstrap_servers)
    subs, events = config.subscriptions_topic, config.events_topic
    expected: set[tuple[str, str]] = set()
    with running(config, spark) as service:
        kp.send(subs, key=b"good", value=b'{"expr": "a >= 0", "subscriber": "g"}')
        for key, value, _ in POISON_SUBSCRIPTIONS:
            kp.send(subs, key=key, value=value)
        kp.send(subs, key=b"good-2", value=b'{"expr": "a = 1"}')
        kp.flush()
        service.wait_for_version(2, timeout=120)
        for i, (key, value, _) in enumerate(POISON_EVENTS):
            kp.send(events, key=f"before-{i}".encode(), value=b'{"a": %d}' % i)
            kp.send(events, key=key, value=value)
            kp.send(events, key=f"after-{i}".encode(), value=b'{"a": %d}' % (i + 1))
            expected |= {("good", f"before-{i}"), ("good", f"after-{i}")}
            expected |= {("good-2", f"before-{i}")} if i == 1 else set()
            expected |= {("good-2", f"after-{i}")} if i == 0 else set()
        kp.flush()
        got = wait_for_notifications(config, expected)
        service.wait_for_events(3 * len(POISON_EVENTS))
        assert service.query.isActive and service.query.exception() is None
        reports = list(service.reports)
    kp.close()
    assert set(got) == expected and len(got) == len(expected)

    raw = read_topic(config, config.rejected_topic)
    assert all(len(m.value) + len(m.key or b"") < SINK_RECORD_LIMIT for m in raw)
    rejected = {m.key: parse_rejected(m.value) for m in raw}
    assert len(raw) == len(rejected) == len(POISON_SUBSCRIPTIONS) + len(POISON_EVENTS)
    for key, value, code in POISON_SUBSCRIPTIONS + POISON_EVENTS:
        r = rejected[key]
        assert r.code == code, (key, r.reason)
        assert r.value_size == len(value)
        assert r.value_sha256 == hashlib.sha256(value).hexdigest()
        assert r.value == value[:REJECT_PREFIX_BYTES] or r.value == value
    assert rejected[b"poison-surrogate"].topic == subs
    garbage = rejected[b"poison-garbage"]
    assert garbage.truncated and garbage.value == GARBAGE[:REJECT_PREFIX_BYTES]
    assert json.loads(next(m.value for m in raw if m.key == b"poison-garbage"))[
        "value_encoding"] == "base64"  # fmt: skip

    by_code = Counter[tuple[str, str]]()
    for report in reports:
        for name, code, n in report.rejects:
            by_code[(name, code)] += n
    assert by_code == Counter(
        [("subscriptions", c) for _, _, c in POISON_SUBSCRIPTIONS]
        + [("events", c) for _, _, c in POISON_EVENTS]
    )
    _, live = StateStore.from_url(config.redis_url, config.redis_prefix).snapshot()
    assert sorted(live) == ["good", "good-2"]

    # the log: one short WARNING per batch with rejects, not one per record
    warnings = [r.getMessage() for r in caplog.records
                if r.name == "psmatch.job" and r.levelno == logging.WARNING]  # fmt: skip
    assert len(warnings) == sum(1 for r in reports if r.rejects)
    assert all(" rejected " in w and len(w) < 1500 for w in warnings), warnings


def test_rebuild_state_skips_the_poison_subscriptions(
    make_config: Callable[..., ServiceConfig], capsys: pytest.CaptureFixture[str]
) -> None:
    config = make_config()
    ensure_topics(
        config.bootstrap_servers,
        service_topics(config.subscriptions_topic, config.events_topic,
                       config.notifications_topic, config.rejected_topic),
    )  # fmt: skip
    kp = KafkaProducer(bootstrap_servers=config.bootstrap_servers)
    kp.send(config.subscriptions_topic, key=b"good", value=b'{"expr": "a = 1"}')
    for key, value, _ in POISON_SUBSCRIPTIONS:
        kp.send(config.subscriptions_topic, key=key, value=value)
    kp.flush()
    kp.close()
    flags = [
        "--bootstrap-servers", config.bootstrap_servers,
        "--subscriptions-topic", config.subscriptions_topic,
        "--redis-url", config.redis_url, "--redis-prefix", config.redis_prefix,
    ]  # fmt: skip
    assert main(["rebuild-state", *flags]) == 0
    out = capsys.readouterr().out
    assert ("1 subscriptions, 4 invalid records skipped (invalid_expression 1, invalid_json 1, "
            "invalid_unicode 1, too_deep 1)") in out
    _, live = StateStore.from_url(config.redis_url, config.redis_prefix).snapshot()
    assert sorted(live) == ["good"]
