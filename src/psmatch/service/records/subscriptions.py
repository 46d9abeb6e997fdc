"""The subscription record, in its two forms: the subscriptions topic's record and the
subscription as stored in Redis. Pure logic, no I/O.

* ``psmatch.subscriptions`` — key = subscription id (at most
  :data:`~psmatch.service.records.common.MAX_ID_LENGTH` characters); value = JSON object
  ``{"expr": "<expression>", "subscriber": "<who>", ...}``. ``"subscriber"`` may be
  left out: the subscriber defaults to the subscription id. Other fields are kept and
  echoed in notifications under ``"extra"``; a null value (tombstone) deletes.
  Encoder :func:`subscription_value`, decoder :func:`parse_subscription_record`.
* the stored subscription (a Redis hash value and change-log entry, see
  :mod:`psmatch.adapters.state`) — canonical JSON ``{"expr", "extra", "subscriber"}``, the
  subscriber always written. Encoder :func:`dumps_record`, decoder :func:`load_stored`;
  beside it in the change log, the expression's normal form
  (:attr:`SubscriptionChange.normal_form`, whose text :mod:`psmatch.service.records.normal_forms`
  owns), so that a worker loads it instead of parsing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from json.encoder import encode_basestring as _encode_string
from typing import Any

import orjson

from psmatch.errors import ExpressionError, ExpressionLimitError
from psmatch.language import Subscription, parse_subscription
from psmatch.service.records.common import (
    DEFAULT_LIMITS,
    MAX_ID_LENGTH,
    MAX_STORED_NESTING,
    RecordError,
    RecordLimits,
    json_type,
    loads_bounded,
    utf8_text,
)
from psmatch.service.records.normal_forms import dump_normal_form, load_normal_form
from psmatch.service.records.tenants import scoped_id


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
    values) by :func:`dumps_extra`."""
    return (f'{{"expr":{_encode_string(expr)},"extra":{dumps_extra(dict(extra))},'
            f'"subscriber":{_encode_string(subscriber)}}}')  # fmt: skip


def dumps_extra(extra: dict[str, Any]) -> str:
    """``extra`` as ``json.dumps`` writes it with sorted keys, compact, not ASCII-escaped.

    orjson writes the same text, faster, for JSON values without floats (it
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


def subscription_value(expr: str, subscriber: str | None, extra: Mapping[str, Any]) -> bytes:
    """The value of a subscriptions-topic record (what ``psmatch subscribe`` sends); with no
    ``subscriber`` the field is left out, and the decoder's default applies."""
    record = {key: value for key, value in extra.items() if key != "subscriber"}
    record["expr"] = expr
    if subscriber is not None:
        record["subscriber"] = subscriber
    return _VALUE_ENCODER.encode(record).encode(
        "utf-8", errors="surrogatepass")  # a lone surrogate is the decoder's to refuse


def _parse_expression(expr: str) -> Subscription:
    try:
        return parse_subscription(expr)
    except ExpressionLimitError as exc:
        raise RecordError("limit_exceeded", f"expression too large: {exc}") from None
    except ValueError as exc:  # psmatch.errors.ExpressionError and its subclasses
        raise RecordError("invalid_expression", f"invalid expression: {exc}") from None


def _subscription(obj: Any, own_id: str) -> SubscriptionRecord:
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
    subscriber = obj.get("subscriber", own_id)  # the default subscriber: the record's key
    if not isinstance(subscriber, str) or not subscriber:
        got = "an empty string" if subscriber == "" else f"a {json_type(subscriber)}"
        raise RecordError("invalid_record", f'"subscriber" must be a non-empty string, not {got}')
    extra = obj.copy()
    del extra["expr"]
    extra.pop("subscriber", None)
    return SubscriptionRecord(expr, subscriber, extra, _parse_expression(expr))


def parse_subscription_record(
    key: bytes | None, value: bytes | None, limits: RecordLimits = DEFAULT_LIMITS,
    tenant: str | None = None,
) -> SubscriptionChange:
    """Validate a record of the subscriptions topic; :class:`RecordError` if unusable.

    A record of ``tenant``'s topic (:mod:`psmatch.service.records.tenants`) changes the
    subscription ``<tenant>/<key>``, whose subscriber defaults to the key: the change's
    ``sub_id`` is that scoped id, whatever the key names.

    Cost: O(record size), plus parsing the expression.
    """  # fmt: skip
    sub_id = None if key is None else utf8_text(key, "the key")
    if sub_id is None or sub_id.strip() == "":
        raise RecordError(
            "invalid_record", "a subscription record needs its subscription id as the key"
        )
    if len(sub_id) > MAX_ID_LENGTH:
        raise RecordError(
            "limit_exceeded", f"the subscription id is longer than {MAX_ID_LENGTH} characters"
        )
    own_id = sub_id
    if tenant is not None:
        sub_id = scoped_id(tenant, sub_id)
    if value is None:
        return SubscriptionChange(sub_id)
    limit = limits.max_subscription_bytes
    if len(value) > limit:
        raise RecordError("too_large", f"the value is {len(value)} bytes; a subscription "
                          f"record may have at most {limit}")  # fmt: skip
    record = _subscription(loads_bounded(value), own_id)
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
    (:func:`psmatch.service.records.normal_forms.load_normal_form`), else parsed."""
    expr, subscriber, extra = stored_fields(text)
    if normal_form is None or expr.__class__ is not str:
        return SubscriptionRecord(expr, subscriber, extra, _parse_expression(expr))
    try:
        return SubscriptionRecord(expr, subscriber, extra, load_normal_form(expr, normal_form))
    except ExpressionError as exc:
        raise RecordError("invalid_record", f"invalid normal form: {exc}") from None


def stored_fields(text: str) -> tuple[Any, Any, Any]:
    """The expression, subscriber and extra of a stored subscription (:func:`dumps_record`),
    their types unchecked; ``invalid_record`` if it is no such object."""
    obj = loads_bounded(text.encode("utf-8"), "the stored subscription", MAX_STORED_NESTING)
    try:
        return obj["expr"], obj["subscriber"], obj["extra"]
    except (TypeError, KeyError):
        raise RecordError(
            "invalid_record", 'a stored subscription is a JSON object {"expr", "extra", '
            '"subscriber"}',
        ) from None  # fmt: skip
