"""The workers' per-record barrier and what it must not catch: an event's fault becomes a
reject, an infrastructure fault (Redis unreachable) fails the task, to be retried. Plus
the per-batch reject summary of the log, and the workers' index: full reload and
change-log catch-up in bulk (``add_many``, a chunk at a time), against a real Redis,
with bad stored records and a faulty matcher left out alone. And a task's records,
written to a real Kafka broker by the worker: all acknowledged before the task ends, or
the task fails."""

from __future__ import annotations

import dataclasses
import gc
import logging
import uuid
import weakref
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from psmatch import Matcher, make_matcher
from psmatch.adapters.kafka.admin import ensure_topics
from psmatch.adapters.kafka.client import KafkaServiceError
from psmatch.adapters.kafka.reader import TopicReader
from psmatch.adapters.kafka.sink import SinkSettings
from psmatch.adapters.state import ChangeRun, SourceChange, StateError, StateStore
from psmatch.devservers.process import free_port
from psmatch.devservers.services import LocalServices
from psmatch.language import Subscription
from psmatch.scan import ScanMatcher
from psmatch.service import index_cache, tasks, worker_index
from psmatch.service.job import BatchReport
from psmatch.service.records import subscriptions as subscription_records
from psmatch.service.records.common import RecordError
from psmatch.service.records.notifications import NotificationHeads, parse_notification
from psmatch.service.records.rejected import parse_rejected
from psmatch.service.records.subscriptions import (
    dumps_record,
    parse_subscription_record,
    subscription_value,
)
from psmatch.service.task_contract import SAMPLE_CHARS, TaskMetrics, WorkerSettings
from psmatch.service.tasks import match_batches
from tests.service.worker_state import put


def test_an_unreachable_redis_fails_the_task_and_rejects_nothing() -> None:
    settings = WorkerSettings(
        redis_url=f"redis://127.0.0.1:{free_port()}/0", redis_prefix="p:", retention=10,
        matcher="scan", notifications_topic="n", rejected_topic="r", redis_retry_seconds=0,
    )  # fmt: skip
    batch = pa.RecordBatch.from_pydict({
        "key": [b"e"], "value": [b"not json"], "topic": ["ev"], "partition": [0],
        "offset": [0], "ts": [0],
    })  # fmt: skip
    reported: list[TaskMetrics] = []
    with pytest.raises(StateError, match="Redis"):
        list(match_batches(settings, 1, iter([batch]), reported.append))
    assert reported == []


def test_rejects_are_summarised_in_one_line_per_batch() -> None:
    long_reason = "x" * 5000
    workers = TaskMetrics(events=10)
    for offset in range(7):
        code = "invalid_json" if offset < 5 else "too_deep"
        workers.reject(RecordError(code, long_reason), "ev", 0, offset)
    report = BatchReport(
        batch_id=4, version=1, subscription_records=1, subscriptions_applied=0, read_s=0,
        state_s=0, match_write_s=0, total_s=0, workers=workers,
        subscription_rejects=(("invalid_expression", 1),), samples=tuple(workers.samples),
    )  # fmt: skip
    line = report.rejects_line()
    assert line is not None and "\n" not in line
    assert line.startswith("batch 4: rejected 1 subscription records and 7 events "
                           "(subscriptions invalid_expression 1, events invalid_json 5, "
                           "events too_deep 2); e.g. ev/0/0 invalid_json: xxx")  # fmt: skip
    assert len(workers.samples) == 3
    assert len(line) < 3 * (SAMPLE_CHARS + 40) + 200
    quiet = BatchReport(batch_id=5, version=1, subscription_records=0, subscriptions_applied=0,
                        read_s=0, state_s=0, match_write_s=0, total_s=0)  # fmt: skip
    assert quiet.rejects_line() is None


# -- the worker's index: reload and catch-up in bulk, against a real Redis ---------------

@pytest.fixture
def state(services: LocalServices) -> Iterator[tuple[WorkerSettings, StateStore]]:
    prefix = f"worker-{uuid.uuid4().hex[:10]}:"
    settings = WorkerSettings(redis_url=services.redis.url, redis_prefix=prefix, retention=100,
                              matcher="psthash", notifications_topic="n", rejected_topic="r")
    store = StateStore.from_url(services.redis.url, prefix, 100)
    yield settings, store
    index_cache.INDEXES.clear()
    store.clear()


