"""The parser: the grammar's spellings, and errors with positions."""

from __future__ import annotations

import pytest

from psmatch.errors import ExpressionError, ExpressionLimitError
from psmatch.language import parse_expression, parse_subscription
from tests.strategies import only_predicates


@pytest.mark.parametrize("text", [
    "a = 1 AND b = 2", "a == 1 and b = 2", "A = 1 and b = 2",
])
def test_keywords_are_case_insensitive_and_double_equals_is_equals(text):
    assert {p.attribute for p in parse_subscription(text).conjuncts[0].predicates} in (
        {"a", "b"}, {"A", "b"})


def test_operators_spelled_two_ways_mean_the_same():
    assert only_predicates("a <> 3") == only_predicates("a != 3")
    assert only_predicates("a not in (1, 2)") == only_predicates("not a in (1, 2)")
    assert only_predicates("a not between 1 and 2") == only_predicates("not (a between 1 and 2)")


def test_dotted_and_backquoted_attribute_names():
    assert set(only_predicates("user.age >= 18 and `first name` = 'Ann'")) == {
        "user.age", "first name"}


@pytest.mark.parametrize(("text", "position", "words"), [
    ("a = ", 4, "expected a value"),
    ("a in ()", 6, "expected a value"),
    ("a = 1 and", 9, "expected an attribute"),
    ("a = 1 b = 2", 6, "unexpected 'b'"),
    ("(a = 1", 6, "expected ')'"),
    ("a = 'open", 4, "unterminated string"),
    ("a ~ 1", 2, "unexpected character"),
    ("a = 99999999999999999999", 4, "64-bit"),
    ("a = 1e999", 4, "finite"),
    ("f < true", 2, "booleans"),
    ("a in (1, 'x')", 2, "mix kinds"),
    ("s like 'a%b'", 7, "like supports"),
    ("a between 1 or 2", 12, "expected 'and' in between"),
    ("a not = 1", 6, "expected in, between or like"),
])
def test_errors_name_the_position_and_the_problem(text, position, words):
    with pytest.raises(ExpressionError) as info:
        parse_subscription(text)
    assert isinstance(info.value, ValueError)
    assert info.value.position == position
    assert words in str(info.value)
    assert f"at position {position}" in str(info.value)


def test_empty_expression_is_an_error():
    with pytest.raises(ExpressionError, match="empty expression"):
        parse_subscription("   ")


def test_deep_nesting_is_a_clear_error():
    with pytest.raises(ExpressionLimitError, match="nested deeper"):
        parse_expression("(" * 200 + "a = 1" + ")" * 200)
