"""The tokenizer: literals' values (numbers in range, strings and their escapes), and
the errors it names with their positions."""

from __future__ import annotations

import json

import pytest

from psmatch import make_matcher
from psmatch.errors import ExpressionError
from psmatch.events import flatten_event
from psmatch.language import Kind, parse_subscription
from tests.strategies import only_predicates


def test_values_numbers_strings_with_escapes_and_booleans():
    preds = only_predicates(r"""a = -1.5e3 and b = 'it\'s' and c = "tab\there" and d = true""")
    assert preds["a"].intervals[0].lo == -1500.0
    assert preds["b"].intervals[0].lo == "it's"
    assert preds["c"].intervals[0].lo == "tab\there"
    assert preds["d"].kind is Kind.BOOL and preds["d"].intervals[0].lo is True


@pytest.mark.parametrize("digits", ["9" * 4301, "1" * 60_000, "-" + "9" * 5000])
def test_an_integer_literal_of_any_length_is_an_expression_error_with_a_position(digits):
    # CPython refuses to convert more than 4,300 digits with a plain ValueError.
    with pytest.raises(ExpressionError) as info:
        parse_subscription(f"a = {digits}")
    assert info.value.position == 4
    assert "64-bit" in str(info.value)


def test_leading_zeros_do_not_count_towards_an_integer_literal():
    (predicate,) = parse_subscription(f"a = -{'0' * 5000}7").conjuncts[0].predicates
    assert predicate.intervals[0].lo == -7


def test_a_surrogate_pair_escape_is_one_code_point_as_in_json():
    escaped = r"\uD83D\uDE00"
    (predicate,) = parse_subscription(f"e = '{escaped}'").conjuncts[0].predicates
    assert predicate.intervals[0].lo == "\U0001F600" == json.loads(f'"{escaped}"')
    subscription = parse_subscription(f"e = '{escaped}'")
    assert subscription.evaluate(flatten_event(json.loads(f'{{"e": "{escaped}"}}')))
    matcher = make_matcher("psthash")
    matcher.add("smile", subscription)
    assert matcher.match({"e": "\U0001F600"}) == {"smile"}


@pytest.mark.parametrize(("literal", "position"), [
    (r"'\uD83D'", 5),             # high surrogate at the end
    (r"'\uD83Dx'", 5),            # high surrogate before a character
    (r"'\uD83D\n'", 5),           # high surrogate before another escape
    (r"'\uD83D\uD83D'", 5),       # two high surrogates
    (r"'\uDE00'", 5),             # low surrogate alone
    (r"'x\uDE00\uD83D'", 6),      # pair in the wrong order
])
def test_a_lone_surrogate_escape_is_refused(literal, position):
    with pytest.raises(ExpressionError) as info:
        parse_subscription(f"e = {literal}")
    assert info.value.position == position
    assert "surrogate" in str(info.value)


@pytest.mark.parametrize(("text", "position"), [
    ("a = \uff11", 4),            # FULLWIDTH DIGIT ONE
    ("a = 1\u0662", 5),           # ARABIC-INDIC DIGIT TWO after an ASCII digit
    ("a in (1, \u0967)", 9),      # DEVANAGARI DIGIT ONE
    ("a = 1e\uff15", 6),          # fullwidth digit in an exponent (1, then the name e)
])
def test_only_ascii_digits_form_numbers(text, position):
    with pytest.raises(ExpressionError) as info:
        parse_subscription(text)
    assert info.value.position == position
    assert "unexpected" in str(info.value)
