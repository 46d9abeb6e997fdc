"""A byte string per slot, in one append-only buffer: how the ids of a matcher
(:mod:`psmatch.core.slot_ids`), and through them the distinct notification heads of a
worker (:mod:`psmatch.service.records.notifications`), are kept without a Python object each.

Owns :class:`SlotBytes`, the joining of byte strings into one column (:func:`joined`) and
the compiled copy of byte ranges (:func:`copy_ranges`) that reads and compacts it.

A slot's bytes are appended at the end of the buffer, and two columns by slot say where
they lie (start, -1 for none, and length). A rewritten or cleared slot leaves dead bytes
behind, and the buffer is compacted in place once they outweigh the live ones. So a
write costs its own bytes and a share of the buffer's growth, never a copy of the store:
at 1M subscriptions a ``bytes`` object per slot took about 40 bytes of header each, and a
store rewritten whole per batch of writes made each write's cost grow with the store.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from psmatch.core import _kernels
from psmatch.core.columns import GrowableArray

NONE = -1
"""The start of a slot that holds nothing."""
_MIN_DEAD = 1 << 20
"""Dead bytes below this never trigger a compaction (a small store is not worth it)."""


class SlotBytes:
    """A byte string by slot, in one buffer, written a batch of slots at a time."""

    __slots__ = ("_buffer", "_length", "_live", "_start")

    def __init__(self) -> None:
        self._buffer = GrowableArray(np.uint8)
        self._live = 0  # bytes of the buffer that slots hold
        self._start = GrowableArray(np.int64)
        self._length = GrowableArray(np.int32)

    def put_many(self, slots: np.ndarray, values: Sequence[bytes]) -> None:
        """Store ``values[i]`` at ``slots[i]`` (distinct slots), replacing what they
        held, at once. Cost O(len(slots)) plus their bytes, in one join and a few numpy
        calls; plus a compaction (O(live bytes), in place) when the dead bytes outweigh
        the live ones: each live byte is moved O(1) times per byte written, amortised."""
        self.put_joined(slots, *joined(values))

    def put_joined(self, slots: np.ndarray, data: np.ndarray, offsets: np.ndarray) -> None:
        """:meth:`put_many` of values given back to back (:func:`joined`), for a caller
        that joined them already."""
        self._write(np.asarray(slots, dtype=np.int64), data, offsets)

    def clear_many(self, slots: np.ndarray) -> None:
        """Forget what ``slots`` hold. Cost O(len(slots)), vectorised."""
        self._write(np.asarray(slots, dtype=np.int64), *joined([]))

    def _write(self, slots: np.ndarray, data: np.ndarray, offsets: np.ndarray) -> None:
        """Clear ``slots``, then store the values joined in ``data`` (:func:`joined`) at
        its first ``len(offsets) - 1`` slots."""
        if not len(slots):
            return
        self._start.grow_to(int(slots.max()) + 1, NONE)
        self._length.grow_to(len(self._start))
        start, length = self._start.data, self._length.data
        held = slots[start[slots] != NONE]
        self._live -= int(length[held].sum())
        start[slots] = NONE
        length[slots] = 0
        if len(offsets) > 1:
            put = slots[: len(offsets) - 1]
            lengths = np.diff(offsets)
            at = self._buffer.extend(data)
            start[put] = at + offsets[:-1]
            self._length.data[put] = lengths
            self._live += int(lengths.sum())
        if len(self._buffer) - self._live > max(self._live, _MIN_DEAD):
            self._compact()

    def _compact(self) -> None:
        """Move the held slots' bytes left over the dead ones, in the order they lie in
        the buffer (so none overwrites bytes still to move), and shrink the buffer.
        Cost O(slots log slots + live bytes), in place."""
        start = self._start.view()
        held = np.flatnonzero(start != NONE)
        held = held[np.argsort(start[held], kind="stable")]
        lengths = self._length.data[held].astype(np.int64)
        new_start = np.cumsum(lengths) - lengths
        buffer = self._buffer.data
        copy_ranges(buffer, start[held], lengths, buffer, new_start)
        start[held] = new_start
        self._buffer.truncate(self._live)

    def get(self, slot: int) -> bytes | None:
        """The bytes at ``slot``, None if it holds none. Cost O(their length)."""
        if slot >= len(self._start) or self._start.data[slot] == NONE:
            return None
        start = int(self._start.data[slot])
        return self._buffer.data[start : start + int(self._length.data[slot])].tobytes()

    def ranges(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where the bytes of each of ``slots`` (each must hold some) lie in
        :attr:`buffer`: int64 ``(lo, hi)``. Cost O(len(slots)), vectorised."""
        lo = self._start.data[slots]
        return lo, lo + self._length.data[slots]

    def gather(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The bytes of each of ``slots`` (each must hold some) back to back: int64
        ``offsets`` (``len(slots) + 1``, from 0) and the uint8 data. Cost
        O(len(slots) + their bytes), one compiled copy."""
        lo, hi = self.ranges(slots)
        offsets = np.zeros(len(slots) + 1, dtype=np.int64)
        np.cumsum(hi - lo, out=offsets[1:])
        out = np.empty(int(offsets[-1]), dtype=np.uint8)
        copy_ranges(self._buffer.data, lo, hi - lo, out, offsets[:-1])
        return offsets, out

    @property
    def buffer(self) -> np.ndarray:
        """The whole buffer (:meth:`ranges` says where each slot's bytes are)."""
        return self._buffer.data

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The buffer, and each slot's start (:data:`NONE`: nothing) and length, for
        compiled readers. Valid until the next write."""
        return self._buffer.data, self._start.view(), self._length.view()

    def check(self) -> None:
        """Assert the invariants: every held slot's bytes lie in the used part of the
        buffer, the free slots hold none, and the live count is their sum. O(slots)."""
        start, length = self._start.view(), self._length.view()
        held = start != NONE
        assert (length[held] >= 0).all() and (length[~held] == 0).all()
        assert (start[held] >= 0).all() and (start[held] + length[held] <= len(self._buffer)).all()
        assert int(length.sum()) == self._live <= len(self._buffer)


def joined(values: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """``values`` back to back as uint8 data, and their int64 offsets
    (``len(values) + 1``, from 0). Cost O(len(values) + their bytes): one join."""
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, values), np.int64, len(values)), out=offsets[1:])
    return np.frombuffer(b"".join(values), dtype=np.uint8), offsets


def copy_ranges(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                out: np.ndarray, out_starts: np.ndarray) -> None:  # fmt: skip
    """``out[out_starts[i]:][:lengths[i]]`` = ``data[starts[i]:][:lengths[i]]`` for
    every ``i``, each range moved as by ``memmove``: ``out`` may be ``data`` itself, its
    ranges moved left (``out_starts[i] <= starts[i]``, the ranges in ascending order)."""
    _kernels.copy_ranges(data, starts, lengths, out, out_starts)
