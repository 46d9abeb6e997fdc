"""``psmatch.explain``: every comparison marked with its truth and reason, and a verdict
that always equals the matchers' answer (a differential test over every matcher)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psmatch import (
    MATCHERS,
    EventError,
    Explanation,
    ExpressionError,
    UnsatisfiableError,
    explain,
    make_matcher,
)
from psmatch.explain import Reason, render_comparison
from psmatch.language import (
    Comparison,
    Expression,
    Kind,
    Not,
    kind_of,
    parse_expression,
    parse_subscription,
)
from tests.strategies import BOOLS, NUMBERS, STRINGS, comparisons, events, expressions


def marks(e: Explanation) -> list[tuple[str, bool | None, Reason | None]]:
    return [(step.text, step.truth, step.reason) for step in e.comparisons()]


def test_each_comparison_is_marked_with_its_truth_and_reason() -> None:
    e = explain("price < 100 and category in ('books', 'music') and not stock <= 0",
                {"price": 120, "category": "books"})  # fmt: skip
    assert marks(e) == [
        ("price < 100", False, Reason.COMPARED),
        ("category in ('books', 'music')", True, Reason.COMPARED),
        ("stock <= 0", None, Reason.MISSING),
    ]
    assert e.verdict is False and not e.matches
    assert [s.value for s in e.comparisons()] == [120, "books", None]


def test_str_shows_the_tree_the_reasons_and_the_verdict() -> None:
    e = explain("a = 1 or not (b = 'x' and c > 2)", {"a": 2, "b": "x", "c": "3"})
    assert str(e) == "\n".join([
        "no match: the expression is unknown (an attribute it needs is missing or of another "
        "kind)",
        "unknown or",
        "false     a = 1        -- a is 2",
        "unknown   not",
        "unknown     and",
        "true          b = 'x'  -- b is 'x'",
        "unknown       c > 2    -- c is the string '3', compared with numbers",
    ])  # fmt: skip
    assert str(explain("a = 1", {"a": 1})).splitlines()[0] == "match: the expression is true"
    assert str(explain("a = 1", {"a": 0})).splitlines()[0] == "no match: the expression is false"


def test_three_valued_logic_as_in_sql() -> None:
    # unknown or true is true; unknown and false is false; not unknown is unknown
    assert explain("a = 1 or b = 1", {"b": 1}).verdict is True
    assert explain("a = 1 and b = 1", {"b": 2}).verdict is False
    assert explain("a = 1 and b = 1", {"b": 1}).verdict is None
    assert explain("not a = 1", {}).verdict is None
    assert explain("stock != 0", {}).matches is False


def test_null_is_absent_and_nested_objects_flatten() -> None:
    assert marks(explain("stock = 0", {"stock": None})) == [("stock = 0", None, Reason.MISSING)]
    e = explain("user.age >= 18 and user = 'x'", {"user": {"age": 20, "name": "ann"}})
    assert marks(e) == [("user.age >= 18", True, Reason.COMPARED),
                        ("user = 'x'", None, Reason.MISSING)]  # fmt: skip
    assert "user is an object (user.age, user.name), not a value" in str(e)


def test_a_value_of_another_kind_is_unknown_and_booleans_are_not_numbers() -> None:
    assert marks(explain("flag = true", {"flag": 1})) == [("flag = true", None, Reason.OTHER_KIND)]
    assert marks(explain("n = 1", {"n": True})) == [("n = 1", None, Reason.OTHER_KIND)]
    e = explain("price < 100", {"price": "12"})
    assert marks(e) == [("price < 100", None, Reason.OTHER_KIND)]
    assert "price is the string '12', compared with numbers" in str(e)


def test_numbers_compare_exactly_and_strings_by_code_point() -> None:
    assert explain("x = 9007199254740993", {"x": 2**53 + 1}).verdict is True
    assert explain("x = 9007199254740993", {"x": 2.0**53}).verdict is False
    assert explain("x = 1", {"x": 1.0}).verdict is True
    assert explain("s < 'é'", {"s": "z"}).verdict is True
    assert explain("s < 'Z'", {"s": "a"}).verdict is False


@pytest.mark.parametrize(
    ("expr", "value", "truth"),
    [
        ("s like 'ab%'", "abc", True),
        ("s like '%bc'", "abc", True),
        ("s like '%x%'", "abc", False),
        ("s not like '%b%'", "abc", False),
        ("s like 'abc'", "abc", True),
        ("s like '%'", 3, None),
    ],
)
def test_like_patterns(expr: str, value: Any, truth: bool | None) -> None:
    assert explain(expr, {"s": value}).verdict is truth


def test_odd_attribute_names_are_shown_back_quoted() -> None:
    e = explain("`first name` = 'ann' and `and` = 1", {"first name": "ann", "and": 1})
    assert [s.text for s in e.comparisons()] == ["`first name` = 'ann'", "`and` = 1"]
    assert "`first name` is 'ann'" in str(e)


def test_bad_input_raises_the_library_errors() -> None:
    with pytest.raises(ExpressionError, match="position 7"):
        explain("price <", {})
    with pytest.raises(UnsatisfiableError):  # refused by every matcher too
        explain("a = 1 and a = 2", {"a": 1})
    with pytest.raises(EventError, match="'price': arrays are not supported"):
        explain("price < 1", {"price": [1]})
    with pytest.raises(EventError, match="JSON object"):
        explain("price < 1", [])  # type: ignore[arg-type]


@given(comparisons())
@settings(max_examples=300, deadline=None)
def test_a_rendered_comparison_parses_back_to_itself(text: str) -> None:
    c = parse_expression(text)
    assert isinstance(c, Comparison)
    again = parse_expression(render_comparison(c))
    assert isinstance(again, Comparison)
    assert (again.attribute, again.op, again.values) == (c.attribute, c.op, c.values)
    assert [type(v) for v in again.values] == [type(v) for v in c.values]


def leaves(node: Expression) -> list[Comparison]:
    if isinstance(node, Comparison):
        return [node]
    children = (node.child,) if isinstance(node, Not) else node.children
    return [c for child in children for c in leaves(child)]


@st.composite
def expressions_and_events(draw: st.DrawFn) -> tuple[str, dict]:
    """An expression and an event that often gives its attributes values of the right
    kind, from the expression's own literals or their pool (so that comparisons are
    often true or false, not mostly unknown)."""
    text, event = draw(expressions()), draw(events())
    try:
        expression = parse_expression(text)
    except ExpressionError:
        return text, event
    for c in leaves(expression):
        if draw(st.booleans()):
            pool = {Kind.NUMBER: NUMBERS, Kind.STRING: STRINGS, Kind.BOOL: BOOLS}
            value = draw(st.sampled_from([*c.values, *pool[kind_of(c.values[0])]]))
            if c.attribute == "u.v":
                event.pop("u", None)
            event[c.attribute] = value
    return text, event


@given(expressions_and_events())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_verdict_is_every_matchers_answer(case: tuple[str, dict]) -> None:
    text, event = case
    try:
        subscription = parse_subscription(text)
    except ExpressionError:
        with pytest.raises(ExpressionError):
            explain(text, event)
        return
    e = explain(text, event)
    for name in MATCHERS:
        matcher = make_matcher(name)
        matcher.add("s", subscription)
        assert matcher.match(event) == ({"s"} if e.matches else set()), (name, text, event, str(e))
    for step in e.comparisons():
        attribute = step.node.attribute  # type: ignore[union-attr]
        assert (step.reason is Reason.MISSING) == (attribute not in e.event)
        assert (step.reason is Reason.COMPARED) == (step.truth is not None)


@given(st.lists(expressions(max_leaves=3), min_size=1, max_size=8), events())
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_explaining_each_subscription_gives_a_matchers_batch_answer(
    texts: list[str], event: dict
) -> None:
    matcher = make_matcher("psthash")
    expected = set()
    for i, text in enumerate(texts):
        try:
            matcher.add(str(i), text)
        except ExpressionError:
            continue
        if explain(text, event).matches:
            expected.add(str(i))
    matcher.check()
    assert matcher.match(event) == expected
