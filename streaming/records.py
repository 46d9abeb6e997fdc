"""The record formats of the four topics: parsing input, encoding output (pure logic).

* ``psmatch.subscriptions`` — key = subscription id; value = JSON object
  ``{"expr": "<expression>", "subscriber": "<who>", ...}``; other fields are kept and
  echoed in notifications under ``"extra"``; a null value (tombstone) deletes.
* ``psmatch.events`` — value = JSON object of attributes; key = event id, else the id is
  ``<topic>/<partition>/<offset>``.
* ``psmatch.notifications`` — key = subscription id; value = JSON
  ``{"subscription_id", "subscriber", "event_id", "event", "matched_at",
  "event_timestamp", "extra"}``.
* ``psmatch.rejected`` — key = the original key; value = JSON ``{"reason", "topic",
  "partition", "offset", "key", "value", "rejected_at"}``.

Every rejection raises :class:`RecordError` (an ``index.errors.PsmatchError`` and a
``ValueError``) whose message is the reason written to the rejected topic.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from connectors.state import dumps_record
from index.errors import PsmatchError
from index.events import flatten_event
from index.language import parse_subscription

MAX_ID_LENGTH = 1024


class RecordError(PsmatchError, ValueError):
    """A Kafka record the service cannot use; the message is the reason for rejecting it."""


@dataclass(frozen=True, slots=True)
class SubscriptionChange:
    """A valid subscription record (``record`` = canonical JSON) or a delete (``None``)."""

    sub_id: str
    record: str | None


def _decode(data: bytes | None, what: str) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(f"{what} is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None


def _loads_finite(text: str) -> Any:
    def bad_constant(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    return json.loads(text, parse_constant=bad_constant)


def parse_subscription_record(key: bytes | None, value: bytes | None) -> SubscriptionChange:
    """Validate a record of the subscriptions topic."""
    sub_id = _decode(key, "the key")
    if sub_id is None or sub_id.strip() == "":
        raise RecordError("a subscription record needs its subscription id as the key")
    if len(sub_id) > MAX_ID_LENGTH:
        raise RecordError(f"the subscription id is longer than {MAX_ID_LENGTH} characters")
    text = _decode(value, "the value")
    if text is None:
        return SubscriptionChange(sub_id, None)
    try:
        obj = _loads_finite(text)
    except ValueError as exc:
        raise RecordError(f"the value is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise RecordError(
            f'the value must be a JSON object {{"expr": ..., "subscriber": ...}}, '
            f"not {type(obj).__name__}"
        )
    expr = obj.get("expr")
    if not isinstance(expr, str) or not expr.strip():
        raise RecordError('the value needs "expr", the subscription expression as a string')
    subscriber = obj.get("subscriber", sub_id)
    if not isinstance(subscriber, str) or not subscriber:
        raise RecordError('"subscriber" must be a non-empty string')
    try:
        parse_subscription(expr)
    except ValueError as exc:  # index.errors.ExpressionError and its subclasses
        raise RecordError(f"invalid expression: {exc}") from None
    extra = {k: v for k, v in obj.items() if k not in ("expr", "subscriber")}
    return SubscriptionChange(sub_id, dumps_record(expr, subscriber, extra))


def event_id(key: bytes | None, topic: str, partition: int, offset: int) -> str:
    if key:
        try:
            return key.decode("utf-8")
        except UnicodeDecodeError:
            return key.hex()
    return f"{topic}/{partition}/{offset}"


def parse_event(value: bytes | None) -> dict[str, Any]:
    """Validate an event record's value: a JSON object the matcher accepts."""
    text = _decode(value, "the value")
    if text is None:
        raise RecordError("an event record needs a JSON object as its value, got null")
    try:
        obj = _loads_finite(text)
    except ValueError as exc:
        raise RecordError(f"the value is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise RecordError(f"an event must be a JSON object, not {type(obj).__name__}")
    try:
        flatten_event(obj)
    except ValueError as exc:  # index.errors.EventError
        raise RecordError(f"invalid event: {exc}") from None
    return obj


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def notification_value(
    sub_id: str,
    record: Mapping[str, Any],
    ev_id: str,
    event: Mapping[str, Any],
    matched_at: str,
    event_timestamp_ms: int | None,
) -> bytes:
    """The JSON value of one notification; ``record`` is the stored subscription."""
    return _dumps(
        {
            "subscription_id": sub_id,
            "subscriber": record["subscriber"],
            "event_id": ev_id,
            "event": event,
            "matched_at": matched_at,
            "event_timestamp": event_timestamp_ms,
            "extra": record.get("extra", {}),
        }
    )


def rejected_value(
    reason: str,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
) -> bytes:
    """The JSON value of a rejected record, carrying the original key and value as text."""
    return _dumps(
        {
            "reason": reason,
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "key": None if key is None else key.decode("utf-8", errors="replace"),
            "value": None if value is None else value.decode("utf-8", errors="replace"),
            "rejected_at": now_iso(),
        }
    )
