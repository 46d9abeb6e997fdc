"""SlotBytes: a byte string per slot, in one append-only buffer compacted in place."""

from __future__ import annotations

import pickle
import random

import numpy as np

from psmatch.core.slot_bytes import SlotBytes


def test_writes_are_read_back_by_slot_and_a_cleared_slot_holds_nothing() -> None:
    store = SlotBytes()
    store.put_many(np.array([2, 0]), [b"value 2", b"value 0"])
    assert store.get(0) == b"value 0" and store.get(2) == b"value 2"
    assert store.get(1) is None and store.get(9) is None
    store.clear_many(np.array([0]))
    store.put_many(np.array([2, 5]), [b"new value", b""])  # a replacement and an empty one
    store.check()
    assert [store.get(slot) for slot in range(7)] == [
        None, None, b"new value", None, None, b"", None]


def test_a_batch_is_written_at_once_and_gathered_back_to_back() -> None:
    store = SlotBytes()
    store.put_many(np.array([4, 1, 0]), ["sub-é4".encode(), b"s1", b""])
    offsets, data = store.gather(np.array([1, 4, 1, 0]))
    assert offsets.tolist() == [0, 2, 2 + len("sub-é4".encode()), 4 + 7, 4 + 7]
    assert data.tobytes() == b"s1" + "sub-é4".encode() + b"s1"
    lo, hi = store.ranges(np.array([4]))
    assert store.buffer[lo[0]:hi[0]].tobytes() == "sub-é4".encode()
    store.clear_many(np.array([4, 0]))
    store.check()
    assert [store.get(slot) for slot in range(5)] == [None, b"s1", None, None, None]
    offsets, data = store.gather(np.array([], np.int64))
    assert offsets.tolist() == [0] and len(data) == 0


def test_rewrites_append_and_the_dead_bytes_are_compacted_once_they_outweigh_the_live() -> None:
    store = SlotBytes()
    value = b"h" * 2000
    store.put_many(np.arange(1000), [value] * 1000)
    live = store._live
    used = []
    for round_ in range(4):  # each round rewrites every slot: as many dead bytes as live
        store.put_many(np.arange(1000), [b"%d" % round_ + value[1:]] * 1000)
        store.check()
        assert store._live == live and len(store._buffer) - live <= max(live, 1 << 20)
        used.append(len(store._buffer))
    assert used == [2 * live, live, 2 * live, live]  # compacted every other round
    assert store.get(999) == b"3" + value[1:]


def test_random_writes_agree_with_a_dictionary_and_survive_a_pickle() -> None:
    rng = random.Random(3)
    store = SlotBytes()
    expected: dict[int, bytes] = {}
    for round_ in range(20):
        for _ in range(rng.randrange(1, 200)):
            slot = rng.randrange(500)
            if rng.random() < 0.2:
                store.clear_many(np.array([slot]))
                expected.pop(slot, None)
            else:
                value = b"h%d.%d" % (slot, round_) * rng.randrange(1, 30)
                store.put_many(np.array([slot]), [value])
                expected[slot] = value
        if round_ % 3 == 1:
            slots = rng.sample(range(500), 50)
            values = [b"batch %d" % slot * rng.randrange(0, 3) for slot in slots]
            store.put_many(np.array(slots), values)
            expected.update(zip(slots, values, strict=True))
        if round_ % 5 == 4:
            store = pickle.loads(pickle.dumps(store))
        store.check()
        assert {s: store.get(s) for s in range(500) if store.get(s) is not None} == expected
