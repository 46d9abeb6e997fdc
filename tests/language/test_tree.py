"""The expression tree's nodes."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from psmatch.language import Comparison


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
