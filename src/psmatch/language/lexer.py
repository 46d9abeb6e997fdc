"""The tokenizer of the text form: the text to a list of tokens, one ``findall`` of a regex.

Owns the tokens' spellings (names, back-quoted names, keywords in any case, operators,
numbers, quoted strings with their escapes) and the values of literals: integers in the
64-bit range, finite floats, strings decoded as JSON decodes ``\\u`` escapes. Cost
O(len(text)).
"""

from __future__ import annotations

import math
import re
from itertools import product

from psmatch.errors import ExpressionError
from psmatch.language.values import INT64_MAX, INT64_MIN

TOKEN_RE = re.compile(
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

KEYWORDS = frozenset({"and", "or", "not", "in", "between", "like", "true", "false"})
KEYWORD_SPELLINGS = frozenset(
    "".join(letters)
    for word in KEYWORDS
    for letters in product(*zip(word, word.upper(), strict=True))
)
"""Every spelling of every keyword (they are case-insensitive): one lookup, no lower()."""
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", "'": "'", '"': '"'}
_OP_SPELLING = {"==": "=", "<>": "!="}
op_spelling = _OP_SPELLING.get
"""``op_spelling(op, op)``: the operator ``op`` as :class:`~psmatch.language.tree.Comparison`
spells it (``==`` is ``=``, ``<>`` is ``!=``). A bound method, for the parser's hot path:
``.get`` called on a dict imported from another module would compile to an
attribute load, making a bound method at each call."""


Token = tuple[str, str, object, int]
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


def number_value(literal: str, text: str, position: int) -> int | float:
    """The value of a number literal: an int in the 64-bit range, or a finite float; an
    :class:`ExpressionError` at ``position`` of ``text`` otherwise."""
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


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``, then an ``end`` token. Cost O(len(text)): one
    ``findall`` of :data:`TOKEN_RE` (no match object per token), and a few operations
    per token; each token starts where the previous one ended, after its space."""
    tokens: list[Token] = []
    append = tokens.append
    end = 0
    for space, name, op, integer, number, string, unterminated, quoted, other in (
            TOKEN_RE.findall(text)):  # fmt: skip
        start = end + len(space)
        if name:
            end = start + len(name)
            lower = name.lower()
            if lower in KEYWORDS:
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
            append(("number", number, number_value(number, text, start), start))
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
