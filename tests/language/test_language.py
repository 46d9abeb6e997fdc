"""The subscription language: parsing, errors with positions, normal form, limits."""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psmatch import make_matcher
from psmatch.errors import ExpressionError, ExpressionLimitError, UnsatisfiableError
from psmatch.events import flatten_event
from psmatch.language import (
    MAX_CONJUNCTS,
    And,
    Comparison,
    Conjunct,
    Interval,
    Kind,
    Not,
    Predicate,
    _Normaliser,
    _parse_conjunction,
    _Parser,
    _scan_conjunction,
    parse_expression,
    parse_subscription,
)
from tests.strategies import comparisons


def only_predicates(text: str):
    (conjunct,) = parse_subscription(text).conjuncts
    return {p.attribute: p for p in conjunct.predicates}


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


def test_values_numbers_strings_with_escapes_and_booleans():
    preds = only_predicates(r"""a = -1.5e3 and b = 'it\'s' and c = "tab\there" and d = true""")
    assert preds["a"].intervals[0].lo == -1500.0
    assert preds["b"].intervals[0].lo == "it's"
    assert preds["c"].intervals[0].lo == "tab\there"
    assert preds["d"].kind is Kind.BOOL and preds["d"].intervals[0].lo is True


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


def test_too_many_conjuncts_is_a_clear_error_not_a_blow_up():
    clause = " and ".join(f"(a{i} = 1 or b{i} = 2)" for i in range(7))  # 2**7 = 128
    with pytest.raises(ExpressionLimitError, match=f"more than {MAX_CONJUNCTS} conjuncts") as info:
        parse_subscription(clause)
    assert info.value.position == clause.index("a6 = 1")  # the seventh pair crosses it


def test_deep_nesting_is_a_clear_error():
    with pytest.raises(ExpressionLimitError, match="nested deeper"):
        parse_expression("(" * 200 + "a = 1" + ")" * 200)


def test_unsatisfiable_expression_is_rejected():
    with pytest.raises(UnsatisfiableError, match="never be true"):
        parse_subscription("a > 5 and a < 3")


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


# -- the fast paths: a conjunction of comparisons, parsed and normalised without the
# general machinery, must give what the general machinery gives, or leave it the text

SEPARATORS = [" and ", " AND ", "\tand\n", "  And  ", " and", "and ", " or ", " and not "]
NOISE = [*"`'\"\\ ()=<>!,-+.0123456789eE%_a", " and ", " in ", " not ", " between ", " like ",
         " true", "\u00e9", "\uff11", "\\u"]


def general_parse(text: str) -> str:
    """What the tokenizer and parser make of ``text``: the tree's repr (which tells 1
    from 1.0 and True), or the error's type, message and position."""
    try:
        return repr(_Parser(text).parse())
    except ExpressionError as error:
        return f"{type(error).__name__} at {error.position}: {error}"


@st.composite
def conjunction_texts(draw: st.DrawFn) -> str:
    """Conjunctions of random comparisons (every operator and kind), joined in several
    spellings, sometimes with a character inserted or removed somewhere."""
    parts = draw(st.lists(comparisons(), min_size=1, max_size=6))
    text = parts[0] + "".join(draw(st.sampled_from(SEPARATORS)) + p for p in parts[1:])
    text = draw(st.sampled_from(["", " ", "\n"])) + text + draw(st.sampled_from(["", " "]))
    if draw(st.booleans()):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 2))
        text = text[:at] + draw(st.sampled_from(["", *NOISE])) + text[at + cut:]
    return text


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conjunction_texts())
def test_the_conjunction_fast_path_builds_the_parsers_tree_or_leaves_it_the_text(text):
    fast = _parse_conjunction(text)
    if fast is not None:
        assert repr(fast) == general_parse(text)


def test_the_conjunction_fast_path_takes_every_operator_kind_and_spelling():
    text = ("a = 1 AND b <> -2.5e3 and c not in ('x', \"y\") and d between 1 and 2 and "
            "e NOT like '%son' and `odd ``name` == true and f.g in (1.5, 2) and s like 'ab%' "
            "and h not between 'a' and 'b' and i >= 99999999999999999 and j < .5")
    fast = _parse_conjunction(text)
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
    assert _parse_conjunction(text) is None


def normal_form(text: str) -> tuple[str, int]:
    """The normal form of ``text`` (or the error's type) and the steps it charged."""
    normaliser = _Normaliser(text)
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
    gives through :meth:`_Normaliser.dnf`'s general case, cross products and merges (the
    last comparison of a conjunction put under ``not not``), or the error's type."""
    try:
        tree = _Parser(text).parse()
        if isinstance(tree, And):
            tree = And((*tree.children[:-1], Not(Not(tree.children[-1]))))
        raw = _Normaliser(text).dnf(tree)
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
    assert _scan_conjunction(text) is not None
    assert scanned(text) == by_products(text)
    (conjunct,) = parse_subscription(text).conjuncts
    assert [p.attribute for p in conjunct.predicates] == [*"abcdefgh", "q r", *"stuvwxy"]


@pytest.mark.parametrize("text", [
    "a = 1 and a < 3", "a between 2 and 1", "a in (1, 1.0)", "a in ('x', 'x')",
    "a = 1 or b = 2", "not a = 1", "a = 1 and", "a in (1, 'x')", "a = 1 and b != 1 and a = 2",
])
def test_repeated_attributes_other_shapes_and_errors_normalise_as_the_general_case(text):
    assert scanned(text) == by_products(text)


def test_the_hand_written_constructor_takes_every_field_as_the_generated_one_would():
    cls = Comparison
    names = [f.name for f in dataclasses.fields(cls)]
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    assert [p.name for p in parameters] == names
    assert [p.default for p in parameters] == [
        inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        for f in dataclasses.fields(cls)
    ]
    values = [object() for _ in names]
    made = cls(*values)
    assert [getattr(made, name) for name in names] == values
    assert cls(**dict(zip(names, values, strict=True))) == made
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, names[0], None)


@pytest.mark.parametrize("cls", [Interval, Predicate])
def test_intervals_and_predicates_are_immutable_named_tuples(cls):
    values = [object() for _ in cls._fields]
    made = cls(*values)
    assert [getattr(made, name) for name in cls._fields] == values
    assert cls(**dict(zip(cls._fields, values, strict=True))) == made
    with pytest.raises(AttributeError):
        setattr(made, cls._fields[0], None)
