"""Event validation and flattening."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psmatch import MATCHERS, make_matcher
from psmatch.errors import EventError
from psmatch.events import MAX_DEPTH, flatten_event


def test_nested_objects_flatten_to_dotted_names_and_null_is_absent():
    assert flatten_event({"user": {"age": 3, "name": None}, "ok": True}) == {
        "user.age": 3, "ok": True}


@pytest.mark.parametrize(("event", "attribute", "words"), [
    ({"a": [1, 2]}, "a", "arrays"),
    ({"a": float("nan")}, "a", "finite"),
    ({"a": float("inf")}, "a", "finite"),
    ({"a": 2**63}, "a", "64-bit"),
    ({"x": {"y": object()}}, "x.y", "values must be"),
    ({"a.b": 1, "a": {"b": 2}}, "a.b", "given twice"),
])
def test_invalid_values_name_the_attribute(event, attribute, words):
    with pytest.raises(EventError) as info:
        flatten_event(event)
    assert isinstance(info.value, ValueError)
    assert info.value.attribute == attribute
    assert words in str(info.value)


def test_an_event_must_be_an_object():
    with pytest.raises(EventError, match="JSON object"):
        flatten_event([1, 2])


def test_position_in_a_batch_is_named():
    with pytest.raises(EventError, match="event 4"):
        flatten_event({"a": [1]}, position=4)


@pytest.mark.parametrize(("value", "expected"), [
    (np.bool_(True), True),
    (np.bool_(False), False),
    (np.int8(-3), -3),
    (np.int64(2**63 - 1), 2**63 - 1),
    (np.uint64(7), 7),
    (np.float16(0.5), 0.5),
    (np.float32(0.1), float(np.float32(0.1))),
    (np.float64(2.5), 2.5),
    (np.str_("abc"), "abc"),
])
def test_numpy_scalars_are_their_python_equivalents(value, expected):
    flat = flatten_event({"a": value})
    assert flat == {"a": expected}
    assert type(flat["a"]) is type(expected)


@pytest.mark.parametrize("name", MATCHERS)
def test_numpy_scalars_match_as_their_python_equivalents_in_every_matcher(name):
    matcher = make_matcher(name)
    matcher.add_many([
        ("flag", "f = true"), ("count", "n = 3"), ("big", "n > 2.5"),
        ("ratio", "r < 0.75"), ("word", "w like 'ab%'"), ("not flag", "f != true"),
    ])
    numpy_event = {"f": np.bool_(True), "n": np.int64(3), "r": np.float32(0.5),
                   "w": np.str_("abc")}
    python_event = {"f": True, "n": 3, "r": 0.5, "w": "abc"}
    expected = {"flag", "count", "big", "ratio", "word"}
    assert matcher.match(numpy_event) == matcher.match(python_event) == expected


@pytest.mark.parametrize(("value", "words"), [
    (np.uint64(2**63), "64-bit"),
    (np.float32("nan"), "finite"),
    (np.float64("inf"), "finite"),
    (np.complex128(1j), "numpy.complex128"),
    (np.datetime64("2024-01-01"), "numpy.datetime64"),
    (np.bytes_(b"x"), "numpy.bytes_"),
    (np.array([1, 2]), "arrays"),
    (np.array(1), "arrays"),
])
def test_numpy_values_without_an_exact_equivalent_are_refused_by_their_numpy_name(value, words):
    with pytest.raises(EventError) as info:
        flatten_event({"a": value})
    assert info.value.attribute == "a"
    assert words in str(info.value)


def test_a_longdouble_that_is_not_exactly_a_float_is_refused():
    exact = np.longdouble(0.5)
    assert flatten_event({"a": exact}) == {"a": 0.5}
    inexact = np.longdouble(1) / np.longdouble(3)
    if float(inexact) == inexact:
        pytest.skip("longdouble is float64 on this platform")
    with pytest.raises(EventError, match="no exact float"):
        flatten_event({"a": inexact})


def test_an_event_has_at_most_32_levels_of_objects_counting_its_own():
    def deep(levels: int) -> dict:
        event: dict = {"x": 1}
        for _ in range(levels - 1):
            event = {"a": event}
        return event

    assert MAX_DEPTH == 32
    assert flatten_event(deep(MAX_DEPTH)) == {"a." * (MAX_DEPTH - 1) + "x": 1}
    with pytest.raises(EventError, match="more than 32 levels") as info:
        flatten_event(deep(MAX_DEPTH + 1))
    assert info.value.attribute == ".".join(["a"] * MAX_DEPTH)


class _Name(str):
    """A name of a subclass of ``str``: accepted, and never on the flat fast path."""


edge_values = st.one_of(
    st.integers(), st.floats(), st.text(max_size=3), st.booleans(), st.none(),
    st.sampled_from([2**63 - 1, -2**63, 2**63, -2**63 - 1, float("nan"), float("inf"),
                     -0.0, np.int64(7), np.float32(1.5), np.bool_(True), [1], object()]),
    st.dictionaries(st.text(max_size=2), st.integers(-3, 3), max_size=2),
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.one_of(st.text(max_size=3), st.sampled_from(["a.b", _Name("n"), 1])),
                       edge_values, max_size=6))
def test_a_flat_event_is_checked_as_the_general_walk_checks_it(event) -> None:
    """A plain dict may take the fast path (:func:`psmatch.events._is_flat`); the same
    event behind a read-only mapping never does: both give the same flat event with
    the same value types, or the same error."""
    def outcome(mapping):
        try:
            flat = flatten_event(mapping)
        except EventError as error:
            return "error", str(error), error.attribute
        return "flat", list(flat.items()), [type(v) for v in flat.values()]

    assert outcome(event) == outcome(MappingProxyType(event))
