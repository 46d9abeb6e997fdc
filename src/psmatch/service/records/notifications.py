"""The notification record of the ``psmatch.notifications`` topic: its one owner, with the
store of the parts a worker writes it from and the writer itself.

Key = the subscription id; value = JSON ``{"subscription_id", "subscriber", "extra",
"event_id", "event", "matched_at", "event_timestamp"}``, written as
:data:`NOTIFICATION_PREFIX`, the subscription id as a JSON string, the subscription's
head and the event's tail:

* the head (:func:`notification_head`, computed once per subscription a worker indexes):
  ``,"subscriber":<who>,"extra":<extra as stored>,``, the subscriber left out when it is
  the subscription id (and the id holds no tenant); the writer then writes
  :data:`SUBSCRIBER_KEY` and the id again.
  So a head holds nothing of its subscription's own, and the subscriptions of one
  subscriber, or of none but their ids, with the same extra fields share it;
* the tail (:func:`notification_tail`, per event): ``"event_id":...,"event":<the bytes as
  the producer sent them>,"matched_at":...,"event_timestamp":<ms or null>}``.

The writer is compiled (``_notification_writer.c`` in this package, the extension
``psmatch.service.records._notification_writer``): it escapes each id as it copies it,
so a batch's values are written with no Python object per match. It writes them many at
once from the heads stored by slot (:meth:`NotificationHeads.join`), or one
(:func:`notification_value`). Decoder: :func:`parse_notification`.

:class:`NotificationHeads` stores each distinct head once, in a
:class:`psmatch.core.slot_ids.SlotIds` (its bytes and a hash table that finds it), at a
number of its own, with a count of the slots that hold it; a slot holds its head's
number (int32). With one subscriber, or each its own id, that is a few heads and four
bytes a slot, where a head per slot would hold its bytes at every slot; with a distinct
subscriber per subscription, other than its id, it costs what a head per slot would plus
the table's entry for each.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from json.encoder import encode_basestring as _encode_string
from typing import Any

import numpy as np
import pyarrow as pa

from psmatch.adapters.arrow import binary_column
from psmatch.core.columns import GrowableArray
from psmatch.core.slot_bytes import joined
from psmatch.core.slot_ids import SlotIds
from psmatch.service.records import _notification_writer
from psmatch.service.records.common import RecordError
from psmatch.service.records.subscriptions import SubscriptionRecord, dumps_extra, stored_fields
from psmatch.service.records.tenants import SCOPE_SEPARATOR

NOTIFICATION_PREFIX = b'{"subscription_id":'
"""How every notification value starts, before its subscription's id."""
SUBSCRIBER_KEY = b',"subscriber":'
"""How a head that names its subscriber starts, and what the writer writes before the id
again for a head that names none."""
MAX_VALUE_BYTES = (1 << 31) - 1
"""The most bytes of values one column of :meth:`NotificationHeads.join` holds (Arrow's
``binary`` type, which Spark's Kafka sink reads, has 32-bit offsets)."""
_NONE = -1
"""The head number of a slot that holds none."""
_PREFIX = np.frombuffer(NOTIFICATION_PREFIX, dtype=np.uint8)
_SUBSCRIBER_KEY = np.frombuffer(SUBSCRIBER_KEY, dtype=np.uint8)
_SUBSCRIBER_TEXT = SUBSCRIBER_KEY.decode()


def check_notification_key(sub_id: str) -> None:
    """Raise :class:`~psmatch.service.records.common.RecordError` unless ``sub_id`` can key
    a notification: valid Unicode (no lone surrogate), as every id the driver validated
    is. A worker checks the ids it loads, since a hand-edited Redis may hold any."""
    try:
        sub_id.encode()
    except UnicodeEncodeError:
        raise RecordError("invalid_unicode", f"the subscription id {sub_id!r} is not valid "
                          "Unicode: it cannot key a notification") from None  # fmt: skip


