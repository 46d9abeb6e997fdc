"""The subscription records of a batch, validated and applied to a real Redis on the
executors, the outcome gathered on the driver: whatever one record raises makes it a
reject (with its rejected-topic value and a log sample) and the others go on, in offset
order per partition; partitions applied at the same time interleave in the log, and a
task run again applies nothing twice."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from psmatch.devservers.services import LocalServices
from psmatch.language import parse_subscription
from psmatch.service import subscriptions
from psmatch.service.records.common import DEFAULT_LIMITS
from psmatch.service.records.normal_forms import dump_normal_form
from psmatch.service.records.rejected import parse_rejected
from psmatch.service.records.subscriptions import dumps_record
from psmatch.service.subscriptions import APPLIED_SCHEMA, apply_batches, gather, validate_records
from tests.service.worker_state import worker_state


def records_batch(*records: tuple[int, int, bytes | None, bytes | None]) -> pa.RecordBatch:
    """A batch as Spark's Kafka source hands it: (partition, offset, key, value) rows."""
    return pa.RecordBatch.from_pydict({
        "key": [k for _, _, k, _ in records], "value": [v for _, _, _, v in records],
        "topic": ["subs"] * len(records), "partition": [p for p, _, _, _ in records],
        "offset": [o for _, o, _, _ in records],
    })  # fmt: skip


def test_whatever_one_subscription_record_raises_makes_it_a_reject_and_the_rest_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = subscriptions.parse_subscription_record

    def flaky(key: bytes | None, value: bytes | None, limits: Any, tenant: Any) -> Any:
        if key == b"bug":  # a decoder bug, not a RecordError
            raise KeyError("expr")
        return real(key, value, limits, tenant)

    monkeypatch.setattr(subscriptions, "parse_subscription_record", flaky)
    validated = validate_records([
        (b"s1", b'{"expr": "a = 1"}', "subs", 0, 0), (b"bug", b'{"expr": "a = 2"}', "subs", 0, 1),
        (b"s2", b'{"expr": "a <"}', "subs", 0, 2), (b"s3", None, "subs", 0, 3),
    ], DEFAULT_LIMITS)  # fmt: skip
    assert validated.records == 4
    assert [(c.source, c.offset, c.sub_id, c.record is None) for c in validated.changes] == [
        ("subs:0", 0, "s1", False), ("subs:0", 3, "s3", True)]
    assert validated.changes[0].record == dumps_record("a = 1", "s1", {})
    assert validated.changes[0].normal_form == dump_normal_form(parse_subscription("a = 1"))
    assert validated.changes[1].normal_form is None  # the delete
    assert [(code, key, topic) for code, key, _, topic in validated.rejects] == [
        ("internal_error", b"bug", None), ("invalid_expression", b"s2", None)]
    bug = parse_rejected(validated.rejects[0][2])
    assert bug.code == "internal_error" and bug.reason == "KeyError: 'expr'" and bug.offset == 1
    assert dict(validated.codes) == {"internal_error": 1, "invalid_expression": 1}
    assert validated.samples[0] == "subs/0/1 internal_error: KeyError: 'expr'"


def test_tasks_apply_their_partitions_to_redis_and_the_driver_gathers_counts_and_rejects(
    services: LocalServices, tmp_path: Path,
) -> None:
    with worker_state(services.redis.url, tmp_path, "subs", retention=2) as (settings, store):
        floor = store.version()

        def task(*batches: pa.RecordBatch) -> list[pa.RecordBatch]:
            return list(apply_batches(DEFAULT_LIMITS, settings, floor, iter(batches)))

        partition_1 = [(1, k, f"t{k}".encode(), b'{"expr": "b = %d"}' % k) for k in range(50)]
        outputs: list[list[pa.RecordBatch]] = [[], []]
        # the two partitions' tasks at the same time, as two executor cores run them
        partition_0 = [records_batch((0, 0, b"s1", b'{"expr": "a = 1"}'),
                                     (0, 1, b"s2", b'{"expr": "a <"}')),
                       records_batch((0, 2, b"s1", None), (0, 3, b"s4", b'{"expr": "a = 4"}'))]
        threads = [
            threading.Thread(target=lambda: outputs[0].extend(task(*partition_0))),
            threading.Thread(target=lambda: outputs[1].extend(task(
                *(records_batch(*partition_1[k:k + 10]) for k in range(0, 50, 10))))),
        ]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert all(b.schema == APPLIED_SCHEMA for out in outputs for b in out)
        outcome = gather(pa.Table.from_batches([*outputs[0], *outputs[1]]))
        assert (outcome.records, outcome.applied) == (54, 53)
        assert outcome.validate_s > 0 and outcome.apply_s > 0  # the tasks' own seconds, summed
        assert [(code, key) for code, key, *_ in outcome.rejects] == [("invalid_expression", b"s2")]
        assert len(outcome.samples) == 1
        assert outcome.samples[0].startswith("subs/0/1 invalid_expression: ")
        assert store.version() == floor + 53
        assert store.snapshot()[1] == {
            "s4": dumps_record("a = 4", "s4", {}),
            **{f"t{k}": dumps_record(f"b = {k}", f"t{k}", {}) for k in range(50)}}
        # the log keeps the whole batch, past the retention of 2, each partition in order
        log = store.changes(floor, floor + 53)
        assert [c.sub_id for c in log if not c.sub_id.startswith("t")] == ["s1", "s1", "s4"]
        assert [c.sub_id for c in log if c.sub_id.startswith("t")] == [f"t{k}" for k in range(50)]
        # a task run again (a retry, or the batch replayed) changes nothing
        again = gather(pa.Table.from_batches(task(*(records_batch(*partition_1[k:k + 10])
                                                    for k in range(0, 50, 10)))))  # fmt: skip
        assert (again.records, again.applied, store.version()) == (50, 0, floor + 53)


def test_an_empty_batch_gives_nothing_to_apply() -> None:
    outcome = gather(APPLIED_SCHEMA.empty_table())
    assert (outcome.records, outcome.applied, outcome.rejects) == (0, 0, [])
