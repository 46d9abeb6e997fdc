"""What the service's record formats share: the bounded JSON decoder, the limits on
records, and :class:`RecordError` with its reject codes.

Every rejection is a :class:`RecordError` carrying a stable ``code`` from
:data:`REJECT_CODES` beside its message (the rejected record's ``code`` and the metrics'
``reason`` label). Decoding is bounded before anything recurses: JSON nesting is checked
on the raw bytes (:data:`MAX_NESTING`), sizes and counts against :class:`RecordLimits`,
and strings must be valid Unicode (no lone surrogate escapes), so that no record, however
built, raises anything but :class:`RecordError`. Pure logic, no I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, get_args

import numpy as np
import orjson

from psmatch.errors import PsmatchError
from psmatch.events import MAX_DEPTH
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


def utf8_text(data: bytes, what: str) -> str:
    """``data`` decoded as UTF-8; ``invalid_unicode`` if it is not."""
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
    decoded by orjson, the faster; the rest, and every refusal, by
    :func:`loads_checked`, so the result and the error never depend on the path.
    """
    # two C-speed counts settle it for any ordinary record: depth <= opening brackets
    deep = (data.count(b"{") + data.count(b"[") > max_nesting
            and nesting_depth(data) > max_nesting)  # fmt: skip
    if not deep and _LONG_DIGITS not in data.translate(_DIGITS_AS_ZERO):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # refused: the checked path says why, with its code
    return loads_checked(data, what, max_nesting)


# orjson turns an integer outside [-2**63, 2**64) into a float; the standard library keeps
# it exact (and the event then refuses it): any such literal has 19 or more digits. With
# every digit read as 0, a run of 19 is one substring search (a regular expression
# [0-9]{19} would try a match at each digit).
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * 19


def loads_checked(data: bytes, what: str, max_nesting: int = MAX_NESTING) -> Any:
    """:func:`loads_bounded` by the standard library's decoder alone, with every check: its
    slow path, whose value and error the fast path must match."""
    text = utf8_text(data, what)
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


def now_iso() -> str:
    """The current UTC time as the records the service writes carry it (``matched_at``,
    ``rejected_at``): ISO 8601 to the millisecond, ``Z`` for UTC."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
