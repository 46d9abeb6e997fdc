"""The notification key and head of each subscription a worker indexes, stored by the
matcher's slot in two Arrow columns, so that a batch's notification records are put
together from the matcher's slots with no Python object per match: the keys by an Arrow
``take``, the values by one compiled copy of each match's head and event tail.

Owns that store, :class:`NotificationHeads`, and the assembly of notification values
from it (:meth:`NotificationHeads.join`). The key is the subscription id's UTF-8 and the
head :func:`streaming.records.notification_head`; :mod:`streaming.worker` writes both
when it indexes a subscription, takes the keys by slot from :meth:`columns` and joins each
match's head with its event's tail (:func:`streaming.records.notification_tail`) here.

Writes are held in a dictionary by slot and merged into the columns at the next read
(or when a bulk load asks, after each chunk), in one vectorised pass: a batch that
changed no subscription copies nothing, one that did copies the columns once. A slot
the matcher has freed keeps whatever it held until the slot is written again: the
matcher never returns a free slot, so it is never read.
"""

from __future__ import annotations

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_EMPTY = pa.array([], pa.large_binary())
MAX_VALUE_BYTES = (1 << 31) - 1
"""The most bytes of values one column of :meth:`NotificationHeads.join` holds (Arrow's
``binary`` type, which Spark's Kafka sink reads, has 32-bit offsets)."""


class NotificationHeads:
    """Notification keys and heads by matcher slot (``large_binary`` columns: the heads
    of a million subscriptions with large ``extra`` fields may pass 2 GiB)."""

    def __init__(self) -> None:
        self._keys: pa.LargeBinaryArray = _EMPTY
        self._heads: pa.LargeBinaryArray = _EMPTY
        self._pending: dict[int, tuple[bytes, bytes] | None] = {}

    def put(self, slot: int, key: bytes, head: bytes) -> None:
        """Store the key and head of the subscription at ``slot``. Cost O(1)."""
        self._pending[slot] = (key, head)

    def clear(self, slot: int) -> None:
        """Forget what ``slot`` holds (its subscription was removed). Cost O(1)."""
        self._pending[slot] = None

    def get(self, slot: int) -> tuple[bytes, bytes] | None:
        """The key and head at ``slot``, None if it holds none. Cost O(1) once the
        writes are merged (:meth:`columns`)."""
        keys, heads = self.columns()
        if slot >= len(keys) or not keys[slot].is_valid:
            return None
        return keys[slot].as_py(), heads[slot].as_py()

    def columns(self) -> tuple[pa.LargeBinaryArray, pa.LargeBinaryArray]:
        """The keys and heads, indexed by slot (null where a slot holds none), the
        writes held merged first (:meth:`merge`)."""
        self.merge()
        return self._keys, self._heads

    def merge(self) -> None:
        """Merge the writes held since the last merge into the columns, so that they
        stop holding a Python object each: a bulk load calls it once per chunk.

        Cost: none without writes; else O(slots + writes) in Arrow kernels, and as much
        memory again as the columns for the copy.
        """
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        slots = np.fromiter(pending, np.int64, len(pending))
        order = np.argsort(slots)
        written = list(pending.values())
        rows = [written[i] for i in order.tolist()]
        size = max(len(self._keys), int(slots[order[-1]]) + 1)
        mask = np.zeros(size, dtype=bool)
        mask[slots] = True
        self._keys = _replace(self._keys, size, mask, [None if r is None else r[0] for r in rows])
        self._heads = _replace(self._heads, size, mask, [None if r is None else r[1] for r in rows])

    def join(self, slots: np.ndarray, tails: list[bytes], events: np.ndarray
             ) -> list[pa.BinaryArray]:  # fmt: skip
        """The notification value of each match ``i``: the head at ``slots[i]`` followed
        by ``tails[events[i]]``, in order, as ``binary`` columns of at most
        :data:`MAX_VALUE_BYTES` each (one but for enormous batches).

        Cost O(matches) in numpy for the offsets, then each value's bytes copied once by
        a compiled loop: no column of the matches' heads or tails is built first (at 1M
        subscriptions they were as large as the values themselves).
        """
        _, heads = self.columns()
        head_offsets = _offsets(heads)
        head_data = _data(heads)
        tail_lengths = np.fromiter(map(len, tails), np.int64, len(tails))
        tail_offsets = np.zeros(len(tails) + 1, dtype=np.int64)
        np.cumsum(tail_lengths, out=tail_offsets[1:])
        tail_data = np.frombuffer(b"".join(tails), dtype=np.uint8)
        lengths = head_offsets[slots + 1] - head_offsets[slots] + tail_lengths[events]
        ends = np.cumsum(lengths)
        columns = []
        start = 0
        while start < len(slots) or not columns:
            base = int(ends[start - 1]) if start else 0
            stop = max(start + 1, int(np.searchsorted(ends, base + MAX_VALUE_BYTES, "right")))
            stop = min(stop, len(slots))
            offsets = np.zeros(stop - start + 1, dtype=np.int64)
            offsets[1:] = ends[start:stop] - base
            out = np.empty(int(offsets[-1]), dtype=np.uint8)
            _copy_pairs(head_offsets, head_data, slots[start:stop], tail_offsets, tail_data,
                        events[start:stop], offsets, out)  # fmt: skip
            columns.append(pa.Array.from_buffers(
                pa.binary(), stop - start,
                [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(out)]))
            start = stop
        return columns

    def __getstate__(self) -> tuple[pa.LargeBinaryArray, pa.LargeBinaryArray]:
        return self.columns()

    def __setstate__(self, state: tuple[pa.LargeBinaryArray, pa.LargeBinaryArray]) -> None:
        self._keys, self._heads = state
        self._pending = {}


