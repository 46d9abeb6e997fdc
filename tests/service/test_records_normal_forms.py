"""The normal form outside its objects: its JSON text, and the columns of many
subscriptions read from that text in one batch."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psmatch.errors import ExpressionError
from psmatch.language import Subscription, parse_expression, parse_subscription
from psmatch.language.columns import ConjunctColumns, SubscriptionColumns
from psmatch.service.records.normal_forms import (
    dump_normal_form,
    load_normal_form,
    load_normal_forms,
)
from tests.strategies import expressions

MALFORMED = [
    "", "[", "{}", "[]", "[[]]x", '[[["a",0,[1,true,1,true]]]', '[[["a",3,[1,true,1,true]]]]',
    '[[["a",-1,[1,true,1,true]]]]', '[[["a",true,[1,true,1,true]]]]',
    '[[["a",0,[1,true,1]]]]', '[[["a",0,[]]]]', '[[[1,0,[1,true,1,true]]]]',
    '[[["a",0,[true,true,true,true]]]]', '[[["a",0,["1",true,1,true]]]]',
    '[[["a",1,[1,true,1,true]]]]', '[[["a",2,[1,true,1,true]]]]',
    '[[["a",0,[1,1,1,true]]]]', '[[["a",0,[1,true,1,true,2,true,2,"x"]]]]',
    '[[["a",1,[null,false,null,false],[["prefix","x",false]]]]]',
    '[[["a",1,[null,false,null,false],[["suffix",1,false]]]]]',
    '[[["a",1,[null,false,null,false],[["suffix","x",0]]]]]',
    '[[["a",1,[null,false,null,false],[],[]]]]', '[[["a",0,{"lo":1}]]]', "[[1]]", "[1]",
    '[[["a",99999999999999999999,[1,true,1,true]]]]', '[[["a",0.0,[1,true,1,true]]]]',
    '[[["a",0,[1,true,1,true],["suffix","x",false]]]]', '[["a"]]', '"text"',
    "[" * 100_000 + "]" * 100_000,
]  # fmt: skip
"""Normal form texts that :func:`dump_normal_form` never writes."""


def parsed(texts: list[str]) -> list:
    out = []
    for text in texts:
        with contextlib.suppress(ExpressionError):  # some drawn can never be true
            out.append(parse_subscription(text))
    return out


def bound_types(subscriptions) -> list[list[type]]:
    """The type of every bound: 1, 1.0 and True are equal, not the same."""
    return [[type(b) for c in s.conjuncts for p in c.predicates for iv in p.intervals
             for b in (iv.lo, iv.hi)] for s in subscriptions]  # fmt: skip


# -- the text -----------------------------------------------------------------------------


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(expressions())
def test_the_normal_form_read_back_from_its_text_is_the_parsed_subscription(text):
    [subscription] = parsed([text]) or [None]
    if subscription is None:
        return
    loaded = load_normal_form(text, dump_normal_form(subscription))
    assert loaded == subscription
    assert bound_types([loaded]) == bound_types([subscription])
    assert loaded.expression == subscription.expression == parse_expression(text)


EDGE_VALUES = [
    "a like 'x\ud7ff%'",  # the prefix's successor ends in a lone surrogate, U+D800
    "a = 9223372036854775807 and b = -9223372036854775808 and c = 1e300 and d = -0.0",
    "a in ('', 'é', '\U0010ffff') and b = true and not c like '%x%' and d like '%y'",
]


@pytest.mark.parametrize("text", EDGE_VALUES)
def test_the_normal_form_text_keeps_edge_values_exactly(text):
    subscription = parse_subscription(text)
    loaded = load_normal_form(text, dump_normal_form(subscription))
    assert loaded == subscription
    assert [repr(iv) for c in loaded.conjuncts for p in c.predicates for iv in p.intervals] \
        == [repr(iv) for c in subscription.conjuncts for p in c.predicates
            for iv in p.intervals]  # fmt: skip


@pytest.mark.parametrize("form", MALFORMED, ids=lambda form: form[:40])
def test_a_malformed_normal_form_text_is_an_expression_error(form):
    with pytest.raises(ExpressionError, match="normal form"):
        load_normal_form("a = 1", form)


# -- the columns --------------------------------------------------------------------------


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(expressions(), min_size=1, max_size=8))
def test_a_batch_of_texts_loads_into_the_columns_of_the_parsed_subscriptions(texts):
    subscriptions = parsed(texts)
    forms = [dump_normal_form(s) for s in subscriptions]
    columns = load_normal_forms([s.text for s in subscriptions], forms)
    assert len(columns) == len(subscriptions)
    # the objects built back are what the parser made, value types included
    assert columns.subscriptions() == subscriptions
    assert bound_types(columns.subscriptions()) == bound_types(subscriptions)
    # and the columns are those read from the objects
    assert_columns_of(columns, subscriptions)


@pytest.mark.parametrize("text", EDGE_VALUES)
def test_the_columns_keep_edge_values_exactly(text):
    subscription = parse_subscription(text)
    [loaded] = load_normal_forms([text], [dump_normal_form(subscription)]).subscriptions()
    assert loaded == subscription
    assert bound_types([loaded]) == bound_types([subscription])


def test_the_columns_of_a_batch_line_up_subscription_by_subscription():
    texts = ["a = 1", "(b in ('x', 'y') and c > 2.5) or d = true", "e like '%z' and f != 3"]
    columns = load_normal_forms(texts, [dump_normal_form(parse_subscription(t)) for t in texts])
    conjuncts = columns.conjuncts
    assert columns.conjunct_count.tolist() == [1, 2, 1]
    assert conjuncts.predicate_count.tolist() == [1, 2, 1, 2]
    assert conjuncts.attribute == ["a", "b", "c", "d", "e", "f"]
    assert conjuncts.kind.tolist() == [0, 1, 0, 2, 1, 0]
    assert conjuncts.interval_count.tolist() == [1, 2, 1, 1, 1, 2]  # f != 3: two rays
    assert conjuncts.lo == [1, "x", "y", 2.5, True, None, None, 3]
    assert conjuncts.hi_closed.tolist() == [True, True, True, False, True, False, False, False]
    assert list(conjuncts.patterns) == [4] and conjuncts.has_patterns.tolist() == [
        False, False, False, False, True, False]
    assert [len(c.predicates) for c in conjuncts.conjuncts([3, 0])] == [2, 1]


@pytest.mark.parametrize("form", MALFORMED, ids=lambda form: form[:40])
def test_a_malformed_form_in_a_batch_is_an_expression_error(form):
    good = dump_normal_form(parse_subscription("a = 1"))
    with pytest.raises(ExpressionError, match="malformed normal form among 3"):
        load_normal_forms(["a = 1"] * 3, [good, form, good])


@pytest.mark.parametrize("form", MALFORMED, ids=lambda form: form[:40])
def test_a_malformed_form_alone_or_as_bytes_is_an_expression_error(form):
    """Alone, a form's bounds are all of its kind (checked by the set of their types,
    not the table): refused the same way, as text or as the bytes Redis gives."""
    for text in (form, form.encode()):
        with pytest.raises(ExpressionError, match="malformed normal form among 1"):
            load_normal_forms(["a = 1"], [text])


def test_forms_as_bytes_load_as_their_texts_do():
    texts = ["a = 1", "b in ('x', 'y') and c > 2.5", "d = true", "e like '%z'", "f != 3"]
    forms = [dump_normal_form(parse_subscription(t)) for t in texts]
    for chunk in ([0], [1], [2], [0, 4], list(range(5))):  # one kind or mixed
        as_text = load_normal_forms([texts[i] for i in chunk], [forms[i] for i in chunk])
        as_bytes = load_normal_forms([texts[i] for i in chunk],
                                     [forms[i].encode() for i in chunk])  # fmt: skip
        assert as_bytes.subscriptions() == as_text.subscriptions()
        assert bound_types(as_bytes.subscriptions()) == bound_types(as_text.subscriptions())


def assert_columns_of(a: SubscriptionColumns, subscriptions: list[Subscription]) -> None:
    """``a`` holds the texts, conjunct counts and conjunct columns of ``subscriptions``."""
    assert a.texts == [s.text for s in subscriptions]
    assert a.conjunct_count.dtype == np.int64
    assert a.conjunct_count.tolist() == [len(s.conjuncts) for s in subscriptions]
    x = a.conjuncts
    y = ConjunctColumns.of_conjuncts([c for s in subscriptions for c in s.conjuncts])
    assert isinstance(x, ConjunctColumns)
    for name in ("predicate_count", "kind", "interval_count", "lo_closed", "hi_closed"):
        assert np.array_equal(getattr(x, name), getattr(y, name)), name
        assert getattr(x, name).dtype == getattr(y, name).dtype, name
    assert x.attribute == y.attribute and x.patterns == y.patterns
    assert list(map(type, x.lo + x.hi)) == list(map(type, y.lo + y.hi))
    assert x.lo == y.lo and x.hi == y.hi
