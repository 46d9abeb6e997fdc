"""The query's checkpoint as local files (:mod:`psmatch.service.checkpoint`): the offset
ranges each batch reads of the subscriptions topics, from the query's offset log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from psmatch.service.checkpoint import subscription_ranges
from psmatch.service.config import ServiceConfig
from psmatch.service.job import subscription_topics


def write_offsets(checkpoint: Path, batch_id: int, offsets: dict[str, dict[str, int]]) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    lines = ["v1", json.dumps({"batchWatermarkMs": 0}), json.dumps(offsets)]
    (checkpoint / "offsets" / str(batch_id)).write_text("\n".join(lines))


def test_the_ranges_are_those_of_the_partitions_that_moved(tmp_path: Path) -> None:
    write_offsets(tmp_path, 4, {"subs": {"0": 7, "1": 3}, "events": {"0": 10, "1": 9}})
    write_offsets(tmp_path, 5, {"subs": {"0": 7, "1": 3}, "events": {"0": 12, "1": 9}})
    assert subscription_ranges(str(tmp_path), 5, "subs".__eq__) == {}
    assert subscription_ranges(str(tmp_path), 5, "events".__eq__) == {("events", 0): (10, 12)}
    assert subscription_ranges(f"file://{tmp_path}", 5, "subs".__eq__) == {}


def test_the_tenants_topics_are_read_where_one_of_them_moved(tmp_path: Path) -> None:
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
    assert subscription_ranges(str(tmp_path), 5, tenants) == {("subs.bob", 0): (1, 2)}
    assert subscription_ranges(str(tmp_path), 6, tenants) == {}
    assert subscription_ranges(str(tmp_path), 7, tenants) is None  # a tenant added


@pytest.mark.parametrize(
    ("case", "batch_id"),
    [("the first batch", 0), ("a partition added", 7),
     ("the previous file is gone", 9), ("this batch's file is gone", 10),
     ("a format Spark may write one day", 12), ("the topic is new", 15),
     ("a truncated file", 17)],
)  # fmt: skip
def test_whenever_unsure_the_ranges_are_not_told(
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
    assert subscription_ranges(str(tmp_path), batch_id, "subs".__eq__) is None, case
    assert subscription_ranges(str(tmp_path), 6, "subs".__eq__) == {("subs", 0): (7, 8)}


def test_a_checkpoint_that_is_not_a_local_path_tells_no_ranges() -> None:
    assert subscription_ranges("s3a://bucket/checkpoint", 5, "subs".__eq__) is None
