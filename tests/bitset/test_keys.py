"""The bitset family's keys order values exactly (numbers, booleans) or monotonely
(strings), and their ``f`` alone never inverts the order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from psmatch.bitset.keys import key
from psmatch.bitset.rows import bound_keys
from psmatch.language import Kind
from tests.strategies import NUMBERS, STRINGS

numbers = st.one_of(st.sampled_from(NUMBERS), st.integers(-(2**63), 2**63 - 1),
                    st.floats(allow_nan=False, allow_infinity=False),
                    st.integers(2**53 - 4, 2**53 + 4), st.integers(2**63 - 8, 2**63 - 1))


def _cmp(a: object, b: object) -> int:
    return (a > b) - (a < b)  # type: ignore[operator]


@given(numbers, numbers)
def test_number_keys_order_exactly(x: int | float, y: int | float) -> None:
    kx, ky = key(x, Kind.NUMBER), key(y, Kind.NUMBER)
    assert _cmp(kx, ky) == _cmp(x, y)
    if kx[0] < ky[0]:
        assert x < y  # cells cut on f alone stay in the values' order


@given(st.lists(numbers, min_size=1, max_size=20))
def test_vectorised_keys_are_the_scalar_ones(values: list) -> None:
    f, d = bound_keys(values, Kind.NUMBER)
    assert list(zip(f.tolist(), d.tolist(), strict=True)) == [key(v, Kind.NUMBER)
                                                              for v in values]


@given(st.one_of(st.sampled_from(STRINGS), st.text()),
       st.one_of(st.sampled_from(STRINGS), st.text()))
def test_string_keys_are_monotone(s: str, t: str) -> None:
    if s < t:
        assert key(s, Kind.STRING) <= key(t, Kind.STRING)
        assert key(s, Kind.STRING)[0] <= key(t, Kind.STRING)[0]


def test_booleans_key_as_zero_and_one() -> None:
    assert key(False, Kind.BOOL) < key(True, Kind.BOOL)
    assert bound_keys([False, True], Kind.BOOL)[0].tolist() == [0.0, 1.0]
