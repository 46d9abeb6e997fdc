"""The record formats (pure): subscription and event decoding with their reject codes,
the poison records of issue 8, resource limits, the notification and rejected-record
encoders and decoders, and the worker's per-record barrier."""

from __future__ import annotations

import hashlib
import json
import pickle
import subprocess
import sys
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psmatch import make_matcher
from psmatch.events import MAX_DEPTH, flatten_event
from psmatch.service import tasks
from psmatch.service.errors import ConfigError
from psmatch.service.records.common import (
    MAX_NESTING,
    NOTIFICATION_OVERHEAD,
    REJECT_CODES,
    SINK_RECORD_LIMIT,
    RecordError,
    RecordLimits,
    nesting_depth,
    record_error,
)
from psmatch.service.records.events import event_id, parse_event
from psmatch.service.records.normal_forms import dump_normal_form
from psmatch.service.records.notifications import (
    notification_head,
    notification_tail,
    notification_value,
    parse_notification,
)
from psmatch.service.records.rejected import (
    REJECT_PREFIX_BYTES,
    parse_rejected,
    rejected_key,
    rejected_value,
)
from psmatch.service.records.subscriptions import (
    dumps_record,
    load_stored,
    parse_subscription_record,
    subscription_value,
)
from psmatch.service.task_contract import OUTPUT_SCHEMA, TaskMetrics, WorkerSettings
from psmatch.service.tasks import match_rows
from psmatch.service.worker_index import WorkerIndex


def code_of(call: Any, *args: Any) -> str:
    with pytest.raises(RecordError) as info:
        call(*args)
    assert info.value.code in REJECT_CODES
    return info.value.code


def deep_object(depth: int) -> bytes:
    """``{"a":{"a":...1...}}`` with ``depth`` objects."""
    return b'{"a":' * depth + b"1" + b"}" * depth


# -- subscriptions ------------------------------------------------------------------------


def test_a_valid_subscription_keeps_extra_fields_and_its_parsed_expression() -> None:
    change = parse_subscription_record(
        b"s1", b'{"expr": "price < 10", "subscriber": "alice", "channel": "mail"}'
    )
    assert change.sub_id == "s1" and change.record is not None and change.stored is not None
    assert json.loads(change.stored) == {
        "expr": "price < 10", "subscriber": "alice", "extra": {"channel": "mail"},
    }  # fmt: skip
    assert change.record.subscription.evaluate({"price": 5})
    assert load_stored(change.stored) == change.record
    # what a worker catching up from the change log gets: the same, without a parse
    assert change.normal_form == dump_normal_form(change.record.subscription)
    assert load_stored(change.stored, change.normal_form) == change.record


def test_a_normal_form_longer_than_the_record_limit_stays_out_of_the_change() -> None:
    """An `in` list repeated in each of 64 conjuncts: a record within the limit whose
    normal form is 64 times as long. The workers parse it instead."""
    values = ", ".join(f"'{i:04}'" for i in range(40))
    expr = f"a in ({values}) and (" + " or ".join(f"b = {i}" for i in range(64)) + ")"
    limits = RecordLimits(max_subscription_bytes=4096)
    change = parse_subscription_record(b"s1", subscription_value(expr, "bob", {}), limits)
    assert change.record is not None and change.stored is not None
    assert len(change.stored) <= 4096 < len(dump_normal_form(change.record.subscription))
    assert change.normal_form is None


def test_a_stored_subscription_with_a_malformed_normal_form_is_a_record_error() -> None:
    stored = dumps_record("a = 1", "bob", {})
    with pytest.raises(RecordError, match="invalid normal form") as caught:
        load_stored(stored, '[[["a",1,[1,true,1,true]]]]')  # a number in a string predicate
    assert caught.value.code == "invalid_record"