EVENTS = [{"a": a, "b": b} for a in range(6) for b in ("x", "y")]


def matches(index: worker_index.WorkerIndex) -> list[set[object]]:
    index.matcher.check()
    return index.matcher.match_batch(EVENTS)


def expected(exprs: dict[str, str]) -> list[set[object]]:
    scan = make_matcher("scan")
    scan.add_many(exprs.items())
    return scan.match_batch(EVENTS)


def load_in_chunks_of(monkeypatch: pytest.MonkeyPatch, size: int) -> None:
    """LOAD_CHUNK set to ``size`` where the index files its chunks and where the cache
    reads the state and the change log."""
    monkeypatch.setattr(worker_index, "LOAD_CHUNK", size)
    monkeypatch.setattr(index_cache, "LOAD_CHUNK", size)


class Calls:
    """Counts ``add`` and ``add_many`` calls on the matchers of kind ``kind``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
        self.add = self.add_many = 0
        add, add_many = Matcher.add, Matcher.add_many

        def count_add(m: Matcher, *args: Any) -> None:
            self.add += m.name == kind
            add(m, *args)

        def count_add_many(m: Matcher, *args: Any) -> None:
            self.add_many += m.name == kind
            add_many(m, *args)

        monkeypatch.setattr(Matcher, "add", count_add)
        monkeypatch.setattr(Matcher, "add_many", count_add_many)


def test_reload_and_catch_up_are_bulk_and_leave_out_only_bad_stored_records(
    state: tuple[WorkerSettings, StateStore], monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings, store = state
    exprs = {f"s{i}": f"a >= {i % 5} and b = '{'xy'[i % 2]}'" for i in range(40)}
    # a state rebuilt (so with an empty change log: the worker reads every subscription),
    # as if by hand: a record that is not JSON and one whose expression does not parse
    store.rebuild({sid: dumps_record(e, "who", {}) for sid, e in exprs.items()}
                  | {"bad-json": "{", "bad-expr": dumps_record("a <", "who", {})})
    calls = Calls(monkeypatch, settings.matcher)
    index = index_cache.sync_index(settings, 1)
    assert (calls.add, calls.add_many) == (0, 1) and index.built_from == "subscriptions"
    index.check()
    assert set(index.matcher) == set(exprs)
    assert matches(index) == expected(exprs)

    # catch-up: replace, delete, put-delete-put one id, a bad replacement of a good one
    changes = [put(40, "s1", "a = 5"), SourceChange("subs:0", 41, "s2", None),
               put(42, "new", "b = 'x'"), SourceChange("subs:0", 43, "new", None),
               put(44, "new", "a < 2"), SourceChange("subs:0", 45, "s3", "{not json")]
    store.apply(changes)
    exprs |= {"s1": "a = 5", "new": "a < 2"}
    del exprs["s2"], exprs["s3"]
    same = index_cache.sync_index(settings, 7)
    assert same is index and index.version == 7 and index.reloads == 1
    assert (calls.add, calls.add_many) == (0, 2)
    index.check()
    assert set(index.matcher) == set(exprs)
    assert matches(index) == expected(exprs)


def test_a_batch_of_more_changes_than_the_retention_is_replayed_a_chunk_at_a_time(
    state: tuple[WorkerSettings, StateStore], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The change log keeps a whole micro-batch past the retention (100 here): the worker
    replays its 150 changes, read and applied 20 at a time, instead of reading every
    subscription again, and logs its progress (here after every group)."""
    settings, store = state
    load_in_chunks_of(monkeypatch, 20)
    monkeypatch.setattr(index_cache, "PROGRESS_SECONDS", 0.0)
    exprs = {f"s{i}": f"a >= {i % 5}" for i in range(30)}
    store.apply([put(i, sid, e) for i, (sid, e) in enumerate(exprs.items())])
    index = index_cache.sync_index(settings, 30)
    batch = {30 + i: (f"s{i % 90}", f"b = '{'xy'[i % 2]}' and a < {i % 6}") for i in range(150)}
    store.apply([put(offset, sid, e) for offset, (sid, e) in batch.items()])
    exprs |= dict(batch.values())
    calls = Calls(monkeypatch, settings.matcher)
    caplog.set_level(logging.INFO, logger="psmatch.service")
    same = index_cache.sync_index(settings, 180)
    # its first load replayed the log's first 30 changes (a fresh worker, the log whole)
    assert same is index and index.reloads == 1 and index.replayed == 30 + 150
    assert calls.add_many == 8  # a bulk add per group: 150 = 7 * 20 + 10
    progress = [r.getMessage() for r in caplog.records if "replayed" in r.getMessage()]
    assert len(progress) == 8
    assert progress[0] == ("shard 0 of 1: replayed 20 of the 150 changes after version 30 "
                           "(now at 50)")  # fmt: skip
    assert progress[-1].endswith("replayed 150 of the 150 changes after version 30 (now at 180)")
    monkeypatch.setattr(index_cache, "PROGRESS_SECONDS", 3600.0)  # a shorter catch-up: its end only
    caplog.clear()
    more = {180 + i: (f"s{i}", f"a = {i}") for i in range(50)}
    store.apply([put(offset, sid, e) for offset, (sid, e) in more.items()])
    exprs |= dict(more.values())
    assert index_cache.sync_index(settings, 230) is index
    assert [r.getMessage() for r in caplog.records if "replayed" in r.getMessage()] == [
        "shard 0 of 1: replayed 50 of the 50 changes after version 180 (now at 230)"]
    index.check()
    assert set(index.matcher) == set(exprs)
    assert matches(index) == expected(exprs)


