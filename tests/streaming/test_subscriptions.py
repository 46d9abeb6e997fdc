"""The subscription records of a batch, validated on the executors and assembled on the
driver: whatever one record raises makes it a reject (with its rejected-topic value and a
log sample) and the others go on, in offset order per partition."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from index.language import dump_normal_form, parse_subscription
from streaming import subscriptions
from streaming.records import DEFAULT_LIMITS, dumps_record, parse_rejected
from streaming.subscriptions import VALIDATED_SCHEMA, assemble, validate_batches


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

    def flaky(key: bytes | None, value: bytes | None, limits: Any) -> Any:
        if key == b"bug":  # a decoder bug, not a RecordError
            raise KeyError("expr")
        return real(key, value, limits)

    monkeypatch.setattr(subscriptions, "parse_subscription_record", flaky)
    # two partitions, handed over out of order, as two executors' tasks may return them
    out = list(validate_batches(DEFAULT_LIMITS, iter([
        records_batch((1, 0, b"t1", b'{"expr": "b = 1"}')),
        records_batch((0, 0, b"s1", b'{"expr": "a = 1"}'), (0, 1, b"bug", b'{"expr": "a = 2"}'),
                      (0, 2, b"s2", b'{"expr": "a <"}'), (0, 3, b"s3", None)),
    ])))  # fmt: skip
    assert all(batch.schema == VALIDATED_SCHEMA for batch in out)
    validated = assemble(pa.Table.from_batches(out), "subs")
    assert validated.records == 5
    assert [(c.source, c.offset, c.sub_id, c.record is None) for c in validated.changes] == [
        ("subs:0", 0, "s1", False), ("subs:0", 3, "s3", True), ("subs:1", 0, "t1", False)]
    assert validated.changes[0].record == dumps_record("a = 1", "s1", {})
    assert validated.changes[0].normal_form == dump_normal_form(parse_subscription("a = 1"))
    assert validated.changes[1].normal_form is None  # the delete
    assert [k for k, _ in validated.rejects] == [b"bug", b"s2"]
    bug = parse_rejected(validated.rejects[0][1])
    assert bug.code == "internal_error" and bug.reason == "KeyError: 'expr'" and bug.offset == 1
    assert dict(validated.codes) == {"internal_error": 1, "invalid_expression": 1}
    assert validated.samples[0] == "subs/0/1 internal_error: KeyError: 'expr'"


def test_an_empty_batch_gives_nothing_to_apply() -> None:
    validated = assemble(VALIDATED_SCHEMA.empty_table(), "subs")
    assert (validated.records, validated.changes, validated.rejects) == (0, [], [])