STRINGS = st.text(alphabet=st.characters(codec="utf-8"), max_size=8) | st.sampled_from(
    ["", "é", "\x00\x1f\x7f", '"\\', "\u2028", "\U0001F600", "\ud800", "z\udfff"])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(2**63, 2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | STRINGS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(STRINGS, inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=500, deadline=None)
@given(STRINGS, STRINGS, st.dictionaries(STRINGS, JSON, max_size=4))
def test_the_stored_form_is_the_canonical_json_of_the_three_fields(expr, subscriber, extra):
    # sorted keys at every level, compact, not ASCII-escaped: what json.dumps writes,
    # whichever encoder writes extra (floats, big integers and lone surrogates included)
    assert dumps_record(expr, subscriber, extra) == json.dumps(
        {"expr": expr, "subscriber": subscriber, "extra": extra},
        separators=(",", ":"), sort_keys=True, ensure_ascii=False,
    )  # fmt: skip


def test_subscriber_defaults_to_the_id_and_null_deletes() -> None:
    change = parse_subscription_record(b"s1", b'{"expr": "a = 1"}')
    assert change.record is not None and change.record.subscriber == "s1"
    delete = parse_subscription_record(b"s1", None)
    assert delete.record is None and delete.stored is None


def test_the_cli_encoder_round_trips_through_the_decoder() -> None:
    value = subscription_value("a = 1", "bob", {"tags": ["x", 2], "n": None})
    change = parse_subscription_record(b"s", value)
    assert change.record is not None
    assert (change.record.expr, change.record.subscriber) == ("a = 1", "bob")
    assert change.record.extra == {"tags": ["x", 2], "n": None}


@pytest.mark.parametrize(
    ("key", "value", "code", "message"),
    [
        (None, b'{"expr": "a = 1"}', "invalid_record", "needs its subscription id as the key"),
        (b"  ", b'{"expr": "a = 1"}', "invalid_record", "needs its subscription id as the key"),
        (b"\xff", b'{"expr": "a = 1"}', "invalid_unicode", "key is not valid UTF-8"),
        (b"s", b"\xff{}", "invalid_unicode", "value is not valid UTF-8"),
        (b"x" * 1025, b'{"expr": "a = 1"}', "limit_exceeded", "longer than 1024"),
        (b"s", b"{not json", "invalid_json", "not valid JSON"),
        (b"s", b'{"expr": NaN}', "invalid_json", "NaN is not valid JSON"),
        (b"s", b'{"expr": "a = 1", "n": 1e999}', "invalid_json", "out of range"),
        (b"s", b'{"expr": "a = 1"} {}', "invalid_json", "Extra data"),
        (b"s", b"[1, 2]", "invalid_record", "not array"),
        (b"s", b"null", "invalid_record", "not null"),
        (b"s", b'{"subscriber": "x"}', "invalid_record", 'needs "expr".*missing'),
        (b"s", b'{"expr": 5}', "invalid_record", 'needs "expr".*a number'),
        (b"s", b'{"expr": "a = 1", "subscriber": 3}', "invalid_record", "not a number"),
        (b"s", b'{"expr": "a = 1", "subscriber": null}', "invalid_record", "not a null"),
        (b"s", b'{"expr": "a = 1", "subscriber": ""}', "invalid_record", "an empty string"),
        (b"s", b'{"expr": "price < ("}', "invalid_expression", "invalid expression"),
        (b"s", b'{"expr": "a = 1 and a = 2"}', "invalid_expression", "invalid expression"),
        (b"s", json.dumps({"expr": " or ".join(["a = 1"] * 300)}).encode(),
         "limit_exceeded", "expression too large"),
    ],
)  # fmt: skip
def test_bad_subscriptions_are_rejected_with_a_code_and_a_reason(
    key: bytes | None, value: bytes, code: str, message: str
) -> None:
    with pytest.raises(RecordError, match=message) as info:
        parse_subscription_record(key, value)
    assert info.value.code == code


def test_messages_name_json_types_never_python_ones() -> None:
    for value in (b"[1]", b"null", b'"x"', b"true", b"1.5",
                  b'{"expr": "a = 1", "subscriber": [1]}', b'{"expr": {}}'):  # fmt: skip
        with pytest.raises(RecordError) as info:
            parse_subscription_record(b"s", value)
        words = set(str(info.value).replace(",", " ").replace(")", " ").split())
        assert not words & {"NoneType", "list", "dict", "str", "int", "float", "bool"}


# -- the poison records of issue 8 --------------------------------------------------------


@pytest.mark.parametrize("depth", [990, 1000, 5000])
def test_an_event_nested_1000_deep_is_too_deep_not_a_recursion_error(depth: int) -> None:
    assert code_of(parse_event, deep_object(depth)) == "too_deep"


def test_the_nesting_limit_is_the_event_limit_of_index_events() -> None:
    assert MAX_NESTING == MAX_DEPTH == 32
    at_limit = deep_object(MAX_NESTING)
    assert nesting_depth(at_limit) == MAX_NESTING
    flatten_event(json.loads(at_limit))  # within the matcher's own check too
    assert len(parse_event(at_limit)) == 1
    assert code_of(parse_event, deep_object(MAX_NESTING + 1)) == "too_deep"
    sub = b'{"expr": "a = 1", "x": ' + b"[" * (MAX_NESTING - 1) + b"]" * (MAX_NESTING - 1) + b"}"
    at_limit_record = parse_subscription_record(b"s", sub)
    assert at_limit_record.record is not None and at_limit_record.stored is not None
    # stored, its other fields are one level deeper, under "extra": still a worker's
    assert nesting_depth(at_limit_record.stored.encode()) == MAX_NESTING + 1
    assert load_stored(at_limit_record.stored) == at_limit_record.record
    sub = b'{"expr": "a = 1", "x": ' + b"[" * MAX_NESTING + b"]" * MAX_NESTING + b"}"
    assert code_of(parse_subscription_record, b"s", sub) == "too_deep"


def test_a_lone_surrogate_in_the_subscriber_is_invalid_unicode() -> None:
    value = b'{"expr": "a = 1", "subscriber": "x\\udc00y"}'
    with pytest.raises(RecordError, match=r"lone surrogate escape \\udc00") as info:
        parse_subscription_record(b"s", value)
    assert info.value.code == "invalid_unicode"
    for elsewhere in (b'{"expr": "s = \'\\ud800\'"}', b'{"expr": "a = 1", "\\udfff": 1}',
                      b'{"expr": "a = 1", "x": ["\\ud83d"]}'):  # fmt: skip
        assert code_of(parse_subscription_record, b"s", elsewhere) == "invalid_unicode"
    assert code_of(parse_event, b'{"a": "\\udc00"}') == "invalid_unicode"


def test_a_surrogate_pair_and_an_escaped_backslash_are_fine() -> None:
    change = parse_subscription_record(b"s", b'{"expr": "a = 1", "subscriber": "\\ud83d\\ude00"}')
    assert change.record is not None and change.record.subscriber == "\U0001f600"
    assert change.stored is not None and change.stored.encode()
    assert parse_event(b'{"a": "\\\\udc00"}') == {"a": "\\udc00"}


def test_an_array_nested_5000_deep_in_extra_is_too_deep() -> None:
    value = b'{"expr": "a = 1", "extra": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    assert len(value) < 11_000
    assert code_of(parse_subscription_record, b"s", value) == "too_deep"


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"a": "[" * 5000, "b": "\\\"[[[" * 100, "c": [[1]]}).encode()
    assert nesting_depth(text) == 3
    assert parse_event(json.dumps({"a": "{" * 5000}).encode()) == {"a": "{" * 5000}


