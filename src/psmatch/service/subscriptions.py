"""A micro-batch's subscription records: validated and applied to Redis on the executors.

Owns the step between the subscriptions topic and the subscription state
(:meth:`psmatch.adapters.state.StateStore.apply`). Validating a record (JSON decode,
expression parse, canonical re-encoding: tens of microseconds) is the costliest part of
subscribing, and applying it to Redis the next; both run where the records are, in the
executors' Python workers (:func:`apply_batches`, the ``mapInArrow`` function), in
parallel over the topic's partitions. The driver receives only the outcome: the counts
and the rejects (:data:`APPLIED_SCHEMA`), which :func:`gather` sums up: the driver never
puts the validated records back in order and applies them itself, one process after the
executors are done.

Each record is validated inside the per-record barrier: whatever it raises makes it a
rejected record (its rejected-topic value is built on the executor), and the others go
on. A Redis fault is never a record's: it fails the task, and so the batch.

Order: each partition of the topic is one partition of the batch (the job sets neither
``minPartitions`` nor ``maxRecordsPerPartition`` on its Kafka source), so one task
applies a partition's records of the batch, in offset order, and the state's offset
check (:mod:`psmatch.adapters.state`) makes a task run again skip what it applied. Tasks of
different partitions apply at the same time: each chunk is atomic and takes the next
versions, so the log interleaves partitions, which are not ordered among themselves.
All pass the batch's first version as the log's trim floor, so that the log keeps every
change of the batch for the workers' catch-up.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from psmatch.adapters.arrow import record_batch
from psmatch.adapters.state import SourceChange, StateStore
from psmatch.service.connections import state_store
from psmatch.service.records.common import RecordError, RecordLimits, record_error
from psmatch.service.records.rejected import rejected_key, rejected_value
from psmatch.service.records.subscriptions import parse_subscription_record
from psmatch.service.records.tenants import tenant_of_topic, tenant_topic
from psmatch.service.task_contract import MAX_SAMPLES, WorkerSettings, reject_sample

APPLIED_SCHEMA = pa.schema([
    ("records", pa.int64()), ("applied", pa.int64()), ("validate_s", pa.float64()),
    ("apply_s", pa.float64()), ("code", pa.string()), ("rejected_key", pa.binary()),
    ("rejected_value", pa.binary()), ("rejected_topic", pa.string()), ("sample", pa.string()),
])  # fmt: skip
"""One row per input batch of a task, its counts (``records`` read, changes ``applied``)
and seconds (validating, applying; ``code`` null), and one per reject (``code``, the
rejected record's key, value and topic, and a sample for the log; counts and seconds
zero)."""
APPLIED_DDL = ("records BIGINT, applied BIGINT, validate_s DOUBLE, apply_s DOUBLE, "
               "code STRING, rejected_key BINARY, rejected_value BINARY, "
               "rejected_topic STRING, sample STRING")


@dataclass(frozen=True, slots=True)
class Tenancy:
    """Where tenants' records come in and their rejects go, with ``tenancy = "topics"``:
    the base names of their topics (:mod:`psmatch.service.records.tenants`)."""

    subscriptions_topic: str
    rejected_topic: str

    @staticmethod
    def of(settings: WorkerSettings) -> Tenancy | None:
        """The tenancy of a job's ``settings``; ``None`` with one tenant."""
        if settings.tenancy != "topics":
            return None
        return Tenancy(settings.subscriptions_topic, settings.rejected_topic)


@dataclass
class ValidatedSubscriptions:
    """Subscription records validated: the changes to apply, in the records' order, and
    the rejects; once applied (:func:`apply_records`, summed by :func:`gather`), how
    many changes the state took and the seconds each step spent."""

    records: int = 0
    applied: int = 0
    validate_s: float = 0.0
    """Seconds spent validating (summed over the tasks)."""
    apply_s: float = 0.0
    """Seconds spent applying to Redis (summed over the tasks)."""
    changes: list[SourceChange] = field(default_factory=list)
    rejects: list[tuple[str, bytes | None, bytes, str | None]] = field(default_factory=list)
    """(code, key, value, topic) of each reject, the key and value for the rejected
    topic: the tenant's (``topic``), or with one tenant (``None``) the job's."""
    samples: list[str] = field(default_factory=list)
    """At most :data:`psmatch.service.task_contract.MAX_SAMPLES` rejects, for the log."""

    def rejects_by_topic(self, rejected_topic: str
                         ) -> dict[str, list[tuple[bytes | None, bytes]]]:  # fmt: skip
        """The rejects' (key, value) by the topic they go to, ``rejected_topic`` for those
        of no tenant."""
        by_topic: dict[str, list[tuple[bytes | None, bytes]]] = {}
        for _, key, value, topic in self.rejects:
            by_topic.setdefault(topic or rejected_topic, []).append((key, value))
        return by_topic

    @property
    def codes(self) -> Counter[str]:
        """Rejects by code."""
        return Counter(code for code, *_ in self.rejects)


