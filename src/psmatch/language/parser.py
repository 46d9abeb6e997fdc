"""The recursive-descent parser of the text form: tokens to an expression tree.

Owns the grammar (``or`` of ``and`` of ``not``, parentheses, comparisons), the limits on
nesting and on comparisons and values it reaches as it reads, and
:func:`parse_expression`, which tries the conjunction scanner
(:mod:`psmatch.language.scanner`) first and leaves any other text to the parser. Errors
are :class:`psmatch.errors.ExpressionError` naming the position. Cost O(len(text)).
"""

from __future__ import annotations

from psmatch.errors import ExpressionError, ExpressionLimitError
from psmatch.language.lexer import KIND, POSITION, TEXT, VALUE, Token, op_spelling, tokenize
from psmatch.language.limits import MAX_DEPTH, MAX_PREDICATES, MAX_TEXT
from psmatch.language.scanner import parse_conjunction
from psmatch.language.tree import (
    COMPLEMENT,
    And,
    Comparison,
    Expression,
    Not,
    Or,
    check_like_pattern,
    check_value_kinds,
)
from psmatch.language.values import Value

_COMPARISON_OPS = frozenset({"=", "==", "!=", "<>", "<", "<=", ">", ">="})


class Parser:
    """The tree of one text (:meth:`parse`), read a token at a time."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0
        self.comparisons = 0

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def error(self, message: str, token: Token | None = None) -> ExpressionError:
        token = token or self.tok
        return ExpressionError(message, self.text, token[POSITION])

    def describe(self, token: Token) -> str:
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
            op = op_spelling(op_tok[VALUE], op_tok[VALUE])  # type: ignore[arg-type]
            values = (self.parse_value(),)
        else:
            negated = self.accept_keyword("not")
            op, values = self.parse_keyword_operator(attribute, op_tok, negated)
        if negated:
            op = COMPLEMENT[op]
        check_value_kinds(attribute, op, values, self.text, op_tok[POSITION])
        return Comparison(attribute, op, values, name_tok[POSITION])

    def parse_keyword_operator(self, attribute: str, op_tok: Token,
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
            check_like_pattern(pattern, self.text, pattern_tok[POSITION])
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


def parse_expression(text: str) -> Expression:
    """Parse the text form into an expression tree. Cost O(len(text))."""
    if not isinstance(text, str):
        raise ExpressionError(f"an expression must be a string, not {type(text).__name__}")
    if len(text) > MAX_TEXT:
        raise ExpressionLimitError(f"expression longer than {MAX_TEXT} characters")
    return parse_conjunction(text) or Parser(text).parse()
