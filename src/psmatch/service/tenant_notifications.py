"""The notification records of a worker's matches with ``tenancy = "topics"``: each to
its subscription's tenant's notifications topic, keyed and written with the tenant's own
id (:mod:`psmatch.service.records.tenants`), so that a tenant reads its notifications
alone and sees no other tenant's name or id.

The matches of a chunk are put in tenant order (stable: each tenant's in the order
matched), so that each tenant's records are one run of one topic for the sink
(:func:`psmatch.adapters.kafka.sink.topic_runs`). Cost O(matches) in numpy and Arrow, a
Python step per tenant of the chunk, none per match.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from psmatch.adapters.arrow import binary_column, repeated_string
from psmatch.service.records.tenants import own_ids, tenant_numbers, tenant_topic
from psmatch.service.task_contract import OUTPUT_SCHEMA
from psmatch.service.worker_index import WorkerIndex


def tenant_notification_records(
    base: str, events: np.ndarray, slots: np.ndarray, index: WorkerIndex, tails: list[bytes],
) -> list[pa.RecordBatch]:
    """:func:`psmatch.service.tasks.notification_records` for scoped ids: the records of
    matches ``(events[i], slots[i])``, each to ``<base>.<tenant>``."""
    ids = index.matcher.internal.ids_utf8(slots)
    numbers, names = tenant_numbers(*ids)
    if len(names) > 1:
        order = np.argsort(numbers, kind="stable")
        events, slots, numbers = events[order], slots[order], numbers[order]
        ids = index.matcher.internal.ids_utf8(slots)
    counts = np.bincount(numbers, minlength=len(names)).tolist()
    topics = pa.concat_arrays([repeated_string(tenant_topic(base, name), n)
                               for name, n in zip(names, counts, strict=True)]
                              or [repeated_string(base, 0)])  # fmt: skip
    own = own_ids(*ids)
    keys = binary_column(*own)
    batches = []
    start = 0
    for values in index.heads.join(slots, own, tails, events):
        n = len(values)
        batches.append(pa.RecordBatch.from_arrays(
            [topics.slice(start, n), keys.slice(start, n), values], schema=OUTPUT_SCHEMA))
        start += n
    return batches