def test_600_kb_of_binary_garbage_gives_a_rejected_record_that_fits_the_sink() -> None:
    garbage = bytes(range(256)) * 2400  # 614,400 bytes, not UTF-8
    error = RecordError("invalid_unicode", "the value is not valid UTF-8")
    out = rejected_value(error, "psmatch.events", 1, 42, b"k", garbage)
    assert len(out) < 100_000  # base64 of the 64 KiB prefix, not 1.4 MB of U+FFFD
    rec = parse_rejected(out)
    assert rec.code == "invalid_unicode" and rec.truncated
    assert rec.value == garbage[:REJECT_PREFIX_BYTES]
    assert rec.value_size == len(garbage)
    assert rec.value_sha256 == hashlib.sha256(garbage).hexdigest()
    assert rec.key == b"k" and rec.key_size == 1
    assert code_of(parse_event, garbage) == "invalid_unicode"


def test_the_worst_rejected_record_still_fits_the_sink() -> None:
    control = b"\x01" * 900_000  # valid UTF-8 that JSON escapes six-fold
    error = RecordError("internal_error", "\x02" * 100_000)
    value = rejected_value(error, "t" * 249, 0, 0, control, control)
    key = rejected_key(control)
    assert key is not None
    assert len(value) + len(key) < SINK_RECORD_LIMIT
    rec = parse_rejected(value)
    assert rec.truncated and rec.key == rec.value == control[:REJECT_PREFIX_BYTES]
    assert len(rec.reason) == 1000


