"""Why an event does or does not match a subscription: the expression, marked.

:func:`explain` answers a subscriber's "why did I not get this?". It returns an
:class:`Explanation`: the expression tree with every node marked true, false or unknown
on the event, every comparison with the reason (the attribute is missing, its value has
another kind, or the value that was compared), and the verdict.

The truth of every node is the one :mod:`psmatch.language` computes
(:meth:`Comparison.evaluate <psmatch.language.Comparison.evaluate>` and the ``evaluate``
of ``And``/``Or``/``Not``, SQL's three-valued logic), on the event as
:func:`psmatch.events.flatten_event` validates and flattens it, after the expression has
passed :func:`psmatch.language.parse_subscription` as every matcher requires. Nothing
here evaluates on its own, so the verdict cannot drift from the matchers' answer: the
subscription matches exactly when the whole expression is true.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from psmatch.events import FlatEvent, flatten_event
from psmatch.language import (
    And,
    Comparison,
    Expression,
    Kind,
    Not,
    Or,
    Value,
    kind_of,
    parse_subscription,
)


class Reason(Enum):
    """Why a comparison has the truth it has."""

    MISSING = "missing"
    """The event has no value for the attribute (absent, ``null``, or an object), so
    the comparison is unknown."""
    OTHER_KIND = "other kind"
    """The event's value is of another kind than the comparison's values (a string
    compared with numbers, a boolean with numbers...), so the comparison is unknown."""
    COMPARED = "compared"
    """The value was compared: the comparison is true or false."""


@dataclass(frozen=True, slots=True)
class Step:
    """One node of the expression tree with its truth on the event.

    For a :class:`~psmatch.language.Comparison`, ``reason`` says why and ``value`` is the
    event's value of the attribute (``None`` when it has none); for ``and``, ``or`` and
    ``not``, ``children`` holds the operands' steps and ``reason`` is ``None``.
    """

    node: Expression
    truth: bool | None
    reason: Reason | None = None
    value: Value | None = None
    children: tuple[Step, ...] = ()
    note: str = ""
    """The reason in words, for comparisons."""

    @property
    def label(self) -> str:
        return _TRUTH_WORD[self.truth]

    @property
    def text(self) -> str:
        """The node in the language's text form (``and``/``or``/``not`` for operators)."""
        if isinstance(self.node, Comparison):
            return render_comparison(self.node)
        return {And: "and", Or: "or", Not: "not"}[type(self.node)]


@dataclass(frozen=True)
class Explanation:
    """The expression marked on one event, and the verdict; ``str()`` prints it.

    ``verdict`` is the expression's three-valued truth; the subscription matches when
    it is true, and only then (unknown does not match).
    """

    expression: str
    event: FlatEvent
    root: Step

    @property
    def verdict(self) -> bool | None:
        return self.root.truth

    @property
    def matches(self) -> bool:
        return self.root.truth is True

    def comparisons(self) -> Iterator[Step]:
        """The comparison steps, left to right."""
        stack = [self.root]
        while stack:
            step = stack.pop()
            if isinstance(step.node, Comparison):
                yield step
            stack.extend(reversed(step.children))

    def __str__(self) -> str:
        if self.matches:
            head = "match: the expression is true"
        elif self.verdict is False:
            head = "no match: the expression is false"
        else:
            head = ("no match: the expression is unknown (an attribute it needs is "
                    "missing or of another kind)")  # fmt: skip
        rows: list[tuple[str, str, str]] = []
        _rows(self.root, 0, rows)
        width = max(len(text) for _, text, _ in rows)
        lines = [head]
        for label, text, note in rows:
            lines.append(f"{label:<8}{text:<{width}}  -- {note}" if note else f"{label:<8}{text}")
        return "\n".join(line.rstrip() for line in lines)


