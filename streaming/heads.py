"""The notification key and head of each subscription a worker indexes, stored by the
matcher's slot, so that a batch's notification records are put together from the
matcher's slots with no Python object per match: the keys and the values each by one
compiled copy of byte ranges (each match's key; each match's head and event tail).

Owns that store, :class:`NotificationHeads`, and the assembly of notification keys and
values from it (:meth:`NotificationHeads.keys`, :meth:`NotificationHeads.join`). The key
is the subscription id's UTF-8 and the head :func:`streaming.records.notification_head`;
:mod:`streaming.worker` writes both when it indexes a subscription and reads them back
here for its matches.

The bytes live in one append-only buffer: a slot's key and head are written back to
back at its end, and three columns by slot say where (start, key length, total length).
Writes are held in a dictionary by slot and appended at the next read (or when a bulk
load asks, after each chunk), in one vectorised pass; a rewritten or cleared slot leaves
dead bytes behind, and the buffer is compacted in place once they outweigh the live ones.
So a write costs its own bytes and a share of the buffer's growth, never a copy of the
store per merge: the store used to be two Arrow columns rewritten whole by every merge,
which at 1M subscriptions (87 MiB of keys and heads) made the merge after each catch-up
chunk a worker's memory peak.
"""

from __future__ import annotations

import numba
import numpy as np
import pyarrow as pa

from index.core.columns import GrowableArray

MAX_VALUE_BYTES = (1 << 31) - 1
"""The most bytes of values one column of :meth:`NotificationHeads.join` holds (Arrow's
``binary`` type, which Spark's Kafka sink reads, has 32-bit offsets)."""
_NONE = -1
"""The start of a slot that holds nothing."""


