"""A worker's index built in bulk from the change log (:func:`psmatch.service.index_cache
.sync_index`: the log read by column, :meth:`psmatch.adapters.state.StateStore.change_runs`,
each run filed as one chunk of columns) is the index that applying the same changes one
at a time gives: the same subscriptions and notification heads, the same matches, the
bad stored records left out the same way, each id's last change winning, deletes, and a
shard's subscriptions only; ``check()`` after each build. Against a real Redis, with
random changes (hypothesis)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psmatch import make_matcher
from psmatch.adapters.state import Change, SourceChange, StateStore
from psmatch.devservers.services import LocalServices
from psmatch.service import index_cache, worker_index
from psmatch.service.records.notifications import notification_head
from psmatch.service.records.subscriptions import (
    dumps_record,
    load_stored,
    parse_subscription_record,
    subscription_value,
)
from psmatch.service.shards import Shard
from psmatch.service.task_contract import WorkerSettings

EXPRESSIONS = ["a = 1", "a >= 2 and b = 'x'", "a < 3 or b in ('y', 'z')", "b != 'x'",
               "a between 1 and 4 and not b = 'y'", "c = true", "a > 2.5", "b like '%x'",
               "a in (1, 3, 5) and c = false"]  # fmt: skip
EVENTS = [{"a": a, "b": b, "c": c} for a in (0, 1, 2, 3, 4, 5) for b in ("x", "y", "z", "wx")
          for c in (True, False)]  # fmt: skip
BAD = {
    "record": "{not json",
    "expression": dumps_record("a <", "who", {}),
    "shape": "[1]",
}
"""Stored texts no worker can index (only a hand-edited Redis holds them)."""
MALFORMED_FORM = '[[["a",0,["1",true,1,true]]]]'

ids = st.sampled_from([f"s{i}" for i in range(12)])
change = st.one_of(
    st.tuples(st.just("logged"), ids, st.sampled_from(EXPRESSIONS)),  # as the job logs it
    st.tuples(st.just("parsed"), ids, st.sampled_from(EXPRESSIONS)),  # no normal form
    st.tuples(st.just("bad"), ids, st.sampled_from(sorted(BAD))),
    st.tuples(st.just("malformed form"), ids, st.sampled_from(EXPRESSIONS)),
    st.tuples(st.just("delete"), ids, st.just("")),
)


def source(offset: int, kind: str, sub_id: str, what: str) -> SourceChange:
    """The change log entry of a generated change."""
    if kind == "logged":
        logged = parse_subscription_record(sub_id.encode(),
                                           subscription_value(what, f"u{sub_id}", {"n": 1}))
        return SourceChange("subs:0", offset, sub_id, logged.stored, logged.normal_form)
    if kind == "parsed":
        return SourceChange("subs:0", offset, sub_id, dumps_record(what, sub_id, {}))
    if kind == "bad":
        return SourceChange("subs:0", offset, sub_id, BAD[what])
    if kind == "malformed form":
        return SourceChange("subs:0", offset, sub_id, dumps_record(what, "who", {}),
                            MALFORMED_FORM)
    return SourceChange("subs:0", offset, sub_id, None)


def one_by_one(changes: list[Change], shard: Shard) -> dict[str, tuple[str, str]]:
    """The subscriptions (id -> expression, notification head) that applying ``changes``
    one at a time leaves: each stored text decoded alone (its normal form loaded when
    logged), one that cannot be is left out and its previous version with it."""
    held: dict[str, tuple[str, str]] = {}
    for c in changes:
        if not shard.holds(c.sub_id):
            continue
        held.pop(c.sub_id, None)
        if c.record is None:
            continue
        try:
            record = load_stored(c.record, c.normal_form)
        except Exception:
            continue
        held[c.sub_id] = (record.expr, notification_head(c.sub_id, record))
    return held


@pytest.fixture(scope="module")
def redis_url(services: LocalServices) -> str:
    return services.redis.url


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Runs of 5 changes: a build of a few dozen changes spans several."""
    monkeypatch.setattr(worker_index, "LOAD_CHUNK", 5)
    monkeypatch.setattr(index_cache, "LOAD_CHUNK", 5)
    yield
    index_cache.INDEXES.clear()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(st.lists(change, min_size=1, max_size=40), st.sampled_from([1, 2]))
def test_the_bulk_build_from_the_change_log_is_the_one_by_one_index(
    redis_url: str, small_chunks: None, changes: list[tuple[str, str, str]], shards: int,
) -> None:
    prefix = f"bulk-{uuid.uuid4().hex[:10]}:"
    store = StateStore.from_url(redis_url, prefix, 1000)
    try:
        logged = [source(i, *c) for i, c in enumerate(changes)]
        store.apply(logged)
        version = store.version()
        settings_ = WorkerSettings(redis_url, prefix, 1000, "psthash", "n", "r",
                                   shards=shards)  # fmt: skip
        for number in range(shards):
            index_cache.INDEXES.clear()  # a new worker
            index = index_cache.sync_index(settings_, version, number)
            assert index.version == version
            index.check()
            # applied one at a time: the changes as the state logged them (a delete of
            # an id it does not hold is not a change), or, for a churned log (more than
            # REPLAY_PER_LIVE changes per live subscription), the records it holds
            if index.built_from == "change log":
                replayed = store.changes(0, version)
            else:
                replayed = [Change(version, "put", sub_id, record)
                            for sub_id, record in store.snapshot()[1].items()]  # fmt: skip
            expected = one_by_one(replayed, Shard(number, shards))
            assert set(index.matcher) == set(expected)
            heads = {sub_id: index.heads.get(index.matcher.internal.slot_of(sub_id))
                     for sub_id in index.matcher}  # fmt: skip
            assert heads == {sub_id: head for sub_id, (_, head) in expected.items()}
            scan = make_matcher("scan")
            scan.add_many((sub_id, expr) for sub_id, (expr, _) in expected.items())
            assert index.matcher.match_batch(EVENTS) == scan.match_batch(EVENTS)
    finally:
        store.clear()


def test_a_logged_text_that_is_not_utf8_is_left_out_alone(
    redis_url: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """The change log's texts reach the worker as bytes and are decoded inside the
    per-record barrier: a record or a normal form that is not UTF-8 (a hand-edited
    Redis) is one subscription left out, with its line, not a failed catch-up."""
    prefix = f"bulk-{uuid.uuid4().hex[:10]}:"
    store = StateStore.from_url(redis_url, prefix, 1000)
    try:
        store.apply([source(0, "logged", "s0", "a = 1"), source(1, "logged", "s1", "a = 2"),
                     source(2, "logged", "s2", "a = 3")])  # fmt: skip
        store.client.xadd(store.k_log, {"op": "put", "id": "s3", "rec": b"\xff{"}, id="4-0")
        store.client.xadd(store.k_log, {"op": "put", "id": "s4", "rec": dumps_record(
            "a = 4", "who", {}), "nf": b"\xff"}, id="5-0")  # fmt: skip
        store.client.set(store.k_version, 5)
        index_cache.INDEXES.clear()
        settings_ = WorkerSettings(redis_url, prefix, 1000, "psthash", "n", "r")
        index = index_cache.sync_index(settings_, 5)
        index.check()
        assert (index.built_from, index.version) == ("change log", 5)
        assert set(index.matcher) == {"s0", "s1", "s2"}
        assert "leaving out stored subscription 's3'" in caplog.text
        assert "leaving out stored subscription 's4'" in caplog.text
    finally:
        index_cache.INDEXES.clear()
        store.clear()
