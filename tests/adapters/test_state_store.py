"""The Redis state store against a real redis-server: versions, replay, retention, AOF."""

from __future__ import annotations

import uuid

import pytest
import redis
from redis._parsers import _HiredisParser

from psmatch.adapters.state import ChangeLogGapError, SourceChange, StateError, StateStore
from psmatch.devservers.services import LocalServices
from psmatch.service.records.subscriptions import (
    dumps_record,
    parse_subscription_record,
    subscription_value,
)

pytestmark = pytest.mark.integration


def put(offset: int, sub_id: str, expr: str = "a = 1", partition: int = 0) -> SourceChange:
    return SourceChange(f"subs:{partition}", offset, sub_id, dumps_record(expr, sub_id, {}))


def delete(offset: int, sub_id: str, partition: int = 0) -> SourceChange:
    return SourceChange(f"subs:{partition}", offset, sub_id, None)


def test_put_replace_delete_bump_the_version(store: StateStore) -> None:
    assert store.version() == 0
    r = store.apply([put(0, "s1"), put(1, "s2"), put(2, "s1", "a = 2")])
    assert (r.version, r.applied, r.skipped) == (3, 3, 0)
    assert store.count() == 2
    assert '"a = 2"' in (store.get("s1") or "")
    r = store.apply([delete(3, "s1"), delete(4, "nope")])
    assert (r.version, r.applied, r.skipped) == (4, 1, 1)
    assert store.get("s1") is None
    assert store.offsets() == {"subs:0": 4}
    changes = store.changes(0, 4)
    assert [(c.version, c.op, c.sub_id) for c in changes] == [
        (1, "put", "s1"), (2, "put", "s2"), (3, "put", "s1"), (4, "del", "s1"),
    ]  # fmt: skip
    assert changes[2].record is not None and "a = 2" in changes[2].record
    assert store.changes(2, 3)[0].sub_id == "s1"
    assert store.changes(4, 4) == []


def test_the_log_carries_a_puts_normal_form_beside_its_record(store: StateStore) -> None:
    """The driver parsed each subscription once; the workers read its normal form from
    the log. A put without one (its normal form was too large) is logged without it."""
    change = parse_subscription_record(b"s1", subscription_value("a < 3 and b = 'x'", "bob", {}))
    assert change.stored is not None and change.normal_form is not None
    store.apply([SourceChange("subs:0", 0, "s1", change.stored, change.normal_form),
                 put(1, "s2"), delete(2, "s1")])  # fmt: skip
    first, second, third = store.changes(0, 3)
    assert (first.record, first.normal_form) == (change.stored, change.normal_form)
    assert second.record is not None and second.normal_form is None
    assert (third.op, third.record, third.normal_form) == ("del", None, None)
    assert store.get("s2") == second.record  # the hash holds the record alone


def test_replaying_a_batch_changes_nothing(store: StateStore) -> None:
    batch = [put(0, "s1"), put(1, "s2"), delete(2, "s1"), put(0, "s3", partition=1)]
    first = store.apply(batch)
    snapshot = store.snapshot()
    again = store.apply(batch)
    assert again.version == first.version == 4
    assert (again.applied, again.skipped) == (0, 4)
    assert store.snapshot() == snapshot
    # a replay that overlaps the next batch applies only the new records
    r = store.apply([delete(2, "s1"), put(3, "s4")])
    assert (r.version, r.applied, r.skipped) == (5, 1, 1)


def test_each_partition_remembers_its_last_applied_offset_exactly(store: StateStore) -> None:
    """Within one call, a record at or below its partition's last applied offset is
    skipped, and the offsets are kept exactly (the script reads and writes each
    partition's once)."""
    big = 10**15 + 7
    r = store.apply([put(big, "s1"), put(5, "s2"), put(big, "s3"), put(big + 1, "s4"),
                     put(0, "s5", partition=1)])  # fmt: skip
    assert (r.applied, r.skipped) == (3, 2)
    assert store.offsets() == {"subs:0": big + 1, "subs:1": 0}
    assert sorted(store.snapshot()[1]) == ["s1", "s4", "s5"]


