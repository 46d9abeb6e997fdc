"""Event validation and flattening."""

from __future__ import annotations

import pytest

from index.errors import EventError
from index.events import flatten_event


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
