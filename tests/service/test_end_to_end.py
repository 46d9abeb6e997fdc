"""The service end to end: Kafka in, Spark + Redis, notifications out — all real.

Records are written with confluent-kafka (the service's own client) and with
kafka-python, and outputs are read back with kafka-python, so two independent client
implementations check the wire formats. Expected notifications come from the ``scan``
matcher.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer

from psmatch import make_matcher
from psmatch.adapters.kafka.producer import JsonProducer
from psmatch.adapters.state import StateStore
from psmatch.devservers.services import LocalServices
from psmatch.service.config import ServiceConfig
from psmatch.service.job import BatchReport, start_query, stop_query
from tests.service.workload import ATTRS, random_subscriptions

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


class Service:
    """A running streaming query with the batch reports it produced."""

    def __init__(self, config: ServiceConfig, query: Any, reports: list[BatchReport]) -> None:
        self.config = config
        self.query = query
        self.reports = reports

    def version(self) -> int:
        return self.reports[-1].version if self.reports else 0

    def wait_for_version(self, version: int, timeout: float = 60) -> None:
        wait_until(lambda: self.version() >= version, timeout, f"state version {version}",
                   self.query)  # fmt: skip

    def wait_for_events(self, count: int, timeout: float = 60) -> None:
        wait_until(lambda: sum(r.events for r in self.reports) >= count, timeout,
                   f"{count} events processed", self.query)  # fmt: skip


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, query: Any = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if query is not None and query.exception() is not None:
            raise AssertionError(f"the query failed: {query.exception()}")
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@contextmanager
def running(config: ServiceConfig, spark: Any) -> Iterator[Service]:
    reports: list[BatchReport] = []
    query = start_query(config, spark, on_report=reports.append)
    try:
        yield Service(config, query, reports)
    finally:
        stop_query(query)


def read_topic(config: ServiceConfig, topic: str, idle_ms: int = 1500) -> list[Any]:
    """Every record of ``topic`` (kafka-python), until ``idle_ms`` without a new one."""
    consumer = KafkaConsumer(
        topic, bootstrap_servers=config.bootstrap_servers, auto_offset_reset="earliest",
        enable_auto_commit=False, group_id=None, consumer_timeout_ms=idle_ms,
    )  # fmt: skip
    try:
        return list(consumer)
    finally:
        consumer.close()


def notifications(config: ServiceConfig) -> list[tuple[str, str]]:
    out = []
    for m in read_topic(config, config.notifications_topic):
        value = json.loads(m.value)
        assert m.key.decode() == value["subscription_id"]
        out.append((value["subscription_id"], value["event_id"]))
    return out


def wait_for_notifications(
    config: ServiceConfig, expected: set[tuple[str, str]], timeout: float = 60
) -> list[tuple[str, str]]:
    got: list[tuple[str, str]] = []

    def done() -> bool:
        nonlocal got
        got = notifications(config)
        return set(got) >= expected

    try:
        wait_until(done, timeout, f"{len(expected)} notifications")
    except AssertionError:
        missing = sorted(expected - set(got))[:10]
        raise AssertionError(f"{len(set(got) & expected)}/{len(expected)} arrived; "
                             f"missing e.g. {missing}") from None  # fmt: skip
    return got


def random_events(rng: random.Random, n: int) -> list[dict[str, Any]]:
    events = []
    for _ in range(n):
        event: dict[str, Any] = {a: rng.randint(0, 20) for a in ATTRS if rng.random() < 0.8}
        if rng.random() < 0.7:
            event["s"] = rng.choice("xyzw")
        events.append(event)
    return events


def expected_matches(
    subs: dict[str, str], events: dict[str, dict[str, Any]]
) -> set[tuple[str, str]]:
    scan = make_matcher("scan")
    for sub_id, expr in subs.items():
        scan.add(sub_id, expr)
    ids = list(events)
    return {
        (sub_id, ev_id)
        for ev_id, matched in zip(ids, scan.match_batch([events[i] for i in ids]), strict=True)
        for sub_id in matched
    }


def test_notifications_are_exactly_what_scan_finds(
    spark: Any, make_config: Callable[..., ServiceConfig]
) -> None:
    config = make_config()
    rng = random.Random(7)
    subs = random_subscriptions(rng, 60)
    events = {f"ev-{i}": e for i, e in enumerate(random_events(rng, 400))}
    expected = expected_matches(subs, events)
    assert len(expected) > 100
    with running(config, spark) as service:
        with JsonProducer(config.bootstrap_servers) as producer:
            for sub_id, expr in subs.items():
                producer.send(config.subscriptions_topic, {"expr": expr, "subscriber": sub_id},
                              key=sub_id)  # fmt: skip
        service.wait_for_version(len(subs))
        # half the events through confluent-kafka, half through kafka-python
        items = list(events.items())
        with JsonProducer(config.bootstrap_servers) as producer:
            for ev_id, event in items[::2]:
                producer.send(config.events_topic, event, key=ev_id)
        kp = KafkaProducer(bootstrap_servers=config.bootstrap_servers)
        for ev_id, event in items[1::2]:
            kp.send(config.events_topic, key=ev_id.encode(), value=json.dumps(event).encode())
        kp.flush()
        kp.close()
        got = wait_for_notifications(config, expected)
        service.wait_for_events(len(events))
    assert set(got) == expected
    assert len(got) == len(expected), "no duplicates without a failure"
    message = json.loads(read_topic(config, config.notifications_topic)[0].value)
    assert set(message) == {"subscription_id", "subscriber", "event_id", "event", "matched_at",
                            "event_timestamp", "extra"}  # fmt: skip
    assert message["event"] == events[message["event_id"]]
    assert read_topic(config, config.rejected_topic, idle_ms=500) == []


def test_replace_and_delete_apply_to_later_events(
    spark: Any, make_config: Callable[..., ServiceConfig]
) -> None:
    config = make_config()
    topic = config.subscriptions_topic
    with running(config, spark) as service, JsonProducer(config.bootstrap_servers) as producer:
        producer.send(topic, {"expr": "a < 10", "subscriber": "u1", "channel": "sms"}, key="s1")
        producer.send(topic, {"expr": "a >= 0"}, key="s2")
        producer.flush()
        producer.send(config.events_topic, {"a": 5}, key="e1")
        producer.flush()
        wait_for_notifications(config, {("s1", "e1"), ("s2", "e1")})

        producer.send(topic, {"expr": "a > 10", "subscriber": "u1"}, key="s1")  # replace
        producer.send(topic, None, key="s2")  # delete
        producer.flush()
        producer.send(config.events_topic, {"a": 5}, key="e2")
        producer.send(config.events_topic, {"a": 50}, key="e3")
        producer.flush()
        wait_for_notifications(config, {("s1", "e3")})
        service.wait_for_events(3)
    got = notifications(config)
    assert sorted(got) == [("s1", "e1"), ("s1", "e3"), ("s2", "e1")]
    first = next(json.loads(m.value) for m in read_topic(config, config.notifications_topic))
    assert first["subscriber"] in ("u1", "s2")
    if first["subscription_id"] == "s1":
        assert first["extra"] == {"channel": "sms"}


def test_bad_records_are_rejected_while_good_ones_flow(
    spark: Any, make_config: Callable[..., ServiceConfig]
) -> None:
    config = make_config()
    kp = KafkaProducer(bootstrap_servers=config.bootstrap_servers)
    subs, events = config.subscriptions_topic, config.events_topic
    bad_subs = [
        (b"bad-json", b"{oops"),
        (b"bad-expr", b'{"expr": "a <"}'),
        (b"", b'{"expr": "a = 1"}'),  # the broker refuses a null key on a compacted topic
        (b"not-object", b'"a = 1"'),
    ]
    bad_events = [(b"bad-ev-1", b"not json"), (b"bad-ev-2", b"[1, 2]"),
                  (b"bad-ev-3", b'{"a": [1, 2]}'), (b"bad-ev-4", b'{"a": NaN}')]  # fmt: skip
    with running(config, spark) as service:
        kp.send(subs, key=b"good", value=b'{"expr": "a = 1"}')
        for key, value in bad_subs:
            kp.send(subs, key=key, value=value)
        kp.flush()
        for i, (key, value) in enumerate(bad_events):
            kp.send(events, key=f"ok-{i}".encode(), value=b'{"a": 1}')
            kp.send(events, key=key, value=value)
        kp.flush()
        wait_for_notifications(config, {("good", f"ok-{i}") for i in range(4)})
        service.wait_for_events(8)
        assert service.query.isActive
    kp.close()
    rejected = [json.loads(m.value) for m in read_topic(config, config.rejected_topic)]
    by_value = {r["value"]: r for r in rejected}
    assert len(rejected) == len(bad_subs) + len(bad_events)
    for key, value in bad_subs + bad_events:
        r = by_value[value.decode()]
        assert r["key"] == key.decode()
        assert r["topic"] == (subs if (key, value) in bad_subs else events)
        assert r["reason"] and isinstance(r["offset"], int)
    assert "invalid expression" in by_value['{"expr": "a <"}']["reason"]
    assert "'a'" in by_value['{"a": [1, 2]}']["reason"]
    assert "subscription id as the key" in by_value['{"expr": "a = 1"}']["reason"]


def test_restart_from_the_checkpoint_loses_nothing(
    spark: Any, make_config: Callable[..., ServiceConfig]
) -> None:
    config = make_config()
    expected: set[tuple[str, str]] = set()
    with JsonProducer(config.bootstrap_servers) as producer:
        with running(config, spark) as service:
            producer.send(config.subscriptions_topic, {"expr": "a >= 0"}, key="all")
            producer.send(config.subscriptions_topic, {"expr": "a < 5"}, key="small")
            producer.flush()
            for i in range(10):
                producer.send(config.events_topic, {"a": i}, key=f"before-{i}")
                expected |= {("all", f"before-{i}")} | (
                    {("small", f"before-{i}")} if i < 5 else set()
                )
            producer.flush()
            wait_for_notifications(config, expected)
        # the job is down: subscribe and publish anyway
        producer.send(config.subscriptions_topic, {"expr": "a > 100"}, key="big")
        producer.flush()
        for i in range(200):
            producer.send(config.events_topic, {"a": i}, key=f"down-{i}")
            expected.add(("all", f"down-{i}"))
            if i < 5:
                expected.add(("small", f"down-{i}"))
            if i > 100:
                expected.add(("big", f"down-{i}"))
        producer.flush()
        with running(config, spark) as service:
            got = wait_for_notifications(config, expected)
            service.wait_for_events(200)
    assert set(got) == expected
    # the restart replays at most the batch in flight; nothing else is duplicated
    assert len(got) - len(set(got)) <= 15


def test_state_survives_a_redis_restart(
    spark: Any, services: LocalServices, make_config: Callable[..., ServiceConfig]
) -> None:
    config = make_config()
    store = StateStore.from_url(config.redis_url, config.redis_prefix)
    with JsonProducer(config.bootstrap_servers) as producer:
        with running(config, spark) as service:
            producer.send(config.subscriptions_topic, {"expr": "a = 1"}, key="s1")
            producer.send(config.subscriptions_topic, {"expr": "a = 2"}, key="s2")
            producer.send(config.subscriptions_topic, None, key="s2")
            producer.flush()
            service.wait_for_version(3)
        before = store.snapshot()
        services.redis.restart()
        assert StateStore.from_url(config.redis_url, config.redis_prefix).snapshot() == before
        with running(config, spark) as service:
            producer.send(config.subscriptions_topic, {"expr": "a = 3"}, key="s3")
            producer.flush()
            service.wait_for_version(4)
            producer.send(config.events_topic, {"a": 1}, key="e1")
            producer.send(config.events_topic, {"a": 2}, key="e2")
            producer.send(config.events_topic, {"a": 3}, key="e3")
            producer.flush()
            got = wait_for_notifications(config, {("s1", "e1"), ("s3", "e3")})
            service.wait_for_events(3)
    assert sorted(set(got)) == [("s1", "e1"), ("s3", "e3")]
    assert sorted(store.snapshot()[1]) == ["s1", "s3"]
