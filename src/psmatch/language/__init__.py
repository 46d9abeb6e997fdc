"""The subscription language: text form, expression tree, and the normal form matchers index.

Owns everything between the text a user types and the conjuncts an index stores:

* the tokenizer and recursive-descent parser for the text form
  (``price < 100 and category in ('books', 'music') and not (brand = 'acme' or stock <= 0)``),
  and a fast path for the commonest text, a conjunction of comparisons, read a comparison
  at a time (:func:`_scan_conjunction`; it reads what the parser would, or leaves the
  text and any error to the parser);
* the expression tree (:class:`Comparison`, :class:`And`, :class:`Or`, :class:`Not`) with
  a direct three-valued evaluation, the reference the tests hold every matcher to;
* normalisation to disjunctive normal form: ``not`` is pushed into the complementary
  operator, each conjunct keeps at most one :class:`Predicate` per attribute (several
  predicates on one attribute are intersected into one set of intervals), conjuncts that
  can never be true are dropped, and an expression with nothing left is rejected; a
  conjunction of comparisons on distinct attributes goes straight to its one conjunct
  (:meth:`_Normaliser.conjunction`), from the scanned text itself when the whole text
  is one (:func:`parse_subscription`).

A normalised predicate is a union of disjoint intervals over one value kind (numbers,
strings or booleans) plus, for strings, residual ``like`` patterns that are not intervals
(suffix and contains). Every operator maps onto that shape, which is what lets one
predicate-space tree per attribute serve them all.

The normal form outside these objects, as JSON text and as columns of many
subscriptions, is :mod:`psmatch.language.encoding`'s.

Whatever the mix of operators, parsing costs O(len(text)) and normalisation at most
:data:`MAX_NORMALISATION_STEPS` steps: interval sets intersect by a sorted merge, and
the limits (text, nesting, comparisons, in-list values, conjuncts, intervals per
predicate, steps) are checked as the parser or normalisation reaches them; only the
normal form's total of intervals is checked once it is complete.

Errors are :class:`psmatch.errors.ExpressionError` (a ``ValueError``) naming the position;
past a limit, :class:`psmatch.errors.ExpressionLimitError`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from enum import IntEnum
from itertools import product
from operator import attrgetter
from typing import NamedTuple

from psmatch.errors import ExpressionError, ExpressionLimitError, UnsatisfiableError

MAX_CONJUNCTS = 64
"""Most conjuncts a subscription may have after normalisation to DNF."""
MAX_PREDICATES = 256
"""Most comparisons an expression may contain, and most values in one ``in`` list."""
MAX_DEPTH = 64
"""Deepest nesting of parentheses and ``not``."""
MAX_TEXT = 65_536
"""Longest expression text, in characters."""
MAX_INTERVALS = 1024
"""Most intervals in one predicate, once the comparisons on its attribute in a conjunct
are merged (four ``not in`` lists of 256 values leave 1,025)."""
MAX_NORMAL_FORM_INTERVALS = 65_536
"""Most intervals in a subscription's normal form, summed over its conjuncts: what a
matcher indexes for it."""
MAX_NORMALISATION_STEPS = 2**18
"""Most steps (intervals read or built, patterns checked, predicates copied) that
normalisation may take: what bounds its time whatever the mix of operators."""

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MAX_CODE_POINT = 0x10FFFF


class Kind(IntEnum):
    """The value kinds. An attribute's value in an event has exactly one."""

    NUMBER = 0
    STRING = 1
    BOOL = 2


Value = int | float | str | bool


KIND_OF_CLASS = {bool: Kind.BOOL, str: Kind.STRING, int: Kind.NUMBER, float: Kind.NUMBER}
"""The kind of each exact class a validated value has (a flat event's values have only
these, see :mod:`psmatch.events`)."""


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


# --------------------------------------------------------------------------- tokens

_TOKEN_RE = re.compile(
    r"""
    (?P<space>\s*)(?:
    (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_0-9]+)*)
  | (?P<op><>|!=|==|<=|>=|=|<|>|\(|\)|,)
  | (?P<integer>[-+]?[0-9]{1,18}(?![0-9.eE]))
  | (?P<number>[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][-+]?[0-9]+)?)
  | (?P<string>'(?:[^'\\]|\\[\s\S])*'|"(?:[^"\\]|\\[\s\S])*")
  | (?P<unterminated>'|")
  | (?P<quoted_name>`(?:[^`]|``)*`)
  | (?P<other>\S)
    )
    """,
    re.VERBOSE,
)
"""One token after any whitespace; every text is a sequence of these, then whitespace.
Every group but ``space`` is empty unless it is the token's kind. Besides ``integer`` (a
case of ``number``, tried first) and ``other`` (last), the alternatives start with
different characters: their order only makes the commonest tokens quickest.

Only ASCII digits form numbers (``\\d`` would take any Unicode digit, such as ``１``).
``integer`` is the common case of ``number`` that :func:`int` takes as it is: at most 18
digits, so within the 64-bit range. ``string`` spans a quoted string whatever its
escapes, which :func:`_read_string` then decodes; a quote that opens no complete string
is ``unterminated`` (where :func:`_read_string` says what is wrong). ``other`` is any
character no token starts with.
"""

