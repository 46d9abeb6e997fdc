"""The expression tree: :class:`Comparison`, :class:`And`, :class:`Or`, :class:`Not`.

Owns what a comparison may be written with (its operators, each one's complement, the
kinds of values it takes, the ``like`` forms) and the tree's direct three-valued
evaluation on a flattened event, the reference the tests hold every matcher to: a
missing attribute or a value of another kind is unknown (``None``), and ``not`` of
unknown is unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

from psmatch.errors import ExpressionError
from psmatch.language.values import Kind, Value, kind_of

COMPLEMENT = {
    "=": "!=",
    "!=": "=",
    "<": ">=",
    ">=": "<",
    ">": "<=",
    "<=": ">",
    "in": "notin",
    "notin": "in",
    "between": "notbetween",
    "notbetween": "between",
    "like": "notlike",
    "notlike": "like",
}
"""Each operator's negation: ``not`` folds into the comparison."""


_BOOL_OPS = frozenset({"=", "!=", "in", "notin"})
_ONE_KIND_NOT_BOOL = frozenset(map(frozenset, ({int}, {float}, {int, float}, {str})))
"""The classes of values that are all of one kind, not booleans: any operator takes them."""


def check_like_pattern(pattern: str, text: str, position: int) -> None:
    """An :class:`ExpressionError` unless ``pattern`` has one of the forms ``like`` takes."""
    inner = pattern
    if len(inner) >= 2 and inner.startswith("%") and inner.endswith("%"):
        inner = inner[1:-1]
    elif inner.startswith("%"):
        inner = inner[1:]
    elif inner.endswith("%"):
        inner = inner[:-1]
    if "%" in inner or "_" in inner:
        raise ExpressionError(
            "like supports 'abc%' (prefix), '%abc' (suffix) and '%abc%' (contains) only; "
            "'%' and '_' may not appear elsewhere in the pattern",
            text,
            position,
        )


def check_value_kinds(attribute: str, op: str, values: tuple[Value, ...], text: str,
                      pos: int) -> None:  # fmt: skip
    """An :class:`ExpressionError` unless ``values`` are of one kind, and booleans only
    under ``op`` ``=``, ``!=``, ``in`` or ``not in``. Cost O(len(values))."""
    if len(values) == 1 and (op in _BOOL_OPS or values[0].__class__ is not bool):
        return
    if frozenset(map(type, values)) in _ONE_KIND_NOT_BOOL:
        return
    kinds = {kind_of(v) for v in values}
    if len(kinds) > 1:
        raise ExpressionError(
            f"values compared with {attribute!r} mix kinds "
            f"({', '.join(sorted(k.name.lower() for k in kinds))}); all must be numbers, "
            "all strings or all booleans",
            text,
            pos,
        )
    kind = kinds.pop()
    if kind is Kind.BOOL and op not in _BOOL_OPS:
        raise ExpressionError(
            f"booleans can only be compared with =, !=, in and not in, not {op}", text, pos
        )


def _slot_setters(cls: type) -> tuple[Callable[[object, object], None], ...]:
    """The setter of each field's slot of a frozen slots dataclass, in field order.

    :class:`Comparison`, built once per comparison, stores its fields with these in its
    own ``__init__``: the generated one calls ``object.__setattr__`` by name for each
    field, dearer on the parser's hot path (the normal form's
    :class:`~psmatch.language.normal_form.Interval` and
    :class:`~psmatch.language.normal_form.Predicate` are named tuples instead).
    """
    return tuple(getattr(cls, f.name).__set__ for f in fields(cls))


@dataclass(frozen=True, slots=True)
class Comparison:
    """One comparison as written: ``attribute op values``.

    ``op`` is one of ``= != < <= > >= in notin between notbetween like notlike``;
    ``values`` holds one value, the ``in`` list, the two ``between`` bounds, or the
    ``like`` pattern.
    """

    attribute: str
    op: str
    values: tuple[Value, ...]
    position: int = 0

    def __init__(self, attribute: str, op: str, values: tuple[Value, ...],
                 position: int = 0) -> None:  # fmt: skip
        set_attribute, set_op, set_values, set_position = _COMPARISON_SLOTS
        set_attribute(self, attribute)
        set_op(self, op)
        set_values(self, values)
        set_position(self, position)

    def evaluate(self, event: dict[str, Value]) -> bool | None:
        """Three-valued truth on a flattened event: ``None`` when unknown."""
        if self.attribute not in event:
            return None
        value = event[self.attribute]
        if kind_of(value) is not kind_of(self.values[0]):
            return None
        op, vals = self.op, self.values
        if op == "=":
            return value == vals[0]
        if op == "!=":
            return value != vals[0]
        if op == "<":
            return value < vals[0]  # type: ignore[operator]
        if op == "<=":
            return value <= vals[0]  # type: ignore[operator]
        if op == ">":
            return value > vals[0]  # type: ignore[operator]
        if op == ">=":
            return value >= vals[0]  # type: ignore[operator]
        if op in ("in", "notin"):
            return (value in vals) == (op == "in")
        if op in ("between", "notbetween"):
            inside = vals[0] <= value <= vals[1]  # type: ignore[operator]
            return inside == (op == "between")
        assert op in ("like", "notlike")
        return _like(str(value), str(vals[0])) == (op == "like")


_COMPARISON_SLOTS = _slot_setters(Comparison)


@dataclass(frozen=True, slots=True)
class And:
    children: tuple[Expression, ...]

    def evaluate(self, event: dict[str, Value]) -> bool | None:
        result: bool | None = True
        for child in self.children:
            truth = child.evaluate(event)
            if truth is False:
                return False
            if truth is None:
                result = None
        return result


@dataclass(frozen=True, slots=True)
class Or:
    children: tuple[Expression, ...]

    def evaluate(self, event: dict[str, Value]) -> bool | None:
        result: bool | None = False
        for child in self.children:
            truth = child.evaluate(event)
            if truth is True:
                return True
            if truth is None:
                result = None
        return result


@dataclass(frozen=True, slots=True)
class Not:
    child: Expression

    def evaluate(self, event: dict[str, Value]) -> bool | None:
        truth = self.child.evaluate(event)
        return None if truth is None else not truth


Expression = Comparison | And | Or | Not


def _like(value: str, pattern: str) -> bool:
    """SQL ``like`` restricted to the language's forms: abc, abc%, %abc, %abc%."""
    if len(pattern) >= 2 and pattern.startswith("%") and pattern.endswith("%"):
        return pattern[1:-1] in value
    if pattern.startswith("%"):
        return value.endswith(pattern[1:])
    if pattern.endswith("%"):
        return value.startswith(pattern[:-1])
    return value == pattern
