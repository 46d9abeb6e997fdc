"""The streaming job's driver-side logic (:mod:`psmatch.service.job`): where a batch's
subscription records are applied, and that it applies exactly them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from psmatch.adapters.kafka.producer import JsonProducer
from psmatch.adapters.state import StateStore
from psmatch.language import parse_subscription
from psmatch.service import job
from psmatch.service.checkpoint import subscription_ranges
from psmatch.service.config import ServiceConfig
from psmatch.service.records.normal_forms import dump_normal_form
from tests.service.test_end_to_end import read_topic, running, wait_for_notifications


@pytest.mark.parametrize("where", ["on the driver", "in tasks"])
def test_a_batch_applies_exactly_its_subscription_records(
    spark: Any, make_config: Callable[..., ServiceConfig], monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:  # fmt: skip
    """A real query: every batch after the first applies the subscription records of its
    offset ranges, no more and no fewer, a batch of events alone none; a few are applied
    by the driver, more than :data:`~psmatch.service.job.DRIVER_APPLY_RECORDS` (0 here,
    "in tasks") by a Spark job. Either way the same notifications and rejects, and the
    normal forms reach the change log, for the workers to build from without parsing."""
    if where == "in tasks":
        monkeypatch.setattr(job, "DRIVER_APPLY_RECORDS", 0)
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
        producer.send(config.subscriptions_topic, {"expr": "a >="}, key="bad")
        producer.send(config.events_topic, {"a": 5}, key="e5")
        producer.flush()
        wait_for_notifications(config, {("s1", "e0"), ("s1", "e1"), ("s1", "e2"),
                                        ("s1", "e5"), ("s2", "e5")})  # fmt: skip
        reports = list(service.reports)
    later = [r for r in reports if r.batch_id > 0]
    ranges = {r.batch_id: subscription_ranges(config.checkpoint_location, r.batch_id,
                                              config.subscriptions_topic.__eq__)
              for r in later}  # fmt: skip
    assert any(not ranges[r.batch_id] for r in later)
    for report in later:
        records = sum(end - start for start, end in (ranges[report.batch_id] or {}).values())
        assert report.subscription_records == records, report
        assert report.subscriptions_on_driver == (records > 0 and where == "on the driver")
    assert sum(r.subscriptions_rejected for r in reports) == 1
    assert [m.key for m in read_topic(config, config.rejected_topic)] == [b"bad"]
    store = StateStore.from_url(config.redis_connection_url, config.redis_prefix)
    assert [(c.sub_id, c.normal_form) for c in store.changes(0, 2)] == [
        (sub_id, dump_normal_form(parse_subscription(expr)))
        for sub_id, expr in (("s1", "a < 10"), ("s2", "a >= 5"))]
