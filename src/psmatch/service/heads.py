"""The notification head of each subscription a worker indexes, by the matcher's slot,
so that a batch's notification values are put together from the matcher's slots with no
Python object per match: each match's prefix, id, head and event tail written by one
compiled loop.

Owns that store, :class:`NotificationHeads`, and the assembly of notification values from
it (:meth:`NotificationHeads.join`). A value is :data:`psmatch.service.records.NOTIFICATION_PREFIX`,
the subscription's id as a JSON string, its head
(:func:`psmatch.service.records.notification_head`: subscriber and extra) and the event's tail.
The id comes from the matcher's id map (:meth:`psmatch.core.matcher.Matcher.ids_utf8`, the
notification's key, so gathered anyway) and is escaped as it is copied, and copied again
as the subscriber when the head does not name one (the default subscriber is the id); so
a head holds nothing of its subscription's own, and the subscriptions of one subscriber,
or of none named, with the same extra fields share it.

Each distinct head is stored once, in a :class:`psmatch.core.slot_ids.SlotIds` (its bytes
and a hash table that finds it), at a number of its own, with a count of the slots that
hold it; a slot holds its head's number (int32). At 1M BE-Gen benchmark subscriptions
(one subscriber, or each its own id) that is 4 MiB, where a head per slot took 56
MiB; with a distinct subscriber per subscription, other than its id, it costs what a
head per slot did plus the table (about 36 bytes a head).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from psmatch.adapters.arrow import binary_column
from psmatch.core import _kernels
from psmatch.core.columns import GrowableArray
from psmatch.core.slot_bytes import joined
from psmatch.core.slot_ids import SlotIds
from psmatch.service.records import NOTIFICATION_PREFIX, SUBSCRIBER_KEY

MAX_VALUE_BYTES = (1 << 31) - 1
"""The most bytes of values one column of :meth:`NotificationHeads.join` holds (Arrow's
``binary`` type, which Spark's Kafka sink reads, has 32-bit offsets)."""
_NONE = -1
"""The head number of a slot that holds none."""


class NotificationHeads:
    """Notification heads by matcher slot, each distinct head stored once."""

    __slots__ = ("_distinct", "_free", "_number", "_refs", "_repeats_id")

    def __init__(self) -> None:
        self._distinct = SlotIds()  # each distinct head at its number
        self._refs = GrowableArray(np.int64)  # by number: the slots holding that head
        self._repeats_id = GrowableArray(np.bool_)  # by number: it names no subscriber
        self._number = GrowableArray(np.int32)  # by slot: its head's number, or _NONE
        self._free: list[int] = []  # numbers below len(_refs) that hold no head

    def put(self, slot: int, head: str) -> None:
        """Store ``head`` at ``slot``, replacing what it held: :meth:`put_many` of one."""
        self.put_many(np.array([slot], dtype=np.int64), [head])

    def put_many(self, slots: np.ndarray, heads: list[str]) -> None:
        """Store ``heads[i]`` at ``slots[i]`` (distinct slots), replacing what they held.
        Cost O(len(slots)) plus the bytes of the heads not stored yet: a dictionary
        lookup per head, one :meth:`psmatch.core.slot_ids.SlotIds.find` of the distinct
        ones and a few numpy calls."""
        slots = np.asarray(slots, dtype=np.int64)
        self.clear_many(slots)
        distinct = list(dict.fromkeys(heads))
        numbers = self._distinct.find(distinct)
        new = np.flatnonzero(numbers == _NONE)
        if len(new):
            fresh = self._take_numbers(len(new))
            added = [distinct[i] for i in new.tolist()]
            self._distinct.put_many(fresh, added)
            self._repeats_id.grow_to(len(self._refs))
            self._repeats_id.data[fresh] = [not h.startswith(SUBSCRIBER_KEY) for h in added]
            numbers[new] = fresh
        number_of = dict(zip(distinct, numbers.tolist(), strict=True))
        held = np.fromiter(map(number_of.__getitem__, heads), np.int64, len(heads))
        self._number.grow_to(int(slots.max(initial=-1)) + 1, _NONE)
        self._number.data[slots] = held
        np.add.at(self._refs.data, held, 1)

    def _take_numbers(self, count: int) -> np.ndarray:
        """``count`` numbers that hold no head: freed ones first, then new ones."""
        take = min(count, len(self._free))
        reused = self._free[len(self._free) - take :]
        del self._free[len(self._free) - take :]
        first = len(self._refs)
        self._refs.grow_to(first + count - take)
        return np.concatenate([np.array(reused, dtype=np.int64),
                               np.arange(first, len(self._refs), dtype=np.int64)])  # fmt: skip

    def clear_many(self, slots: np.ndarray) -> None:
        """Forget what ``slots`` (distinct) hold; a head no slot holds any more is
        dropped. Cost O(len(slots)), vectorised, plus the dropped heads' removal."""
        slots = np.asarray(slots, dtype=np.int64)
        slots = slots[slots < len(self._number)]
        numbers = self._number.data[slots].astype(np.int64)
        numbers = numbers[numbers != _NONE]
        if not len(numbers):
            return
        self._number.data[slots] = _NONE
        np.subtract.at(self._refs.data, numbers, 1)
        dropped = np.unique(numbers)
        dropped = dropped[self._refs.data[dropped] == 0]
        self._distinct.clear_many(dropped)
        self._free.extend(dropped.tolist())

    def get(self, slot: int) -> str | None:
        """The head at ``slot``, None if it holds none. Cost O(its bytes)."""
        if slot >= len(self._number) or self._number.data[slot] == _NONE:
            return None
        return self._distinct.ids_at(np.array([self._number.data[slot]], dtype=np.int64))[0]

    def distinct(self) -> int:
        """How many distinct heads are stored. O(1)."""
        return len(self._distinct)

    def check(self) -> None:
        """Assert the invariants: the distinct heads' own
        (:meth:`psmatch.core.slot_ids.SlotIds.check`), each number's count is the number of
        slots holding it, the numbers stored are those counted, and the free ones the
        others. O(slots + numbers)."""
        self._distinct.check()
        numbers = self._number.view().astype(np.int64)
        counts = np.bincount(numbers[numbers != _NONE], minlength=len(self._refs))
        assert np.array_equal(counts, self._refs.view()), "a head's count is wrong"
        stored = self._distinct.held_slots()
        assert np.array_equal(stored, np.flatnonzero(counts)), "a head stored uncounted"
        assert sorted(self._free) == np.flatnonzero(counts == 0).tolist(), "free numbers"

    def join(self, slots: np.ndarray, ids: tuple[np.ndarray, np.ndarray], tails: list[bytes],
             events: np.ndarray) -> list[pa.BinaryArray]:  # fmt: skip
        """The notification value of each match ``i``
        (:func:`psmatch.service.records.notification_value`): the prefix, its subscription's id
        (row ``i`` of ``ids``, the matches' ids as :meth:`psmatch.core.matcher.Matcher.ids_utf8`
        gives them: int64 offsets and UTF-8 data) as a JSON string, the head at
        ``slots[i]`` (after the id again if it names no subscriber) and
        ``tails[events[i]]``, in order, as ``binary`` columns of at
        most :data:`MAX_VALUE_BYTES` each (one but for enormous batches).

        Cost O(matches) in numpy for the offsets, then each value's bytes written once by
        a compiled loop (the id escaped as JSON's encoder does): no column of the
        matches' heads or tails is built first.
        """
        id_offsets, id_data = ids
        numbers = self._number.data[slots].astype(np.int64)
        head_lo, head_hi = self._distinct.ranges(numbers)
        repeat_id = self._repeats_id.data[numbers]
        tail_data, tail_offsets = joined(tails)
        id_lengths = np.empty(len(slots), dtype=np.int64)
        _kernels.json_string_lengths(id_data, id_offsets, id_lengths)
        lengths = (len(NOTIFICATION_PREFIX) + id_lengths + head_hi - head_lo
                   + repeat_id * (len(SUBSCRIBER_KEY) + id_lengths)
                   + np.diff(tail_offsets)[events])  # fmt: skip
        ends = np.cumsum(lengths)
        prefix = np.frombuffer(NOTIFICATION_PREFIX, dtype=np.uint8)
        key = np.frombuffer(SUBSCRIBER_KEY.encode(), dtype=np.uint8)
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
                prefix, id_offsets[start:], id_data, key, repeat_id[start:stop],
                self._distinct.buffer, head_lo[start:stop], head_hi[start:stop],
                tail_offsets, tail_data, events[start:stop], offsets, out)  # fmt: skip
            columns.append(binary_column(offsets, out))
            start = stop
        return columns
