"""The parser's fast path: a conjunction of comparisons, scanned a comparison at a time,
must give what the tokenizer and parser give, or leave them the text."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from psmatch.errors import ExpressionError
from psmatch.language.parser import Parser
from psmatch.language.scanner import parse_conjunction
from tests.strategies import conjunction_texts


def general_parse(text: str) -> str:
    """What the tokenizer and parser make of ``text``: the tree's repr (which tells 1
    from 1.0 and True), or the error's type, message and position."""
    try:
        return repr(Parser(text).parse())
    except ExpressionError as error:
        return f"{type(error).__name__} at {error.position}: {error}"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conjunction_texts())
def test_the_conjunction_fast_path_builds_the_parsers_tree_or_leaves_it_the_text(text):
    fast = parse_conjunction(text)
    if fast is not None:
        assert repr(fast) == general_parse(text)


def test_the_conjunction_fast_path_takes_every_operator_kind_and_spelling():
    text = ("a = 1 AND b <> -2.5e3 and c not in ('x', \"y\") and d between 1 and 2 and "
            "e NOT like '%son' and `odd ``name` == true and f.g in (1.5, 2) and s like 'ab%' "
            "and h not between 'a' and 'b' and i >= 99999999999999999 and j < .5")
    fast = parse_conjunction(text)
    assert fast is not None
    assert repr(fast) == general_parse(text)
    assert [c.op for c in fast.children] == [  # type: ignore[union-attr]
        "=", "!=", "notin", "between", "notlike", "=", "in", "like", "notbetween", ">=", "<"]


@pytest.mark.parametrize("text", [
    "a = 1 or b = 2", "not a = 1", "(a = 1)", "a = 'it\\'s'", "and = 1", "a = 1 and",
    "a = 1and b = 2", "a in (1, 'x')", "f < true", "a = 99999999999999999999", "a = 1e999",
    "s like 'a%b'", "`` = 1", "a = truex", "a = 1 b = 2", "", "Or = 1", "TRUE = 1",
    "b = 1 and between in (1)", "a in (1) and LIKE = 'x'",
    f"a in ({', '.join(map(str, range(257)))})",  # past the limits: the parser says so
    " and ".join(f"a{k} = {k}" for k in range(257)),
])
def test_the_conjunction_fast_path_leaves_other_texts_and_every_error_to_the_parser(text):
    assert parse_conjunction(text) is None