def test_small_originals_are_recovered_exactly() -> None:
    error = RecordError("invalid_json", "x")
    for key, value in [(None, None), (b"", b""), (b"k\xff", b"\x00\xfe"), (b"\xc3\xa9", b"{}")]:
        rec = parse_rejected(rejected_value(error, "t", 0, 1, key, value))
        assert (rec.key, rec.value, rec.truncated) == (key, value, False)
        if value is not None:
            assert rec.value_sha256 == hashlib.sha256(value).hexdigest()


def test_a_utf8_value_cut_inside_a_character_stays_text() -> None:
    value = "é".encode() * REJECT_PREFIX_BYTES  # two bytes each; the cut splits none
    raw = json.loads(rejected_value(RecordError("too_large", "x"), "t", 0, 0, None, b"a" + value))
    assert raw["value_encoding"] == "utf-8" and raw["truncated"]
    assert len(raw["value"].encode()) == REJECT_PREFIX_BYTES - 1


# -- events -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "code", "message"),
    [
        (None, "invalid_record", "got null"),
        (b"nope", "invalid_json", "not valid JSON"),
        (b"[1]", "invalid_record", "not array"),
        (b'"text"', "invalid_record", "not string"),
        (b"\xfe\xff", "invalid_unicode", "not valid UTF-8"),
        (b'{"a": [1]}', "invalid_event", "attribute 'a': arrays"),
        (b'{"a": 1e999}', "invalid_json", "out of range"),
        (b'{"a": 99999999999999999999}', "invalid_event", "64-bit"),
        (b'{"a": {"b": 1}, "a.b": 2}', "invalid_event", "given twice"),
    ],
)
def test_bad_events_are_rejected_with_a_code_and_a_reason(
    value: bytes | None, code: str, message: str
) -> None:
    with pytest.raises(RecordError, match=message) as info:
        parse_event(value)
    assert info.value.code == code


def test_parse_event_returns_the_flat_event() -> None:
    assert parse_event(b'{"a": {"b": 1, "c": null}, "d": "x"}') == {"a.b": 1, "d": "x"}


def test_event_resource_limits() -> None:
    limits = RecordLimits(max_event_attributes=3, max_string_length=5, max_event_bytes=200)
    assert parse_event(b'{"a": 1, "b": {"c": "12345"}}', limits) == {"a": 1, "b.c": "12345"}
    many = json.dumps({f"k{i}": i for i in range(4)}).encode()
    assert code_of(parse_event, many, limits) == "limit_exceeded"
    assert code_of(parse_event, b'{"a": "123456"}', limits) == "limit_exceeded"
    assert code_of(parse_event, b'{"abcdef": 1}', limits) == "limit_exceeded"
    assert code_of(parse_event, b'{"a": "' + b"x" * 300 + b'"}', limits) == "too_large"


def test_the_defaults_accept_a_large_ordinary_event() -> None:
    event = {f"attr{i}": "v" * 100 for i in range(1000)}
    assert len(parse_event(json.dumps(event).encode())) == 1000


