"""SlotIds: string ids by slot and the slot of each id, in numpy columns."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest

from psmatch.core.slot_bytes import joined
from psmatch.core.slot_ids import SlotIds, hash_ranges


def test_ids_are_found_by_value_and_read_back_by_slot() -> None:
    ids = SlotIds()
    ids.put_many(np.array([0, 1, 5]), ["a", "é\U0001f600", ""])
    ids.check()
    assert ids.find(["", "a", "b", "é\U0001f600"]).tolist() == [5, 0, -1, 1]
    assert ids.get("a") == 0 and ids.get("A") == -1 and len(ids) == 3
    assert ids.ids_at(np.array([5, 1, 1])) == ["", "é\U0001f600", "é\U0001f600"]
    assert sorted(ids) == ["", "a", "é\U0001f600"]
    ids.clear_many(np.array([0]))
    ids.check()
    assert ids.get("a") == -1 and len(ids) == 2


def test_an_id_that_is_not_a_string_is_refused_before_anything_changes() -> None:
    ids = SlotIds()
    with pytest.raises(TypeError, match="a subscription id is a str, not int: 3"):
        ids.put_many(np.array([0, 1]), ["a", 3])  # type: ignore[list-item]
    ids.check()
    assert len(ids) == 0 and ids.get("a") == -1


def test_random_puts_and_clears_agree_with_a_dictionary_through_rebuilds_and_pickles() -> None:
    rng = random.Random(5)
    ids, expected, free, next_slot = SlotIds(), {}, [], 0
    for round_ in range(200):
        new = [i for i in dict.fromkeys(f"id-{rng.randrange(3000)}-é" for _ in range(
            rng.randrange(1, 300))) if i not in expected]  # fmt: skip
        slots = []
        for sub_id in new:
            slot = free.pop() if free else next_slot
            next_slot += slot == next_slot
            slots.append(slot)
            expected[sub_id] = slot
        ids.put_many(np.array(slots, dtype=np.int64), new)
        gone = rng.sample(sorted(expected), min(len(expected), rng.randrange(0, 280)))
        ids.clear_many(np.array([expected[sub_id] for sub_id in gone], dtype=np.int64))
        free.extend(expected.pop(sub_id) for sub_id in gone)
        if round_ % 50 == 49:
            ids = pickle.loads(pickle.dumps(ids, protocol=5))
        ids.check()
        asked = [*rng.sample(sorted(expected), min(20, len(expected))), "id-none", *gone[:5]]
        assert ids.find(asked).tolist() == [expected.get(sub_id, -1) for sub_id in asked]
    assert dict(zip(ids, ids.find(list(ids)).tolist(), strict=True)) == expected


def test_the_table_is_rebuilt_at_two_entries_per_id_and_used_at_most_seventy_percent() -> None:
    # a cost bound, counted: while ids are only added, the table (int32 entries) takes
    # at most 8 bytes per id held, and is never so full that a probe runs long
    ids = SlotIds()
    for first in range(0, 100_000, 1_000):
        held = first + 1_000
        ids.put_many(np.arange(first, held), [f"s{n}" for n in range(first, held)])
        ids.check()
        assert len(ids._table) <= max(16, 2 * held)
        assert held <= 0.7 * len(ids._table)
    assert ids.find(["s0", "s99999", "s100000"]).tolist() == [0, 99_999, -1]


def test_ids_whose_32_bit_hashes_are_equal_are_told_apart_by_their_bytes() -> None:
    colliding = ["sub-22107", "sub-212049"]  # found among 300,000 such ids
    hashes = hash_ranges(*joined([sub_id.encode() for sub_id in colliding]))
    assert hashes[0] == hashes[1]
    ids = SlotIds()
    ids.put_many(np.array([7]), colliding[:1])
    ids.check()
    assert ids.find(colliding).tolist() == [7, -1]
    ids.put_many(np.array([3]), colliding[1:])
    ids.check()
    assert ids.find(colliding).tolist() == [7, 3]
    ids.clear_many(np.array([7]))
    ids.check()
    assert ids.find(colliding).tolist() == [-1, 3]
