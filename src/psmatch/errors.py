"""The exception hierarchy of psmatch: one root, one subclass per kind of failure.

Every error a user can cause (a bad expression, a bad event, an unknown matcher name)
is a ``ValueError`` as well, so callers that only know the standard library still catch it.
"""

from __future__ import annotations


class PsmatchError(Exception):
    """Root of every exception raised on purpose by psmatch."""


class ExpressionError(PsmatchError, ValueError):
    """A subscription expression that cannot be parsed or breaks the language's rules.

    ``position`` is the 0-based character offset in the expression text where the
    problem was found (``None`` when the problem is the expression as a whole).
    """

    def __init__(self, message: str, text: str = "", position: int | None = None) -> None:
        self.reason = message
        self.text = text
        self.position = position
        if position is not None:
            message = f"{message} at position {position}"
            if text:
                message += f": {text[:position]}\u2192{text[position:]}"
        super().__init__(message)


class ExpressionLimitError(ExpressionError):
    """An expression whose normal form exceeds the conjunct or predicate limits."""


class UnsatisfiableError(ExpressionError):
    """An expression that can never be true, so there is nothing to index."""


class EventError(PsmatchError, ValueError):
    """An event that is not a mapping of attributes to ints, floats, strings or booleans.

    ``attribute`` names the offending attribute (dotted), when there is one, and
    ``position`` the event's index in its batch, when it came in a batch.
    """

    def __init__(self, message: str, attribute: str | None = None,
                 position: int | None = None) -> None:
        self.reason = message
        self.attribute = attribute
        self.position = position
        if attribute is not None:
            message = f"attribute {attribute!r}: {message}"
        if position is not None:
            message = f"event {position}: {message}"
        super().__init__(message)


class UnknownMatcherError(PsmatchError, ValueError):
    """A matcher name that is not in ``index.MATCHERS``."""