_KEYWORDS = frozenset({"and", "or", "not", "in", "between", "like", "true", "false"})
_KEYWORD_SPELLINGS = frozenset(
    "".join(letters)
    for word in _KEYWORDS
    for letters in product(*zip(word, word.upper(), strict=True))
)
"""Every spelling of every keyword (they are case-insensitive): one lookup, no lower()."""
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", "'": "'", '"': '"'}


_Token = tuple[str, str, object, int]
"""A token: kind ("name", "keyword", "number", "string", "op" or "end"), its text,
its value and its position. Plain tuples: tokenizing is on the build's hot path."""
KIND, TEXT, VALUE, POSITION = range(4)


def _read_string(text: str, start: int) -> tuple[str, int]:
    """Read a quoted string whose opening quote is at ``start``; return (value, end).

    ``\\uXXXX`` escapes decode as in JSON: a high surrogate followed by a low one is one
    code point; a surrogate escape on its own is refused, as it encodes no character.
    """
    quote = text[start]
    out: list[str] = []
    i = start + 1
    while i < len(text):
        ch = text[i]
        if ch == quote:
            return "".join(out), i + 1
        if ch == "\\":
            if i + 1 >= len(text):
                break
            esc = text[i + 1]
            if esc in _ESCAPES:
                out.append(_ESCAPES[esc])
                i += 2
            elif esc == "u":
                code = _hex4(text, i)
                if 0xDC00 <= code <= 0xDFFF:
                    raise ExpressionError(
                        f"\\u{code:04X} is a low surrogate without a high surrogate before it",
                        text, i)
                if 0xD800 <= code <= 0xDBFF:
                    low = _hex4(text, i + 6) if text.startswith("\\u", i + 6) else -1
                    if not 0xDC00 <= low <= 0xDFFF:
                        raise ExpressionError(
                            f"\\u{code:04X} is a high surrogate not followed by a low surrogate "
                            "escape (\\uDC00 to \\uDFFF)", text, i)
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    i += 6
                out.append(chr(code))
                i += 6
            else:
                raise ExpressionError(f"unknown escape \\{esc}", text, i)
        else:
            out.append(ch)
            i += 1
    raise ExpressionError("unterminated string", text, start)


def _hex4(text: str, i: int) -> int:
    """The code of the ``\\uXXXX`` escape at ``i``."""
    digits = text[i + 2 : i + 6]
    if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
        raise ExpressionError("\\u must be followed by 4 hex digits", text, i)
    return int(digits, 16)


def _number(literal: str, text: str, position: int) -> int | float:
    shown = literal if len(literal) <= 40 else f"{literal[:20]}... ({len(literal)} characters)"
    if "." not in literal and "e" not in literal and "E" not in literal:
        # More than 19 significant digits is out of range whatever they are; counting
        # first also spares int() its 4,300-digit limit (a plain ValueError), which
        # counts leading zeros too.
        sign = literal[0] if literal[0] in "+-" else ""
        digits = literal.lstrip("+-").lstrip("0") or "0"
        value = int(sign + digits) if len(digits) <= 19 else INT64_MAX + 1
        if not INT64_MIN <= value <= INT64_MAX:
            raise ExpressionError(
                f"integer {shown} is outside the 64-bit signed range", text, position
            )
        return value
    number = float(literal)
    if not math.isfinite(number):
        raise ExpressionError(f"number {shown} is not a finite float", text, position)
    return number


def _tokenize(text: str) -> list[_Token]:
    """The tokens of ``text``, then an ``end`` token. Cost O(len(text)): one
    ``findall`` of :data:`_TOKEN_RE` (no match object per token), and a few operations
    per token; each token starts where the previous one ended, after its space."""
    tokens: list[_Token] = []
    append = tokens.append
    end = 0
    for space, name, op, integer, number, string, unterminated, quoted, other in (
            _TOKEN_RE.findall(text)):  # fmt: skip
        start = end + len(space)
        if name:
            end = start + len(name)
            lower = name.lower()
            if lower in _KEYWORDS:
                append(("keyword", lower, lower, start))
            else:
                append(("name", name, name, start))
        elif op:
            end = start + len(op)
            append(("op", op, op, start))
        elif integer:
            end = start + len(integer)
            append(("number", integer, int(integer), start))
        elif number:
            end = start + len(number)
            append(("number", number, _number(number, text, start), start))
        elif string:
            end = start + len(string)
            value = _read_string(text, start)[0] if "\\" in string else string[1:-1]
            append(("string", string, value, start))
        elif unterminated:
            _read_string(text, start)  # raises: this quote opens no complete string
        elif quoted:
            end = start + len(quoted)
            attribute = quoted[1:-1].replace("``", "`")
            if not attribute:
                raise ExpressionError("empty attribute name", text, start)
            append(("name", quoted, attribute, start))
        else:
            raise ExpressionError(f"unexpected character {other!r}", text, start)
    append(("end", "", None, len(text)))
    return tokens


