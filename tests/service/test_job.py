"""The streaming job's driver-side logic (:mod:`psmatch.service.job`): which batches hold
subscription records, read from the query's offset log."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from psmatch.adapters.kafka.producer import JsonProducer
from psmatch.adapters.state import StateStore
from psmatch.language import parse_subscription
from psmatch.service.config import ServiceConfig
from psmatch.service.job import batch_may_read, subscription_topics
from psmatch.service.records.normal_forms import dump_normal_form
from tests.service.test_end_to_end import running, wait_for_notifications


def write_offsets(checkpoint: Path, batch_id: int, offsets: dict[str, dict[str, int]]) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    lines = ["v1", json.dumps({"batchWatermarkMs": 0}), json.dumps(offsets)]
    (checkpoint / "offsets" / str(batch_id)).write_text("\n".join(lines))


def test_a_topic_whose_offsets_did_not_move_is_not_read(tmp_path: Path) -> None:
    write_offsets(tmp_path, 4, {"subs": {"0": 7, "1": 3}, "events": {"0": 10, "1": 9}})
    write_offsets(tmp_path, 5, {"subs": {"0": 7, "1": 3}, "events": {"0": 12, "1": 9}})
    assert not batch_may_read(str(tmp_path), 5, "subs".__eq__)
    assert batch_may_read(str(tmp_path), 5, "events".__eq__)
    assert not batch_may_read(f"file://{tmp_path}", 5, "subs".__eq__)


def test_the_tenants_topics_are_read_when_one_of_them_moved(tmp_path: Path) -> None:
    config = ServiceConfig(subscriptions_topic="subs", events_topic="events", tenancy="topics")
    tenants = subscription_topics(config)
    assert tenants("subs.alice") and not tenants("subs") and not tenants("events")
    write_offsets(tmp_path, 4, {"subs.alice": {"0": 7}, "subs.bob": {"0": 1},
                                "events": {"0": 10}})  # fmt: skip
    write_offsets(tmp_path, 5, {"subs.alice": {"0": 7}, "subs.bob": {"0": 2},
                                "events": {"0": 12}})  # fmt: skip
    write_offsets(tmp_path, 6, {"subs.alice": {"0": 7}, "subs.bob": {"0": 2},
                                "events": {"0": 13}})  # fmt: skip
    write_offsets(tmp_path, 7, {"subs.alice": {"0": 7}, "subs.bob": {"0": 2},
                                "subs.carol": {"0": 0}, "events": {"0": 13}})  # fmt: skip
    assert batch_may_read(str(tmp_path), 5, tenants)
    assert not batch_may_read(str(tmp_path), 6, tenants)
    assert batch_may_read(str(tmp_path), 7, tenants)  # a tenant added


@pytest.mark.parametrize(
    ("case", "batch_id"),
    [("the first batch", 0), ("a partition moved", 6), ("a partition added", 7),
     ("the previous file is gone", 9), ("this batch's file is gone", 10),
     ("a format Spark may write one day", 12), ("the topic is new", 15),
     ("a truncated file", 17)],
)  # fmt: skip
def test_whenever_unsure_the_batch_may_read_the_topic(
    tmp_path: Path, case: str, batch_id: int
) -> None:
    write_offsets(tmp_path, 0, {"subs": {"0": 1}})
    write_offsets(tmp_path, 5, {"subs": {"0": 7}})
    write_offsets(tmp_path, 6, {"subs": {"0": 8}})
    write_offsets(tmp_path, 7, {"subs": {"0": 8, "1": 0}})
    write_offsets(tmp_path, 9, {"subs": {"0": 8}})
    write_offsets(tmp_path, 11, {"subs": {"0": 8}})
    (tmp_path / "offsets" / "12").write_text('v2\n{}\n{"subs": {"0": 8}}')
    write_offsets(tmp_path, 13, {"subs": {"0": 8}})
    write_offsets(tmp_path, 14, {"events": {"0": 8}})
    write_offsets(tmp_path, 15, {"events": {"0": 8}, "subs": {"0": 8}})
    write_offsets(tmp_path, 16, {"subs": {"0": 8}})
    (tmp_path / "offsets" / "17").write_text('v1\n{"batchWatermarkMs"')
    assert batch_may_read(str(tmp_path), batch_id, "subs".__eq__), case


def test_a_checkpoint_that_is_not_a_local_path_is_always_read() -> None:
    assert batch_may_read("s3a://bucket/checkpoint", 5, "subs".__eq__)


def test_the_service_validates_only_the_batches_with_subscription_records(
    spark: Any, make_config: Callable[..., ServiceConfig]
) -> None:
    """A real query: every batch after the first that holds subscription records is one
    the offset log says may read the topic, and every batch of events alone is not (so
    it runs no validation job). The validation job's normal forms reach the change log,
    for the workers to build from without parsing."""
    config = make_config()
    with running(config, spark) as service, JsonProducer(config.bootstrap_servers) as producer:
        producer.send(config.subscriptions_topic, {"expr": "a < 10"}, key="s1")
        producer.flush()
        service.wait_for_version(1)
        for i in range(3):
            producer.send(config.events_topic, {"a": i}, key=f"e{i}")
            producer.flush()
            service.wait_for_events(i + 1)
        producer.send(config.subscriptions_topic, {"expr": "a >= 5"}, key="s2")
        producer.send(config.events_topic, {"a": 5}, key="e5")
        producer.flush()
        wait_for_notifications(config, {("s1", "e0"), ("s1", "e5"), ("s2", "e5")})
        reports = list(service.reports)
    later = [r for r in reports if r.batch_id > 0]
    may_read = {r.batch_id: batch_may_read(config.checkpoint_location, r.batch_id,
                                           config.subscriptions_topic.__eq__)
                for r in later}  # fmt: skip
    assert any(not read for read in may_read.values())
    for report in later:
        assert may_read[report.batch_id] == (report.subscription_records > 0), report
    store = StateStore.from_url(config.redis_connection_url, config.redis_prefix)
    assert [(c.sub_id, c.normal_form) for c in store.changes(0, 2)] == [
        (sub_id, dump_normal_form(parse_subscription(expr)))
        for sub_id, expr in (("s1", "a < 10"), ("s2", "a >= 5"))]