def notification_head(sub_id: str, record: SubscriptionRecord) -> str:
    """The head of ``sub_id``'s notifications: ``,"subscriber":...,"extra":...,``, only
    ``,"extra":...,`` when the subscriber is the id (``extra`` written as it is stored,
    :func:`psmatch.service.records.subscriptions.dumps_extra`).

    Cost O(size of the record): the string by the standard library's C encoder, ``extra``
    by ``dumps_extra``; a worker computes one per subscription it loads.
    """
    return _head(sub_id, record.subscriber, record.extra)


def load_stored_head(sub_id: str, text: str) -> tuple[str, str]:
    """The expression and the notification head of the stored subscription ``text`` of
    ``sub_id``, without its expression parsed or its normal form read: what a worker
    that reads many normal forms into columns at once
    (:func:`psmatch.service.records.normal_forms.load_normal_forms`) needs of the record. Cost: one
    JSON decode of the record and the head's encoding."""
    expr, subscriber, extra = stored_fields(text)
    if expr.__class__ is not str:
        raise RecordError("invalid_record", "a stored subscription's expression is a string")
    return expr, _head(sub_id, subscriber, extra)


def _head(sub_id: str, subscriber: str, extra: Mapping[str, Any]) -> str:
    # a scoped id (psmatch.service.records.tenants) is written without its tenant, so
    # a subscriber equal to it is named, not left for the writer to repeat the id
    default = subscriber == sub_id and SCOPE_SEPARATOR not in sub_id
    named = "" if default else _SUBSCRIBER_TEXT + _encode_string(subscriber)
    return f'{named},"extra":{dumps_extra(dict(extra))},'


def check_head(head: str) -> None:
    """Assert that ``head`` is a head :func:`notification_head` writes: the fields
    ``extra`` and, but for the default subscriber, ``subscriber``, between commas.
    ``AssertionError`` otherwise. Cost: one JSON decode of the head."""
    assert head.startswith(",") and head.endswith(","), head
    fields = json.loads("{" + head[1:-1] + "}")
    assert "extra" in fields and fields.keys() <= {"subscriber", "extra"}, head


def _repeats_id(head: str) -> bool:
    """Whether the writer writes the id again, as the subscriber, before ``head``: the
    head names none (:func:`notification_head`)."""
    return not head.startswith(_SUBSCRIBER_TEXT)


def notification_tail(
    ev_id: str, event_json: bytes, matched_at: str, event_timestamp_ms: int | None
) -> bytes:
    """The event's part of a notification: ``"event_id":...,"event":...}``. The event is
    embedded as the producer sent it (``event_json``, validated by
    :func:`psmatch.service.records.events.parse_event`)."""
    return b'"event_id":%s,"event":%s,"matched_at":"%s","event_timestamp":%s}' % (
        _encode_string(ev_id).encode(),
        event_json.strip(),
        matched_at.encode(),
        b"null" if event_timestamp_ms is None else b"%d" % event_timestamp_ms,
    )


def notification_value(sub_id: str, head: str, tail: bytes) -> bytes:
    """One notification's value, from the subscription's id, its head
    (:func:`notification_head`) and the event's tail (:func:`notification_tail`): what
    :meth:`NotificationHeads.join` writes for a match, by the same writer. Cost O(its
    bytes), plus a few numpy calls."""
    id_bytes, head_bytes = sub_id.encode(), head.encode()
    row = np.zeros(1, dtype=np.int64)
    parts = _Parts(np.array([0, len(id_bytes)], dtype=np.int64),
                   np.frombuffer(id_bytes, dtype=np.uint8), np.array([_repeats_id(head)]),
                   np.frombuffer(head_bytes, dtype=np.uint8), row,
                   np.array([len(head_bytes)], dtype=np.int64),
                   np.array([0, len(tail)], dtype=np.int64), np.frombuffer(tail, dtype=np.uint8),
                   row)  # fmt: skip
    return parts.write(0, 1, np.array([0, parts.lengths()[0]], dtype=np.int64)).tobytes()


