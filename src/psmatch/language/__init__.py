"""The subscription language: text form, expression tree, and the normal form matchers index.

The text form is a boolean expression over comparisons of an event's attributes::

    price < 100 and category in ('books', 'music') and not (brand = 'acme' or stock <= 0)

``or``, ``and`` and ``not`` (keywords in any case) and parentheses over comparisons
``attribute op value``: ``= == != <> < <= > >=``, ``[not] in (v, ...)``,
``[not] between a and b`` and ``[not] like 'abc%' | '%abc' | '%abc%'``. Attributes are
names, dotted for nested objects (``user.age``), or back-quoted (```first name```);
values are numbers (64-bit integers, finite floats; 1 and 1.0 are equal), quoted strings
(ordered by code point, with escapes) and ``true``/``false`` (not numbers). On an event,
a missing attribute or a value of another kind makes a comparison unknown, and neither
it nor its negation matches.

A subscription is matched in its normal form, a disjunction of conjuncts: each conjunct
holds one predicate per attribute, a union of disjoint intervals over one value kind
plus, for strings, residual ``like`` patterns (suffix and contains). Every operator maps
onto that shape, which is what lets one predicate-space tree per attribute serve them
all. Whatever the mix of operators, parsing costs O(len(text)) and normalisation at most
:data:`MAX_NORMALISATION_STEPS` steps, within the limits of
:mod:`psmatch.language.limits`. Errors are :class:`psmatch.errors.ExpressionError` (a
``ValueError``) naming the position; past a limit,
:class:`psmatch.errors.ExpressionLimitError`.

The modules: :mod:`~psmatch.language.values` (kinds), :mod:`~psmatch.language.lexer`,
:mod:`~psmatch.language.parser` and its fast path :mod:`~psmatch.language.scanner`,
:mod:`~psmatch.language.tree` (the expression tree and its evaluation),
:mod:`~psmatch.language.normal_form` (the DNF types), :mod:`~psmatch.language.predicates`
and :mod:`~psmatch.language.normalise` (the normaliser, :func:`parse_subscription`),
:mod:`~psmatch.language.columns` (many normal forms as columns) and
:mod:`psmatch.service.records.normal_forms` (the normal form as JSON text).
"""

from __future__ import annotations

from psmatch.language.limits import (
    MAX_CONJUNCTS,
    MAX_DEPTH,
    MAX_INTERVALS,
    MAX_NORMAL_FORM_INTERVALS,
    MAX_NORMALISATION_STEPS,
    MAX_PREDICATES,
    MAX_TEXT,
)
from psmatch.language.normal_form import Conjunct, Interval, Pattern, Predicate, Subscription
from psmatch.language.normalise import parse_subscription
from psmatch.language.parser import parse_expression
from psmatch.language.tree import And, Comparison, Expression, Not, Or
from psmatch.language.values import (
    INT64_MAX,
    INT64_MIN,
    KIND_OF_CLASS,
    KIND_OF_CODE,
    Kind,
    Value,
    kind_of,
)

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "KIND_OF_CLASS",
    "KIND_OF_CODE",
    "MAX_CONJUNCTS",
    "MAX_DEPTH",
    "MAX_INTERVALS",
    "MAX_NORMALISATION_STEPS",
    "MAX_NORMAL_FORM_INTERVALS",
    "MAX_PREDICATES",
    "MAX_TEXT",
    "And",
    "Comparison",
    "Conjunct",
    "Expression",
    "Interval",
    "Kind",
    "Not",
    "Or",
    "Pattern",
    "Predicate",
    "Subscription",
    "Value",
    "kind_of",
    "parse_expression",
    "parse_subscription",
]
