"""Property tests of the record decoders and encoders over arbitrary bytes and arbitrary
JSON (deep, huge, with lone surrogates, NaN and out-of-range numbers): the only exception
that can escape a decoder is :class:`RecordError` with a code from the closed set, what
is accepted round-trips, and every rejected record fits the sink."""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from psmatch.service.records.common import (
    MAX_NESTING,
    REJECT_CODES,
    SINK_RECORD_LIMIT,
    RecordError,
    loads_bounded,
    loads_checked,
    nesting_depth,
)
from psmatch.service.records.events import parse_event
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
    load_stored,
    parse_subscription_record,
    subscription_value,
)

SETTINGS = settings(
    max_examples=200, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)  # fmt: skip

LONE_SURROGATES = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"])
TEXT = st.one_of(
    st.text(max_size=20),
    st.text(alphabet='[]{}"\\:,', max_size=20),  # brackets and escapes inside strings
    st.tuples(st.text(max_size=5), LONE_SURROGATES, st.text(max_size=5)).map("".join),
)
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=2**63 - 5, max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), TEXT,
)  # fmt: skip
JSON_VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=30,
)


def wrap(value: Any, depth: int, rng: random.Random) -> Any:
    """``value`` inside ``depth`` arrays and objects, chosen at random."""
    for _ in range(depth):
        value = [value] if rng.random() < 0.5 else {"k": value}
    return value


