"""The per-record barriers of the driver and the workers, and what they must not catch:
a record's fault becomes a reject, an infrastructure fault (Redis unreachable) fails the
task or batch, to be retried. Plus the per-batch reject summary of the log."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from connectors.local import free_port
from connectors.state import StateError
from streaming import job
from streaming.config import ServiceConfig
from streaming.job import BatchProcessor, BatchReport
from streaming.records import RecordError, parse_rejected
from streaming.worker import SAMPLE_CHARS, TaskMetrics, WorkerSettings, match_batches


def rows(*records: tuple[bytes | None, bytes | None]) -> list[dict[str, Any]]:
    return [{"key": k, "value": v, "topic": "subs", "partition": 0, "offset": i}
            for i, (k, v) in enumerate(records)]  # fmt: skip


def test_whatever_one_subscription_record_raises_makes_it_a_reject_and_the_rest_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = job.parse_subscription_record

    def flaky(key: bytes | None, value: bytes | None, limits: Any) -> Any:
        if key == b"bug":  # a decoder bug, not a RecordError
            raise KeyError("expr")
        return real(key, value, limits)

    monkeypatch.setattr(job, "parse_subscription_record", flaky)
    processor = BatchProcessor(ServiceConfig(redis_url=f"redis://127.0.0.1:{free_port()}/0"), None)
    changes, rejects, codes, samples = processor._validate(rows(
        (b"s1", b'{"expr": "a = 1"}'), (b"bug", b'{"expr": "a = 2"}'),
        (b"s2", b'{"expr": "a <"}'), (b"s3", None),
    ))  # fmt: skip
    assert [(c.sub_id, c.offset, c.record is None) for c in changes] == [("s1", 0, False),
                                                                         ("s3", 3, True)]
    assert [k for _, k, _ in rejects] == [b"bug", b"s2"]
    bug = parse_rejected(rejects[0][2])
    assert bug.code == "internal_error" and bug.reason == "KeyError: 'expr'" and bug.offset == 1
    assert dict(codes) == {"internal_error": 1, "invalid_expression": 1}
    assert samples[0] == "subs/0/1 internal_error: KeyError: 'expr'"


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
