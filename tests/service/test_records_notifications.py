"""NotificationHeads: each distinct head stored once by matcher slot, joined with the
matches' ids and events' tails into notification values (the distinct heads' store
itself: tests/core/test_slot_ids.py)."""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from psmatch.core.slot_bytes import joined
from psmatch.service import heads as heads_module
from psmatch.service.heads import NotificationHeads
from psmatch.service.records import notification_value


def ids_of(sub_ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The matches' ids as ``Matcher.ids_utf8`` gives them: offsets and UTF-8 data."""
    data, offsets = joined([sub_id.encode() for sub_id in sub_ids])
    return offsets, data


def expected_values(heads: NotificationHeads, sub_ids: list[str], slots: list[int],
                    tails: list[bytes], events: list[int]) -> list[bytes]:  # fmt: skip
    values = []
    for sub_id, slot, event in zip(sub_ids, slots, events, strict=True):
        head = heads.get(slot)
        assert head is not None
        values.append(notification_value(sub_id, head, tails[event]))
    return values


def test_join_writes_each_matchs_id_head_and_events_tail() -> None:
    rng = random.Random(8)
    heads = NotificationHeads()
    for slot in range(300):
        heads.put(slot, f',"h":{slot % 7},')
        heads.check()
    heads.clear_many(np.array([7]))  # a free slot: never matched
    heads.check()
    tails = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40))) for _ in range(50)]
    events = sorted(rng.randrange(50) for _ in range(2000))
    slots = [rng.choice([s for s in range(300) if s != 7]) for _ in events]
    sub_ids = [f"s{slot}" for slot in slots]
    (column,) = heads.join(np.array(slots), ids_of(sub_ids), tails, np.array(events))
    assert column.type == pa.binary()
    assert column.to_pylist() == expected_values(heads, sub_ids, slots, tails, events)
    (empty,) = heads.join(np.array([], np.int64), ids_of([]), tails, np.array([], np.int64))
    assert len(empty) == 0


@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",))), min_size=1, max_size=20))
def test_join_escapes_each_id_as_jsons_encoder_does(sub_ids: list[str]) -> None:
    """Any id (quotes, backslashes, every control character, any Unicode) is written
    as ``json`` writes it, so the value decodes back to it; a head that names no
    subscriber has the id again as its subscriber."""
    heads = NotificationHeads()
    named = [i % 2 == 0 for i in range(len(sub_ids))]
    heads.put_many(np.arange(len(sub_ids)), [',"subscriber":"x","extra":{},' if n
                                             else ',"extra":{},' for n in named])  # fmt: skip
    heads.check()
    slots = list(range(len(sub_ids)))
    events = [0] * len(sub_ids)
    tail = b'"event_id":"e","event":{},"matched_at":"t","event_timestamp":null}'
    (column,) = heads.join(np.array(slots), ids_of(sub_ids), [tail], np.array(events))
    values = column.to_pylist()
    assert values == expected_values(heads, sub_ids, slots, [tail], events)
    decoded = [json.loads(v) for v in values]
    assert [d["subscription_id"] for d in decoded] == sub_ids
    assert [d["subscriber"] for d in decoded] == [
        "x" if n else sub_id for n, sub_id in zip(named, sub_ids, strict=True)]


def test_each_distinct_head_is_stored_once_and_dropped_with_its_last_slot() -> None:
    heads = NotificationHeads()
    heads.put_many(np.arange(1000), [f",{i % 3}," for i in range(1000)])
    heads.check()
    assert heads.distinct() == 3
    heads.put_many(np.array([5, 6]), [",new,", ",new,"])  # replaces what they held
    heads.check()
    assert heads.distinct() == 4 and heads.get(5) == heads.get(6) == ",new,"
    heads.clear_many(np.array([5, 6]))
    heads.check()
    assert heads.distinct() == 3 and heads.get(5) is None
    heads.clear_many(np.flatnonzero(np.arange(1000) % 3 == 1))
    heads.check()
    assert heads.distinct() == 2 and heads.get(1) is None and heads.get(2) == ",2,"
    heads.put(1, ",again,")  # takes a freed number
    heads.check()
    assert heads.distinct() == 3 and heads.get(1) == ",again,"


def test_join_splits_values_past_the_binary_columns_limit(monkeypatch: pytest.MonkeyPatch,
                                                           ) -> None:  # fmt: skip
    monkeypatch.setattr(heads_module, "MAX_VALUE_BYTES", 85)
    heads = NotificationHeads()
    for slot in range(4):
        heads.put(slot, f',"subscriber":{slot}|')
    sub_ids = ["s"] * 8  # with the prefix and the head, 38 bytes
    tails = [b"tail", b"longer tail"]  # 4 and 11 bytes
    slots, events = [0, 1, 2, 3, 0, 1, 2, 3], [0, 0, 0, 0, 1, 1, 1, 1]
    columns = heads.join(np.array(slots), ids_of(sub_ids), tails, np.array(events))
    assert [len(c) for c in columns] == [2, 2, 1, 1, 1, 1]  # values of 42 and 49 bytes
    assert all(sum(map(len, c.to_pylist())) <= 85 for c in columns)
    values = [v for c in columns for v in c.to_pylist()]
    assert values == expected_values(heads, sub_ids, slots, tails, events)


def test_an_empty_store_joins_no_matches_into_one_empty_column() -> None:
    none = np.empty(0, dtype=np.int64)
    (column,) = NotificationHeads().join(none, ids_of([]), [b"tail"], none)
    assert column.type == pa.binary() and len(column) == 0