def validate_records(
    records: Iterable[tuple[bytes | None, bytes | None, str, int, int]], limits: RecordLimits,
    tenants: Tenancy | None = None,
) -> ValidatedSubscriptions:
    """Records ``(key, value, topic, partition, offset)`` validated, each inside the
    per-record barrier. Pure: no I/O.

    With ``tenants``, each record is its topic's tenant's
    (:func:`psmatch.service.records.tenants.tenant_of_topic`) and a reject goes to that
    tenant's rejected topic.

    Cost: one :func:`psmatch.service.records.subscriptions.parse_subscription_record` per record.
    """
    out = ValidatedSubscriptions()
    for key, value, topic, partition, offset in records:
        out.records += 1
        rejected_to = None
        try:  # the per-record barrier
            tenant = None
            if tenants is not None:
                tenant = tenant_of_topic(topic, tenants.subscriptions_topic)
                if tenant is None:
                    raise RecordError("invalid_record", f"{topic} is no tenant's topic")
                rejected_to = tenant_topic(tenants.rejected_topic, tenant)
            change = parse_subscription_record(key, value, limits, tenant)
        except Exception as exc:
            error: RecordError = record_error(exc)
            out.rejects.append((error.code, rejected_key(key),
                                rejected_value(error, topic, partition, offset, key, value),
                                rejected_to))  # fmt: skip
            if len(out.samples) < MAX_SAMPLES:
                out.samples.append(reject_sample(error, topic, partition, offset))
            continue
        out.changes.append(SourceChange(f"{topic}:{partition}", offset, change.sub_id,
                                        change.stored, change.normal_form))  # fmt: skip
    return out


def apply_records(store: StateStore, floor: int,
                  records: Iterable[tuple[bytes | None, bytes | None, str, int, int]],
                  limits: RecordLimits, tenants: Tenancy | None = None
                  ) -> ValidatedSubscriptions:  # fmt: skip
    """Validate records (:func:`validate_records`) and apply the valid ones to ``store``,
    in order, keeping the log after version ``floor``; ``applied`` counts the changes
    the state took (a record applied before, by a run of the batch that failed, is
    skipped)."""
    t0 = time.perf_counter()
    out = validate_records(records, limits, tenants)
    t1 = time.perf_counter()
    out.applied = store.apply(out.changes, floor).applied
    out.validate_s, out.apply_s = t1 - t0, time.perf_counter() - t1
    return out


def apply_batches(limits: RecordLimits, settings: WorkerSettings, floor: int,
                  batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """The ``mapInArrow`` function: batches of ``key, value, topic, partition, offset``
    in, validated and applied to the state of ``settings`` (this process's store), their
    :data:`APPLIED_SCHEMA` rows out."""
    store = state_store(settings)
    tenants = Tenancy.of(settings)
    for batch in batches:
        cols = batch.to_pydict()
        out = apply_records(store, floor, zip(
            cols["key"], cols["value"], cols["topic"], cols["partition"], cols["offset"],
            strict=True), limits, tenants)  # fmt: skip
        rejects = len(out.rejects)
        yield record_batch({
            "records": [out.records] + [0] * rejects,
            "applied": [out.applied] + [0] * rejects,
            "validate_s": [out.validate_s] + [0.0] * rejects,
            "apply_s": [out.apply_s] + [0.0] * rejects,
            "code": [None] + [code for code, *_ in out.rejects],
            "rejected_key": [None] + [key for _, key, *_ in out.rejects],
            "rejected_value": [None] + [value for _, _, value, _ in out.rejects],
            "rejected_topic": [None] + [topic for *_, topic in out.rejects],
            "sample": [None] + out.samples + [None] * (rejects - len(out.samples)),
        }, APPLIED_SCHEMA)  # fmt: skip


def gather(applied: pa.Table) -> ValidatedSubscriptions:
    """The batch's outcome from the collected :data:`APPLIED_SCHEMA` rows of its tasks:
    the counts and seconds summed, the rejects to write (no changes: they are applied)."""
    cols = applied.to_pydict()
    out = ValidatedSubscriptions(records=sum(cols["records"]), applied=sum(cols["applied"]),
                                 validate_s=sum(cols["validate_s"]),
                                 apply_s=sum(cols["apply_s"]))  # fmt: skip
    for code, key, value, topic, sample in zip(
            cols["code"], cols["rejected_key"], cols["rejected_value"], cols["rejected_topic"],
            cols["sample"], strict=True):  # fmt: skip
        if code is None:
            continue
        out.rejects.append((code, key, value, topic))
        if sample is not None and len(out.samples) < MAX_SAMPLES:
            out.samples.append(sample)
    return out
