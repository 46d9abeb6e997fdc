"""The notification key and head of each subscription a worker indexes, stored by the
matcher's slot in two Arrow columns, so that a batch's notification records are put
together from the matcher's slots by Arrow ``take`` kernels: no Python object per match.

Owns that store, :class:`NotificationHeads`. The key is the subscription id's UTF-8 and
the head :func:`streaming.records.notification_head`; :mod:`streaming.worker` writes both
when it indexes a subscription and reads them with :meth:`NotificationHeads.columns`.

Writes are held in a dictionary by slot and merged into the columns at the next read, in
one vectorised pass: a batch that changed no subscription copies nothing, one that did
copies the columns once. A slot the matcher has freed keeps whatever it held until the
slot is written again: the matcher never returns a free slot, so it is never read.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_EMPTY = pa.array([], pa.large_binary())


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

    def __getstate__(self) -> tuple[pa.LargeBinaryArray, pa.LargeBinaryArray]:
        return self.columns()

    def __setstate__(self, state: tuple[pa.LargeBinaryArray, pa.LargeBinaryArray]) -> None:
        self._keys, self._heads = state
        self._pending = {}


def _replace(column: pa.LargeBinaryArray, size: int, mask: np.ndarray,
             values: list[bytes | None]) -> pa.LargeBinaryArray:  # fmt: skip
    """``column`` padded with nulls to ``size``, its values where ``mask`` is set
    replaced by ``values`` (in slot order)."""
    if size > len(column):
        column = pa.concat_arrays([column, pa.nulls(size - len(column), pa.large_binary())])
    return pc.replace_with_mask(column, mask, pa.array(values, pa.large_binary()))
