"""The event record of the ``psmatch.events`` topic: decoded and validated, never
re-encoded (the events are the producers' own JSON; a notification embeds the bytes as
sent). Pure logic, no I/O.

Key = the event id (:func:`event_id`: the key as text, hex if it is not UTF-8), else the
id is ``<topic>/<partition>/<offset>``; value = a JSON object of attributes, flattened
as :func:`psmatch.events.flatten_event` does. Decoder :func:`parse_event`, bounded by
:class:`~psmatch.service.records.common.RecordLimits`.
"""

from __future__ import annotations

from psmatch.events import FlatEvent, flatten_event
from psmatch.service.records.common import (
    DEFAULT_LIMITS,
    MAX_ID_LENGTH,
    RecordError,
    RecordLimits,
    json_type,
    loads_bounded,
)


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
    (:meth:`psmatch.core.matcher.SlotPath.match_flat_batch`), so no event is flattened twice.

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
