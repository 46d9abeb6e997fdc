"""Index snapshots against a real Redis: a worker that starts loads the snapshot and
replays only the change log after it; a corrupt, foreign or stale snapshot is detected
and ignored (the worker builds its index again: from the change log while it holds every
change, else from every subscription), and the index is right either way."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import pickle
import re
import shutil
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psmatch import make_matcher
from psmatch.adapters.state import SourceChange, StateStore
from psmatch.devservers.services import LocalServices
from psmatch.service import index_cache, snapshot_codec, tasks
from psmatch.service.checkpoint import snapshot_dir
from psmatch.service.records.notifications import NotificationHeads
from psmatch.service.snapshot_codec import KERNELS
from psmatch.service.snapshots import (
    CLAIM_STALE_SECONDS,
    Snapshot,
    SnapshotError,
    header_digest,
    load_snapshot,
    save_snapshot,
    snapshot_path,
    snapshot_state,
)
from psmatch.service.task_contract import TaskMetrics, WorkerSettings
from psmatch.service.worker_index import WorkerIndex
from tests.service.worker_state import put, worker_state

EVENTS = [{"a": a, "b": b} for a in range(6) for b in ("x", "y")]


@pytest.fixture
def state(
    services: LocalServices, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> Iterator[tuple[WorkerSettings, StateStore]]:
    caplog.set_level(logging.INFO, logger="psmatch.service")
    with worker_state(services.redis.url, tmp_path, "snap", 20) as state:
        yield state



def check(index: WorkerIndex, exprs: dict[str, str]) -> None:
    index.check()
    scan = make_matcher("scan")
    scan.add_many(exprs.items())
    assert index.matcher.match_batch(EVENTS) == scan.match_batch(EVENTS)
    assert set(index.matcher) == set(exprs)


def start_worker(settings: WorkerSettings, version: int) -> WorkerIndex:
    """A new worker process: nothing cached."""
    index_cache.INDEXES.clear()
    return index_cache.sync_index(settings, version)


def first_load(settings: WorkerSettings, store: StateStore) -> dict[str, str]:
    exprs = {f"s{i}": f"a >= {i % 5} and b = '{'xy'[i % 2]}'" for i in range(12)}
    store.apply([put(i, sid, e) for i, (sid, e) in enumerate(exprs.items())])
    index = start_worker(settings, 12)
    # no snapshot yet: the whole change log replayed, and the index saved as one
    assert index.built_from == "change log"
    check(index, exprs)
    snap = load_snapshot(settings.snapshot_dir or "", settings.redis_prefix, "psthash")
    assert snap.version == 12
    return exprs


def test_a_starting_worker_loads_the_snapshot_and_replays_only_the_log_after_it(
    state: tuple[WorkerSettings, StateStore], caplog: pytest.LogCaptureFixture,
) -> None:
    settings, store = state
    exprs = first_load(settings, store)
    store.apply([put(12, "s0", "a = 5"), SourceChange("subs:0", 13, "s1", None),
                 put(14, "new", "b = 'x'")])  # fmt: skip
    exprs |= {"s0": "a = 5", "new": "b = 'x'"}
    del exprs["s1"]
    index = start_worker(settings, 15)
    assert (index.version, index.replayed) == (15, 3)
    assert ("loaded the index snapshot of shard 0 of 1 at version 12 and replayed 3 changes"
            in caplog.text)
    check(index, exprs)


def test_a_corrupt_snapshot_is_ignored(
    state: tuple[WorkerSettings, StateStore], caplog: pytest.LogCaptureFixture,
) -> None:
    settings, store = state
    exprs = first_load(settings, store)
    path = snapshot_path(settings.snapshot_dir or "", settings.redis_prefix, "psthash")
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF  # flipped bits in the matcher's last array
    path.write_bytes(bytes(data))
    with pytest.raises(SnapshotError, match="corrupt"):
        load_snapshot(path.parent, settings.redis_prefix, "psthash")
    index = start_worker(settings, 12)
    assert index.built_from == "change log" and "is corrupt" in caplog.text
    check(index, exprs)
    path.write_bytes(b"")  # truncated to nothing
    assert start_worker(settings, 12).built_from == "change log"
    assert "is not a psmatch index snapshot" in caplog.text


def rewrite_header(path: Path, **changes: object) -> None:
    """Change header fields of the snapshot at ``path``, its own checksum made to match
    (a writer that forges it), the line kept at its length."""
    line, payload = path.read_bytes().split(b"\n", 1)
    fields = {**json.loads(line), **changes}
    fields["header_sha256"] = header_digest(fields)
    path.write_bytes(json.dumps(fields).encode().ljust(len(line)) + b"\n" + payload)


def test_a_snapshot_of_other_index_code_is_ignored(
    state: tuple[WorkerSettings, StateStore], caplog: pytest.LogCaptureFixture,
) -> None:
    """The payload holds the matcher's internals: only the code of the classes it stores
    reads it (a worker that keeps up then writes a new one: ``snapshot_state`` is None)."""
    settings, store = state
    exprs = first_load(settings, store)
    path = snapshot_path(settings.snapshot_dir or "", settings.redis_prefix, "psthash")
    code = json.loads(path.read_bytes().split(b"\n", 1)[0])["code"]
    # as written by an older release of the PSTHash matcher's module
    rewrite_header(path, code={**code, "psmatch.pstree.psthash": "0" * 64})
    with pytest.raises(SnapshotError, match=re.escape(
            "another version of the index code (psmatch.pstree.psthash changed)")):  # fmt: skip
        load_snapshot(path.parent, settings.redis_prefix, "psthash")
    assert snapshot_state(path.parent, settings.redis_prefix, "psthash") is None
    index = start_worker(settings, 12)
    assert index.built_from == "change log" and "another version of the index code" in caplog.text
    check(index, exprs)


def small_snapshot(directory: Path) -> Path:
    matcher = make_matcher("psthash")
    matcher.add_many([("s1", "a = 1"), ("s2", "b in ('x', 'y') or a > 3.5")])
    heads = NotificationHeads()
    heads.put_many(matcher.internal.slots_of(["s1", "s2"]), [",h,", ",h,"])
    path = save_snapshot(directory, "p:", 5, matcher, heads, "digest")
    assert path is not None
    return path


@pytest.mark.parametrize(("changed", "refused"), [
    ("psmatch.pstree.store", True), ("psmatch.core.slot_ids", True),
    (NotificationHeads.__module__, True), (KERNELS, True),
    ("psmatch.explain", False), ("psmatch.service.index_cache", False),
    ("psmatch.service.snapshots", False), ("psmatch.baselines.counting", False),
])  # fmt: skip
def test_only_a_change_to_the_code_of_a_stored_class_invalidates_a_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, changed: str, refused: bool,
) -> None:
    path = small_snapshot(tmp_path)
    module_digest, kernels_digest = snapshot_codec.module_digest, snapshot_codec.kernels_digest
    monkeypatch.setattr(snapshot_codec, "module_digest",
                        lambda name: "edited" if name == changed else module_digest(name))
    monkeypatch.setattr(snapshot_codec, "kernels_digest",
                        lambda: "edited" if changed == KERNELS else kernels_digest())
    if refused:
        with pytest.raises(SnapshotError, match=re.escape(f"({changed} changed)")):
            load_snapshot(tmp_path, "p:", "psthash")
        assert snapshot_state(tmp_path, "p:", "psthash") is None
    else:
        assert load_snapshot(tmp_path, "p:", "psthash").matcher.match({"a": 1}) == {"s1"}
        assert snapshot_state(path.parent, "p:", "psthash") == (5, "digest")


def test_a_forged_header_or_payload_is_refused(tmp_path: Path) -> None:
    path = small_snapshot(tmp_path)
    original = path.read_bytes()
    line, payload = original.split(b"\n", 1)
    path.write_bytes(line.replace(b'"version": 5', b'"version": 6') + b"\n" + payload)
    with pytest.raises(SnapshotError, match="its header's checksum differs"):
        load_snapshot(tmp_path, "p:", "psthash")
    code = json.loads(line)["code"]
    rewrite_header(path, code={k: v for k, v in code.items() if k != "psmatch.pstree.store"})
    with pytest.raises(SnapshotError, match=re.escape("(psmatch.pstree.store not versioned)")):
        load_snapshot(tmp_path, "p:", "psthash")
    for size in (2**62, -1, "9"):
        path.write_bytes(original)
        rewrite_header(path, payload_bytes=size)
        with pytest.raises(SnapshotError, match="its size differs from its header"):
            load_snapshot(tmp_path, "p:", "psthash")
    # a writer that forges a consistent file naming os.system: refused, nothing run
    description = json.dumps({"classes": [["os", "system", "object", []]], "buffers": [],
                              "objects": [["object", 0, []]], "root": ["ref", 0]}).encode()
    path.write_bytes(line + b"\n" + description)
    rewrite_header(path, description_bytes=len(description), payload_bytes=len(description),
                   payload_sha256=hashlib.sha256(description).hexdigest())  # fmt: skip
    with pytest.raises(SnapshotError, match=re.escape(
            "corrupt or foreign: class 'os.system' is not in")):
        load_snapshot(tmp_path, "p:", "psthash")
    path.write_bytes(json.dumps({"format": "psmatch-index-snapshot", "format_version": 8})
                     .encode().ljust(4095) + b"\n" + pickle.dumps(None))  # fmt: skip
    with pytest.raises(SnapshotError, match="has format version 8, this service reads 9"):
        load_snapshot(tmp_path, "p:", "psthash")


@pytest.fixture(scope="module")
def snapshot_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return small_snapshot(tmp_path_factory.mktemp("snap")).read_bytes()


def load_bytes(data: bytes) -> Snapshot | SnapshotError:
    with tempfile.TemporaryDirectory() as directory:
        snapshot_path(directory, "p:", "psthash").write_bytes(data)
        try:
            return load_snapshot(directory, "p:", "psthash")
        except SnapshotError as exc:
            return exc


@given(st.data())
@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
def test_a_damaged_file_is_refused_or_loads_as_written(snapshot_bytes: bytes, data: st.DataObject
                                                       ) -> None:  # fmt: skip
    """Truncated anywhere, or any bytes replaced anywhere: a :class:`SnapshotError`, or
    (a change in the header's padding JSON reads as blank) the snapshot as written."""
    damaged = bytearray(snapshot_bytes)
    if data.draw(st.booleans(), "truncate"):
        del damaged[data.draw(st.integers(0, len(damaged) - 1), "at"):]
    else:
        for _ in range(data.draw(st.integers(1, 4), "bytes")):
            damaged[data.draw(st.integers(0, len(damaged) - 1), "at")] = data.draw(
                st.integers(0, 255), "byte")  # fmt: skip
    loaded = load_bytes(bytes(damaged))
    if not isinstance(loaded, SnapshotError):
        assert bytes(damaged).split(b"\n", 1)[1] == snapshot_bytes.split(b"\n", 1)[1]
        assert loaded.version == 5 and loaded.matcher.match({"a": 1}) == {"s1"}


def test_a_snapshot_of_another_prefix_or_matcher_is_ignored(
    state: tuple[WorkerSettings, StateStore], services: LocalServices,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings, store = state
    first_load(settings, store)
    ours = snapshot_path(settings.snapshot_dir or "", settings.redis_prefix, "psthash")
    other_prefix = f"other-{uuid.uuid4().hex[:10]}:"
    other = WorkerSettings(**{**{f: getattr(settings, f) for f in settings.__slots__},  # type: ignore[attr-defined]
                              "redis_prefix": other_prefix})  # fmt: skip
    other_store = StateStore.from_url(services.redis.url, other_prefix, 20)
    try:
        other_store.apply([put(0, "x", "a = 1")])
        shutil.copy(ours, snapshot_path(ours.parent, other_prefix, "psthash"))
        index = start_worker(other, 1)
        assert index.built_from == "change log"
        assert f"not of 'psthash' for '{other_prefix}'" in caplog.text
        check(index, {"x": "a = 1"})
        shutil.copy(ours, snapshot_path(ours.parent, settings.redis_prefix, "pstbloom"))
        with pytest.raises(SnapshotError, match="the snapshot of matcher 'psthash'"):
            load_snapshot(ours.parent, settings.redis_prefix, "pstbloom")
    finally:
        other_store.clear()


def test_a_stale_snapshot_or_one_of_another_state_is_ignored(
    state: tuple[WorkerSettings, StateStore], caplog: pytest.LogCaptureFixture,
) -> None:
    settings, store = state
    exprs = first_load(settings, store)
    # the change log (retention 20) no longer reaches back to version 12
    store.apply([put(12 + i, f"s{i % 12}", "a = 3") for i in range(25)])
    exprs = {sid: "a = 3" for sid in exprs}
    index = start_worker(settings, 37)
    assert index.built_from == "subscriptions" and "no longer reaches back to it" in caplog.text
    check(index, exprs)
    # Redis lost its data and the state was rebuilt, counting versions from 1 again:
    # a snapshot at a version the new state reaches, but of the old state
    path = snapshot_path(settings.snapshot_dir or "", settings.redis_prefix, "psthash")
    old = path.read_bytes()  # at version 37
    store.clear()
    store.rebuild({})
    store.apply([put(100 + i, f"t{i}", "b = 'y'") for i in range(40)])
    path.write_bytes(old)
    index = start_worker(settings, 41)
    assert index.built_from == "subscriptions" and "it is of another state" in caplog.text
    check(index, {f"t{i}": "b = 'y'" for i in range(40)})
    # a snapshot newer than the state
    store.clear()
    store.apply([put(0, "u", "a = 0")])
    index = start_worker(settings, 1)
    assert index.built_from == "change log" and "the state is at 1" in caplog.text
    check(index, {"u": "a = 0"})


def replace_all(store: StateStore, exprs: dict[str, str], version: int, n: int, expr: str
                ) -> int:  # fmt: skip
    """Apply ``n`` changes after ``version`` (each replacing one of ``exprs`` by
    ``expr``, in turn); returns the new version."""
    ids = sorted(exprs)
    store.apply([put(version + i, ids[(version + i) % len(ids)], expr) for i in range(n)])
    exprs.update({ids[(version + i) % len(ids)]: expr for i in range(n)})
    return version + n


def snapshot_version(settings: WorkerSettings) -> int | None:
    written = snapshot_state(settings.snapshot_dir or "", settings.redis_prefix, "psthash")
    return None if written is None else written[0]


def test_a_worker_that_keeps_up_refreshes_the_snapshot_every_half_retention(
    state: tuple[WorkerSettings, StateStore], caplog: pytest.LogCaptureFixture,
) -> None:
    """With a retention of 20 changes, the worker that keeps up writes a new snapshot
    once it is 10 changes past the newest: however many changes go by, a worker that
    starts finds a snapshot the change log still reaches back to, and replays only what
    came after it (without the refresh, the snapshot of version 12 would be out of the
    log's reach by version 33, and the new worker would parse every subscription)."""
    settings, store = state
    exprs = first_load(settings, store)
    version, seen, writing = 12, [], []
    for step in range(8):
        version = replace_all(store, exprs, version, 6, f"a = {step}")
        reported: list[TaskMetrics] = []
        # a task of the cached worker: it catches up, and has no events to match
        assert list(tasks.match_batches(settings, version, iter(()), reported.append)) == []
        index = index_cache.INDEXES[index_cache.cache_key(settings, 0)]
        assert index.built_from == "change log" and index.replayed == version
        seen.append(snapshot_version(settings))
        assert index.snapshot_version == seen[-1]
        (metrics,) = reported
        assert 0.0 <= metrics.snapshot_s <= metrics.sync_s
        writing.append(metrics.snapshot_s > 0)
    assert seen == [12, 24, 24, 36, 36, 48, 48, 60]
    assert writing == [False, True, False, True, False, True, False, True]
    assert caplog.text.count("wrote the index snapshot of shard 0 of 1") == 5  # 12 .. 60
    check(index, exprs)
    version = replace_all(store, exprs, version, 4, "b = 'y'")
    started = start_worker(settings, version)
    assert (started.built_from, started.version, started.replayed) == ("snapshot", 64, 4)
    check(started, exprs)


def test_workers_of_a_shard_write_one_snapshot_between_them(
    state: tuple[WorkerSettings, StateStore], caplog: pytest.LogCaptureFixture,
) -> None:
    """Two workers keep the same shard: the one that catches up second finds the
    snapshot the first just wrote (its header names a version of this state) and writes
    none; a writer's claim stops another from writing at the same time, until it is
    old enough to be a dead writer's."""
    settings, store = state
    exprs = first_load(settings, store)
    key = index_cache.cache_key(settings, 0)
    first = index_cache.INDEXES[key]
    second = start_worker(settings, 12)  # another process: its own index
    assert second.built_from == "snapshot" and second is not first
    version = replace_all(store, exprs, 12, 11, "a = 4")
    assert index_cache.sync_index(settings, version) is second
    assert snapshot_version(settings) == second.snapshot_version == 23
    index_cache.INDEXES[key] = first  # the first process catches up
    assert index_cache.sync_index(settings, version) is first
    assert first.snapshot_version == 23
    assert caplog.text.count("wrote the index snapshot") == 2  # first_load's, second's
    check(first, exprs)

    path = snapshot_path(settings.snapshot_dir or "", settings.redis_prefix, "psthash")
    claim = path.with_name(path.name + ".writing")
    claim.touch()  # a writer at work
    version = replace_all(store, exprs, version, 11, "a = 5")
    assert index_cache.sync_index(settings, version) is first
    assert snapshot_version(settings) == 23 and first.snapshot_version == 23
    assert "another worker is writing the snapshot of shard 0 of 1" in caplog.text
    old = time.time() - CLAIM_STALE_SECONDS - 1
    os.utime(claim, (old, old))  # a writer that died
    version = replace_all(store, exprs, version, 1, "a = 5")
    index_cache.sync_index(settings, version)
    assert snapshot_version(settings) == first.snapshot_version == 35
    assert not claim.exists()
    check(first, exprs)


def test_a_late_task_adopts_a_newer_snapshot_rather_than_write_over_it(
    state: tuple[WorkerSettings, StateStore], caplog: pytest.LogCaptureFixture,
) -> None:
    """A task of an earlier batch, run late, catches its worker up to that batch's
    version: the snapshot another worker wrote at a later version stays."""
    settings, store = state
    exprs = first_load(settings, store)
    key = index_cache.cache_key(settings, 0)
    late = index_cache.INDEXES[key]
    version = replace_all(store, exprs, 12, 11, "a = 4")
    assert start_worker(settings, version).snapshot_version == 23  # another worker's write
    index_cache.INDEXES[key] = late
    assert index_cache.sync_index(settings, 22) is late  # the late task's batch
    assert snapshot_version(settings) == late.snapshot_version == 23
    assert caplog.text.count("wrote the index snapshot") == 2  # first_load's, the other's


def test_a_directory_that_cannot_take_the_snapshot_costs_one_attempt_per_half_retention(
    state: tuple[WorkerSettings, StateStore], caplog: pytest.LogCaptureFixture, tmp_path: Path,
) -> None:
    """Writing fails (the directory's parent is a file): the worker goes on matching,
    and tries again only once the state has moved half the retention (10) on."""
    settings, store = state
    (tmp_path / "a-file").write_text("")
    settings = dataclasses.replace(settings, snapshot_dir=str(tmp_path / "a-file" / "snaps"))
    exprs = {f"s{i}": f"a >= {i % 5}" for i in range(12)}
    store.apply([put(i, sid, e) for i, (sid, e) in enumerate(exprs.items())])
    start_worker(settings, 12)
    version = 12
    for step in range(8):  # the same steps as a worker that writes: 24, 36, 48, 60 due
        version = replace_all(store, exprs, version, 6, f"a = {step}")
        index = index_cache.sync_index(settings, version)
    assert caplog.text.count("could not write the index snapshot") == 5  # 12 .. 60
    check(index, exprs)


def test_snapshots_live_beside_a_local_checkpoint_only() -> None:
    assert snapshot_dir("/data/psmatch/checkpoint") == "/data/psmatch/checkpoint.snapshots"
    assert snapshot_dir("file:///data/ck/") == "/data/ck.snapshots"
    assert snapshot_dir("hdfs://nn/psmatch/checkpoint") is None


def test_a_snapshot_is_saved_and_loaded_without_a_second_copy_in_memory(tmp_path: Path) -> None:
    """Counted with tracemalloc (numpy reports its buffers to it): loading holds the
    loaded index, not also the file's bytes, and saving does not hold the pickle."""
    matcher = make_matcher("psthash")
    matcher.add_many((f"s{i}", f"a = {i} and b < {i % 50} and c = 'x{i % 97}'")
                     for i in range(30_000))  # fmt: skip
    heads = NotificationHeads()
    # as a worker's load writes them, in bulk: not the snapshot's cost
    heads.put_many(matcher.internal.slots_of([f"s{i}" for i in range(30_000)]),
                   [f",h{i % 3}," for i in range(30_000)])  # fmt: skip
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        path = save_snapshot(tmp_path, "p:", 7, matcher, heads, "digest")
        assert path is not None
        _, save_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        snap = load_snapshot(tmp_path, "p:", "psthash")
        held, load_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    size = path.stat().st_size
    assert size > 6_000_000
    # beyond what they keep: a copy of the file (the pickle, the bytes read) is > 1x
    assert save_peak - before < 0.5 * size
    assert load_peak - held < 0.5 * size
    assert snap.version == 7 and len(snap.matcher) == 30_000
    snap.heads.check()
    assert [snap.heads.get(slot) for slot in range(30_000)] == [
        heads.get(slot) for slot in range(30_000)]
    assert snap.matcher.match({"a": 5, "b": 0, "c": "x5"}) == {"s5"}


def test_a_long_prefix_is_named_by_its_digest(tmp_path: Path) -> None:
    """The header's length is bounded whatever the Redis key prefix: it names the prefix
    by its SHA-256, and a snapshot of another prefix is still refused."""
    matcher = make_matcher("psthash")
    matcher.add("s1", "a = 1")
    prefix = "p" * 10_000 + ":"
    save_snapshot(tmp_path, prefix, 3, matcher, NotificationHeads(), "digest")
    snap = load_snapshot(tmp_path, prefix, "psthash")
    assert snap.version == 3 and snap.matcher.match({"a": 1}) == {"s1"}
    shutil.copy(snapshot_path(tmp_path, prefix, "psthash"),
                snapshot_path(tmp_path, "q:", "psthash"))
    with pytest.raises(SnapshotError, match="for another Redis prefix, not of 'psthash' for 'q:'"):
        load_snapshot(tmp_path, "q:", "psthash")