def test_a_subscription_that_grows_when_stored_is_too_large() -> None:
    limits = RecordLimits(max_subscription_bytes=1000)
    value = json.dumps({"expr": "a = 1"}).encode()[:-1] + b', "n": [' + b",".join(
        [b"1e15"] * 150) + b"]}"  # fmt: skip
    assert len(value) <= 1000
    with pytest.raises(RecordError, match="once stored") as info:
        parse_subscription_record(b"s", value, limits)
    assert info.value.code == "too_large"
    big = b'{"expr": "a = 1", "x": "' + b"y" * 1000 + b'"}'
    assert code_of(parse_subscription_record, b"s", big, limits) == "too_large"


def test_limits_must_leave_room_for_a_notification() -> None:
    RecordLimits(max_event_bytes=SINK_RECORD_LIMIT - NOTIFICATION_OVERHEAD - 1,
                 max_subscription_bytes=1)  # fmt: skip
    with pytest.raises(ConfigError, match="1 MB"):
        RecordLimits(max_event_bytes=900_000, max_subscription_bytes=200_000)
    with pytest.raises(ConfigError, match="max_event_attributes"):
        RecordLimits(max_event_attributes=0)


def test_event_ids() -> None:
    assert event_id(b"e1", "t", 0, 5) == "e1"
    assert event_id(None, "t", 1, 5) == "t/1/5"
    assert event_id(b"", "t", 1, 5) == "t/1/5"
    assert event_id(b"\xff", "t", 1, 5) == "ff"
    assert code_of(event_id, b"k" * 1025, "t", 0, 0) == "limit_exceeded"


# -- errors -------------------------------------------------------------------------------


def test_record_errors_pickle_and_other_exceptions_become_internal_errors() -> None:
    error = pickle.loads(pickle.dumps(RecordError("too_deep", "deep")))
    assert (error.code, str(error)) == ("too_deep", "deep")
    assert record_error(error) is error
    internal = record_error(KeyError("boom"))
    assert internal.code == "internal_error" and "KeyError" in str(internal)


# -- the worker ---------------------------------------------------------------------------

SETTINGS = WorkerSettings("redis://unused", "p:", 10, "scan", "notif", "rej")


def indexed(**subs: str) -> WorkerIndex:
    index = WorkerIndex(make_matcher("scan"))
    for sub_id, expr in subs.items():
        change = parse_subscription_record(
            sub_id.encode(), subscription_value(expr, "alice", {"n": [1, "two"]})
        )
        assert change.stored is not None
        index.put(sub_id, change.stored)
    return index


def records_of(index: WorkerIndex, rows: list[tuple[Any, ...]], metrics: TaskMetrics
               ) -> dict[str, list[Any]]:  # fmt: skip
    """Every output record of ``match_rows``, as columns."""
    return pa.Table.from_batches(list(match_rows(index, SETTINGS, rows, metrics)),
                                 OUTPUT_SCHEMA).to_pydict()  # fmt: skip


def test_notifications_decode_to_what_was_matched() -> None:
    index = indexed(s1="price < 10")
    metrics = TaskMetrics()
    rows = [
        (b"e1", b' {"price": 5, "name": "\\u00e9"} ', "events", 0, 3, 1000),
        (None, b'{"price": 50}', "events", 0, 4, 1001),
        (None, b"{bad", "events", 1, 0, 1002),
    ]
    records = records_of(index, rows, metrics)
    topics, keys, values = records["topic"], records["key"], records["value"]
    out = {t: (k, v) for t, k, v in zip(topics, keys, values, strict=True)}
    assert sorted(topics) == ["notif", "rej"]
    assert out["notif"][0] == b"s1" and out["rej"][0] is None
    n = parse_notification(out["notif"][1])
    assert (n.subscription_id, n.subscriber, n.extra) == ("s1", "alice", {"n": [1, "two"]})
    assert (n.event_id, n.event, n.event_timestamp) == ("e1", {"price": 5, "name": "é"}, 1000)
    assert n.matched_at.endswith("Z")
    rejected = parse_rejected(out["rej"][1])
    assert rejected.code == "invalid_json" and rejected.value == b"{bad"
    assert (metrics.events, metrics.rejected, metrics.notifications) == (3, 1, 1)
    assert metrics.rejects == {"invalid_json": 1}
    assert metrics.samples == ["events/1/0 invalid_json: the value is not valid JSON: "
                               "Expecting property name enclosed in double quotes: line 1 "
                               "column 2 (char 1)"]  # fmt: skip