@dataclass(frozen=True, slots=True)
class _Parts:
    """The parts of matches ``i``'s values: row ``i`` of the ids (a CSR column: int64
    offsets, UTF-8 data), written again after :data:`SUBSCRIBER_KEY` if
    ``repeat_id[i]``; ``head_data[head_lo[i]:head_hi[i]]``; row ``tail_rows[i]`` of the
    tails (a CSR column)."""

    id_offsets: np.ndarray
    id_data: np.ndarray
    repeat_id: np.ndarray
    head_data: np.ndarray
    head_lo: np.ndarray
    head_hi: np.ndarray
    tail_offsets: np.ndarray
    tail_data: np.ndarray
    tail_rows: np.ndarray

    def lengths(self) -> np.ndarray:
        """Each value's length in bytes (int64). Cost O(matches) in numpy, and a
        compiled pass over the ids' bytes."""
        id_lengths = np.empty(len(self.head_lo), dtype=np.int64)
        _notification_writer.json_string_lengths(self.id_data, self.id_offsets, id_lengths)
        return (len(NOTIFICATION_PREFIX) + id_lengths + self.head_hi - self.head_lo
                + self.repeat_id * (len(SUBSCRIBER_KEY) + id_lengths)
                + np.diff(self.tail_offsets)[self.tail_rows])  # fmt: skip

    def write(self, start: int, stop: int, offsets: np.ndarray) -> np.ndarray:
        """The bytes of values ``start .. stop - 1``, value ``i`` at ``offsets[i -
        start]`` (``offsets`` from 0, one longer than the values): written once each by
        the compiled writer, the ids escaped as JSON's encoder does."""
        out = np.empty(int(offsets[-1]), dtype=np.uint8)
        _notification_writer.join_notifications(
            _PREFIX, self.id_offsets[start:], self.id_data, _SUBSCRIBER_KEY,
            self.repeat_id[start:stop], self.head_data, self.head_lo[start:stop],
            self.head_hi[start:stop], self.tail_offsets, self.tail_data,
            self.tail_rows[start:stop], offsets, out)  # fmt: skip
        return out


@dataclass(frozen=True, slots=True)
class Notification:
    """A decoded notification (:func:`parse_notification`)."""

    subscription_id: str
    subscriber: str
    extra: dict[str, Any]
    event_id: str
    event: dict[str, Any]
    matched_at: str
    event_timestamp: int | None


def parse_notification(value: bytes) -> Notification:
    """Decode a notification's value."""
    return Notification(**json.loads(value))


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
            self._repeats_id.data[fresh] = [_repeats_id(h) for h in added]
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
        (:meth:`psmatch.core.slot_ids.SlotIds.check`), each number's count is the number
        of slots holding it, the numbers stored are those counted, and the free ones the
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
        """The notification value of each match ``i``: its subscription's id (row ``i``
        of ``ids``, the matches' ids as :meth:`psmatch.core.matcher.SlotPath.ids_utf8`
        gives them: int64 offsets and UTF-8 data), the head at ``slots[i]`` and
        ``tails[events[i]]``, in order, as ``binary`` columns of at most
        :data:`MAX_VALUE_BYTES` each (one but for enormous batches).

        Cost O(matches) in numpy for the offsets, then each value's bytes written once
        by the compiled writer: no column of the matches' heads or tails is built first.
        """
        id_offsets, id_data = ids
        numbers = self._number.data[slots].astype(np.int64)
        head_lo, head_hi = self._distinct.ranges(numbers)
        tail_data, tail_offsets = joined(tails)
        parts = _Parts(id_offsets, id_data, self._repeats_id.data[numbers],
                       self._distinct.buffer, head_lo, head_hi, tail_offsets, tail_data,
                       events)  # fmt: skip
        ends = np.cumsum(parts.lengths())
        columns = []
        start = 0
        while start < len(slots) or not columns:
            base = int(ends[start - 1]) if start else 0
            stop = max(start + 1, int(np.searchsorted(ends, base + MAX_VALUE_BYTES, "right")))
            stop = min(stop, len(slots))
            offsets = np.zeros(stop - start + 1, dtype=np.int64)
            offsets[1:] = ends[start:stop] - base
            columns.append(binary_column(offsets, parts.write(start, stop, offsets)))
            start = stop
        return columns
