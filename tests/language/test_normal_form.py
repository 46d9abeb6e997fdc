"""The normal form's types."""

from __future__ import annotations

import pytest

from psmatch.language import Interval, Predicate


@pytest.mark.parametrize("cls", [Interval, Predicate])
def test_intervals_and_predicates_are_immutable_named_tuples(cls):
    values = [object() for _ in cls._fields]
    made = cls(*values)
    assert [getattr(made, name) for name in cls._fields] == values
    assert cls(**dict(zip(cls._fields, values, strict=True))) == made
    with pytest.raises(AttributeError):
        setattr(made, cls._fields[0], None)