def explain(expression: str, event: Mapping[str, Any]) -> Explanation:
    """Explain whether ``event`` matches the subscription ``expression``.

    Raises :class:`~psmatch.errors.ExpressionError` (or a subclass) for an expression any
    matcher would refuse and :class:`~psmatch.errors.EventError` for an invalid event.
    Cost O(comparisons x depth): each node's truth is evaluated on its own.

        >>> e = explain("price < 100 and not stock <= 0", {"price": 12})
        >>> e.verdict is None, e.matches
        (True, False)
        >>> print(e)
        no match: the expression is unknown (an attribute it needs is missing or of another kind)
        unknown and
        true      price < 100   -- price is 12
        unknown   not
        unknown     stock <= 0  -- stock is missing from the event (absent or null)
    """
    subscription = parse_subscription(expression)
    flat = flatten_event(event)
    return Explanation(expression, flat, _step(subscription.expression, flat))


def _step(node: Expression, event: FlatEvent) -> Step:
    truth = node.evaluate(event)
    if isinstance(node, Comparison):
        return _comparison_step(node, truth, event)
    children = (node.child,) if isinstance(node, Not) else node.children
    return Step(node, truth, children=tuple(_step(child, event) for child in children))


def _comparison_step(node: Comparison, truth: bool | None, event: FlatEvent) -> Step:
    name = render_attribute(node.attribute)
    if node.attribute not in event:
        inside = sorted(a for a in event if a.startswith(node.attribute + "."))
        if inside:
            shown = ", ".join(inside[:3]) + (", ..." if len(inside) > 3 else "")
            note = f"{name} is an object ({shown}), not a value"
        else:
            note = f"{name} is missing from the event (absent or null)"
        return Step(node, truth, Reason.MISSING, note=note)
    value = event[node.attribute]
    if truth is None:
        # Comparison.evaluate is unknown on a present value only when the kinds differ.
        wanted = kind_of(node.values[0])
        note = (f"{name} is {_KIND_WORD[kind_of(value)]} {render_value(value)}, compared with "
                f"{_KIND_WORD_PLAIN[wanted]}s")  # fmt: skip
        return Step(node, truth, Reason.OTHER_KIND, value, note=note)
    return Step(node, truth, Reason.COMPARED, value, note=f"{name} is {render_value(value)}")


def _rows(step: Step, depth: int, rows: list[tuple[str, str, str]]) -> None:
    rows.append((step.label, "  " * depth + step.text, step.note))
    for child in step.children:
        _rows(child, depth + 1, rows)


_TRUTH_WORD = {True: "true", False: "false", None: "unknown"}
_KIND_WORD = {Kind.NUMBER: "the number", Kind.STRING: "the string", Kind.BOOL: "the boolean"}
_KIND_WORD_PLAIN = {Kind.NUMBER: "number", Kind.STRING: "string", Kind.BOOL: "boolean"}

# --------------------------------------------------------------------------- text form

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_0-9]+)*")
_KEYWORDS = frozenset({"and", "or", "not", "in", "between", "like", "true", "false"})
_STRING_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\0": "\\0"}


def render_value(value: Value) -> str:
    """A value in the language's text form (parsing it gives the value back)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + "".join(_STRING_ESCAPES.get(ch, ch) for ch in value) + "'"
    return repr(value)


def render_attribute(name: str) -> str:
    """An attribute name in the language's text form, back-quoted when it must be."""
    if _IDENTIFIER.fullmatch(name) and name.lower() not in _KEYWORDS:
        return name
    return "`" + name.replace("`", "``") + "`"


def render_comparison(c: Comparison) -> str:
    """A comparison in the language's text form, ``not`` folded into the operator."""
    name = render_attribute(c.attribute)
    op, values = c.op, [render_value(v) for v in c.values]
    negation = "not " if op.startswith("not") else ""
    base = op.removeprefix("not")
    if base == "in":
        return f"{name} {negation}in ({', '.join(values)})"
    if base == "between":
        return f"{name} {negation}between {values[0]} and {values[1]}"
    if base == "like":
        return f"{name} {negation}like {values[0]}"
    return f"{name} {op} {values[0]}"
