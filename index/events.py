"""Events: validation and flattening of the JSON objects producers publish.

An event is a mapping from attribute to value. Nested objects flatten to dotted names
(``{"user": {"age": 3}}`` is ``user.age = 3``) and ``null`` means the attribute is
absent. Values must be ints in the 64-bit signed range, finite floats, strings or
booleans; anything else (arrays, NaN, infinities, other types) makes the whole event
invalid, reported as :class:`index.errors.EventError` naming the attribute, so that no
matcher ever gives a silent wrong answer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from index.errors import EventError
from index.language import INT64_MAX, INT64_MIN, Value

FlatEvent = dict[str, Value]
"""A validated event: dotted attribute name to int, float, str or bool."""

MAX_DEPTH = 32
"""Deepest nesting of objects in an event."""


def flatten_event(event: Any, position: int | None = None) -> FlatEvent:
    """Validate ``event`` and flatten nested objects to dotted attribute names.

    ``position`` (the event's index in a batch) is only used in error messages.
    Cost O(number of attributes).
    """
    if not isinstance(event, Mapping):
        raise EventError(f"an event must be a JSON object, not {type(event).__name__}",
                         position=position)
    flat: FlatEvent = {}
    try:
        _flatten_into(flat, event, "", 0)
    except EventError as error:
        if position is None:
            raise
        raise EventError(error.reason, error.attribute, position) from None
    return flat


def _flatten_into(flat: FlatEvent, obj: Mapping[Any, Any], prefix: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise EventError(f"objects nested deeper than {MAX_DEPTH} levels", prefix.rstrip("."))
    for key, value in obj.items():
        if not isinstance(key, str):
            raise EventError(f"attribute names must be strings, not {type(key).__name__}",
                             f"{prefix}{key}")
        name = prefix + key
        if value is None:
            continue
        if isinstance(value, Mapping):
            _flatten_into(flat, value, name + ".", depth + 1)
            continue
        _check_value(name, value)
        if name in flat:
            raise EventError("given twice (once nested, once with a dotted name)", name)
        flat[name] = value


def _check_value(name: str, value: Any) -> None:
    if isinstance(value, bool | str):
        return
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise EventError(f"integer {value} is outside the 64-bit signed range", name)
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise EventError(f"{value} is not a finite number", name)
        return
    if isinstance(value, list | tuple):
        raise EventError("arrays are not supported as attribute values", name)
    raise EventError(
        f"values must be numbers, strings, booleans or objects, not {type(value).__name__}",
        name,
    )