# --------------------------------------------------------------------------- tree


def _slot_setters(cls: type) -> tuple[Callable[[object, object], None], ...]:
    """The setter of each field's slot of a frozen slots dataclass, in field order.

    :class:`Comparison`, built once per comparison, stores its fields with these in its
    own ``__init__``: the generated one calls ``object.__setattr__`` by name for each
    field, which made the tree's construction a fifth of the cost of parsing a
    subscription (:class:`Interval` and :class:`Predicate` are named tuples instead).
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


# --------------------------------------------------------------------------- parser

_COMPLEMENT = {
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


_COMPARISON_OPS = frozenset({"=", "==", "!=", "<>", "<", "<=", ">", ">="})
_OP_SPELLING = {"==": "=", "<>": "!="}


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.i = 0
        self.comparisons = 0

    @property
    def tok(self) -> _Token:
        return self.tokens[self.i]

    def error(self, message: str, token: _Token | None = None) -> ExpressionError:
        token = token or self.tok
        return ExpressionError(message, self.text, token[POSITION])

    def describe(self, token: _Token) -> str:
        return "end of expression" if token[KIND] == "end" else repr(token[TEXT])

    def accept_keyword(self, word: str) -> bool:
        tok = self.tokens[self.i]
        if tok[VALUE] == word and tok[KIND] == "keyword":
            self.i += 1
            return True
        return False

    def expect_op(self, op: str) -> None:
        if self.tok[KIND] == "op" and self.tok[VALUE] == op:
            self.i += 1
            return
        raise self.error(f"expected {op!r} but found {self.describe(self.tok)}")

    def parse(self) -> Expression:
        if not self.text.strip():
            raise ExpressionError("empty expression", self.text, 0)
        expr = self.parse_or(0)
        if self.tok[KIND] != "end":
            raise self.error(f"unexpected {self.describe(self.tok)} after a complete expression")
        return expr

    def parse_or(self, depth: int) -> Expression:
        children = [self.parse_and(depth)]
        while self.accept_keyword("or"):
            children.append(self.parse_and(depth))
        return children[0] if len(children) == 1 else Or(tuple(children))

    def parse_and(self, depth: int) -> Expression:
        children = [self.parse_not(depth)]
        while self.accept_keyword("and"):
            children.append(self.parse_not(depth))
        return children[0] if len(children) == 1 else And(tuple(children))

    def parse_not(self, depth: int) -> Expression:
        if depth > MAX_DEPTH:
            raise ExpressionLimitError(
                f"expression nested deeper than {MAX_DEPTH} levels", self.text, self.tok[POSITION]
            )
        tok = self.tokens[self.i]
        if tok[KIND] == "name":
            return self.parse_comparison()
        if self.accept_keyword("not"):
            return Not(self.parse_not(depth + 1))
        if tok[KIND] == "op" and tok[VALUE] == "(":
            self.i += 1
            expr = self.parse_or(depth + 1)
            self.expect_op(")")
            return expr
        return self.parse_comparison()

    def parse_value(self) -> Value:
        tok = self.tokens[self.i]
        if tok[KIND] in ("number", "string"):
            self.i += 1
            return tok[VALUE]  # type: ignore[return-value]
        if tok[KIND] == "keyword" and tok[VALUE] in ("true", "false"):
            self.i += 1
            return tok[VALUE] == "true"
        raise self.error(
            f"expected a value (number, quoted string, true or false) "
            f"but found {self.describe(tok)}"
        )

    def parse_comparison(self) -> Comparison:
        name_tok = self.tokens[self.i]
        if name_tok[KIND] != "name":
            raise self.error(f"expected an attribute name but found {self.describe(name_tok)}")
        self.i += 1
        self.comparisons += 1
        if self.comparisons > MAX_PREDICATES:
            raise ExpressionLimitError(
                f"more than {MAX_PREDICATES} comparisons in one expression",
                self.text,
                name_tok[POSITION],
            )
        attribute = str(name_tok[VALUE])
        op_tok = self.tokens[self.i]
        negated = False
        values: tuple[Value, ...]
        if op_tok[KIND] == "op" and op_tok[VALUE] in _COMPARISON_OPS:
            self.i += 1
            op = _OP_SPELLING.get(op_tok[VALUE], op_tok[VALUE])  # type: ignore[arg-type]
            values = (self.parse_value(),)
        else:
            negated = self.accept_keyword("not")
            op, values = self.parse_keyword_operator(attribute, op_tok, negated)
        if negated:
            op = _COMPLEMENT[op]
        _check_types(attribute, op, values, self.text, op_tok[POSITION])
        return Comparison(attribute, op, values, name_tok[POSITION])

    def parse_keyword_operator(self, attribute: str, op_tok: _Token,
                               negated: bool) -> tuple[str, tuple[Value, ...]]:
        """``in (...)``, ``between A and B`` or ``like 'pattern'`` (after any ``not``)."""
        if self.accept_keyword("in"):
            return "in", self.parse_list()
        if self.accept_keyword("between"):
            low = self.parse_value()
            if not self.accept_keyword("and"):
                raise self.error(f"expected 'and' in between but found {self.describe(self.tok)}")
            return "between", (low, self.parse_value())
        if self.accept_keyword("like"):
            pattern_tok = self.tok
            pattern = self.parse_value()
            if not isinstance(pattern, str):
                raise self.error("like needs a quoted string pattern", pattern_tok)
            _check_like_pattern(pattern, self.text, pattern_tok[POSITION])
            return "like", (pattern,)
        if negated:
            raise self.error(f"expected in, between or like after 'not' but found "
                             f"{self.describe(self.tok)}")
        raise self.error(
            f"expected an operator after {attribute!r} but found {self.describe(op_tok)}"
        )

    def parse_list(self) -> tuple[Value, ...]:
        self.expect_op("(")
        values = [self.parse_value()]
        while self.tok[KIND] == "op" and self.tok[VALUE] == ",":
            self.i += 1
            values.append(self.parse_value())
            if len(values) > MAX_PREDICATES:
                raise ExpressionLimitError(
                    f"more than {MAX_PREDICATES} values in one in-list",
                    self.text,
                    self.tok[POSITION],
                )
        self.expect_op(")")
        return tuple(values)


_BOOL_OPS = frozenset({"=", "!=", "in", "notin"})
_ONE_KIND_NOT_BOOL = frozenset(map(frozenset, ({int}, {float}, {int, float}, {str})))
"""The classes of values that are all of one kind, not booleans: any operator takes them."""


def _check_like_pattern(pattern: str, text: str, position: int) -> None:
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


def _check_types(attribute: str, op: str, values: tuple[Value, ...], text: str, pos: int) -> None:
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

Built from the tokens of :data:`_TOKEN_RE` so that whatever it matches, the tokenizer
splits into the same tokens: keywords stand between whitespace (or before ``(``), values
before whitespace, a comma, a closing parenthesis or the end, and strings hold no escape.
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
    return _number(lexeme, lexeme, 0)


_Written = tuple[str, str, tuple[Value, ...], int]
"""One comparison as written: attribute, operator (as :class:`Comparison` spells it),
values and position."""


def _scan_conjunction(text: str) -> list[_Written] | None:
    """The comparisons of the common case of the language, a conjunction of comparisons,
    read with one match of :data:`_COMPARISON_RE` per comparison instead of a token at a
    time: what :class:`_Parser` would read, with ``not`` folded into the operator.

    None for any other text (``or``, ``not`` before an expression, parentheses, escapes,
    a name that is a keyword, any error or limit), which the tokenizer and parser then
    take from the start: every error is theirs. Cost O(len(text)).
    """
    comparisons: list[_Written] = []
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
        elif name in _KEYWORD_SPELLINGS:
            return None
        else:
            attribute = name
        try:
            if op is not None:
                op = _OP_SPELLING.get(op, op)
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
                _check_like_pattern(values[0], text, 0)
            if negated:
                op = _COMPLEMENT[op]
            if len(values) > 1 or values[0].__class__ is bool:  # else nothing to check
                _check_types(attribute, op, values, text, 0)
        except ExpressionError:
            return None
        comparisons.append((attribute, op, values, m.start(1)))
        if len(comparisons) > MAX_PREDICATES:
            return None
        if more is None:  # the match reached the end of the text
            return comparisons
        position = m.end()


def _parse_conjunction(text: str) -> Expression | None:
    """The tree :class:`_Parser` would build for a conjunction of comparisons, from
    :func:`_scan_conjunction`; None for any other text. Cost O(len(text))."""
    written = _scan_conjunction(text)
    return None if written is None else _tree(written)


def _tree(written: list[_Written]) -> Expression:
    """The tree of scanned comparisons (:func:`_scan_conjunction`): the one comparison,
    or their ``And``."""
    comparisons = [Comparison(*w) for w in written]
    return comparisons[0] if len(comparisons) == 1 else And(tuple(comparisons))


# --------------------------------------------------------------------------- normal form


class Interval(NamedTuple):
    """An interval of one kind's order; ``None`` bounds are unbounded.

    A named tuple, not a frozen dataclass: a normal form's four bounds become one in a
    single ``tuple.__new__`` (:func:`_load_predicate`), and its construction is 0.2-0.4 µs
    against 0.9 µs for a slots dataclass whose ``__init__`` sets four slots. A worker
    loading 1M subscriptions builds about 5M.
    """

    lo: Value | None
    lo_closed: bool
    hi: Value | None
    hi_closed: bool

    def contains(self, value: Value) -> bool:
        if self.lo is not None and (value < self.lo or (value == self.lo and not self.lo_closed)):  # type: ignore[operator]
            return False
        return not (
            self.hi is not None and (value > self.hi or (value == self.hi and not self.hi_closed))  # type: ignore[operator]
        )

    @property
    def is_point(self) -> bool:
        return self.lo is not None and self.lo == self.hi and self.lo_closed and self.hi_closed


_EVERYTHING = (Interval(None, False, None, False),)


@dataclass(frozen=True, slots=True)
class Pattern:
    """A string test that is not an interval: ``suffix`` or ``contains``, maybe negated."""

    form: str
    text: str
    negated: bool

    def test(self, value: str) -> bool:
        hit = value.endswith(self.text) if self.form == "suffix" else self.text in value
        return hit != self.negated


class Predicate(NamedTuple):
    """All of one conjunct's conditions on one attribute, merged.

    True on an event when the attribute is present with a value of ``kind`` that lies
    in one of ``intervals`` (sorted, disjoint, non-empty) and passes every pattern.
    A named tuple, as :class:`Interval` is, for the cost of building one.
    """

    attribute: str
    kind: Kind
    intervals: tuple[Interval, ...]
    patterns: tuple[Pattern, ...] = ()

    def test(self, value: Value) -> bool:
        """Truth for a value already known to be of ``kind``.

        Cost O(log intervals) plus the patterns: a binary search for the first interval
        that does not end below ``value``, the only one that can hold it.
        """
        ivs = self.intervals
        lo, hi = 0, len(ivs)
        while lo < hi:
            mid = (lo + hi) // 2
            end = ivs[mid].hi
            if end is not None and (end < value or (end == value and not ivs[mid].hi_closed)):  # type: ignore[operator]
                lo = mid + 1
            else:
                hi = mid
        if lo == len(ivs) or not ivs[lo].contains(value):
            return False
        return all(p.test(value) for p in self.patterns)  # type: ignore[arg-type]

    def evaluate(self, event: dict[str, Value]) -> bool:
        """True when the event satisfies the predicate (unknown counts as not true)."""
        value = event.get(self.attribute)
        return value is not None and kind_of(value) is self.kind and self.test(value)


@dataclass(frozen=True, slots=True)
class Conjunct:
    """A conjunction of predicates on distinct attributes, sorted by attribute."""

    predicates: tuple[Predicate, ...]

    def evaluate(self, event: dict[str, Value]) -> bool:
        return all(p.evaluate(event) for p in self.predicates)


@dataclass(frozen=True, slots=True)
class Subscription:
    """A parsed subscription: its text and its DNF, what matchers index."""

    text: str
    conjuncts: tuple[Conjunct, ...]

    def evaluate(self, event: dict[str, Value]) -> bool:
        """True when some conjunct is true on the flattened event. Cost O(predicates)."""
        return any(c.evaluate(event) for c in self.conjuncts)

    @property
    def expression(self) -> Expression:
        """The expression tree of :attr:`text`, parsed again: no matcher keeps it, and a
        subscription loaded from its normal form (:func:`load_normal_form`) never had
        it. Cost O(len(text))."""
        return parse_expression(self.text)

    @property
    def predicate_count(self) -> int:
        return sum(len(c.predicates) for c in self.conjuncts)


def _normalise_intervals(intervals: list[Interval]) -> tuple[Interval, ...]:
    """Sort and merge overlapping or touching intervals; drop empty ones.

    Cost O(n log n) for the sort, then one pass.
    """

    def lo_key(iv: Interval) -> tuple:
        return (0,) if iv.lo is None else (1, iv.lo, 0 if iv.lo_closed else 1)

    kept = [iv for iv in intervals if not _is_empty(iv.lo, iv.lo_closed, iv.hi, iv.hi_closed)]
    kept.sort(key=lo_key)
    merged: list[Interval] = []
    for iv in kept:
        if merged:
            last = merged[-1]
            touches = (
                last.hi is None
                or iv.lo is None
                or iv.lo < last.hi  # type: ignore[operator]
                or (iv.lo == last.hi and (iv.lo_closed or last.hi_closed))
            )
            if touches:
                if last.hi is None or (iv.hi is not None and (
                    iv.hi < last.hi or (iv.hi == last.hi and not iv.hi_closed)  # type: ignore[operator]
                )):
                    continue
                merged[-1] = Interval(last.lo, last.lo_closed, iv.hi, iv.hi_closed)
                continue
        merged.append(iv)
    return tuple(merged)


def _is_empty(lo: Value | None, lo_closed: bool, hi: Value | None, hi_closed: bool) -> bool:
    if lo is None or hi is None:
        return False
    if lo > hi:  # type: ignore[operator]
        return True
    return lo == hi and not (lo_closed and hi_closed)


def _complement(ivs: tuple[Interval, ...]) -> tuple[Interval, ...]:
    """The gaps between sorted, disjoint, non-touching intervals. Cost O(n)."""
    out: list[Interval] = []
    lo: Value | None = None
    lo_closed = False
    for iv in ivs:
        if iv.lo is not None:
            out.append(Interval(lo, lo_closed, iv.lo, not iv.lo_closed))
        if iv.hi is None:
            return tuple(out)
        lo, lo_closed = iv.hi, not iv.hi_closed
    out.append(Interval(lo, lo_closed, None, False))
    return tuple(out)


def _prefix_successor(prefix: str) -> str | None:
    """The least string greater than every string starting with ``prefix`` (None: none)."""
    chars = list(prefix)
    while chars and ord(chars[-1]) == MAX_CODE_POINT:
        chars.pop()
    if not chars:
        return None
    chars[-1] = chr(ord(chars[-1]) + 1)
    return "".join(chars)


def _point(value: Value) -> Interval:
    return Interval(value, True, value, True)


def _atomic_predicate(attribute: str, op: str, vals: tuple[Value, ...]) -> Predicate:
    """The predicate of one comparison (``not`` already folded into ``op``).

    Cost O(v log v) for the v values of an ``in`` list, O(1) otherwise.
    """
    kind = kind_of(vals[0])
    if vals[0].__class__ is bool:  # kind is Kind.BOOL (bool has no subclass), but quicker
        # Booleans form the finite domain {False, True}: complements stay inside it.
        chosen = set(vals)
        if op in ("!=", "notin"):
            chosen = {False, True} - chosen
        return Predicate(attribute, kind, tuple(_point(v) for v in sorted(chosen)))
    if op == "=":
        return Predicate(attribute, kind, (_point(vals[0]),))
    if op in ("<", "<="):
        return Predicate(attribute, kind, (Interval(None, False, vals[0], op == "<="),))
    if op in (">", ">="):
        return Predicate(attribute, kind, (Interval(vals[0], op == ">=", None, False),))
    if op in ("like", "notlike"):
        return _like_predicate(attribute, kind, op, str(vals[0]))
    if op in ("in", "!=", "notin"):
        # distinct values (the common case) are points apart: sorting them is all the
        # merge would do
        ivs = (tuple(_point(v) for v in sorted(vals)) if len(set(vals)) == len(vals)
               else _normalise_intervals([_point(v) for v in vals]))  # fmt: skip
    else:  # between, notbetween
        low, high = vals
        ivs = () if low > high else (Interval(low, True, high, True),)  # type: ignore[operator]
    if op in ("!=", "notin", "notbetween"):
        ivs = _complement(ivs)
    return Predicate(attribute, kind, ivs)


def _like_predicate(attribute: str, kind: Kind, op: str, pattern: str) -> Predicate:
    """The predicate of ``attribute like pattern`` (``op`` ``like`` or ``notlike``)."""
    patterns: tuple[Pattern, ...] = ()
    if len(pattern) >= 2 and pattern.startswith("%") and pattern.endswith("%"):
        ivs, patterns = _EVERYTHING, (Pattern("contains", pattern[1:-1], op == "notlike"),)
    elif pattern.startswith("%"):
        ivs, patterns = _EVERYTHING, (Pattern("suffix", pattern[1:], op == "notlike"),)
    elif pattern.endswith("%"):
        prefix = pattern[:-1]
        ivs = (Interval(prefix, True, _prefix_successor(prefix), False),)
    else:
        ivs = (_point(pattern),)
    if patterns and not patterns[0].text:
        # '%' and '%%' hold for every string; their negation for none.
        ivs = () if op == "notlike" else _EVERYTHING
        patterns = ()
    elif op == "notlike" and not patterns:
        ivs = _complement(ivs)
    return Predicate(attribute, kind, ivs, patterns)


def _negate(expr: Expression) -> Expression:
    if isinstance(expr, Comparison):
        return Comparison(expr.attribute, _COMPLEMENT[expr.op], expr.values, expr.position)
    if isinstance(expr, Not):
        return expr.child
    if isinstance(expr, And):
        return Or(tuple(_negate(c) for c in expr.children))
    return And(tuple(_negate(c) for c in expr.children))


def _first_position(expr: Expression) -> int:
    """Where ``expr`` starts in the text: its leftmost comparison. Cost O(depth)."""
    while not isinstance(expr, Comparison):
        expr = expr.child if isinstance(expr, Not) else expr.children[0]
    return expr.position


_RawConjunct = dict[str, Predicate]
_BY_ATTRIBUTE = attrgetter("attribute")


class _Normaliser:
    """Disjunctive normal form of one expression, its work bounded as it is done.

    Each interval read or built, pattern checked and predicate copied is one step;
    past :data:`MAX_NORMALISATION_STEPS` normalisation stops with an
    :class:`ExpressionLimitError` at the comparison that crossed it. The limits on
    intervals per predicate and on conjuncts are checked as each one is built, so no
    expression makes normalisation build more than the limits allow before failing.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.steps = 0

    def charge(self, steps: int, position: int) -> None:
        self.steps += steps
        if self.steps > MAX_NORMALISATION_STEPS:
            raise ExpressionLimitError(
                f"normalising the expression takes more than {MAX_NORMALISATION_STEPS} steps: "
                "it merges attributes with many intervals into many conjuncts; merge its "
                "in-lists or split it into several subscriptions",
                self.text,
                position,
            )

    def dnf(self, expr: Expression) -> list[_RawConjunct]:
        """The conjuncts of ``expr``, each a map from attribute to merged predicate."""
        if isinstance(expr, Not):
            return self.dnf(_negate(expr.child))
        if isinstance(expr, Comparison):
            self.charge(len(expr.values) + 1, expr.position)
            p = self.finish(_atomic_predicate(expr.attribute, expr.op, expr.values),
                            expr.position)
            return [] if p is None else [{p.attribute: p}]
        if isinstance(expr, Or):
            out: list[_RawConjunct] = []
            for child in expr.children:
                out.extend(self.dnf(child))
                self.check_conjuncts(len(out), _first_position(child))
            return out
        written = [(c.attribute, c.op, c.values, c.position) for c in expr.children
                   if c.__class__ is Comparison]  # fmt: skip
        if len(written) == len(expr.children) and _distinct_attributes(written):
            return self.conjunction(written)
        result: list[_RawConjunct] = [{}]
        for child in expr.children:
            terms = self.dnf(child)
            position = _first_position(child)
            distinct = len(result) * len(terms) > 1
            seen: set[frozenset[Predicate]] = set()
            combined: list[_RawConjunct] = []
            for left, right in product(result, terms):
                merged = self.merge(left, right, position)
                if merged is None:
                    continue
                if distinct:
                    # Hashing a conjunct hashes all its intervals: charged as steps.
                    self.charge(sum(len(p.intervals) for p in merged.values()), position)
                    key = frozenset(merged.values())
                    if key in seen:
                        continue
                    seen.add(key)
                combined.append(merged)
                self.check_conjuncts(len(combined), position)
            result = combined
        return result

    def conjunction(self, comparisons: list[_Written]) -> list[_RawConjunct]:
        """The DNF of a conjunction of comparisons on distinct attributes (the common
        case), given as :func:`_scan_conjunction` reads them: one conjunct of their
        predicates, or none if one of them is impossible.

        What :meth:`dnf` builds for any conjunction, without its cross products and
        merges, none of which has anything to combine here; it charges their steps all
        the same, so that the step limit falls exactly where it would.
        """
        conjunct: _RawConjunct | None = {}
        for attribute, op, values, position in comparisons:
            p: Predicate | None = _atomic_predicate(attribute, op, values)
            if p.patterns or not p.intervals:  # else finish(p) is p
                p = self.finish(p, position)
            # dnf's steps for this comparison, then merge(conjunct, {attribute: p})'s
            # unless there is no conjunct left to merge with; charged at once, as all are
            # at the comparison's position
            steps = len(values) + 1
            if conjunct is not None:
                if p is None:
                    conjunct = None
                else:
                    steps += len(conjunct) + 1
                    conjunct[attribute] = p
            self.charge(steps, position)
        return [] if conjunct is None else [conjunct]

    def check_conjuncts(self, count: int, position: int) -> None:
        if count > MAX_CONJUNCTS:
            raise ExpressionLimitError(
                f"the expression expands to more than {MAX_CONJUNCTS} conjuncts in disjunctive "
                "normal form; use 'in' lists or split it into several subscriptions",
                self.text,
                position,
            )

    def merge(self, a: _RawConjunct, b: _RawConjunct, position: int) -> _RawConjunct | None:
        """The conjunction of two raw conjuncts, or None when it can never be true."""
        self.charge(len(a) + len(b), position)
        out = dict(a)
        for attribute, p in b.items():
            q = out.get(attribute)
            if q is None:
                out[attribute] = p
                continue
            if q.kind is not p.kind:
                return None
            intervals = self.intersect(attribute, q.intervals, p.intervals, position)
            merged = self.finish(
                Predicate(attribute, p.kind, intervals, q.patterns + p.patterns), position)
            if merged is None:
                return None
            out[attribute] = merged
        return out

    def intersect(self, attribute: str, a: tuple[Interval, ...], b: tuple[Interval, ...],
                  position: int) -> tuple[Interval, ...]:
        """The intersection of two sorted, disjoint, non-touching interval sets.

        A sorted merge: O(len(a) + len(b)) steps, and the result (at most
        len(a) + len(b) - 1 intervals, sorted, disjoint and non-touching, since each
        piece lies in a different interval of a or of b) is checked against
        :data:`MAX_INTERVALS` as it grows.
        """
        self.charge(len(a) + len(b), position)
        out: list[Interval] = []
        append = out.append
        i = j = 0
        na, nb = len(a), len(b)
        # Inlined: this loop is the whole cost of merging long lists.
        while i < na and j < nb:
            x, y = a[i], b[j]
            x_lo, y_lo = x.lo, y.lo
            if x_lo is None:
                lo, lo_closed = y_lo, y.lo_closed
            elif y_lo is None or x_lo > y_lo:  # type: ignore[operator]
                lo, lo_closed = x_lo, x.lo_closed
            elif y_lo > x_lo:  # type: ignore[operator]
                lo, lo_closed = y_lo, y.lo_closed
            else:
                lo, lo_closed = x_lo, x.lo_closed and y.lo_closed
            x_hi, y_hi = x.hi, y.hi
            # x_first: x ends no later than y, so x meets nothing in b after y.
            if x_hi is None:
                hi, hi_closed, x_first = y_hi, y.hi_closed, False
            elif y_hi is None or x_hi < y_hi:  # type: ignore[operator]
                hi, hi_closed, x_first = x_hi, x.hi_closed, True
            elif y_hi < x_hi:  # type: ignore[operator]
                hi, hi_closed, x_first = y_hi, y.hi_closed, False
            else:
                hi, hi_closed, x_first = x_hi, x.hi_closed and y.hi_closed, not x.hi_closed
            if lo is None or hi is None or lo < hi or (lo == hi and lo_closed and hi_closed):  # type: ignore[operator]
                if len(out) == MAX_INTERVALS:
                    raise ExpressionLimitError(
                        f"the comparisons on {attribute!r} in one conjunct combine into more "
                        f"than {MAX_INTERVALS} intervals; merge their lists or split the "
                        "subscription",
                        self.text,
                        position,
                    )
                append(Interval(lo, lo_closed, hi, hi_closed))
            if x_first:
                i += 1
            else:
                j += 1
        return tuple(out)

    def finish(self, p: Predicate, position: int) -> Predicate | None:
        """Drop impossible predicates; resolve patterns against point sets."""
        if not p.intervals:
            return None
        if not p.patterns:
            return p
        if all(iv.is_point for iv in p.intervals):
            self.charge(len(p.intervals) * (len(p.patterns) + 1), position)
            points = tuple(iv for iv in p.intervals
                           if all(pt.test(iv.lo) for pt in p.patterns))  # type: ignore[arg-type]
            return Predicate(p.attribute, p.kind, points) if points else None
        self.charge(len(p.patterns), position)
        patterns = tuple(dict.fromkeys(p.patterns))
        present = set(patterns)
        if any(Pattern(x.form, x.text, not x.negated) in present for x in patterns):
            return None
        return Predicate(p.attribute, p.kind, p.intervals, patterns)