def _offsets(column: pa.LargeBinaryArray) -> np.ndarray:
    """The int64 offsets of ``column``'s values, zero-copy."""
    start = column.offset
    return np.frombuffer(column.buffers()[1], dtype=np.int64)[start:start + len(column) + 1]


def _data(column: pa.LargeBinaryArray) -> np.ndarray:
    """The bytes ``column``'s offsets point into, zero-copy."""
    data = column.buffers()[2]
    return np.empty(0, dtype=np.uint8) if data is None else np.frombuffer(data, dtype=np.uint8)


@numba.njit(cache=True, nogil=True)
def _copy_pairs(left_offsets: np.ndarray, left_data: np.ndarray, left_rows: np.ndarray,
                right_offsets: np.ndarray, right_data: np.ndarray, right_rows: np.ndarray,
                out_offsets: np.ndarray, out: np.ndarray) -> None:  # fmt: skip
    """``out[out_offsets[i]:out_offsets[i + 1]]`` = value ``left_rows[i]`` of the left
    column, then value ``right_rows[i]`` of the right one, for every ``i``."""
    for i in range(left_rows.shape[0]):
        at = out_offsets[i]
        row = left_rows[i]
        lo, hi = left_offsets[row], left_offsets[row + 1]
        out[at:at + hi - lo] = left_data[lo:hi]
        at += hi - lo
        row = right_rows[i]
        lo, hi = right_offsets[row], right_offsets[row + 1]
        out[at:at + hi - lo] = right_data[lo:hi]


def _replace(column: pa.LargeBinaryArray, size: int, mask: np.ndarray,
             values: list[bytes | None]) -> pa.LargeBinaryArray:  # fmt: skip
    """``column`` padded with nulls to ``size``, its values where ``mask`` is set
    replaced by ``values`` (in slot order)."""
    if size > len(column):
        column = pa.concat_arrays([column, pa.nulls(size - len(column), pa.large_binary())])
    return pc.replace_with_mask(column, mask, pa.array(values, pa.large_binary()))
