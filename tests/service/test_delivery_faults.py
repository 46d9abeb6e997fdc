"""Exactly-once delivery through faults: one ``psmatch run --delivery exactly-once`` job of
the fault harness (:mod:`tests.service.faults`: its own broker and redis-server, good
events published at a steady rate, ``scan`` predicting their notifications), then, in
file order on the same job:

1. ``kill -9`` of the job in the middle of the stream, started again from its checkpoint;
2. ``kill -9`` of the Python workers while a task's transaction holds written but not
   committed notifications (a burst of events makes the write last), the query restarted
   by ``psmatch run`` itself;
3. the broker stopped for 15 s while a transaction is open (its commit about to be sent
   or in flight), started again on the same port and data directory.

A ``read_committed`` reader of the whole notifications topic then counts each
(subscription, event) pair of ``scan``'s once: none missing, none twice.
(``tests/service/test_faults.py`` keeps the at-least-once job's faults.)
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from psmatch import make_matcher
from psmatch.adapters.kafka.reader import TopicReader
from tests.service import faults
from tests.service.faults import FaultRun, JobProcess, random_event

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


class ExactlyOnceJob(JobProcess):
    """``psmatch run`` of the fault harness, in exactly-once delivery."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        super().__init__({**env, "PSMATCH_DELIVERY": "exactly-once"}, log_path)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultRun]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(faults, "JobProcess", ExactlyOnceJob)
        with FaultRun(tmp_path_factory.mktemp("delivery-faults"), rate=20.0) as fault_run:
            yield fault_run


def read_committed_pairs(run: FaultRun) -> Counter[tuple[str, str]]:
    """Every (subscription id, event id) a read_committed reader of the whole
    notifications topic reads, counted."""
    assert run.config is not None
    cfg = run.config
    with TopicReader(cfg.bootstrap_servers, cfg.notifications_topic) as reader:
        values = [json.loads(r.value or b"") for r in reader.read_to_end()]
    return Counter((v["subscription_id"], v["event_id"]) for v in values)


def python_workers(job: JobProcess) -> list[psutil.Process]:
    """The job's Python workers: the processes ``pyspark.daemon`` forked (not the daemon)."""
    assert job.proc is not None
    found = []
    for p in psutil.Process(job.proc.pid).children(recursive=True):
        try:
            parent = p.parent()
            if parent is not None and "pyspark.daemon" in " ".join(parent.cmdline()):
                found.append(p)
        except psutil.NoSuchProcess:
            continue
    return found


def wait_for_open_transaction(run: FaultRun, timeout: float = 120.0, records: int = 1) -> bool:
    """Wait until the notifications topic holds at least ``records`` records of open
    transactions (the partitions' read_uncommitted ends past their read_committed ends
    by that many); ``False`` if none was seen within ``timeout`` seconds."""
    assert run.config is not None
    cfg = run.config
    ends = {level: Consumer({"bootstrap.servers": cfg.bootstrap_servers, "group.id": level,
                             "isolation.level": level})
            for level in ("read_uncommitted", "read_committed")}  # fmt: skip
    partitions = [TopicPartition(cfg.notifications_topic, p) for p in range(cfg.topic_partitions)]
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            highs = {level: [c.get_watermark_offsets(tp, timeout=5, cached=False)[1]
                             for tp in partitions] for level, c in ends.items()}  # fmt: skip
            if sum(highs["read_uncommitted"]) - sum(highs["read_committed"]) >= records:
                return True
            time.sleep(0.02)
        return False
    finally:
        for consumer in ends.values():
            consumer.close()


def test_job_kill_9_mid_stream_duplicates_nothing(run: FaultRun) -> None:
    result = run.job_kill()
    assert result.job_alive, run.job.tail() if run.job else ""
    assert result.received == result.expected, result.missing_sample
    assert result.unexpected == 0
    assert result.duplicates == 0, f"{result.duplicates} duplicates after the job's kill -9"


def test_worker_kill_9_during_a_write_duplicates_nothing(run: FaultRun) -> None:
    """The burst's tasks write for a while (about 110,000 notifications; the steady
    stream's batches write about a hundred); the workers are killed once the topic holds
    thousands of records of open transactions, so the kill lands in the burst's write,
    not between two small tasks: the task fails, the query restarts, the batch runs
    again."""
    assert run.config is not None and run.job is not None
    cfg = run.config
    scan = make_matcher("scan")
    for sub_id, expr in run.subscriptions.items():
        scan.add(sub_id, expr)
    rng = random.Random(491)
    burst = {f"burst-{i:06d}": random_event(rng) for i in range(10_000)}
    restarts = run.query_restarts()
    producer = Producer({"bootstrap.servers": cfg.bootstrap_servers, "linger.ms": 20})
    for ev_id, event in burst.items():
        producer.produce(cfg.events_topic, json.dumps(event).encode(), ev_id.encode())
        producer.poll(0)
    assert producer.flush(60) == 0
    assert wait_for_open_transaction(run, records=5_000), "the burst's write was not seen open"
    killed = 0
    for worker in python_workers(run.job):
        worker.kill()
        killed += 1
    assert killed
    run.wait_for(lambda: run.query_restarts() > restarts, 120, "the query's restart")
    expected = {(s, ev_id) for ev_id, e in burst.items() for s in scan.match(e)}
    run.wait_for(lambda: expected <= read_committed_pairs(run).keys(), 300,
                 "the burst's notifications")  # fmt: skip
    got = read_committed_pairs(run)
    burst_got = Counter({pair: n for pair, n in got.items() if pair[1] in burst})
    assert set(burst_got) == expected
    assert max(burst_got.values()) == 1, f"{sum(burst_got.values()) - len(expected)} duplicates"


def test_broker_stopped_during_a_commit_duplicates_nothing(run: FaultRun) -> None:
    """The broker stopped (for 15 s) while a task's transaction is open, its commit
    about to be sent or in flight; started again on the same port and data: the
    transaction fails or completes, never both, and the stream goes on."""
    assert run.events is not None
    assert wait_for_open_transaction(run), "no transaction seen open"
    run.kafka.stop()
    time.sleep(15)
    run.kafka.start()
    sent = list(run.events.sent)
    expected = {(s, e.event_id) for e in sent for s in e.matches}
    run.wait_for(lambda: expected <= read_committed_pairs(run).keys(), 300,
                 "the notifications of the events published until the broker came back")
    got = read_committed_pairs(run)
    assert max(got.values()) == 1, f"{sum(got.values()) - len(got)} duplicates"


def test_read_committed_counts_each_notification_once_over_the_whole_run(
    run: FaultRun,
) -> None:
    """Every good event published since the job started, through both faults: each
    expected (subscription, event) pair read exactly once, nothing else."""
    assert run.events is not None
    undelivered = run.events.stop()
    assert undelivered == 0 and not run.events.errors
    expected = {(s, e.event_id) for e in run.events.sent for s in e.matches}
    ids = {e.event_id for e in run.events.sent}
    run.wait_for(lambda: expected <= read_committed_pairs(run).keys(), 180,
                 "every notification of the stream")  # fmt: skip
    got = read_committed_pairs(run)
    stream = Counter({pair: n for pair, n in got.items() if pair[1] in ids})
    missing = expected - stream.keys()
    duplicates = sum(stream.values()) - len(stream)
    assert not missing, f"{len(missing)} missing, e.g. {sorted(missing)[:5]}"
    assert not stream.keys() - expected, "notifications scan does not expect"
    assert duplicates == 0, f"{duplicates} duplicates"
