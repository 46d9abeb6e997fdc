"""The job on a real Spark standalone cluster: a master and workers started from pyspark
(``psmatch.devservers.standalone``), ``psmatch run --spark-master spark://...`` in its own
process. Matching must run in Python workers under the executor process (not the
driver); after the executor is killed with SIGKILL, the master starts a new one, the
query goes on, every expected notification arrives and the metrics count the reload.
With two workers and ``--shards 2``, the notifications are those of one shard, and each
shard's index holds only its half of the subscriptions.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from kafka import KafkaConsumer

from psmatch import make_matcher
from psmatch.adapters.kafka.producer import JsonProducer
from psmatch.devservers.process import free_port
from psmatch.devservers.standalone import StandaloneCluster
from psmatch.service.checkpoint import snapshot_dir
from psmatch.service.config import ServiceConfig
from psmatch.service.job import prepare
from psmatch.service.shards import Shard, shard_of
from psmatch.service.snapshot_decoder import Decoder
from psmatch.service.snapshots import snapshot_path
from tests.deploy.conftest import JobProcess
from tests.service.test_end_to_end import expected_matches, random_events
from tests.service.workload import random_subscriptions

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(tmp_path / "spark", cores=2, memory="2g") as c:
        yield c


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return ""


def executors_under(pid: int) -> list[psutil.Process]:
    return [p for p in descendants(pid) if "CoarseGrainedExecutorBackend" in cmdline(p)]


def executors(cluster: StandaloneCluster) -> list[psutil.Process]:
    return [p for worker in cluster.workers for p in executors_under(worker.pid)]


def python_workers(pid: int) -> list[psutil.Process]:
    return [p for p in descendants(pid) if "pyspark.daemon" in cmdline(p)]


def notifications(config: ServiceConfig) -> list[tuple[str, str]]:
    consumer = KafkaConsumer(
        config.notifications_topic, bootstrap_servers=config.bootstrap_servers,
        auto_offset_reset="earliest", enable_auto_commit=False, group_id=None,
        consumer_timeout_ms=2000,
    )  # fmt: skip
    try:
        return [(m.key.decode(), json.loads(m.value)["event_id"]) for m in consumer]
    finally:
        consumer.close()


def publish(config: ServiceConfig, first: int, count: int) -> set[tuple[str, str]]:
    """Events a = first .. first+count-1; returns the (subscription, event) pairs expected."""
    expected = set()
    with JsonProducer(config.bootstrap_servers) as producer:
        for i in range(first, first + count):
            producer.send(config.events_topic, {"a": i % 20}, key=f"ev-{i}")
            expected.add(("all", f"ev-{i}"))
            if i % 20 < 5:
                expected.add(("small", f"ev-{i}"))
    return expected


def test_the_job_survives_losing_its_executor(
    cluster: StandaloneCluster,
    make_config: Callable[..., ServiceConfig],
    start_job: Callable[[ServiceConfig], JobProcess],
) -> None:
    config = make_config(spark_master=cluster.master_url, trigger_seconds=1.0)
    job = start_job(config)
    with JsonProducer(config.bootstrap_servers) as producer:
        producer.send(config.subscriptions_topic, {"expr": "a >= 0"}, key="all")
        producer.send(config.subscriptions_topic, {"expr": "a < 5"}, key="small")
    expected = publish(config, 0, 100)
    job.wait_until(lambda: job.metric("psmatch_notifications_total") == len(expected), 180,
                   f"{len(expected)} notifications before the kill")  # fmt: skip

    # the application runs on the cluster: one executor under the worker, matching in
    # Python workers under that executor, none under the driver
    status = cluster.status()
    assert [app["name"] for app in status["activeapps"]] == ["psmatch"]
    (executor,) = executors(cluster)
    assert python_workers(executor.pid), "no pyspark.daemon under the executor"
    assert not python_workers(job.proc.pid), "the driver must not run the Python workers"
    reloads = job.metric("psmatch_worker_index_reloads_total")
    assert reloads is not None and reloads >= 1

    os.kill(executor.pid, signal.SIGKILL)
    expected |= publish(config, 100, 100)
    with JsonProducer(config.bootstrap_servers) as producer:  # a change after the kill
        producer.send(config.subscriptions_topic, {"expr": "a = 7"}, key="seven")
    expected_after = len(expected)
    job.wait_until(lambda: len({e for e in executors(cluster) if e.pid != executor.pid}) == 1,
                   120, "a new executor")  # fmt: skip
    expected |= publish(config, 200, 40)
    expected |= {("seven", f"ev-{i}") for i in range(200, 240) if i % 20 == 7}
    job.wait_until(lambda: set(notifications(config)) >= expected, 240,
                   f"all {len(expected)} notifications after the kill")  # fmt: skip

    got = notifications(config)
    # "seven" may also match events published before it when both land in one batch
    # (a batch applies its subscription changes first), as the kill delays batches
    maybe = {("seven", f"ev-{i}") for i in range(100, 200) if i % 20 == 7}
    assert expected <= set(got) <= expected | maybe, "nothing lost, nothing extra"
    assert len(got) >= expected_after
    assert job.proc.poll() is None, "the job is still running"
    new_reloads = job.metric("psmatch_worker_index_reloads_total")
    assert new_reloads is not None and new_reloads > reloads, "the new executor reloaded"
    (app,) = cluster.status()["activeapps"]
    assert app["state"] == "RUNNING"


def read_snapshot(path: Path) -> tuple[dict[str, Any], set[str]]:
    """The header of a snapshot file and the ids its matcher holds, read with the codec:
    not with ``load_snapshot``, which also refuses a snapshot once the source of a stored
    class's module on disk differs from the workers' (the tree may change during a run)."""
    with path.open("rb") as file:
        header = json.loads(file.readline())
        make_matcher(header["matcher"])  # imports the classes the decoder resolves
        decoder = Decoder(file.read(header["description_bytes"]), header["payload_bytes"])
        decoder.read_buffers(file, header["description_bytes"])
        matcher, _ = decoder.build()  # type: ignore[misc]
    return header, set(matcher)


SHARD_LINE = re.compile(r"2 of 2 shards matched \(subscriptions per shard 0: (\d+), 1: (\d+); "
                        r"at most (\d) shard indexes in one worker process\)")  # fmt: skip


def test_two_shards_on_two_workers_notify_what_one_shard_does(
    tmp_path: Path,
    make_config: Callable[..., ServiceConfig],
    start_job: Callable[[ServiceConfig], JobProcess],
) -> None:
    rng = random.Random(31)
    subs = random_subscriptions(rng, 60)
    events = {f"ev-{i}": e for i, e in enumerate(random_events(rng, 200))}
    expected = expected_matches(subs, events)
    halves = [{sid for sid in subs if shard_of(sid, 2) == s} for s in range(2)]
    assert all(halves)
    with StandaloneCluster(tmp_path / "spark", cores=1, memory="1g", worker_count=2) as cluster:
        two = make_config(spark_master=cluster.master_url, trigger_seconds=1.0, shards=2)
        prepare(two)  # the topics
        waves = [list(events.items())[i::3] for i in range(3)]
        with JsonProducer(two.bootstrap_servers) as producer:
            for sub_id, expr in subs.items():
                producer.send(two.subscriptions_topic, {"expr": expr}, key=sub_id)
            producer.flush()
            for ev_id, event in waves[0]:
                producer.send(two.events_topic, event, key=ev_id)
        job = start_job(two)
        published = 0
        for wave in waves:  # several batches, so that shards may move between processes
            if published:
                with JsonProducer(two.bootstrap_servers) as producer:
                    for ev_id, event in wave:
                        producer.send(two.events_topic, event, key=ev_id)
            published += len(wave)
            job.wait_until(lambda n=published: job.metric("psmatch_events_matched_total") == n,
                           300, f"{published} events matched with two shards")  # fmt: skip
        job.wait_until(lambda: set(notifications(two)) >= expected, 60,
                       f"{len(expected)} notifications with two shards")  # fmt: skip
        # one executor under each worker, matching in Python workers under them
        per_worker = [executors_under(w.pid) for w in cluster.workers]
        assert [len(found) for found in per_worker] == [1, 1]
        assert all(python_workers(found[0].pid) for found in per_worker)
        # each shard's index held its half: as reported by the tasks...
        for s in range(2):
            assert job.metric("psmatch_index_subscriptions", shard=str(s)) == len(halves[s])
        lines = SHARD_LINE.findall(job.log_file.read_text())
        assert lines and all((int(a), int(b)) == tuple(map(len, halves)) for a, b, _ in lines)
        held = max(int(k) for _, _, k in lines)
        # ...and as written in the shards' snapshots by the workers that built them
        folder = snapshot_dir(two.checkpoint_location)
        assert folder is not None
        for s in range(2):
            header, ids = read_snapshot(snapshot_path(folder, two.redis_prefix, two.matcher,
                                                      Shard(s, 2)))  # fmt: skip
            assert (header["shard"], header["shards"]) == (s, 2) and ids == halves[s]
        job.stop()

        one = two.replace(shards=1, redis_prefix=two.redis_prefix + "one:",
                          notifications_topic=two.notifications_topic + "-one",
                          checkpoint_location=str(tmp_path / "checkpoint-one"),
                          metrics_port=free_port())  # fmt: skip
        job = start_job(one)
        job.wait_until(lambda: set(notifications(one)) >= expected, 300,
                       f"{len(expected)} notifications with one shard")  # fmt: skip
        job.wait_until(lambda: job.metric("psmatch_events_matched_total") == len(events), 60,
                       "every event matched")  # fmt: skip
        job.stop()
    assert set(notifications(two)) == set(notifications(one)) == expected
    print(f"two shards on two workers: {len(expected)} notifications; shard sizes "
          f"{[len(h) for h in halves]}; at most {held} shard indexes in one Python worker")