def depth_of(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    return 0


def encodings(value: Any) -> list[bytes]:
    """The JSON text of ``value`` as a producer might send it: ASCII with escapes (lone
    surrogates as \\udXXX, NaN as NaN), and raw UTF-8 where a surrogate cannot go (so
    those bytes are not UTF-8)."""
    ascii_text = json.dumps(value, ensure_ascii=True).encode()
    raw = json.dumps(value, ensure_ascii=False).encode("utf-8", errors="surrogatepass")
    return [ascii_text, raw]


def only_record_errors(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except RecordError as error:
        assert error.code in REJECT_CODES, error.code
        assert str(error)
        return error


def check_decoders(value: bytes | None, key: bytes | None = b"k") -> None:
    event = only_record_errors(parse_event, value)
    if not isinstance(event, RecordError):
        assert isinstance(event, dict)
        json.dumps(event, allow_nan=False).encode("utf-8")  # storable, re-encodable
    change = only_record_errors(parse_subscription_record, key, value)
    if not isinstance(change, RecordError) and change.stored is not None:
        change.stored.encode("utf-8")
        assert load_stored(change.stored) == change.record
        if change.normal_form is not None:
            assert load_stored(change.stored, change.normal_form) == change.record


@SETTINGS
@given(st.binary(max_size=2000), st.one_of(st.none(), st.binary(max_size=50)))
@example(bytes(range(256)) * 2400, b"k")  # 600 KB of binary garbage
@example(b"[" * 1_000_000, b"k")
@example(b'{"a":' * 100_000, None)
@example(b'"\\' * 50_000, b"k")  # escaped quotes that never close
def test_arbitrary_bytes_raise_only_record_errors(value: bytes, key: bytes | None) -> None:
    check_decoders(value, key)


@SETTINGS
@given(JSON_VALUES, st.integers(min_value=0, max_value=3000), st.randoms(use_true_random=False))
def test_arbitrary_json_raises_only_record_errors(
    value: Any, depth: int, rng: random.Random
) -> None:
    for wrapped in (wrap(value, depth, rng), {"expr": "a = 1", "extra": wrap(value, depth, rng)},
                    {"expr": "a = 1", "subscriber": value}):  # fmt: skip
        for data in encodings(wrapped):
            check_decoders(data)


def decoded(decode: Any, data: bytes) -> tuple[str, Any]:
    """What ``decode`` makes of ``data``: its value (with each float's sign and repr, so
    that -0.0 and 0.0, 1 and 1.0 differ) or its error's code and message."""
    try:
        return "value", json.dumps(decode(data, "the value"), sort_keys=True, default=repr,
                                   ensure_ascii=False, allow_nan=True)
    except RecordError as error:
        return error.code, str(error)


@SETTINGS
@given(st.one_of(JSON_VALUES.flatmap(lambda v: st.sampled_from(encodings(v))),
                 st.binary(max_size=300)))
@example(b"18446744073709551616")  # orjson alone would make these two floats
@example(b'{"a": -9223372036854775809}')
@example(b'{"a": "\\udc00"}')
@example(b"1e999")
def test_the_fast_decoder_agrees_with_the_checked_one(data: bytes) -> None:
    """Which decoder ran never shows: same value, same code, same message."""
    assert decoded(loads_bounded, data) == decoded(loads_checked, data)


@SETTINGS
@given(JSON_VALUES, st.integers(min_value=0, max_value=60), st.randoms(use_true_random=False))
def test_nesting_is_measured_exactly_and_bounded_before_decoding(
    value: Any, depth: int, rng: random.Random
) -> None:
    event = {"v": wrap(value, depth, rng)}
    expected = depth_of(event)
    for data in encodings(event):
        assert nesting_depth(data) == expected
        result = only_record_errors(parse_event, data)
        if expected > MAX_NESTING:
            assert isinstance(result, RecordError)
            assert result.code in ("too_deep", "invalid_unicode")  # raw surrogates: not UTF-8
        else:
            assert not isinstance(result, RecordError) or result.code != "too_deep"


@SETTINGS
@given(
    st.one_of(st.none(), st.binary(max_size=300)),
    st.one_of(st.none(), st.binary(max_size=300), st.text(max_size=300).map(str.encode)),
    st.sampled_from(REJECT_CODES),
    st.text(max_size=2000),
)
@example(b"\x01" * 900_000, b"\x01" * 900_000, "internal_error", "\x02" * 5000)
@example(bytes(range(256)) * 3000, "é".encode() * 400_000, "too_large", "x")
def test_every_rejected_record_fits_and_keeps_the_original(
    key: bytes | None, value: bytes | None, code: Any, reason: str
) -> None:
    out = rejected_value(RecordError(code, reason), "topic", 3, 7, key, value)
    rkey = rejected_key(key)
    assert len(out) + (0 if rkey is None else len(rkey)) < SINK_RECORD_LIMIT
    rec = parse_rejected(out)
    assert (rec.code, rec.topic, rec.partition, rec.offset) == (code, "topic", 3, 7)
    for original, embedded, size, digest in ((key, rec.key, rec.key_size, rec.key_sha256),
                                             (value, rec.value, rec.value_size,
                                              rec.value_sha256)):  # fmt: skip
        if original is None:
            assert embedded is None and size is None and digest is None
            continue
        assert embedded is not None and original.startswith(embedded)
        assert size == len(original) and digest == hashlib.sha256(original).hexdigest()
        if len(original) <= REJECT_PREFIX_BYTES:
            assert embedded == original
        else:
            assert len(original[len(embedded):]) > 0 and rec.truncated
            assert len(embedded) >= REJECT_PREFIX_BYTES - 3


VALID_TEXT = st.text(max_size=30)  # no lone surrogates: what a valid record can hold
VALID_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | VALID_TEXT,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(VALID_TEXT, children,
                                                                      max_size=3),
    max_leaves=15,
)  # fmt: skip


@SETTINGS
@given(
    VALID_TEXT.filter(str.strip), st.none() | VALID_TEXT.filter(bool),
    st.dictionaries(VALID_TEXT.filter(lambda k: k not in ("expr", "subscriber")), VALID_JSON,
                    max_size=4),
    VALID_TEXT, st.dictionaries(VALID_TEXT, st.integers(-(2**63), 2**63 - 1), max_size=4),
    st.one_of(st.none(), st.integers(0, 2**62)),
)  # fmt: skip
def test_a_notification_decodes_to_its_subscription_and_event(
    sub_id: str, subscriber: str | None, extra: dict[str, Any], ev_id: str,
    event: dict[str, int], timestamp: int | None,
) -> None:
    """The subscriber named, or by default the id (a head that leaves it out)."""
    subscriber = sub_id if subscriber is None else subscriber
    change = parse_subscription_record(sub_id.encode(),
                                       subscription_value("a = 1", subscriber, extra))  # fmt: skip
    assert change.stored is not None
    record = load_stored(change.stored)  # as a worker gets it from Redis
    event_json = json.dumps(event).encode()
    value = notification_value(sub_id, notification_head(sub_id, record), notification_tail(
        ev_id, event_json, "2026-01-01T00:00:00.000Z", timestamp
    ))
    assert json.loads(value) == {
        "subscription_id": sub_id, "subscriber": subscriber, "extra": extra,
        "event_id": ev_id, "event": event, "matched_at": "2026-01-01T00:00:00.000Z",
        "event_timestamp": timestamp,
    }  # fmt: skip
    assert parse_notification(value).extra == extra
