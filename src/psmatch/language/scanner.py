"""The parser's fast path: a conjunction of comparisons, read a comparison at a time.

The commonest text of the language, ``a = 1 and b in (2, 3) and c like 'x%'``, is read
with one regex match per comparison instead of a token at a time: what
:class:`~psmatch.language.parser.Parser` would read, with ``not`` folded into the
operator. Any other text, and any error or limit, is left to the tokenizer and parser,
which take it from the start: every error is theirs. Cost O(len(text)).
"""

from __future__ import annotations

import re

from psmatch.errors import ExpressionError
from psmatch.language.lexer import KEYWORD_SPELLINGS, number_value, op_spelling
from psmatch.language.limits import MAX_PREDICATES
from psmatch.language.tree import (
    COMPLEMENT,
    And,
    Comparison,
    Expression,
    check_like_pattern,
    check_value_kinds,
)
from psmatch.language.values import Value

_VALUE = r"""
    (?:[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][-+]?[0-9]+)?|'[^'\\]*'|"[^"\\]*"
    |(?i:true|false))(?=[\s,)]|\Z)
"""
_VALUE_RE = re.compile(_VALUE, re.VERBOSE)
_COMPARISON_RE = re.compile(
    rf"""
    \s*(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_0-9]+)*|`(?:[^`]|``)*`)
    (?:
        \s*(?P<op><>|!=|==|<=|>=|=|<|>)\s*(?P<value>{_VALUE})
      | \s+(?P<not>(?i:not)\s+)?(?:
            (?i:in)\s*\((?P<list>\s*{_VALUE}(?:\s*,\s*{_VALUE})*)\s*\)
          | (?i:between)\s+(?P<low>{_VALUE})\s+(?i:and)\s+(?P<high>{_VALUE})
          | (?i:like)\s+(?P<pattern>'[^'\\]*'|"[^"\\]*")(?=[\s,)]|\Z)
        )
    )
    (?:\s+(?P<more>(?i:and))\s+|\s*\Z)
    """,
    re.VERBOSE,
)
"""One comparison of a conjunction and the ``and`` after it (or the end of the text). Its
groups, in order: name, op, value, not, list, low, high, pattern, more.

Built from the tokens of :data:`~psmatch.language.lexer.TOKEN_RE` so that whatever it
matches, the tokenizer splits into the same tokens: keywords stand between whitespace
(or before ``(``), values before whitespace, a comma, a closing parenthesis or the end,
and strings hold no escape.
"""


def _literal(lexeme: str) -> Value:
    """The value of a literal matched by :data:`_VALUE`, as the tokenizer reads it; an
    :class:`ExpressionError` for a number out of range (the parser's to report, with its
    position: the caller falls back to it)."""
    if lexeme.isdigit() and len(lexeme) <= 18:  # ASCII digits only, as _VALUE matched
        return int(lexeme)
    first = lexeme[0]
    if first == "'" or first == '"':
        return lexeme[1:-1]
    if first in "tTfF":
        return lexeme.lower() == "true"
    return number_value(lexeme, lexeme, 0)


Written = tuple[str, str, tuple[Value, ...], int]
"""One comparison as written: attribute, operator (as :class:`Comparison` spells it),
values and position."""


def scan_conjunction(text: str) -> list[Written] | None:
    """The comparisons of the common case of the language, a conjunction of comparisons,
    read with one match of :data:`_COMPARISON_RE` per comparison instead of a token at a
    time: what :class:`~psmatch.language.parser.Parser` would read, with ``not`` folded
    into the operator.

    None for any other text (``or``, ``not`` before an expression, parentheses, escapes,
    a name that is a keyword, any error or limit), which the tokenizer and parser then
    take from the start: every error is theirs. Cost O(len(text)).
    """
    comparisons: list[Written] = []
    match = _COMPARISON_RE.match
    position = 0
    while True:
        m = match(text, position)
        if m is None:
            return None
        name, op, value, negated, in_list, low, high, pattern, more = m.groups()
        if name[0] == "`":
            attribute = name[1:-1].replace("``", "`")
            if not attribute:
                return None
        elif name in KEYWORD_SPELLINGS:
            return None
        else:
            attribute = name
        try:
            if op is not None:
                op = op_spelling(op, op)
                # inlined: _literal's first case, the most common value
                values: tuple[Value, ...] = (
                    (int(value),) if value.isdigit() and len(value) <= 18 else (_literal(value),))
            elif in_list is not None:
                op = "in"
                values = tuple(map(_literal, _VALUE_RE.findall(text, *m.span(5))))
                if len(values) > MAX_PREDICATES:
                    return None
            elif low is not None:
                op, values = "between", (_literal(low), _literal(high))
            else:
                op, values = "like", (pattern[1:-1],)
                check_like_pattern(values[0], text, 0)
            if negated:
                op = COMPLEMENT[op]
            if len(values) > 1 or values[0].__class__ is bool:  # else nothing to check
                check_value_kinds(attribute, op, values, text, 0)
        except ExpressionError:
            return None
        comparisons.append((attribute, op, values, m.start(1)))
        if len(comparisons) > MAX_PREDICATES:
            return None
        if more is None:  # the match reached the end of the text
            return comparisons
        position = m.end()


def parse_conjunction(text: str) -> Expression | None:
    """The tree :class:`~psmatch.language.parser.Parser` would build for a conjunction
    of comparisons, from :func:`scan_conjunction`; None for any other text. Cost
    O(len(text))."""
    written = scan_conjunction(text)
    return None if written is None else conjunction_tree(written)


def conjunction_tree(written: list[Written]) -> Expression:
    """The tree of scanned comparisons (:func:`scan_conjunction`): the one comparison,
    or their ``And``."""
    comparisons = [Comparison(*w) for w in written]
    return comparisons[0] if len(comparisons) == 1 else And(tuple(comparisons))
