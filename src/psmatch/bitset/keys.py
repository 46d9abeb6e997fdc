"""Order-preserving keys of values: what the bitset family compares.

Every value of one kind maps to a *key* ``(f, d)``: ``f`` a float64 and ``d`` an int64,
ordered lexicographically.

* Numbers: ``f = float(x)`` (correctly rounded, so monotone: ``float(x) < float(y)``
  implies ``x < y``) and ``d = x - int(f)``, the exact rounding error of an int past
  2**53 (within +-1024 for int64) and 0 for a float or a smaller int. Equal ``f`` and
  equal ``d`` mean equal values, so ``(f, d)`` orders ints and floats exactly, with no
  comparison through float64 that loses precision.
* Booleans: False ``(0, 0)``, True ``(1, 0)``.
* Strings: the first 8 bytes of the UTF-8 form (``surrogatepass``; UTF-8 byte order is
  code point order, Python's string order), zero-padded, as a big-endian integer ``k``,
  then ``(float(k), k - int(float(k)))``. Only monotone (``s < t`` implies
  ``key(s) <= key(t)``): strings sharing 8 bytes share a key, so a string predicate is
  never decided by its keys alone (its conjunct is verified by ``Conjunct.evaluate``).

Cells (:mod:`psmatch.bitset.cells`) cut a domain on ``f`` alone: since ``f`` is monotone
in the order of the values, a value whose cell lies wholly below (above) the cell of a
bound lies below (above) the bound. Cost: O(1) Python work per value.
"""

from __future__ import annotations

import numpy as np

from psmatch.language import Kind, Value

EXACT_INT = 2**53
"""Ints of at most this magnitude convert to float64 exactly (``d = 0``)."""


def key(value: Value, kind: Kind) -> tuple[float, int]:
    """The key ``(f, d)`` of a value of ``kind``."""
    if kind is Kind.STRING:
        packed = int.from_bytes(str(value).encode("utf-8", "surrogatepass")[:8].ljust(8, b"\0"))
        f = float(packed)
        return f, packed - int(f)
    if kind is Kind.BOOL:
        return (1.0 if value else 0.0), 0
    f = float(value)
    if value.__class__ is int and not -EXACT_INT <= value <= EXACT_INT:  # type: ignore[operator]
        return f, value - int(f)  # type: ignore[operator]
    return f, 0


def keys(values: list[Value], kind: Kind) -> tuple[np.ndarray, np.ndarray]:
    """The keys of many values of one kind, as a float64 and an int64 column."""
    pairs = [key(v, kind) for v in values]
    return (np.fromiter((p[0] for p in pairs), np.float64, len(pairs)),
            np.fromiter((p[1] for p in pairs), np.int64, len(pairs)))
