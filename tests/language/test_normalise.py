"""Normalisation to DNF: merged predicates, dropped conjuncts, limits, and the scanned
conjunction's shortcut, which must normalise as the general case does."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psmatch.errors import ExpressionError, ExpressionLimitError, UnsatisfiableError
from psmatch.language import (
    MAX_CONJUNCTS,
    And,
    Conjunct,
    Interval,
    Not,
    parse_expression,
    parse_subscription,
)
from psmatch.language.normalise import Normaliser
from psmatch.language.parser import Parser
from psmatch.language.scanner import scan_conjunction
from tests.strategies import comparisons, conjunction_texts, only_predicates


def test_the_readme_example_parses_into_one_conjunct_per_branch_of_the_negation():
    sub = parse_subscription(
        "price < 100 and category in ('books', 'music') and not (brand = 'acme' or stock <= 0)"
    )
    (conjunct,) = sub.conjuncts
    preds = {p.attribute: p for p in conjunct.predicates}
    assert preds["price"].intervals == (Interval(None, False, 100, False),)
    assert [iv.lo for iv in preds["category"].intervals] == ["books", "music"]
    # not (brand = 'acme') is brand != 'acme': two open intervals around 'acme'.
    assert preds["brand"].intervals == (
        Interval(None, False, "acme", False), Interval("acme", False, None, False))
    assert preds["stock"].intervals == (Interval(0, False, None, False),)


def test_predicates_on_one_attribute_merge_into_one_interval():
    assert only_predicates("a > 1 and a < 5")["a"].intervals == (Interval(1, False, 5, False),)


def test_like_prefix_is_an_interval_and_suffix_a_pattern():
    assert only_predicates("s like 'ab%'")["s"].intervals == (Interval("ab", True, "ac", False),)
    suffix = only_predicates("s like '%son'")["s"]
    assert suffix.patterns and suffix.test("jackson") and not suffix.test("sonny")


def test_or_and_not_become_dnf():
    sub = parse_subscription("(a = 1 or b = 2) and not (c = 3 and d = 4)")
    assert len(sub.conjuncts) == 4


def test_a_conjunct_that_can_never_be_true_is_dropped():
    sub = parse_subscription("(a > 5 and a < 3) or b = 1")
    assert [p.attribute for c in sub.conjuncts for p in c.predicates] == ["b"]


def test_kinds_mixed_on_one_attribute_in_a_conjunct_can_never_be_true():
    with pytest.raises(UnsatisfiableError):
        parse_subscription("a = 1 and a = 'x'")


def test_too_many_conjuncts_is_a_clear_error_not_a_blow_up():
    clause = " and ".join(f"(a{i} = 1 or b{i} = 2)" for i in range(7))  # 2**7 = 128
    with pytest.raises(ExpressionLimitError, match=f"more than {MAX_CONJUNCTS} conjuncts") as info:
        parse_subscription(clause)
    assert info.value.position == clause.index("a6 = 1")  # the seventh pair crosses it


def test_unsatisfiable_expression_is_rejected():
    with pytest.raises(UnsatisfiableError, match="never be true"):
        parse_subscription("a > 5 and a < 3")


def normal_form(text: str) -> tuple[str, int]:
    """The normal form of ``text`` (or the error's type) and the steps it charged."""
    normaliser = Normaliser(text)
    try:
        conjuncts = normaliser.dnf(parse_expression(text))
    except ExpressionError as error:
        return type(error).__name__, normaliser.steps
    return repr([sorted(c.items()) for c in conjuncts]), normaliser.steps


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(comparisons(), min_size=2, max_size=6))
def test_a_conjunction_of_comparisons_normalises_as_the_general_case_with_the_same_steps(parts):
    # ``not not`` before the last comparison makes the same conjunction, which the
    # fast path does not take (one child is not a comparison)
    fast = " and ".join(parts)
    general = " and ".join([*parts[:-1], f"not not {parts[-1]}"])
    assert normal_form(fast) == normal_form(general)


def by_products(text: str) -> str:
    """The normal form (its repr, which tells 1 from 1.0 and True) the parser's tree
    gives through :meth:`Normaliser.dnf`'s general case, cross products and merges (the
    last comparison of a conjunction put under ``not not``), or the error's type."""
    try:
        tree = Parser(text).parse()
        if isinstance(tree, And):
            tree = And((*tree.children[:-1], Not(Not(tree.children[-1]))))
        raw = Normaliser(text).dnf(tree)
        if not raw:
            return "UnsatisfiableError"
    except ExpressionError as error:
        return type(error).__name__
    return repr([Conjunct(tuple(sorted(c.values(), key=lambda p: p.attribute))) for c in raw])


def scanned(text: str) -> str:
    """What :func:`parse_subscription` gives, in the same form as :func:`by_products`."""
    try:
        return repr(list(parse_subscription(text).conjuncts))
    except ExpressionError as error:
        return type(error).__name__


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(conjunction_texts(),
                 st.lists(comparisons(), min_size=1, max_size=3).map(" and ".join)))
def test_a_scanned_conjunction_normalises_as_the_general_case(text):
    assert scanned(text) == by_products(text)


def test_a_scanned_conjunction_takes_every_operator_of_every_kind():
    text = ("a = 1 and b < 2.5 and c <= 'x' and d > -3 and e >= 1e3 and f between 1 and 2 "
            "and g in (3, 1.5, 2) and h == 'y' and `q r` between 'a' and 'a' and s in ('b', 'a') "
            "and t != 1 and u not in (1, 2) and v not between 1 and 2 and w like 'x%' "
            "and x not like '%x' and y = true")
    assert scan_conjunction(text) is not None
    assert scanned(text) == by_products(text)
    (conjunct,) = parse_subscription(text).conjuncts
    assert [p.attribute for p in conjunct.predicates] == [*"abcdefgh", "q r", *"stuvwxy"]


@pytest.mark.parametrize("text", [
    "a = 1 and a < 3", "a between 2 and 1", "a in (1, 1.0)", "a in ('x', 'x')",
    "a = 1 or b = 2", "not a = 1", "a = 1 and", "a in (1, 'x')", "a = 1 and b != 1 and a = 2",
])
def test_repeated_attributes_other_shapes_and_errors_normalise_as_the_general_case(text):
    assert scanned(text) == by_products(text)
