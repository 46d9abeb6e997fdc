"""The subscription ids of a matcher by slot, and the slot of each id, in numpy columns
(also how a worker keeps each distinct notification head once:
:mod:`psmatch.service.records.notifications`).

Owns :class:`SlotIds`: the ids' UTF-8 in a :class:`psmatch.core.slot_bytes.SlotBytes`, a
32-bit hash per slot (the high half of the 64-bit FNV-1a), and an open-addressing hash
table of slots (linear probing), searched and updated by compiled loops a batch of ids
at a time.

Why not a ``dict`` and a ``list``: a ``str`` and an ``int`` object per id, the dict's
table and the list take about three times these columns, which per id hold at most 8
bytes of table while ids are only added, 4 of hash, 8 of start, 4 of length, and the
id's own bytes. The table has any number of entries, rebuilt at two per id held (not a
power of two rebuilt at four), and the hash is 32 bits (not 64): less memory for
slightly slower probes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from psmatch.core import _kernels
from psmatch.core.columns import GrowableArray
from psmatch.core.slot_bytes import NONE, SlotBytes, joined

_EMPTY, _DELETED = -1, -2
"""Table entries that hold no slot: never used, and used by a removed id (a probe goes
on past it)."""
_MAX_LOAD = 0.7
"""The table is rebuilt when used and deleted entries pass this share of it."""
_REBUILT_LOAD = 0.5
"""The share of a rebuilt table its ids use (8 bytes of table per id). A probe for an id
not held then reads about 2.5 entries (Knuth's linear-probing estimate ``(1 + 1 / (1 -
load) ** 2) / 2``), and about 6 just before the next rebuild."""
_ENCODING = ("utf-8", "surrogatepass")
"""How an id is stored: any ``str`` round-trips, lone surrogates included."""


class SlotIds:
    """String ids by slot, and the slot of each id."""

    __slots__ = ("_bytes", "_count", "_deleted", "_hash", "_table")

    def __init__(self) -> None:
        self._bytes = SlotBytes()
        self._hash = GrowableArray(np.uint32)  # of the id at each slot
        self._table = np.full(16, _EMPTY, dtype=np.int32)
        self._count = 0
        self._deleted = 0

    def __len__(self) -> int:
        return self._count

    def find(self, ids: Sequence[str]) -> np.ndarray:
        """The slot of each of ``ids``, -1 for one not held: int64. Cost O(len(ids) +
        their bytes), one compiled probe each (the table is at most 70 % used)."""
        data, offsets = joined(_encode(ids))
        buffer, start, length = self._bytes.columns()
        return _find(self._table, self._hash.data, buffer, start, length, data, offsets,
                     hash_ranges(data, offsets))  # fmt: skip

    def get(self, sub_id: str) -> int:
        """The slot of ``sub_id``, -1 if it is not held. Cost O(1) (:meth:`find` of one)."""
        return int(self.find([sub_id])[0])

    def put_many(self, slots: np.ndarray, ids: Sequence[str]) -> None:
        """Hold each of ``ids`` at its slot of ``slots``: the ids distinct and not held,
        the slots free. Cost O(len(ids) + their bytes), plus a rebuild of the table
        (O(ids held)) when :data:`_MAX_LOAD` of it is used."""
        slots = np.asarray(slots, dtype=np.int64)
        data, offsets = joined(_encode(ids))
        self._bytes.put_joined(slots, data, offsets)
        self._hash.grow_to(int(slots.max(initial=-1)) + 1)
        self._hash.data[slots] = hash_ranges(data, offsets)
        self._count += len(slots)
        if (self._count + self._deleted) > _MAX_LOAD * len(self._table):
            self._rebuild()
        else:
            _insert(self._table, self._hash.data, slots)

    def clear_many(self, slots: np.ndarray) -> None:
        """Forget the ids at ``slots`` (distinct, each holding one). Cost
        O(len(slots)), one compiled probe each."""
        slots = np.asarray(slots, dtype=np.int64)
        _remove(self._table, self._hash.data, slots)
        self._bytes.clear_many(slots)
        self._count -= len(slots)
        self._deleted += len(slots)

    def _rebuild(self) -> None:
        """A table of two entries per id held (at least 16), holding each once.
        O(ids)."""
        size = max(16, int(self._count / _REBUILT_LOAD))
        self._table = np.full(size, _EMPTY, dtype=np.int32)
        self._deleted = 0
        _insert(self._table, self._hash.data, self.held_slots())

    def held_slots(self) -> np.ndarray:
        """The slots holding an id, ascending: int64. O(slots), vectorised."""
        _, start, _ = self._bytes.columns()
        return np.flatnonzero(start != NONE)

    def utf8(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ids at ``slots`` (each must hold one) as stored, back to back: int64
        offsets (``len(slots) + 1``, from 0) and uint8 data. Cost O(len(slots) + their
        bytes), one compiled copy. The bytes are UTF-8 but for lone surrogates (kept as
        ``surrogatepass`` writes them), which no id decoded from UTF-8 holds."""
        return self._bytes.gather(slots)

    def ranges(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where the bytes of the id at each of ``slots`` (each must hold one) lie in
        :attr:`buffer`: int64 ``(lo, hi)``, for a compiled reader that copies them
        itself. Cost O(len(slots)), vectorised."""
        return self._bytes.ranges(slots)

    @property
    def buffer(self) -> np.ndarray:
        """The bytes of every id held (:meth:`ranges` says where each lies)."""
        return self._bytes.buffer

    def ids_at(self, slots: np.ndarray) -> list[str]:
        """The id at each of ``slots`` (each must hold one). Cost O(len(slots) + their
        bytes): one compiled gather, then a ``str`` per slot."""
        offsets, data = self._bytes.gather(slots)
        raw = data.tobytes()
        return [raw[a:b].decode(*_ENCODING)
                for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)]

    def __iter__(self) -> Iterator[str]:
        """The ids held, by slot (a list taken now: O(ids))."""
        return iter(self.ids_at(self.held_slots()))

    def check(self) -> None:
        """Assert the invariants: the bytes' own, each held slot's hash is its id's,
        the table holds each held slot once and no other, the counts are right, and the
        table is at most half full. O(ids)."""
        self._bytes.check()
        held = self.held_slots()
        assert len(held) == self._count, (len(held), self._count)
        offsets, data = self._bytes.gather(held)
        assert (self._hash.data[held] == hash_ranges(data, offsets)).all(), "a stale hash"
        in_table = np.sort(self._table[self._table >= 0]).astype(np.int64)
        assert np.array_equal(in_table, held), "the table does not hold the held slots"
        assert int((self._table == _DELETED).sum()) == self._deleted
        assert self._count + self._deleted <= _MAX_LOAD * len(self._table)
        found = _find(self._table, self._hash.data, *self._bytes.columns(), data, offsets,
                      self._hash.data[held])  # fmt: skip
        assert np.array_equal(found, held), "an id its probe does not find"


def _encode(ids: Sequence[str]) -> list[bytes]:
    """The ids' UTF-8; ``TypeError`` for an id that is not a ``str``."""
    try:
        return [sub_id.encode(*_ENCODING) for sub_id in ids]
    except AttributeError:
        bad = next(sub_id for sub_id in ids if not isinstance(sub_id, str))
        raise TypeError(f"a subscription id is a str, not {type(bad).__name__}: {bad!r}"
                        ) from None  # fmt: skip


def hash_ranges(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The hash of each ``data[offsets[i]:offsets[i + 1]]``: the high half of its 64-bit
    FNV-1a (a probe compares an id's bytes only when the hashes are equal, one time in
    2**32 for another id)."""
    out = np.empty(len(offsets) - 1, dtype=np.uint32)
    _kernels.hash_ranges(data, offsets, out)
    return out


def _find(table: np.ndarray, slot_hash: np.ndarray, buffer: np.ndarray, start: np.ndarray,
          length: np.ndarray, data: np.ndarray, offsets: np.ndarray, hashes: np.ndarray
          ) -> np.ndarray:  # fmt: skip
    """The slot whose hash and bytes equal each query's (``data[offsets[i]:offsets[i +
    1]]``, hash ``hashes[i]``), -1 if none: linear probing from the hash, past deleted
    entries, to the first empty one."""
    out = np.empty(len(hashes), dtype=np.int64)
    _kernels.find_slots(table, slot_hash, buffer, start, length, data, offsets, hashes, out,
                        _EMPTY)  # fmt: skip
    return out


def _insert(table: np.ndarray, slot_hash: np.ndarray, slots: np.ndarray) -> None:
    """File each of ``slots`` (not yet in the table) at the first empty entry of its
    hash's probe sequence (deleted entries stay deleted until a rebuild, so that they
    are counted exactly)."""
    _kernels.insert_slots(table, slot_hash, slots, _EMPTY)


def _remove(table: np.ndarray, slot_hash: np.ndarray, slots: np.ndarray) -> None:
    """Mark the entry of each of ``slots`` (each in the table) deleted."""
    _kernels.remove_slots(table, slot_hash, slots, _DELETED)
