"""Each rule of the matching contract, checked on every matcher."""

from __future__ import annotations

import pytest

from psmatch import MATCHERS, EventError, make_matcher


@pytest.fixture(params=MATCHERS)
def matcher(request):
    return make_matcher(request.param)


def matches(matcher, expr: str, event: dict) -> bool:
    matcher.add("s", expr)
    matcher.check()
    return matcher.match(event) == {"s"}


def test_nested_objects_match_dotted_names(matcher):
    assert matches(matcher, "user.age >= 18", {"user": {"age": 30}})


def test_null_means_absent(matcher):
    assert not matches(matcher, "stock != 0", {"stock": None})


@pytest.mark.parametrize("expr", ["stock != 0", "not (stock = 0)", "stock not in (0, 1)"])
def test_a_missing_attribute_is_unknown_so_negations_do_not_match(matcher, expr):
    assert not matches(matcher, expr, {"price": 3})


def test_a_value_of_another_kind_is_unknown(matcher):
    assert not matches(matcher, "price != 5", {"price": "5"})
    assert not matches(matcher, "name < 'm'", {"name": 3})


def test_booleans_are_not_numbers(matcher):
    assert not matches(matcher, "flag = true", {"flag": 1})
    assert not matches(matcher, "n = 1", {"n": True})
    assert matches(matcher, "flag = true", {"flag": True})


def test_ints_and_floats_compare_by_exact_value(matcher):
    assert matches(matcher, "x = 1", {"x": 1.0})
    assert not matches(matcher, "x > 9007199254740992", {"x": 9007199254740992.0})
    assert matches(matcher, "x > 9007199254740992", {"x": 9007199254740993})
    assert not matches(matcher, "x < 9007199254740993", {"x": 9007199254740993})


def test_strings_compare_by_code_point(matcher):
    assert matches(matcher, "s < 'b'", {"s": "a\U0010ffff"})
    assert matches(matcher, "s > 'Z'", {"s": "a"})
    assert not matches(matcher, "s = 'a'", {"s": "a\x00"})


def test_a_subscription_matching_through_several_conjuncts_is_reported_once(matcher):
    matcher.add("s", "a = 1 or b = 2")
    assert matcher.match_batch([{"a": 1, "b": 2}]) == [{"s"}]


def test_invalid_events_raise_a_value_error_naming_the_attribute(matcher):
    matcher.add("s", "a = 1")
    with pytest.raises(EventError, match=r"'a\.b'"):
        matcher.match({"a": {"b": [1]}})
    with pytest.raises(ValueError, match="finite"):
        matcher.match_batch([{"a": 1}, {"a": float("nan")}])