def test_a_catch_up_reads_and_applies_the_log_with_the_cyclic_collector_paused(
    state: tuple[WorkerSettings, StateStore], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The changes a catch-up reads live until their group is applied, so the collector
    stays off throughout (psmatch.core.heap.gc_paused), and on again after."""
    settings, store = state
    load_in_chunks_of(monkeypatch, 7)
    store.apply([put(0, "s0", "a = 1")])
    index = index_cache.sync_index(settings, 1)
    store.apply([put(i, f"s{i}", f"a >= {i % 5}") for i in range(1, 31)])
    collector_on: list[bool] = []
    change_runs = StateStore.change_runs

    def watched(self: StateStore, start: int, upto: int, size: int) -> Iterator[ChangeRun]:
        for run in change_runs(self, start, upto, size):
            collector_on.append(gc.isenabled())
            yield run

    monkeypatch.setattr(StateStore, "change_runs", watched)
    assert gc.isenabled()
    same = index_cache.sync_index(settings, 31)
    assert same is index and index.replayed == 1 + 30
    assert collector_on == [False] * 5 and gc.isenabled()
    index.check()
    assert len(index.matcher) == 31


def logged(offset: int, sub_id: str, expr: str) -> SourceChange:
    """A put as the job logs it: validated, with the normal form beside the record."""
    change = parse_subscription_record(sub_id.encode(), subscription_value(expr, "who", {}))
    return SourceChange("subs:0", offset, sub_id, change.stored, change.normal_form)


def test_a_catch_up_loads_each_normal_form_from_the_log_and_parses_nothing(
    state: tuple[WorkerSettings, StateStore], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The driver parsed each subscription once and logged its normal form beside it: a
    worker catching up reads the forms of a group of changes into columns at once, with
    neither a parse nor an object per predicate. A change logged without one is parsed;
    one whose normal form is malformed (a hand-edited Redis) makes the group's forms read
    one by one, and is left out."""
    settings, store = state
    store.apply([put(0, "old", "a = 9")])
    index = index_cache.sync_index(settings, 1)
    exprs = {f"s{i}": f"a >= {i % 5} and b = '{'xy'[i % 2]}'" for i in range(30)}
    logs = [logged(offset, sid, expr) for offset, (sid, expr) in enumerate(exprs.items(), 1)]
    store.apply(logs[:20])
    parsed: list[str] = []
    one_by_one: list[str] = []
    parse = subscription_records.parse_subscription
    load_form = subscription_records.load_normal_form
    monkeypatch.setattr(subscription_records, "parse_subscription",
                        lambda text: parsed.append(text) or parse(text))
    monkeypatch.setattr(subscription_records, "load_normal_form",
                        lambda text, form: one_by_one.append(text) or load_form(text, form))
    assert index_cache.sync_index(settings, 21) is index and index.replayed == 1 + 20
    assert parsed == one_by_one == []

    malformed = SourceChange("subs:0", 32, "old", dumps_record("a = 1", "who", {}),
                             '[[["a",0,["1",true,1,true]]]]')  # fmt: skip
    store.apply([*logs[20:], put(31, "parsed", "b = 'y'"), malformed])
    same = index_cache.sync_index(settings, 33)
    assert same is index and index.replayed == 1 + 32
    assert parsed == ["b = 'y'"] and len(one_by_one) == 10 + 1
    index.check()
    exprs["parsed"] = "b = 'y'"
    assert set(index.matcher) == set(exprs)  # "old" left out, its previous version removed
    assert matches(index) == expected(exprs)


def test_a_fresh_worker_replays_the_whole_change_log_while_it_holds_every_change(
    state: tuple[WorkerSettings, StateStore], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker with no index builds it from the empty state by replaying the change log,
    loading each logged normal form and parsing nothing, as long as the log holds every
    change and at most REPLAY_PER_LIVE per live subscription; otherwise (a churned state,
    a trimmed log) it reads every live subscription and parses it."""
    settings, store = state
    parsed: list[str] = []
    parse = subscription_records.parse_subscription

    def counted(text: str) -> Subscription:
        parsed.append(text)
        return parse(text)

    exprs = {f"s{i}": f"a >= {i % 5} and b = '{'xy'[i % 2]}'" for i in range(30)}
    store.apply([logged(i, sid, e) for i, (sid, e) in enumerate(exprs.items())])
    store.apply([logged(30, "s0", "a = 5"), SourceChange("subs:0", 31, "s1", None)])
    exprs["s0"] = "a = 5"
    del exprs["s1"]
    monkeypatch.setattr(subscription_records, "parse_subscription", counted)
    index = index_cache.sync_index(settings, 32)
    assert (index.built_from, index.version, index.replayed) == ("change log", 32, 32)
    assert parsed == []
    index.check()
    assert matches(index) == expected(exprs)

    # churn: 29 live subscriptions, 32 + 40 changes, more than 2 per live one
    store.apply([logged(32 + i, f"s{i % 10 + 2}", f"a < {i % 4}") for i in range(40)])
    exprs |= {f"s{i % 10 + 2}": f"a < {i % 4}" for i in range(40)}
    index_cache.INDEXES.clear()  # a new worker process
    parsed.clear()
    index = index_cache.sync_index(settings, 72)
    assert (index.built_from, index.version) == ("subscriptions", 72)
    assert sorted(parsed) == sorted(exprs.values())
    assert matches(index) == expected(exprs)

    # the log trimmed (retention 10): its first change is gone
    store.clear()
    store.retention = 10
    store.apply([logged(i, f"t{i}", "b = 'x'") for i in range(15)])
    store.apply([logged(15 + i, f"t{i}", "b = 'y'") for i in range(15)])
    index_cache.INDEXES.clear()
    parsed.clear()
    index = index_cache.sync_index(settings, 30)
    assert (index.built_from, len(parsed)) == ("subscriptions", 15)
    assert matches(index) == expected({f"t{i}": "b = 'y'" for i in range(15)})


def test_a_reload_drops_the_old_index_first(
    state: tuple[WorkerSettings, StateStore], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker whose index the change log no longer reaches back to never holds the old
    index and the new one at once: the old one is freed before the new one is built."""
    settings, store = state
    store.apply([put(i, f"s{i}", "a = 1") for i in range(10)])
    old = weakref.ref(index_cache.sync_index(settings, 10))
    for start in (10, 120):  # two batches of 110 changes: the log keeps the second only
        store.apply([put(i, f"s{i % 40}", f"a = {i % 3}") for i in range(start, start + 110)])
    old_alive: list[bool] = []
    build_index = index_cache.build_index

    def observed(*args: Any) -> worker_index.WorkerIndex:
        gc.collect()
        old_alive.append(old() is not None)
        return build_index(*args)

    monkeypatch.setattr(index_cache, "build_index", observed)
    new = index_cache.sync_index(settings, 230)
    assert old_alive == [False] and new.reloads == 2 and new.version == 230
    new.check()
    assert matches(new) == expected({f"s{i % 40}": f"a = {i % 3}" for i in range(10, 230)})


def test_a_reload_builds_in_chunks_and_an_id_read_twice_keeps_its_last_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reload files the subscriptions one ``add_many`` of LOAD_CHUNK at a time, and
    writes each chunk's notification heads into their columns (so a bulk build's working
    memory is a chunk's); HSCAN may give a key twice, in other chunks: the last text read
    stands."""
    load_in_chunks_of(monkeypatch, 7)
    written: list[int] = []
    put_many = NotificationHeads.put_many

    def counted(self: NotificationHeads, slots: Any, heads: list[bytes]) -> None:
        written.append(len(heads))
        put_many(self, slots, heads)

    monkeypatch.setattr(NotificationHeads, "put_many", counted)
    exprs = {f"s{i}": f"a >= {i % 5} and b = '{'xy'[i % 2]}'" for i in range(40)}
    calls = Calls(monkeypatch, "psthash")
    index = worker_index.WorkerIndex(make_matcher("psthash"))
    index.load([(sid, dumps_record(e, "who", {}), None) for sid, e in exprs.items()]
               + [("s3", dumps_record("a = 1", "who", {}), None)])  # fmt: skip
    exprs["s3"] = "a = 1"
    assert calls.add_many == 6  # 41 records in chunks of 7
    assert written == [7, 7, 7, 7, 7, 6]
    index.check()
    assert set(index.matcher) == set(exprs)
    assert matches(index) == expected(exprs)


def scan_with_writes(
    store: StateStore, monkeypatch: pytest.MonkeyPatch, after: int, writes: list[SourceChange]
) -> None:
    """Make the worker's reload scan apply ``writes`` to Redis, each its own micro-batch,
    once it has given ``after`` subscriptions: changes that land while a reload reads
    the state."""
    scan = StateStore.scan

    def interleaved(self: StateStore, size: int) -> Iterator[tuple[str, str]]:
        for n, item in enumerate(scan(self, size)):
            if n == after:
                for write in writes:
                    store.apply([write])
            yield item

    monkeypatch.setattr(StateStore, "scan", interleaved)


@pytest.mark.parametrize("retention", [100, 3])
def test_a_reload_ends_at_the_state_that_the_log_reaches_whatever_changed_while_it_read(
    state: tuple[WorkerSettings, StateStore], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture, retention: int,
) -> None:
    """The full reload streams the state from Redis, in chunks, then replays what the
    change log recorded meanwhile; when the log no longer reaches back to the scan's
    start (a retention of 3 here), it reads the state again, whole."""
    settings, store = state
    settings = dataclasses.replace(settings, retention=retention)
    store.retention = retention
    load_in_chunks_of(monkeypatch, 4)
    exprs = {f"s{i}": f"a >= {i % 5} and b = '{'xy'[i % 2]}'" for i in range(30)}
    # rebuilt, at version 1: the log does not reach back to the empty state
    store.rebuild({sid: dumps_record(e, "who", {}) for sid, e in exprs.items()})
    writes = [put(30, "s0", "a = 5"), SourceChange("subs:0", 31, "s29", None),
              put(32, "late", "b = 'x'"), SourceChange("subs:0", 33, "s1", None),
              put(34, "s1", "a < 2")]  # fmt: skip
    scan_with_writes(store, monkeypatch, 10, writes)
    caplog.set_level(logging.INFO, logger="psmatch.service")
    index = index_cache.sync_index(settings, 6)
    exprs |= {"s0": "a = 5", "late": "b = 'x'", "s1": "a < 2"}
    del exprs["s29"]
    index.check()
    assert index.version == 6 and index.built_from == "subscriptions"
    assert set(index.matcher) == set(exprs)
    assert len(index.matcher) == len(exprs)
    assert matches(index) == expected(exprs)
    read_again = "changed too much while it was read" in caplog.text
    assert read_again == (retention < len(writes))


class FaultyMatcher(ScanMatcher):
    """A matcher with a bug: it raises on subscriptions about the attribute ``boom``."""

    def _insert(self, slot: int, subscription: Any) -> None:
        if "boom" in str(subscription):
            raise RuntimeError("matcher bug")
        super()._insert(slot, subscription)

    def _delete(self, slot: int) -> None:
        self._subscriptions.pop(slot, None)


def test_when_add_many_raises_the_culprit_is_found_and_left_out(
    state: tuple[WorkerSettings, StateStore], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings, store = state
    monkeypatch.setattr(index_cache, "make_matcher", lambda name: FaultyMatcher())
    exprs = {f"s{i}": f"a > {i % 4}" for i in range(10)}
    store.apply([put(i, sid, e) for i, (sid, e) in enumerate(exprs.items())]
                + [put(10, "boom", "boom = 1")])  # fmt: skip
    index = index_cache.sync_index(settings, 11)
    index.check()
    assert set(index.matcher) == set(exprs)
    assert matches(index) == expected(exprs)
    assert "indexing the stored subscriptions of version 11 in bulk failed" in caplog.text

    # the same bug during a catch-up: the half-updated index is dropped for a reload
    store.apply([put(11, "s0", "b = 'y'"), put(12, "boom2", "boom = 2")])
    exprs["s0"] = "b = 'y'"
    again = index_cache.sync_index(settings, 13)
    assert again is not index and again.reloads == 2 and again.version == 13
    again.check()
    assert set(again.matcher) == set(exprs)
    assert matches(again) == expected(exprs)
    assert "replaying 2 changes in bulk failed" in caplog.text


# -- the task's records, written to Kafka by the worker itself ----------------------------

def _records(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes]]:
    with TopicReader(bootstrap, topic) as reader:
        return [(r.key, r.value or b"") for r in reader.read_to_end()]


def _own_topics(settings: WorkerSettings, bootstrap: str,
                notifications: dict[str, str] | None = None) -> WorkerSettings:  # fmt: skip
    """``settings`` with new notifications (topic configs ``notifications``) and
    rejected topics."""
    tag = uuid.uuid4().hex[:8]
    ensure_topics(bootstrap, {f"n-{tag}": notifications or {}, f"r-{tag}": {}}, partitions=1)
    return dataclasses.replace(settings, notifications_topic=f"n-{tag}",
                               rejected_topic=f"r-{tag}")  # fmt: skip


def test_a_task_writes_its_notifications_and_rejects_and_returns_no_rows(
    state: tuple[WorkerSettings, StateStore], services: LocalServices,
) -> None:
    settings, store = state
    bootstrap = services.kafka.bootstrap_servers
    settings = _own_topics(settings, bootstrap)
    store.apply([put(0, "low", "a < 3"), put(1, "x", "b = 'x'")])
    batch = pa.RecordBatch.from_pydict({
        "key": [b"e0", b"e1", b"bad"], "value": [b'{"a": 1, "b": "x"}', b'{"a": 5}', b"{"],
        "topic": ["ev"] * 3, "partition": [0] * 3, "offset": [0, 1, 2], "ts": [0] * 3,
    })  # fmt: skip
    reported: list[TaskMetrics] = []
    rows = tasks.match_and_write(settings, SinkSettings(bootstrap), 2, iter([batch]),
                                  reported.append)  # fmt: skip
    assert list(rows) == []
    (metrics,) = reported
    assert (metrics.events, metrics.notifications, metrics.rejected) == (3, 2, 1)
    assert metrics.write_s > 0
    # written and acknowledged before match_and_write returned
    notified = _records(bootstrap, settings.notifications_topic)
    assert sorted((k, parse_notification(v).event_id) for k, v in notified) == [
        (b"low", "e0"), (b"x", "e0")]  # fmt: skip
    ((key, value),) = _records(bootstrap, settings.rejected_topic)
    assert key == b"bad" and parse_rejected(value).code == "invalid_json"


def test_a_record_kafka_refuses_fails_the_task(
    state: tuple[WorkerSettings, StateStore], services: LocalServices,
) -> None:
    settings, store = state
    bootstrap = services.kafka.bootstrap_servers
    # the topic takes smaller records than the service writes
    settings = _own_topics(settings, bootstrap, {"max.message.bytes": "200"})
    store.apply([put(0, "all", "a >= 0")])
    batch = pa.RecordBatch.from_pydict({
        "key": [b"e0"], "value": [b'{"a": 1, "pad": "%s"}' % (b"p" * 500)], "topic": ["ev"],
        "partition": [0], "offset": [0], "ts": [0],
    })  # fmt: skip
    reported: list[TaskMetrics] = []
    with pytest.raises(KafkaServiceError, match="1 output records were not written"):
        tasks.match_and_write(settings, SinkSettings(bootstrap, compression="none"), 1,
                               iter([batch]), reported.append)  # fmt: skip
    assert reported == []  # the task failed: Spark runs it again