def test_notification_records_are_assembled_a_chunk_at_a_time_as_they_are_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two events matching 4 subscriptions each: 8 notifications in chunks of 3, each
    assembled only once the one before it was taken; then the reject."""
    monkeypatch.setattr(tasks, "RECORDS_CHUNK", 3)
    assembled: list[int] = []
    records = tasks.notification_records

    def counted(*args: Any) -> list[pa.RecordBatch]:
        assembled.append(len(args[2]))
        return records(*args)

    monkeypatch.setattr(tasks, "notification_records", counted)
    index = indexed(**{f"s{i}": f"a >= {i}" for i in range(6)})
    rows = [(b"e1", b'{"a": 3}', "ev", 0, 0, 1), (None, b"[", "ev", 0, 1, 2),
            (b"e2", b'{"a": 3}', "ev", 0, 2, 3)]  # fmt: skip
    metrics = TaskMetrics()
    batches = match_rows(index, SETTINGS, rows, metrics)
    first = next(batches)
    assert assembled == [3] and first.num_rows == 3
    rest = list(batches)
    assert assembled == [3, 3, 2] and [b.num_rows for b in rest] == [3, 2, 1]
    table = pa.Table.from_batches([first, *rest], OUTPUT_SCHEMA).to_pydict()
    assert table["topic"] == ["notif"] * 8 + ["rej"]
    notified = [(parse_notification(v).event_id, k) for k, v in
                zip(table["key"][:8], table["value"][:8], strict=True)]  # fmt: skip
    assert sorted(notified) == [(e, f"s{i}".encode()) for e in ("e1", "e2") for i in range(4)]
    assert (metrics.events, metrics.notifications, metrics.rejected) == (3, 8, 1)


def test_the_notification_encoder_is_one_head_per_subscription_and_one_tail_per_event() -> None:
    change = parse_subscription_record(b"s\n1", subscription_value("a = 1", 'q"', {"k": "\x01"}))
    assert change.record is not None
    value = notification_value("s\n1", notification_head("s\n1", change.record), notification_tail(
        "e\t", b'{"a": 1}', "2026-01-01T00:00:00.000Z", None
    ))
    assert json.loads(value) == {
        "subscription_id": "s\n1", "subscriber": 'q"', "extra": {"k": "\x01"},
        "event_id": "e\t", "event": {"a": 1}, "matched_at": "2026-01-01T00:00:00.000Z",
        "event_timestamp": None,
    }  # fmt: skip
    assert parse_notification(value).subscription_id == "s\n1"


class ExplodingMatcher:
    """A matcher that fails on events with ``boom`` (a fake for the barrier, pure logic)."""

    def __init__(self) -> None:
        self.inner = make_matcher("scan")

    def __getattr__(self, name: str) -> Any:
        for part in (self.inner, self.inner.internal):  # the matcher, then its slot path
            if hasattr(part, name):
                return getattr(part, name)
        raise AttributeError(name)

    def __contains__(self, sub_id: object) -> bool:
        return sub_id in self.inner

    @property
    def internal(self) -> ExplodingMatcher:
        return self  # the slot path: match_flat_slots explodes, the rest is the inner one's

    def match_flat_slots(self, flat_events: list[dict[str, Any]]) -> tuple[Any, Any]:
        if any("boom" in e for e in flat_events):
            raise ZeroDivisionError("division by zero")
        return self.inner.internal.match_flat_slots(flat_events)


def test_an_event_the_matcher_fails_on_is_rejected_and_the_others_are_matched() -> None:
    index = indexed(s1="a >= 0")
    index.matcher = ExplodingMatcher()  # type: ignore[assignment]
    index.matcher.inner.add("s1", "a >= 0")
    metrics = TaskMetrics()
    rows = [(b"e1", b'{"a": 1}', "ev", 0, 0, 1), (b"e2", b'{"a": 2, "boom": 1}', "ev", 0, 1, 1),
            (b"e3", b'{"a": 3}', "ev", 0, 2, 1)]  # fmt: skip
    records = records_of(index, rows, metrics)
    topics, keys, values = records["topic"], records["key"], records["value"]
    assert sorted(zip(topics, keys, strict=True)) == [("notif", b"s1"), ("notif", b"s1"),
                                                      ("rej", b"e2")]  # fmt: skip
    rejected = parse_rejected(values[topics.index("rej")])
    assert rejected.code == "internal_error" and "ZeroDivisionError" in rejected.reason
    assert metrics.rejects == {"internal_error": 1} and metrics.notifications == 2


def test_a_bad_stored_subscription_is_left_out_of_the_worker_index() -> None:
    index = indexed(s1="a = 1")
    index.put("s1", '{"expr": "a <", "subscriber": "x", "extra": {}}')
    index.put("s2", "[1]")
    index.check()
    assert "s1" not in index.matcher and len(index.matcher) == 0 and index.heads.get(0) is None


def test_a_stored_id_that_is_not_unicode_is_left_out_in_bulk_and_one_by_one() -> None:
    """Redis holds what the driver validated, but a hand-edited store may hold an id no
    notification key can be made of: it is left out, and the others are indexed."""
    index = indexed(s1="a = 1")
    stored = dumps_record("a = 2", "bob", {})
    index.load([("\udcff", stored, None), ("s2", stored, None)])
    index.put("\udc80", stored)
    index.check()
    assert set(index.matcher) == {"s1", "s2"}


def test_task_metrics_merge_sums_counts_and_keeps_the_largest_index() -> None:
    a = TaskMetrics(tasks=1, events=3, lag=2, index_bytes=10, rejects={"too_deep": 1},
                    samples=["x"])  # fmt: skip
    b = TaskMetrics(tasks=1, events=4, lag=5, index_bytes=7,
                    rejects={"too_deep": 2, "invalid_json": 1},
                    samples=["y", "z", "w"])  # fmt: skip
    merged = pickle.loads(pickle.dumps(a)).merge(b)
    assert (merged.tasks, merged.events, merged.lag, merged.index_bytes) == (2, 7, 5, 10)
    assert merged.rejects == {"too_deep": 3, "invalid_json": 1}
    assert merged.samples == ["x", "y", "z"]


def test_a_worker_matches_and_writes_its_records_without_loading_pandas() -> None:
    """pandas and ``pyarrow.compute`` cost every Python worker that loads them 50 MiB
    resident (:mod:`psmatch.adapters.arrow`): nothing on the path of an event, from decoding to
    its notification and reject records and the sink's slicing of them by topic, does."""
    code = """
import sys
from psmatch import make_matcher
from psmatch.adapters.kafka.sink import topic_runs
from psmatch.service.records.subscriptions import parse_subscription_record, subscription_value
from psmatch.service.task_contract import TaskMetrics, WorkerSettings
from psmatch.service.tasks import match_rows
from psmatch.service.worker_index import WorkerIndex
index = WorkerIndex(make_matcher("psthash"))
index.put("s1", parse_subscription_record(b"s1", subscription_value("a = 1", "x", {})).stored)
settings = WorkerSettings("redis://unused", "p:", 10, "psthash", "notif", "rej")
rows = [(b"e1", b'{"a": 1}', "ev", 0, 0, 1), (None, b"[", "ev", 0, 1, 2)]
runs = [topic_runs(batch.column("topic")) for batch in match_rows(index, settings, rows,
                                                                   TaskMetrics())]
assert runs == [[("notif", 0, 1)], [("rej", 0, 1)]], runs
assert "pandas" not in sys.modules and "pyarrow.compute" not in sys.modules
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
