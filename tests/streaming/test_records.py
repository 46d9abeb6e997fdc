"""The topic formats: subscription and event validation, notification encoding (pure)."""

from __future__ import annotations

import json

import pytest

from connectors.state import dumps_record
from streaming.records import (
    RecordError,
    event_id,
    notification_value,
    parse_event,
    parse_subscription_record,
    rejected_value,
)
from streaming.worker import N_METRICS, WorkerIndex, WorkerSettings, match_rows


def test_a_valid_subscription_keeps_extra_fields() -> None:
    change = parse_subscription_record(
        b"s1", b'{"expr": "price < 10", "subscriber": "alice", "channel": "mail"}'
    )
    assert change.sub_id == "s1"
    assert change.record is not None
    assert json.loads(change.record) == {
        "expr": "price < 10", "subscriber": "alice", "extra": {"channel": "mail"},
    }  # fmt: skip


def test_subscriber_defaults_to_the_id_and_null_deletes() -> None:
    change = parse_subscription_record(b"s1", b'{"expr": "a = 1"}')
    assert change.record is not None and json.loads(change.record)["subscriber"] == "s1"
    assert parse_subscription_record(b"s1", None).record is None


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (None, b'{"expr": "a = 1"}', "needs its subscription id as the key"),
        (b"  ", b'{"expr": "a = 1"}', "needs its subscription id as the key"),
        (b"\xff", b'{"expr": "a = 1"}', "key is not valid UTF-8"),
        (b"s", b"{not json", "not valid JSON"),
        (b"s", b'{"expr": NaN}', "not valid JSON"),
        (b"s", b"[1, 2]", "must be a JSON object"),
        (b"s", b'{"subscriber": "x"}', 'needs "expr"'),
        (b"s", b'{"expr": 5}', 'needs "expr"'),
        (b"s", b'{"expr": "a = 1", "subscriber": 3}', '"subscriber" must be'),
        (b"s", b'{"expr": "price < ("}', "invalid expression"),
    ],
)
def test_bad_subscriptions_are_rejected_with_a_reason(
    key: bytes | None, value: bytes, reason: str
) -> None:
    with pytest.raises(RecordError, match=reason):
        parse_subscription_record(key, value)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "got null"),
        (b"nope", "not valid JSON"),
        (b"[1]", "must be a JSON object"),
        (b'"text"', "must be a JSON object"),
        (b"\xfe\xff", "not valid UTF-8"),
    ],
)
def test_bad_events_are_rejected_with_a_reason(value: bytes | None, reason: str) -> None:
    with pytest.raises(RecordError, match=reason):
        parse_event(value)


def test_event_ids() -> None:
    assert event_id(b"e1", "t", 0, 5) == "e1"
    assert event_id(None, "t", 1, 5) == "t/1/5"
    assert event_id(b"", "t", 1, 5) == "t/1/5"


def test_rejected_value_carries_the_original() -> None:
    value = json.loads(rejected_value("bad", "events", 1, 7, b"k", b"\xffx"))
    assert value["reason"] == "bad"
    assert (value["topic"], value["partition"], value["offset"]) == ("events", 1, 7)
    assert value["key"] == "k" and value["value"].endswith("x")


def test_worker_encoding_equals_the_reference_encoding() -> None:
    from index import make_matcher

    settings = WorkerSettings("redis://unused", "p:", 10, "scan", "notif", "rej")
    index = WorkerIndex(make_matcher("scan"))
    record = dumps_record("price < 10", "alice", {"n": [1, "two"]})
    index.put("s1", record)
    metrics = [0.0] * N_METRICS
    rows = [
        (b"e1", b' {"price": 5, "name": "\\u00e9"} ', "events", 0, 3, 1000),
        (None, b'{"price": 50}', "events", 0, 4, 1001),
        (None, b"{bad", "events", 1, 0, 1002),
    ]
    topics, keys, values = match_rows(index, settings, rows, metrics)
    out = {t: (k, v) for t, k, v in zip(topics, keys, values, strict=True)}
    assert sorted(topics) == ["notif", "rej"]
    assert out["notif"][0] == b"s1" and out["rej"][0] is None
    got = json.loads(out["notif"][1])
    want = json.loads(
        notification_value(
            "s1", json.loads(record), "e1", {"price": 5, "name": "é"}, got["matched_at"], 1000
        )
    )
    assert got == want
    assert json.loads(out["rej"][1])["reason"].startswith("the value is not valid JSON")
    assert metrics[:3] == [3, 1, 1]