def test_a_scan_gives_every_subscription_chunk_by_chunk(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis's COUNT is a hint (a small hash comes whole); past its compact encoding
    (128 entries) a chunk holds about that many."""
    store.retention = 10_000
    store.apply([put(i, f"s{i}", f"a = {i}") for i in range(3000)]
                + [delete(3000 + i, f"s{i}") for i in range(0, 3000, 3)])  # fmt: skip
    chunks: list[int] = []
    hscan = store.client.hscan

    def counted(*args: object, **kwargs: object) -> tuple[int, dict[bytes, bytes]]:
        cursor, found = hscan(*args, **kwargs)
        chunks.append(len(found))
        return cursor, found

    monkeypatch.setattr(store.client, "hscan", counted)
    assert dict(store.scan(50)) == store.snapshot()[1]
    assert len(chunks) > 10 and max(chunks) < 50 * 4


def test_held_says_which_ids_the_state_holds_in_order(store: StateStore) -> None:
    store.retention = 100_000
    store.apply([put(i, f"s{i}") for i in range(25_000)] + [delete(25_000, "s7")])
    asked = ["s24999", "nope", "s7", "s0", *(f"s{i}" for i in range(100, 20_100))]
    assert store.held(asked) == ["s24999", "s0", *(f"s{i}" for i in range(100, 20_100))]
    assert store.held([]) == []


def test_big_batches_are_applied_in_chunks(store: StateStore) -> None:
    store.retention = 100_000
    n = StateStore.APPLY_CHUNK * 2 + 7
    r = store.apply([put(i, f"s{i}") for i in range(n)])
    assert r.version == n and store.count() == n
    assert len(store.changes(0, n)) == n


def test_a_trimmed_log_reports_a_gap(store: StateStore) -> None:
    for start in range(0, 120, 30):  # four micro-batches; the retention is 50
        store.apply([put(i, f"s{i % 7}") for i in range(start, start + 30)])
    assert store.version() == 120
    assert len(store.changes(70, 120)) == 50
    with pytest.raises(ChangeLogGapError):
        store.changes(10, 120)
    version, subs = store.snapshot()
    assert version == 120 and sorted(subs) == [f"s{i}" for i in range(7)]


def test_the_log_keeps_every_change_of_the_latest_apply_past_the_retention(
    store: StateStore,
) -> None:
    """A micro-batch of more changes than the retention (50) stays in the log whole, so
    the workers catch up to it; the next apply trims the log back to the retention."""
    store.apply([put(i, f"s{i}") for i in range(10)])
    store.apply([put(i, f"s{i % 7}") for i in range(10, 130)])  # in one batch: 120 changes
    assert [c.version for c in store.changes(10, 130)] == list(range(11, 131))
    with pytest.raises(ChangeLogGapError):
        store.changes(9, 130)
    store.apply([put(130, "t")])
    assert len(store.changes(81, 131)) == 50
    with pytest.raises(ChangeLogGapError):
        store.changes(80, 131)


def test_the_log_is_read_a_chunk_at_a_time_and_a_trim_meanwhile_is_a_gap(
    store: StateStore,
) -> None:
    store.apply([put(i, f"s{i % 5}") for i in range(40)])
    chunks = store.change_chunks(3, 40, 7)
    assert [len(chunk) for chunk in chunks] == [7, 7, 7, 7, 7, 2]
    assert [c.version for c in store.changes(3, 40)] == list(range(4, 41))
    chunks = store.change_chunks(0, 40, 7)
    assert [c.version for c in next(chunks)] == list(range(1, 8))
    store.apply([put(40 + i, "late") for i in range(60)])  # trims 1..49 (retention 50)
    with pytest.raises(ChangeLogGapError, match="after version 7 up to 40"):
        next(chunks)


def test_the_log_is_read_by_column_and_its_texts_stay_bytes(store: StateStore) -> None:
    """A run holds the changes' ids, their stored texts and normal forms as Redis holds
    them (bytes; ``None`` for a delete and for a put logged without a form), the same
    changes :meth:`StateStore.changes` gives one object each."""
    store.apply([put(0, "s0"), SourceChange("subs:0", 1, "s1", dumps_record("b = 2", "x", {}),
                                            '[[["b",0,[2,true,2,true]]]]'),
                 SourceChange("subs:0", 2, "s0", None), put(3, "s2")])  # fmt: skip
    runs = list(store.change_runs(0, 4, 3))
    assert [(run.first, run.last, len(run)) for run in runs] == [(1, 3, 3), (4, 4, 1)]
    assert runs[0].ids == ["s0", "s1", "s0"]
    assert runs[0].records == [dumps_record("a = 1", "s0", {}).encode(),
                               dumps_record("b = 2", "x", {}).encode(), None]  # fmt: skip
    assert runs[0].forms == [None, b'[[["b",0,[2,true,2,true]]]]', None]
    assert [c for run in runs for c in run.changes()] == store.changes(0, 4)
    assert [c.op for c in store.changes(0, 4)] == ["put", "put", "del", "put"]
    # an entry whose fields come in another order (written by hand) is read by name
    store.client.xadd(store.k_log, {"nf": "[]", "rec": "{}", "id": "s3", "op": "put"}, id="5-0")
    store.client.xadd(store.k_log, {"id": "s2", "op": "del"}, id="6-0")
    [run] = store.change_runs(3, 6, 10)
    assert (run.ids, run.records, run.forms) == (["s2", "s3", "s2"],
                                                 [dumps_record("a = 1", "s2", {}).encode(),
                                                  b"{}", None], [None, b"[]", None])  # fmt: skip


def test_replies_are_parsed_in_c_by_hiredis(store: StateStore) -> None:
    """A worker catching up reads the change log whole: redis-py's reply parser in C
    (hiredis, a dependency it picks up) read 100,000 changes in 0.7-1.1 s of CPU, its
    Python one in 2.5-3.3 s."""
    store.apply([put(0, "s0")])
    assert [c.sub_id for c in store.changes(0, 1)] == ["s0"]
    connection = store.client.connection_pool.get_connection()
    try:
        assert isinstance(connection._parser, _HiredisParser)
    finally:
        store.client.connection_pool.release(connection)


def test_rebuild_replaces_everything_and_breaks_the_log(store: StateStore) -> None:
    store.apply([put(0, "old"), put(1, "gone")])
    version = store.rebuild({"new": dumps_record("b > 2", "x", {})}, {"subs:0": 9})
    assert version == 3
    assert store.snapshot() == (3, {"new": dumps_record("b > 2", "x", {})})
    assert store.offsets() == {"subs:0": 9}
    with pytest.raises(ChangeLogGapError):
        store.changes(2, 3)
    assert store.apply([put(9, "skipped"), put(10, "next")]).version == 4


def test_state_survives_a_redis_restart(services: LocalServices, store: StateStore) -> None:
    store.apply([put(0, "s1"), put(1, "s2", "b < 3"), delete(2, "s1")])
    before = store.snapshot()
    services.redis.restart()
    after = StateStore.from_url(services.redis.url, store.prefix, store.retention)
    assert after.snapshot() == before
    assert [c.sub_id for c in after.changes(0, 3)] == ["s1", "s2", "s1"]
    assert after.offsets() == {"subs:0": 2}


def test_the_store_reads_bytes_whatever_the_url_asks(services: LocalServices) -> None:
    """A URL asking redis-py to decode replies gets a store that still decodes them
    itself, and a client made to decode them is refused with the reason."""
    prefix = f"test-{uuid.uuid4().hex[:10]}:"
    store = StateStore.from_url(services.redis.url + "?decode_responses=true", prefix)
    try:
        store.apply([put(0, "é-1", "a = 'ü'")])
        assert store.get("é-1") is not None and "ü" in store.get("é-1")
        [change] = store.changes(0, store.version())
        assert (change.op, change.sub_id) == ("put", "é-1") and "ü" in change.record
        with pytest.raises(StateError, match="without decode_responses"):
            StateStore(redis.Redis.from_url(services.redis.url, decode_responses=True))
    finally:
        store.clear()
