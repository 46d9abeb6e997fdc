"""psmatch.adapters.arrow: columns built and read from their buffers, equal to what pyarrow's
own constructors give, and never loading pandas or pyarrow.compute."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from psmatch.adapters.arrow import (
    binary_column,
    column,
    null_mask,
    record_batch,
    repeated_string,
    value_offsets,
    values_of,
)

SCHEMA = pa.schema([("n", pa.int64()), ("x", pa.float64()), ("s", pa.string()),
                    ("b", pa.binary())])  # fmt: skip


def test_columns_equal_pyarrows_own() -> None:
    columns = {"n": [3, -(2**63), 0], "x": [0.5, -1e300, 0.0], "s": ["é\U0001f600", None, ""],
               "b": [b"\x00\xff", b"", None]}  # fmt: skip
    built = record_batch(columns, SCHEMA)
    built.validate(full=True)
    assert built.equals(pa.RecordBatch.from_pydict(columns, schema=SCHEMA))
    assert record_batch({name: [] for name in SCHEMA.names}, SCHEMA).num_rows == 0
    with pytest.raises(TypeError, match="no column of bool"):
        column([True], pa.bool_())


def test_binary_and_repeated_columns() -> None:
    offsets = np.array([0, 2, 2, 5], dtype=np.int64)
    data = np.frombuffer(b"abcde", dtype=np.uint8)
    assert binary_column(offsets, data).to_pylist() == [b"ab", b"", b"cde"]
    valid = np.array([True, False, True])
    assert binary_column(offsets, data, valid).to_pylist() == [b"ab", None, b"cde"]
    topic = repeated_string("psmatch.notifications", 4)
    topic.validate(full=True)
    assert topic.type == pa.string() and topic.to_pylist() == ["psmatch.notifications"] * 4


def test_values_and_nulls_read_from_slices() -> None:
    numbers = pa.array(list(range(20)), pa.int64()).slice(3, 9)
    assert values_of(numbers).tolist() == list(range(3, 12))
    with pytest.raises(ValueError, match="nulls"):
        values_of(pa.array([1, None], pa.int64()))
    values = [None if i % 3 == 0 else b"v" for i in range(30)]
    sliced = pa.array(values, pa.binary()).slice(5, 17)  # an offset not a multiple of 8
    assert null_mask(sliced).tolist() == [v is None for v in values[5:22]]
    assert not null_mask(pa.array([b"a"], pa.binary())).any()


def test_building_and_reading_columns_loads_neither_pandas_nor_pyarrow_compute() -> None:
    """What the module is for: 42 and 8 MiB of every Python worker that loads them."""
    code = """
import sys
import numpy as np
import pyarrow as pa
from psmatch.adapters.arrow import column, null_mask, record_batch, repeated_string, values_of
schema = pa.schema([("n", pa.int64()), ("s", pa.string()), ("b", pa.binary())])
batch = record_batch({"n": [1, 2], "s": ["a", None], "b": [None, b"x"]}, schema)
values_of(batch.column("n")), null_mask(batch.column("b")), repeated_string("t", 3)
batch.to_pydict()
assert "pandas" not in sys.modules and "pyarrow.compute" not in sys.modules
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_value_offsets_are_a_view_of_a_slice_of_either_width() -> None:
    for arrow_type in (pa.binary(), pa.string(), pa.large_binary(), pa.large_string()):
        values = pa.array(["ab", "", "cde", "f"], arrow_type).slice(1, 2)
        offsets = value_offsets(values)
        assert offsets.dtype == (np.int64 if "large" in str(arrow_type) else np.int32)
        assert offsets.tolist() == [2, 2, 5]
