"""Fault injection (issue 8): nothing a producer sends and no outage stops the service.

One ``psmatch run`` job (a subprocess) on a Kafka broker and a redis-server of this module
(not the session-shared ones: they are killed and stopped here), while a producer thread
publishes good events at a steady rate whose notifications are known (``scan`` on the
same subscriptions). The tests run in file order, one fault each, on the same job:

1. every poison record of issue 8 and the other malformed kinds, through confluent-kafka,
   kafka-python and kcat (when installed);
2. ``kill -9`` of redis-server, started again 5 s later on the same port and AOF;
3. the broker stopped for 30 s, started again on the same port and data directory;
4. ``kill -9`` of the job, started again from its checkpoint.

After each: the job still runs (its query restarted automatically at most), every
expected notification arrived, none that was not expected, and each bad record was
rejected exactly once with its code. Duplicates only where the docs allow them: after
the job's ``kill -9`` or an automatic restart of its query (a replay of the batch that
was not committed; docs/streaming.md, docs/operations.md), never for a bad record or
while Redis is waited out.
``bench/bench_faults.py`` runs the same phases longer and writes docs/faults.md.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Iterator

import pytest

from psmatch.adapters.state import StateStore
from tests.service.faults import TABLE_HEADER, FaultRun, PhaseResult

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultRun]:
    with FaultRun(tmp_path_factory.mktemp("faults"), rate=10.0) as fault_run:
        yield fault_run
        print("\n" + TABLE_HEADER)
        for result in fault_run.results:
            print(result.row())


def check_phase(run: FaultRun, result: PhaseResult, duplicates_allowed: bool = False) -> None:
    """The job runs, every expected notification arrived once (or more, when allowed),
    nothing unexpected did."""
    assert run.job is not None
    assert result.job_alive, (
        f"psmatch run exited with code {run.job.returncode}; log:\n{run.job.tail()}"
    )
    assert result.received == result.expected, (
        f"{result.name}: {result.received}/{result.expected} notifications arrived, "
        f"missing e.g. {result.missing_sample}; job log:\n{run.job.tail()}"
    )
    assert result.unexpected == 0, f"{result.name}: {result.unexpected} unexpected notifications"
    if not duplicates_allowed:
        assert result.duplicates == 0, f"{result.name}: {result.duplicates} duplicates"
    assert result.first_notification_s is not None


def test_poison_records_are_each_rejected_once_and_the_query_goes_on(run: FaultRun) -> None:
    result = run.poison()
    assert not result.reject_problems, result.reject_problems
    check_phase(run, result)
    assert result.query_restarts == 0, "a bad record is not a reason to restart the query"


def test_rebuild_state_skips_the_poison_subscriptions(run: FaultRun) -> None:
    """``psmatch rebuild-state`` over the topic holding every poison subscription record
    (into another Redis prefix, so the running job is not disturbed): each bad record
    skipped and counted by code, every good subscription rebuilt."""
    assert run.config is not None and run.job is not None
    bad = [r for r in run.bad_sent if r.role == "subscriptions"]
    assert bad, "needs the poison records of the test above"
    prefix = f"rebuilt{run.tag}:"
    done = subprocess.run(
        [sys.executable, "-m", "psmatch", "rebuild-state", "--timeout", "60"],
        env=dict(run.job.env, PSMATCH_REDIS_PREFIX=prefix), capture_output=True, text=True,
        timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    codes = Counter(r.code for r in bad)
    by_code = ", ".join(f"{code} {n}" for code, n in sorted(codes.items()))
    summary = f"{len(run.subscriptions)} subscriptions, {len(bad)} invalid records skipped"
    assert f"{summary} ({by_code})" in done.stdout, done.stdout
    assert StateStore.from_url(run.config.redis_url, prefix).count() == len(run.subscriptions)


def test_redis_kill_9_is_waited_out(run: FaultRun) -> None:
    result = run.redis_kill(down_s=5.0)
    check_phase(run, result)
    assert result.query_restarts == 0, "the batch waits for Redis (docs/operations.md)"


def test_broker_stopped_for_30_s(run: FaultRun) -> None:
    result = run.broker_outage(down_s=30.0)
    check_phase(run, result, duplicates_allowed=result.query_restarts > 0)


def test_job_kill_9_resumes_from_its_checkpoint(run: FaultRun) -> None:
    check_phase(run, run.job_kill(), duplicates_allowed=True)


def test_nothing_lost_nothing_wrong_over_the_whole_run(run: FaultRun) -> None:
    """The events outside the phases (from the job's start), no duplicate arrived outside
    the phases that allow them, every reject still exactly once after all faults and
    replays, every good event delivered to Kafka, every rejected record small enough for
    the sink."""
    assert run.outputs is not None
    outside = run.finish()
    check_phase(run, outside, duplicates_allowed=outside.query_restarts > 0)
    assert not run.outputs.malformed
    problems = {f"{r.client}: {r.kind}": p for r in run.bad_sent if (p := run.reject_problems(r))}
    assert not problems, problems
    assert max(run.outputs.reject_sizes, default=0) < 1_000_000
