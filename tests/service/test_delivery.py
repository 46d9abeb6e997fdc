"""Delivery modes (:mod:`psmatch.service.delivery`) on a real query: a batch Spark runs
again after a restart writes its notifications again at least once, and not at all
exactly once (the marker its committed transaction left says so); a ``read_committed``
reader (:class:`psmatch.adapters.kafka.reader.TopicReader`, what ``psmatch tail``
reads with) counts each notification of ``scan``'s once."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from psmatch.adapters.kafka.producer import JsonProducer
from psmatch.adapters.kafka.reader import TopicReader
from psmatch.service.config import ServiceConfig
from psmatch.service.delivery import DeliveryError, ExactlyOnceTask
from psmatch.service.job import prepare
from tests.service.test_end_to_end import (
    expected_matches,
    random_events,
    running,
    wait_until,
)
from tests.service.workload import random_subscriptions

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def committed_notifications(config: ServiceConfig) -> Counter[tuple[str, str]]:
    """(subscription id, event id) of every notification a read_committed reader sees,
    counted."""
    with TopicReader(config.bootstrap_servers, config.notifications_topic) as reader:
        values = [json.loads(r.value or b"") for r in reader.read_to_end()]
    return Counter((v["subscription_id"], v["event_id"]) for v in values)


def committed_batches(checkpoint: str) -> list[int]:
    """The ids of the batches Spark's commit log holds."""
    commits = Path(checkpoint) / "commits"
    return [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.exists() else []


def forget_last_batch(checkpoint: str) -> int:
    """Delete the commit log entry of the query's last batch, as a ``kill -9`` between
    its writes and Spark's commit leaves it: the next start runs that batch again.
    Returns its id."""
    commits = Path(checkpoint) / "commits"
    last = max(committed_batches(checkpoint))
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    return last


@pytest.mark.parametrize(("delivery", "shards"),
                         [("at-least-once", 1), ("exactly-once", 1), ("exactly-once", 2)])
def test_a_batch_run_again_writes_again_only_at_least_once(
    spark: Any, make_config: Callable[..., ServiceConfig], delivery: str, shards: int
) -> None:
    """With two shards each event reaches both shards' tasks, each with its own
    transactional id and marker: both leave the batch out when it runs again."""
    config = make_config(delivery=delivery, trigger_seconds=30.0, shards=shards)
    rng = random.Random(49)
    subs = random_subscriptions(rng, 40)
    events = {f"ev-{i}": e for i, e in enumerate(random_events(rng, 300))}
    expected = expected_matches(subs, events)
    prepare(config)  # the topics
    with JsonProducer(config.bootstrap_servers) as producer:
        for sub_id, expr in subs.items():
            producer.send(config.subscriptions_topic, {"expr": expr, "subscriber": sub_id},
                          key=sub_id)  # fmt: skip
        for ev_id, event in events.items():
            producer.send(config.events_topic, event, key=ev_id)
    # a long trigger: the first batch reads every record, its commit is the last
    with running(config, spark) as service:  # a loaded machine may take minutes
        service.wait_for_events(len(events), timeout=240)
        # the batch reports before Spark logs it as done: stop only once it has
        wait_until(lambda: bool(committed_batches(config.checkpoint_location)), 60,
                   "Spark's commit of the batch", service.query)  # fmt: skip
    first = service.reports
    assert sum(r.notifications for r in first) == len(expected)
    replayed = forget_last_batch(config.checkpoint_location)
    with running(config, spark) as service:
        wait_until(lambda: bool(service.reports), 240, "the batch run again", service.query)
    (again,) = service.reports
    assert again.batch_id == replayed
    got = committed_notifications(config)
    assert set(got) == expected
    if delivery == "exactly-once":
        assert again.workers.replayed == len(events)
        assert again.events == again.notifications == 0
        assert max(got.values()) == 1, "a notification read twice"
    else:
        assert again.notifications == len(expected)
        assert set(got.values()) == {2}, "every notification of the batch run again twice"


def test_a_task_of_one_shard_refuses_events_of_two_partitions(
    make_config: Callable[..., ServiceConfig],
) -> None:
    """One transactional id per events partition: a task handed two (a plan that no
    longer gives each partition its task) is a bug, not two partitions under one id."""
    import pyarrow as pa

    from psmatch.adapters.kafka.sink import SinkSettings
    from psmatch.service.delivery import transactional_prefix

    config = make_config()
    task = ExactlyOnceTask(SinkSettings(config.bootstrap_servers),
                           transactional_prefix(config.checkpoint_location, "n"),
                           config.events_topic, 0, 0, 1)  # fmt: skip
    batch = pa.RecordBatch.from_pydict({"partition": pa.array([0, 1], pa.int32()),
                                        "offset": pa.array([5, 6], pa.int64())})  # fmt: skip
    try:
        with pytest.raises(DeliveryError, match=r"partitions \[0, 1\]"):
            list(task.unseen(iter([batch])))
    finally:
        task.close()


def test_a_task_matches_its_first_events_while_its_sink_opens_and_again_if_covered(
    make_config: Callable[..., ServiceConfig],
) -> None:
    """The first batch is passed on whole while the producer opens; the first write
    waits for it. When a committed transaction covers some of those events (the task ran
    before), the write raises :class:`CoveredEvents` having written nothing, and the
    batches it carries, passed through :meth:`ExactlyOnceTask.unseen` again, lose the
    covered events."""
    import pyarrow as pa

    from psmatch.adapters.kafka.admin import ensure_topics
    from psmatch.adapters.kafka.sink import SinkSettings
    from psmatch.service.delivery import CoveredEvents, transactional_prefix
    from psmatch.service.task_contract import output_records

    config = make_config()
    out = config.notifications_topic
    ensure_topics(config.bootstrap_servers, {config.events_topic: {}, out: {}}, partitions=1)
    prefix = transactional_prefix(config.checkpoint_location, "n")

    def events(first: int, last: int) -> pa.RecordBatch:
        offsets = list(range(first, last))
        return pa.RecordBatch.from_pydict({"partition": pa.array([0] * len(offsets), pa.int32()),
                                           "offset": pa.array(offsets, pa.int64())})  # fmt: skip

    def task(batch_id: int) -> ExactlyOnceTask:
        return ExactlyOnceTask(SinkSettings(config.bootstrap_servers), prefix,
                               config.events_topic, batch_id, 0, 1)  # fmt: skip

    earlier = task(0)
    try:
        assert list(earlier.unseen(iter([events(0, 5)]))) == [events(0, 5)]
        earlier.write(output_records(out, [(b"k", b"first")]))
        earlier.commit()  # the marker: offset 5
    finally:
        earlier.close()
    again = task(1)
    try:
        assert list(again.unseen(iter([events(3, 8)]))) == [events(3, 8)]  # whole
        with pytest.raises(CoveredEvents) as covered:
            again.write(output_records(out, [(b"k", b"again")]))
        assert covered.value.batches == [events(3, 8)]
        assert list(again.unseen(iter(covered.value.batches))) == [events(5, 8)]
        assert again.replayed == 2
        again.write(output_records(out, [(b"k", b"second")]))
        again.commit()
    finally:
        again.close()
    with TopicReader(config.bootstrap_servers, out) as reader:
        assert [r.value for r in reader.read_to_end()] == [b"first", b"second"]


def test_the_delivery_mode_is_a_setting_checked_at_load() -> None:
    from psmatch.service.errors import ConfigError

    assert ServiceConfig().delivery == "at-least-once"
    assert ServiceConfig.load(env={"PSMATCH_DELIVERY": "exactly-once"}).delivery == "exactly-once"
    with pytest.raises(ConfigError, match="delivery must be one of"):
        ServiceConfig.load(overrides={"delivery": "exactly-twice"})
