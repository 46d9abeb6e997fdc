"""NotificationHeads: heads by matcher slot, joined with events' tails into notification
values (the store itself: tests/index/core/test_slot_bytes.py)."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from streaming import heads as heads_module
from streaming.heads import NotificationHeads


def expected_values(heads: NotificationHeads, slots: list[int], tails: list[bytes],
                    events: list[int]) -> list[bytes]:  # fmt: skip
    values = []
    for slot, event in zip(slots, events, strict=True):
        head = heads.get(slot)
        assert head is not None
        values.append(head + tails[event])
    return values


def test_join_puts_each_matchs_head_before_its_events_tail() -> None:
    rng = random.Random(8)
    heads = NotificationHeads()
    for slot in range(300):
        heads.put(slot, b"{head %d," % slot * rng.randrange(1, 4))
    heads.clear_many(np.array([7]))  # a free slot: never matched
    tails = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40))) for _ in range(50)]
    events = sorted(rng.randrange(50) for _ in range(2000))
    slots = [rng.choice([s for s in range(300) if s != 7]) for _ in events]
    (column,) = heads.join(np.array(slots), tails, np.array(events))
    assert column.type == pa.binary()
    assert column.to_pylist() == expected_values(heads, slots, tails, events)
    (empty,) = heads.join(np.array([], np.int64), tails, np.array([], np.int64))
    assert len(empty) == 0


def test_join_splits_values_past_the_binary_columns_limit(monkeypatch: pytest.MonkeyPatch,
                                                           ) -> None:  # fmt: skip
    monkeypatch.setattr(heads_module, "MAX_VALUE_BYTES", 65)
    heads = NotificationHeads()
    for slot in range(4):
        heads.put(slot, b"head-%d|" % slot)  # 26 bytes with the prefix
    tails = [b"tail", b"longer tail"]  # 4 and 11 bytes
    slots, events = [0, 1, 2, 3, 0, 1, 2, 3], [0, 0, 0, 0, 1, 1, 1, 1]
    columns = heads.join(np.array(slots), tails, np.array(events))
    assert [len(c) for c in columns] == [2, 2, 1, 1, 1, 1]  # values of 30 and 37 bytes
    assert all(sum(map(len, c.to_pylist())) <= 65 for c in columns)
    joined = [v for c in columns for v in c.to_pylist()]
    assert joined == expected_values(heads, slots, tails, events)


def test_an_empty_store_joins_no_matches_into_one_empty_column() -> None:
    none = np.empty(0, dtype=np.int64)
    (column,) = NotificationHeads().join(none, [b"tail"], none)
    assert column.type == pa.binary() and len(column) == 0
