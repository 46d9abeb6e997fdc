"""A micro-batch's subscription records: validated on the executors, applied by the driver.

Owns the step between the subscriptions topic and :meth:`connectors.state.StateStore.apply`.
Validating a record (JSON decode, expression parse, canonical re-encoding: tens of
microseconds) is the costliest part of subscribing, so it runs where the records are, in
the executors' Python workers (:func:`validate_batches`, the ``mapInArrow`` function),
in parallel over the topic's partitions; the driver receives only the outcome, one row per
record (:data:`VALIDATED_SCHEMA`), and puts it back in offset order
(:func:`assemble`). Each record is validated inside the per-record barrier: whatever it
raises makes it a rejected record (its rejected-topic value is built on the executor),
and the others go on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from connectors.state import SourceChange
from streaming.records import (
    RecordError,
    RecordLimits,
    parse_subscription_record,
    record_error,
    rejected_key,
    rejected_value,
)
from streaming.worker import MAX_SAMPLES, reject_sample

VALIDATED_SCHEMA = pa.schema([
    ("partition", pa.int32()), ("offset", pa.int64()),
    ("sub_id", pa.string()), ("stored", pa.string()), ("normal_form", pa.string()),
    ("code", pa.string()), ("rejected_key", pa.binary()), ("rejected_value", pa.binary()),
    ("sample", pa.string()),
])  # fmt: skip
"""One row per record: a put (``sub_id``, ``stored`` and ``normal_form``, see
:class:`streaming.records.SubscriptionChange`), a delete (``sub_id`` alone) or a reject
(``code``, the rejected record's key and value, and a sample for the log)."""
VALIDATED_DDL = ("partition INT, offset BIGINT, sub_id STRING, stored STRING, "
                 "normal_form STRING, code STRING, rejected_key BINARY, rejected_value BINARY, "
                 "sample STRING")  # fmt: skip


def validate_records(
    records: Iterable[tuple[bytes | None, bytes | None, str, int, int]], limits: RecordLimits
) -> dict[str, list[object]]:
    """The :data:`VALIDATED_SCHEMA` columns of records ``(key, value, topic, partition,
    offset)``, each validated inside the per-record barrier. Pure: no I/O.

    Cost: one :func:`streaming.records.parse_subscription_record` per record.
    """
    columns: dict[str, list[object]] = {name: [] for name in VALIDATED_SCHEMA.names}
    for key, value, topic, partition, offset in records:
        sub_id = stored = normal_form = code = reject_key = reject_value = sample = None
        try:  # the per-record barrier
            change = parse_subscription_record(key, value, limits)
            sub_id, stored, normal_form = change.sub_id, change.stored, change.normal_form
        except Exception as exc:
            error: RecordError = record_error(exc)
            code = error.code
            reject_key = rejected_key(key)
            reject_value = rejected_value(error, topic, partition, offset, key, value)
            sample = reject_sample(error, topic, partition, offset)
        for name, item in (("partition", partition), ("offset", offset), ("sub_id", sub_id),
                           ("stored", stored), ("normal_form", normal_form), ("code", code),
                           ("rejected_key", reject_key), ("rejected_value", reject_value),
                           ("sample", sample)):  # fmt: skip
            columns[name].append(item)
    return columns


def validate_batches(limits: RecordLimits, batches: Iterator[pa.RecordBatch]
                     ) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """The ``mapInArrow`` function: batches of ``key, value, topic, partition, offset``
    in, their :data:`VALIDATED_SCHEMA` rows out."""
    for batch in batches:
        cols = batch.to_pydict()
        records = zip(cols["key"], cols["value"], cols["topic"], cols["partition"],
                      cols["offset"], strict=True)  # fmt: skip
        yield pa.RecordBatch.from_pydict(validate_records(records, limits),
                                         schema=VALIDATED_SCHEMA)  # fmt: skip


@dataclass
class ValidatedSubscriptions:
    """A batch's subscription records, validated, in offset order per partition."""

    records: int = 0
    changes: list[SourceChange] = field(default_factory=list)
    rejects: list[tuple[bytes | None, bytes]] = field(default_factory=list)
    """(key, value) of each record for the rejected topic."""
    codes: Counter[str] = field(default_factory=Counter)
    samples: list[str] = field(default_factory=list)
    """At most :data:`streaming.worker.MAX_SAMPLES` rejects, for the log."""


def assemble(validated: pa.Table, topic: str) -> ValidatedSubscriptions:
    """The changes to apply (``topic``'s records, in partition and offset order) and the
    rejects to write, from the collected :data:`VALIDATED_SCHEMA` rows."""
    cols = validated.sort_by([("partition", "ascending"), ("offset", "ascending")]).to_pydict()
    out = ValidatedSubscriptions(records=validated.num_rows)
    for partition, offset, sub_id, stored, normal_form, code, key, value, sample in zip(
        cols["partition"], cols["offset"], cols["sub_id"], cols["stored"], cols["normal_form"],
        cols["code"], cols["rejected_key"], cols["rejected_value"], cols["sample"], strict=True,
    ):  # fmt: skip
        if code is None:
            out.changes.append(
                SourceChange(f"{topic}:{partition}", offset, sub_id, stored, normal_form))
            continue
        out.rejects.append((key, value))
        out.codes[code] += 1
        if len(out.samples) < MAX_SAMPLES:
            out.samples.append(sample)
    return out