class NotificationHeads:
    """Notification keys and heads by matcher slot, in one byte buffer."""

    def __init__(self) -> None:
        self._data = GrowableArray(np.uint8)
        self._live = 0  # bytes of _data that slots hold
        self._start = GrowableArray(np.int64)
        self._key_end = GrowableArray(np.int32)  # a slot's key is _data[start:start + key_end]
        self._end = GrowableArray(np.int32)  # and its head runs on to start + end
        self._pending: dict[int, tuple[bytes, bytes] | None] = {}

    def put(self, slot: int, key: bytes, head: bytes) -> None:
        """Store the key and head of the subscription at ``slot``. Cost O(1)."""
        self._pending[slot] = (key, head)

    def clear(self, slot: int) -> None:
        """Forget what ``slot`` holds (its subscription was removed). Cost O(1)."""
        self._pending[slot] = None

    def get(self, slot: int) -> tuple[bytes, bytes] | None:
        """The key and head at ``slot``, None if it holds none. Cost O(1) once the
        writes are merged (:meth:`merge`)."""
        self.merge()
        if slot >= len(self._start) or self._start.data[slot] == _NONE:
            return None
        start = int(self._start.data[slot])
        key_end, end = start + int(self._key_end.data[slot]), start + int(self._end.data[slot])
        data = self._data.data
        return data[start:key_end].tobytes(), data[key_end:end].tobytes()

    def merge(self) -> None:
        """Append the writes held since the last merge to the buffer, so that they stop
        holding a Python object each: a bulk load calls it once per chunk.

        Cost: none without writes; else O(writes) and their bytes, plus a compaction
        (O(live bytes), in place) when the dead bytes outweigh the live ones: each live
        byte is moved O(1) times per byte written, amortised.
        """
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        slots = np.fromiter(pending, np.int64, len(pending))
        self._start.grow_to(int(slots.max()) + 1, _NONE)
        self._key_end.grow_to(len(self._start))
        self._end.grow_to(len(self._start))
        held = self._start.data[slots] != _NONE
        self._live -= int(self._end.data[slots[held]].sum())
        self._start.data[slots] = _NONE
        puts = [(slot, row) for slot, row in zip(slots.tolist(), pending.values(), strict=True)
                if row is not None]  # fmt: skip
        if puts:
            put_slots = np.fromiter((slot for slot, _ in puts), np.int64, len(puts))
            key_len = np.fromiter((len(row[0]) for _, row in puts), np.int64, len(puts))
            blob = b"".join([part for _, row in puts for part in row])
            lengths = key_len + np.fromiter((len(row[1]) for _, row in puts), np.int64,
                                            len(puts))  # fmt: skip
            at = self._data.extend(np.frombuffer(blob, np.uint8))
            self._start.data[put_slots] = at + np.cumsum(lengths) - lengths
            self._key_end.data[put_slots] = key_len
            self._end.data[put_slots] = lengths
            self._live += len(blob)
        if len(self._data) - self._live > max(self._live, 1 << 20):
            self._compact()

    def _compact(self) -> None:
        """Move the held slots' bytes left over the dead ones, in the order they lie in
        the buffer (so none overwrites bytes still to move), and shrink the buffer.
        Cost O(slots log slots + live bytes), in place."""
        start = self._start.view()
        held = np.flatnonzero(start != _NONE)
        held = held[np.argsort(start[held], kind="stable")]
        lengths = self._end.data[held].astype(np.int64)
        new_start = np.cumsum(lengths) - lengths
        data = self._data.data
        _copy_ranges(data, start[held], lengths, data, new_start)
        start[held] = new_start
        self._data.truncate(self._live)

    def keys(self, slots: np.ndarray) -> pa.BinaryArray:
        """The key at each of ``slots`` (each must hold one), as one ``binary`` column.
        Cost O(len(slots) + their bytes), one compiled copy."""
        self.merge()
        start = self._start.data[slots]
        lengths = self._key_end.data[slots].astype(np.int64)
        offsets = np.zeros(len(slots) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        out = np.empty(int(offsets[-1]), dtype=np.uint8)
        _copy_ranges(self._data.data, start, lengths, out, offsets[:-1])
        return pa.Array.from_buffers(pa.binary(), len(slots),
                                     [None, pa.py_buffer(offsets.astype(np.int32)),
                                      pa.py_buffer(out)])  # fmt: skip

    def check(self) -> None:
        """Assert the store's invariants: every held slot's bytes lie in the used part of
        the buffer, its key within them, and the live count is their sum. O(slots)."""
        self.merge()
        start = self._start.view()
        held = start != _NONE
        key_end, end = self._key_end.view()[held], self._end.view()[held]
        assert ((key_end >= 0) & (key_end <= end)).all(), "a key longer than its record"
        assert (start[held] >= 0).all() and (start[held] + end <= len(self._data)).all()
        assert int(end.sum()) == self._live <= len(self._data)

    def join(self, slots: np.ndarray, tails: list[bytes], events: np.ndarray
             ) -> list[pa.BinaryArray]:  # fmt: skip
        """The notification value of each match ``i``: the head at ``slots[i]`` followed
        by ``tails[events[i]]``, in order, as ``binary`` columns of at most
        :data:`MAX_VALUE_BYTES` each (one but for enormous batches).

        Cost O(matches) in numpy for the offsets, then each value's bytes copied once by
        a compiled loop: no column of the matches' heads or tails is built first (at 1M
        subscriptions they were as large as the values themselves).
        """
        self.merge()
        record = self._start.data[slots]
        head_lo = record + self._key_end.data[slots]
        head_hi = record + self._end.data[slots]
        tail_lengths = np.fromiter(map(len, tails), np.int64, len(tails))
        tail_offsets = np.zeros(len(tails) + 1, dtype=np.int64)
        np.cumsum(tail_lengths, out=tail_offsets[1:])
        tail_data = np.frombuffer(b"".join(tails), dtype=np.uint8)
        lengths = head_hi - head_lo + tail_lengths[events]
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
            _copy_pairs(self._data.data, head_lo[start:stop], head_hi[start:stop], tail_offsets,
                        tail_data, events[start:stop], offsets, out)  # fmt: skip
            columns.append(pa.Array.from_buffers(
                pa.binary(), stop - start,
                [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(out)]))
            start = stop
        return columns

    def __getstate__(self) -> tuple[np.ndarray, ...]:
        self.merge()
        return (self._data.view(), self._live, self._start.view(),
                self._key_end.view(), self._end.view())

    def __setstate__(self, state: tuple[np.ndarray, ...]) -> None:
        data, self._live, start, key_end, end = state
        self._data, self._start, self._key_end, self._end = (
            GrowableArray(np.uint8), GrowableArray(np.int64), GrowableArray(np.int32),
            GrowableArray(np.int32))  # fmt: skip
        self._data.extend(data)
        self._start.extend(start)
        self._key_end.extend(key_end)
        self._end.extend(end)
        self._pending = {}


@numba.njit(cache=True, nogil=True)
def _copy_ranges(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                 out: np.ndarray, out_starts: np.ndarray) -> None:  # fmt: skip
    """``out[out_starts[i]:][:lengths[i]]`` = ``data[starts[i]:][:lengths[i]]`` for
    every ``i``, byte by byte from the first: ``out`` may be ``data`` itself, its ranges
    moved left (``out_starts[i] <= starts[i]``, the ranges in ascending order)."""
    for i in range(starts.shape[0]):
        lo, n, at = starts[i], lengths[i], out_starts[i]
        for j in range(n):
            out[at + j] = data[lo + j]


@numba.njit(cache=True, nogil=True)
def _copy_pairs(left_data: np.ndarray, left_lo: np.ndarray, left_hi: np.ndarray,
                right_offsets: np.ndarray, right_data: np.ndarray, right_rows: np.ndarray,
                out_offsets: np.ndarray, out: np.ndarray) -> None:  # fmt: skip
    """``out[out_offsets[i]:out_offsets[i + 1]]`` = ``left_data[left_lo[i]:left_hi[i]]``,
    then value ``right_rows[i]`` of the right column, for every ``i``."""
    for i in range(left_lo.shape[0]):
        at = out_offsets[i]
        lo, hi = left_lo[i], left_hi[i]
        out[at:at + hi - lo] = left_data[lo:hi]
        at += hi - lo
        row = right_rows[i]
        lo, hi = right_offsets[row], right_offsets[row + 1]
        out[at:at + hi - lo] = right_data[lo:hi]
