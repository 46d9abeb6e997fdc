"""The record formats of the service's topics and of its Redis state: one owner, one
encoder and one decoder for each (pure logic, no I/O).

* ``psmatch.subscriptions`` — key = subscription id; value = JSON object
  ``{"expr": "<expression>", "subscriber": "<who>", ...}``; other fields are kept and
  echoed in notifications under ``"extra"``; a null value (tombstone) deletes.
  Encoder :func:`subscription_value`, decoder :func:`parse_subscription_record`.
* the stored subscription (a Redis hash value and change-log entry, see
  :mod:`psmatch.adapters.state`) — canonical JSON ``{"expr", "extra", "subscriber"}``.
  Encoder :func:`dumps_record`, decoder :func:`load_stored`; beside it in the change log,
  the expression's normal form (:attr:`SubscriptionChange.normal_form`, whose text
  :mod:`psmatch.language` owns), so that a worker loads it instead of parsing.
* ``psmatch.events`` — value = JSON object of attributes; key = event id, else the id is
  ``<topic>/<partition>/<offset>``. Decoder :func:`parse_event` (events are the
  producers' own JSON; the service never re-encodes them).
* ``psmatch.notifications`` — key = subscription id; value = JSON
  ``{"subscription_id", "subscriber", "extra", "event_id", "event", "matched_at",
  "event_timestamp"}``. Encoder :func:`notification_value`: :data:`NOTIFICATION_PREFIX`,
  the id, :func:`notification_head` (per subscription, computed once) and
  :func:`notification_tail` (per event); decoder :func:`parse_notification`.
* ``psmatch.rejected`` — key = the original key (at most its first
  :data:`REJECT_PREFIX_BYTES`); value = JSON ``{"code", "reason", "topic", "partition",
  "offset", "key", "key_encoding", "key_size", "key_sha256", "value", ...,
  "truncated", "rejected_at"}``. Encoder :func:`rejected_value`, decoder
  :func:`parse_rejected`. It always fits the Kafka sink, whatever was rejected.

Every rejection is a :class:`RecordError` carrying a stable ``code`` from
:data:`REJECT_CODES` beside its message. Decoding is bounded before anything recurses:
JSON nesting is checked on the raw bytes (:data:`MAX_NESTING`), sizes and counts against
:class:`RecordLimits`, and strings must be valid Unicode (no lone surrogate escapes), so
that no record, however built, raises anything but :class:`RecordError`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from json.encoder import encode_basestring as _encode_string
from typing import Any, Literal, Protocol, get_args

import numpy as np
import orjson

from psmatch.errors import ExpressionError, ExpressionLimitError, PsmatchError
from psmatch.events import MAX_DEPTH, FlatEvent, flatten_event
from psmatch.language import Subscription, parse_subscription
from psmatch.language.encoding import dump_normal_form, load_normal_form
from psmatch.service.errors import ConfigError

RejectCode = Literal[
    "invalid_unicode",
    "invalid_json",
    "too_deep",
    "too_large",
    "invalid_record",
    "invalid_expression",
    "invalid_event",
    "limit_exceeded",
    "internal_error",
]
REJECT_CODES: tuple[RejectCode, ...] = get_args(RejectCode)
"""The closed set of reject codes (the ``code`` field and the metrics' ``reason`` label)."""

MAX_ID_LENGTH = 1024
"""Longest subscription id, in characters."""
MAX_NESTING = MAX_DEPTH
"""Deepest nesting of JSON arrays and objects in a record value, the record's own object
counting as the first level: the one limit of events and subscription records alike,
:data:`psmatch.events.MAX_DEPTH` (32), checked on the raw text."""

MAX_STORED_NESTING = MAX_NESTING + 1
"""Deepest nesting of a stored subscription: a record's other fields go one level deeper,
under ``"extra"``, so a record at :data:`MAX_NESTING` is stored one level deeper."""

DEFAULT_MAX_EVENT_BYTES = 768 * 1024
DEFAULT_MAX_SUBSCRIPTION_BYTES = 128 * 1024
DEFAULT_MAX_EVENT_ATTRIBUTES = 1000
DEFAULT_MAX_STRING_LENGTH = 65_536

SINK_RECORD_LIMIT = 1_000_000
"""Bytes a record written to Kafka must stay under (the broker's and the producer's
default limit is 1 MiB; the rest is left for Kafka's own record overhead)."""
NOTIFICATION_OVERHEAD = 20_000
"""Bytes of a notification besides its stored subscription and its event: field names,
timestamps, and the two ids (at most :data:`MAX_ID_LENGTH` characters each, up to six
bytes apiece once escaped as JSON) and the Kafka key."""
REJECT_PREFIX_BYTES = 64 * 1024
"""Most bytes of the original key, and of the original value, a rejected record embeds."""
MAX_REASON_CHARS = 1000
"""Longest reason message in a rejected record (messages may quote the record)."""


class RecordError(PsmatchError, ValueError):
    """A Kafka record the service cannot use: ``code`` (one of :data:`REJECT_CODES`) and
    the message, the reason written to the rejected topic."""

    def __init__(self, code: RejectCode, message: str) -> None:
        super().__init__(message)
        self.code = code

    def __reduce__(self) -> tuple[Any, ...]:  # pickled from Spark workers
        return (RecordError, (self.code, str(self)))


def record_error(exc: Exception) -> RecordError:
    """The reject for any exception raised while decoding, validating or applying ONE
    record: itself if it is a :class:`RecordError`, else ``internal_error`` naming the
    exception type. Callers wrap only per-record work in this barrier, never a Redis or
    Kafka call, so an infrastructure fault is never turned into a reject."""
    if isinstance(exc, RecordError):
        return exc
    return RecordError("internal_error", f"{type(exc).__name__}: {exc}")


class LimitSettings(Protocol):
    """Where the limits are configured (:class:`psmatch.service.config.ServiceConfig`, which
    imports this module for their defaults)."""

    @property
    def max_event_bytes(self) -> int: ...
    @property
    def max_subscription_bytes(self) -> int: ...
    @property
    def max_event_attributes(self) -> int: ...
    @property
    def max_string_length(self) -> int: ...


@dataclass(frozen=True, slots=True)
class RecordLimits:
    """Resource bounds on input records (``ServiceConfig`` carries the settings).

    The two byte limits bound every notification (the stored subscription + the event +
    :data:`NOTIFICATION_OVERHEAD`), which must stay under :data:`SINK_RECORD_LIMIT`.
    """

    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    max_subscription_bytes: int = DEFAULT_MAX_SUBSCRIPTION_BYTES
    max_event_attributes: int = DEFAULT_MAX_EVENT_ATTRIBUTES
    max_string_length: int = DEFAULT_MAX_STRING_LENGTH

    @classmethod
    def from_config(cls, config: LimitSettings) -> RecordLimits:
        return cls(config.max_event_bytes, config.max_subscription_bytes,
                   config.max_event_attributes, config.max_string_length)  # fmt: skip

    def __post_init__(self) -> None:
        for name in ("max_event_bytes", "max_subscription_bytes", "max_event_attributes",
                     "max_string_length"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        total = self.max_event_bytes + self.max_subscription_bytes + NOTIFICATION_OVERHEAD
        if total > SINK_RECORD_LIMIT:
            raise ConfigError(
                f"max_event_bytes + max_subscription_bytes must leave room for a notification "
                f"under Kafka's 1 MB record limit: {self.max_event_bytes} + "
                f"{self.max_subscription_bytes} is too much"
            )


DEFAULT_LIMITS = RecordLimits()


# -- bounded JSON decoding ----------------------------------------------------------------

_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number",
               bool: "boolean", type(None): "null"}  # fmt: skip


def json_type(value: Any) -> str:
    """JSON's name for the type of a decoded value (``null``, ``array``, ...)."""
    return _JSON_TYPES.get(type(value), type(value).__name__)


_DELTA = np.zeros(256, np.int8)
_DELTA[[ord("{"), ord("[")]] = 1
_DELTA[[ord("}"), ord("]")]] = -1
_QUOTE, _BACKSLASH = ord('"'), ord("\\")


def nesting_depth(data: bytes) -> int:
    """How deeply arrays and objects nest in the JSON text ``data`` (0 for a scalar).

    Exact for valid JSON and for the valid prefix of invalid JSON (where a parser stops),
    which is all that matters before ``json.loads`` recurses. Cost: a few numpy passes
    over the bytes, no Python loop (:func:`loads_bounded` calls it only for texts with
    more than :data:`MAX_NESTING` opening brackets).
    """
    b = np.frombuffer(data, np.uint8)
    if b.size == 0:
        return 0
    quote = b == _QUOTE
    if b"\\" in data:
        # A quote is escaped when an odd run of backslashes precedes it (outside strings a
        # valid JSON text has no backslash).
        idx = np.arange(b.size, dtype=np.int32)
        last_other = np.maximum.accumulate(np.where(b != _BACKSLASH, idx, -1))
        run_before = np.zeros(b.size, np.int32)
        np.subtract(idx[:-1], last_other[:-1], out=run_before[1:])
        quote &= (run_before & 1) == 0
    # each unescaped quote opens or closes a string; brackets inside strings are text
    inside = (np.cumsum(quote, dtype=np.int32) & 1) == 1
    delta = _DELTA[b]
    delta[inside] = 0
    return int(np.cumsum(delta, dtype=np.int32).max())


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {literal[:40]} is out of range")
    return value


def _bad_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# built once: json.loads(text, **hooks) would build a decoder per call (a third of the cost)
_DECODER = json.JSONDecoder(parse_constant=_bad_constant, parse_float=_finite_float)


def _text(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(
            "invalid_unicode", f"{what} is not valid UTF-8 ({exc.reason} at byte {exc.start})"
        ) from None


def loads_bounded(data: bytes, what: str = "the value", max_nesting: int = MAX_NESTING) -> Any:
    """Decode the JSON bytes ``data``; :class:`RecordError` for anything unusable.

    In order: UTF-8 (``invalid_unicode``), nesting on the raw bytes (``too_deep`` past
    ``max_nesting``, before any decoder recurses), syntax, NaN/Infinity and out-of-range numbers
    (``invalid_json``), lone surrogate escapes such as ``"\\udc00"``
    (``invalid_unicode``: such a string cannot be stored or re-encoded as UTF-8).

    Cost: O(len(data)). Values orjson decodes exactly as the standard library does are
    decoded by orjson (four times faster); the rest, and every refusal, by
    :func:`_loads_checked`, so the result and the error never depend on the path.
    """
    # two C-speed counts settle it for any ordinary record: depth <= opening brackets
    deep = (data.count(b"{") + data.count(b"[") > max_nesting
            and nesting_depth(data) > max_nesting)  # fmt: skip
    if not deep and _LONG_DIGITS not in data.translate(_DIGITS_AS_ZERO):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # refused: the checked path says why, with its code
    return _loads_checked(data, what, max_nesting)


# orjson turns an integer outside [-2**63, 2**64) into a float; the standard library keeps
# it exact (and the event then refuses it): any such literal has 19 or more digits. With
# every digit read as 0, a run of 19 is one substring search: 1 µs for a 265-byte BE-Gen
# event, where the regular expression [0-9]{19} took 5 (it tries a match at each digit).
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * 19


def _loads_checked(data: bytes, what: str, max_nesting: int = MAX_NESTING) -> Any:
    """:func:`loads_bounded` with the standard library's decoder and every check."""
    text = _text(data, what)
    if (data.count(b"{") + data.count(b"[") > max_nesting
            and (depth := nesting_depth(data)) > max_nesting):  # fmt: skip
        raise RecordError(
            "too_deep", f"{what} nests arrays and objects {depth} levels deep; the limit is "
            f"{max_nesting}",
        )  # fmt: skip
    try:
        obj = _DECODER.decode(text)
    except ValueError as exc:  # json.JSONDecodeError, and int/float conversion limits
        raise RecordError("invalid_json", f"{what} is not valid JSON: {exc}") from None
    if _SURROGATE_ESCAPE.search(data):  # rare: only then look for an unpaired one
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise RecordError(
                "invalid_unicode",
                f"{what} holds a lone surrogate escape \\u{ord(exc.object[exc.start]):04x} "
                "(JSON strings must be valid Unicode)",
            ) from None
    return obj


# -- subscriptions ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SubscriptionRecord:
    """A valid subscription: its fields and its parsed expression."""

    expr: str
    subscriber: str
    extra: Mapping[str, Any]
    subscription: Subscription

    def stored(self) -> str:
        """The canonical JSON text the subscription is stored as in Redis."""
        return dumps_record(self.expr, self.subscriber, self.extra)


# built once: json.dumps(obj, **options) would build an encoder per call
_STORED_ENCODER = json.JSONEncoder(separators=(",", ":"), sort_keys=True, ensure_ascii=False)
_VALUE_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dumps_record(expr: str, subscriber: str, extra: Mapping[str, Any]) -> str:
    """The canonical JSON text a subscription is stored as (decoder :func:`load_stored`):
    ``{"expr":...,"extra":...,"subscriber":...}`` as ``json.dumps`` writes it with keys
    sorted at every level, compact and not ASCII-escaped. The outer object is written
    here, in its sorted order, each string as that encoder writes it; ``extra`` (JSON
    values) by :func:`_dumps_extra`."""
    return (f'{{"expr":{_encode_string(expr)},"extra":{_dumps_extra(dict(extra))},'
            f'"subscriber":{_encode_string(subscriber)}}}')  # fmt: skip


def _dumps_extra(extra: dict[str, Any]) -> str:
    """``extra`` as ``json.dumps`` writes it with sorted keys, compact, not ASCII-escaped.

    orjson writes the same text, five times faster, for JSON values without floats (it
    writes ``1e16`` where the standard library writes ``1e+16``); it refuses integers
    past 64 bits, lone surrogates and keys that are not strings, which the standard
    library then writes as before. Cost O(size of extra).
    """
    if not extra:
        return "{}"
    if not _holds_float(extra):
        try:
            return orjson.dumps(extra, option=orjson.OPT_SORT_KEYS).decode()
        except orjson.JSONEncodeError:
            pass
    return _STORED_ENCODER.encode(extra)


def _holds_float(value: Any) -> bool:
    """Whether a float is anywhere in the JSON value ``value``."""
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, (list, tuple)):
        return isinstance(value, float)
    return any(map(_holds_float, value))


@dataclass(frozen=True, slots=True)
class SubscriptionChange:
    """A valid record of the subscriptions topic: a put (``record``, and ``stored``, its
    text for Redis, and ``normal_form``, its expression's DNF for the change log) or a
    delete (all ``None``). ``normal_form`` is ``None`` too for a put whose DNF text is
    longer than the record limit (see :func:`parse_subscription_record`)."""

    sub_id: str
    record: SubscriptionRecord | None = None
    stored: str | None = None
    normal_form: str | None = None


def subscription_value(expr: str, subscriber: str, extra: Mapping[str, Any]) -> bytes:
    """The value of a subscriptions-topic record (what ``psmatch subscribe`` sends)."""
    return _VALUE_ENCODER.encode({**extra, "expr": expr, "subscriber": subscriber}).encode(
        "utf-8", errors="surrogatepass")  # a lone surrogate is the decoder's to refuse


def _parse_expression(expr: str) -> Subscription:
    try:
        return parse_subscription(expr)
    except ExpressionLimitError as exc:
        raise RecordError("limit_exceeded", f"expression too large: {exc}") from None
    except ValueError as exc:  # psmatch.errors.ExpressionError and its subclasses
        raise RecordError("invalid_expression", f"invalid expression: {exc}") from None


def _subscription(obj: Any, default_subscriber: str) -> SubscriptionRecord:
    if not isinstance(obj, dict):
        raise RecordError(
            "invalid_record",
            f'the value must be a JSON object {{"expr": ..., "subscriber": ...}}, '
            f"not {json_type(obj)}",
        )
    expr = obj.get("expr")
    if not isinstance(expr, str) or not expr or expr.isspace():
        got = "missing" if "expr" not in obj else f"a {json_type(expr)}"
        raise RecordError(
            "invalid_record",
            f'the value needs "expr", the subscription expression as a non-empty string '
            f"({got})",
        )
    subscriber = obj.get("subscriber", default_subscriber)
    if not isinstance(subscriber, str) or not subscriber:
        got = "an empty string" if subscriber == "" else f"a {json_type(subscriber)}"
        raise RecordError("invalid_record", f'"subscriber" must be a non-empty string, not {got}')
    extra = obj.copy()
    del extra["expr"]
    extra.pop("subscriber", None)
    return SubscriptionRecord(expr, subscriber, extra, _parse_expression(expr))


def parse_subscription_record(
    key: bytes | None, value: bytes | None, limits: RecordLimits = DEFAULT_LIMITS
) -> SubscriptionChange:
    """Validate a record of the subscriptions topic; :class:`RecordError` if unusable.

    Cost: O(record size), plus parsing the expression.
    """
    sub_id = None if key is None else _text(key, "the key")
    if sub_id is None or sub_id.strip() == "":
        raise RecordError(
            "invalid_record", "a subscription record needs its subscription id as the key"
        )
    if len(sub_id) > MAX_ID_LENGTH:
        raise RecordError(
            "limit_exceeded", f"the subscription id is longer than {MAX_ID_LENGTH} characters"
        )
    if value is None:
        return SubscriptionChange(sub_id)
    limit = limits.max_subscription_bytes
    if len(value) > limit:
        raise RecordError("too_large", f"the value is {len(value)} bytes; a subscription "
                          f"record may have at most {limit}")  # fmt: skip
    record = _subscription(loads_bounded(value), sub_id)
    stored = record.stored()
    # re-encoding can grow a value (1e15 -> 1000000000000000.0); notifications carry it.
    # At most 4 bytes a character: only a text longer than a quarter of the limit is
    # encoded to count them.
    size = len(stored) if 4 * len(stored) <= limit else len(stored.encode("utf-8"))
    if size > limit:
        raise RecordError("too_large", f"the subscription takes {size} bytes once stored; "
                          f"the limit is {limit}")  # fmt: skip
    # The DNF travels with the change, so that no worker parses the expression again;
    # one that DNF multiplies past the record limit (an `in` list repeated in 64
    # conjuncts) is left for the workers to parse, so the log holds no more than that.
    normal_form = dump_normal_form(record.subscription)
    return SubscriptionChange(sub_id, record, stored,
                              normal_form if len(normal_form) <= limit else None)  # fmt: skip


def load_stored(text: str, normal_form: str | None = None) -> SubscriptionRecord:
    """Decode a stored subscription (:attr:`SubscriptionChange.stored`) for the matcher:
    its expression from ``normal_form`` (:attr:`SubscriptionChange.normal_form`) when
    given, about half the cost of parsing it or less
    (:func:`psmatch.language.encoding.load_normal_form`), else parsed."""
    expr, subscriber, extra = _stored_fields(text)
    if normal_form is None or expr.__class__ is not str:
        return SubscriptionRecord(expr, subscriber, extra, _parse_expression(expr))
    try:
        return SubscriptionRecord(expr, subscriber, extra, load_normal_form(expr, normal_form))
    except ExpressionError as exc:
        raise RecordError("invalid_record", f"invalid normal form: {exc}") from None


def load_stored_head(sub_id: str, text: str) -> tuple[str, str]:
    """The expression and the notification head (:func:`notification_head`) of the
    stored subscription ``text`` of ``sub_id``, without its expression parsed or its
    normal form read: what a worker that reads many normal forms into columns at once
    (:func:`psmatch.language.encoding.load_normal_forms`) needs of the record. Cost: one JSON
    decode of the record and the head's encoding."""
    expr, subscriber, extra = _stored_fields(text)
    if expr.__class__ is not str:
        raise RecordError("invalid_record", "a stored subscription's expression is a string")
    return expr, _head(sub_id, subscriber, extra)


def _stored_fields(text: str) -> tuple[Any, Any, Any]:
    """The expression, subscriber and extra of a stored subscription, unchecked."""
    obj = loads_bounded(text.encode("utf-8"), "the stored subscription", MAX_STORED_NESTING)
    try:
        return obj["expr"], obj["subscriber"], obj["extra"]
    except (TypeError, KeyError):
        raise RecordError(
            "invalid_record", 'a stored subscription is a JSON object {"expr", "extra", '
            '"subscriber"}',
        ) from None  # fmt: skip


# -- events -------------------------------------------------------------------------------


def event_id(key: bytes | None, topic: str, partition: int, offset: int) -> str:
    """The id of an event: its key (hex if it is not UTF-8), else its Kafka position.
    :class:`RecordError` for a key longer than :data:`MAX_ID_LENGTH` bytes (notifications
    carry it)."""
    if key:
        if len(key) > MAX_ID_LENGTH:
            raise RecordError("limit_exceeded",
                              f"the event key is longer than {MAX_ID_LENGTH} bytes")  # fmt: skip
        try:
            return key.decode("utf-8")
        except UnicodeDecodeError:
            return key.hex()
    return f"{topic}/{partition}/{offset}"


def parse_event(value: bytes | None, limits: RecordLimits = DEFAULT_LIMITS) -> FlatEvent:
    """Validate an event record's value; returns the flattened event the matcher takes
    (:meth:`index.Matcher.match_flat_batch`), so no event is flattened twice.

    Cost: O(value size); the string-length check loops over the attributes only when
    the value is longer than ``limits.max_string_length``.
    """
    if value is None:
        raise RecordError("invalid_record", "an event record needs a JSON object as its value, "
                          "got null")  # fmt: skip
    if len(value) > limits.max_event_bytes:
        raise RecordError(
            "too_large", f"the value is {len(value)} bytes; an event may have at most "
            f"{limits.max_event_bytes}",
        )  # fmt: skip
    obj = loads_bounded(value)
    if not isinstance(obj, dict):
        raise RecordError("invalid_record", f"an event must be a JSON object, not {json_type(obj)}")
    try:
        flat = flatten_event(obj)
    except ValueError as exc:  # psmatch.errors.EventError
        raise RecordError("invalid_event", f"invalid event: {exc}") from None
    if len(flat) > limits.max_event_attributes:
        raise RecordError(
            "limit_exceeded", f"the event has {len(flat)} attributes; the limit is "
            f"{limits.max_event_attributes}",
        )  # fmt: skip
    longest = limits.max_string_length
    if len(value) > longest:
        for name, v in flat.items():
            if len(name) > longest or (isinstance(v, str) and len(v) > longest):
                raise RecordError(
                    "limit_exceeded",
                    f"attribute {name[:80]!r}: a name or string longer than {longest} characters",
                )
    return flat


# -- notifications ------------------------------------------------------------------------


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


NOTIFICATION_PREFIX = b'{"subscription_id":'
"""How every notification value starts, before its subscription's id
(:func:`notification_value`)."""
SUBSCRIBER_KEY = ',"subscriber":'
"""How a head that names its subscriber starts (:func:`notification_head`)."""


def notification_value(sub_id: str, head: str, tail: bytes) -> bytes:
    """A notification's value: :data:`NOTIFICATION_PREFIX`, the subscription's id as a
    JSON string, its head (:func:`notification_head`; one that does not name its
    subscriber, :data:`SUBSCRIBER_KEY` and the id again before it) and the event's tail
    (:func:`notification_tail`). A worker assembles many at once
    (:meth:`psmatch.service.heads.NotificationHeads.join`)."""
    sub_id_json = _encode_string(sub_id)
    subscriber = "" if head.startswith(SUBSCRIBER_KEY) else SUBSCRIBER_KEY + sub_id_json
    return b"".join((NOTIFICATION_PREFIX, (sub_id_json + subscriber + head).encode(), tail))


def check_notification_key(sub_id: str) -> None:
    """Raise :class:`RecordError` unless ``sub_id`` can key a notification: valid
    Unicode (no lone surrogate), as every id the driver validated is. A worker checks
    the ids it loads, since a hand-edited Redis may hold any."""
    try:
        sub_id.encode()
    except UnicodeEncodeError:
        raise RecordError("invalid_unicode", f"the subscription id {sub_id!r} is not valid "
                          "Unicode: it cannot key a notification") from None  # fmt: skip


def notification_head(sub_id: str, record: SubscriptionRecord) -> str:
    """The subscription's part of its notifications after its id, computed once per
    subscription: ``,"subscriber":...,"extra":...,`` (``extra`` written as it is stored,
    :func:`dumps_record`), and only ``,"extra":...,`` when the subscriber is the id (the
    default: :func:`notification_value` writes it then). It holds nothing of the id, so
    that the subscriptions of one subscriber, or of none named, with the same extra
    fields share it (:mod:`psmatch.service.heads`).

    Cost O(size of the record): the string by the C encoder, ``extra`` by
    :func:`_dumps_extra` (about 4 µs per BE-Gen subscription, where three ``json.dumps``
    took about 8-12 µs: a worker computes one per subscription it loads).
    """
    return _head(sub_id, record.subscriber, record.extra)


def _head(sub_id: str, subscriber: str, extra: Mapping[str, Any]) -> str:
    named = "" if subscriber == sub_id else SUBSCRIBER_KEY + _encode_string(subscriber)
    return f'{named},"extra":{_dumps_extra(dict(extra))},'


def notification_tail(
    ev_id: str, event_json: bytes, matched_at: str, event_timestamp_ms: int | None
) -> bytes:
    """The event's part of a notification: ``"event_id":...,"event":...}``. The event is
    embedded as the producer sent it (``event_json``, validated by :func:`parse_event`)."""
    return b'"event_id":%s,"event":%s,"matched_at":"%s","event_timestamp":%s}' % (
        _encode_string(ev_id).encode(),
        event_json.strip(),
        matched_at.encode(),
        b"null" if event_timestamp_ms is None else b"%d" % event_timestamp_ms,
    )


@dataclass(frozen=True, slots=True)
class Notification:
    subscription_id: str
    subscriber: str
    extra: dict[str, Any]
    event_id: str
    event: dict[str, Any]
    matched_at: str
    event_timestamp: int | None


def parse_notification(value: bytes) -> Notification:
    """Decode a notification (:func:`notification_value`)."""
    return Notification(**json.loads(value))


# -- rejected records ---------------------------------------------------------------------


def _embed(data: bytes | None) -> tuple[str | None, str | None, int | None, str | None, bool]:
    """(text, encoding, size, sha256, truncated) of an original key or value."""
    if data is None:
        return None, None, None, None, False
    prefix = data[:REJECT_PREFIX_BYTES]
    truncated = len(prefix) < len(data)
    digest = hashlib.sha256(data).hexdigest()
    try:
        return prefix.decode("utf-8"), "utf-8", len(data), digest, truncated
    except UnicodeDecodeError as exc:
        # a valid text cut inside a character still goes as text (up to that character)
        if truncated and exc.reason == "unexpected end of data":
            text = prefix[: exc.start].decode("utf-8", errors="strict")
            return text, "utf-8", len(data), digest, truncated
        return base64.b64encode(prefix).decode(), "base64", len(data), digest, truncated


def rejected_value(
    error: RecordError,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
) -> bytes:
    """The JSON value of a rejected record.

    Fits the sink whatever the original: at most :data:`REJECT_PREFIX_BYTES` of the key
    and of the value (text when they are UTF-8, else base64; JSON escaping can grow a
    text six-fold), their sizes and sha256, and a reason cut to
    :data:`MAX_REASON_CHARS`: under 800 KB in all.
    """
    k_text, k_enc, k_size, k_sha, k_cut = _embed(key)
    v_text, v_enc, v_size, v_sha, v_cut = _embed(value)
    reason = str(error)
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 1] + "\u2026"
    return _dumps(
        {
            "code": error.code, "reason": reason,
            "topic": topic, "partition": partition, "offset": offset,
            "key": k_text, "key_encoding": k_enc, "key_size": k_size, "key_sha256": k_sha,
            "value": v_text, "value_encoding": v_enc, "value_size": v_size, "value_sha256": v_sha,
            "truncated": k_cut or v_cut, "rejected_at": now_iso(),
        }
    ).encode("utf-8")  # fmt: skip


