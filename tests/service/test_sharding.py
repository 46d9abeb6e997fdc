"""Sharding (``--shards N``, :mod:`psmatch.service.shards`): the stable shard of an id; each
shard's worker index holds exactly the subscriptions whose id hashes to it, through
reload, change-log catch-up and snapshots (a snapshot of another shard or shard count
is ignored), against a real Redis; the union of the shards is everything and their
matches are the unsharded matches. Then the job in local mode: two shards notify
exactly what one shard does on the same random workload."""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from psmatch import make_matcher
from psmatch.adapters.kafka.producer import JsonProducer
from psmatch.adapters.state import SourceChange, StateStore
from psmatch.devservers.services import LocalServices
from psmatch.service import index_cache
from psmatch.service.config import ServiceConfig
from psmatch.service.job import prepare
from psmatch.service.shards import Shard, shard_of
from psmatch.service.snapshots import SnapshotError, load_snapshot, snapshot_path
from psmatch.service.task_contract import TaskMetrics, WorkerSettings
from psmatch.service.tasks import ShardMismatchError, match_batches
from psmatch.service.worker_index import WorkerIndex
from tests.service.test_end_to_end import (
    expected_matches,
    random_events,
    read_topic,
    running,
    wait_for_notifications,
)
from tests.service.worker_state import put, worker_state
from tests.service.workload import random_subscriptions

ROOT = Path(__file__).resolve().parents[2]


def test_the_shard_of_an_id_is_the_same_in_every_process() -> None:
    """Not Python's ``hash`` of a str, which is salted per process."""
    ids = [f"sub-{i}" for i in range(200)] + ["", "é", "\U0001f600", "\udc80"]
    code = ("import ast, sys; from psmatch.service.shards import shard_of; ids = ast.literal_eval("
            "sys.stdin.read()); print([shard_of(i, n) for n in (2, 3, 7) for i in ids])")
    env = {**os.environ, "PYTHONHASHSEED": "1"}
    runs = set()
    for seed in ("1", "2"):
        env["PYTHONHASHSEED"] = seed
        runs.add(subprocess.run([sys.executable, "-c", code], input=ascii(ids), text=True,
                                capture_output=True, check=True, cwd=ROOT, env=env).stdout)
    assert runs == {f"{[shard_of(i, n) for n in (2, 3, 7) for i in ids]}\n"}
    for n in (2, 3, 7):
        counts = [sum(shard_of(i, n) == s for i in ids[:200]) for s in range(n)]
        assert min(counts) > 200 / n / 2, counts  # every shard gets a fair part


def test_a_shard_holds_its_ids_and_only_one_shard_holds_each() -> None:
    ids = [f"id-{i}" for i in range(100)]
    for n in (1, 2, 5):
        shards = [Shard(s, n) for s in range(n)]
        for sub_id in ids:
            assert [s.holds(sub_id) for s in shards].count(True) == 1
    with pytest.raises(ValueError, match="shard 2 of 2 does not exist"):
        Shard(2, 2)


def test_task_metrics_count_the_shards_matched() -> None:
    a = TaskMetrics(tasks=1, shard_subscriptions={0: 10}, process_indexes=1)
    b = TaskMetrics(tasks=1, shard_subscriptions={1: 7}, process_indexes=2)
    c = TaskMetrics(tasks=1, shard_subscriptions={0: 11}, process_indexes=1)
    merged = TaskMetrics().merge(a).merge(b).merge(c)
    assert merged.shard_subscriptions == {0: 11, 1: 7} and merged.process_indexes == 2


# -- each shard's index, against a real Redis ------------------------------------------

SHARDS = 3
EVENTS = [{"a": a, "b": b, "c": c, "s": s} for a in range(0, 21, 4) for b in (0, 9, 20)
          for c in (3, 15) for s in "xw"]  # fmt: skip


