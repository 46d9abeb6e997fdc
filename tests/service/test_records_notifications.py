"""The notification record's writer: NotificationHeads stores each distinct head once by
matcher slot and joins them with the matches' ids and the events' tails into notification
values (the distinct heads' store itself: tests/core/test_slot_ids.py); one value alone
is written by the same writer; and the compiled writer refuses arguments its loops cannot
read, by name, never crashing."""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from psmatch.core.slot_bytes import joined
from psmatch.service.records import _notification_writer, notifications
from psmatch.service.records.notifications import NotificationHeads, notification_value


def ids_of(sub_ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The matches' ids as ``matcher.internal.ids_utf8`` gives them: offsets and UTF-8 data."""
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
    monkeypatch.setattr(notifications, "MAX_VALUE_BYTES", 85)
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


def test_one_value_is_what_a_join_writes_for_its_match() -> None:
    heads = NotificationHeads()
    heads.put_many(np.arange(2), [',"extra":{},', ',"subscriber":"x","extra":{"k":1},'])
    tail = b'"event_id":"e","event":{"a":1},"matched_at":"t","event_timestamp":7}'
    (column,) = heads.join(np.array([0, 1]), ids_of(["s\u00e9\n", "t"]), [tail],
                           np.array([0, 0]))  # fmt: skip
    assert column.to_pylist() == [
        notification_value("s\u00e9\n", ',"extra":{},', tail),
        notification_value("t", ',"subscriber":"x","extra":{"k":1},', tail)]
    assert json.loads(column[0].as_py())["subscriber"] == "s\u00e9\n"  # the id, by default


def writer_arguments(n: int = 2) -> list[np.ndarray]:
    """Valid arguments of ``join_notifications`` for ``n`` values of an empty id, head
    and tail each."""
    prefix = np.frombuffer(notifications.NOTIFICATION_PREFIX, dtype=np.uint8)
    key = np.frombuffer(notifications.SUBSCRIBER_KEY, dtype=np.uint8)
    rows = np.zeros(n, dtype=np.int64)
    size = len(prefix) + 2
    return [prefix, np.zeros(n + 1, np.int64), np.zeros(0, np.uint8), key,
            np.zeros(n, np.bool_), np.zeros(0, np.uint8), rows, rows.copy(),
            np.zeros(2, np.int64), np.zeros(0, np.uint8), rows.copy(),
            np.arange(0, n * size, size, dtype=np.int64), np.zeros(n * size, np.uint8)]


def test_the_writer_writes_valid_arguments() -> None:
    args = writer_arguments()
    _notification_writer.join_notifications(*args)
    assert bytes(args[-1]) == b'{"subscription_id":""' * 2


@pytest.mark.parametrize("position, bad, message", [
    (1, np.zeros(3, np.int32), "argument 'id_offsets' must be a 1-dimensional array of "
                               "8-byte signed integer"),
    (4, np.zeros(2, np.uint8), "argument 'repeat_id' must be a 1-dimensional array of "
                               "1-byte bool"),
    (2, np.zeros(4, np.uint8)[::2], "argument 'id_data' must be a C-contiguous array"),
    (12, np.zeros(46, np.uint8).reshape(2, 23), "argument 'out' must be a 1-dimensional"),
])  # fmt: skip
def test_the_writer_refuses_a_column_of_another_type_by_name(
    position: int, bad: np.ndarray, message: str,
) -> None:
    args = writer_arguments()
    args[position] = bad
    with pytest.raises(TypeError, match=r"join_notifications\(\): " + message):
        _notification_writer.join_notifications(*args)


def test_the_writer_refuses_a_read_only_output_a_non_array_and_a_wrong_count() -> None:
    args = writer_arguments()
    args[-1].flags.writeable = False
    with pytest.raises(TypeError, match="argument 'out' must be a writable C-contiguous"):
        _notification_writer.join_notifications(*args)
    with pytest.raises(TypeError, match="argument 'prefix'"):
        _notification_writer.join_notifications([1, 2], *writer_arguments()[1:])
    with pytest.raises(TypeError, match=r"takes 13 arguments \(12 given\)"):
        _notification_writer.join_notifications(*writer_arguments()[:-1])
    with pytest.raises(TypeError, match=r"json_string_lengths\(\) takes 3 arguments"):
        _notification_writer.json_string_lengths(np.zeros(1, np.uint8))


def test_the_writer_refuses_lengths_that_disagree() -> None:
    for position in (4, 7, 10):  # repeat_id, head_hi, tail_rows one short
        args = writer_arguments()
        args[position] = args[position][:1]
        with pytest.raises(ValueError, match=r"join_notifications\(\): .* differ in length"):
            _notification_writer.join_notifications(*args)
    args = writer_arguments()
    args[1] = args[1][:2]  # id_offsets: one row short
    with pytest.raises(ValueError, match="id_offsets or out_offsets is shorter"):
        _notification_writer.join_notifications(*args)
    with pytest.raises(ValueError, match=r"json_string_lengths\(\): offsets is not longer"):
        _notification_writer.json_string_lengths(np.zeros(0, np.uint8), np.zeros(2, np.int64),
                                                 np.zeros(2, np.int64))  # fmt: skip
