"""The bulk scanner (psmatch.core.bulk_scan with psmatch.language.bulk): each text it takes
must give exactly what parse_subscription gives, and it must take the common forms."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psmatch.core.bulk_scan import scan_columns
from psmatch.errors import ExpressionError
from psmatch.language import MAX_PREDICATES, parse_subscription
from tests.strategies import NOISE, conjunction_texts

NAMES = ["a", "b", "c", "a.b", "_x9", "AND", "between", "Not", "in"]
OPERATORS = ["=", "==", "!=", "<>", "<", "<=", ">", ">="]
INTEGERS = st.one_of(st.integers(-5, 5), st.integers(-(2**63), 2**63 - 1)).map(str) | (
    st.sampled_from(["007", "+3", "-0", "1" * 18, "1" * 19, "1.5", "1e3", "'x'", "true"]))
SPACES = [" ", "  ", "\t", "", "\u00a0"]


@st.composite
def integer_comparison(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(NAMES))
    space = draw(st.sampled_from(SPACES))
    if draw(st.booleans()):
        return f"{name}{space}{draw(st.sampled_from(OPERATORS))}{space}{draw(INTEGERS)}"
        # (an empty space before a letter makes another name: the parser's to refuse)
    negated = draw(st.sampled_from(["", "not ", "NOT "]))
    between = draw(st.sampled_from(["between", "BETWEEN", "Between"]))
    return f"{name} {negated}{between} {draw(INTEGERS)} and {draw(INTEGERS)}"


@st.composite
def integer_conjunction(draw: st.DrawFn) -> str:
    """Conjunctions of integer comparisons in various spellings, sometimes broken."""
    parts = draw(st.lists(integer_comparison(), min_size=1, max_size=5))
    text = parts[0] + "".join(draw(st.sampled_from([" and ", " AND ", "  and ", " and  not ",
                                                     " or ", "and "])) + p for p in parts[1:])
    text = draw(st.sampled_from(["", " ", "\n"])) + text + draw(st.sampled_from(["", " ", "\n"]))
    if draw(st.booleans()):
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(["", *NOISE])) + text[at + draw(st.integers(0, 2)):]
    return text


def parsed(text: str) -> str:
    """parse_subscription's answer: its repr (which tells 1 from 1.0), or the error."""
    try:
        return repr(parse_subscription(text))
    except ExpressionError as error:
        return f"{type(error).__name__}: {error}"


def check_batch(texts: list[str]) -> tuple[list[int], list[int]]:
    accepted, columns, rejected = scan_columns(texts)
    assert sorted([*accepted.tolist(), *rejected.tolist()]) == list(range(len(texts)))
    assert columns.texts == [texts[i] for i in accepted.tolist()]
    for i, subscription in zip(accepted.tolist(), columns.subscriptions(), strict=True):
        assert repr(subscription) == parsed(texts[i]), texts[i]
    return accepted.tolist(), rejected.tolist()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(integer_conjunction(), max_size=8))
def test_each_text_taken_gives_what_parse_subscription_gives(texts):
    check_batch(texts)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(conjunction_texts(), max_size=6))
def test_texts_of_every_kind_and_operator_are_taken_only_as_parse_subscription_reads_them(
        texts):
    check_batch(texts)


def test_the_common_forms_are_taken_and_the_rest_left_to_the_parser():
    taken = ["a = 1", "a == 1 and b != 2", "b <> 3 and a < 4", "x <= -5 and y > +7 and z >= 007",
             "a between 1 and 5", "a not between 5 and 1", "a NOT BETWEEN 1 AND 5 AND b = 2",
             "  a.b = 3  ", "c = 1 and b = 2 and a = 3", "a = 123456789012345678",
             "a.b.c_1 BETWEEN -3 AND 3", "a= 1", "a =1"]
    left = ["a between 5 and 1", "a = 1 and a = 2", "and = 1", "a = 1.5", "a = 'x'", "a = 1 and",
            "", "a = 1234567890123456789", "a in (1, 2)", "a = 1 or b = 2", "a\t= 1",
            "a = 1\tand b = 2",
            "\u00e9 = 1", "a = 1 and \u00e9 = 2", "a between 1and 2", "a not  between 1 and 2x",
            " and ".join(f"a{i} = 1" for i in range(MAX_PREDICATES + 1))]
    accepted, rejected = check_batch(taken + left)
    assert accepted == list(range(len(taken)))
    assert rejected == list(range(len(taken), len(taken) + len(left)))


def test_a_text_holding_a_newline_leaves_the_whole_batch_to_the_parser():
    accepted, rejected = check_batch(["a = 1", "a = 1\nand b = 2", "b = 3"])
    assert accepted == [] and rejected == [0, 1, 2]


@pytest.mark.parametrize("texts", [[], ["a = 1"] * 3])
def test_empty_and_repeated_batches(texts):
    accepted, _ = check_batch(texts)
    assert len(accepted) == len(texts)
