"""NotificationHeads: keys and heads by matcher slot, as Arrow columns."""

from __future__ import annotations

import pickle
import random

import pyarrow as pa

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
    keys, column = heads.columns()
    assert keys.to_pylist() == [None, None, b"s2", None, None, b"s5"]
    assert column.to_pylist() == [None, None, b"new head", None, None, b""]
    assert keys.type == column.type == pa.large_binary()


def test_a_read_without_writes_copies_nothing() -> None:
    heads = NotificationHeads()
    heads.put(0, b"s0", b"h")
    first = heads.columns()
    again = heads.columns()
    assert again[0] is first[0] and again[1] is first[1]


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
                value = (b"s%d" % slot, b"h%d.%d" % (slot, round_))
                heads.put(slot, *value)
                expected[slot] = value
        if round_ % 5 == 4:
            heads = pickle.loads(pickle.dumps(heads))  # writes not yet merged included
        assert {s: heads.get(s) for s in range(500) if heads.get(s)} == expected