def rejected_key(key: bytes | None) -> bytes | None:
    """The Kafka key of a rejected record: the original key, cut to the embedded prefix."""
    return None if key is None else key[:REJECT_PREFIX_BYTES]


@dataclass(frozen=True, slots=True)
class RejectedRecord:
    """A decoded rejected record; ``key``/``value`` are the embedded prefixes as bytes
    (the whole original when ``truncated`` is false)."""

    code: RejectCode
    reason: str
    topic: str
    partition: int
    offset: int
    key: bytes | None
    key_size: int | None
    key_sha256: str | None
    value: bytes | None
    value_size: int | None
    value_sha256: str | None
    truncated: bool
    rejected_at: str


def _unembed(text: str | None, encoding: str | None) -> bytes | None:
    if text is None:
        return None
    return base64.b64decode(text) if encoding == "base64" else text.encode("utf-8")


def parse_rejected(value: bytes) -> RejectedRecord:
    """Decode a rejected record (:func:`rejected_value`)."""
    r = json.loads(value)
    return RejectedRecord(
        code=r["code"], reason=r["reason"], topic=r["topic"], partition=r["partition"],
        offset=r["offset"], key=_unembed(r["key"], r["key_encoding"]), key_size=r["key_size"],
        key_sha256=r["key_sha256"], value=_unembed(r["value"], r["value_encoding"]),
        value_size=r["value_size"], value_sha256=r["value_sha256"], truncated=r["truncated"],
        rejected_at=r["rejected_at"],
    )  # fmt: skip
