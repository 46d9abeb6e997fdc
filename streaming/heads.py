"""The notification head of each subscription a worker indexes, stored by the matcher's
slot, so that a batch's notification values are put together from the matcher's slots
with no Python object per match: each match's head and event tail by one compiled copy
of byte ranges.

Owns that store, :class:`NotificationHeads`, and the assembly of notification values from
it (:meth:`NotificationHeads.join`). The head is :func:`streaming.records.notification_head`,
kept without :data:`streaming.records.NOTIFICATION_PREFIX`, which every value starts with;
:mod:`streaming.worker` writes it when it indexes a subscription and reads it back here
for its matches. A notification's key, the subscription id, comes from the matcher's id
map (:meth:`index.matcher.Matcher.ids_utf8`), which holds the same bytes already.

The heads live in a :class:`index.core.slot_bytes.SlotBytes`: one append-only buffer,
compacted in place. A bulk load writes each chunk's heads at once
(:meth:`NotificationHeads.put_many`); a single write is held in a dictionary by slot and
appended at the next read.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from index import _kernels
from index.core.slot_bytes import SlotBytes, joined
from streaming.records import NOTIFICATION_PREFIX

MAX_VALUE_BYTES = (1 << 31) - 1
"""The most bytes of values one column of :meth:`NotificationHeads.join` holds (Arrow's
``binary`` type, which Spark's Kafka sink reads, has 32-bit offsets)."""


class NotificationHeads:
    """Notification heads by matcher slot, in one byte buffer."""

    def __init__(self) -> None:
        self._heads = SlotBytes()

    def put(self, slot: int, head: bytes) -> None:
        """Store the head of the subscription at ``slot``. Cost O(1)."""
        self._heads.put(slot, head)

    def put_many(self, slots: np.ndarray, heads: list[bytes]) -> None:
        """Store ``heads[i]`` at ``slots[i]`` (distinct slots), at once: how a bulk load
        writes a chunk's heads, no Python object held per head after it. Cost
        O(len(slots)) and their bytes, plus an amortised compaction
        (:meth:`index.core.slot_bytes.SlotBytes.put_many`)."""
        self._heads.put_many(slots, heads)

    def clear_many(self, slots: np.ndarray) -> None:
        """Forget what ``slots`` hold (their subscriptions were removed). Cost
        O(len(slots)), vectorised."""
        self._heads.clear_many(slots)

    def get(self, slot: int) -> bytes | None:
        """The head at ``slot`` after :data:`streaming.records.NOTIFICATION_PREFIX`, None
        if it holds none. Cost O(its bytes), and the single writes' at the first read
        after them."""
        head = self._heads.get(slot)
        return None if head is None else NOTIFICATION_PREFIX + head

    def check(self) -> None:
        """Assert the store's invariants (:meth:`index.core.slot_bytes.SlotBytes.check`).
        O(slots)."""
        self._heads.check()

    def join(self, slots: np.ndarray, tails: list[bytes], events: np.ndarray
             ) -> list[pa.BinaryArray]:  # fmt: skip
        """The notification value of each match ``i``: the prefix and the head at
        ``slots[i]`` (:meth:`get`) followed by ``tails[events[i]]``, in order, as
        ``binary`` columns of at most :data:`MAX_VALUE_BYTES` each (one but for enormous
        batches).

        Cost O(matches) in numpy for the offsets, then each value's bytes copied once by
        a compiled loop: no column of the matches' heads or tails is built first (at 1M
        subscriptions they were as large as the values themselves).
        """
        head_lo, head_hi = self._heads.ranges(slots)
        tail_data, tail_offsets = joined(tails)
        tail_lengths = np.diff(tail_offsets)
        lengths = len(NOTIFICATION_PREFIX) + head_hi - head_lo + tail_lengths[events]
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
            _kernels.join_notifications(
                np.frombuffer(NOTIFICATION_PREFIX, dtype=np.uint8), self._heads.buffer,
                head_lo[start:stop], head_hi[start:stop], tail_offsets, tail_data,
                events[start:stop], offsets, out)  # fmt: skip
            columns.append(binary_column(offsets, out))
            start = stop
        return columns


def binary_column(offsets: np.ndarray, data: np.ndarray) -> pa.BinaryArray:
    """An Arrow ``binary`` column of the values ``data[offsets[i]:offsets[i + 1]]``
    (int64 ``offsets`` from 0, below 2 GiB), without copying ``data``."""
    return pa.Array.from_buffers(pa.binary(), len(offsets) - 1,
                                 [None, pa.py_buffer(offsets.astype(np.int32)),
                                  pa.py_buffer(data)])  # fmt: skip
