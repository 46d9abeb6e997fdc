"""Events: validation and flattening of the JSON objects producers publish.

An event is a mapping from attribute to value. Nested objects flatten to dotted names
(``{"user": {"age": 3}}`` is ``user.age = 3``), at most :data:`MAX_DEPTH` levels deep,
and ``null`` means the attribute is absent. Values must be ints in the 64-bit signed
range, finite floats, strings or booleans; subclasses of those and numpy scalars count
as their exact Python equivalents and are stored as such. Anything else (arrays, NaN,
infinities, other types, an attribute given both nested and dotted) makes the whole
event invalid, reported as :class:`psmatch.errors.EventError` naming the attribute, so
that no matcher ever gives a silent wrong answer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from psmatch.errors import EventError
from psmatch.language import INT64_MAX, INT64_MIN, Value

FlatEvent = dict[str, Value]
"""A validated event: dotted attribute name to int, float, str or bool."""

MAX_DEPTH = 32
"""Most levels of objects in an event, its own object counting as the first (the
service's records obey the same limit, :data:`psmatch.service.records.common.MAX_NESTING`)."""


def flatten_event(event: Any, position: int | None = None) -> FlatEvent:
    """Validate ``event`` and flatten nested objects to dotted attribute names.

    ``position`` (the event's index in a batch) is only used in error messages.
    Cost O(number of attributes); an event that is flat already (a plain ``dict`` of
    string names and valid scalars, :func:`_is_flat`) is checked in C loops and copied,
    with no Python step per attribute.
    """
    if event.__class__ is dict and _is_flat(event):
        return dict(event)
    if not isinstance(event, Mapping):
        raise EventError(f"an event must be a JSON object, not {type(event).__name__}",
                         position=position)
    flat: FlatEvent = {}
    try:
        _flatten_into(flat, event, "", 1)
    except EventError as error:
        if position is None:
            raise
        raise EventError(error.reason, error.attribute, position) from None
    return flat


def _is_flat(event: dict[Any, Any]) -> bool:
    """Whether ``event`` is a valid flat event as it stands, as most are: string names
    (exactly ``str``) and values of the exact scalar types (none nested, none null),
    every int in the 64-bit range, every float finite. Anything else is left to
    :func:`_flatten_into`, which flattens it or names what is wrong. Cost: the names'
    and the values' types gathered in C loops, then a pass over the ints and one over
    the floats, about two thirds of what :func:`_flatten_into` takes for a 30-attribute
    BE-Gen event."""
    values = event.values()
    types = set(map(type, values))
    if not types <= _SCALARS or not set(map(type, event)) <= _NAMES:
        return False
    if int in types:
        ints = values if len(types) == 1 else [v for v in values if v.__class__ is int]
        if min(ints) < INT64_MIN or max(ints) > INT64_MAX:
            return False
    if float in types:
        floats = values if len(types) == 1 else [v for v in values if v.__class__ is float]
        if not all(map(math.isfinite, floats)):
            return False
    return True


def _flatten_into(flat: FlatEvent, obj: Mapping[Any, Any], prefix: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise EventError(f"objects nested more than {MAX_DEPTH} levels deep (the event's own "
                         "object is the first)", prefix.rstrip("."))
    for key, value in obj.items():
        if key.__class__ is not str and not isinstance(key, str):
            raise EventError(f"attribute names must be strings, not {type(key).__name__}",
                             f"{prefix}{key}")
        name = prefix + key
        # The classes json decoding yields are tested first, by identity: the ABC check
        # and the conversions of other values would triple the cost of an ordinary event.
        cls = value.__class__
        if cls not in _SCALARS:
            if value is None:
                continue
            if cls is dict or isinstance(value, Mapping):
                _flatten_into(flat, value, name + ".", depth + 1)
                continue
            value = _builtin(name, value)
            cls = value.__class__
        if cls is int and not INT64_MIN <= value <= INT64_MAX:
            raise EventError(f"integer {value} is outside the 64-bit signed range", name)
        if cls is float and not math.isfinite(value):
            raise EventError(f"{value} is not a finite number", name)
        if name in flat:
            raise EventError("given twice (once nested, once with a dotted name)", name)
        flat[name] = value


_SCALARS = frozenset((bool, str, int, float))
"""The exact Python types of event values."""
_NAMES = frozenset((str,))
"""The exact type of an attribute name that needs no check."""


def _builtin(name: str, value: Any) -> Value:
    """``value`` as the plain Python scalar matchers compare, or :class:`EventError`.

    Subclasses of the scalar types and numpy scalars become their exact Python
    equivalents (``np.bool_`` a bool, ``np.int64`` an int, ``np.float32`` a float,
    ``np.str_`` a str); a value without an exact equivalent is refused by its numpy name.
    """
    if isinstance(value, np.generic):
        value = _from_numpy(name, value)
    for scalar in (bool, str, int, float):  # bool first: a subclass of int
        if isinstance(value, scalar):
            return scalar(value)
    if isinstance(value, list | tuple | np.ndarray):
        raise EventError("arrays are not supported as attribute values", name)
    raise EventError(
        f"values must be numbers, strings, booleans or objects, not {_type_name(value)}",
        name,
    )


def _from_numpy(name: str, value: np.generic) -> Any:
    """The Python scalar equal to a numpy scalar; other numpy values are returned as is."""
    if isinstance(value, np.bool_ | np.integer | np.str_):
        return value.item()
    if isinstance(value, np.floating):
        number = float(value)
        # float16, float32 and float64 convert exactly; a longdouble may not.
        if math.isfinite(number) and value.dtype.type(number) != value:
            raise EventError(f"{_type_name(value)} {value} has no exact float equivalent", name)
        return number
    return value


def _type_name(value: Any) -> str:
    cls = type(value)
    return cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__name__}"
