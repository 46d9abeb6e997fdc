"""NotificationHeads: keys and heads by matcher slot, in one byte buffer."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pyarrow as pa
import pytest

from streaming import heads as heads_module
from streaming.heads import NotificationHeads


def test_writes_are_read_back_by_slot_and_a_cleared_slot_holds_nothing() -> None:
    heads = NotificationHeads()
    heads.put(2, b"s2", b"head 2")
    heads.put(0, b"s0", b"head 0")
    assert heads.get(0) == (b"s0", b"head 0") and heads.get(2) == (b"s2", b"head 2")
    assert heads.get(1) is None and heads.get(9) is None
    heads.clear(0)
    heads.put(2, b"s2", b"new head")  # a replacement
    heads.put(5, b"s5", b"")
    heads.check()
    assert [heads.get(slot) for slot in range(7)] == [
        None, None, (b"s2", b"new head"), None, None, (b"s5", b""), None]


def test_keys_are_copied_by_slot_into_one_binary_column() -> None:
    heads = NotificationHeads()
    for slot in range(5):
        heads.put(slot, "sub-é%d".encode() % slot, b"head")
    keys = heads.keys(np.array([3, 0, 3, 4]))
    assert keys.type == pa.binary()
    assert keys.to_pylist() == ["sub-é3".encode(), "sub-é0".encode(), "sub-é3".encode(),
                                "sub-é4".encode()]
    assert heads.keys(np.array([], np.int64)).to_pylist() == []


def test_rewrites_append_and_the_dead_bytes_are_compacted_once_they_outweigh_the_live() -> None:
    heads = NotificationHeads()
    head = b"h" * 2000
    for slot in range(1000):
        heads.put(slot, b"s%d" % slot, head)
    heads.merge()
    live = heads._live
    used = []
    for round_ in range(4):  # each round rewrites every slot: as many dead bytes as live
        for slot in range(1000):
            heads.put(slot, b"s%d" % slot, b"%d" % round_ + head[1:])
        heads.merge()
        heads.check()
        assert heads._live == live and len(heads._data) - live <= max(live, 1 << 20)
        used.append(len(heads._data))
    assert used == [2 * live, live, 2 * live, live]  # compacted every other round
    assert heads.get(999) == (b"s999", b"3" + head[1:])


def test_random_writes_agree_with_a_dictionary_and_survive_a_pickle() -> None:
    rng = random.Random(3)
    heads = NotificationHeads()
    expected: dict[int, tuple[bytes, bytes]] = {}
    for round_ in range(20):
        for _ in range(rng.randrange(1, 200)):
            slot = rng.randrange(500)
            if rng.random() < 0.2:
                heads.clear(slot)
                expected.pop(slot, None)
            else:
                value = (b"s%d" % slot, b"h%d.%d" % (slot, round_) * rng.randrange(1, 30))
                heads.put(slot, *value)
                expected[slot] = value
        if round_ % 5 == 4:
            heads = pickle.loads(pickle.dumps(heads))  # writes not yet merged included
        heads.check()
        assert {s: heads.get(s) for s in range(500) if heads.get(s)} == expected


def expected_values(heads: NotificationHeads, slots: list[int], tails: list[bytes],
                    events: list[int]) -> list[bytes]:  # fmt: skip
    values = []
    for slot, event in zip(slots, events, strict=True):
        stored = heads.get(slot)
        assert stored is not None
        values.append(stored[1] + tails[event])
    return values


def test_join_puts_each_matchs_head_before_its_events_tail() -> None:
    rng = random.Random(8)
    heads = NotificationHeads()
    for slot in range(300):
        heads.put(slot, b"s%d" % slot, b"{head %d," % slot * rng.randrange(1, 4))
    heads.clear(7)  # a free slot: never matched
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
    monkeypatch.setattr(heads_module, "MAX_VALUE_BYTES", 25)
    heads = NotificationHeads()
    for slot in range(4):
        heads.put(slot, b"s%d" % slot, b"head-%d|" % slot)  # 7 bytes
    tails = [b"tail", b"longer tail"]  # 4 and 11 bytes
    slots, events = [0, 1, 2, 3, 0, 1, 2, 3], [0, 0, 0, 0, 1, 1, 1, 1]
    columns = heads.join(np.array(slots), tails, np.array(events))
    assert [len(c) for c in columns] == [2, 2, 1, 1, 1, 1]
    assert all(sum(map(len, c.to_pylist())) <= 25 for c in columns)
    joined = [v for c in columns for v in c.to_pylist()]
    assert joined == expected_values(heads, slots, tails, events)


def test_an_empty_store_joins_no_matches_into_one_empty_column() -> None:
    none = np.empty(0, dtype=np.int64)
    (column,) = NotificationHeads().join(none, [b"tail"], none)
    assert column.type == pa.binary() and len(column) == 0