@pytest.fixture
def state(
    services: LocalServices, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> Iterator[tuple[WorkerSettings, StateStore]]:
    caplog.set_level(logging.INFO, logger="psmatch.service")
    with worker_state(services.redis.url, tmp_path, "shard", 500, shards=SHARDS) as state:
        yield state



def check_shards(indexes: list[WorkerIndex], exprs: dict[str, str]) -> None:
    """Each index holds exactly its shard's subscriptions (check() holds), the shards
    partition them all, and the union of their matches is the matches of all."""
    for i, index in enumerate(indexes):
        index.check()
        assert set(index.matcher) == {sid for sid in exprs if shard_of(sid, SHARDS) == i}
    scan = make_matcher("scan")
    scan.add_many(exprs.items())
    union: list[set[object]] = [set() for _ in EVENTS]
    for index in indexes:
        for got, matched in zip(union, index.matcher.match_batch(EVENTS), strict=True):
            got |= matched
    assert union == scan.match_batch(EVENTS)


def test_each_shard_index_holds_exactly_its_subscriptions_through_reload_catch_up_and_snapshots(
    state: tuple[WorkerSettings, StateStore], caplog: pytest.LogCaptureFixture,
) -> None:
    settings, store = state
    rng = random.Random(11)
    exprs = random_subscriptions(rng, 150)
    store.apply([put(i, sid, e) for i, (sid, e) in enumerate(exprs.items())])
    indexes = [index_cache.sync_index(settings, 150, s) for s in range(SHARDS)]
    # each built by replaying the whole change log, its shard's changes kept
    assert all(index.reloads == 1 and index.built_from == "change log" for index in indexes)
    assert all(0 < len(index.matcher) < len(exprs) for index in indexes)
    check_shards(indexes, exprs)
    # one process may hold several shards: one index each
    assert len(index_cache.INDEXES) == SHARDS

    # catch-up: puts, replacements and deletions over every shard
    changes = [put(0, f"sub-{i}", "a = 3") for i in range(0, 30, 3)]
    changes += [SourceChange("subs:0", 0, f"sub-{i}", None) for i in range(1, 30, 3)]
    changes += [put(0, f"new-{i}", "b < 10") for i in range(10)]
    store.apply([dataclasses.replace(c, offset=150 + n) for n, c in enumerate(changes)])
    exprs |= {f"sub-{i}": "a = 3" for i in range(0, 30, 3)}
    exprs |= {f"new-{i}": "b < 10" for i in range(10)}
    for i in range(1, 30, 3):
        del exprs[f"sub-{i}"]
    again = [index_cache.sync_index(settings, 180, s) for s in range(SHARDS)]
    assert [a is b for a, b in zip(again, indexes, strict=True)] == [True] * SHARDS
    assert all(index.version == 180 and index.replayed == 150 + 30 for index in again)
    check_shards(again, exprs)

    # snapshots, one per shard, written at the reload: each holds its shard only
    for s in range(SHARDS):
        snap = load_snapshot(settings.snapshot_dir or "", settings.redis_prefix, "psthash",
                             Shard(s, SHARDS))  # fmt: skip
        assert snap.version == 150
        assert {shard_of(sid, SHARDS) for sid in snap.matcher} == {s}
    index_cache.INDEXES.clear()  # a new worker process
    started = [index_cache.sync_index(settings, 180, s) for s in range(SHARDS)]
    assert all(index.built_from == "snapshot" and index.replayed == 30 for index in started)
    assert "loaded the index snapshot of shard 2 of 3 at version 150" in caplog.text
    check_shards(started, exprs)


def test_a_snapshot_of_another_shard_or_shard_count_is_ignored(
    state: tuple[WorkerSettings, StateStore], caplog: pytest.LogCaptureFixture,
) -> None:
    settings, store = state
    exprs = random_subscriptions(random.Random(5), 60)
    store.apply([put(i, sid, e) for i, (sid, e) in enumerate(exprs.items())])
    check_shards([index_cache.sync_index(settings, 60, s) for s in range(SHARDS)], exprs)
    folder, prefix = settings.snapshot_dir or "", settings.redis_prefix
    zero = snapshot_path(folder, prefix, "psthash", Shard(0, SHARDS))
    # shard 0's snapshot put in the place of shard 1's
    shutil.copy(zero, snapshot_path(folder, prefix, "psthash", Shard(1, SHARDS)))
    with pytest.raises(SnapshotError, match="holds shard 0 of 3, not shard 1 of 3"):
        load_snapshot(folder, prefix, "psthash", Shard(1, SHARDS))
    index_cache.INDEXES.clear()
    indexes = [index_cache.sync_index(settings, 60, s) for s in range(SHARDS)]
    assert [index.built_from for index in indexes] == ["snapshot", "change log", "snapshot"]
    assert "holds shard 0 of 3, not shard 1 of 3" in caplog.text
    assert "loaded the index snapshot of shard 0 of 3" in caplog.text
    assert "loaded the index snapshot of shard 1 of 3" not in caplog.text
    check_shards(indexes, exprs)
    # and in the place of the snapshot of the unsharded index
    shutil.copy(zero, snapshot_path(folder, prefix, "psthash"))
    with pytest.raises(SnapshotError, match="holds shard 0 of 3, not shard 0 of 1"):
        load_snapshot(folder, prefix, "psthash")
    whole = index_cache.sync_index(dataclasses.replace(settings, shards=1), 60)
    whole.check()
    assert set(whole.matcher) == set(exprs)
    # the cached indexes of 3 shards went with the change of shard count
    assert [(key.shards, key.shard) for key in index_cache.INDEXES] == [(1, 0)]


def test_a_task_handed_events_of_another_shard_refuses_them(
    state: tuple[WorkerSettings, StateStore],
) -> None:
    settings, store = state
    ids = [f"s{i}" for i in range(30)]
    store.apply([put(i, sid, "a = 1") for i, sid in enumerate(ids)])
    batch = pa.RecordBatch.from_pydict({
        "key": [b"e"], "value": [b'{"a": 1}'], "topic": ["ev"], "partition": [0],
        "offset": [0], "ts": [0], "shard": pa.array([1], pa.int32()),
    })  # fmt: skip
    with pytest.raises(ShardMismatchError, match="the task of shard 2 was handed events of "
                                                 r"shards \[1\]"):  # fmt: skip
        list(match_batches(settings, 30, iter([batch]), None, 2))
    reported: list[TaskMetrics] = []
    bad = pa.RecordBatch.from_pydict({
        "key": [b"bad"], "value": [b"[1]"], "topic": ["ev"], "partition": [0],
        "offset": [1], "ts": [0], "shard": pa.array([1], pa.int32()),
    })  # fmt: skip
    out = list(match_batches(settings, 30, iter([batch, bad]), reported.append, 1))
    mine = {sid for sid in ids if shard_of(sid, SHARDS) == 1}
    assert {k.decode() for b in out for k in b.column("key").to_pylist()} == mine
    assert reported[0].shard_subscriptions == {1: len(mine)}
    assert reported[0].process_indexes == 2  # shard 2's index was built before the refusal
    # shard 0 alone counts the events and rejects the bad ones: once, whatever the shards
    assert (reported[0].events, reported[0].rejected) == (0, 0)
    zero = [b.set_column(6, "shard", pa.array([0], pa.int32())) for b in (batch, bad)]
    out = list(match_batches(settings, 30, iter(zero), reported.append, 0))
    assert [k for b in out for k in b.column("key").to_pylist()].count(b"bad") == 1
    assert (reported[1].events, reported[1].rejected) == (2, 1)


# -- the job in local mode: two shards notify what one shard does ------------------------


def test_two_shards_notify_exactly_what_one_shard_does(
    spark: Any, make_config: Callable[..., ServiceConfig], tmp_path: Path,
) -> None:
    one = make_config()
    two = one.replace(shards=2, redis_prefix=one.redis_prefix + "two:",
                      notifications_topic=one.notifications_topic + "-two",
                      rejected_topic=one.rejected_topic + "-two",
                      checkpoint_location=str(tmp_path / "checkpoint-two"))  # fmt: skip
    rng = random.Random(23)
    subs = random_subscriptions(rng, 80)
    events = {f"ev-{i}": e for i, e in enumerate(random_events(rng, 300))}
    expected = expected_matches(subs, events)
    assert len(expected) > 100
    prepare(one)  # the topics
    with JsonProducer(one.bootstrap_servers) as producer:
        for sub_id, expr in subs.items():
            producer.send(one.subscriptions_topic, {"expr": expr}, key=sub_id)
        producer.flush()
        for ev_id, event in events.items():
            producer.send(one.events_topic, event, key=ev_id)
        producer.send(one.events_topic, [1, 2], key="bad")  # not an object: rejected
    results = {}
    for config in (one, two):  # the same input topics, read from the earliest offsets
        with running(config, spark) as service:
            got = wait_for_notifications(config, expected, timeout=120)
            service.wait_for_events(len(events) + 1)
            reports = list(service.reports)
        results[config.shards] = got
        # every event counted once, the bad one rejected once, whatever the shards
        assert sum(r.events for r in reports) == len(events) + 1
        assert sum(r.events_rejected for r in reports) == 1
        (rejected,) = read_topic(config, config.rejected_topic, idle_ms=500)
        assert rejected.key == b"bad"
    assert set(results[1]) == set(results[2]) == expected
    assert len(results[2]) == len(expected), "each match from exactly one shard"
    mine = [sum(shard_of(sid, 2) == s for sid in subs) for s in range(2)]
    last = [r for r in reports if r.events][-1]
    assert last.workers.shard_subscriptions == {0: mine[0], 1: mine[1]}
    assert "2 of 2 shards matched (subscriptions per shard 0: " in last.line()
