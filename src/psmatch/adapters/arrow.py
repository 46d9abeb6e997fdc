"""Arrow columns made from numpy arrays and Python lists, and read back into numpy, from
their buffers: how every Python worker builds and reads its batches.

Why not ``pa.array``, ``pa.RecordBatch.from_pydict``, ``Array.to_numpy`` or the
``pyarrow.compute`` functions: pyarrow imports pandas for the first three (it checks
whether the input is a pandas object) and ``pyarrow.compute`` for the fourth, which a
Spark ``mapInArrow`` worker does not load otherwise: tens of MiB of resident memory for
pandas, several for ``pyarrow.compute``, in every Python worker that calls one once, a
share of the memory its index needs. Only the types the service's batches have are
built here: int32, int64 and float64 without nulls, string and binary with them. Every
function costs O(rows + bytes) in numpy, plus one ``bytes`` join for a list of values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from psmatch.core.slot_bytes import joined

_NUMERIC = {pa.int64(): np.int64, pa.float64(): np.float64, pa.int32(): np.int32}
BINARY, STRING = pa.binary(), pa.string()


def binary_column(offsets: np.ndarray, data: np.ndarray, valid: np.ndarray | None = None,
                  arrow_type: pa.DataType = BINARY) -> pa.Array:  # fmt: skip
    """An Arrow ``binary`` (or ``string``) column of the values
    ``data[offsets[i]:offsets[i + 1]]`` (int64 ``offsets`` from 0, below 2 GiB), null
    where ``valid`` is False, without copying ``data``."""
    validity = None if valid is None or valid.all() else pa.py_buffer(
        np.packbits(valid, bitorder="little"))  # fmt: skip
    return pa.Array.from_buffers(arrow_type, len(offsets) - 1,
                                 [validity, pa.py_buffer(offsets.astype(np.int32)),
                                  pa.py_buffer(data)])  # fmt: skip


def repeated_string(value: str, n: int) -> pa.Array:
    """``value`` ``n`` times, as a ``string`` column: its bytes repeated."""
    data = value.encode()
    offsets = np.arange(n + 1, dtype=np.int64) * len(data)
    return binary_column(offsets, np.frombuffer(data * n, dtype=np.uint8),
                         arrow_type=STRING)


def column(values: Sequence[Any], arrow_type: pa.DataType) -> pa.Array:
    """``pa.array(values, arrow_type)`` for int32, int64 and float64 values (no nulls) and
    string and binary ones (``None`` for null)."""
    if arrow_type in _NUMERIC:
        data = np.asarray(values, dtype=_NUMERIC[arrow_type])
        return pa.Array.from_buffers(arrow_type, len(data), [None, pa.py_buffer(data)])
    if arrow_type not in (STRING, BINARY):
        raise TypeError(f"no column of {arrow_type} is built here")
    data, offsets = joined(
        [b"" if v is None else v.encode() if isinstance(v, str) else v for v in values])
    valid = np.fromiter((v is not None for v in values), bool, len(values))
    return binary_column(offsets, data, valid, arrow_type)


def record_batch(columns: Mapping[str, Sequence[Any]], schema: pa.Schema) -> pa.RecordBatch:
    """``pa.RecordBatch.from_pydict(columns, schema=schema)``, each column by
    :func:`column`."""
    return pa.RecordBatch.from_arrays([column(columns[f.name], f.type) for f in schema],
                                      schema=schema)  # fmt: skip


def value_offsets(array: pa.Array) -> np.ndarray:
    """Where each value of a binary or string column starts in its data buffer, and the
    last one ends: ``len(array) + 1`` offsets, a view (int64 for the large types, else
    int32)."""
    large = pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type)
    return np.frombuffer(array.buffers()[1], dtype=np.int64 if large else np.int32)[
        array.offset : array.offset + len(array) + 1]


def values_of(array: pa.Array) -> np.ndarray:
    """The values of a numeric column without nulls, as a numpy view of its buffer."""
    if array.null_count:
        raise ValueError("a column with nulls has no plain numpy view")
    dtype = _NUMERIC[array.type]
    return np.frombuffer(array.buffers()[1], dtype=dtype)[array.offset : array.offset + len(array)]


def null_mask(array: pa.Array) -> np.ndarray:
    """Where ``array`` is null, as a bool array (all False without a validity buffer)."""
    validity = array.buffers()[0]
    if validity is None:
        return np.zeros(len(array), dtype=bool)
    bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
    return ~bits[array.offset : array.offset + len(array)].astype(bool)