def parse_expression(text: str) -> Expression:
    """Parse the text form into an expression tree. Cost O(len(text))."""
    if not isinstance(text, str):
        raise ExpressionError(f"an expression must be a string, not {type(text).__name__}")
    if len(text) > MAX_TEXT:
        raise ExpressionLimitError(f"expression longer than {MAX_TEXT} characters")
    return _parse_conjunction(text) or _Parser(text).parse()


def _distinct_attributes(written: list[_Written]) -> bool:
    return len({w[0] for w in written}) == len(written)


def parse_subscription(text: str) -> Subscription:
    """Parse and normalise a subscription.

    Cost O(len(text)): parsing is linear and normalisation stops after
    :data:`MAX_NORMALISATION_STEPS` steps. The text is scanned once: a conjunction of
    comparisons on distinct attributes goes from its scanned comparisons straight to
    :meth:`_Normaliser.conjunction`, with no tree (one comparison is then charged one
    step more than :meth:`_Normaliser.dnf` charges it, which no limit can notice). Raises
    :class:`ExpressionError` for text that does not parse, :class:`ExpressionLimitError`
    past the limits and :class:`UnsatisfiableError` when no conjunct can ever be true.
    """
    readable = text.__class__ is str and len(text) <= MAX_TEXT
    written = _scan_conjunction(text) if readable else None
    normaliser = _Normaliser(text)
    if written is not None and _distinct_attributes(written):
        raw = normaliser.conjunction(written)
    elif written is not None:
        raw = normaliser.dnf(_tree(written))
    else:  # parse_expression would scan again; it checks what is not readable
        raw = normaliser.dnf(_Parser(text).parse() if readable else parse_expression(text))
    conjuncts = tuple([Conjunct(tuple(sorted(c.values(), key=_BY_ATTRIBUTE))) for c in raw])
    if not conjuncts:
        raise UnsatisfiableError(f"the expression can never be true: {text!r}", text)
    total = sum([len(p.intervals) for c in conjuncts for p in c.predicates])
    if total > MAX_NORMAL_FORM_INTERVALS:
        raise ExpressionLimitError(
            f"the expression has {total} intervals in its normal form, more than "
            f"{MAX_NORMAL_FORM_INTERVALS}: its conjuncts repeat comparisons with many values; "
            "split it into several subscriptions",
            text,
        )
    return Subscription(text, conjuncts)
