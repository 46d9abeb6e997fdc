"""The values of the language: their kinds, the Python types that carry them, their range.

A value is a number (a 64-bit integer or a finite float: 1 and 1.0 are equal), a string
(ordered by code point) or a boolean (not a number). An attribute's value in an event
has exactly one kind, and a comparison holds values of one kind.
"""

from __future__ import annotations

from enum import IntEnum

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
"""The range of integers, in expressions and in events."""
MAX_CODE_POINT = 0x10FFFF
"""The greatest code point a string may hold."""


class Kind(IntEnum):
    """The value kinds. An attribute's value in an event has exactly one."""

    NUMBER = 0
    STRING = 1
    BOOL = 2


Value = int | float | str | bool


KIND_OF_CLASS = {bool: Kind.BOOL, str: Kind.STRING, int: Kind.NUMBER, float: Kind.NUMBER}
"""The kind of each exact class a validated value has (a flat event's values have only
these, see :mod:`psmatch.events`)."""

KIND_OF_CODE = {int(kind): kind for kind in Kind}
"""Each kind by its integer code, as the normal form's text and columns hold it (a
lookup: ``Kind(code)`` is an enum call)."""


def kind_of(value: Value) -> Kind:
    """The kind of an (already validated) scalar value. Booleans are not numbers."""
    kind = KIND_OF_CLASS.get(value.__class__)  # the exact classes: one lookup
    if kind is not None:
        return kind
    if isinstance(value, bool):
        return Kind.BOOL
    if isinstance(value, str):
        return Kind.STRING
    return Kind.NUMBER
